"""Multi-query runtime: shared plans and indexes, and scheduling during bursts.

Workload: two streams A and B (k INT, v DOUBLE), Zipf keys, one declared
summary per stream on ``k``.  Twenty standing queries:

* ten exact queries over A and B sharing subexpressions: selections over
  windows of different sizes on one filtered stream, grouped aggregates over
  one window (two of them registered twice, as dashboards do), a windowed join
  registered twice with different projections;
* ten ``WITH PREFERENCE`` joins on ``A.k = B.k`` (desc / weighted / asc,
  different budgets) -- promising-tuple queries on one stream attribute.

Measured (one process, the same seeded data for every configuration):

1. *sharing*: the whole set with sharing on (shared window stores and
   operators, the declared index serving every PT join) and off (private
   windows and operators, a private index per PT join side, the declared
   summaries still maintained for the estimate endpoint).  Peak memory =
   bytes of every window / window store, operator synopsis, PT region index
   (each distinct index once) and per-query PT state (member store, seq
   mapping, priority queue), sampled after every push.  Result relations are
   not plan state and are left out for every query alike: the exact queries'
   result views, and the PT joins' produced pairs waiting for their expiry
   (``_pend_*``, printed apart as ``pt_results``).  Throughput = tuples pushed / wall
   seconds.  Both runs' results are checked to be equal.
2. *PT index memory*: region-index bytes (indexes + per-query mappings) for
   ten preference queries against one, sharing on.
3. *scheduling*: the exact queries under round robin and Chain with a bounded
   scheduler budget per push (bursts of arrivals, then idle time to drain);
   peak queued rows in the operators' input queues.

Summary line keys: sharing_memory_ratio (shared / unshared peak bytes),
pt_index_memory_ratio_10q (10 queries / 1), chain_peak_queue_ratio (Chain /
round robin), sharing_throughput_ratio (shared / unshared tuples/s),
pt_shared_equals_private (PT queries whose answers on the shared index equal
those on private indexes with the same seeds and budgets / PT queries where
that equality is defined: the index fed in lockstep with its joins, no
per-query filter or sample, no step that found the index ahead of its clock
-- ``IndexFeed.private_equivalent``).
Targets: < 0.5, <= 1.2, < 1, and every defined PT query equal.

    .venv/bin/python benchmarks/bench_plans.py --quick
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from sketchql.engine import Engine

DDL = """
CREATE STREAM A (k INT, v DOUBLE) TIMESTAMP ts;
CREATE STREAM B (k INT, v DOUBLE) TIMESTAMP ts;
CREATE SUMMARY sa ON A (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4);
CREATE SUMMARY sb ON B (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)
"""

EXACT = [
    "SELECT v FROM A [RANGE 10] WHERE v > 0.5",
    "SELECT k, v FROM A [RANGE 30] WHERE v > 0.5",
    "SELECT k FROM A [RANGE 60] WHERE v > 0.5",
    "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM A [RANGE 60] GROUP BY k",
    "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM A [RANGE 60] GROUP BY k",
    "SELECT k, MAX(v) AS m FROM B [RANGE 60] GROUP BY k",
    "SELECT k, MAX(v) AS m FROM B [RANGE 60] GROUP BY k",
    "SELECT A.k, A.v, B.v FROM A [RANGE 20], B [RANGE 20] WHERE A.k = B.k",
    "SELECT A.k, B.v FROM A [RANGE 20], B [RANGE 20] WHERE A.k = B.k",
    "SELECT v FROM B [RANGE 45]",
]
PT = [f"SELECT A.k, A.ts, B.ts FROM A, B WHERE A.k = B.k WITH PREFERENCE {p} A.k FADE FACTOR 0.8 "
      f"WINDOW 30 SECONDS WITHIN {b} PROBES PER TUPLE"
      for p, b in [("desc", 20), ("desc", 40), ("weighted", 20), ("weighted", 40), ("asc", 20),
                   ("desc", 10), ("weighted", 10), ("desc", 80), ("asc", 40), ("weighted", 80)]]


def generate(duration: float, rate: float, seed: int = 3, items: int = 500):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(2):
        n = int(duration * rate)
        ts = np.round(np.sort(rng.uniform(0, duration, n)), 4)
        p = 1.0 / np.arange(1, items + 1) ** 1.1
        k = rng.choice(items, size=n, p=p / p.sum()).astype(np.int64)
        out.append({"ts": ts, "k": k, "v": np.round(rng.random(n), 3)})
    return out


def _arrays_nbytes(obj, depth=0) -> int:
    """Bytes of the numpy arrays an object holds (attributes, dicts and lists of arrays)."""
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if depth > 2:
        return 0
    if isinstance(obj, dict):
        return sum(_arrays_nbytes(v, depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_arrays_nbytes(v, depth + 1) for v in obj[:64])
    d = getattr(obj, "__dict__", None)
    if d is None:
        return 0
    return sum(_arrays_nbytes(v, depth + 1) for k, v in d.items()
               if k not in ("ix", "index", "sources", "op", "shared", "store", "queue", "_engine")
               and not k.startswith("_pend_"))


def memory(eng) -> dict:
    """Peak-relevant bytes: windows / stores, operator synopses, region indexes, PT state, queues.

    ``pt_state`` is split in ``pt_parts``: ``queue_table`` (the entry columns, allocated capacity;
    a table shared by several queues once), ``queue_order`` (the priority order, the last popped
    batch and, on a shared table, the queue's row map), ``dedup`` (pairs already
    produced), ``members`` (the member columns the PT node keeps to build output rows) and
    ``other`` (sweep bookkeeping, backlog, pair log)."""
    from sketchql.engine.sharing import SharedConsumer, StoreScan
    seen, parts = set(), {"windows": 0, "operators": 0, "indexes": 0, "pt_state": 0, "queues": 0}
    pt_parts = {"queue_table": 0, "queue_order": 0, "dedup": 0, "members": 0, "other": 0}
    pt_results = 0
    for d in eng.catalog.summaries:                            # declared (and engine-declared) indexes
        for ix in (d.index or {}).values():
            seen.add(id(ix))
            parts["indexes"] += int(ix.nbytes)
    parts["indexes"] += int(eng.index_feed.nbytes)             # tuples waiting for the PT joins' clock
    for s in eng.sharing.stores.values():
        parts["windows"] += s.nbytes
    for q in eng.queries:
        for n in q.plan.nodes:
            op = n.op
            if isinstance(op, StoreScan):
                continue
            if isinstance(op, SharedConsumer):
                if id(op.shared) in seen:
                    continue
                seen.add(id(op.shared))
                parts["queues"] += sum(_arrays_nbytes(o) for _, o in op.shared.queue)
                op = op.shared.op
            inner = getattr(op, "op", None)
            if inner is not None and hasattr(inner, "sources"):     # PT node
                for s in inner.sources:
                    ix = s.ix
                    if id(ix) not in seen:
                        seen.add(id(ix))
                        parts["indexes"] += int(ix.nbytes)
                    parts["indexes"] += int(getattr(s, "mapping_nbytes", 0))
                pq = inner.queue
                if id(pq) not in seen:
                    seen.add(id(pq))
                    table = sum(b.nbytes for b in pq._buf.values())
                    pt_parts["queue_table"] += table
                    pt_parts["queue_order"] += int(pq.nbytes) - table      # order (+ row map on a shared table)
                    st = getattr(pq, "table", None)
                    if st is not None and id(st) not in seen:          # entry columns shared by several queues
                        seen.add(id(st))
                        pt_parts["queue_table"] += int(st.nbytes)
                dd = getattr(inner, "_dedup", None)
                pt_parts["dedup"] += sum(a.nbytes for a in dd.levels) if dd is not None else 0
                pt_parts["members"] += _arrays_nbytes(op)
                pt_parts["other"] += _arrays_nbytes({k: v for k, v in inner.__dict__.items()
                                                    if k not in ("_dedup", "queue", "sources")})
                pt_results += sum(_arrays_nbytes(v) for k, v in op.__dict__.items() if k.startswith("_pend_"))
                continue
            key = "windows" if n.kind == "scan" else "operators"
            parts[key] += _arrays_nbytes(op)
    parts["pt_state"] = sum(pt_parts.values())
    parts["total"] = sum(parts.values())
    parts["pt_parts"] = pt_parts                # in pt_state
    parts["pt_results"] = pt_results            # not in the total (module doc)
    return parts


def run_set(data, share: bool, queries, batch: float, check=None):
    a, b = data
    eng = Engine(seed=5)
    eng.set_control("share_plans", share)
    eng.set_control("share_indexes", share)
    eng.execute(DDL)
    qs = [eng.register(s) for s in queries]
    for q in qs:
        q.set_knob("retain_changes", 20_000)
        _no_audit(q)
    peak, n = {"total": 0}, 0
    t0 = time.perf_counter()
    dur = float(max(a["ts"][-1], b["ts"][-1]))
    for lo in np.arange(0.0, dur, batch):
        for name, d in (("A", a), ("B", b)):
            m = (d["ts"] > lo) & (d["ts"] <= lo + batch)
            eng.push(name, {c: v[m] for c, v in d.items()})
            n += int(m.sum())
        mem = memory(eng)
        if mem["total"] > peak["total"]:
            peak = mem
    secs = time.perf_counter() - t0
    return eng, qs, peak, n / secs


def _no_audit(q):
    """Audits (exact shadow plans checking the PT answers) are the precision engineer's measure, not
    this benchmark's: off, in both configurations alike."""
    try:
        q.set_knob("audit_share", 0.0)
    except Exception:       # an engine without audits
        pass


