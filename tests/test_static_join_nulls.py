"""StaticJoin: a NULL (NaN / None) key equals nothing, on either side (SQL), checked against a
brute-force nested loop over random two-column keys with NULLs on both sides."""
from __future__ import annotations

import numpy as np

from sketchql.engine.batches import Batch
from sketchql.operators.changes import Changes
from sketchql.operators.exact.join import StaticJoin


def _null(v):
    return v is None or (isinstance(v, float) and np.isnan(v))


def test_null_keys_never_match_brute_force():
    rng = np.random.default_rng(11)
    for trial in range(20):
        nt, ns = int(rng.integers(1, 30)), int(rng.integers(1, 40))
        ta = rng.integers(0, 4, nt).astype(float)
        ta[rng.random(nt) < 0.25] = np.nan
        tb = np.array([None if rng.random() < 0.2 else str(rng.integers(0, 3)) for _ in range(nt)], dtype=object)
        sa = rng.integers(0, 4, ns).astype(float)
        sa[rng.random(ns) < 0.25] = np.nan
        sb = np.array([None if rng.random() < 0.2 else str(rng.integers(0, 3)) for _ in range(ns)], dtype=object)
        sj = StaticJoin({"a": ta, "b": tb, "tid": np.arange(nt)}, on=[("a", "a"), ("b", "b")], prefix="t.")
        ch = Changes.inserts(Batch({"a": sa, "b": sb, "sid": np.arange(ns)}, ts=np.arange(ns, dtype=float)),
                             at=np.arange(ns, dtype=float), rid=np.arange(ns))
        out = sj.push(ch)
        got = sorted(zip(out.columns["sid"].tolist(), out.columns["t.tid"].tolist()))
        want = sorted((i, j) for i in range(ns) for j in range(nt)
                      if not any(_null(x) for x in (sa[i], sb[i], ta[j], tb[j]))
                      and sa[i] == ta[j] and sb[i] == tb[j])
        assert got == want, trial
