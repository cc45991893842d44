"""Where a drained eager training step's time goes on the GPU timeline (issue 17): LSTM fp16
H=512 B=8 S=256 forward+backward (the bench's row), rnncc's twin and torch.nn (cuDNN), three
steps each between two device synchronisations under torch.profiler (CPU and CUDA): when the first
GPU operation starts after the step's start, when the last ends, the GPU's busy time, and for
the third step every operation with the gap before it. Writes both Chrome traces to DIR.

    python3 benchmarks/train_step_gaps.py DIR [INDEX]   (from the repository root; needs a GPU)

INDEX picks another of rnncc.bench.training_configs() (default 0, the fp16 row; 1 is the
float32 H=1024 B=64 row). Where a step has more than 60 operations, only those after a
gap over 5 µs are listed, with the count of the rest.
"""
import json
import sys

import torch
sys.path.insert(0, "benchmarks")
from backward_profile import training_case
from rnncc.bench import training_configs
from torch.profiler import profile, ProfilerActivity
cfg = training_configs()[int(sys.argv[2]) if len(sys.argv) > 2 else 0]
print(f"{cfg.label} S={cfg.seq_len}")
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
            prev, quiet = a, 0
            for g in ks:
                if len(ks) <= 60 or g[0] - prev > 5:
                    print(f"   +{g[0] - a:7.0f} gap {g[0] - prev:6.0f} dur {g[1] - g[0]:6.0f} {g[2]}")
                else:
                    quiet += 1
                prev = max(prev, g[1])
            if quiet:
                print(f"   ({quiet} operations after gaps of 5 µs or less not listed)")
