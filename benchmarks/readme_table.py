"""Markdown table of the `rnncc run --json` records in benchmarks/results/, for the README.

    python3 benchmarks/readme_table.py            # print the table
    python3 benchmarks/readme_table.py --update   # replace the table in README.md

tests/test_cli_and_examples.py checks that README.md holds exactly this table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- perf-table:begin -->", "<!-- perf-table:end -->"


def table() -> str:
    rows = ["| model | dtype | S | B | rnncc ms (µs/step) | torch.nn / cuDNN ms (µs/step) | rnncc ÷ cuDNN | record |",
            "|---|---|---|---|---|---|---|---|"]
    for path in sorted((ROOT / "benchmarks" / "results").glob("run-*.json")):
        rec = json.loads(path.read_text())
        S = rec["seq_len"]
        results = rec["results"]
        ours = results["rnncc"]["median_ms"]
        theirs = next((v["median_ms"] for k, v in results.items() if k.startswith("torch")), None)
        cudnn = f"{theirs:.2f} ({theirs * 1e3 / S:.1f})" if theirs else "— (not a plain stack)"
        ratio = f"{ours / theirs:.2f}×" if theirs else "—"
        rows.append(f"| {rec['model']} | {rec['dtype']} | {S} | {rec['batch']} | "
                    f"{ours:.2f} ({ours * 1e3 / S:.1f}) | {cudnn} | {ratio} | "
                    f"[{path.name}](benchmarks/results/{path.name}) |")
    env = {}
    for path in sorted((ROOT / "benchmarks" / "results").glob("run-*.json")):
        env = json.loads(path.read_text()).get("environment", env)
    driver = env.get("driver")
    driver = f"{driver // 1000}.{driver % 1000 // 10}" if isinstance(driver, int) else "?"
    note = (f"\n\n{env.get('device', '?')}, CUDA driver API {driver}, torch {env.get('torch', '?')}, "
            f"cuDNN {env.get('cudnn', '?')}, commit {str(env.get('commit', '?'))[:10]}; median of 20 "
            "repeats after 3 warm-ups, CUDA events, same process and same weights; TF32 off.")
    return "\n".join(rows) + note


def update_readme() -> None:
    readme = ROOT / "README.md"
    text = readme.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    readme.write_text(text[:start] + "\n" + table() + "\n" + text[end:])


if __name__ == "__main__":
    if "--update" in sys.argv:
        update_readme()
    else:
        print(table())
