"""``/metrics`` in the Prometheus text exposition format (version 0.0.4).

Families (labels in braces):

* ``sketchql_stream_tuples_total{stream}`` counter -- tuples accepted;
* ``sketchql_stream_batches_total{stream}`` counter -- batches accepted;
* ``sketchql_stream_rejected_batches_total{stream}`` / ``..._rejected_rows_total{stream}``
  counters -- batches (and their rows) refused whole by the service;
* ``sketchql_stream_rejected_rows_by_reason_total{stream,reason}`` counter -- reason
  ``invalid`` (types, columns, NaN times), ``late`` (older than the clock),
  ``time_jump`` (further ahead of the clock than ``max_time_jump``);
* ``sketchql_stream_clock_seconds{stream}`` gauge -- the stream's event-time clock;
* ``sketchql_query_buffer_rows{query}`` gauge (rows held in the result buffer) and
  ``sketchql_query_buffer_capacity_rows`` gauge (``max_retained_rows``);
* ``sketchql_log_seq`` / ``sketchql_log_durable_seq`` / ``sketchql_checkpoint_seq`` gauges,
  ``sketchql_log_commits_total`` / ``sketchql_checkpoints_total`` counters (with a data directory);
* ``sketchql_auth_refused_total{status}`` counter -- requests refused by authentication;
* ``sketchql_queries`` gauge; ``sketchql_query_result_rows_total{query}`` counter
  (change rows produced in the query's view); ``sketchql_query_clock_seconds{query}``
  and ``sketchql_query_state_rows{query}`` gauges;
* ``sketchql_summaries_loaded`` gauge; ``sketchql_demo_tuples_total`` counter;
* ``sketchql_http_requests_total{method,status}`` counter.

>>> print(render([("x_total", "counter", "An x.", [({"a": 'q"'}, 2)])]), end="")
# HELP x_total An x.
# TYPE x_total counter
x_total{a="q\\""} 2
"""
from __future__ import annotations

import math

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _esc(v) -> str:
    return str(v).replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def _num(v) -> str:
    v = float(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(int(v)) if v.is_integer() and abs(v) < 2**53 else repr(v)


def render(families) -> str:
    """Families ``(name, type, help, [(labels dict, value), ...])`` -> exposition text."""
    out = []
    for name, typ, help_, samples in families:
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} {typ}")
        for labels, value in samples:
            lab = ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items())
            out.append(f"{name}{{{lab}}} {_num(value)}" if lab else f"{name} {_num(value)}")
    return "\n".join(out) + "\n"


def collect(state) -> str:
    """The metrics text of a :class:`~sketchql.service.state.ServiceState`."""
    state.collect_all()
    with state.http_lock:
        http = sorted(state.http.items())
    with state.lock:
        eng = state.engine
        streams = [eng.stream(s.name) for s in eng.catalog.streams]
        queries = list(eng.queries)
        fam = [
            ("sketchql_stream_tuples_total", "counter", "Tuples accepted per stream.",
             [({"stream": h.name}, h.tuples_in) for h in streams]),
            ("sketchql_stream_batches_total", "counter", "Batches accepted per stream.",
             [({"stream": h.name}, h.batches) for h in streams]),
            ("sketchql_stream_rejected_batches_total", "counter", "Batches refused whole per stream.",
             [({"stream": h.name}, state.rejected_batches[h.name]) for h in streams]),
            ("sketchql_stream_rejected_rows_total", "counter", "Rows of refused batches per stream.",
             [({"stream": h.name}, state.rejected_rows[h.name]) for h in streams]),
            ("sketchql_stream_rejected_rows_by_reason_total", "counter", "Rows of refused batches by reason.",
             [({"stream": st, "reason": r}, n) for (st, r), n in sorted(state.rejected_by_reason.items())]),
            ("sketchql_stream_clock_seconds", "gauge", "Event-time clock of each stream (seconds).",
             [({"stream": h.name}, h.clock) for h in streams]),
            ("sketchql_queries", "gauge", "Registered continuous queries.", [({}, len(queries))]),
            ("sketchql_query_result_rows_total", "counter", "Change rows produced per query (its view).",
             [({"query": str(q.id)}, state.logs[q.id].total if q.id in state.logs else 0) for q in queries]),
            ("sketchql_query_clock_seconds", "gauge", "Event time each query has advanced to (seconds).",
             [({"query": str(q.id)}, q.clock) for q in queries]),
            ("sketchql_query_state_rows", "gauge", "Rows held in each query's operator state.",
             [({"query": str(q.id)}, q.stats().get("state_rows", 0)) for q in queries]),
            ("sketchql_query_buffer_rows", "gauge", "Rows held in each query's result buffer.",
             [({"query": str(q.id)}, state.logs[q.id].retained if q.id in state.logs else 0) for q in queries]),
            ("sketchql_query_buffer_capacity_rows", "gauge", "Capacity of each query's result buffer (rows).",
             [({}, state.limits.max_retained_rows)]),
            ("sketchql_summaries_loaded", "gauge", "Summaries loaded with /summaries/load.",
             [({}, len(state.summaries.entries))]),
            ("sketchql_demo_tuples_total", "counter", "Tuples pushed by the demo feeder.",
             [({}, state.demo.pushed if state.demo is not None else 0)]),
            ("sketchql_http_requests_total", "counter", "HTTP requests by method and status.",
             [({"method": m, "status": str(s)}, n) for (m, s), n in http]),
            ("sketchql_auth_refused_total", "counter", "Requests refused by authentication, by status.",
             [({"status": str(s)}, n) for s, n in sorted(state.auth_failures.items())]),
        ]
        if state.store is not None:
            ds = state.store.status()
            fam += [("sketchql_log_seq", "gauge", "Last operation appended to the log.", [({}, ds["last_seq"])]),
                    ("sketchql_log_durable_seq", "gauge", "Last operation committed (fsynced).",
                     [({}, ds["durable_seq"])]),
                    ("sketchql_checkpoint_seq", "gauge", "Operation covered by the newest checkpoint.",
                     [({}, ds["checkpoint_seq"])]),
                    ("sketchql_log_commits_total", "counter", "Group commits of the log.", [({}, ds["commits"])]),
                    ("sketchql_checkpoints_total", "counter", "Checkpoints written.", [({}, ds["checkpoints"])])]
    return render(fam)
