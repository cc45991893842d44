"""Times the float32 LSTM forward prototype with W_hhᵀ in registers (forward_registers.cu;
issue 14's fp32 rows) beside rnncc's planned kernel at the same shape in the same process:
each variant (H, B, threads) prints µs a step and how far h after 16 steps is from a
float64 recurrence; then the first variant with parts left out; then rnncc's forward's
persistent kernel alone (torch.profiler, µs a step over S=256; its input projection is not
in it, as the prototype's is not). Needs nvcc, CuPy, torch and rnncc's runtime on a Hopper GPU.

    python3 benchmarks/forward_registers.py > benchmarks/results/forward-registers-<gpu>-<date>.txt
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import cupy as cp
import numpy as np

from forward_step import reference  # benchmarks/ is this script's directory

SOURCE = Path(__file__).with_suffix(".cu")
G, U = 4, 8
STEPS, CHECKED = 256, 16
VARIANTS = [(1024, 8, 512), (1024, 8, 256), (1024, 1, 512), (1024, 16, 512), (512, 8, 512), (512, 8, 256)]  # (H, B, NT)
SPLITS = {"without the staging": ("NO_STAGE",), "without the product": ("NO_PRODUCT",),
          "without the grid barrier": ("NO_BARRIER",), "the sums and cells alone": ("NO_STAGE", "NO_PRODUCT", "NO_BARRIER")}


def shared_bytes(h: int, b: int, nt: int) -> int:
    return 4 * (b * h + nt // 32 * b * 32)


def prototype(tmp: Path, rng) -> None:
    runs = [(v, "", ()) for v in VARIANTS] + [(VARIANTS[0], what, flags) for what, flags in SPLITS.items()]
    for (H, B, nt), what, flags in runs:
        w64 = rng.standard_normal((H, G * H)) / H ** 0.5
        xp64 = rng.standard_normal((STEPS, B, G * H))
        w, xp = cp.asarray(w64, cp.float32), cp.asarray(xp64, cp.float32)
        cubin = tmp / f"fr_{H}_{B}_{nt}{''.join('_' + f for f in flags)}.cubin"
        subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", f"-DH={H}", f"-DB={B}", f"-DNT={nt}",
                        *(f"-D{f}" for f in flags), "-o", str(cubin), str(SOURCE)], check=True)
        kernel = cp.RawModule(path=str(cubin)).get_function("k_forward_registers")
        size = shared_bytes(H, B, nt)
        kernel.max_dynamic_shared_size_bytes = size

        def run(steps: int):
            h = cp.zeros((2, B, H), cp.float32)
            barrier, status = cp.zeros(1, cp.uint32), cp.zeros(1, cp.uint32)
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            kernel((H // U,), (nt,), (w, xp, h, barrier, status, np.int32(steps)), shared_mem=size)
            end.record()
            end.synchronize()
            return h[(steps - 1) % 2], cp.cuda.get_elapsed_time(start, end) * 1e3 / steps, int(status[0])

        label = f"H={H} B={B} threads={nt}{', ' + what if what else ''}"
        got, _, gave_up = run(CHECKED)
        if gave_up:
            print(f"{label}: a grid barrier gave up, not timed", flush=True)
            continue
        check = "parts left out, not checked"
        if not flags:
            want = reference(w64.astype(np.float32).astype(np.float64),
                             xp64.astype(np.float32).astype(np.float64), CHECKED, B, H)
            check = f"h after {CHECKED} steps within {float(np.abs(cp.asnumpy(got) - want).max() / np.abs(want).max()):.1e} of float64"
        times = sorted(run(STEPS)[1] for _ in range(5))
        print(f"{label}: {times[2]:6.2f} µs a step (of 5 runs {times[0]:.2f}-{times[-1]:.2f}), {check}", flush=True)


def rnncc_kernels() -> None:
    import torch
    import rnncc
    from staged_sweep import persistent_kernel_us
    for H, B in dict.fromkeys((h, b) for h, b, _ in VARIANTS):
        spec = {"name": "fr", "dtype": "float32", "input_size": H,
                "layers": [{"name": "l0", "cell": "lstm", "hidden_size": H}]}
        m = rnncc.compile(spec, target="device", batch=B, seq_len=STEPS, precision="exact")
        x = torch.randn(STEPS, B, H, device="cuda")
        for _ in range(3):
            m(x)
        us = min(persistent_kernel_us(lambda: m(x)) or float("nan") for _ in range(3))
        print(f"rnncc H={H} B={B}: {m.plan.layers[0].persistence.value}: kernel {us / STEPS:6.2f} µs a step",
              flush=True)


def main() -> None:
    props = cp.cuda.runtime.getDeviceProperties(0)
    print(f"float32 LSTM forward prototype, W_hhᵀ in registers, on {props['name'].decode()}: {STEPS} steps, "
          f"µs a step, {U} units a block")
    with tempfile.TemporaryDirectory() as tmp:
        prototype(Path(tmp), np.random.default_rng(0))
    rnncc_kernels()


if __name__ == "__main__":
    main()
