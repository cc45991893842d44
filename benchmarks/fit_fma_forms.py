"""Refit the FMA persistent forms' step prices to a sweep by benchmarks/fma_forms_sweep.py:
non-negative least squares of each form's measured µs a step over the counts of its terms
in passes/cost.py, weighted by 1/measured (relative error). No GPU needed.

    PYTHONPATH=.:benchmarks python3 benchmarks/fit_fma_forms.py SWEEP.jsonl [SWEEP ...]

cost.py's prices came from (a few seconds):

    PYTHONPATH=.:benchmarks python3 benchmarks/fit_fma_forms.py \
        benchmarks/results/fma-forms-sweep-h200-2026-11-29.jsonl \
        benchmarks/results/fma-forms-sweep-h200-2026-11-29-large-half.jsonl

The families and their terms:
- grid: GRID_FMA_* (cost.grid_fma_terms);
- grid staged: STAGED_* (cost.staged_terms), with tensor maps STAGED_TENSOR_MAP_PRICES;
- grid registers: REGISTERS_* (cost.register_terms);
- cluster shared and cluster registers: CLUSTER_* (cost.cluster_shared_terms), the step
  over its waves of clusters less the exchange measured alone (cost.cluster_seconds);
- cluster lanes: LANES_* (cost.lanes_terms), the step over its waves.
A family with fewer points than MIN_POINTS, or a term no point of it counts, keeps its
constants. Float16 points (fma_forms_sweep.py --half) fit no family: the FMA cluster forms'
refit float32 prices scale to them by one factor, HALF_FMA_CLUSTER_FACTOR (least squares
of the relative error, and the half cases' picks at each factor of a scan); the cluster
kernel on tensor cores keeps its recorded price.

Prints each family's constants before and after with the error of each, then per case the
measured step of the tile each set of prices picks among all the forms timed (a launch a
step at its recorded price) against the fastest.
"""

from __future__ import annotations

import json
import math
import statistics
import sys

import numpy as np
from scipy.optimize import nnls

from rnncc import ir, tiles
from rnncc.passes import cost
from rnncc.target import get

MIN_POINTS = 12
# Terms kept at their committed price, the rest fitted around them: the FMA grid's batch
# tile is 1 at 251 of the wide sweep's 270 points, so its price and the fixed step's are
# one sum there (fitted free: 0 and 1.32 µs); the staged loop counts at 2 points.
PINNED = {"GRID_FMA_TILE_SECONDS", "STAGED_LOOP_SECONDS"}


def tile_of(record: dict):
    fields = dict(record)
    return getattr(tiles, fields.pop("class"))(**fields)


def family_of(form: str) -> str | None:
    """The price table a form's tiles are priced by (None: a launch a step, not refitted)."""
    return {"grid": "GRID_FMA", "grid staged": "STAGED", "grid staged, tensor maps": "STAGED_TENSOR_MAP",
            "grid registers": "REGISTERS", "cluster shared": "CLUSTER", "cluster registers": "CLUSTER",
            "cluster lanes": "LANES"}.get(form)


def prices_of(family: str) -> dict[str, float]:
    return {"GRID_FMA": cost.GRID_FMA_PRICES, "STAGED": cost.STAGED_PRICES,
            "STAGED_TENSOR_MAP": cost.STAGED_TENSOR_MAP_PRICES, "REGISTERS": cost.REGISTERS_PRICES,
            "CLUSTER": cost.CLUSTER_PRICES, "LANES": cost.LANES_PRICES}[family]


