"""Times the fused-projection prototype (fused_projection.cu; issue 14's LSTM fp16 H=512 B=8
row, docs/design-notes.md "Next for issue 14's H=512 row"): P producer blocks computing
x·W_ihᵀ + b chunk by chunk in the same launch as 16 consumer blocks that stand in for the
recurrent cluster (each step: read the step's projection, then 1.21 µs of the step's own
time). For each variant (steps a chunk, columns a producer) it checks the projection against
float32 and prints, in µs: the launch with producers and consumers, the consumers alone
with the projection ready (what the launch may not exceed by much), the producers alone,
how long the consumers waited for the first chunk and in all, and cuBLAS's projection of
the same rows (CuPy's matmul) for scale. Needs nvcc, CuPy and a Hopper GPU.

    python3 benchmarks/fused_projection.py > benchmarks/results/fused-projection-<gpu>-<date>.txt
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
from pathlib import Path

import cupy as cp
import numpy as np

SOURCE = Path(__file__).with_suffix(".cu")
I, GH, B, S = 512, 2048, 8, 256
STEP_NS = 1210  # the recurrent kernel's step at LSTM fp16 H=512 B=8 (bench-h100-2026-11-27.json)
CONSUMERS = 16
REPEATS = 9
# (CHUNK steps, NC columns a producer, RG row groups of warps, KQ slices of the first chunk's
# K, AHEAD: the flag awaited during the step before); x double-buffered.
VARIANTS = [(4, 32, 2, 1, 0), (4, 32, 2, 4, 0), (4, 32, 2, 1, 1), (4, 32, 2, 4, 1), (8, 32, 2, 4, 1),
            (4, 64, 2, 4, 1)]


def build(tmp: Path, chunk: int, nc: int, rg: int, kq: int, ahead: int):
    cubin = tmp / f"fp_{chunk}_{nc}_{rg}_{kq}_{ahead}.cubin"
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", f"-DI={I}", f"-DGH={GH}", f"-DB={B}",
                    f"-DCHUNK={chunk}", f"-DNC={nc}", f"-DRG={rg}", f"-DKQ={kq}", f"-DAHEAD={ahead}",
                    "-o", str(cubin), str(SOURCE)], check=True)
    kernel = cp.RawModule(path=str(cubin)).get_function("k_fused")
    shared = (nc + 2 * chunk * B) * (I + 8) * 2
    kernel.max_dynamic_shared_size_bytes = shared
    return kernel, shared


def timed_us(fn) -> float:
    """Median µs of fn's GPU work over REPEATS, each between two events, the GPU drained."""
    out = []
    for _ in range(REPEATS):
        cp.cuda.Device().synchronize()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(cp.cuda.get_elapsed_time(start, end) * 1e3)
    return statistics.median(out)


def main() -> None:
    rng = np.random.default_rng(0)
    x = cp.asarray(rng.standard_normal((S, B, I)).astype(np.float16))
    w = cp.asarray((rng.standard_normal((GH, I)) / I ** 0.5).astype(np.float16))
    bias = cp.asarray(rng.standard_normal(GH).astype(np.float32))
    want = x.reshape(S * B, I).astype(cp.float32) @ w.astype(cp.float32).T + bias
    xproj = cp.empty((S, B, GH), cp.float32)
    stats = cp.zeros((CONSUMERS, 4), cp.uint64)
    sums = cp.zeros(1, cp.float32)
    x2 = x.reshape(S * B, I)
    print(f"fused_projection: x·W_ihᵀ + b of LSTM fp16 H={I} B={B} S={S} ({S * B} × {GH} × {I}), "
          f"{CONSUMERS} consumer blocks, a step {STEP_NS} ns; µs, median of {REPEATS}")
    print(f"  cuBLAS (CuPy matmul, fp16 out) of all rows: {timed_us(lambda: x2 @ w.T):.1f} µs")
    with tempfile.TemporaryDirectory() as tmp:
        for chunk, nc, rg, kq, ahead in VARIANTS:
            kernel, shared = build(Path(tmp), chunk, nc, rg, kq, ahead)
            producers, nt = GH // nc, nc // 16 * rg * 32
            flags = cp.zeros((S + chunk - 1) // chunk, cp.uint32)

            def launch(produce: bool, consumers: int):
                kernel((producers + consumers,), (nt,),
                       (x, w, bias, xproj, flags, np.int32(S), np.int32(consumers), np.int64(STEP_NS),
                        np.int32(int(produce)), stats, sums), shared_mem=shared)

            xproj.fill(np.nan)
            flags.fill(0)
            launch(True, CONSUMERS)
            cp.cuda.Device().synchronize()
            error = float(cp.max(cp.abs(xproj.reshape(S * B, GH) - want)) / cp.max(cp.abs(want)))

            def fused():
                flags.fill(0)
                launch(True, CONSUMERS)
            both = timed_us(fused)
            s = cp.asnumpy(stats).astype(np.int64)
            first, waited = s[:, 0].max() / 1e3, s[:, 1].max() / 1e3
            ready = lambda: launch(False, CONSUMERS)  # noqa: E731
            flags.fill(producers)
            alone = timed_us(ready)

            def only_producers():
                flags.fill(0)
                launch(True, 0)
            made = timed_us(only_producers)
            memset = timed_us(lambda: flags.fill(0))
            print(f"  CHUNK={chunk} NC={nc} RG={rg} KQ={kq} AHEAD={ahead} ({producers} producers, {nt} threads, {shared // 1024} KiB): "
                  f"max error {error:.1e} of max |xproj|; launch {both:.1f} µs against the consumers alone "
                  f"{alone:.1f} ({both / alone:.3f}×); the consumers waited {first:.2f} µs for the first chunk, "
                  f"{waited:.2f} in all; the producers alone {made:.1f} µs "
                  f"({made / ((S + chunk - 1) // chunk):.2f} a chunk, against {chunk * STEP_NS / 1e3:.2f} of steps); "
                  f"the flags' memset {memset:.1f} µs")


if __name__ == "__main__":
    main()
