"""Fit of the share of the FMA peak that cuBLASLt's exact float32 step reaches as the batch
grows (passes/cost.py: LIBRARY_STEP_FMA_SHARE_MAX and LIBRARY_STEP_FMA_SHARE_HALF_ROWS in
library_step_seconds), to the cuBLASLt steps of persistence_census.py A/B runs. No GPU needed.

    PYTHONPATH=. python3 benchmarks/fit_library_exact_share.py \
        benchmarks/results/persistence-moves-h200-2026-11-29-eager-step-{a,b,c}.jsonl

A step is read from a plan's CUDA-graph replays at S=256 and S=35, (T(256) − T(35)) / 221,
less the input projection's share of that difference as cost.library_gemm_seconds prices
the projection's one GEMM over S·B rows (the one-layer plans run it before the steps). The
share of a batch of B rows is SHARE_MAX · B / (B + HALF_ROWS), fitted by least squares of the
relative error with the step's other terms as cost.py has them; prints the fit, each step
against the old and the new price, and the share by batch.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from rnncc.ir import CELL_GATES
from rnncc.passes import cost
from rnncc.target import get

LONG, SHORT = 256, 35


def steps(files: list[str], target) -> dict[tuple, float]:
    """(cell, H, B) → median µs of the cuBLASLt steps of float32 plans in ``files``."""
    out: dict[tuple, list[float]] = {}
    for f in files:
        for line in open(f):
            r = json.loads(line)
            if r["dtype"] != "float32":
                continue
            for side in ("before", "after"):
                if not r[side].startswith("PerStep(math='cublas')"):
                    continue
                H, B, G = r["H"], r["B"], len(CELL_GATES[r["cell"]])
                both = (r[f"{side}_us_s{LONG}"] - r[f"{side}_us_s{SHORT}"]) / (LONG - SHORT)
                projection = (cost.library_gemm_seconds(G * H, LONG * B, H, 4, "exact", target)
                              - cost.library_gemm_seconds(G * H, SHORT * B, H, 4, "exact", target)) / (LONG - SHORT)
                out.setdefault((r["cell"], H, B), []).append(both - projection * 1e6)
    return {k: float(np.median(v)) for k, v in out.items()}


def priced(key: tuple, target, share_max: float, half_rows: float) -> float:
    """µs of library_step_seconds (graphed, exact float32) with the share's two constants set."""
    saved = cost.LIBRARY_STEP_FMA_SHARE_MAX, cost.LIBRARY_STEP_FMA_SHARE_HALF_ROWS
    cost.LIBRARY_STEP_FMA_SHARE_MAX, cost.LIBRARY_STEP_FMA_SHARE_HALF_ROWS = share_max, half_rows
    try:
        cell, H, B = key
        return cost.library_step_seconds(B, H, len(CELL_GATES[cell]), 4, "exact", target, graphed=True) * 1e6
    finally:
        cost.LIBRARY_STEP_FMA_SHARE_MAX, cost.LIBRARY_STEP_FMA_SHARE_HALF_ROWS = saved


def main(files: list[str]) -> None:
    from scipy.optimize import least_squares  # the fit's alone: steps() serves the tests without it

    target = get("h200")
    measured = steps(files, target)
    keys = list(measured)
    us = np.array([measured[k] for k in keys])
    old = np.array([priced(k, target, cost.LIBRARY_STEP_FMA_SHARE_MAX, cost.LIBRARY_STEP_FMA_SHARE_HALF_ROWS)
                    for k in keys])
    fit = least_squares(lambda x: np.log(np.array([priced(k, target, *x) for k in keys]) / us),
                        x0=[0.7, 100.0], bounds=([0.1, 1.0], [1.5, 2000.0]))
    new = np.array([priced(k, target, *fit.x) for k in keys])
    print(f"{len(keys)} cuBLASLt steps; SHARE_MAX {fit.x[0]:.3f}, HALF_ROWS {fit.x[1]:.1f}")
    for name, p in (("committed", old), ("fit", new)):
        q = us / p
        print(f"  measured ÷ {name} price: median {np.median(q):.2f} [{q.min():.2f}, {q.max():.2f}], "
              f"RMS log {np.sqrt(np.mean(np.log(q) ** 2)):.3f}")
    for k, m, o, n in sorted(zip(keys, us, old, new), key=lambda z: (z[0][2], z[0][1], z[0][0])):
        print(f"  {k[0]:8} H={k[1]:5} B={k[2]:4}: {m:6.1f} µs; committed {o:6.1f}, fit {n:6.1f}")
    for B in (1, 8, 20, 32, 64, 96, 128, 256):
        print(f"  share at B={B}: {max(cost.LIBRARY_STEP_FMA_SHARE_AT_8_ROWS, fit.x[0] * B / (B + fit.x[1])):.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
