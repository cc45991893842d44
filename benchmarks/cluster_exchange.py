"""The floor of a step's h exchange in a thread-block cluster, two ways (the kernels are in
cluster_exchange.cu): DSMEM stores + cluster barrier (cooperative_groups' cluster.sync),
and st.async with mbarrier transaction counts (each block waits on its own mbarrier).
Prints µs a step for clusters of 2, 4, 8 and 16 (the non-portable size, opted into), one
cluster and 32 at once, checks that both give the same numbers, and counts the fences in
each kernel's SASS; first, how many clusters of each size 1–16 the GPU holds at once with
one block an SM (cuOccupancyMaxActiveClusters, through rnncc.driver.clusters_at_once).
Needs nvcc, cuobjdump and CuPy on a Hopper GPU.

    python3 benchmarks/cluster_exchange.py > benchmarks/results/cluster-exchange-<gpu>-<date>.txt
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
LIBCUDA = ctypes.CDLL("libcuda.so.1")
NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14  # CUfunction_attribute
ONE_BLOCK_AN_SM = 200 * 1024  # bytes of dynamic shared memory that leave room for one block


def main() -> None:
    props = cp.cuda.runtime.getDeviceProperties(0)
    print(f"cluster exchange floor on {props['name'].decode()}, {STEPS} steps, 256 threads a block")
    cp.zeros(1)  # CuPy makes the primary context current, which the query below uses
    at_once = clusters_at_once(16, 256, ONE_BLOCK_AN_SM)
    print("clusters at once with one block an SM (size: count): "
          + ", ".join(f"{size}: {n}" for size, n in enumerate(at_once, 1)))
    with tempfile.TemporaryDirectory() as tmp:
        for cluster in (2, 4, 8, 16):
            cubin = Path(tmp) / f"exchange{cluster}.cubin"
            subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", f"-DCL={cluster}", "-o",
                            str(cubin), str(SOURCE)], check=True)
            sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True,
                                  text=True).stdout
            module = cp.RawModule(path=str(cubin))
            results = {}
            for name in ("k_sync", "k_async"):
                body = sass.split(f"Function : {name}")[1].split("Function :")[0]
                fences = body.count("MEMBAR.ALL.GPU")
                kernel = module.get_function(name)
                if cluster > 8:
                    assert LIBCUDA.cuFuncSetAttribute(ctypes.c_void_p(kernel.kernel.ptr),
                                                      NON_PORTABLE_CLUSTER_SIZE_ALLOWED, ctypes.c_int(1)) == 0
                for clusters in (1, 32):
                    out = cp.zeros(clusters * cluster * 256, cp.float32)
                    kernel((clusters * cluster,), (256,), (out, np.int32(100)))  # warm up
                    start, end = cp.cuda.Event(), cp.cuda.Event()
                    start.record()
                    kernel((clusters * cluster,), (256,), (out, np.int32(STEPS)))
                    end.record()
                    end.synchronize()
                    us = cp.cuda.get_elapsed_time(start, end) * 1e3 / STEPS
                    results[name, clusters] = out.get()
                    print(f"cluster of {cluster}, {clusters:2d} cluster(s): {name:8s} {us:6.3f} µs a step"
                          f"  (MEMBAR.ALL.GPU in SASS: {fences})")
            same = all(np.array_equal(results["k_sync", n], results["k_async", n]) for n in (1, 32))
            print(f"cluster of {cluster}: both give the same numbers: {same}")


if __name__ == "__main__":
    main()
