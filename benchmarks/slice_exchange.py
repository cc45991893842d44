"""The floor of a step's all-to-all slice exchange in a cluster of 16 (slice_exchange.cu):
the backward recurrence's cluster kernel sends its dG slice (2 KB a block at LSTM fp16
H=512 B=8, four times the forward's h slice) to every peer each step, and the exchange and
its wait were ~1 µs of its 2.5 (results/backward-split-h100-2026-11-25.txt). Ways to move
the same bytes, µs a step, at slices of 512 B (the forward's), 1536 (GRU H=512) and 2048,
one cluster alone and as many as the GPU holds at once; every way's buffers must equal the
bulk copies' at the end. Needs nvcc and CuPy on a Hopper GPU.

    python3 benchmarks/slice_exchange.py > benchmarks/results/slice-exchange-<gpu>-<date>.txt
"""

from __future__ import annotations

import ctypes
import subprocess
import tempfile
from pathlib import Path

import cupy as cp
import numpy as np

from rnncc.driver import clusters_at_once

SOURCE = Path(__file__).with_suffix(".cu")
STEPS = 20000
CLUSTER = 16
LIBCUDA = ctypes.CDLL("libcuda.so.1")
NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14  # CUfunction_attribute
ONE_BLOCK_AN_SM = 200 * 1024  # bytes of dynamic shared memory that leave room for one block
MODES = {0: "bulk, a copy a peer", 1: "bulk, 2 parts a peer", 12: "bulk, 4 parts a peer",
         2: "st.async, 16 B a thread", 3: "half bulk, half st.async", 4: "pull after a cluster barrier",
         5: "multicast from global", 6: "none (the rest's floor)"}


def build(tmp: Path, mode: int, slice_bytes: int) -> cp.RawKernel:
    real_mode, parts = (1, 4) if mode == 12 else (mode, 2)
    cubin = tmp / f"x{mode}_{slice_bytes}.cubin"
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", "-diag-suppress", "177", f"-DCL={CLUSTER}",
                    f"-DSLICE={slice_bytes}", f"-DMODE={real_mode}", f"-DPARTS={parts}", "-o", str(cubin),
                    str(SOURCE)], check=True)
    kernel = cp.RawModule(path=str(cubin)).get_function("exchange")
    kernel.max_dynamic_shared_size_bytes = ONE_BLOCK_AN_SM
    assert LIBCUDA.cuFuncSetAttribute(ctypes.c_void_p(kernel.kernel.ptr), NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                                      ctypes.c_int(1)) == 0
    return kernel


def run(kernel, clusters: int, slice_bytes: int, steps: int) -> tuple[float, np.ndarray]:
    blocks = clusters * CLUSTER
    out = cp.zeros(blocks * CLUSTER * slice_bytes // 4, cp.uint32)
    scratch = cp.zeros(clusters * 2 * CLUSTER * slice_bytes // 4, cp.uint32)
    kernel((blocks,), (256,), (out, scratch, np.int32(100)), shared_mem=ONE_BLOCK_AN_SM)  # warm up
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    kernel((blocks,), (256,), (out, scratch, np.int32(steps)), shared_mem=ONE_BLOCK_AN_SM)
    end.record()
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) * 1e3 / steps, out.get()


def main() -> None:
    props = cp.cuda.runtime.getDeviceProperties(0)
    cp.zeros(1)  # CuPy makes the primary context current, which the query below uses
    at_once = clusters_at_once(CLUSTER, 256, ONE_BLOCK_AN_SM)[CLUSTER - 1]
    print(f"slice exchange in clusters of {CLUSTER} on {props['name'].decode()}, {STEPS} steps, 256 threads, "
          f"one block an SM; µs a step")
    with tempfile.TemporaryDirectory() as tmp:
        for slice_bytes in (512, 1536, 2048):
            reference = {}
            for mode, name in MODES.items():
                kernel = build(Path(tmp), mode, slice_bytes)
                cells = []
                for clusters in (1, at_once):
                    try:
                        us, out = run(kernel, clusters, slice_bytes, STEPS)
                    except cp.cuda.driver.CUDADriverError as e:  # more clusters than fit
                        cells.append(f"{clusters} clusters: {e}")
                        continue
                    if mode == 0:
                        reference[clusters] = out
                    same = "" if mode == 6 else " same" if np.array_equal(out, reference[clusters]) else " DIFFERS"
                    cells.append(f"{clusters:2d} cluster(s) {us:6.3f}{same}")
                print(f"slice {slice_bytes:5d} B  {name:30s} " + "   ".join(cells), flush=True)


if __name__ == "__main__":
    main()
