"""The timestamp-bounded cell scan (``sketchql.index.cellscan``) and the
bounded ``StreamIndex.scan_matching_many`` that PT-Join probes with (issue
16), against brute-force oracles: windows on cell boundaries, equal
timestamps, unsorted cells (late tuples), merged zones' handles.
"""
import numpy as np
import pytest

from sketchql.index import IndexConfig, StreamIndex, SummaryDeclaration
from sketchql.index import cellscan
from sketchql.index.results import split_cell


def _chunk(rng, n_buckets=5, n=300, n_vals=4, ties=True, sort=True):
    """A chunk: tuples grouped by bucket, timestamps sorted inside a bucket (many ties)."""
    b = np.sort(rng.integers(0, n_buckets, n))
    ts = rng.integers(0, 40, n).astype(np.float64) if ties else rng.uniform(0, 40, n)
    V = rng.integers(0, n_vals, n).astype(np.int64)
    off = np.zeros(n_buckets + 1, np.int64)
    off[1:] = np.cumsum(np.bincount(b, minlength=n_buckets))
    if sort:
        o = np.lexsort((ts, b))
        ts = ts[o]
    return V, ts, off


def _windows(rng, T, off, k=200):
    """Probe rows whose bounds sit on cell boundaries, on tuple timestamps, between them, outside."""
    nb = off.shape[0] - 1
    b = rng.integers(0, nb, k)
    tf = np.empty(k)
    tt = np.empty(k)
    for i in range(k):
        cell = T[off[b[i]]:off[b[i] + 1]]
        cand = [-1.0, 100.0, 7.5, 20.0]
        if cell.shape[0]:
            cand += [cell[0], cell[-1], cell[cell.shape[0] // 2], np.nextafter(cell[0], -np.inf)]
        lo, hi = sorted(rng.choice(cand, 2))
        tf[i], tt[i] = lo, hi
    return b, tf, tt


def _brute(V, T, off, b, keys, tf, tt):
    out = []
    for r in range(b.shape[0]):
        for i in range(off[b[r]], off[b[r] + 1]):
            if V[i] == keys[r] and tf[r] < T[i] <= tt[r]:
                out.append((r, i))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("ties", [True, False])
def test_scan_cells_equals_brute_force(seed, ties):
    rng = np.random.default_rng(seed)
    V, T, off = _chunk(rng, ties=ties)
    assert cellscan.cells_sorted(T, off)
    b, tf, tt = _windows(rng, T, off)
    keys = rng.integers(0, 4, b.shape[0]).astype(np.int64)
    zmin, zmax = T.min(), T.max()
    need_lo, need_hi = zmin <= tf, zmax > tt
    row, pos, work = cellscan.scan_cells(V, T, off, b, keys, tf, tt, need_lo, need_hi, True)
    assert list(zip(row.tolist(), pos.tolist())) == _brute(V, T, off, b, keys, tf, tt)
    # work = exactly the comparisons made: searches + the window's run, never the whole cell when it cuts
    want = sum(cellscan.reference_compares(T[off[b[r]]:off[b[r] + 1]], tf[r], tt[r], bool(need_lo[r]),
                                           bool(need_hi[r])) for r in range(b.shape[0]))
    assert work == want
    full = int(sum(off[x + 1] - off[x] for x in b))
    inside = sum(int(((T[off[x]:off[x + 1]] > f) & (T[off[x]:off[x + 1]] <= t)).sum()) for x, f, t in zip(b, tf, tt))
    assert inside <= work and work < full


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_scan_cells_with_expiry_cursor(seed):
    """The per-cell expiry cursor: batches of probes whose window starts mostly rise
    (some fall back behind the cursor) find the brute-force matches, never cost more
    than the search from the cell's start, and keep the cursor's invariant."""
    rng = np.random.default_rng(seed)
    V, T, off = _chunk(rng, ties=bool(seed % 2))
    nb = off.shape[0] - 1
    cur = cellscan.new_cursor(nb)
    zmin, zmax = T.min(), T.max()
    total_cur = total_ref = 0
    for step in range(12):
        k = 40
        b = rng.integers(0, nb, k)
        base = -1.0 + 3.5 * step
        tf = base + rng.choice([0.0, 0.0, 0.5, -2.0, 2.5], k)
        tf = np.where(rng.random(k) < 0.2, T[off[b]].astype(np.float64), tf)   # on a tuple's timestamp
        tt = tf + rng.choice([5.0, 20.0, 100.0], k)
        keys = rng.integers(0, 4, k).astype(np.int64)
        need_lo, need_hi = zmin <= tf, zmax > tt
        row, pos, work = cellscan.scan_cells(V, T, off, b, keys, tf, tt, need_lo, need_hi, True, cur)
        assert list(zip(row.tolist(), pos.tolist())) == _brute(V, T, off, b, keys, tf, tt)
        _, _, ref = cellscan.scan_cells(V, T, off, b, keys, tf, tt, need_lo, need_hi, True)
        full = int(sum(off[x + 1] - off[x] for x in b))
        inside = sum(int(((T[off[x]:off[x + 1]] > f) & (T[off[x]:off[x + 1]] <= t)).sum())
                     for x, f, t in zip(b, tf, tt))
        assert inside <= work <= full
        total_cur += work
        total_ref += ref
        for x in range(nb):   # the first cur[0][x] tuples are <= cur[1][x], the next one is newer
            cell = T[off[x]:off[x + 1]]
            n = int(cur[0][x])
            assert n <= cell.shape[0]
            assert (cell[:n] <= cur[1][x]).all()
            assert n == cell.shape[0] or cell[n] > cur[1][x]
    assert total_cur < total_ref


def test_scan_cells_whole_cell_inside_the_window_costs_the_cell():
    """No search when the zone's range is inside the window: work = the cell, as a full scan."""
    rng = np.random.default_rng(3)
    V, T, off = _chunk(rng)
    b = np.arange(off.shape[0] - 1)
    keys = np.zeros(b.shape[0], np.int64)
    tf, tt = np.full(b.shape[0], -1.0), np.full(b.shape[0], 100.0)
    row, pos, work = cellscan.scan_cells(V, T, off, b, keys, tf, tt, np.zeros(b.shape[0], bool),
                                         np.zeros(b.shape[0], bool), True)
    assert work == int(off[-1])
    assert list(zip(row.tolist(), pos.tolist())) == _brute(V, T, off, b, keys, tf, tt)


def test_unsorted_cells_are_scanned_in_full():
    rng = np.random.default_rng(4)
    V, T, off = _chunk(rng, sort=False)
    assert not cellscan.cells_sorted(T, off)
    b, tf, tt = _windows(rng, T, off)
    keys = rng.integers(0, 4, b.shape[0]).astype(np.int64)
    row, pos, work = cellscan.scan_cells(V, T, off, b, keys, tf, tt, np.ones(b.shape[0], bool),
                                         np.ones(b.shape[0], bool), False)
    assert list(zip(row.tolist(), pos.tolist())) == _brute(V, T, off, b, keys, tf, tt)
    assert work == int(sum(off[x + 1] - off[x] for x in b))


def test_cells_sorted_only_looks_inside_buckets():
    T = np.array([1.0, 2.0, 2.0, 0.5, 3.0])
    assert cellscan.cells_sorted(T, np.array([0, 3, 5]))        # the drop is where bucket 1 starts
    assert not cellscan.cells_sorted(T, np.array([0, 5]))
    assert cellscan.cells_sorted(np.zeros(0), np.array([0, 0]))


def test_other_dtypes_fall_back_to_full_scans():
    V = np.array(["a", "b", "a"])
    T = np.array([1.0, 2.0, 3.0])
    off = np.array([0, 3], np.int64)
    row, pos, work = cellscan.scan_cells(V, T, off, np.array([0]), np.array(["a"]), np.array([1.0]),
                                         np.array([3.0]), np.array([True]), np.array([False]))
    assert pos.tolist() == [2] and work == 3


# ---------------------------------------------------------------- the index's bounded scan
def _index(lateness=0.0, depth=3):
    decl = SummaryDeclaration("s", "S", "k", granularity=2.0, rate=2, depth=depth)
    return StreamIndex(decl, IndexConfig(structure="T4", n_buckets=4, w=16, seed=1, allowed_lateness=lateness))


def _live_cells(ix):
    return [(z.id, b) for _, z in ix._live() if z.n for b in range(4)]


def _brute_index(v, t, rid, stored, key, tf, tt):
    m = (v == key) & (t > tf) & (t <= tt) & np.isin(rid, stored)
    return set(rid[m].tolist())


@pytest.mark.parametrize("lateness", [0.0, 1.5])
def test_bounded_index_scan_equals_unbounded_and_brute_force(lateness):
    rng = np.random.default_rng(7)
    n = 3000
    t = np.round(np.cumsum(rng.exponential(0.01, n)), 2)              # ties
    if lateness:
        late = rng.random(n) < 0.05
        t = np.where(late, t - rng.uniform(0, 1.0, n), t)             # accepted late tuples: unsorted cells
    v = rng.integers(0, 12, n).astype(np.int64)
    rid = np.arange(n, dtype=np.int64)
    ix = _index(lateness)
    for a in range(0, n, 250):
        ix.ingest(v[a:a + 250], t[a:a + 250], rid[a:a + 250])
    stored = ix.window_tuples(-np.inf, np.inf).row_ids
    from sketchql.index.results import cell_handle
    cells = np.array([int(cell_handle(zid, b)) for zid, b in _live_cells(ix)], np.int64)
    k = cells.shape[0]
    keys = rng.integers(0, 12, k).astype(np.int64)
    tt = rng.choice(t, k)
    tf = tt - rng.choice([0.5, 3.0, 100.0], k)
    mb = ix.scan_matching_many(cells, keys, tf, tt, bounded=True)
    mu = ix.scan_matching_many(cells, keys, tf, tt)
    assert sorted(zip(mb.region.tolist(), mb.row_ids.tolist())) == sorted(zip(mu.region.tolist(), mu.row_ids.tolist()))
    assert mb.work <= mu.work
    if not lateness:
        assert mb.work < mu.work
    for r in range(k):
        zid, b = split_cell(cells[r])
        z = ix._resolve(int(zid))
        in_cell = z.cell(int(b))[2]
        got = set(mb.row_ids[mb.region == r].tolist())
        assert got == _brute_index(v, t, rid, in_cell, keys[r], tf[r], tt[r])
    # the single-cell form agrees
    one = ix.scan_matching(int(cells[0]), keys[0], tf[0], tt[0], bounded=True)
    assert set(one.row_ids.tolist()) == set(mb.row_ids[mb.region == 0].tolist())


def test_merged_zone_handle_scans_only_its_own_tuples():
    """After COLLAPSE a handle of a merged zone resolves to the merged cell; bounded, it
    scans only the tuples its own zone held (they sit in its time range), so two handles
    of one merged cell never return the same tuple."""
    rng = np.random.default_rng(9)
    n = 1200
    t = np.cumsum(rng.exponential(0.01, n))                            # distinct timestamps
    v = rng.integers(0, 6, n).astype(np.int64)
    ix = _index(depth=4)
    from sketchql.index.results import cell_handle
    own = {}
    for a in range(n):                                                 # one tuple per ingest: the zones'
        for _, z in ix._live():                                        # content right before each merge
            if z.n:
                own[z.id] = set(z.all_tuples()[2].tolist())
        ix.ingest(v[a:a + 1], t[a:a + 1], np.arange(a, a + 1))
    for _, z in ix._live():
        own[z.id] = set(z.all_tuples()[2].tolist())
    merged = [zid for zid in own if zid not in ix._zones and ix._resolve(zid) is not None]
    assert merged, "the stream should have collapsed some zones"
    for zid in merged[:20]:
        for key in range(6):
            cells = np.array([int(cell_handle(zid, b)) for b in range(4)], np.int64)
            m = ix.scan_matching_many(cells, np.full(4, key), -np.inf, np.inf, bounded=True)
            z_rids = np.array(sorted(own[zid]), np.int64)
            want = set(z_rids[v[z_rids] == key].tolist()) if z_rids.shape[0] else set()
            assert set(m.row_ids.tolist()) == want
            assert len(m.row_ids) == len(want)


@pytest.mark.parametrize("lateness", [0.0, 1.5])
def test_index_expiry_cursor_across_ingests(lateness):
    """The zones' expiry cursors survive appends and compactions (a cell's old tuples keep
    their place): probes interleaved with ingests, window starts rising (some behind),
    return what the cursor-less scan returns, for no more work."""
    rng = np.random.default_rng(11)
    n = 4000
    t = np.round(np.cumsum(rng.exponential(0.01, n)), 2)
    if lateness:
        late = rng.random(n) < 0.05
        t = np.where(late, t - rng.uniform(0, 1.0, n), t)
    v = rng.integers(0, 12, n).astype(np.int64)
    rid = np.arange(n, dtype=np.int64)
    a_ix, b_ix = _index(lateness), _index(lateness)
    cur = {}
    from sketchql.index.results import cell_handle
    wa = wb = 0
    for a in range(0, n, 200):
        for ix in (a_ix, b_ix):
            ix.ingest(v[a:a + 200], t[a:a + 200], rid[a:a + 200])
        now = float(t[a:a + 200].max())
        cells = np.array([int(cell_handle(zid, b)) for zid, b in _live_cells(a_ix)], np.int64)
        k = cells.shape[0]
        keys = rng.integers(0, 12, k).astype(np.int64)
        tt = now - rng.choice([0.0, 0.0, 0.3], k)
        tf = tt - rng.choice([2.0, 2.0, 3.0, 1.0], k)
        ma = a_ix.scan_matching_many(cells, keys, tf, tt, bounded=True, cursors=cur)
        mb = b_ix.scan_matching_many(cells, keys, tf, tt, bounded=True)
        assert ma.region.tolist() == mb.region.tolist() and ma.row_ids.tolist() == mb.row_ids.tolist()
        assert ma.work <= mb.work
        wa, wb = wa + ma.work, wb + mb.work
    if not lateness:
        assert wa < wb and len(cur)


def test_run_end_costs_one_tuple_beyond_the_run():
    """The run's end is read on from its start (issue 16): with the window's start at the
    cell's start (no search) and k >= 1 newer tuples cut off, the scan examines the run and
    exactly one newer tuple, whatever k (galloping back from the cell's end examined ~2 log2(k+1)+1)."""
    T = np.arange(100, dtype=np.float64)                 # one cell, one tuple per second
    V = np.zeros(100, np.int64)
    off = np.array([0, 100], np.int64)
    for t_to in (0.0, 9.0, 50.0, 98.0):
        run = int(t_to) + 1                              # tuples 0..t_to
        row, pos, work = cellscan.scan_cells(V, T, off, np.array([0]), np.array([0]), np.array([-1.0]),
                                             np.array([t_to]), np.array([False]), np.array([True]), True)
        assert pos.tolist() == list(range(run))
        assert work == run + 1
        assert work == cellscan.reference_compares(T, -1.0, t_to, False, True)
    # nothing cut at the end: the run alone; an empty run whose first tuple the start's search read: 1
    _, _, work = cellscan.scan_cells(V, T, off, np.array([0]), np.array([0]), np.array([-1.0]), np.array([99.0]),
                                     np.array([False]), np.array([True]), True)
    assert work == 100
    _, pos, work = cellscan.scan_cells(V, T, off, np.array([0]), np.array([0]), np.array([10.5]),
                                       np.array([10.7]), np.array([True]), np.array([True]), True)
    assert pos.shape[0] == 0 and work == cellscan.reference_compares(T, 10.5, 10.7, True, True)


def test_source_cursors_per_merged_handle():
    """IndexSource.scan_many(cursor=True) keeps an expiry cursor per merged zone's handle
    (issue 16): probes of live and merged handles interleaved with ingests (COLLAPSE merges
    zones) return exactly the cursor-less scan's matches, for no more work."""
    from sketchql.index.results import cell_handle
    from sketchql.operators.promising.sources import IndexSource

    rng = np.random.default_rng(21)
    n = 6000
    t = np.cumsum(rng.exponential(0.01, n))
    v = rng.integers(0, 12, n).astype(np.int64)
    rid = np.arange(n, dtype=np.int64)
    a, b = IndexSource(20.0, index=_index(depth=4)), IndexSource(20.0, index=_index(depth=4))
    c = IndexSource(20.0, index=_index(depth=4))
    c._cursor_groups = lambda cells, cur: None          # the merged cell's one cursor (before issue 16)
    seen, merged_rows, wa, wb, wc = {}, 0, 0, 0, 0
    for s in range(0, n, 150):
        for src in (a, b, c):
            src.ingest(v[s:s + 150], t[s:s + 150], rid[s:s + 150])
        for _, z in a.ix._live():
            if z.n:
                seen.setdefault(z.id, float(z.min_ts))
        now = float(t[min(s + 150, n) - 1])
        zids = [zid for zid in seen if a.ix._resolve(zid) is not None]
        cells = np.array([int(cell_handle(zid, bk)) for zid in zids for bk in range(4)], np.int64)
        k = cells.shape[0]
        keys = rng.integers(0, 12, k).astype(np.int64)
        tt = now - rng.choice([0.0, 0.0, 0.5], k)
        tf = tt - rng.choice([3.0, 3.0, 6.0, 1.0], k)
        got = a.scan_many(cells, keys, tf, tt, cursor=True)
        ref = b.scan_many(cells, keys, tf, tt)
        assert got[0].tolist() == ref[0].tolist() and got[1].tolist() == ref[1].tolist()
        shared = c.scan_many(cells, keys, tf, tt, cursor=True)
        assert shared[1].tolist() == ref[1].tolist()
        assert got[3] <= ref[3]
        wa, wb, wc = wa + got[3], wb + ref[3], wc + shared[3]
        merged_rows += sum(zid not in a.ix._zones for zid in zids) * 4
    assert merged_rows > 0 and a.__dict__.get("_handle_cursors")
    assert wa < wb and wc < wb
    # here every window start rises together, which the merged cell's one cursor serves as well
    # (measured 42,796 vs 38,128 compares); PT-Join's merged handles are its oldest entries
    # (sources.IndexSource._cursor_groups, measured on bench_promising)
