"""Fit of the FMA rows step kernel's price (passes/cost.py, step_rows_seconds) to
step_rows_sweep.py runs made with --same-projection (every 'rows 8w×Rb' tile measured at
every point) and to rows steps taken from S=256 forwards (same format, one tile a point).
Least squares of the relative error (log of measured over priced, priced by
cost.step_rows_seconds itself with its STEP_ROWS_ constants set to the trial's), scipy's bounded solver;
prints the constants, the error of each point's tiles and whether the fit picks each point's
fastest tile. The constants in cost.py came from (the H200 preset; about a minute):

    PYTHONPATH=. python3 benchmarks/fit_step_rows.py \
        benchmarks/results/step-rows-sweep-h200-2026-11-29-fp32-same-projection.json \
        benchmarks/results/step-rows-sweep-h200-2026-11-29-half-same-projection.json \
        benchmarks/results/step-rows-forwards-h200-2026-11-29.json
"""
from __future__ import annotations

import contextlib
import json
import re
import sys

import numpy as np
from scipy.optimize import least_squares

from rnncc.dtypes import DTYPES
from rnncc.ir import CELL_GATES
from rnncc.passes import cost
from rnncc.target import get
from rnncc.tiles import StepRows

# The fitted constants of cost.step_rows_seconds, and the unit each is fitted in.
CONSTANTS = (("STEP_ROWS_FIXED_SECONDS", 1.0, "fixed s"),
             ("STEP_ROWS_L2_BYTES_PER_SECOND", 1e12, "L2 TB/s (first read, W fits)"),
             ("STEP_ROWS_HBM_SHARE", 1.0, "share of HBM bandwidth (first read)"),
             ("STEP_ROWS_REREAD_BYTES_PER_SECOND", 1e12, "TB/s a re-read (y blocks)"),
             ("STEP_ROWS_FMA_EFFICIENCY", 1.0, "FMA share"),
             ("STEP_ROWS_OUTPUT_SECONDS", 1e-9, "ns an output (row, gate, unit) over an SM"),
             ("STEP_ROWS_CELL_SECONDS", 1e-9, "ns a cell (row, unit) over an SM"))


@contextlib.contextmanager
def constants(x):
    """cost's STEP_ROWS_ constants set to ``x`` (in CONSTANTS' units) for the block."""
    saved = {name: getattr(cost, name) for name, _, _ in CONSTANTS}
    try:
        for (name, unit, _), value in zip(CONSTANTS, x):
            setattr(cost, name, value * unit)
        yield
    finally:
        for name, value in saved.items():
            setattr(cost, name, value)


def points(files: list[str]) -> list[dict]:
    """The rows steps of ``files``: step_rows_sweep.py's JSON (every rows tile of a point), or
    fma_forms_sweep.py's JSON lines (.jsonl; the planner's rows tile where a launch a step
    was timed beside the persistent forms: its form 'none fma', float32)."""
    out = []
    for f in files:
        if f.endswith(".jsonl"):
            for line in open(f):
                r = json.loads(line)
                if r["form"] == "none fma" and r["tile"]["class"] == "StepRows":
                    out.append({"cell": r["cell"], "itemsize": DTYPES[r["dtype"]].itemsize, "H": r["H"], "B": r["B"],
                                "tile": StepRows(r["tile"]["warps"], r["tile"]["rows"]), "us": r["measured_us"]})
            continue
        for r in json.load(open(f))["results"]:
            for name, us in r["step_us"].items():
                m = re.fullmatch(r"rows (\d+)w×(\d+)b", name)
                if m:
                    out.append({"cell": r["cell"], "itemsize": DTYPES[r["dtype"]].itemsize, "H": r["hidden"],
                                "B": r["batch"], "tile": StepRows(int(m[1]), int(m[2])), "us": us})
    return out


def main(files: list[str]) -> None:
    target = get("h200")
    data = points(files)
    measured = np.array([p["us"] for p in data])

    def priced(p) -> float:
        """µs of cost.step_rows_seconds at point ``p`` (its GPU time, what the sweeps measured)."""
        return cost.step_rows_seconds(p["B"], p["H"], len(CELL_GATES[p["cell"]]), p["tile"], target,
                                      p["itemsize"]) * 1e6

    def prices(x) -> np.ndarray:
        with constants(x):
            return np.array([priced(p) for p in data])

    def residuals(x):
        return np.log(prices(x) / measured)

    fit = least_squares(residuals, x0=[2.0e-6, 6.0, 0.7, 8.0, 0.3, 1.0, 1.0],
                        bounds=([0, 0.5, 0.5, 0.5, 0.01, 0.0, 0.0], [10e-6, 30, 30, 30, 1.0, 100, 100]))
    for (_, _, label), v in zip(CONSTANTS, fit.x):
        print(f"{label:32} {v:.4g}")
    fitted = prices(fit.x)
    ratios = measured / fitted
    old = measured / np.array([priced(p) for p in data])
    print(f"{len(data)} tiles: measured ÷ fit median {np.median(ratios):.2f} [{ratios.min():.2f}, {ratios.max():.2f}], "
          f"RMS log {np.sqrt(np.mean(np.log(ratios) ** 2)):.3f}; ÷ the current price median {np.median(old):.2f} "
          f"[{old.min():.2f}, {old.max():.2f}], RMS log {np.sqrt(np.mean(np.log(old) ** 2)):.3f}")
    by_point = {}
    for p, r, price in zip(data, ratios, fitted):
        by_point.setdefault((p["cell"], p["itemsize"], p["H"], p["B"]), []).append((p, r, price))
    for key, rows in by_point.items():
        best = min(rows, key=lambda row: row[0]["us"])[0]
        pick = min(rows, key=lambda row: row[2])[0]
        print(f"{key[0]:8} {8 * key[1]:2}-bit H={key[2]:5} B={key[3]:3}: "
              + " ".join(f"{p['tile'].rows}b {p['us']:.1f}/{r:.2f}" for p, r, _ in rows)
              + f"; fit picks {pick['tile'].rows}b ({pick['us'] / best['us']:.2f}× the fastest)")


if __name__ == "__main__":
    main(sys.argv[1:])
