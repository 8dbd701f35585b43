"""The Spark room's pure parts, without a SparkSession: declaration parsing,
the summary store (atomic publish, applied batch ids), the partition builders
fed Arrow batches directly, and the summary file format."""
import doctest
import json
import os

import numpy as np
import pyarrow as pa
import pytest

import sketchql.spark.declaration as declaration_mod
import sketchql.spark.partition as partition_mod
import sketchql.spark.store as store_mod
import sketchql.spark.summary_file as summary_file_mod
from sketchql.errors import SketchQLSyntaxError
from sketchql.spark import StorePublisher, load_summary, parse_summary_declaration, read_summary
from sketchql.spark.declaration import _fallback_parse
from sketchql.spark.partition import CountSketchBuilder, SparkInputError, merge_partials, seconds_array
from sketchql.spark.store import ranges_add, ranges_contain
from sketchql.spark.summary_file import decode_summary, encode_summary
from sketchql.summaries import CountSketch

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("mod", [declaration_mod, partition_mod, store_mod, summary_file_mod])
def test_doctests(mod):
    assert doctest.testmod(mod).failed == 0


@pytest.mark.parametrize("text,gran,rate,depth", [
    ("CREATE SUMMARY s ON S (a) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)", 10.0, 2, 4),
    ("create summary s on S(a) with granularity 2 minutes and collapse (3,2);", 120.0, 3, 2),
    ("CREATE SUMMARY s ON S (a) WITH GRANULARITY 1 HOUR AND COLLAPSE(2, 1)", 3600.0, 2, 1),
])
def test_declarations(text, gran, rate, depth):
    for parse in (parse_summary_declaration, _fallback_parse):
        spec = parse(text)
        assert (spec.name, spec.attr, spec.granularity, spec.rate, spec.depth) == ("s", "a", gran, rate, depth)


@pytest.mark.parametrize("text", ["", "CREATE SUMMARY", "CREATE SUMMARY s ON S (a) WITH GRANULARITY 10 PARSECS "
                                  "AND COLLAPSE(2, 4)", "CREATE SUMMARY s ON S (a) WITH GRANULARITY 10 SECONDS"])
def test_bad_declarations(text):
    for parse in (parse_summary_declaration, _fallback_parse):
        with pytest.raises(SketchQLSyntaxError):
            parse(text)


def test_ranges():
    r = []
    for x in (3, 0, 1, 7, 2):
        r = ranges_add(r, x)
    assert r == [[0, 3], [7, 7]]
    assert ranges_contain(r, 2) and not ranges_contain(r, 5)


def test_store_publish_is_versioned_and_collects_garbage(tmp_path):
    pub = StorePublisher(str(tmp_path))
    a = CountSketch(3, 32, 1).update(np.arange(5))
    pub.publish("s", encode_summary(a, {"name": "s"}), {"name": "s"}, batch_id=0)
    b = (a + a)
    pub.publish("s", encode_summary(b, {"name": "s"}), {"name": "s"}, batch_id=1)
    man = json.loads((tmp_path / "manifest.json").read_text())
    assert man["summaries"]["s"]["applied_batches"] == [[0, 1]]
    assert sorted(os.listdir(tmp_path)) == ["manifest.json", "s.00000002.sqs"]
    assert load_summary(str(tmp_path)) == b
    assert read_summary(str(tmp_path / "s.00000002.sqs")).summary == b
    pub.publish("t", encode_summary(a, {"name": "t"}), {"name": "t"})
    with pytest.raises(Exception, match="holds 2 summaries"):
        load_summary(str(tmp_path))
    assert load_summary(str(tmp_path), "t") == a


def test_builder_nulls_nans_and_chunking(monkeypatch):
    monkeypatch.setattr(partition_mod, "CHUNK_ROWS", 7)  # many flushes: linearity makes them invisible
    rng = np.random.default_rng(0)
    vals = rng.integers(0, 50, 100).astype(float)
    vals[::9] = np.nan
    mask = rng.random(100) < 0.1
    b = CountSketchBuilder("x", 3, 64, 2)
    arr = pa.array(vals, mask=mask)
    for i in range(0, 100, 13):
        b.add_batch(pa.RecordBatch.from_arrays([arr[i:i + 13]], names=["x"]))
    part = b.partial().to_pylist()[0]
    keep = ~mask & ~np.isnan(vals)
    assert part["null_keys"] == int((~keep).sum()) and part["rows"] == int(keep.sum())
    assert CountSketch.from_bytes(part["payload"]) == CountSketch(3, 64, 2).update(vals[keep])


def test_merge_partials_is_exact():
    a = CountSketch(3, 64, 0).update(np.arange(10))
    b = CountSketch(3, 64, 0).update(np.arange(5, 30))
    pa_ = (a.to_bytes(), 10, 1, 0, float("nan"), float("nan"))
    pb = (b.to_bytes(), 25, 2, 0, float("nan"), float("nan"))
    m = merge_partials(pa_, pb)
    assert m[0] == (a + b).to_bytes() and m[1:4] == (35, 3, 0)


def test_seconds_from_timestamps_and_bad_types():
    ts = pa.array([0, 1_500_000], pa.timestamp("us", tz="UTC"))
    secs, valid = seconds_array(ts)
    assert secs.tolist() == [0.0, 1.5] and valid is None
    with pytest.raises(SparkInputError, match="not numeric"):
        seconds_array(pa.array(["1.0", "2.0"]))


def test_summary_file_rejects_garbage():
    with pytest.raises(Exception, match="not a sketchql summary"):
        decode_summary(b"garbage-garbage-garbage")
