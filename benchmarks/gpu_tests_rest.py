"""The GPU tests that runs stopped by a time limit did not report: every test `pytest -m gpu
--collect-only` finds (here, no GPU needed) less those the logs of `pytest -v` name as
PASSED, FAILED, ERROR, SKIPPED or XFAIL. Writes their ids one a line, for the next device
call to run as

    xargs -d '\\n' -a IDS python3 -m pytest -m gpu -n 16 -v -p no:cacheprovider

    python3 benchmarks/gpu_tests_rest.py LOG [LOG ...] > IDS   (from the repository root)

A session's device time ran out with 92 tests unreached this way (gpu-tests-2026-11-28-at-41afd53.txt).
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

# "[gw3] [ 84%] PASSED tests/test_gpu.py::test_x[a, b] " (xdist) or "tests/...::test_x PASSED"
OUTCOME = re.compile(r"(?:(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (tests/\S.*?)\s*$)|"
                     r"(?:^(tests/\S.*?) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b)")


def outcomes(log: str) -> dict[str, str]:
    """Each test id a `pytest -v` log reports, with its outcome (the last one it gives)."""
    out = {}
    for line in log.splitlines():
        m = OUTCOME.search(line)
        if m:
            # The short summary writes a failure as "FAILED <id> - <message>".
            test = (m.group(2) or m.group(3)).strip().split(" - ")[0]
            out[test] = m.group(1) or m.group(4)
    return out


def reported(log: str) -> set[str]:
    """Test ids a `pytest -v` log gives an outcome for."""
    return set(outcomes(log))


def collected(root: Path) -> list[str]:
    """The ids of the GPU tests, as pytest collects them on this machine."""
    run = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "--collect-only", "-q",
                          "-p", "no:cacheprovider", "tests/"], cwd=root, capture_output=True, text=True, check=False)
    return [line.strip() for line in run.stdout.splitlines() if "::" in line]


def merged_outcomes(logs: list[str]) -> dict[str, str]:
    """Each test's last outcome over ``logs`` (texts, in the order they ran)."""
    seen: dict[str, str] = {}
    for log in logs:
        seen |= outcomes(log)
    return seen


def not_reported(logs: list[str]) -> list[str]:
    """The GPU tests collected in this checkout that none of ``logs`` reports."""
    seen = merged_outcomes(logs)
    return [t for t in collected(Path(__file__).resolve().parent.parent) if t not in seen]


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rest = not_reported([Path(p).read_text() for p in sys.argv[1:]])
    sys.stdout.write("".join(f"{t}\n" for t in rest))
    print(f"{len(rest)} not reported by {len(sys.argv) - 1} log(s)", file=sys.stderr)


if __name__ == "__main__":
    main()
