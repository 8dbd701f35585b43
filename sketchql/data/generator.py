"""Retail store streams with drifting Zipf item popularity.

Model (per store ``s``, all randomness from ``numpy.random.default_rng(seed)``):

* arrivals: inter-arrival gaps ``~ Exponential(mean = mean_interarrival)``,
  ``TimeStamp = cumsum(gaps)`` (seconds, float64, starting after ``t0``);
* popularity: item *ranks* follow a truncated Zipf law
  ``p_r = r^-s / sum_k k^-s`` for ``r = 1..n_items``; a rank is mapped to an
  ``ItemID`` by a permutation ``pi_e`` that changes every ``drift_every``
  seconds (epoch ``e = floor(ts / drift_every)``): at each epoch boundary a
  share ``drift_frac`` of the ranks is reshuffled among themselves
  (popularity drift shared by all stores); each store additionally applies its
  own small reshuffle of a share ``store_jitter`` of the ranks (stores differ
  a little);
* ``TransactionID``: a per-store counter; a tuple starts a new transaction
  with probability 1/3 (mean basket of 3 items);
* ``Price``: a per-item base price (log-normal, median 10) times a per-tuple
  factor ``U(0.9, 1.1)``, rounded to cents.

Join selectivity (what the paper's "average join selectivity 6.7 %" means
here): the share of (arrival, window tuple) pairs that join, i.e. over every
arrival ``x`` of one stream and every tuple ``y`` of the other stream that is
inside ``x``'s window, ``P[x.ItemID == y.ItemID]``.  For stationary
popularities it equals ``sum_i p1_i p2_i`` (``p_s`` the item distribution of
store ``s``); :func:`expected_selectivity` computes that average over epochs,
:func:`sketchql.data.join_selectivity` measures it on generated data.  The
defaults ``n_items=2000, zipf_s=1.2`` give ``sum_r p_r^2 = 0.0684`` and, with
the jitter, about 6.7 %.  (Tuned only through the item universe and the Zipf
exponent; nothing here looks at an operator.)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import SketchQLError

COLUMNS = ("store", "txn", "ts", "item", "price")


@dataclass
class StoreStream:
    """One store's tuples, columnar, in timestamp order.

    Columns: ``store`` (int32 StoreID), ``txn`` (int64 TransactionID), ``ts``
    (float64 seconds), ``item`` (int64 ItemID), ``price`` (float64).
    """

    store: np.ndarray
    txn: np.ndarray
    ts: np.ndarray
    item: np.ndarray
    price: np.ndarray

    def __len__(self) -> int:
        return int(self.ts.shape[0])

    def columns(self) -> dict:
        return {c: getattr(self, c) for c in COLUMNS}


@dataclass
class Arrivals:
    """Several streams merged in arrival order (stable by (ts, stream)).

    ``stream`` (int32, position of the source in the list given to
    :func:`interleave`), ``pos`` (int64 index of the tuple inside its own
    stream), ``seq`` (int64 global arrival number 0..n-1) plus the tuple
    columns ``store, txn, ts, item, price``.  A tuple ``y`` arrived before
    ``x`` iff ``y.seq < x.seq``.
    """

    stream: np.ndarray
    pos: np.ndarray
    seq: np.ndarray
    store: np.ndarray
    txn: np.ndarray
    ts: np.ndarray
    item: np.ndarray
    price: np.ndarray

    def __len__(self) -> int:
        return int(self.ts.shape[0])

    @property
    def n_streams(self) -> int:
        return int(self.stream.max()) + 1 if len(self) else 0

    def take(self, idx) -> "Arrivals":
        idx = np.asarray(idx)
        return Arrivals(**{k: getattr(self, k)[idx] for k in self.__dataclass_fields__})

    def of_stream(self, s: int) -> "Arrivals":
        return self.take(np.flatnonzero(self.stream == s))


def _zipf_probs(n_items: int, s: float) -> np.ndarray:
    p = np.arange(1, n_items + 1, dtype=np.float64) ** (-float(s))
    return p / p.sum()


def _reshuffle(perm: np.ndarray, frac: float, rng: np.random.Generator) -> np.ndarray:
    out = perm.copy()
    k = int(round(frac * perm.shape[0]))
    if k >= 2:
        pos = rng.choice(perm.shape[0], size=k, replace=False)
        out[pos] = out[rng.permutation(pos)]
    return out


def _check(name, value, cond, what):
    if not cond:
        raise SketchQLError(f"generate_stores: {name} must be {what}, got {value!r}")


def _epoch_maps(n_stores, n_epochs, n_items, drift_frac, store_jitter, rng):
    common = [rng.permutation(n_items)]
    for _ in range(1, n_epochs):
        common.append(_reshuffle(common[-1], drift_frac, rng))
    maps = []
    for s in range(n_stores):
        srng = np.random.default_rng([int(rng.integers(2**31)), s])
        maps.append(np.stack([_reshuffle(c, store_jitter, srng) for c in common]))
    return maps  # maps[s][e, rank] -> item index 0..n_items-1


def generate_stores(
    n_stores: int = 2,
    duration: float = 120.0,
    mean_interarrival: float = 0.1,
    n_items: int = 2000,
    zipf_s: float = 1.22,
    drift_every: float = 30.0,
    drift_frac: float = 0.1,
    store_jitter: float = 0.01,
    seed: int = 0,
    t0: float = 0.0,
) -> list[StoreStream]:
    """Generate ``n_stores`` store streams covering ``duration`` seconds.

    ``mean_interarrival`` is the mean gap (seconds) between two tuples *of one
    store*.  Same arguments and seed -> identical arrays.

    >>> a, b = generate_stores(2, duration=10.0, mean_interarrival=0.1, seed=3)
    >>> 50 < len(a) < 150 and bool((a.ts[1:] > a.ts[:-1]).all())
    True
    """
    _check("n_stores", n_stores, int(n_stores) == n_stores and n_stores >= 1, "a positive integer")
    _check("duration", duration, duration > 0, "> 0 seconds")
    _check("mean_interarrival", mean_interarrival, mean_interarrival > 0, "> 0 seconds")
    _check("n_items", n_items, int(n_items) == n_items and n_items >= 2, "an integer >= 2")
    _check("zipf_s", zipf_s, zipf_s >= 0, ">= 0")
    _check("drift_every", drift_every, drift_every > 0, "> 0 seconds")
    _check("drift_frac", drift_frac, 0 <= drift_frac <= 1, "in [0, 1]")
    _check("store_jitter", store_jitter, 0 <= store_jitter <= 1, "in [0, 1]")
    rng = np.random.default_rng(seed)
    probs = _zipf_probs(int(n_items), zipf_s)
    cdf = np.cumsum(probs)
    cdf[-1] = 1.0
    n_epochs = int(np.floor(duration / drift_every)) + 1
    maps = _epoch_maps(int(n_stores), n_epochs, int(n_items), drift_frac, store_jitter, rng)
    base_price = np.round(np.exp(rng.normal(np.log(10.0), 0.8, size=int(n_items))), 2)
    out = []
    for s in range(int(n_stores)):
        srng = np.random.default_rng([seed, 7919, s])
        n_guess = int(duration / mean_interarrival * 1.2 + 20 * np.sqrt(duration / mean_interarrival) + 20)
        gaps = srng.exponential(mean_interarrival, size=n_guess)
        ts = t0 + np.cumsum(gaps)
        while ts[-1] <= t0 + duration:  # extremely unlikely; keep drawing
            more = srng.exponential(mean_interarrival, size=n_guess)
            ts = np.concatenate([ts, ts[-1] + np.cumsum(more)])
        ts = ts[ts <= t0 + duration]
        n = ts.shape[0]
        ranks = np.searchsorted(cdf, srng.random(n), side="right")
        ranks = np.minimum(ranks, int(n_items) - 1)
        epoch = np.minimum(((ts - t0) // drift_every).astype(np.int64), n_epochs - 1)
        item = maps[s][epoch, ranks].astype(np.int64) + 1  # ItemIDs 1..n_items
        new_txn = srng.random(n) < 1.0 / 3.0
        new_txn[:1] = True
        txn = np.cumsum(new_txn).astype(np.int64) + 1_000_000 * (s + 1)
        price = np.round(base_price[item - 1] * srng.uniform(0.9, 1.1, n), 2)
        out.append(StoreStream(store=np.full(n, s + 1, np.int32), txn=txn, ts=ts, item=item, price=price))
    return out


def expected_selectivity(
    n_items: int = 2000, zipf_s: float = 1.22, drift_frac: float = 0.1, store_jitter: float = 0.01,
    n_epochs: int = 4, seed: int = 0,
) -> float:
    """Analytic ``sum_i p1_i p2_i`` of stores 1 and 2, averaged over epochs
    (the stationary part of the join selectivity defined in the module doc)."""
    rng = np.random.default_rng(seed)
    probs = _zipf_probs(int(n_items), zipf_s)
    maps = _epoch_maps(2, n_epochs, int(n_items), drift_frac, store_jitter, rng)
    vals = []
    for e in range(n_epochs):
        p1 = np.zeros(n_items)
        p2 = np.zeros(n_items)
        p1[maps[0][e]] = probs
        p2[maps[1][e]] = probs
        vals.append(float(p1 @ p2))
    return float(np.mean(vals))


def interleave(streams) -> Arrivals:
    """Merge store streams (``StoreStream`` list) into one arrival order,
    sorted by timestamp (ties: lower stream index first)."""
    if not streams:
        raise SketchQLError("interleave: need at least one stream")
    cols = {c: np.concatenate([getattr(s, c) for s in streams]) for c in COLUMNS}
    stream = np.concatenate([np.full(len(s), i, np.int32) for i, s in enumerate(streams)])
    pos = np.concatenate([np.arange(len(s), dtype=np.int64) for s in streams])
    order = np.lexsort((stream, cols["ts"]))
    return Arrivals(
        stream=stream[order], pos=pos[order], seq=np.arange(order.shape[0], dtype=np.int64),
        **{c: cols[c][order] for c in COLUMNS},
    )


def make_range_queries(values, n_queries: int, sel_lo: float = 0.05, sel_hi: float = 0.10, seed: int = 0,
                       max_tries: int = 2000):
    """``n_queries`` inclusive integer ranges ``(lo, hi)`` over ``values``
    whose selectivity (share of ``values`` inside) is drawn uniformly in
    ``[sel_lo, sel_hi]`` (seeded).  A range starts at a random value and
    grows until it reaches the drawn selectivity; a start whose range jumps
    past ``sel_hi`` (a very popular value) is redrawn.

    >>> import numpy as np
    >>> v = np.repeat(np.arange(1, 101), 10)
    >>> qs = make_range_queries(v, 3, seed=1)
    >>> all(0.05 <= ((v >= lo) & (v <= hi)).mean() <= 0.10 for lo, hi in qs)
    True
    """
    values = np.asarray(values)
    if values.shape[0] == 0:
        raise SketchQLError("make_range_queries: no values")
    if not (0 < sel_lo <= sel_hi < 1):
        raise SketchQLError(f"make_range_queries: need 0 < sel_lo <= sel_hi < 1, got {sel_lo}, {sel_hi}")
    rng = np.random.default_rng([int(seed), 0x5E7])
    uv, cnt = np.unique(values, return_counts=True)
    cum = np.r_[0, np.cumsum(cnt)] / values.shape[0]
    out = []
    for _ in range(int(n_queries)):
        target = rng.uniform(sel_lo, sel_hi)
        for _try in range(max_tries):
            i = int(rng.integers(0, uv.shape[0]))
            jx = int(np.searchsorted(cum, cum[i] + target, side="left"))  # cum[jx] >= cum[i] + target
            ok = [j for j in (jx, jx - 1) if i < j <= uv.shape[0] and sel_lo <= cum[j] - cum[i] <= sel_hi]
            if ok:
                out.append((int(uv[i]), int(uv[ok[0] - 1])))
                break
        else:
            raise SketchQLError(f"make_range_queries: no range of selectivity {target:.3f} found")
    return out
