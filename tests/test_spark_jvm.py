"""JVM count-sketch engine: Java hashing == sketchql's numpy hashing, byte for byte.

Oracle: the single-process ``CountSketch.update`` over the same keys (nulls and
NaN dropped), plus the ``mapInArrow`` engine over the same DataFrame.
"""
import math

import numpy as np
import pytest

from sketchql.spark import SparkInputError, build_countsketch
from sketchql.spark import jvm as jvm_mod
from sketchql.summaries import CountSketch

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def jvm_spark(spark):
    if not jvm_mod.jvm_available(spark):
        pytest.skip(f"JVM engine not on the test session's classpath: {jvm_mod.last_error()}")
    return spark


def _check(spark_df, col, keys, nulls, d, w, seed, with_arrow=True):
    want = CountSketch(d, w, seed).update(keys).to_bytes()
    got = build_countsketch(spark_df, col, d, w, seed, engine="jvm")
    assert got.engine == "jvm"
    assert (got.rows, got.null_keys) == (len(keys), nulls)
    assert got.summary.to_bytes() == want
    if not with_arrow:
        return got
    arrow = build_countsketch(spark_df, col, d, w, seed, engine="arrow")
    assert arrow.engine == "arrow" and arrow.summary.to_bytes() == want
    assert (arrow.rows, arrow.null_keys) == (got.rows, got.null_keys)
    return got


