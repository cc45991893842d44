"""One layer's forward as rnncc plans it, called three times, to run under Nsight Compute
(profile the third call's recurrent kernel). Prints the layer's persistence decision and
tile first, so that the counters can be read against what the planner assumed.

    ncu --clock-control none -k regex:rnncc_recurrent --launch-skip 2 --launch-count 1 \\
        --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \\
        --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \\
        python3 benchmarks/ncu_layer.py lstm float16 1024 64 128 > OUT.txt

Needs a GPU, PyTorch and PyCUDA.
"""

from __future__ import annotations

import sys

import torch

import rnncc

if __name__ == "__main__":
    cell, dtype, hidden, batch, seq_len = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
    torch.manual_seed(0)
    tdt = getattr(torch, dtype)
    module = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cell](hidden, hidden).to("cuda", tdt).eval()
    model, weights = rnncc.from_torch(module)
    compiled = rnncc.compile(model, target="device", weights=weights, batch=batch, seq_len=seq_len)
    layer = compiled.plan.layers[0]
    print(f"{cell} {dtype} H={hidden} B={batch} S={seq_len}: {layer.persistence.value}\n"
          f"  why: {layer.persistence.reason}", flush=True)
    x = torch.randn(seq_len, batch, hidden, device="cuda", dtype=tdt)
    with torch.no_grad():
        for _ in range(3):
            compiled(x)
    torch.cuda.synchronize()
