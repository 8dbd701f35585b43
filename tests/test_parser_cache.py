"""The on-disk cache of the SQL parser's LALR tables (sketchql.planner.parser._lark).

Oracle: a parser built from the grammar in this process (no cache) -- a cached
parser must give the same trees and the same syntax errors (line, column, token,
expected list).
"""
import os

import pytest
from lark import Lark

from sketchql.errors import SketchQLSyntaxError
from sketchql.planner import parser as P
from sketchql.planner.grammar import GRAMMAR

SQL = ["CREATE STREAM S (k INT, v DOUBLE) TIMESTAMP ts; SELECT k, SUM(v) FROM S [RANGE 10 SECONDS] GROUP BY k",
       "SELECT a FROM S [NOW] WHERE a > 3"]
BAD = ["SELECT FROM s", "SELECT a FROM", "SELECT a FROM S [RANGE 1 MINUTE] WHERE ?"]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SKETCHQL_CACHE_DIR", str(tmp_path / "cache"))
    P._lark.cache_clear()
    yield tmp_path / "cache"
    P._lark.cache_clear()          # later tests get a parser from their own environment


def _errors(texts):
    out = []
    for t in texts:
        with pytest.raises(SketchQLSyntaxError) as ei:
            P.parse(t)
        e = ei.value
        out.append((e.line, e.column, e.token, tuple(e.expected or ()), str(e)))
    return out


def _fresh():
    return Lark(GRAMMAR, **P._LARK_OPTIONS)


class _NoBuild(Lark):
    def __init__(self, *a, **k):            # Lark.load does not call __init__
        raise AssertionError("the grammar was built although the cache holds it")


def test_first_build_writes_the_cache_and_the_next_process_loads_it(cache_dir, monkeypatch):
    path = P._lark_cache_path()
    assert os.path.dirname(path) == str(cache_dir) and not os.path.exists(path)
    built = P._lark()
    assert os.path.getsize(path) > 0
    errs_built = _errors(BAD)
    P._lark.cache_clear()
    monkeypatch.setattr(P, "Lark", _NoBuild)
    loaded = P._lark()
    assert isinstance(loaded, _NoBuild)
    fresh = _fresh()
    for t in SQL:
        assert loaded.parse(t) == fresh.parse(t) == built.parse(t)
    assert _errors(BAD) == errs_built
    assert [type(s).__name__ for s in P.parse(SQL[0])] == ["CreateStream", "Query"]
    assert not [f for f in os.listdir(cache_dir) if f.startswith(".lark-")]     # no temp file left


def test_corrupt_cache_is_rebuilt(cache_dir):
    path = P._lark_cache_path()
    os.makedirs(cache_dir)
    with open(path, "wb") as fh:
        fh.write(b"not a pickle")
    p = P._lark()
    assert p.parse(SQL[1]) == _fresh().parse(SQL[1])
    with open(path, "rb") as fh:
        assert Lark.load(fh).parse(SQL[1]) == p.parse(SQL[1])      # replaced by a valid one


def test_unwritable_cache_dir_still_parses(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache directory should be")
    monkeypatch.setenv("SKETCHQL_CACHE_DIR", str(blocker / "sub"))
    P._lark.cache_clear()
    try:
        assert [type(s).__name__ for s in P.parse(SQL[0])] == ["CreateStream", "Query"]
        assert not (blocker / "sub").exists()
    finally:
        P._lark.cache_clear()


def test_cache_off_and_key_follows_the_grammar(tmp_path, monkeypatch):
    monkeypatch.setenv("SKETCHQL_CACHE_DIR", "off")
    assert P._lark_cache_path() is None
    monkeypatch.setenv("SKETCHQL_CACHE_DIR", str(tmp_path))
    a = P._lark_cache_path()
    monkeypatch.setattr(P, "GRAMMAR", GRAMMAR + "\n// changed\n")
    assert P._lark_cache_path() != a          # an edited grammar never loads stale tables