def test_int64_partition_counts_byte_identical(jvm_spark):
    rng = np.random.default_rng(3)
    n = 4000
    k = np.concatenate([rng.integers(-(2**63), 2**63 - 1, n // 2, dtype=np.int64, endpoint=True),
                        rng.zipf(1.3, n // 2).astype(np.int64) % 500 - 250,
                        np.array([-(2**63), 2**63 - 1, 0, -1], dtype=np.int64)])
    null = rng.random(len(k)) < 0.05
    rows = [(None if m else int(x),) for x, m in zip(k, null)]
    df = jvm_spark.createDataFrame(rows, "k long")
    for parts, (d, w, seed) in zip((1, 2, 7, 64), ((5, 4096, 0), (3, 1000, 2**64 - 5), (4, 257, 11), (1, 64, 7))):
        res = _check(df.repartition(parts), "k", k[~null], int(null.sum()), d, w, seed, with_arrow=parts == 7)
        assert res.partitions == parts


def test_small_ints_booleans_floats_strings_binary(jvm_spark):
    rng = np.random.default_rng(5)
    n = 600
    ints = rng.integers(-1000, 1000, n)
    f = rng.normal(size=n).round(1) * 1e3
    specials = [math.nan, -0.0, 0.0, math.inf, -math.inf, 2.0**63, 2.0**64 - 2048, -(2.0**63), 2.0**70, 0.5,
                3.0, 1e-300]
    f[:len(specials)] = specials
    strs = [f"é{x}✓" if x % 3 else f"k{x}" for x in ints]
    strs[:4] = ["", "a\x00b", "𝄞 music", "x" * 300]
    rows = [(int(i), int(i) % 100, int(i) % 100, bool(i % 2), float(v), float(v), s, s.encode(), None)
            for i, v, s in zip(ints, f, strs)]
    rows += [(None,) * 9] * 7
    df = jvm_spark.createDataFrame(
        rows, "i int, sh short, b byte, bo boolean, dbl double, fl float, s string, bin binary, nul long"
    ).repartition(5)
    fin = ~np.isnan(f)
    cases = {"i": ints, "sh": ints % 100, "b": ints % 100, "bo": (ints % 2).astype(bool),
             "dbl": f[fin], "fl": f.astype(np.float32).astype(np.float64)[fin],
             "s": np.array(strs), "bin": np.array([s.encode() for s in strs], dtype=object)}
    for col, keys in cases.items():
        if col == "bin":
            keys = np.array([bytes(x) for x in keys], dtype=np.bytes_)
        nulls = 7 + (int((~fin).sum()) if col in ("dbl", "fl") else 0)
        _check(df, col, keys, nulls, 3, 512, 9, with_arrow=col in ("dbl", "s", "bin"))
    res = build_countsketch(df, "nul", 3, 64, 0, engine="jvm")  # all null
    assert (res.rows, res.null_keys, res.summary) == (0, n + 7, CountSketch(3, 64, 0))


def test_empty_input(jvm_spark):
    res = build_countsketch(jvm_spark.createDataFrame([], "k long"), "k", 3, 64, 0, engine="jvm")
    assert res.engine == "jvm" and res.rows == 0 and res.summary == CountSketch(3, 64, 0)


def test_unsupported_type_falls_back_to_arrow(jvm_spark):
    from decimal import Decimal

    df = jvm_spark.createDataFrame([(Decimal("1.5"),), (Decimal("2.25"),), (None,)], "x decimal(10,2)")
    res = build_countsketch(df, "x", 3, 64, 1)  # auto
    assert res.engine == "arrow"
    assert res.summary.to_bytes() == CountSketch(3, 64, 1).update(np.array([1.5, 2.25])).to_bytes()
    assert (res.rows, res.null_keys) == (2, 1)
    with pytest.raises(SparkInputError, match="engine='jvm' unavailable.*decimal"):
        build_countsketch(df, "x", 3, 64, 1, engine="jvm")
    # pre-aggregated (weighted) builds stay on the Arrow path
    ints = jvm_spark.createDataFrame([(1,), (1,), (2,)], "k long")
    pre = build_countsketch(ints, "k", 3, 64, 1, preaggregate=True)
    assert pre.engine == "arrow" and pre.summary == CountSketch(3, 64, 1).update(np.array([1, 1, 2]))
    with pytest.raises(SparkInputError, match="engine must be one of"):
        build_countsketch(ints, "k", engine="gpu")


def test_session_without_jar_falls_back(jvm_spark, monkeypatch):
    monkeypatch.setattr(jvm_mod, "_jvm_class", lambda spark: None)
    df = jvm_spark.createDataFrame([(1,), (5,), (5,)], "k long")
    res = build_countsketch(df, "k", 3, 64, 2)
    assert res.engine == "arrow" and res.summary == CountSketch(3, 64, 2).update(np.array([1, 5, 5]))
    with pytest.raises(SparkInputError, match="not on this session's classpath"):
        build_countsketch(df, "k", 3, 64, 2, engine="jvm")


def test_row_multipliers_match_python(jvm_spark):
    cls = jvm_mod._jvm_class(jvm_spark)
    for seed in (0, 1, 2**63 + 17, 2**64 - 1):
        signed = seed - 2**64 if seed >= 2**63 else seed
        got = [x % 2**64 for x in cls.rowMultipliers(signed, 5)]
        assert got == [int(m) for m in CountSketch(5, 64, seed)._mult]


def test_jar_is_cached_by_source_hash(tmp_path, monkeypatch):
    monkeypatch.setenv("SKETCHQL_CACHE", str(tmp_path))
    if jvm_mod.ensure_jar(compile=False) is not None:
        pytest.fail("a fresh cache dir must not have a jar")
    conf = jvm_mod.session_conf({"spark.jars": "/x/other.jar"}, compile=False)
    assert conf == {"spark.jars": "/x/other.jar"}  # nothing added when the jar is not built


def test_cli_sketch_only_engines(jvm_spark, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sketchql.cli import main
    from sketchql.spark import load_summary

    k = np.arange(300) % 17
    pq.write_table(pa.table({"k": pa.array(k, mask=k == 3)}), str(tmp_path / "in.parquet"))
    decl = "CREATE SUMMARY c1 ON ev (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 2)"
    want = CountSketch(5, 128, 0).update(k[k != 3]).to_bytes()
    for engine in ("jvm", "arrow"):
        out = str(tmp_path / engine)
        assert main(["spark-build", "--input", str(tmp_path / "in.parquet"), "--summary", decl, "--out", out,
                     "--sketch-only", "--w", "128", "--engine", engine, "--keep-session", "--no-progress"]) == 0
        assert f"{engine} engine" in capsys.readouterr().out
        assert load_summary(out).to_bytes() == want
