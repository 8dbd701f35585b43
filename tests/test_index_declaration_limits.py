"""CREATE SUMMARY refuses a GRANULARITY below 1 us: ``GRANULARITY 1e-300 SECONDS`` was accepted and the
ingest then cast ts / G1 = inf to int64 (garbage zone numbers, a numpy warning: audit hQ item 11)."""
import warnings

import numpy as np
import pytest

from sketchql.engine import Engine
from sketchql.errors import SketchQLError
from sketchql.index.declaration import MIN_GRANULARITY, SummaryDeclaration


@pytest.mark.parametrize("g", ["1e-300", "1e-7", "0.0000009"])
def test_too_fine_granularity_is_refused_and_leaves_nothing(g):
    e = Engine()
    e.execute("CREATE STREAM S (k INT) TIMESTAMP ts")
    with pytest.raises(SketchQLError, match="below the minimum"):
        e.execute(f"CREATE SUMMARY sm ON S (k) WITH GRANULARITY {g} SECONDS AND COLLAPSE(2, 4)")
    assert not e.catalog.summaries_on("S")


def test_the_minimum_itself_works_on_epoch_timestamps():
    d = SummaryDeclaration("s", "S", "k", granularity=MIN_GRANULARITY, rate=2, depth=2)
    assert d.granularity == MIN_GRANULARITY
    e = Engine()
    e.execute("CREATE STREAM S (k INT) TIMESTAMP ts; "
              "CREATE SUMMARY sm ON S (k) WITH GRANULARITY 0.000001 SECONDS AND COLLAPSE(2, 2)")
    ts = 1.7e9 + np.arange(50) * 1e-6
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)     # no invalid cast in the ingest
        e.push("S", {"ts": ts, "k": np.arange(50) % 3})
