"""The GPU tests' evidence file from the logs of one run split over device calls (the tests
part and the rest parts of benchmarks/gpu_session.sh): a summary line that counts each test
once (a `-rA` log names a passed test twice, and a log cut by a time limit has no summary of
its own), then every log under a heading.

    python3 benchmarks/join_gpu_logs.py COMMIT LOG [LOG ...] > benchmarks/results/gpu-tests-<date>.txt

"not run" counts the GPU tests `pytest --collect-only` finds here that no log reports; the
file ends with their ids, so that a later run can take them (gpu_session.sh PARTS=rest).
The counts are of the tests collected here: where a test was changed between calls (a
parameter replaced, at the same `rnncc/` and `templates/`), an outcome a log gives for an id
no longer collected is listed apart at the end, with its outcome, and not counted.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gpu_tests_rest import collected, merged_outcomes

ROOT = Path(__file__).resolve().parent.parent


def summary(commit: str, outcomes: dict[str, str], calls: int, tests: list[str]) -> str:
    """The summary line at ``commit`` for the ``outcomes`` that ``calls`` device calls' logs
    gave (merged_outcomes: each test's last), counting the GPU tests ``tests`` (those
    collected here) only."""
    seen = {t: outcomes[t] for t in tests if t in outcomes}
    not_run = len(tests) - len(seen)
    counts = {kind: sum(v == kind for v in seen.values()) for kind in ("PASSED", "FAILED", "ERROR", "SKIPPED")}
    return (f"Summary: {counts['PASSED']} passed, {counts['FAILED'] + counts['ERROR']} failed, "
            f"{counts['SKIPPED']} skipped, {not_run} not run, at {commit}, in {calls} device "
            f"call(s); each call's log follows.")


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    commit = subprocess.run(["git", "rev-parse", sys.argv[1]], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.strip()
    texts = [Path(p).read_text() for p in sys.argv[2:]]
    tests = collected(ROOT)  # one pytest collection, for the summary and the lists
    seen = merged_outcomes(texts)
    missing = [t for t in tests if t not in seen]
    dropped = sorted(set(seen) - set(tests))
    print(summary(commit, seen, len(texts), tests))
    for i, (path, text) in enumerate(zip(sys.argv[2:], texts), 1):
        print(f"\n===== call {i}: {Path(path).name} =====")
        print(text, end="" if text.endswith("\n") else "\n")
    if missing:
        print(f"\n===== not run: {len(missing)} =====")
        print("\n".join(missing))
    if dropped:
        print(f"\n===== reported by a log but no longer collected, not counted: {len(dropped)} =====")
        print("\n".join(f"{seen[t]} {t}" for t in dropped))


if __name__ == "__main__":
    main()
