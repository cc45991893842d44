"""Which side of each timed persistence pair the planner picks now, against what ran faster:
for a change to the cost model, whether it ranks the pairs that A/B runs measured. No GPU.

    PYTHONPATH=.:benchmarks python3 benchmarks/plan_choice_check.py [GLOB ...]
        # default: results/persistence-moves-h200-2026-11-29-rows-fit-*.jsonl
    PYTHONPATH=.:benchmarks python3 benchmarks/plan_choice_check.py 'results/persistence-moves-h200-2026-11-28*.jsonl' \
        'results/persistence-moves-h200-2026-11-29-[!f]*.jsonl'
        # every pair timed on the H200 before the FMA forms' refit (the 404 of its notes)

A pair is one line of persistence_census.py ab: the one-layer model forced to two
persistences and timed (eager calls where the line has them, else CUDA-graph replays). Prints
each pair whose pick ran slower by more than 3%, then the geometric mean of picked ÷ faster.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from persistence_census import key_of, layer_plan  # benchmarks/, beside this file
from rnncc.target import get


def picks(patterns: list[str]) -> tuple[list[Path], list[tuple[str, dict, float]]]:
    """(the files matched, and for each timed pair where the plan picks one of the two sides:
    its description, the two sides' µs and the picked side's time over the faster's). Files without the
    launches the pair was planned for (older A/B formats) are skipped, and so are pairs whose
    two sides share a label (two tiles of one mode: the label cannot tell which the plan
    picks)."""
    target, out = get("h200"), []
    here = Path(__file__).resolve().parent
    paths = sorted({p for pattern in patterns for p in here.glob(pattern)})
    for path in paths:
        S = 35 if "s35" in path.name else 256
        for line in path.read_text().splitlines():
            r = json.loads(line)
            kind = "eager_us" if f"before_eager_us_s{S}" in r else "us"
            if "launches" not in r or f"before_{kind}_s{S}" not in r:
                continue
            times = {key_of(r[side]): r[f"{side}_{kind}_s{S}"] for side in ("before", "after")}
            l = layer_plan(r["dtype"], r["cell"], r["H"], r["B"], S, r["launches"], target)
            pick = key_of(str(l.persistence.value))
            if pick not in times or len(times) < 2:
                continue
            out.append((f"{path.name}: {r['cell']} H={r['H']} B={r['B']} S={S} {r['launches']}: picks {pick}",
                        times, times[pick] / min(times.values())))
    return paths, out


def main(patterns: list[str]) -> None:
    """Prints each timed pair whose pick ran slower by more than 3%, then the summary."""
    paths, pairs = picks(patterns)
    for text, times, ratio in pairs:
        if ratio > 1.03:
            print(f"{text}, {ratio:.2f}× the faster ({times})")
    logs = [math.log(ratio) for _, _, ratio in pairs]
    print(f"{len(paths)} files; {len(pairs)} pairs where the plan picks one of the two; slower by > 3%: "
          f"{sum(r > 1.03 for _, _, r in pairs)}; picked ÷ faster geometric mean {math.exp(sum(logs) / len(logs)):.4f}, "
          f"worst {math.exp(max(logs)):.2f}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["results/persistence-moves-h200-2026-11-29-rows-fit-*.jsonl"])
