"""The tools that assemble the GPU tests' evidence from logs split over device calls
(benchmarks/gpu_tests_rest.py's parsing, which benchmarks/join_gpu_logs.py counts with): what a
log reports, counted once."""

from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from gpu_tests_rest import outcomes, reported  # noqa: E402

# An xdist `-v -rA` log: each outcome as it happens, then again in the short summary.
LOG = """\
tests/test_gpu.py::test_a[x-1]
[gw3] [ 10%] PASSED tests/test_gpu.py::test_a[x-1]
[gw1] [ 20%] FAILED tests/test_gpu.py::test_b
[gw2] [ 30%] SKIPPED tests/test_gpu.py::test_c[a, b]
=========================== short test summary info ============================
PASSED tests/test_gpu.py::test_a[x-1]
FAILED tests/test_gpu.py::test_b - AssertionError: 1 != 2
"""


def test_a_log_reports_each_test_once_with_its_outcome():
    assert outcomes(LOG) == {"tests/test_gpu.py::test_a[x-1]": "PASSED",
                             "tests/test_gpu.py::test_b": "FAILED",
                             "tests/test_gpu.py::test_c[a, b]": "SKIPPED"}
    # The rest tool needs only which tests a log reports: a test it names is not run again.
    assert reported(LOG) == {"tests/test_gpu.py::test_a[x-1]", "tests/test_gpu.py::test_b",
                             "tests/test_gpu.py::test_c[a, b]"}


def test_the_summary_counts_the_tests_collected_and_the_last_outcome_of_each():
    """A test that failed in one call and passed in a later one counts as passed; an id no
    longer collected (a parameter replaced between calls) is not counted at all; a collected
    test no log reports is "not run"."""
    from gpu_tests_rest import merged_outcomes
    from join_gpu_logs import summary

    later = "[gw0] [ 50%] PASSED tests/test_gpu.py::test_b\n"
    tests = ["tests/test_gpu.py::test_b", "tests/test_gpu.py::test_c[a, b]", "tests/test_gpu.py::test_d"]
    line = summary("abc1234", merged_outcomes([LOG, later]), 2, tests)
    assert line.startswith("Summary: 1 passed, 0 failed, 1 skipped, 1 not run, at abc1234, in 2 device call(s)")
