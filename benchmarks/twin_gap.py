"""Where an rnncc.nn twin's eager time beyond its compiled model's goes: rows of the bench
(default LSTM fp16 H=256 B=8 and GRU fp32 H=256 B=1, S=256; or ``cell:dtype:H:B`` rows
given), timed interleaved (each timed call after an untimed one of itself) through each
layer of the twin's path. For each path also the host time of one call on an idle GPU
(what the bench's drained timing pays before the first kernel runs), and whether the
twin's plan for the call's shape class runs the same kernels as ``compile(batch=B)``.
Needs a GPU.

    python3 benchmarks/twin_gap.py [lstm:bfloat16:256:8 gru:float16:512:5 ...]
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

import rnncc
import rnncc.nn as rnn
from rnncc.nn import _model_of, _runner_of
from rnncc.timing import time_interleaved

DEFAULT_ROWS = ("lstm:float16:256:8", "gru:float32:256:1")
S = 256


def idle_host_us(fn, calls: int = 40) -> float:
    """Median host µs of one call made with the GPU idle (drained before each)."""
    samples = []
    for _ in range(calls):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(samples)


def row(cell: str, dtype_name: str, H: int, B: int) -> None:
    dtype = getattr(torch, dtype_name)
    cls, twin_cls = {"lstm": (torch.nn.LSTM, rnn.LSTM), "gru": (torch.nn.GRU, rnn.GRU)}[cell]
    with torch.no_grad():
        module = cls(H, H).to("cuda", dtype).eval()
        twin = twin_cls(H, H).to("cuda", dtype).requires_grad_(False)
        twin.load_state_dict(module.state_dict())
        model, weights = rnncc.from_torch(module)
        compiled = rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=S)
        x = torch.randn(S, B, H, device="cuda", dtype=dtype)
        twin(x)
        spec = twin._specs[dtype_name]
        inner = next(iter(_runner_of(spec).compiled.values()))[0]
        ours = {k.family: k.name for k in compiled.variant(S, B).kernels}
        theirs = {k.family: k.name for k in inner.variant(S, B).kernels}
        w = twin._weights()
        paths = {
            "compiled(x)": lambda: compiled(x),
            "compiled(x, stacked_state)": lambda: compiled(x, stacked_state=True),
            "twin's model.run_torch(x)": lambda: inner.run_torch(x),
            "runner.gpu": lambda: _runner_of(spec).gpu(_model_of(spec), w, x, {}, False, True),
            "twin._forward_plain(x)": lambda: twin._forward_plain(x),
            "twin(x)": lambda: twin(x),
        }
        timed = time_interleaved(paths, 5, 60, settle=1)
        print(f"{cell} {dtype_name} H={H} B={B} S={S}: twin's kernels "
              + ("equal compile(batch=B)'s" if ours == theirs else f"differ: {theirs} vs {ours}"))
        for name, fn in paths.items():
            print(f"  {name:<28} event ms {timed[name].median_ms:.3f}   "
                  f"host µs of one call, GPU idle {idle_host_us(fn):6.1f}", flush=True)


if __name__ == "__main__":
    torch.manual_seed(0)
    for spec in sys.argv[1:] or DEFAULT_ROWS:
        cell, dtype_name, H, B = spec.split(":")
        row(cell, dtype_name, int(H), int(B))
