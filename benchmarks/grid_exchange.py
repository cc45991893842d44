"""The floor of a step's h exchange across a grid of co-resident blocks, three ways (the
kernels are in grid_exchange.cu): rnncc's grid barrier today (one arrival counter and a
generation word), a step-stamped flag per block (GRNN), and h that carries its step in
each 8-byte word (the load is the wait; Baidu's persistent RNN keeps a counter in each
cache line). Prints µs a step for 32, 64 and 128 blocks and 4096–16384 values of h
(H·B: 8192 is H=1024, B=8), checks that the three give the same numbers, and that no
spin gave up. The design this measures is in docs/design-notes.md (issue 14). Needs
nvcc and CuPy on a Hopper GPU.

    python3 benchmarks/grid_exchange.py > benchmarks/results/grid-exchange-<gpu>-<date>.txt
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import cupy as cp
import numpy as np

SOURCE = Path(__file__).with_suffix(".cu")
STEPS = 5000
CASES = [(32, 128), (64, 64), (128, 32), (128, 64), (128, 128)]  # (blocks, values a block)


def main() -> None:
    props = cp.cuda.runtime.getDeviceProperties(0)
    print(f"grid exchange floor on {props['name'].decode()}, {STEPS} steps, 256 threads a block")
    with tempfile.TemporaryDirectory() as tmp:
        for blocks, values in CASES:
            cubin = Path(tmp) / f"exchange_{blocks}_{values}.cubin"
            subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", f"-DBLOCKS={blocks}",
                            f"-DVALUES={values}", "-o", str(cubin), str(SOURCE)], check=True)
            module = cp.RawModule(path=str(cubin))
            total = blocks * values
            results = {}
            for name in ("k_counter", "k_flags", "k_stamped"):
                kernel = module.get_function(name)
                times = []
                for steps in (100, STEPS):  # a warm-up launch, then the timed one
                    failed = cp.zeros(1, cp.uint32)
                    out = cp.zeros(total, cp.float32)
                    if name == "k_stamped":
                        args = (cp.zeros(2 * total, cp.uint64), failed, out, np.int32(steps))
                    else:
                        sync = cp.zeros(max(blocks, 4), cp.uint32)
                        args = (cp.zeros(2 * total, cp.float32), sync, failed, out, np.int32(steps))
                    start, end = cp.cuda.Event(), cp.cuda.Event()
                    start.record()
                    kernel((blocks,), (256,), args)
                    end.record()
                    end.synchronize()
                    times.append(cp.cuda.get_elapsed_time(start, end) * 1e3 / steps)
                gave_up = bool(failed.get()[0])
                results[name] = out.get()
                print(f"{blocks:3d} blocks, h of {total:5d}: {name:9s} {times[-1]:6.3f} µs a step"
                      f"{'  (a spin gave up: not a valid time)' if gave_up else ''}", flush=True)
            same = all(np.array_equal(results["k_counter"], results[n]) for n in ("k_flags", "k_stamped"))
            print(f"{blocks:3d} blocks, h of {total:5d}: the three give the same numbers: {same}")


if __name__ == "__main__":
    main()
