"""Times the float32 LSTM forward prototype with K split across a cluster
(forward_ksplit.cu; issue 17's fp32 row) at B=64: each variant (H, blocks a cluster Q,
units a block U, chunk of K staged KC, buffers) prints µs a step and how far h after 16
steps is from a float64 recurrence; then the first two-block variant with parts left out.
Against: rnncc's staged grid kernel at LSTM H=1024 B=64, 19.6 µs a step (the kernel alone,
results/staged-sweep-h100-2026-11-27.txt), and the Q=1 variant here (the same kernel
without the split). An H100 holds 66 clusters of 2 and 30 of 4 at one block an SM, so
clusters of 4 run H=960 (30 clusters of 32 units). Needs nvcc and CuPy on a Hopper GPU.

    python3 benchmarks/forward_ksplit.py > benchmarks/results/forward-ksplit-<gpu>-<date>.txt
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import cupy as cp
import numpy as np

from forward_step import reference  # benchmarks/ is this script's directory

SOURCE = Path(__file__).with_suffix(".cu")
B, G, NT = 64, 4, 256
STEPS, CHECKED = 256, 16
# (H, Q, U, KC, STAGES)
VARIANTS = [(1024, 1, 8, 128, 2), (1024, 2, 8, 128, 2), (1024, 2, 8, 64, 3),
            (960, 1, 8, 160, 2), (960, 2, 8, 160, 2), (960, 4, 8, 80, 2)]
# parts left out of the first two-block variant's step (forward_ksplit.cu's -D flags)
SPLITS = {"without the staging": ("NO_STAGE",), "without the product": ("NO_PRODUCT",),
          "without the exchange": ("NO_EXCHANGE",), "without the grid barrier": ("NO_BARRIER",)}


def shared_bytes(h: int, q: int, u: int, kc: int, stages: int) -> int:
    """forward_ksplit.cu's SHARED_FLOATS × 4."""
    cols, wk = G * q * u, 8 // (G * q * u // 32)
    sums = max(stages * B * (kc + 4), wk // 2 * B * cols)
    return 4 * (h // q * cols + sums + q * B * G * u + B * u)


def main() -> None:
    props = cp.cuda.runtime.getDeviceProperties(0)
    print(f"float32 LSTM forward prototype, K split across a cluster, on {props['name'].decode()}: B={B}, "
          f"{STEPS} steps, µs a step (rnncc's staged grid kernel at H=1024: 19.6)")
    rng = np.random.default_rng(0)
    runs = [(v, "", ()) for v in VARIANTS] + [(VARIANTS[1], what, flags) for what, flags in SPLITS.items()]
    with tempfile.TemporaryDirectory() as tmp:
        for (H, q, u, kc, stages), what, flags in runs:
            w64 = rng.standard_normal((H, G * H)) / H ** 0.5
            xp64 = rng.standard_normal((STEPS, B, G * H))
            w, xp = cp.asarray(w64, cp.float32), cp.asarray(xp64, cp.float32)
            cubin = Path(tmp) / f"fk_{H}_{q}_{u}_{kc}_{stages}{''.join('_' + f for f in flags)}.cubin"
            subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", f"-DH={H}", f"-DQ={q}", f"-DUNITS={u}",
                            f"-DKC={kc}", f"-DSTAGES={stages}", *(f"-D{f}" for f in flags),
                            "-o", str(cubin), str(SOURCE)], check=True)
            kernel = cp.RawModule(path=str(cubin)).get_function("k_forward_ksplit")
            size = shared_bytes(H, q, u, kc, stages)
            try:
                kernel.max_dynamic_shared_size_bytes = size
            except AttributeError:  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                cp.cuda.driver.funcSetAttribute(kernel.ptr, 8, size)

            def run(steps: int):
                h = cp.zeros((2, B, H), cp.float32)
                barrier, status = cp.zeros(1, cp.uint32), cp.zeros(1, cp.uint32)
                start, end = cp.cuda.Event(), cp.cuda.Event()
                start.record()
                kernel((H // u,), (NT,), (w, xp, h, barrier, status, np.int32(steps)), shared_mem=size)
                end.record()
                end.synchronize()
                return h[(steps - 1) % 2], cp.cuda.get_elapsed_time(start, end) * 1e3 / steps, int(status[0])

            label = f"H={H} Q={q} U={u} KC={kc} STAGES={stages}{', ' + what if what else ''}, shared {size // 1024} KiB"
            got, _, gave_up = run(CHECKED)
            if gave_up:
                print(f"{label}: a grid barrier gave up (not every block resident), not timed", flush=True)
                continue
            check = "parts left out, not checked"
            if not flags:
                want = reference(w64.astype(np.float32).astype(np.float64),
                                 xp64.astype(np.float32).astype(np.float64), CHECKED, B, H)
                check = f"h after {CHECKED} steps within " \
                    f"{float(np.abs(cp.asnumpy(got) - want).max() / np.abs(want).max()):.1e} of float64"
            times = sorted(run(STEPS)[1] for _ in range(5))
            print(f"{label}: {times[2]:6.2f} µs a step (of 5 runs {times[0]:.2f}-{times[-1]:.2f}), {check}", flush=True)


if __name__ == "__main__":
    main()
