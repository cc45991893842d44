"""Does the order of interleaved timing decide the twin's gap? Bench rows whose twin came
out 1.1–1.2× its compiled model in the full bench (but ~1.05× timed alone by
twin_gap.py), timed as the bench does (rnncc, cuDNN and the twin interleaved, each call
right after another's) and with ``settle=1`` (each timed call after an untimed call of
itself, as in a loop of its own). Needs a GPU.

    python3 benchmarks/twin_order.py
"""

from __future__ import annotations

import torch

import rnncc
import rnncc.nn as rnn
from rnncc.timing import time_interleaved

ROWS = [("LSTM", torch.half, 256, 8), ("LSTM", torch.bfloat16, 256, 8),
        ("GRU", torch.bfloat16, 256, 64), ("GRU", torch.float, 256, 1), ("LSTM", torch.half, 1024, 8)]

if __name__ == "__main__":
    torch.manual_seed(0)
    print("twin ÷ rnncc (medians of 40 interleaved calls, S=256)")
    for cell, dtype, H, B in ROWS:
        with torch.no_grad():
            module = getattr(torch.nn, cell)(H, H).to("cuda", dtype).eval()
            twin = getattr(rnn, cell)(H, H).to("cuda", dtype).requires_grad_(False)
            twin.load_state_dict(module.state_dict())
            model, weights = rnncc.from_torch(module)
            compiled = rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=256)
            xs = [torch.randn(256, B, H, device="cuda", dtype=dtype) for _ in range(3)]
            turn = iter(range(10**9))
            fns = {"rnncc": lambda: compiled(xs[next(turn) % 3]), "cudnn": lambda: module(xs[next(turn) % 3]),
                   "twin": lambda: twin(xs[next(turn) % 3])}
            for settle in (0, 1, 0, 1):
                t = time_interleaved(fns, 3, 40, settle=settle)
                print(f"{cell} {dtype} H={H} B={B} settle={settle}: rnncc {t['rnncc'].median_ms:.3f} "
                      f"cudnn {t['cudnn'].median_ms:.3f} twin {t['twin'].median_ms:.3f} ms, "
                      f"twin/rnncc {t['twin'].median_ms / t['rnncc'].median_ms:.3f}", flush=True)
