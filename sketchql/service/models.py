"""Request and response bodies of the HTTP API as pydantic models (they make the OpenAPI schema).

Request models forbid unknown fields and non-finite numbers, so a typo or a
``NaN`` is a 422 naming the field, never a 500.  Response models allow extra
fields (the engine's statistics grow over time) but document the stable ones.

>>> Heartbeat.model_validate({"ts": 3}).ts
3.0
>>> try:
...     Heartbeat.model_validate({"ts": float("nan")})
... except Exception as e:
...     print(type(e).__name__)
ValidationError
"""
from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field


class _Req(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class _Resp(BaseModel):
    model_config = ConfigDict(extra="allow")


# ----------------------------------------------------------------------- requests
class Sql(_Req):
    """A SQL text: DDL for ``POST /streams``, one SELECT (or EXPLAIN SELECT) for ``POST /queries``."""
    sql: str = Field(..., description="the statement(s)", examples=["SELECT ItemID FROM Store1 [RANGE 10 SECONDS]"])


class Heartbeat(_Req):
    """The stream promises that no tuple older than ``ts`` will come."""
    ts: float = Field(..., description="event time (seconds), finite")


class SummaryLoad(_Req):
    """Load a Spark-built summary (a store directory or a ``.sqs`` file) below a configured root."""
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True, populate_by_name=True)
    path: str
    name: Optional[str] = Field(None, description="which summary of a store holding several")
    as_: Optional[str] = Field(None, alias="as", description="register it under this name")


class ContractPatch(_Req):
    """Change a query's precision contract (omitted fields stay; null clears)."""
    error: Optional[float] = Field(None, gt=0, lt=1, description="WITH ERROR: relative error bound")
    confidence: Optional[float] = Field(None, gt=0, lt=1, description="CONFIDENCE of the bound")
    budget: Optional[float] = Field(None, gt=0, description="WITHIN: work per tuple (budget_unit)")
    on_miss: Optional[Literal["return", "exact", "fail"]] = Field(None, description="ON MISS action")


class QueryPatch(_Req):
    """Change a query's weight (importance for the allocator) or pause / resume it."""
    weight: Optional[float] = Field(None, ge=0)
    active: Optional[bool] = None


class BudgetsPatch(_Req):
    """Engine-wide budgets (null = unlimited)."""
    memory_bytes: Optional[int] = Field(None, ge=1)
    cpu_units_per_s: Optional[float] = Field(None, gt=0)


# ----------------------------------------------------------------------- responses
class ErrorDetail(_Resp):
    type: str
    message: str
    status: int


class ErrorBody(_Resp):
    """Every 4xx/5xx: what went wrong and where (line/column, stream/column_name/row, limit/value, ...)."""
    error: ErrorDetail


class DdlReceipt(_Resp):
    """201 when the statements created something, else 200 (DROP, ALTER); ``dropped``: what DROP removed."""
    ok: bool
    statements: int
    created: List[str]
    dropped: List[str] = []


class BatchPart(_Resp):
    """One record batch of an ``X-Arrow-Batches: each`` request."""
    accepted: int
    clock: Optional[float]


class BatchReceipt(_Resp):
    """The batch is applied and (with a data directory) on disk."""
    stream: str
    accepted: int
    clock: Optional[float]
    seq: Optional[int] = Field(None, description="its position in the operation log (null without --data-dir)")
    producer: Optional[str] = Field(None, description="X-Producer-Id of a pipelined batch")
    sequence: Optional[int] = Field(None, description="X-Producer-Seq of a pipelined batch")
    duplicate: Optional[bool] = Field(None, description="true: this sequence number was already admitted; "
                                      "nothing was applied again (accepted 0)")
    batches: Optional[list[BatchPart]] = Field(None, description="X-Arrow-Batches: each -- every record batch's "
                                               "own receipt, in stream order (accepted: the total)")


class HeartbeatReceipt(_Resp):
    stream: str
    clock: Optional[float]
    seq: Optional[int] = None


class QueryInfo(_Resp):
    id: int
    sql: str
    view: str
    columns: List[str]
    engine: str
    clock: Optional[float]
    active: bool = True
    weight: Optional[float] = 1.0
    links: Dict[str, str] = {}


class QueryList(_Resp):
    queries: List[QueryInfo]


class ResultRow(_Resp):
    seq: int
    sign: int
    at: Optional[float]
    row: Dict[str, Any]


class ResultsPage(_Resp):
    """Rows ``since <= seq < next``; ``missed`` rows left the buffer before this read."""
    query: int
    since: int
    next: int
    rows: List[ResultRow]
    missed: int
    available: int
    first_available: int
    total: int
    buffer_rows: int


class Contract(_Resp):
    query: int
    error: Optional[float] = None
    confidence: Optional[float] = None
    budget: Optional[float] = None
    on_miss: Optional[str] = None
    budget_unit: Optional[str] = None


class Budgets(_Resp):
    memory_bytes: Optional[int] = None
    cpu_units_per_s: Optional[float] = None


class Precision(_Resp):
    """``available`` false until the engine has the precision API; never a made-up figure."""
    query: int
    available: bool
    contract: Dict[str, Any]
    precision: Optional[Dict[str, Any]] = None
    series: Optional[List[Dict[str, Any]]] = None


class Allocator(_Resp):
    available: bool
    budgets: Dict[str, Any]
    decision: Optional[Dict[str, Any]] = None


class PlanOut(_Resp):
    query: int
    explain: str
    plan: Dict[str, Any]


class ExplainOut(_Resp):
    sql: str
    explain: str
    plan: Optional[Dict[str, Any]] = None


class ControlTableOut(_Resp):
    kind: str
    name: str
    stats: Dict[str, Any]
    knobs: Dict[str, Any]


class ControlTables(_Resp):
    tables: List[Dict[str, Any]]


class ControlWrite(_Resp):
    applied: Dict[str, Any]
    table: Dict[str, Any]


class Deleted(_Resp):
    ok: bool
    deleted: Any


class CheckpointOut(_Resp):
    seq: int
    bytes: int
    snapshot_s: float
    write_s: float
