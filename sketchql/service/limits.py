"""Limits on every server-facing input of the sketchql service.

Each request is checked against these before any work is done; a request
over a limit is refused whole (HTTP 413 for sizes, 422 for counts and
parameters) with a message naming the limit and the value given, so nothing
already accepted is affected.

>>> lim = Limits(max_batch_rows=10)
>>> lim.max_batch_rows, Limits().max_body_bytes
(10, 8388608)
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional


@dataclass
class Limits:
    """Bounds on request sizes and on the resources a client can create.

    * ``max_body_bytes``: request body (JSON / NDJSON) size, bytes; a declared larger
      one is refused at once, a streamed (chunked) one cut at the limit -- 413 either way;
    * ``body_read_timeout_s``: seconds a request body may stall (no bytes arriving)
      before the request is answered 408 and its connection closed (None: no bound);
    * ``max_header_bytes``: bytes of a request's URL and headers together (431 past it,
      connection closed);
    * ``header_read_timeout_s``: seconds a client may take to send a request's URL and
      headers, from its first byte (the connection is closed past it; None: no bound);
    * ``max_connections``: concurrent connections plus requests in flight (uvicorn's
      ``limit_concurrency``: 503 past it);
    * ``max_sse_clients``: concurrent ``/queries/{id}/stream`` subscribers, all
      queries together (503 past it);
    * ``max_batch_rows``: rows in one pushed batch;
    * ``max_sql_chars``: length of a SQL text (DDL or query);
    * ``max_streams``: streams + tables declared;
    * ``max_queries``: registered continuous queries;
    * ``max_summaries``: summaries, those created with DDL ``CREATE SUMMARY`` and those
      loaded with ``/summaries/load`` together (422 past it, nothing created); the
      engine's automatic indexes (``_auto_<stream>_<col>``) are not counted;
    * ``max_summary_file_bytes``: size of one summary file to load;
    * ``max_results_limit``: the largest ``limit`` of a results/snapshot read
      (``default_results_limit`` when none is given);
    * ``max_retained_rows``: the result buffer of each query: change rows the
      service keeps for cursor reads and SSE, collected after every operation
      whether or not anyone reads (when full, the oldest rows go and a read
      that wanted them is told exactly how many it missed);
    * ``max_time_jump``: seconds a tuple's (or heartbeat's) time may lie ahead
      of its stream's clock -- a batch with a tuple further ahead is refused
      whole and its rows counted as ``time_jump`` rejections in ``/metrics``
      (None: no bound).  Before a stream has a clock, the batch's own
      earliest time is the reference;
    * ``max_estimate_values``: values in one estimate request;
    * ``summary_roots``: if set, ``/summaries/load`` only reads paths inside
      these directories;
    * ``max_producers``: producer ids of pipelined ingest remembered (the least
      recently used idle one is forgotten past it; :mod:`sketchql.service.producers`);
    * ``max_forgotten_producers``: forgotten producer ids remembered (persisted), whose
      later batches are answered 409 ``unknown_producer``; past it the oldest
      forgotten id is dropped and would be taken for a new producer;
    * ``producer_window``: how many batches a producer's batch may be ahead of
      its next expected one (409 beyond);
    * ``max_sequence_wait_s``: how long a producer's batch waits for the batches
      before it (409 ``sequence_gap`` after);
    * ``max_batches_per_request``: record batches of one ``X-Arrow-Batches: each``
      request (each is its own batch; ``max_batch_rows`` applies to each).
    """

    max_body_bytes: int = 8 * 1024 * 1024
    body_read_timeout_s: Optional[float] = 30.0
    max_header_bytes: int = 65_536
    header_read_timeout_s: Optional[float] = 10.0
    max_connections: int = 1_024
    max_sse_clients: int = 256
    max_batch_rows: int = 100_000
    max_sql_chars: int = 10_000
    max_streams: int = 64
    max_queries: int = 64
    max_summaries: int = 16
    max_summary_file_bytes: int = 256 * 1024 * 1024
    max_results_limit: int = 10_000
    default_results_limit: int = 1_000
    max_retained_rows: int = 200_000
    max_estimate_values: int = 1_000
    max_time_jump: Optional[float] = 86_400.0
    summary_roots: Optional[tuple] = None
    max_producers: int = 10_000
    max_forgotten_producers: int = 100_000
    producer_window: int = 64
    max_sequence_wait_s: float = 10.0
    max_batches_per_request: int = 64

    def to_dict(self) -> dict:
        d = asdict(self)
        if d["summary_roots"] is not None:
            d["summary_roots"] = list(d["summary_roots"])
        return d
