"""Shared fixtures.  One SparkSession per test session (local[2], no UI)."""
import os
import sys

import pytest

try:  # deterministic, no per-example deadlines (CI shares 2 cores)
    from hypothesis import HealthCheck, settings

    settings.register_profile("sketchql", deadline=None, derandomize=True, print_blob=True,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("sketchql")
except ImportError:  # pragma: no cover
    pass

#: tests that take seconds each (real servers, long streams, the DuckDB oracle grid): marked
#: ``slow`` here so that ``pytest -q`` stays a quick loop; ``scripts/run_tests.sh`` (``make test``,
#: CI) runs them as their own stage with ``-m slow``.
SLOW_TESTS = (
    "tests/test_cql_oracle.py::",
    "tests/test_service_durability.py::test_sigkill_at_several_points_loses_nothing_acknowledged",
    "tests/test_service_durability.py::test_fresh_wipes_and_demo_resumes_where_it_stopped",
    "tests/test_service_sse_load.py::test_bounded_loopback_load",
    "tests/test_service_demo.py::test_demo_feeds_and_queries_return_rows",
    "tests/test_service_demo.py::test_serve_command_starts_and_answers",
    "tests/test_promising.py::test_weighted_is_a_faithful_sample",
    "tests/test_promising.py::test_aggregates_beat_per_query_and_errors_cover",
    "tests/test_engine_memory.py::test_long_stream_memory_bounded_by_window_state",
    "tests/test_cli.py::test_replay_tight_budget_produces_only_valid_pairs",
    "tests/test_pt_budget.py::test_work_never_exceeds_allowance_plus_carried_debt[desc-1.0]",
    "tests/test_out_of_order.py::test_shuffled_within_slack_equals_sorted",
    "tests/test_promising_batch.py::test_batched_drain_with_a_huge_budget_equals_the_per_entry_path",
    # the heaviest PT replays (several seconds each on this 2-core machine; their short variants
    # stay in the fast loop)
    "tests/test_pt_full_budget.py::test_full_budget_equals_the_exact_join[300.0-",
    "tests/test_pt_full_budget.py::test_asc_outliers_come_first",
    "tests/test_promising.py::test_same_seed_same_output",
    "tests/test_promising.py::test_desc_is_fresher_than_shj_on_whole_stream",
    "tests/test_promising.py::test_selection_beats_simple_under_load",
    "tests/test_promising_batch.py::test_unit_budget_work_stays_within_budget_plus_one_batch[asc-",
    "tests/test_promising_batch.py::test_unit_budget_work_stays_within_budget_plus_one_batch[weighted-index]",
    "tests/test_promising_batch.py::test_batched_selection_scans_the_same_regions_as_one_at_a_time[sum-inf]",
    "tests/test_engine_promising.py::test_live_rows_stay_bounded_on_a_long_stream",
    "tests/test_service_demo.py::test_demo_promising_join_pairs_are_exact_matches",
    "tests/test_approx_knobs_more.py::test_sampler_choice_keeps_resources",
    "tests/test_index.py::test_memory_flat_over_long_stream",
    "tests/test_promising_batch.py::test_unit_budget_work_stays_within_budget_plus_one_batch",
    "tests/test_promising_batch.py::test_batched_selection_scans_the_same_regions_as_one_at_a_time[",
    "tests/test_promising.py::test_tight_budget_output_is_exact_subset_without_duplicates[weighted]",
    "tests/test_promising.py::test_tight_budget_output_is_exact_subset_without_duplicates[asc]",
    "tests/test_promising.py::test_desc_beats_shj_on_output",
    "tests/test_promising_aging.py::test_aging_makes_desc_find_fresh_pairs_under_overload[mini]",
    "tests/test_engine_promising.py::test_every_minus_row_matches_an_earlier_plus[WITHIN 50",
    "tests/test_sharing.py::test_shared_and_unshared_give_identical_results[chain]",
    "tests/test_pt_full_budget.py::test_full_budget_group_and_mini_source[mini]",
    "tests/test_metrics.py::test_no_join_operator_beats_the_upper_bound",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.startswith(SLOW_TESTS):
            item.add_marker(pytest.mark.slow)


os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark():
    pyspark = pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    from sketchql.spark.jvm import session_conf  # the JVM count-sketch jar (compiled once, cached)

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("sketchql-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", "2g")
    )
    for k, v in session_conf().items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