def run_sched(data, strategy: str, batch: float, burst: int, per_push: float, idle: float):
    a, b = data
    eng = Engine(seed=5)
    eng.execute(DDL)
    eng.set_control("scheduler", strategy)
    eng.set_control("quantum", 64)
    eng.set_control("work_per_push", per_push)
    qs = [eng.register(s) for s in EXACT]
    dur = float(max(a["ts"][-1], b["ts"][-1]))
    for i, lo in enumerate(np.arange(0.0, dur, batch)):
        for name, d in (("A", a), ("B", b)):
            m = (d["ts"] > lo) & (d["ts"] <= lo + batch)
            eng.push(name, {c: v[m] for c, v in d.items()})
        if i % burst == burst - 1:                       # the end of a burst: idle time drains the queues
            eng.run(idle)
    eng.run()
    return eng.scheduler.peak_queued, eng, qs


def _answers(qs):
    out = []
    for q in qs:
        df = q.snapshot()
        out.append(df.sort_values(list(df.columns)).reset_index(drop=True))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small run (< 1 minute)")
    ap.add_argument("--duration", type=float, default=None, help="seconds of data per stream")
    ap.add_argument("--rate", type=float, default=None, help="tuples per second per stream")
    args = ap.parse_args(argv)
    duration = args.duration or (30.0 if args.quick else 180.0)
    rate = args.rate or (30.0 if args.quick else 60.0)
    data = generate(duration, rate)
    batch = 1.0
    print(f"streams A, B: {duration:g} s x {rate:g} tuples/s each; {len(EXACT)} exact + {len(PT)} PT queries; "
          f"pushes of {batch:g} s")

    # 1. sharing on / off
    eng_s, qs_s, peak_s, tp_s = run_set(data, True, EXACT + PT, batch)
    eng_u, qs_u, peak_u, tp_u = run_set(data, False, EXACT + PT, batch)
    same_exact = all(x.equals(y) for x, y in zip(_answers(qs_s[:len(EXACT)]), _answers(qs_u[:len(EXACT)])))
    same_pt = [x.equals(y) for x, y in zip(_answers(qs_s[len(EXACT):]), _answers(qs_u[len(EXACT):]))]
    # where equality with private indexes is defined (engine.index_feed.IndexFeed.private_equivalent)
    defined = [eng_s.index_feed.private_equivalent(q) for q in qs_s[len(EXACT):]]
    comparable = [ok for ok, _ in defined]
    pt_equal = sum(1 for e, c in zip(same_pt, comparable) if e and c)
    print(f"{'':<10}{'peak bytes':>13}{'windows':>11}{'operators':>11}{'indexes':>13}{'pt_state':>13}"
          f"{'queues':>9}{'tuples/s':>11}{'pt_results':>13}")
    for name, pk, tp in (("shared", peak_s, tp_s), ("unshared", peak_u, tp_u)):
        print(f"{name:<10}{pk['total']:>13,}{pk['windows']:>11,}{pk['operators']:>11,}{pk['indexes']:>13,}"
              f"{pk['pt_state']:>13,}{pk['queues']:>9,}{tp:>11,.0f}{pk['pt_results']:>13,}")
    for name, pk in (("shared", peak_s), ("unshared", peak_u)):
        print(f"  {name} pt_state at the peak: " + ", ".join(f"{k} {v:,}" for k, v in pk["pt_parts"].items()))
    # PT answers: the unshared run probes private indexes.  The shared index is fed in lockstep with
    # its joins (engine.index_feed), so where every consumer steps at the same clocks and reads its
    # streams unfiltered the answers are equal by construction; a filtered / sampled query's private
    # index holds only its own input (estimates differ), so equality is not defined for it
    why = sorted({r for ok, r in defined if not ok})
    print(f"exact answers equal shared vs unshared: {same_exact}; PT answers equal shared vs private indexes: "
          f"{pt_equal}/{sum(comparable)} where defined ({sum(same_pt)}/{len(same_pt)} in all"
          + (f"; not defined: {why}" if why else "") + f"); index feed: {eng_s.index_feed.stats()}")
    print(f"sharing: {eng_s.sharing.stats()}")

    # 2. PT index memory: ten preference queries against one (sharing on)
    def index_bytes(eng):
        return memory(eng)["indexes"]
    e1, _, _, _ = run_set(data, True, PT[:1], batch)
    e10 = eng_s
    i1, i10 = index_bytes(e1), index_bytes(e10)
    eu10 = index_bytes(eng_u)
    print(f"PT region-index bytes: 1 query {i1:,}, 10 queries {i10:,} (shared); 10 queries unshared {eu10:,}")

    # 3. scheduling during bursts
    rr, eng_rr, q_rr = run_sched(data, "round_robin", batch, burst=10, per_push=150, idle=1e9)
    ch, eng_ch, q_ch = run_sched(data, "chain", batch, burst=10, per_push=150, idle=1e9)
    same_sched = all(x.equals(y) for x, y in zip(_answers(q_rr), _answers(q_ch)))
    print(f"peak queued rows during bursts: round robin {rr:,.0f}, chain {ch:,.0f} (answers equal: {same_sched})")

    mem_ratio = peak_s["total"] / max(peak_u["total"], 1)
    pt_ratio = i10 / max(i1, 1)
    ch_ratio = ch / max(rr, 1)
    tp_ratio = tp_s / max(tp_u, 1e-9)
    ok = (mem_ratio < 0.5 and pt_ratio <= 1.2 and ch_ratio < 1.0 and same_exact and same_sched
          and pt_equal == sum(comparable))
    print("targets: sharing_memory_ratio < 0.5, pt_index_memory_ratio_10q <= 1.2, chain_peak_queue_ratio < 1, "
          "pt_shared_equals_private all: "
          + ("met" if ok else "MISSED"))
    print(f"sharing_memory_ratio={mem_ratio:.3f} pt_index_memory_ratio_10q={pt_ratio:.3f} "
          f"chain_peak_queue_ratio={ch_ratio:.3f} sharing_throughput_ratio={tp_ratio:.3f} "
          f"pt_shared_equals_private={pt_equal}/{sum(comparable)}")


if __name__ == "__main__":
    main()
