"""Times the K-split backward step prototype (ksplit_step.cu; issue 17): LSTM fp32 H=1024
at B=64, K = 4096 split over clusters of Q = 2 (64 clusters, 128 blocks) and Q = 4 (30
clusters, 120 blocks: an H100 holds 30 clusters of 4 at once, so the real kernel would own
9 units a block there). Prints µs a step (the product, the warps' and the cluster's sums; no
cell, no grid barrier; VARIANTS: the sums pushed, parts left out, or dG staged by
tensor-map copies) and the sums' largest error against a float64 product. Needs nvcc
and CuPy on a Hopper GPU.

    python3 benchmarks/ksplit_step.py > benchmarks/results/ksplit-step-<gpu>-<date>.txt
"""

from __future__ import annotations

import itertools
import subprocess
import tempfile
from pathlib import Path

import cupy as cp
import numpy as np
from forward_step import encode_tensor_map  # benchmarks/ is this script's directory

SOURCE = Path(__file__).with_suffix(".cu")
GH, B, U, NT, KC = 4096, 64, 8, 256, 128
STEPS = 500
# The step as designed, then variants that change or leave out its last parts (-D flags).
VARIANTS = {"pull (peers' sums read over DSMEM)": (),
            "push (sums stored to their owners)": ("PUSH",),
            "without the cluster's sums": ("NO_CLUSTER_SUM",),
            "without the warps' and cluster's sums": ("NO_WARP_SUM",),
            "pull, dG by tensor-map copies": ("TMA",),
            "push, dG by tensor-map copies": ("TMA", "PUSH")}
CHECKED = ("pull (peers' sums read over DSMEM)", "push (sums stored to their owners)",
           "pull, dG by tensor-map copies", "push, dG by tensor-map copies")


def shared_bytes(q: int, flags: tuple = ()) -> int:
    uc, kq = U * q, GH // q
    tma = "TMA" in flags  # dense boxes, and two mbarriers
    return 4 * (kq * uc + 2 * B * (KC if tma else KC + 4) + 2 * B * uc) + (16 if tma else 0)


def main() -> None:
    props = cp.cuda.runtime.getDeviceProperties(0)
    print(f"K-split backward step prototype on {props['name'].decode()}: LSTM fp32 H=1024 (K=4096), B=64, "
          f"{STEPS} steps, µs a step (the grid form's whole step: 30.9, results/backward-grid-unroll-h100-2026-11-27.txt)")
    rng = np.random.default_rng(0)
    dg = cp.asarray(rng.standard_normal((B, GH), dtype=np.float32))
    tmap = encode_tensor_map(dg.data.ptr, (GH, B), (GH * 4,), (32, B))  # for -DTMA: boxes of 32 floats × B rows
    with tempfile.TemporaryDirectory() as tmp:
        for (q, clusters), (variant, flags) in itertools.product(((2, 64), (4, 30)), VARIANTS.items()):
            cubin = Path(tmp) / f"ksplit_{q}_{len(flags)}_{'_'.join(flags)}.cubin"
            subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", f"-DQ={q}", f"-DCLUSTERS={clusters}",
                            *(f"-D{flag}" for flag in flags), "-o", str(cubin), str(SOURCE)], check=True)
            kernel = cp.RawModule(path=str(cubin)).get_function("k_ksplit")
            try:
                kernel.max_dynamic_shared_size_bytes = shared_bytes(q, flags)
            except AttributeError:  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                cp.cuda.driver.funcSetAttribute(kernel.ptr, 8, shared_bytes(q, flags))
            width = clusters * U * q
            w = cp.asarray(rng.standard_normal((GH, width), dtype=np.float32) / 64)
            dh = cp.full((B, width), cp.nan, cp.float32)
            times = []
            for steps in (10, STEPS):
                start, end = cp.cuda.Event(), cp.cuda.Event()
                start.record()
                kernel((clusters * q,), (NT,), (dg, w, dh, np.int32(steps), tmap), shared_mem=shared_bytes(q, flags))
                end.record()
                end.synchronize()
                times.append(cp.cuda.get_elapsed_time(start, end) * 1e3 / steps)
            check = "parts left out, not checked"
            if variant in CHECKED:
                want = dg.astype(cp.float64) @ w.astype(cp.float64)
                check = f"sums within {float(cp.abs(dh - want).max() / cp.abs(want).max()):.1e} of float64"
            print(f"Q={q}: {clusters} clusters of {q}, {U * q} units a cluster, K rows a block {GH // q}, "
                  f"shared {shared_bytes(q, flags) // 1024} KiB, {variant:<40s} {times[-1]:6.2f} µs a step, {check}", flush=True)


if __name__ == "__main__":
    main()
