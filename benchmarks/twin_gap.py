"""Where an rnncc.nn twin's eager time beyond its compiled model's goes: one row of the
bench (LSTM fp16 H=256 B=8 S=256 and GRU fp32 H=256 B=1), timed interleaved (each timed
call after an untimed one of itself) through each layer of the twin's path, with each
call's host time to queue it. Needs a GPU.

    python3 benchmarks/twin_gap.py
"""

from __future__ import annotations

import torch
from host_overhead import per_call_us  # benchmarks/ is this script's directory

import rnncc
import rnncc.nn as rnn
from rnncc.nn import _model_of, _runner_of
from rnncc.timing import time_interleaved


if __name__ == "__main__":
    torch.manual_seed(0)
    for cls, twin_cls, dtype, H, B in ((torch.nn.LSTM, rnn.LSTM, torch.half, 256, 8),
                                       (torch.nn.GRU, rnn.GRU, torch.float, 256, 1)):
        with torch.no_grad():
            module = cls(H, H).to("cuda", dtype).eval()
            twin = twin_cls(H, H).to("cuda", dtype).requires_grad_(False)
            twin.load_state_dict(module.state_dict())
            model, weights = rnncc.from_torch(module)
            compiled = rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=256)
            x = torch.randn(256, B, H, device="cuda", dtype=dtype)
            twin(x)
            spec = twin._specs[str(dtype).removeprefix("torch.")]
            inner = next(iter(_runner_of(spec).compiled.values()))[0]
            w = twin._weights()
            paths = {
                "compiled(x)": lambda: compiled(x),
                "compiled(x, stacked_state)": lambda: compiled(x, stacked_state=True),
                "twin's model(x, stacked_state)": lambda: inner(x, stacked_state=True),
                "twin's model.run_torch(x)": lambda: inner.run_torch(x),
                "runner.gpu": lambda: _runner_of(spec).gpu(_model_of(spec), w, x, {}, False, True),
                "twin.forward(x)": lambda: twin.forward(x),
                "twin(x)": lambda: twin(x),
            }
            timed = time_interleaved(paths, 5, 60, settle=1)
            print(f"{cls.__name__} {dtype} H={H} B={B} S=256")
            for name, fn in paths.items():
                print(f"  {name:<32} event ms {timed[name].median_ms:.3f}   host µs to queue {per_call_us(fn)[0]:7.1f}")
