"""Every module's docstring examples run and print what they say (the Spark room's doctests
need a SparkSession and run in tests/test_spark_units.py)."""
from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import sketchql

MODULES = sorted(m.name for m in pkgutil.walk_packages(sketchql.__path__, "sketchql.")
                 if not m.name.startswith("sketchql.spark") and m.name != "sketchql.__main__")


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    mod = importlib.import_module(name)
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"
