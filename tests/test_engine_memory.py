"""Bounded query memory: a long continuous query keeps the live relation (≈ the
window state) and a bounded change log, not its whole history.

Oracles are brute force pandas over the tuples inside the window; a second,
unbounded query (``retain_changes=None``) registered on the same data is the
reference change stream for the poll() checks.
"""
import numpy as np
import pandas as pd
import pytest

from sketchql.engine import Engine, HistoryUnavailable
from sketchql.errors import SketchQLError

W = 2.0                      # window range (s)
JOIN = f"SELECT A.k, A.x, B.g FROM A [RANGE {W:g}], B [RANGE {W:g}] WHERE A.k = B.k"
AGG = f"SELECT g, COUNT(*) AS n, SUM(x) AS s FROM A [RANGE {W:g}] GROUP BY g"


def _stream(rng, n, t0, t1, kdom=200):
    ts = np.sort(rng.uniform(t0, t1, n))
    return {"ts": ts, "k": rng.integers(0, kdom, n), "x": rng.integers(0, 100, n).astype(float),
            "g": np.array([f"g{i}" for i in rng.integers(0, 40, n)], dtype=object)}


def _engine():
    eng = Engine()
    eng.execute("CREATE STREAM A (k INT, x DOUBLE, g STRING) TIMESTAMP ts;"
                "CREATE STREAM B (k INT, x DOUBLE, g STRING) TIMESTAMP ts")
    return eng


def _win(d, tau, w=W):
    m = (d["ts"] > tau - w) & (d["ts"] <= tau)
    return pd.DataFrame({c: v[m] for c, v in d.items()})


def _join_oracle(a, b, tau):
    wa, wb = _win(a, tau), _win(b, tau)
    m = wa[["k", "x"]].merge(wb[["k", "g"]], on="k")
    return sorted(map(tuple, m[["k", "x", "g"]].itertuples(index=False, name=None)))


def _agg_oracle(a, tau):
    wa = _win(a, tau)
    g = wa.groupby("g").agg(n=("x", "size"), s=("x", "sum")).reset_index()
    return sorted(map(tuple, g[["g", "n", "s"]].itertuples(index=False, name=None)))


def _rows(df, cols):
    return sorted(tuple(r) for r in df[cols].itertuples(index=False, name=None))


def _concat(parts):
    return {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}


def _feed(eng, rng, n_batches, per_batch, t0=0.0, span=10.0, on_batch=None):
    """Push ``n_batches`` rounds of one A and one B batch; returns all pushed data."""
    seen_a, seen_b = [], []
    for i in range(n_batches):
        lo, hi = t0 + i * span, t0 + (i + 1) * span
        a, b = _stream(rng, per_batch, lo, hi), _stream(rng, per_batch, lo, hi)
        eng.push("A", a)
        eng.push("B", b)
        seen_a.append(a)
        seen_b.append(b)
        if on_batch is not None:
            on_batch(i)
    return _concat(seen_a), _concat(seen_b)


# ------------------------------------------------------------------ (1) long stream, bounded memory
def test_long_stream_memory_bounded_by_window_state():
    rng = np.random.default_rng(7)
    eng = _engine()
    qj, qa = eng.register(JOIN), eng.register(AGG)
    cap = 20_000
    for q in (qj, qa):
        q.set_knob("retain_changes", cap)
        assert q.knobs()["retain_changes"] == cap
    n_batches, per = 50, 5_000                       # 2 × 50 × 5 000 = 500 000 tuples
    data_a, data_b = [], []
    peak = {"entries": 0}

    def check(i):
        for q in (qj, qa):
            st = q.stats()
            assert st["retained_changes"] <= cap
            assert len(q.changes()) == st["retained_changes"]
            # maintained relations hold O(window state) entries, never O(history)
            peak["entries"] = max(peak["entries"], len(q._live), len(q._base))
        if i % 10 == 9:                              # brute-force check at the current clock
            a, b = _concat(data_a), _concat(data_b)
            tau = qj.clock
            assert _rows(qj.snapshot(), ["k", "x", "g"]) == _join_oracle(a, b, tau)
            assert qj.stats()["live_rows"] == len(_join_oracle(a, b, tau))
            assert _rows(qa.snapshot(), ["g", "n", "s"]) == _agg_oracle(a, qa.clock)
            assert qa.stats()["live_rows"] == len(_agg_oracle(a, qa.clock))

    for i in range(n_batches):
        lo, hi = i * 10.0, (i + 1) * 10.0
        a, b = _stream(rng, per, lo, hi), _stream(rng, per, lo, hi)
        eng.push("A", a)
        eng.push("B", b)
        data_a.append(a)
        data_b.append(b)
        check(i)
    st = qj.stats()
    assert st["changes_out"] > 10 * cap                  # the history really was long
    assert st["snapshot_from"] is not None and st["snapshot_from"] > 0.9 * qj.clock
    # window state: ≤ 2 × 1000 tuples per stream in 2 s, join ≤ a few thousand rows
    assert peak["entries"] < 10_000
    assert qa.stats()["live_rows"] <= 40
    ops_state = qj.stats()["state_rows"]
    assert ops_state < 5_000


