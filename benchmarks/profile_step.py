"""One forward of a one-layer model as the planner plans it, to run under Nsight Compute:
where a persistent kernel's step spends its time (warp stall reasons, issue slots).
Needs a GPU.

    ncu --kernel-name regex:recurrent --launch-count 1 --section WarpStateStats \\
        --section SchedulerStats python3 benchmarks/profile_step.py gru float32 100 1 2200
"""

from __future__ import annotations

import sys

import torch

import rnncc

if __name__ == "__main__":
    cell, dtype, H, B, S = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
    torch.manual_seed(0)
    module = getattr(torch.nn, cell.upper())(H, H).to("cuda", getattr(torch, dtype))
    model, weights = rnncc.from_torch(module)
    compiled = rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=S)
    print(next(line for line in compiled.explain().splitlines() if "persistence" in line)[:400],
          file=sys.stderr)
    x = torch.randn(S, B, H, device="cuda", dtype=getattr(torch, dtype))
    with torch.no_grad():
        compiled(x)
    torch.cuda.synchronize()
