"""Fit the step model of the lanes form of the FMA cluster kernel (passes/cost.py,
LANES_*) to a tile sweep of it: non-negative least squares of the measured µs a step over
the counts of ``cost.lanes_terms``, weighted by 1/measured (relative error). Prints the
constants, the error and, per case, how far the model's pick is from the fastest tile.
Lines marked " lanes" are of that form, or every line with --all-lanes (the first sweep,
run before the two forms coexisted). No GPU needed.

    python3 benchmarks/fit_cluster_model.py benchmarks/results/cluster-tile-sweep-lanes-h100-2026-11-23.txt --all-lanes
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from rnncc.passes.cost import lanes_terms
from rnncc.tiles import ClusterTile
from rnncc.target import PRESETS

LINE = re.compile(r"(\w+) float32 H=(\d+) B=(\d+): cluster=(\d+) units=(\d+) bpb=(\d+) rows/thread=(\d+) "
                  r"ks=(\d+) units/thread=(\d+) threads=(\d+)( registers)?( lanes)?: measured ([\d.]+)")


def points(text: str, all_lanes: bool):
    """(case, tile, µs a step, waves) of each line of a sweep of the lanes form."""
    for m in LINE.finditer(text):
        cell = m.group(1)
        H, B, c, units, bpb, rpt, ks, upt, threads = map(int, m.groups()[1:10])
        if not (all_lanes or m.group(12)):
            continue
        tile = ClusterTile(c, units, bpb, rpt, ks, upt, weights_in_registers=bool(m.group(11)), k_lanes=True)
        assert tile.threads == threads, m.group(0)
        waves = math.ceil(math.ceil(B / bpb) * c / PRESETS["h100"].sm_count)
        yield (cell, H, B), tile, float(m.group(13)), waves


def main(path: str, all_lanes: bool) -> None:
    rows = list(points(Path(path).read_text(), all_lanes))
    gates = {"lstm": 4, "gru": 3}
    terms = [lanes_terms(H, gates.get(cell, 1), tile) for (cell, H, B), tile, _, _ in rows]
    names = sorted({n for t in terms for n in t})
    a = np.array([[t.get(n, 0.0) * w for n in names] for t, (_, _, _, w) in zip(terms, rows)])
    y = np.array([us for _, _, us, _ in rows])
    weight = 1.0 / y
    coef, _ = nnls(a * weight[:, None], y * weight)
    fit = a @ coef
    print(f"{len(rows)} tiles, {len({r[0] for r in rows})} cases, from {path}")
    for n, v in zip(names, coef):
        print(f"{n} = {v:.4f}e-6")
    errors = np.abs(fit - y) / y
    print(f"relative error: median {np.median(errors):.0%}, max {errors.max():.0%}")
    by_case: dict = {}
    for (case, tile, us, _), predicted in zip(rows, fit):
        by_case.setdefault(case, []).append((round(predicted * 100), tile.cluster, tile.threads, us))
    for case, rs in by_case.items():
        pick = min(rs)
        fastest = min(r[3] for r in rs)
        print(f"{case}: the pick runs {pick[3]:.2f} µs a step, the fastest {fastest:.2f} "
              f"({pick[3] / fastest:.2f}×)")


if __name__ == "__main__":
    main(sys.argv[1], "--all-lanes" in sys.argv)
