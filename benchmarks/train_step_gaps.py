"""Where a drained eager training step's time goes on the GPU timeline (issue 17): LSTM fp16
H=512 B=8 S=256 forward+backward (the bench's row), rnncc's twin and torch.nn (cuDNN), three
steps each between two device synchronisations under torch.profiler (CPU and CUDA): when the first
GPU operation starts after the step's start, when the last ends, the GPU's busy time, and for
the third step every operation with the gap before it. Writes both Chrome traces to DIR.

    python3 benchmarks/train_step_gaps.py DIR   (from the repository root; needs a GPU)
"""
import json
import sys

import torch
sys.path.insert(0, "benchmarks")
from backward_profile import training_case
from rnncc.bench import training_configs
from torch.profiler import profile, ProfilerActivity
cfg = [c for c in training_configs() if c.dtype == "float16" and c.cell == "lstm"][0]
module, twin, x, dy = training_case(cfg)
out = sys.argv[1]
for name, m in (("rnncc", twin), ("cudnn", module)):
    step = lambda: torch.autograd.grad(m(x)[0], [x, *m.parameters()], dy)
    for _ in range(10): step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(3):
            torch.cuda.synchronize(); step(); torch.cuda.synchronize()
    p.export_chrome_trace(f"{out}/train-step-trace-{name}.json")
    ev = [e for e in json.load(open(f"{out}/train-step-trace-{name}.json"))["traceEvents"] if e.get("ph") == "X"]
    gpu = sorted((e["ts"], e["ts"] + e["dur"], e["name"][:60]) for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    syncs = sorted(e["ts"] for e in ev if e["name"] == "cudaDeviceSynchronize")
    for k in range(3):
        a, b = syncs[2 * k] , syncs[2 * k + 1]
        ks = [g for g in gpu if a <= g[0] <= b + 5000]
        busy = sum(g[1] - g[0] for g in ks)
        print(f"{name} step {k}: host from sync to sync {b - a:.0f} us, first GPU op at +{ks[0][0] - a:.0f}, last ends +{ks[-1][1] - a:.0f}, GPU busy {busy:.0f}, ops {len(ks)}")
        if k == 2:
            prev = a
            for g in ks:
                print(f"   +{g[0] - a:7.0f} gap {g[0] - prev:6.0f} dur {g[1] - g[0]:6.0f} {g[2]}")
                prev = g[1]
