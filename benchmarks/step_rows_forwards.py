"""The rows steps of the S=256 forwards timed by persistence_census.py ab in the rows
model's refit (results/persistence-moves-h200-2026-11-29-rows-fit-*.jsonl), in the format
of step_rows_sweep.py (one tile a point) for fit_step_rows.py: a forward forced to rnncc's
FMA step kernel whose plan's step tile is a rows tile, its time over 256 less the
projection's price. No GPU.

    PYTHONPATH=. python3 benchmarks/step_rows_forwards.py benchmarks/results/step-rows-forwards-h200-2026-11-29.json

The tile each forward ran is the one the code of its round picked: round a ran the first
refit's constants, round b the second's (ROUNDS), with W_hh's L2 bound at the whole of L2.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import rnncc.passes.cost as cost
from persistence_census import layer_plan  # benchmarks/, beside this file
from rnncc.passes.geometry import projection_seconds_of
from rnncc.target import get
from rnncc.tiles import StepRows

RESULTS = Path(__file__).resolve().parent / "results"
ROUNDS = {"a": dict(STEP_ROWS_FIXED_SECONDS=2.46e-6, STEP_ROWS_L2_BYTES_PER_SECOND=7.7e12, STEP_ROWS_HBM_SHARE=0.91,
                    STEP_ROWS_REREAD_BYTES_PER_SECOND=10.3e12, STEP_ROWS_FMA_EFFICIENCY=0.234,
                    STEP_ROWS_OUTPUT_SECONDS=0.0, STEP_ROWS_CELL_SECONDS=0.0, WEIGHTS_L2_SHARE=1.0),
          "b": dict(STEP_ROWS_FIXED_SECONDS=1.89e-6, STEP_ROWS_L2_BYTES_PER_SECOND=5.37e12, STEP_ROWS_HBM_SHARE=0.743,
                    STEP_ROWS_REREAD_BYTES_PER_SECOND=9.93e12, STEP_ROWS_FMA_EFFICIENCY=0.587,
                    STEP_ROWS_OUTPUT_SECONDS=3.12e-9, STEP_ROWS_CELL_SECONDS=15.3e-9, WEIGHTS_L2_SHARE=1.0)}
S = 256


def main(out: Path) -> None:
    target, rows, seen = get("h200"), [], set()
    for path in sorted(RESULTS.glob("persistence-moves-h200-2026-11-29-rows-fit-*.jsonl")):
        launches = "graph" if "graph" in path.name else "eager"
        for name, value in ROUNDS[path.name.removeprefix("persistence-moves-h200-2026-11-29-rows-fit-")[0]].items():
            setattr(cost, name, value)
        for line in path.read_text().splitlines():
            r = json.loads(line)
            for side in ("before", "after"):
                if r[side] != "PerStep(math='fma')" or (r["cell"], r["H"], r["B"]) in seen:
                    continue
                seen.add((r["cell"], r["H"], r["B"]))
                l = layer_plan(r["dtype"], r["cell"], r["H"], r["B"], S, launches, target)
                tile = l.step_tile.value
                if isinstance(tile, StepRows):
                    step = r[f"{side}_us_s{S}"] / S - projection_seconds_of(l.projection_tile) / S * 1e6
                    rows.append({"cell": r["cell"], "dtype": r["dtype"], "hidden": r["H"], "batch": r["B"],
                                 "source": path.name, "step_us": {f"rows {tile.warps}w×{tile.rows}b": step}})
    out.write_text(json.dumps({"method": f"S={S} forwards (CUDA-graph replays) over {S}, less the projection's "
                               "price; the tile the round's code picked", "results": rows}, indent=1) + "\n")
    print(f"{len(rows)} rows steps written to {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
