"""Input reduction: per-query samplers and per-stream load shedding, with inclusion probabilities.

Both reduce what reaches the operators and record, per kept row, the
probability ``π`` with which it was kept, so that estimators can scale by the
Horvitz–Thompson weight ``w = 1 / π`` (:mod:`sketchql.approx.estimators`).

* :func:`shed` -- **load shedding at a stream's input queue** (the stream knobs
  ``sample_rate`` and ``shed_rate``, shared by every query on the stream):
  a row is kept with probability ``π = sample_rate · (1 − shed_rate)``;
  ``shed_key`` drops whole values (hash of that column, so a COUNT(DISTINCT)
  over it stays binomial) and ``protect`` columns keep their outliers (rows
  with ``|x|`` in the top ``protect_share`` of the batch are never dropped:
  drops are placed where they cost least precision for SUM / AVG).  The kept
  probability travels with the batch as the hidden column ``__pi``.
* :class:`Sampler` -- **sampling at one query's input** (the query's own
  queue, not shared): Bernoulli at ``rate`` (``mode="bernoulli"``) or universe
  sampling on a column (``mode="universe"``: keep a row iff
  ``hash(value) < rate · 2⁶⁴``: every copy of a value is kept or dropped
  together), with an outlier index (rows whose aggregated column is in the
  top ``outlier_share`` of the batch are kept with ``π = 1``).  It adds
  ``__w = 1 / (π_query · __pi)``.
* the same :class:`Sampler` with ``mode="reservoir"`` or ``mode="varopt"``
  keeps a **fixed-size** sample of ``k = round(rate · n)`` rows of each
  arriving batch of ``n`` rows (the query knob ``sampler``), by priority
  sampling (Duffield, Lund & Thorup, JACM 2007): row ``i`` gets the priority
  ``q_i = a_i / u_i`` (``u_i`` uniform on (0, 1]), the ``k`` highest
  priorities are kept and ``τ`` is the ``(k+1)``-th.  Given ``τ`` the kept rows
  are a Poisson sample with ``π_i = min(1, a_i / τ)``, so the Horvitz–Thompson
  weight ``1 / π_i`` is unbiased and ``Σ w (w − 1) x²`` is an unbiased
  estimate of its variance (their Theorem 2): every interval of
  :mod:`sketchql.approx.estimators` applies unchanged.

  - ``reservoir``: ``a_i = 1`` -- a uniform reservoir of ``k`` rows (random
    tags, the ``k`` smallest ``u`` kept), ``π = u_(k+1)``;
  - ``varopt``: ``a_i = |x_i| + mean|x|`` on the first SUM / AVG argument:
    inclusion ∝ size (large values are kept with ``π = 1``, like VarOpt_k;
    Szegedy (STOC 2006) showed priority sampling with ``k + 1`` samples has
    no larger variance than the optimal VarOpt with ``k``); the ``mean|x|``
    floor keeps every row's ``π > 0`` so COUNT and AVG stay unbiased.
    Its outliers are the rows with ``a_i ≥ τ`` (no separate outlier index).

Effects (documented on the knobs, :mod:`sketchql.approx.knobs`): memory and CPU
of everything downstream scale with the kept share; the relative error grows
like ``√((1 − π) / π)``.

>>> import numpy as np
>>> from sketchql.operators.changes import Batch
>>> b = Batch({"x": np.arange(1000.0)}, ts=np.arange(1000.0))
>>> s = Sampler(rate=0.1, seed=3, outlier_columns=("x",), outlier_share=0.01)
>>> out = s(b)
>>> 50 < len(out) < 160, bool((out.columns["__w"][out.columns["x"] >= 990] == 1).all())
(True, True)
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

from ..errors import SketchQLError
from ..operators.changes import Batch
from ..summaries.hashing import hash64

__all__ = ["Sampler", "priority_sample", "MODES", "shed", "outlier_mask", "universe_keep", "PI_COLUMN", "W_COLUMN"]

PI_COLUMN = "__pi"
MODES = ("bernoulli", "universe", "reservoir", "varopt")
W_COLUMN = "__w"
_TWO64 = float(2 ** 64)


def universe_keep(values, rate: float, seed: int) -> np.ndarray:
    """``hash(value) < rate · 2⁶⁴``: the same values are kept in every batch (and process)."""
    if rate >= 1.0:
        return np.ones(len(values), bool)
    h = hash64(np.asarray(values), seed, where="universe sampling key")
    return h.astype(np.float64) < rate * _TWO64


def outlier_mask(cols: dict, columns: Sequence[str], share: float, state: Optional[dict] = None) -> Optional[np.ndarray]:
    """Rows whose ``|x|`` is at least the ``1 − share`` quantile of the batch, for any of ``columns``.

    ``state`` keeps the last threshold per column (used for batches too small to
    estimate it: fewer than ``2 / share`` rows)."""
    if share <= 0 or not columns:
        return None
    m = None
    for c in columns:
        if c not in cols:
            continue
        x = np.abs(np.asarray(cols[c], np.float64))
        ok = np.isfinite(x)
        if ok.sum() >= 2.0 / share:
            tau = float(np.quantile(x[ok], 1.0 - share))
            if state is not None:
                state[c] = tau
        elif state is not None and c in state:
            tau = state[c]
        else:
            continue
        mc = ok & (x >= tau)
        m = mc if m is None else (m | mc)
    return m


def shed(b: Batch, sample_rate: float, shed_rate: float, rng: np.random.Generator, *,
         key: Optional[str] = None, protect: Sequence[str] = (), protect_share: float = 0.01,
         seed: int = 0, state: Optional[dict] = None) -> Batch:
    """Stream-level reduction (module doc); returns the kept rows with ``__pi`` when anything may drop."""
    keep_p = float(sample_rate) * (1.0 - float(shed_rate))
    if keep_p >= 1.0 or not len(b):
        return b
    n = len(b)
    pi = np.full(n, keep_p)
    if key is not None:
        if key not in b.columns:
            raise SketchQLError(f"shed_key {key!r} is not a column of the stream (columns: {b.names})")
        mask = universe_keep(b.columns[key], keep_p, seed)
    else:
        mask = rng.random(n) < keep_p
        om = outlier_mask(b.columns, protect, protect_share, state)
        if om is not None:
            mask |= om
            pi[om] = 1.0
    cols = dict(b.columns)
    if PI_COLUMN in cols:
        pi = pi * cols[PI_COLUMN]
    cols[PI_COLUMN] = pi
    return Batch(cols, ts=b.ts).take(mask)


class Sampler:
    """A query's input sampler (module doc).  Call it on a batch; knobs ``rate``, ``mode``,
    ``key``, ``outlier_columns``, ``outlier_share`` may change between calls.

    ``rate`` = 1 keeps everything (the rows still get ``__w``, 1 / ``__pi``).
    """

    window_scale = 1.0        # class default: samplers checkpointed before window reduction existed
    #: universe mode: count the arriving rows per hash bin (:meth:`key_bins`); off by default
    track_keys = False
    key_bins_horizon = 10.0   # data seconds: the counts decay as exp(-age / horizon)
    KEY_BINS = 16384
    _bins = None
    _bins_t = -np.inf

    def __init__(self, rate: float = 1.0, mode: str = "bernoulli", key: Optional[str] = None,
                 outlier_columns: Sequence[str] = (), outlier_share: float = 0.01, seed: int = 0,
                 hash_seed: int = 0):
        if mode not in MODES:
            raise SketchQLError(f"sampler mode must be one of {', '.join(MODES)}, got {mode!r}")
        if mode == "universe" and key is None:
            raise SketchQLError("universe sampling needs a key column")
        self.set_rate(rate)
        self.mode = mode
        self.key = key
        self.outlier_columns = tuple(outlier_columns)
        self.outlier_share = float(outlier_share)
        self.hash_seed = int(hash_seed)
        self._rng = np.random.default_rng(seed)
        self._tau: dict = {}
        self._hist: list = []            # (data time, rate) at each change of the rate
        self.rows_in = 0
        self.rows_kept = 0
        self.window_scale = 1.0          # window reduction s: rows also weigh 1 / s (window_reduction)

    def set_rate(self, rate: float):
        r = float(rate)
        if not 0.0 < r <= 1.0:
            raise SketchQLError(f"sampling rate must be in (0, 1], got {rate!r}")
        self.rate = r

    def __call__(self, b: Batch) -> Batch:
        return self.sample(b)[0]

    def min_rate_since(self, t: float) -> float:
        """The lowest rate used on data of time > ``t`` (the current rate if none changed since)."""
        r = self.rate
        for i in range(len(self._hist) - 1, -1, -1):
            t_i, rate_i = self._hist[i]
            r = min(r, rate_i)
            if t_i <= t:
                break
        return r

    def sample(self, b: Batch):
        """``(kept rows with __w, keep mask or None when every row is kept)``."""
        n = len(b)
        if n and (not self._hist or self._hist[-1][1] != self.rate):
            self._hist.append((float(b.ts[0]), self.rate))
            del self._hist[:-256]
        self.rows_in += n
        cols = dict(b.columns)
        pi_in = np.asarray(cols.pop(PI_COLUMN), np.float64) if PI_COLUMN in cols else np.ones(n)
        pi = np.full(n, self.rate)
        if self.mode == "universe" and self.track_keys and n:
            h = hash64(np.asarray(cols[self.key]), self.hash_seed, where="universe sampling key")
            self._count_bins(h, float(b.ts[-1]))
            mask = None if self.rate >= 1.0 else h.astype(np.float64) < self.rate * _TWO64
        elif self.rate >= 1.0:
            mask = None
        elif self.mode == "universe":
            mask = universe_keep(cols[self.key], self.rate, self.hash_seed)
        elif self.mode in ("reservoir", "varopt"):
            a = None
            if self.mode == "varopt":
                a = _size_weights(cols, self.outlier_columns, n)
                om = None
            else:
                om = outlier_mask(cols, self.outlier_columns, self.outlier_share, self._tau)
            rest = np.flatnonzero(~om) if om is not None else np.arange(n)
            k = int(round(self.rate * len(rest)))
            keep, pr = priority_sample(None if a is None else a[rest], k, len(rest), self._rng)
            mask = np.zeros(n, bool)
            mask[rest[keep]] = True
            pi[rest] = pr
            if om is not None:
                mask |= om
                pi[om] = 1.0
        else:
            mask = self._rng.random(n) < self.rate
            om = outlier_mask(cols, self.outlier_columns, self.outlier_share, self._tau)
            if om is not None:
                mask |= om
                pi[om] = 1.0
        cols[W_COLUMN] = 1.0 / (pi * pi_in * self.window_scale)
        out = Batch(cols, ts=b.ts)
        if mask is not None:
            out = out.take(mask)
        self.rows_kept += len(out)
        return out, mask

    def _count_bins(self, h: np.ndarray, t: float):
        B = self.KEY_BINS
        if self._bins is None:
            self._bins = np.zeros(B)
        elif np.isfinite(self._bins_t) and t > self._bins_t:
            self._bins *= np.exp(-(t - self._bins_t) / max(self.key_bins_horizon, 1e-9))
        self._bins_t = max(t, self._bins_t)
        self._bins += np.bincount((h >> np.uint64(64 - int(np.log2(B)))).astype(np.int64), minlength=B)

    def key_bins(self) -> Optional[np.ndarray]:
        """Universe mode with ``track_keys``: recent rows per hash bin (bin ``j`` holds the keys with
        ``hash / 2⁶⁴`` in ``[j / B, (j + 1) / B)``; decayed over ``key_bins_horizon``), so the rows
        -- and, combined with the other input's bins, the join pairs -- that rate ``p`` keeps are
        the bins below ``p``: ``Σ_{j < pB} n_j``.  None before any row."""
        return None if self._bins is None else self._bins.copy()

    def set_mode(self, mode: str):
        """Switch between bernoulli, reservoir and varopt (universe sampling is fixed by the plan)."""
        if mode not in ("bernoulli", "reservoir", "varopt"):
            raise SketchQLError(f"sampler must be bernoulli, reservoir or varopt, got {mode!r}")
        if self.mode == "universe":
            raise SketchQLError("this query samples by universe (hash of the COUNT(DISTINCT) value): "
                                "its sampler cannot change")
        self.mode = mode

    def knobs(self) -> dict:
        return {"sample_rate": self.rate, "sample_mode": self.mode, "sample_key": self.key,
                "outlier_share": self.outlier_share}


def _size_weights(cols: dict, columns: Sequence[str], n: int) -> np.ndarray:
    """VarOpt sizes ``|x| + mean|x|`` of the first SUM/AVG argument (1 for every row without one)."""
    for c in columns:
        if c in cols:
            x = np.abs(np.asarray(cols[c], np.float64))
            ok = np.isfinite(x)
            m = float(x[ok].mean()) if ok.any() else 1.0
            m = m if m > 0 else 1.0
            return np.where(ok, x, 0.0) + m
    return np.ones(n)


def priority_sample(a: Optional[np.ndarray], k: int, n: int, rng: np.random.Generator):
    """Priority sample of ``k`` of ``n`` rows with sizes ``a`` (None: all 1): (kept indices,
    conditional inclusion probabilities of all ``n`` rows, ``min(1, a / τ)``; module doc).

    >>> idx, p = priority_sample(None, 3, 10, np.random.default_rng(0))
    >>> len(idx), bool(np.all((p > 0) & (p <= 1)))
    (3, True)
    """
    if k >= n:
        return np.arange(n), np.ones(n)
    if k <= 0:
        return np.zeros(0, np.int64), np.ones(n)
    u = 1.0 - rng.random(n)                      # (0, 1]
    q = (np.ones(n) if a is None else np.asarray(a, np.float64)) / u
    part = np.argpartition(-q, k)                # k highest first, the (k+1)-th at position k
    keep = np.sort(part[:k])
    tau = float(q[part[k]])
    p = np.minimum(1.0, (np.ones(n) if a is None else a) / tau)
    return keep, p


def stream_keep_fn(handle) -> Callable[[], float]:
    """The keep probability of a stream handle's current knobs (for universe-sampled distinct counts)."""
    def f():
        k = handle.knobs()
        return float(k.get("sample_rate", 1.0)) * (1.0 - float(k.get("shed_rate", 0.0) or 0.0))
    return f
