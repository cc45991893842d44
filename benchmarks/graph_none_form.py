"""The launch-a-step form ("none") in plans for graphed calls at small batches, against the
persistent forms: for each shape, the plan for graphed calls (launches='graph') and the same
with each persistence mode forced, all timed as CUDA-graph replays interleaved in one
process, beside each plan's predicted µs a step. 4 × LSTM bf16 H=650 B=1 S=128 read its
graph plan (a launch a step) at 2.2 ms in graphs against 0.89 for the eager plan's grid
kernels (results/ab-schedule-moves-h100-2026-11-27.jsonl): this finds where the form's
price for graphed calls goes wrong before it moves.

    python3 benchmarks/graph_none_form.py OUT_DIR   (from the repository root; needs a GPU)

Writes OUT_DIR/graph-none-form-<gpu>-<date>.json and prints a table.
"""
import sys
from pathlib import Path

import torch

import rnncc
from rnncc.errors import PlanError
from rnncc.passes.schedule import step_seconds_of
from rnncc.timing import time_graphs_interleaved

from pipeline_schedule import stack  # run as a script: benchmarks/ is on sys.path
from result_files import write_results

# (cell, dtype, layers, H, B, S)
SHAPES = [("lstm", "bfloat16", 1, 650, 1, 128), ("lstm", "float16", 1, 650, 1, 128),
          ("lstm", "float16", 1, 1024, 1, 256), ("gru", "float16", 1, 650, 1, 128),
          ("lstm", "bfloat16", 4, 650, 1, 128), ("lstm", "float16", 1, 650, 3, 128)]
MODES = ("none", "grid", "cluster")


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results")
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for cell, dtype, layers, hidden, batch, seq_len in SHAPES:
        spec = stack(layers, hidden, dtype, cell)
        models = {"graph plan": rnncc.compile(spec, target="device", seq_len=seq_len, batch=batch, launches="graph"),
                  "eager plan": rnncc.compile(spec, target="device", seq_len=seq_len, batch=batch)}
        for mode in MODES:
            try:
                models[f"{mode} forced"] = rnncc.compile(spec, target="device", seq_len=seq_len, batch=batch,
                                                         launches="graph", persistence=mode)
            except PlanError:
                continue
        x = torch.randn(seq_len, batch, hidden, device="cuda", dtype=getattr(torch, dtype))
        ms = time_graphs_interleaved({k: (lambda m=m: m(x)) for k, m in models.items()})
        row = {"shape": f"{layers}×{cell} {dtype} H={hidden} B={batch} S={seq_len}",
               "graph_ms": {k: round(v, 4) for k, v in ms.items()},
               "measured_us_per_layer_step": {k: round(v * 1e3 / (seq_len * layers), 2) for k, v in ms.items()},
               "predicted_us_per_step": {k: round(step_seconds_of(m.plan.layers[0]) * 1e6, 2) for k, m in models.items()},
               "modes": {k: m.plan.layers[0].persistence.value.mode if hasattr(m.plan.layers[0].persistence.value, "mode")
                         else str(m.plan.layers[0].persistence.value) for k, m in models.items()},
               "schedules": {k: m.plan.schedule.value.label for k, m in models.items()}}
        rows.append(row)
        print(row["shape"], flush=True)
        for k in ms:
            print(f"  {k:14s} {row['modes'][k]:8s} {row['schedules'][k]:26s} graph {ms[k]:8.4f} ms  "
                  f"{row['measured_us_per_layer_step'][k]:6.2f} µs a layer-step, predicted "
                  f"{row['predicted_us_per_step'][k]:6.2f}", flush=True)
    write_results(out, "graph-none-form", rows)


if __name__ == "__main__":
    main()
