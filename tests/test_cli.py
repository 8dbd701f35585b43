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


def _replay_rows(out):
    rows = {}
    for line in out.splitlines():
        parts = line.rsplit(None, 6)
        if len(parts) == 7 and parts[0].startswith(("SIMPLE", "PT-Join")):
            rows[parts[0]] = [float(x) for x in parts[1:]]
    return rows


def test_replay_tight_budget_produces_only_valid_pairs(capsys):
    assert main(["replay", "--duration", "30", "--interarrival", "20", "--seed", "1"]) == 0
    rows = _replay_rows(capsys.readouterr().out)
    assert set(rows) == {"SIMPLE-SHJ", "PT-Join desc", "PT-Join weighted", "PT-Join asc"}
    for pairs, pct, *_rest, invalid in rows.values():
        assert invalid == 0 and 0 < pct < 100


def test_replay_unlimited_budget_matches_the_exact_join(capsys):
    from sketchql.data import exact_join_pairs, generate_stores, interleave

    assert main(["replay", "--duration", "20", "--interarrival", "50", "--units-per-second", "1e9",
                 "--preference", "desc", "--seed", "2"]) == 0
    rows = _replay_rows(capsys.readouterr().out)
    arr = interleave(generate_stores(2, duration=20.0, mean_interarrival=0.05, seed=2))
    n_exact = len(exact_join_pairs(arr, 60.0)[0])
    assert rows["PT-Join desc"][0] == n_exact and rows["SIMPLE-SHJ"][0] == n_exact


def test_python_dash_m_runs_the_same_cli():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "sketchql", "--help"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "serve" in out.stdout and "replay" in out.stdout