def counts(family: str, r: dict, tile, target) -> tuple[dict[str, float], float, float]:
    """(term counts, waves, seconds outside the terms) of one swept tile: the step is
    waves × (Σ price × count + outside)."""
    B, H, G = r["B"], r["H"], len(ir.CELL_GATES[r["cell"]])
    if family == "GRID_FMA":
        return cost.grid_fma_terms(B, H, G, tile, 4), 1.0, 0.0
    if family.startswith("STAGED"):
        return cost.staged_terms(B, H, G, tile), 1.0, 0.0
    if family == "REGISTERS":
        return cost.register_terms(B, H, G, tile), 1.0, 0.0
    waves = math.ceil(math.ceil(B / tile.batch_per_block) / cost.clusters_at_once(target, tile.cluster))
    terms, _ = cost.fma_cluster_terms(H, G, tile)
    return terms, waves, cost.measured_exchange_seconds(tile)


def priced(family: str, prices: dict[str, float], r: dict, tile, target) -> float:
    terms, waves, outside = counts(family, r, tile, target)
    return waves * (sum(prices[name] * n for name, n in terms.items()) + outside)


def fit(family: str, points: list, target) -> dict[str, float]:
    """The family's prices refitted to its points (non-negative, relative error); a term
    no point counts, or PINNED, keeps its price."""
    old = prices_of(family)
    names = sorted(old)
    rows, y = [], []
    for r, tile in points:
        terms, waves, outside = counts(family, r, tile, target)
        outside += sum(old[n] * terms.get(n, 0.0) for n in names if n in PINNED)
        seconds = r["measured_us"] * 1e-6
        rows.append([0.0 if n in PINNED else terms.get(n, 0.0) * waves / seconds for n in names])
        y.append(1.0 - waves * outside / seconds)
    a = np.array(rows)
    used = [i for i in range(len(names)) if np.any(a[:, i])]
    solution, _ = nnls(a[:, used] * 1e-6, np.array(y))  # prices in µs, for conditioning
    new = dict(old)
    for i, value in zip(used, solution):
        new[names[i]] = value * 1e-6
    return new


def errors(family: str, prices: dict[str, float], points: list, target) -> list[float]:
    return [priced(family, prices, r, tile, target) * 1e6 / r["measured_us"] for r, tile in points]


def half_factor(points: list, table: dict, target) -> float:
    """The one factor f minimising Σ (f · price / measured − 1)² over the half points, each
    priced by its family's float32 prices in ``table``."""
    ratios = [priced(family_of(r["form"]), table[family_of(r["form"])], r, tile, target) * 1e6 / r["measured_us"]
              for r, tile in points]
    return sum(ratios) / sum(q * q for q in ratios)


def half_picks(records: list, table: dict, target,
               factors=(0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0)) -> list[tuple[float, float]]:
    """(factor, geometric mean of pick ÷ fastest over the half cases) for each factor: the
    FMA cluster forms priced by ``table`` times the factor, the tensor-core cluster kernel
    and a launch a step at their recorded prices (a ranking, not a fit)."""
    cases: dict[tuple, list] = {}
    for r in records:
        if r["dtype"] != "float32":
            cases.setdefault((r["cell"], r["H"], r["B"]), []).append(r)
    out = []
    for factor in factors:
        def scaled(r):
            family = family_of(r["form"])
            return r["predicted_us"] if family is None else \
                factor * priced(family, table[family], r, tile_of(r["tile"]), target) * 1e6
        ratios = [min(rs, key=scaled)["measured_us"] / min(r["measured_us"] for r in rs) for rs in cases.values()]
        out.append((factor, math.exp(statistics.fmean(map(math.log, ratios)))))
    return out


