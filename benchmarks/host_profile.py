"""Where the host time of an eager call goes: cProfile over many back-to-back calls of a
compiled model and of its rnncc.nn twin (LSTM fp16 B=8, H=256 and S=256 unless the
arguments say, one bench row),
functions by their own time, beside torch.nn's host time to queue the same call. Needs a
GPU and PyTorch. The arguments set S (e.g. 64, where the launches weigh more) and H.

    python3 benchmarks/host_profile.py [S [H]]
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys

import torch
from host_overhead import per_call_us  # benchmarks/ is this script's directory

import rnncc
import rnncc.nn as rnn

CALLS = 300

if __name__ == "__main__":
    torch.manual_seed(0)
    S = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    H, B = int(sys.argv[2]) if len(sys.argv) > 2 else 256, 8
    with torch.no_grad():
        module = torch.nn.LSTM(H, H).to("cuda", torch.half).eval()
        twin = rnn.LSTM(H, H).to("cuda", torch.half).requires_grad_(False)
        twin.load_state_dict(module.state_dict())
        model, weights = rnncc.from_torch(module)
        compiled = rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=S)
        x = torch.randn(S, B, H, device="cuda", dtype=torch.half)
        paths = {"torch.nn (cuDNN)": lambda: module(x), "compiled(x)": lambda: compiled(x),
                 "compiled(x, stacked_state)": lambda: compiled(x, stacked_state=True),
                 "twin(x)": lambda: twin(x)}
        for name, fn in paths.items():
            print(f"{name:<28} host µs to queue {per_call_us(fn)[0]:7.1f}")
        for name in ("compiled(x)", "twin(x)"):
            fn = paths[name]
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(CALLS):
                fn()
            profile.disable()
            torch.cuda.synchronize()
            text = io.StringIO()
            pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(28)
            print(f"\n==== {name}: {CALLS} calls, by own time ====")
            print(text.getvalue().split("\n", 6)[-1])
