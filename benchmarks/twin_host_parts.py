"""Host µs of each piece of an rnncc.nn twin's plain call (LSTM fp16 H=256 B=8 S=256),
each timed alone over many repetitions with time.perf_counter: what a wrapper around
the compiled model's entry costs, piece by piece. Needs a GPU.

    cd benchmarks && python3 twin_host_parts.py
"""

from __future__ import annotations

import torch
from host_overhead import per_call_us  # benchmarks/ is this script's directory

import rnncc.nn as rnn
from rnncc.nn import _model_of, _runner_of

N = 20000


if __name__ == "__main__":
    with torch.no_grad():
        twin = rnn.LSTM(256, 256).to("cuda", torch.half).requires_grad_(False)
        x = torch.randn(256, 8, 256, device="cuda", dtype=torch.half)
        twin(x)
        torch.cuda.synchronize()
        spec = twin._specs["float16"]
        runner, model = _runner_of(spec), _model_of(spec)
        w = twin._weights()
        params = list(twin._parameters.values())
        pieces = {
            "empty lambda": lambda: None,
            "torch.is_grad_enabled()": lambda: torch.is_grad_enabled(),
            "torch.compiler.is_compiling()": lambda: torch.compiler.is_compiling(),
            "x.is_cuda and x.dim() and x.shape[2] and x.stride(2)":
                lambda: x.is_cuda and x.dim() == 3 and x.shape[2] == 256 and x.stride(2) == 1,
            "x.dtype, params dtype": lambda: x.dtype != twin._parameters["weight_ih_l0"].dtype,
            "_runner_of(spec), _model_of(spec)": lambda: (_runner_of(spec), _model_of(spec)),
            "twin._weights()": lambda: twin._weights(),
            "x.get_device()": lambda: x.get_device(),
            "torch.get_float32_matmul_precision()": lambda: torch.get_float32_matmul_precision(),
            "version tuple (data_ptr, _version)": lambda: tuple((p.data_ptr(), p._version) for p in w.values()),
            "version tuple (_version only)": lambda: tuple(p._version for p in params),
            "runner.compiled_for(...)": lambda: runner.compiled_for(model, w, x),
            "twin._forward_plain(x) (queues work)": lambda: twin._forward_plain(x),
            "twin(x) (queues work)": lambda: twin(x),
            "model.run_torch(x) (queues work)": lambda: runner.compiled_for(model, w, x).run_torch(x),
        }
        for name, fn in pieces.items():
            queues = "queues work" in name  # few enough that the launch queue never fills
            print(f"{name:<58} {per_call_us(fn, 200 if queues else N)[0]:7.2f} µs", flush=True)
            torch.cuda.synchronize()
