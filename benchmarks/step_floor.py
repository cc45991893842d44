"""The floor of one GRU step in one block, B=1, H ∈ {33, 64, 100, 128}: rnncc's FMA
cluster structure today (K-split partials through shared memory, three block barriers a
step) against issue 14's plan (lanes per unit with weights in registers, shuffle
reduction, one barrier a step), and that with the projection loaded four steps ahead
instead of one; the kernels are in step_floor.cu. Each is checked against
a float64 NumPy GRU first, then timed; beside them cuDNN's GRU at the same shape captured
in a CUDA graph, when PyTorch is there. Needs nvcc, CuPy, PyCUDA and rnncc on a Hopper GPU.

    python3 benchmarks/step_floor.py > benchmarks/results/step-floor-<gpu>-<date>.txt
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import cupy as cp
import numpy as np

SOURCE = Path(__file__).with_suffix(".cu")
STEPS = 2000
SPLITS = (4, 8, 16)  # KS of k_smem and LANES of k_lanes


def reference(w: np.ndarray, xproj: np.ndarray) -> np.ndarray:
    """float64 GRU (PyTorch's gates r, z, n; b_hn = 0) from h0 = 0: y [S, H]."""
    S, H, _ = xproj.shape
    h, y = np.zeros(H), np.zeros((S, H))
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    for t in range(S):
        hw = np.einsum("ugk,k->ug", w, h)
        r, z = sig(xproj[t, :, 0] + hw[:, 0]), sig(xproj[t, :, 1] + hw[:, 1])
        n = np.tanh(xproj[t, :, 2] + r * hw[:, 2])
        h = (1 - z) * n + z * h
        y[t] = h
    return y


def cudnn_us(H: int) -> float | None:
    """µs a step of torch.nn.GRU(H, H), B=1, S=STEPS, float32, TF32 off, in a CUDA graph
    (rnncc's own graph timing)."""
    try:
        import torch
    except ImportError:
        return None
    from rnncc.driver import device_context
    from rnncc.timing import time_graph

    device_context().make_current()  # time_graph's events are PyCUDA's
    torch.backends.cudnn.allow_tf32 = False
    gru = torch.nn.GRU(H, H).cuda().eval()
    x = torch.randn(STEPS, 1, H, device="cuda")
    with torch.no_grad():
        return time_graph(lambda: gru(x), 1, 5).median_ms * 1e3 / STEPS


def main() -> None:
    props = cp.cuda.runtime.getDeviceProperties(0)
    print(f"one GRU step in one block on {props['name'].decode()}, B=1, {STEPS} steps "
          "(µs a step; error = max |y − ref| / max |ref| against float64)")
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        for H in (33, 64, 100, 128):
            w = rng.uniform(-1, 1, (H, 3, H)) / np.sqrt(H)
            xproj = rng.uniform(-1, 1, (STEPS, H, 3))
            want = reference(w, xproj)
            w_d, x_d = cp.asarray(w, cp.float32), cp.asarray(xproj, cp.float32)
            for split in SPLITS:
                if H * split > 1024:
                    continue
                cubin = Path(tmp) / f"floor_{H}_{split}.cubin"
                built = subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", f"-DH={H}",
                                        f"-DKS={split}", f"-DLANES={split}", "-Xptxas", "-v",
                                        "-o", str(cubin), str(SOURCE)], capture_output=True, text=True)
                if built.returncode:
                    print(f"H={H} split {split}: nvcc failed: {built.stderr.strip()[-300:]}")
                    continue
                spills = any(int(n) for n in re.findall(r"(\d+) bytes spill stores", built.stderr))
                module = cp.RawModule(path=str(cubin))
                for name in ("k_smem", "k_lanes", "k_ahead"):
                    kernel = module.get_function(name)
                    kp = -(-H // 32) * 32
                    shared = (kp * H * 3 + kp + H + (split - 1) * 3 * H) * 4 if name == "k_smem" else 0
                    if shared:
                        kernel.max_dynamic_shared_size_bytes = shared
                    y = cp.full((STEPS, H), np.nan, cp.float32)
                    kernel((1,), (H * split,), (w_d, x_d, y, np.int32(STEPS)), shared_mem=shared)
                    error = float(np.abs(y.get() - want).max() / np.abs(want).max())
                    start, end = cp.cuda.Event(), cp.cuda.Event()
                    start.record()
                    kernel((1,), (H * split,), (w_d, x_d, y, np.int32(STEPS)), shared_mem=shared)
                    end.record()
                    end.synchronize()
                    us = cp.cuda.get_elapsed_time(start, end) * 1e3 / STEPS
                    print(f"H={H:3d} split {split:2d} ({H * split:4d} threads): {name:7s} {us:6.3f} µs a step,"
                          f" error {error:.1e}{'  (ptxas reported spills in this build)' if spills else ''}",
                          flush=True)
            base = cudnn_us(H)
            if base is not None:
                print(f"H={H:3d}: cuDNN (torch.nn.GRU in a CUDA graph) {base:6.3f} µs a step", flush=True)


if __name__ == "__main__":
    main()
