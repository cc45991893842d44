"""A grid kernel's start and step, apart: the recurrent kernel of a layer forced to
persistence "grid", timed alone on the GPU (torch.profiler, median of 5 calls) at several
sequence lengths, and a line through (S, µs) fitted by least squares: its intercept is the
start (the launch and W_hh's load into shared memory), its slope the step. Beside them the
cost model's step (`passes/cost.py`) and the bytes of W_hh a block loads, which the start
should follow if the load is what it costs. Needs a Hopper GPU.

    python3 benchmarks/grid_starts.py > benchmarks/results/grid-starts-<gpu>-<date>.txt
"""

from __future__ import annotations

import statistics

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

import rnncc

# (cell, dtype, H, B): W_hh from 1.5 to 24 MiB, fp16 and fp32 (FMA forms).
CASES = [("lstm", "float16", 512, 8), ("lstm", "float16", 1024, 8), ("gru", "float16", 1536, 8),
         ("lstm", "float16", 1536, 8), ("gru", "float16", 2048, 4), ("gru", "float16", 2048, 20),
         ("lstm", "float32", 1024, 8), ("gru", "float32", 333, 1), ("lstm", "float32", 1024, 64)]
LENGTHS = (1, 4, 16, 64)


def recurrent_us(fn) -> float:
    """GPU µs of the recurrent kernel(s) in one call of fn, median of 5 calls."""
    runs = []
    for _ in range(5):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        runs.append(sum(e.device_time_total for e in prof.events()
                        if e.device_type == torch.autograd.DeviceType.CUDA and "recurrent" in e.name))
    return statistics.median(runs)


def main() -> None:
    print(f"grid_starts: the recurrent kernel's GPU µs by S, persistence forced to grid, {torch.cuda.get_device_name()}")
    for cell, dtype, H, B in CASES:
        torch.manual_seed(0)
        tdt = getattr(torch, dtype)
        module = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cell](H, H).to("cuda", tdt).eval()
        model, weights = rnncc.from_torch(module)
        times, value, predicted = {}, None, None
        for S in LENGTHS:
            m = rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=S, persistence="grid",
                              precision="exact" if dtype == "float32" else None)
            decision = m.plan.layers[0].persistence
            value, predicted = decision.value, decision.alternatives.get("grid")
            x = torch.randn(S, B, H, device="cuda", dtype=tdt)
            with torch.no_grad():
                for _ in range(3):
                    m(x)
                times[S] = recurrent_us(lambda: m(x))
        step, start = np.polyfit(list(times), list(times.values()), 1)
        print(f"{cell} {dtype} H={H} B={B}: " + ", ".join(f"S={s} {t:.1f}" for s, t in times.items())
              + f" µs; start {start:.1f} µs, step {step:.2f} µs (model {predicted * 1e6 if predicted else float('nan'):.2f});"
              f" W_hh {module.weight_hh_l0.numel() * module.weight_hh_l0.element_size() / 2**20:.1f} MiB; {value}", flush=True)


if __name__ == "__main__":
    main()
