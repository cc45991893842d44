"""Where the host time of an rnncc.nn twin's forward goes, beside the compiled model's own
call: cProfile over many eager calls (GPU drained at the end), the top entries by
their own time. Needs a GPU (its numbers at 1e4ddd4 are quoted in the issue 13 note).

    python3 benchmarks/twin_profile.py
"""

from __future__ import annotations

import cProfile
import pstats

import torch
from host_overhead import per_call_us  # benchmarks/ is this script's directory

import rnncc
import rnncc.nn as rnn

CALLS = 300


if __name__ == "__main__":
    torch.manual_seed(0)
    with torch.no_grad():
        module = torch.nn.LSTM(256, 256).to("cuda", torch.half).eval()
        twin = rnn.LSTM(256, 256).to("cuda", torch.half).requires_grad_(False)
        twin.load_state_dict(module.state_dict())
        model, weights = rnncc.from_torch(module)
        compiled = rnncc.compile(model, target="device", weights=weights, batch=8, seq_len=64)
        x = torch.randn(64, 8, 256, device="cuda", dtype=torch.half)
        for name, fn in (("compiled", lambda: compiled(x)), ("twin", lambda: twin(x)),
                         ("torch.nn", lambda: module(x))):
            print(f"{name:<9} host µs to queue a call: {per_call_us(fn)[0]:.1f}")
        for name, fn in (("compiled", lambda: compiled(x)), ("twin", lambda: twin(x))):
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(CALLS):
                fn()
            prof.disable()
            torch.cuda.synchronize()
            print(f"---- {name}: by own time, {CALLS} calls")
            pstats.Stats(prof).sort_stats("tottime").print_stats(22)
