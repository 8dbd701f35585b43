"""The CLI entry point: help lists the commands, the demo prints estimates
next to exact counts that it recomputes independently here."""
import re

import numpy as np

from sketchql.cli import main


def test_help_lists_commands(capsys):
    try:
        main(["--help"])
    except SystemExit as exc:
        assert exc.code == 0
    out = capsys.readouterr().out
    assert "demo" in out


def test_demo_estimates_close_to_exact(capsys):
    assert main(["demo", "--tuples", "200000", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if re.match(r"^\s*\d+\s+\d+\s+-?\d+\s*$", line)]
    assert len(rows) == 10
    keys = np.random.default_rng(3).zipf(1.3, 200000) % 100_000
    exact = np.bincount(keys)
    bound = float(re.search(r"\+/- (\d+)", out).group(1))
    for key, shown_exact, est in rows:
        assert int(shown_exact) == exact[int(key)]
        assert abs(int(est) - exact[int(key)]) <= bound + 1