# ------------------------------------------------------------------ (2) snapshots in / out of the retained range
def test_snapshot_exact_inside_retained_range_and_error_before():
    rng = np.random.default_rng(11)
    eng = _engine()
    qj, qa = eng.register(JOIN), eng.register(AGG)
    qj.set_knob("retain_changes", 3_000)
    qa.set_knob("retain_changes", 500)
    a, b = _feed(eng, rng, 12, 2_000)
    for q, oracle, cols in ((qj, lambda t: _join_oracle(a, b, t), ["k", "x", "g"]),
                            (qa, lambda t: _agg_oracle(a, t), ["g", "n", "s"])):
        t0 = q.snapshot_from
        assert np.isfinite(t0) and t0 < q.clock
        assert q.stats()["snapshot_from"] == t0
        ch = q.changes()
        assert ch.at.min() >= t0                              # the log starts at the checkpoint
        times = np.concatenate([[t0, q.clock, (t0 + q.clock) / 2],
                                rng.choice(ch.at, 15), rng.uniform(t0, q.clock, 10)])
        for t in map(float, times):
            assert _rows(q.snapshot(t), cols) == oracle(t), (q.sql, t)
        for t in (t0 - 1e-6, t0 - 3.0, 0.5):
            with pytest.raises(HistoryUnavailable, match=r"available for t >= ") as ei:
                q.snapshot(t)
            assert f"{t0:g}" in str(ei.value)
            assert isinstance(ei.value, SketchQLError)


def test_retain_seconds_bounds_the_log_by_time():
    rng = np.random.default_rng(5)
    eng = _engine()
    q = eng.register(AGG)
    q.set_knob("retain_changes", None)
    q.set_knob("retain_seconds", 5.0)
    a, _ = _feed(eng, rng, 6, 500)
    ch = q.changes()
    assert ch.at.min() >= q.clock - 5.0
    assert q.snapshot_from < q.clock - 5.0 <= q.snapshot_from + 5.0
    for t in map(float, np.linspace(q.clock - 5.0, q.clock, 12)):
        assert _rows(q.snapshot(t), ["g", "n", "s"]) == _agg_oracle(a, t)
    with pytest.raises(HistoryUnavailable):
        q.snapshot(q.clock - 20.0)
    with pytest.raises(SketchQLError, match="retain_seconds"):
        q.set_knob("retain_seconds", -1)
    with pytest.raises(SketchQLError, match="retain_changes"):
        q.set_knob("retain_changes", 2.5)


def test_unbounded_retention_keeps_full_history():
    rng = np.random.default_rng(3)
    eng = _engine()
    q = eng.register(AGG)
    q.set_knob("retain_changes", None)
    a, _ = _feed(eng, rng, 4, 300)
    assert q.snapshot_from == -np.inf and q.stats()["snapshot_from"] is None
    assert len(q.changes()) == q.stats()["changes_out"]
    for t in (0.0, 0.5, 7.3, 21.0, q.clock):
        assert _rows(q.snapshot(t), ["g", "n", "s"]) == _agg_oracle(a, t)


# ------------------------------------------------------------------ (3) poll: exactly once / missed
def _flat(batches):
    from sketchql.operators.changes import Changes
    ch = Changes.concat(list(batches))
    if not len(ch):
        return []
    df = ch.to_pandas()
    return list(zip(df["__at"], df["__sign"], df["__rid"], *(df[c] for c in ch.names)))


@pytest.mark.parametrize("sql", [AGG, JOIN])
def test_poll_exactly_once_when_keeping_up(sql):
    rng = np.random.default_rng(21)
    eng = _engine()
    q, ref = eng.register(sql), eng.register(sql)
    cap = 2_000                                       # above one step's output (≤ ~1 600 rows here)
    q.set_knob("retain_changes", cap)
    ref.set_knob("retain_changes", None)
    got, missed = [], []

    def drain(_):
        r = q.poll()
        got.extend(r)
        missed.append(r.missed)

    _feed(eng, rng, 15, 400, on_batch=drain)
    assert sum(missed) == 0 and q.missed == 0
    assert q.stats()["changes_out"] > 3 * cap                   # the log did wrap around
    assert _flat(got) == _flat([q._view(ref.changes())])        # every change, in order, once
    assert q.poll() == [] and q.poll().missed == 0


@pytest.mark.parametrize("sql", [AGG, JOIN])
def test_poll_reports_missed_rows_when_falling_behind(sql):
    rng = np.random.default_rng(22)
    eng = _engine()
    q, ref = eng.register(sql), eng.register(sql)
    cap = 2_000
    q.set_knob("retain_changes", cap)
    ref.set_knob("retain_changes", None)
    _feed(eng, rng, 1, 400)
    first = q.poll()                                  # keeps up at first
    assert first.missed == 0
    n_before = len(_flat(first))
    _feed(eng, rng, 10, 400, t0=10.0)                 # then falls behind
    late = q.poll()
    full = _flat([q._view(ref.changes())])
    got = _flat(late)
    assert late.missed > 0 and q.missed == late.missed
    assert n_before + late.missed + len(got) == len(full)       # nothing lost silently
    assert got == full[len(full) - len(got):]                   # the newest rows, in order
    assert len(got) <= cap
    assert q.poll() == [] and q.poll().missed == 0