def main(paths: list[str]) -> None:
    target = get("h200")
    records = [json.loads(line) for p in paths for line in open(p) if line.strip()]
    records = [r for r in records if "measured_us" in r]
    by_family: dict[str, list] = {}
    halves = []
    for r in records:
        family = family_of(r["form"])
        if family and r["dtype"] != "float32":
            halves.append((r, tile_of(r["tile"])))
        elif family:
            by_family.setdefault(family, []).append((r, tile_of(r["tile"])))
    refitted = {}
    for family, points in sorted(by_family.items()):
        old = prices_of(family)
        before = errors(family, old, points, target)
        if len(points) < MIN_POINTS:
            print(f"{family}: {len(points)} points, kept (priced/measured {min(before):.2f}-{max(before):.2f})")
            refitted[family] = old
            continue
        new = fit(family, points, target)
        after = errors(family, new, points, target)
        refitted[family] = new
        print(f"{family}: {len(points)} points; priced/measured median {statistics.median(before):.2f} "
              f"({min(before):.2f}-{max(before):.2f}) → {statistics.median(after):.2f} "
              f"({min(after):.2f}-{max(after):.2f}); RMS relative error "
              f"{math.sqrt(statistics.fmean((e - 1) ** 2 for e in before)):.3f} → "
              f"{math.sqrt(statistics.fmean((e - 1) ** 2 for e in after)):.3f}")
        for name in sorted(old):
            print(f"    {name} = {new[name]:.5g}   # was {old[name]:.5g}{' (pinned)' if name in PINNED else ''}")
    factors = {"committed": cost.HALF_FMA_CLUSTER_FACTOR, "refit": cost.HALF_FMA_CLUSTER_FACTOR}
    if halves:
        factors["refit"] = half_factor(halves, refitted, target)
        before = [cost.HALF_FMA_CLUSTER_FACTOR * priced(family_of(r["form"]), prices_of(family_of(r["form"])), r,
                                                        tile, target) * 1e6 / r["measured_us"] for r, tile in halves]
        after = [factors["refit"] * priced(family_of(r["form"]), refitted[family_of(r["form"])], r, tile, target)
                 * 1e6 / r["measured_us"] for r, tile in halves]
        print(f"HALF_FMA_CLUSTER_FACTOR: {len(halves)} float16 points; priced/measured median "
              f"{statistics.median(before):.2f} ({min(before):.2f}-{max(before):.2f}) → {statistics.median(after):.2f} "
              f"({min(after):.2f}-{max(after):.2f})\n    HALF_FMA_CLUSTER_FACTOR = {factors['refit']:.3f}   "
              f"# was {cost.HALF_FMA_CLUSTER_FACTOR}")
        print("    half picks ÷ fastest (geometric mean) by factor: " + ", ".join(
            f"{factor:.2f}: {mean:.3f}" for factor, mean in half_picks(records, refitted, target)))
    # Per case: what each set of prices picks among every form timed.
    cases: dict[tuple, list] = {}
    for r in records:
        cases.setdefault((r["dtype"], r["cell"], r["H"], r["B"]), []).append(r)
    print("\ncase: the fastest timed; the pick of the committed prices → of the refit (µs a step measured)")
    ratios = {"committed": [], "refit": []}
    for (dtype, cell, H, B), rs in cases.items():
        fastest = min(r["measured_us"] for r in rs)
        picks = {}
        for name, table in (("committed", None), ("refit", refitted)):
            def price(r):
                family = family_of(r["form"])
                if family is None:
                    return r["predicted_us"]
                prices = prices_of(family) if table is None else table[family]
                scale = factors[name] if dtype != "float32" else 1.0
                return scale * priced(family, prices, r, tile_of(r["tile"]), target) * 1e6
            pick = min(rs, key=price)
            picks[name] = pick
            ratios[name].append(pick["measured_us"] / fastest)
        a, b = picks["committed"], picks["refit"]
        print(f"{'' if dtype == 'float32' else dtype + ' '}{cell} H={H} B={B}: fastest {fastest:.2f}; {a['form']} {a['measured_us']:.2f} "
              f"({a['measured_us'] / fastest:.2f}×) → {b['form']} {b['measured_us']:.2f} "
              f"({b['measured_us'] / fastest:.2f}×)")
    for name, rs in ratios.items():
        print(f"{name}: pick ÷ fastest geometric mean {math.exp(statistics.fmean(map(math.log, rs))):.3f}, "
              f"worst {max(rs):.2f}, within 1.10× at {sum(x <= 1.10 for x in rs)} of {len(rs)}")


if __name__ == "__main__":
    main(sys.argv[1:])
