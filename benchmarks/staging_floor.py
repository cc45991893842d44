"""What a tensor grid step's staging of h costs when every block stages at once, and what
pairs of blocks sharing it save (docs/design-notes.md, "Why cp.async did not help at B=64").
The kernels are in staging_floor.cu: each step every block stages its batch tile's h (whole;
half of its rows, a bound; half and its peer's half through DSMEM, the pair form of
benchmarks/variants/stage-h-pairs.patch; the whole tile by the bulk copy engine, TMA; or
pairs by TMA multicast, each block copying half the rows into both), writes its slice of the
next h from it, and meets a grid barrier; a sixth form stages nothing. Prints µs a step for
B=64 (64 × 2 blocks of 32 rows, as LSTM fp16 H=1024 B=64's sequential tile) and B=8 (128
blocks of 8 rows), what each form's staging adds over the barrier alone and the L2 read rate
that implies, and checks that every complete form's h equals the whole form's bit for bit.
Needs nvcc and CuPy on a Hopper GPU; 128 blocks of one SM each must be co-resident (nothing
else on the GPU).

    python3 benchmarks/staging_floor.py > benchmarks/results/staging-floor-<gpu>-<date>.txt
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import cupy as cp
import numpy as np

SOURCE = Path(__file__).with_suffix(".cu")
STEPS = 2000
K_BYTES = 1024 * 2  # a row of h: K = 1024 halves
FORMS = {0: "whole tile", 1: "half the rows (bound)", 2: "pairs (DSMEM)", 3: "no staging",
         4: "whole tile by TMA", 5: "pairs by TMA multicast"}
SAME_H = (2, 4, 5)  # the forms whose h must equal the whole form's
CASES = [(32, 64, 2), (8, 128, 1)]  # (rows a tile, blocks along the units, batch tiles)


def staged_bytes(form: int, rows: int, blocks: int) -> int:
    """Bytes of h the blocks read from L2 a step in ``form``: the tile's rows, half of them
    (the bound and the pairs) or none."""
    return {0: rows, 1: rows // 2, 2: rows // 2, 3: 0, 4: rows, 5: rows // 2}[form] * K_BYTES * blocks


def run(kernel, rows: int, bx: int, by: int, steps: int, h0: np.ndarray) -> tuple[float, np.ndarray, bool]:
    """(µs a step, the final h, whether a spin gave up) of one launch of ``steps`` steps."""
    shared = rows * K_BYTES
    h = cp.asarray(h0)
    barrier, failed = cp.zeros(1, cp.uint32), cp.zeros(1, cp.uint32)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    kernel((bx, by), (256,), (h, barrier, failed, np.int32(steps)), shared_mem=shared)
    end.record()
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) * 1e3 / steps, h.get(), bool(failed.get()[0])


def main() -> None:
    props = cp.cuda.runtime.getDeviceProperties(0)
    print(f"# benchmarks/staging_floor.py on {props['name'].decode()}, {STEPS} steps, 256 threads a block")
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        for rows, bx, by in CASES:
            batch = rows * by
            h0 = rng.integers(0, 2**32, size=(2, batch, K_BYTES // 4), dtype=np.uint32)
            times, finals = {}, {}
            for form, what in FORMS.items():
                cubin = Path(tmp) / f"staging_{form}_{rows}_{bx}_{by}.cubin"
                subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", f"-DFORM={form}", f"-DROWS={rows}",
                                f"-DBLOCKS_X={bx}", f"-DBLOCKS_Y={by}", "-o", str(cubin), str(SOURCE)], check=True)
                kernel = cp.RawModule(path=str(cubin)).get_function("k_staging")
                kernel.max_dynamic_shared_size_bytes = rows * K_BYTES
                run(kernel, rows, bx, by, 100, h0)  # warm-up: the module's load, the clocks
                us, final, gave_up = run(kernel, rows, bx, by, STEPS, h0)
                times[form], finals[form] = us, final
                print(f"B={batch:3d} ({bx} × {by} blocks of {rows} rows), {what:22s} {us:6.3f} µs a step, "
                      f"{staged_bytes(form, rows, bx * by) / 2**20:4.1f} MiB read from L2 a step"
                      f"{'  (a spin gave up: not a valid time)' if gave_up else ''}", flush=True)
            for form in (0, 1, 2, 4, 5):
                extra = times[form] - times[3]
                print(f"B={batch:3d} {FORMS[form]:22s} adds {extra:6.3f} µs to the barrier's step"
                      f" ({staged_bytes(form, rows, bx * by) / max(extra, 1e-9) / 1e6:6.2f} TB/s of L2 reads"
                      " if that is all reading)")
            for form in SAME_H:
                print(f"B={batch:3d} {FORMS[form]}: h equals the whole form's: {np.array_equal(finals[0], finals[form])}")


if __name__ == "__main__":
    main()
