"""Eager calls of a pipelined stack run directly against replayed from the runtime's CUDA
graph: the runtime replays a call seen before from a graph (call_graphs.py) unless it is
given initial states, is of NumPy arrays, or ``model.graphs`` is off; the plan is priced for
the replayed call (passes/schedule.replayed). Per case, eager times interleaved in one
process: the planned (pipelined) model replayed, the same model with ``graphs = False``
(each call queues its launches from Python), the same with initial states, and the
sequential schedule directly.

    python3 benchmarks/direct_calls.py OUT_DIR   (from the repository root; needs a GPU)

Writes OUT_DIR/direct-calls-<gpu>-<date>.json and prints a table.
"""
import json
import sys
from pathlib import Path

import torch

import rnncc
from rnncc.timing import time_interleaved

from pipeline_schedule import stack  # run as a script: benchmarks/ is on sys.path
from result_files import write_results

CASES = [("GNMT fp16 B=8", "examples/gnmt_encoder_fp16.yaml", 128, 8),
         ("4×LSTM fp16 H=1024 B=8", stack(4, 1024, "float16"), 256, 8),
         ("8×LSTM fp16 H=512 B=8", stack(8, 512, "float16"), 256, 8)]


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results")
    rows = []
    for name, spec, S, B in CASES:
        planned = rnncc.compile(spec, target="device", seq_len=S, batch=B)
        direct = rnncc.compile(spec, target="device", seq_len=S, batch=B)
        direct.graphs = False
        sequential = rnncc.compile(spec, target="device", seq_len=S, batch=B, schedule="sequential")
        sequential.graphs = False
        dt = getattr(torch, planned.model.dtype)
        x = torch.randn(S, B, planned.model.input_size, device="cuda", dtype=dt)
        state = {l.name: (torch.zeros(B, l.out_size, device="cuda", dtype=dt),
                          torch.zeros(B, l.hidden_size, device="cuda", dtype=dt))
                 for l in planned.model.layers}
        with torch.no_grad():
            timed = time_interleaved({"replayed": lambda: planned(x), "graphs off": lambda: direct(x),
                                      "with states": lambda: planned(x, state),
                                      "sequential, graphs off": lambda: sequential(x)}, 3, 20, settle=1)
        row = {"case": name, "schedule": planned.plan.schedule.value.label,
               "eager_ms": {k: round(t.median_ms, 4) for k, t in timed.items()}}
        rows.append(row)
        print(json.dumps(row, ensure_ascii=False), flush=True)
    write_results(out, "direct-calls", rows)


if __name__ == "__main__":
    main()
