"""sketchql.planner — the query language: grammar, parser, AST, semantic analysis,
logical/physical plans, cost model, update-pattern annotation and EXPLAIN.

Pipeline: ``parse`` (Lark grammar in :mod:`.grammar` -> :mod:`.ast`) ->
``analyze`` (names and types against a :class:`Catalog`) -> ``plan_query``
(logical plan, update patterns, costs, exact/promising choice) ->
``instantiate`` (exact operators) -> run by :class:`sketchql.engine.Engine`.

>>> from sketchql.planner import Catalog, Schema, parse_query, analyze, plan_query, explain_plan
>>> cat = Catalog(); _ = cat.add_stream(Schema("s", {"a": "int", "ts": "float"}, "ts"))
>>> plan = plan_query(analyze(parse_query("SELECT a FROM s [RANGE 1 MINUTE] WHERE a > 2"), cat))
>>> plan.engine, plan.root.pattern
('exact', 'weakest')
"""
from .catalog import Catalog, Schema, SummaryDecl
from .cost import JoinStream, all_orders, best_order, eager_costs, order_cost, phi
from .explain import explain_plan
from .parser import parse, parse_one, parse_query
from .plan import Plan, PlanNode, StreamStats, annotate, instantiate, logical_plan, plan_query
from .semantic import BoundQuery, analyze

__all__ = [
    "parse", "parse_one", "parse_query", "analyze", "BoundQuery", "Catalog", "Schema", "SummaryDecl",
    "plan_query", "logical_plan", "annotate", "instantiate", "Plan", "PlanNode", "StreamStats",
    "explain_plan", "JoinStream", "phi", "eager_costs", "order_cost", "best_order", "all_orders",
]
