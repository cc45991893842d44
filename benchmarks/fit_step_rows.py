"""Fit of the FMA rows step kernel's price (passes/cost.py, step_rows_seconds) to
step_rows_sweep.py runs made with --same-projection (every 'rows 8w×Rb' tile measured at
every point) and to rows steps taken from S=256 forwards (same format, one tile a point).
Least squares of the relative error (log of measured over priced), scipy's bounded solver;
prints the constants, the error of each point's tiles and whether the fit picks each point's
fastest tile. The constants in cost.py came from (the H200 preset; about a minute):

    PYTHONPATH=. python3 benchmarks/fit_step_rows.py \
        benchmarks/results/step-rows-sweep-h200-2026-11-29-fp32-same-projection.json \
        benchmarks/results/step-rows-sweep-h200-2026-11-29-half-same-projection.json \
        benchmarks/results/step-rows-forwards-h200-2026-11-29.json
"""
from __future__ import annotations

import json
import math
import re
import sys

import numpy as np
from scipy.optimize import least_squares

from rnncc.dtypes import DTYPES
from rnncc.passes.cost import WEIGHTS_L2_SHARE, step_rows_seconds
from rnncc.target import get
from rnncc.tiles import StepRows

GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1}


def points(files: list[str]) -> list[dict]:
    out = []
    for f in files:
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

    def priced(x, p):
        fixed, l2_rate, hbm_share, again_rate, fma_share, output_ns, cell_ns = x
        G, H, B, t, item = GATES[p["cell"]], p["H"], p["B"], p["tile"], p["itemsize"]
        w = G * H * H * item
        y = math.ceil(B / t.rows)
        blocks = math.ceil(H / t.warps) * y
        sms = min(blocks, target.sm_count)
        first = w / (l2_rate * 1e12 if w <= WEIGHTS_L2_SHARE * target.l2_bytes else hbm_share * target.memory_bandwidth)
        memory = first + (y - 1) * w / (again_rate * 1e12)
        compute = 2.0 * y * t.rows * G * H * H / (target.fp32_flops * sms / target.sm_count * fma_share)
        # each (row, gate, unit) sum, a warp's shuffles, and each (row, unit) cell, over the
        # SMs the blocks occupy
        cells = y * t.rows * math.ceil(H / t.warps) * t.warps / sms
        outputs = cells * (G * output_ns + cell_ns) * 1e-9
        return (fixed + memory + compute + outputs) * 1e6

    def residuals(x):
        return np.log(np.array([priced(x, p) for p in data]) / measured)

    fit = least_squares(residuals, x0=[2.0e-6, 6.0, 0.7, 8.0, 0.3, 1.0, 1.0],
                        bounds=([0, 0.5, 0.5, 0.5, 0.01, 0.0, 0.0], [10e-6, 30, 30, 30, 1.0, 100, 100]))
    names = ("fixed s", "L2 TB/s (first read, W fits)", "share of HBM bandwidth (first read)", "TB/s a re-read (y blocks)",
             "FMA share", "ns an output (row, gate, unit) over an SM", "ns a cell (row, unit) over an SM")
    for n, v in zip(names, fit.x):
        print(f"{n:32} {v:.4g}")
    ratios = measured / np.array([priced(fit.x, p) for p in data])
    old = measured / np.array([step_rows_seconds(p["B"], p["H"], GATES[p["cell"]], p["tile"], target, p["itemsize"],
                                                 graphed=True) * 1e6 for p in data])
    print(f"{len(data)} tiles: measured ÷ fit median {np.median(ratios):.2f} [{ratios.min():.2f}, {ratios.max():.2f}], "
          f"RMS log {np.sqrt(np.mean(np.log(ratios) ** 2)):.3f}; ÷ the current price median {np.median(old):.2f} "
          f"[{old.min():.2f}, {old.max():.2f}], RMS log {np.sqrt(np.mean(np.log(old) ** 2)):.3f}")
    by_point = {}
    for p, r in zip(data, ratios):
        by_point.setdefault((p["cell"], p["itemsize"], p["H"], p["B"]), []).append((p, r))
    for key, rows in by_point.items():
        best = min(rows, key=lambda pr: pr[0]["us"])[0]
        pick = min(rows, key=lambda pr: priced(fit.x, pr[0]))[0]
        print(f"{key[0]:8} {8 * key[1]:2}-bit H={key[2]:5} B={key[3]:3}: "
              + " ".join(f"{p['tile'].rows}b {p['us']:.1f}/{r:.2f}" for p, r in rows)
              + f"; fit picks {pick['tile'].rows}b ({pick['us'] / best['us']:.2f}× the fastest)")


if __name__ == "__main__":
    main(sys.argv[1:])
