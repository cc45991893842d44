"""The measurements behind the cost model's GEMM constants (passes/cost.py): rnncc's input
projection kernels against cuBLASLt on the same projection, and cuBLASLt's per-step
product, each beside the model's prediction. Needs a GPU and PyTorch (CUDA events).

    python3 benchmarks/gemm_probe.py > benchmarks/results/gemm-probe-<gpu>-<date>.txt

Does not run as it stands: ``projection_ms`` calls CompiledModel internals of 2026-11-23
(``_load()`` without a variant, ``_workspace_for``, ``_project``'s old arguments) that have
changed since. Kept because results/gemm-probe-h100-2026-11-23.txt, which passes/cost.py
cites, came from it; timing the projection as projection_rows.py does (its kernel's GPU time
from torch.profiler) would mend it, but with cuBLASLt steps in the same call the library's
kernels must then be told apart by their order, not their names.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import time

import torch

import rnncc
from rnncc import arrays
from rnncc.dtypes import DTYPES
from rnncc.passes.cost import (library_gemm_seconds, library_step_seconds, projection_seconds,
                               tensor_projection_seconds)
from rnncc.target import from_device
from rnncc.timing import time_gpu

# (cell, dtype, precision, H, B): the bench's GEMM-bound rows.
CASES = [("lstm", "float16", "tensor", 2048, 256), ("lstm", "float32", "exact", 1024, 64),
         ("lstm", "float32", "tensor", 1024, 64), ("lstm", "bfloat16", "tensor", 1024, 64)]
S = 256


def projection_ms(compiled, x, B: int) -> float:
    """One chunk (F steps) of layer l0's projection, as the runtime launches it."""
    c = compiled
    c._load()
    l = c.plan.layers[0]
    ws = c._workspace_for(S, B)
    view = arrays.view(x, "input", c.model.dtype)
    tensors = {"input": (view, view.strides[0], view.strides[1])}
    steps = min(l.unroll.value, S)
    return time_gpu(lambda: c._project(l, tensors, 0, steps, B, int(ws["projection"])), 3, 10).median_ms


def main() -> None:
    commit = os.environ.get("RNNCC_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"gemm probe, {datetime.datetime.now(datetime.UTC):%F %H:%M} UTC, commit {commit}, "
          f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    target = from_device()
    for cell, dtype, precision, H, B in CASES:
        tdt = getattr(torch, dtype)
        torch.backends.cuda.matmul.allow_tf32 = dtype == "float32" and precision == "tensor"
        module = torch.nn.LSTM(H, H).cuda().to(tdt).eval()
        model, weights = rnncc.from_torch(module)
        x = torch.randn(S, B, H, device="cuda", dtype=tdt)
        itemsize = DTYPES[dtype].itemsize
        label = f"{cell} {dtype} {precision} H={H} B={B}"
        for gemm in ("rnncc", "cublas"):
            c = rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=S,
                              precision=precision, gemm=gemm, persistence="none")
            l = c.plan.layers[0]
            rows, GH = min(l.unroll.value, S) * B, l.gates * H
            ms = projection_ms(c, x, B)
            tflops = 2 * rows * GH * H / ms / 1e9
            tile = l.projection_tile.value
            if tile.math == "tensor":
                seconds = tensor_projection_seconds(rows, GH, H, tile, target, itemsize)
            elif tile.math == "fma":
                seconds = projection_seconds(rows, GH, H, tile, target, itemsize)
            else:
                seconds = library_gemm_seconds(GH, rows, H, itemsize, precision, target)
            predicted = seconds * 1e3
            print(f"{label}: projection {rows}×{GH}×{H} in {gemm:6s} {ms:8.3f} ms "
                  f"({tflops:6.1f} TFLOPS), model {predicted:8.3f} ms")
        # The whole forward with the step product in cuBLASLt: the host's time to queue it
        # (a library call and a cell-kernel launch a step) against the GPU's.
        c = rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=S,
                          precision=precision, gemm="cublas", persistence="none")
        c(x)
        torch.cuda.synchronize()
        start = time.perf_counter()
        c(x)
        host = time.perf_counter() - start
        gpu = time_gpu(lambda: c(x), 1, 5).median_ms
        print(f"{label}: forward with cuBLASLt steps: host {host * 1e3:.2f} ms to queue "
              f"({host / S * 1e6:.1f} µs a step), {gpu:.2f} ms in all")
        h = torch.randn(B, H, device="cuda", dtype=tdt)
        w = torch.randn(H, 4 * H, device="cuda", dtype=tdt)
        step = time_gpu(lambda: [h @ w for _ in range(100)], 2, 5).median_ms * 10
        print(f"{label}: step product {B}×{4 * H}×{H} in torch.matmul {step:8.2f} µs a call "
              f"(100 calls queued back to back), model of cuBLASLt + cell "
              f"{library_step_seconds(B, H, 4, itemsize, precision, target) * 1e6:6.2f} µs")


if __name__ == "__main__":
    main()
