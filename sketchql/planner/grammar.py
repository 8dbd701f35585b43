"""The sketchql grammar (Lark, LALR(1) with the contextual lexer).

Kept as a Python string so it ships with the package without package-data
configuration.  See :mod:`sketchql.planner.parser` for the translation to the
AST and the error messages.
"""

GRAMMAR = r'''
// sketchql grammar: CQL (STREAM, CIDR 2003) + the promising-tuple clauses
// (Ali, Aref, Eltabakh, Figure 3) + a precision/budget contract.
// Keywords are case-insensitive; identifiers may be "double quoted".
// LALR(1) with Lark's contextual lexer, so a keyword can still be a column
// name where the grammar expects a name (e.g. S1.TimeStamp).

start: statement (";" statement)* ";"?

?statement: create_stream
          | create_table
          | create_summary
          | alter_stream
          | drop_stmt
          | explain_stmt
          | query

explain_stmt: "EXPLAIN"i query

// ---------------------------------------------------------------- DDL
create_stream: "CREATE"i "STREAM"i name "(" coldef ("," coldef)* ")" ts_clause? slack_clause? stream_constraint*
slack_clause: "SLACK"i duration
// k-constraints (STREAM CIDR 2003 section 4.1), declared at stream-registration time or added later:
// CLUSTERED (a) K k: between two tuples with the same a at most k tuples with another a;
// ORDERED (a) K k: a is nondecreasing up to k positions; REFERENTIAL (a) REFERENCES S (b) K k:
// each tuple's parent (the one S tuple with b = a) arrives before it or at most k S tuples after it
alter_stream: "ALTER"i "STREAM"i name "ADD"i stream_constraint
stream_constraint: "CONSTRAINT"i CONSTRAINT_KIND "(" name ")" references? adherence?
references: "REFERENCES"i name "(" name ")"
adherence: "K"i number
CONSTRAINT_KIND.3: /(clustered|ordered|referential)(?![A-Za-z0-9_])/i
ts_clause: TIMESTAMP_KW name
create_table: "CREATE"i ("TABLE"i | "RELATION"i) name "(" coldef ("," coldef)* ")"
coldef: name type_name
type_name: name | TIMESTAMP_KW
TIMESTAMP_KW.3: /timestamp(?![A-Za-z0-9_])/i

drop_stmt: "DROP"i DROP_KIND if_exists? name
DROP_KIND.3: /(stream|table|relation|summary|query)(?![A-Za-z0-9_])/i
if_exists: "IF"i EXISTS_KW

create_summary: "CREATE"i "SUMMARY"i name "ON"i name "(" name ("," name)* ")" "WITH"i "GRANULARITY"i duration "AND"i "COLLAPSE"i "(" number "," number ")"

// ---------------------------------------------------------------- queries
// set operations (SQL precedence: INTERSECT binds tighter than UNION / EXCEPT,
// both left-associative); MINUS is a synonym of EXCEPT.
query: set_expr query_clause*
?set_expr: set_term
         | set_expr UNION_KW ALL_KW? set_term          -> set_union
         | set_expr EXCEPT_KW ALL_KW? set_term         -> set_except
?set_term: set_primary
         | set_term INTERSECT_KW ALL_KW? set_primary   -> set_intersect
?set_primary: select_core
            | "(" set_expr ")"
UNION_KW.3: /union(?![A-Za-z0-9_])/i
EXCEPT_KW.3: /(except|minus)(?![A-Za-z0-9_])/i
INTERSECT_KW.3: /intersect(?![A-Za-z0-9_])/i
ALL_KW.3: /all(?![A-Za-z0-9_])/i

?query_clause: preference | fade | window_clause | error_clause | budget_clause | miss_clause | exact_clause
preference: "WITH"i "PREFERENCE"i PREF_KIND? expr ("," expr)*
PREF_KIND.3: /(desc|asc|weighted)(?![A-Za-z0-9_])/i
fade: "FADE"i "FACTOR"i number
window_clause: "WINDOW"i duration
error_clause: "WITH"i "ERROR"i number ("CONFIDENCE"i number)?
budget_clause: "WITHIN"i NUMBER (UNIT | PROBES_KW) "PER"i "TUPLE"i
PROBES_KW.3: /probes(?![A-Za-z0-9_])/i
miss_clause: "ON"i "MISS"i MISS_ACTION
MISS_ACTION.3: /(return|exact|fail)(?![A-Za-z0-9_])/i
exact_clause: EXACT_KW
EXACT_KW.3: /exact(?![A-Za-z0-9_])/i

select_core: "SELECT"i STREAM_OP? DISTINCT? select_list "FROM"i from_item ("," from_item)* where? group_by? having?
STREAM_OP.3: /(istream|dstream|rstream)(?![A-Za-z0-9_])/i
DISTINCT.3: /distinct(?![A-Za-z0-9_])/i
select_list: star | select_item ("," select_item)*
star: "*"
select_item: expr alias?        -> item_expr
           | name "." "*"       -> item_star
alias: "AS"i? name

from_item: source from_mod*
source: name                          -> source_name
      | "(" set_expr ")"              -> source_subquery
?from_mod: window_spec | sample | alias
sample: "SAMPLE"i "(" number ")"

window_spec: "[" window_body "]"
?window_body: range_window | rows_window | partition_window | now_window | unbounded_window
range_window: "RANGE"i duration PRECEDING? slide? window_where?
            | "RANGE"i "UNBOUNDED"i PRECEDING? window_where?      -> range_unbounded
slide: "SLIDE"i duration
rows_window: "ROWS"i number PRECEDING? window_where?
partition_window: "PARTITION"i "BY"i column ("," column)* "ROWS"i number PRECEDING? window_where?
now_window: "NOW"i
unbounded_window: "UNBOUNDED"i PRECEDING? landmark_start? landmark_end?
landmark_start: "START"i "AT"i (STRING | NUMBER)
landmark_end: "END"i "AT"i (STRING | NUMBER)
window_where: "WHERE"i expr
PRECEDING.3: /preceding(?![A-Za-z0-9_])/i

where: "WHERE"i expr
group_by: "GROUP"i "BY"i expr ("," expr)*
having: "HAVING"i expr

// durations take the NUMBER token itself (not the `number` rule): a shared
// `number` state would let the lexer read the alias in `SELECT 1 s` as a unit
duration: NUMBER UNIT?
UNIT.2: /(milliseconds?|msecs?|ms|seconds?|secs?|s|minutes?|mins?|hours?|hrs?|h|days?|d)(?![A-Za-z0-9_])/i

// ---------------------------------------------------------------- expressions
?expr: or_expr
?or_expr: and_expr
        | or_expr "OR"i and_expr              -> or_
?and_expr: not_expr
         | and_expr "AND"i not_expr           -> and_
?not_expr: NOT not_expr                    -> not_
         | predicate
?predicate: sum_expr COMP_OP sum_expr                          -> compare
          | sum_expr NOT? "BETWEEN"i sum_expr "AND"i sum_expr  -> between
          | sum_expr NOT? "LIKE"i STRING                       -> like
          | sum_expr NOT? "IN"i "(" expr ("," expr)* ")"       -> in_list
          | sum_expr NOT? "IN"i "(" set_expr ")"               -> in_subquery
          | sum_expr "IS"i NOT? "NULL"i                        -> is_null
          | sum_expr
NOT.3: /not(?![A-Za-z0-9_])/i
EXISTS_KW.3: /exists(?![A-Za-z0-9_])/i
COMP_OP: "<=" | ">=" | "<>" | "!=" | "==" | "=" | "<" | ">"
?sum_expr: product
         | sum_expr ADD_OP product                  -> binop
?product: unary
        | product MUL_OP unary                      -> binop
ADD_OP: "+" | "-"
MUL_OP: "*" | "/" | "%"
?unary: "-" unary                                   -> neg
      | "+" unary
      | atom
?atom: number
     | STRING                                       -> string
     | "TRUE"i                                      -> true
     | "FALSE"i                                     -> false
     | "NULL"i                                      -> null
     | column
     | aggregate
     | summary_estimate
     | EXISTS_KW "(" set_expr ")"                   -> exists
     | name "(" [expr ("," expr)*] ")"              -> func_call
     | "(" expr ")"

column: name ("." name)?
aggregate: AGG_FUNC "(" agg_args ")"
AGG_FUNC.3: /(count|sum|avg|min|max|median|quantile)(?![A-Za-z0-9_])/i
agg_args: star                                      -> agg_star
        | DISTINCT? expr ("," expr)*                -> agg_exprs
summary_estimate: "SUMMARY"i "." "ESTIMATE"i "." AGG_FUNC "(" column ")"

number: NUMBER
NUMBER: /(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?/
STRING: /'([^'\n]|'')*'/ | /‘[^’\n]*’/ | /’[^’\n]*’/
name: NAME | QUOTED_NAME
NAME: /(?!(?:select|from|where|group|having|and|or|not|as|on|with|within|between|like|in|is|null|true|false|distinct|create|drop|explain|by)(?![a-z0-9_]))[a-z_][a-z0-9_]*/i
// reserved words (not usable as bare names; "quote" them): select from where group having and or not as on with within between like in is null true false distinct create drop explain by
QUOTED_NAME: /"([^"\n]|"")+"/

COMMENT: /--[^\n]*/
%import common.WS
%ignore WS
%ignore COMMENT
'''
