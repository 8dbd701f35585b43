"""The summary declaration and the index's run-time knobs.

``SummaryDeclaration`` is the parsed form of

    CREATE SUMMARY name ON stream (attr) WITH GRANULARITY T1 AND COLLAPSE(rate, depth)

It fixes the *geometry* of the index (paper section 3.5): granularities
G1..Gm with m = depth, |G1| = T1 and |G(i+1)| = rate * |G(i)|.

``IndexConfig`` holds every other knob as a plain settable attribute, so a
resource allocator (``sketchql.approx``) can change it at run time.

>>> decl = SummaryDeclaration("s1", "Store1", "ItemNo", granularity=10.0, rate=2, depth=4)
>>> [decl.span(i) for i in range(1, 5)]
[10.0, 20.0, 40.0, 80.0]
>>> cfg = IndexConfig(structure="T3", n_buckets=16)
>>> cfg.theta = 0.4          # knobs are plain attributes
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, asdict

from ..errors import SummaryError

STRUCTURES = ("T1", "T2", "T3", "T4")


#: the finest G1 a summary may declare: zone numbers are ts / G1 as exact integers in a float64
#: (< 2**53), so 1 us keeps epoch-second timestamps (~2e9 s -> 2e15) exact
MIN_GRANULARITY = 1e-6


@dataclass(frozen=True)
class SummaryDeclaration:
    """``CREATE SUMMARY name ON stream (attr) WITH GRANULARITY T1 AND COLLAPSE(rate, depth)``.

    name, stream, attr : identifiers (non-empty strings).
    granularity : |G1| = T1 in seconds (finite, >= ``MIN_GRANULARITY`` = 1 us).
    rate : integer >= 2, |G(i+1)| = rate * |G(i)|.
    depth : integer >= 1, number of granularities m.

    Covered history: at most ``T1 * (1 + rate + ... + rate^(m-1))`` plus one
    zone of Gm; older data is dropped (see ``StreamIndex``).
    """

    name: str
    stream: str
    attr: str
    granularity: float
    rate: int
    depth: int

    def __post_init__(self):
        for what in ("name", "stream", "attr"):
            v = getattr(self, what)
            if not isinstance(v, str) or not v.strip():
                raise SummaryError(f"CREATE SUMMARY: {what} must be a non-empty identifier, got {v!r}")
        g = self.granularity
        if isinstance(g, bool) or not isinstance(g, (int, float)) or not math.isfinite(g) or g <= 0:
            raise SummaryError(
                f"CREATE SUMMARY {self.name}: GRANULARITY must be a positive number of seconds, got {g!r}")
        if g < MIN_GRANULARITY:
            raise SummaryError(
                f"CREATE SUMMARY {self.name}: GRANULARITY {g:g} seconds is below the minimum {MIN_GRANULARITY:g} "
                f"(zone numbers ts / GRANULARITY must stay exact integers)")
        object.__setattr__(self, "granularity", float(g))
        for what, lo in (("rate", 2), ("depth", 1)):
            v = getattr(self, what)
            if isinstance(v, bool) or not isinstance(v, (int,)) and not (isinstance(v, float) and v.is_integer()):
                raise SummaryError(f"CREATE SUMMARY {self.name}: COLLAPSE {what} must be an integer, got {v!r}")
            if int(v) < lo:
                raise SummaryError(f"CREATE SUMMARY {self.name}: COLLAPSE {what} must be >= {lo}, got {v!r}")
            object.__setattr__(self, what, int(v))
        if self.depth > 32:
            raise SummaryError(f"CREATE SUMMARY {self.name}: COLLAPSE depth {self.depth} is unreasonably deep (max 32)")

    def span(self, i: int) -> float:
        """|G_i| in seconds (i is 1-based)."""
        if not 1 <= i <= self.depth:
            raise SummaryError(f"granularity index {i} outside 1..{self.depth}")
        return self.granularity * self.rate ** (i - 1)

    @property
    def history(self) -> float:
        """Maximum history (seconds) the declaration keeps: sum of all spans."""
        return sum(self.span(i) for i in range(1, self.depth + 1))

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class IndexConfig:
    """Knobs of a :class:`StreamIndex` (all plain attributes; defaults below).

    Fixed once the index holds data (changing them later raises at the next call):

    - ``structure = "T4"``: paper Figure 9.  ``"T1"`` raw window only (tuple
      lists per time zone, no summaries); ``"T2"`` time-only zones (one
      sketch of width ``n_buckets * w`` per zone, same memory as T3/T4);
      ``"T3"`` value buckets x fixed time zones; ``"T4"`` value buckets x
      self-adjusting time zones.
    - ``n_buckets = 64``: value buckets (hash of the value) for T3/T4.
    - ``g1_zones = 4``: fixed zones of G1 for T1-T3 (length T1 / g1_zones).
    - ``zones_per_granularity = None``: n, the ring of zones of G2..Gm
      (None -> rate); must divide ``rate``; zone length of Gi is |Gi| / n.
    - ``d = 5``, ``w = 64``, ``seed = 0``: count-sketch shape of every cell.

    Effective immediately when changed:

    - ``theta = 0.5``: T4 starts a new G1 zone when the zone's confidence
      (see ``sketchql.index.change``) drops below theta.
    - ``check_every = 256``: T4 evaluates the confidence each time the
      current zone received this many more tuples (the recent sub-window).
    - ``max_zone_length = None``: MAXLENGTH of a T4 zone in seconds
      (None -> T1 / g1_zones, the fixed zone length of T3).
    - ``max_g1_zones = 16``: at most this many zones in G1 (bounds memory);
      once reached the current zone keeps growing until G1 collapses.
    - ``allowed_lateness = 0.0``: seconds a tuple may lag the clock and
      still be accepted (routed to the zone covering its timestamp).
    - ``prune_sigma = 1.0`` and ``min_estimate = 0.5``: a pyramid node is
      negligible for a value when its estimate is below
      ``max(min_estimate, prune_sigma * sqrt(F2_node / w))``.

    Sketch width is changed at run time with ``StreamIndex.compress(factor)``
    (exact fold, updates ``w``).
    """

    structure: str = "T4"
    n_buckets: int = 64
    g1_zones: int = 4
    zones_per_granularity: int | None = None
    d: int = 5
    w: int = 64
    seed: int = 0
    theta: float = 0.5
    check_every: int = 256
    max_zone_length: float | None = None
    max_g1_zones: int = 16
    allowed_lateness: float = 0.0
    prune_sigma: float = 1.0
    min_estimate: float = 0.5

    FIXED = ("structure", "n_buckets", "g1_zones", "zones_per_granularity", "d", "w", "seed")

    def validate(self, decl: SummaryDeclaration | None = None) -> "IndexConfig":
        """Raise :class:`SummaryError` naming the bad knob; return self."""
        if self.structure not in STRUCTURES:
            raise SummaryError(f"IndexConfig.structure must be one of {STRUCTURES}, got {self.structure!r}")

        def posint(name, hi=None):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1 or (hi is not None and v > hi):
                rng = f"in 1..{hi}" if hi else ">= 1"
                raise SummaryError(f"IndexConfig.{name} must be an integer {rng}, got {v!r}")

        posint("n_buckets", 65536)
        posint("g1_zones", 4096)
        posint("d", 64)
        posint("w", 1 << 24)
        posint("check_every")
        posint("max_g1_zones", 4096)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**63:
            raise SummaryError(f"IndexConfig.seed must be an integer in [0, 2^63), got {self.seed!r}")
        for name, lo, hi in (("theta", 0.0, 1.0),):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not lo <= v <= hi:
                raise SummaryError(f"IndexConfig.{name} must be a number in [{lo}, {hi}], got {v!r}")
        for name in ("allowed_lateness", "prune_sigma", "min_estimate"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise SummaryError(f"IndexConfig.{name} must be a finite number >= 0, got {v!r}")
        if self.max_zone_length is not None:
            v = self.max_zone_length
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise SummaryError(f"IndexConfig.max_zone_length must be None or seconds > 0, got {v!r}")
        if self.zones_per_granularity is not None:
            posint("zones_per_granularity")
            if decl is not None and decl.rate % self.zones_per_granularity:
                raise SummaryError(
                    f"IndexConfig.zones_per_granularity={self.zones_per_granularity} must divide "
                    f"COLLAPSE rate {decl.rate} (each zone of G(i+1) holds whole collapsed G(i) periods)")
        return self

    def fixed_signature(self) -> tuple:
        return tuple(getattr(self, k) for k in self.FIXED)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, d: dict) -> "IndexConfig":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})
