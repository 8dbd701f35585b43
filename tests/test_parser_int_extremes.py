"""INT's extreme values as SQL literals: -9223372036854775808 and 9223372036854775807 are INT
literals (digits compared as integers, not through a float that rounds 2**63 - 1 up to 2**63), and
the least one, whose magnitude alone is beyond INT, folds with its minus sign.  The oracle is numpy
on the same pushed rows."""
import numpy as np
import pytest

from sketchql.engine import Engine
from sketchql.planner.parser import parse

LO, HI = np.iinfo(np.int64).min, np.iinfo(np.int64).max


def literal(text):
    return parse(f"SELECT * FROM S [RANGE 10] WHERE S.k = {text}")[0].select.where.right.value


@pytest.mark.parametrize("text,want", [("-9223372036854775808", LO), ("- 9223372036854775808", LO),
                                       ("9223372036854775807", HI), ("-9223372036854775807", LO + 1)])
def test_extreme_int_literals_are_ints(text, want):
    v = literal(text)
    assert type(v) is int and v == want


def test_beyond_int_stays_double():
    assert type(literal("9223372036854775808")) is float
    assert type(literal("-99999999999999999999")) is float


@pytest.mark.parametrize("text,want", [("-9223372036854775808", LO), ("9223372036854775807", HI)])
def test_filter_on_extreme_values_finds_exactly_their_rows(text, want):
    k = np.array([LO, HI, 0, -1, LO + 1, HI - 1, LO], dtype=np.int64)
    eng = Engine(seed=1)
    eng.execute("CREATE STREAM S (k INT) TIMESTAMP ts")
    q = eng.register(f"SELECT S.k FROM S [RANGE 100] WHERE S.k = {text}")
    eng.push("S", {"ts": np.arange(len(k), dtype=np.float64), "k": k})
    got = q.snapshot()["k"].to_numpy()
    assert got.tolist() == k[k == want].tolist()
