"""The floor of a step's h exchange when W_hh spans several clusters (cross_cluster_exchange.cu:
st.async inside a cluster, a counter a cluster through L2 between them), beside
grid_exchange.cu's grid barrier and per-block flags at the same number of blocks, in one
process. H·B = 8192 values of h (issue 14's LSTM fp16 H=1024 B=8) over NC clusters of CL
blocks; 256 threads a block. Checks that k_cross gives grid_exchange's numbers and that no
spin gave up, and skips a shape whose clusters the GPU cannot hold at once. The question it
answers: is the multi-cluster design's exchange (estimated ~1.5 µs in docs/design-notes.md,
"Issue 14's LSTM fp16 H=1024 B=8: what 1.5× would take") below the grid's 2.6–2.8 µs?
Needs nvcc and CuPy on a Hopper GPU.

    python3 benchmarks/cross_cluster_exchange.py > benchmarks/results/cross-cluster-exchange-<gpu>-<date>.txt
"""

from __future__ import annotations

import ctypes
import subprocess
import tempfile
from pathlib import Path

import cupy as cp
import numpy as np

from rnncc.driver import clusters_at_once

HERE = Path(__file__).parent
STEPS = 5000
TOTAL = 8192
CASES = [(16, 2), (16, 4), (8, 4), (8, 8), (4, 8)]  # (blocks a cluster, clusters)
LIBCUDA = ctypes.CDLL("libcuda.so.1")
NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14  # CUfunction_attribute


def build(tmp: Path, source: str, defines: list[str]) -> cp.RawModule:
    cubin = tmp / (source + "_" + "_".join(d.lstrip("-D").replace("=", "") for d in defines) + ".cubin")
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", *defines, "-o", str(cubin), str(HERE / source)],
                   check=True)
    return cp.RawModule(path=str(cubin))


def timed(kernel, blocks: int, args_of) -> tuple[float, np.ndarray, bool]:
    """µs a step of the launch of STEPS steps (after a warm-up of 100), its output, and
    whether a spin gave up."""
    for steps in (100, STEPS):
        failed = cp.zeros(1, cp.uint32)
        out = cp.zeros(TOTAL, cp.float32)
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        kernel((blocks,), (256,), args_of(failed, out, np.int32(steps)))
        end.record()
        end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) * 1e3 / STEPS, out.get(), bool(failed.get()[0])


def main() -> None:
    props = cp.cuda.runtime.getDeviceProperties(0)
    print(f"cross-cluster exchange floor on {props['name'].decode()}, h of {TOTAL}, {STEPS} steps, "
          "256 threads a block")
    cp.zeros(1)  # the primary context, which clusters_at_once queries
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for cl, nc in CASES:
            blocks, values = cl * nc, TOTAL // (cl * nc)
            held = clusters_at_once(cl, 256, 0)[cl - 1]
            if held < nc:
                print(f"{nc} clusters of {cl}: the GPU holds {held} at once; skipped")
                continue
            cross = build(tmp, "cross_cluster_exchange.cu", [f"-DCL={cl}", f"-DNC={nc}"]).get_function("k_cross")
            if cl > 8:
                assert LIBCUDA.cuFuncSetAttribute(ctypes.c_void_p(cross.kernel.ptr),
                                                  NON_PORTABLE_CLUSTER_SIZE_ALLOWED, ctypes.c_int(1)) == 0
            grid = build(tmp, "grid_exchange.cu", [f"-DBLOCKS={blocks}", f"-DVALUES={values}"])
            rows = {
                "k_cross": timed(cross, blocks, lambda failed, out, steps: (
                    cp.zeros(2 * TOTAL, cp.float32), cp.zeros(nc, cp.uint32), failed, out, steps)),
                **{name: timed(grid.get_function(name), blocks, lambda failed, out, steps: (
                    cp.zeros(2 * TOTAL, cp.float32), cp.zeros(max(blocks, 4), cp.uint32), failed, out, steps))
                   for name in ("k_counter", "k_flags")}}
            for name, (us, _, gave_up) in rows.items():
                print(f"{nc} clusters of {cl:2d} ({blocks:3d} blocks): {name:9s} {us:6.3f} µs a step"
                      f"{'  (a spin gave up: not a valid time)' if gave_up else ''}", flush=True)
            same = np.array_equal(rows["k_cross"][1], rows["k_flags"][1])
            print(f"{nc} clusters of {cl:2d}: k_cross gives k_flags' numbers: {same}")


if __name__ == "__main__":
    main()
