"""The compiled confidence checks of T4's adaptive G1 insert
(``kernels.adaptive_checks``) give the numpy block's index bit for bit:
same zones (boundaries, reasons, counts, confidences), same sketches, same
canonical bytes -- over drifting and stationary streams, batch sizes from 1
to thousands, odd and even sketch depths."""
import numpy as np
import pytest

from sketchql.index import IndexConfig, StreamIndex, SummaryDeclaration
from sketchql.index import ingest_side


def _state(ix):
    def det(a):
        return None if a is None else np.asarray(a).tobytes()
    zones = sorted((z.id, z.gran, float(z.start), z.n, getattr(z, "last_confidence", None), z.n_total, z.n_pending,
                    det(getattr(z, "total", None)), det(getattr(z, "pending", None))) for _, z in ix._live())
    return zones, dict(ix.counters, ingest_seconds=0.0)


def _stream(seed, n, drift):
    rng = np.random.default_rng(seed)
    ts = np.cumsum(rng.exponential(0.01, n))
    if drift:   # popularity jumps every ~3 s: the confidence drops and zones start on "change"
        phase = (ts // 3.0).astype(np.int64)
        vals = (rng.zipf(1.4, n) + 37 * phase) % 400
    else:
        vals = rng.integers(0, 50, n)
    return vals.astype(np.int64), ts


@pytest.mark.parametrize("d,w,nb", [(3, 16, 256), (5, 64, 64), (4, 32, 16)])
@pytest.mark.parametrize("drift", [True, False])
def test_compiled_checks_equal_the_numpy_block(monkeypatch, d, w, nb, drift):
    vals, ts = _stream(d * 10 + int(drift), 12000, drift)
    out = []
    for compiled in (True, False):
        monkeypatch.setattr(ingest_side, "COMPILED_CHECKS", compiled)
        decl = SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=4)
        ix = StreamIndex(decl, IndexConfig(structure="T4", n_buckets=nb, w=w, d=d, seed=3, check_every=64))
        rng = np.random.default_rng(1)
        a = 0
        while a < len(ts):
            b = min(len(ts), a + int(rng.choice([1, 7, 50, 300, 2500])))
            ix.ingest(vals[a:b], ts[a:b])
            a = b
        out.append((_state(ix), ix.to_bytes()))
    (s1, b1), (s2, b2) = out
    assert s1 == s2
    assert b1 == b2
    assert s1[1]["zones_change"] > 0 or not drift      # the checks did cut zones
