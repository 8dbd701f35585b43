"""PT-Selection / PT-Aggregates on the stream attribute's shared value layer.

Workload: one stream S (k INT, v DOUBLE), Zipf keys over 1..1000, a declared
summary on S(k) (the index the estimate endpoint serves).  Standing queries,
each with its own operator (``share_plans`` off, so selections are not pooled
into one PTSelection and only the index is shared):

* selections ``SELECT S.k, S.v FROM S [RANGE 30] WHERE S.k BETWEEN lo AND hi
  WITH PREFERENCE desc S.k WITHIN u PROBES PER TUPLE`` over ten different ranges;
* aggregates ``SUM | AVG | COUNT | MEDIAN (S.v)`` over ten ranges, same window.

Measured for 1 and 10 queries of each kind, with ``share_indexes`` on (every
operator reads the value layer of the declared index; a query keeps only its
row map) and off (every operator builds its private value layer):

* index memory (peak over the run, sampled after every push): the declared
  index's bytes + its value layers + the operators' private layers / row maps
  (each distinct structure once); and its *value side* alone (without the
  declared index's sketch tables and tuple lists, which every configuration
  maintains for the estimate endpoint);
* results: with an ample budget every selection equals the brute-force window
  and every SUM / AVG the brute-force aggregate; at a tight budget the shared
  and the private runs give identical answers (same seeds and budgets, same
  algorithm).

Summary line keys: ``pt_single_index_memory_ratio_10q`` (10 queries / 1 on
the shared layer: the largest of the selection and aggregate ratios, of the
whole index memory and of its value side alone; target <= 1.2), ``pt_single_sel_ratio_10q``, ``pt_single_agg_ratio_10q``,
``pt_single_private_ratio_10q`` (the same without sharing, for scale),
``pt_single_value_side_ratio_10q`` / ``pt_single_value_side_private_ratio_10q``
(value side only, shared / private),
``shared_equals_private`` and ``full_budget_exact`` (1 / 0).

    .venv/bin/python benchmarks/bench_pt_single.py --quick
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from sketchql.engine import Engine
from sketchql.index.value_layer import layers_nbytes

W = 30.0
DDL = """
CREATE STREAM S (k INT, v DOUBLE) TIMESTAMP ts;
CREATE SUMMARY s_k ON S (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)
"""
FUNCS = ("SUM", "AVG", "COUNT", "MEDIAN")


def generate(duration: float, rate: float, seed: int = 3, items: int = 1000):
    rng = np.random.default_rng(seed)
    n = int(duration * rate)
    ts = np.sort(rng.uniform(0.0, duration, n))
    k = np.minimum(rng.zipf(1.3, n), items).astype(np.int64)
    k = (k * 7919) % items + 1                       # popular keys spread over the domain
    v = rng.gamma(2.0, 5.0, n) + 0.01 * k
    return ts, k, v


def ranges(n: int, seed: int = 5):
    rng = np.random.default_rng(seed)
    lo = rng.integers(1, 700, n)
    return [(int(a), int(a + rng.integers(50, 300))) for a in lo]


def sql_of(kind: str, i: int, lo: int, hi: int, units: float) -> str:
    where = f"FROM S [RANGE {W:g}] WHERE S.k BETWEEN {lo} AND {hi} "
    pref = f"WITH PREFERENCE {'desc' if kind == 'sel' else 'weighted'} S.k WITHIN {units:g} PROBES PER TUPLE"
    if kind == "sel":
        return "SELECT S.k, S.v " + where + pref
    f = FUNCS[i % len(FUNCS)]
    arg = "*" if f == "COUNT" else "S.v"
    return f"SELECT {f}({arg}) AS a " + where + pref


def index_memory(eng) -> tuple:
    """(all, value side): the declared indexes (sketch tables and tuple lists) with their value
    layers plus each PT operator's own part (row map or private layer), each once; the value
    side leaves the declared index's own bytes out (maintained for the estimate endpoint in
    every configuration alike)."""
    seen, tot, side = set(), 0, 0
    for d in eng.catalog.summaries:
        for ix in (d.index or {}).values():
            if id(ix) not in seen:
                seen.add(id(ix))
                tot += int(ix.nbytes)
                side += layers_nbytes(ix)
    for q in eng.queries:
        for n in q.plan.nodes:
            if n.kind in ("pt_select", "pt_aggregate") and id(n.op.op) not in seen:
                seen.add(id(n.op.op))
                side += int(n.op.index_nbytes())
    return tot + side, side


def run(data, kind: str, n_queries: int, share: bool, units: float, batch: float):
    ts, k, v = data
    eng = Engine(seed=1)
    eng.execute(DDL)
    eng.set_control("share_plans", False)
    eng.set_control("share_indexes", share)
    qs = [eng.register(sql_of(kind, i, lo, hi, units)) for i, (lo, hi) in enumerate(ranges(n_queries))]
    peak, vpeak, snaps = 0, 0, []
    t0 = time.perf_counter()
    edges = np.searchsorted(ts, np.arange(batch, ts[-1] + batch, batch), side="right")
    a = 0
    for e in edges:
        if e > a:
            eng.push("S", {"ts": ts[a:e], "k": k[a:e], "v": v[a:e]})
            a = e
            m, vs = index_memory(eng)
            peak, vpeak = max(peak, m), max(vpeak, vs)
    secs = time.perf_counter() - t0
    now = float(ts[-1])
    for q in qs:
        snaps.append(q.snapshot())
    return {"peak": peak, "vpeak": vpeak, "secs": secs, "snaps": snaps, "now": now, "queries": qs}


def _same(a, b) -> bool:
    if list(a.columns) != list(b.columns) or len(a) != len(b):
        return False
    x = a.sort_values(list(a.columns)).reset_index(drop=True)
    y = b.sort_values(list(b.columns)).reset_index(drop=True)
    return bool(((x == y) | (x.isna() & y.isna())).all().all())


def exact_check(data, res, kind: str) -> bool:
    ts, k, v = data
    now = res["now"]
    ok = True
    for i, ((lo, hi), snap) in enumerate(zip(ranges(len(res["snaps"])), res["snaps"])):
        m = (ts > now - W) & (ts <= now) & (k >= lo) & (k <= hi)
        if kind == "sel":
            ok &= sorted(snap["v"].tolist()) == sorted(v[m].tolist())
        else:
            f = FUNCS[i % len(FUNCS)]
            if f in ("SUM", "AVG"):
                want = v[m].sum() if f == "SUM" else v[m].mean()
                ok &= bool(abs(snap["a"].iloc[0] - want) <= 1e-6 * max(1.0, abs(want)))
    return bool(ok)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a small run (< 1 minute)")
    ap.add_argument("--duration", type=float, default=None)
    ap.add_argument("--rate", type=float, default=None)
    args = ap.parse_args(argv)
    dur = args.duration or (40.0 if args.quick else 120.0)
    rate = args.rate or (60.0 if args.quick else 150.0)
    data = generate(dur, rate)
    batch = 0.5
    print(f"stream S: {len(data[0]):,} tuples over {dur:g} s, window {W:g} s, batches of {batch:g} s")
    tight, ample = 3.0, 1e6
    ratios, priv, vratio, equal, exact = {}, {}, {}, True, True
    print("index memory = declared index + value layers + per-operator parts; value side = without the "
          "declared index's own bytes")
    print(f"{'kind':<5}{'queries':>8}{'shared bytes':>14}{'(value side)':>14}{'private bytes':>15}"
          f"{'(value side)':>14}{'shared s':>10}{'private s':>11}")
    for kind in ("sel", "agg"):
        mem = {}
        for nq in (1, 10):
            sh = run(data, kind, nq, True, tight, batch)
            pr = run(data, kind, nq, False, tight, batch)
            equal &= all(_same(a, b) for a, b in zip(sh["snaps"], pr["snaps"]))
            mem[nq] = (sh["peak"], pr["peak"], sh["vpeak"], pr["vpeak"])
            print(f"{kind:<5}{nq:>8}{sh['peak']:>14,}{sh['vpeak']:>14,}{pr['peak']:>15,}{pr['vpeak']:>14,}"
                  f"{sh['secs']:>10.2f}{pr['secs']:>11.2f}")
        ratios[kind] = mem[10][0] / mem[1][0]
        priv[kind] = mem[10][1] / mem[1][1]
        vratio[kind] = (mem[10][2] / mem[1][2], mem[10][3] / mem[1][3])
        full = run(data, kind, 10, True, ample, batch)
        exact &= exact_check(data, full, kind)
    # headline: the stricter of the whole index memory and its value side alone
    ratio = max(max(ratios.values()), max(v[0] for v in vratio.values()))
    pratio = max(priv.values())
    print(f"shared index memory 10 / 1 queries: selections {ratios['sel']:.3f}, aggregates {ratios['agg']:.3f}; "
          f"private layers: {priv['sel']:.3f}, {priv['agg']:.3f}")
    print(f"value side only, 10 / 1 queries: shared {vratio['sel'][0]:.3f} / {vratio['agg'][0]:.3f}, private "
          f"{vratio['sel'][1]:.3f} / {vratio['agg'][1]:.3f} (selections / aggregates)")
    print(f"shared = private answers at the tight budget: {equal}; ample budget = brute force: {exact}")
    print("target: pt_single_index_memory_ratio_10q <= 1.2: " + ("met" if ratio <= 1.2 else "MISSED"))
    print(f"pt_single_index_memory_ratio_10q={ratio:.3f} pt_single_sel_ratio_10q={ratios['sel']:.3f} "
          f"pt_single_agg_ratio_10q={ratios['agg']:.3f} pt_single_private_ratio_10q={pratio:.3f} "
          f"pt_single_value_side_ratio_10q={max(v[0] for v in vratio.values()):.3f} "
          f"pt_single_value_side_private_ratio_10q={max(v[1] for v in vratio.values()):.3f} "
          f"shared_equals_private={int(equal)} full_budget_exact={int(exact)}")


if __name__ == "__main__":
    main()
