"""The K-split backward (backward_ksplit.cu.j2; issue 17) against the grid form it replaces
for large float32 layers: every candidate tile (tiles.ksplit_backward_tiles) and the grid
form (tiles.backward_tile) on the same inputs, each K-split tile's dG, dh0 and dc0 checked
against the grid form's, CUDA-graph replays interleaved in one process. Prints µs a step and
writes backward-ksplit-<gpu>.jsonl: the measurements the K-split's step model is fitted to.

    python3 benchmarks/backward_ksplit.py [-o DIR] [--cases fit|check|all]
    python3 benchmarks/backward_ksplit.py --precompile   # no GPU: build the kernels into RNNCC_CACHE_DIR
    python3 benchmarks/backward_ksplit.py --fit FILE.jsonl ...   # no GPU: fit both forms' step models
    python3 benchmarks/backward_ksplit.py --select FILE.jsonl ...   # no GPU: rank the K-split model's terms

--fit: non-negative least squares of each form's µs a step over its model's counts
(tiles.ksplit_backward_terms, tiles.grid_backward_terms), weighted by 1/measured (relative
error), on the rows of fitted cases (with --every-case, of all) whose tiles are among the
candidates; prints the constants, and at every case (fitted or
not) the K-split pick's time against the fastest tile timed and the form the models choose
against the faster one timed.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from backward_forms import recurrence_inputs, time_forms  # benchmarks/ is this script's directory

from rnncc import build, codegen, tiles
from rnncc.target import get

# (cell, H, B, S): float32 layers the grid form runs (G·H above the FMA cluster form's 1024)
FIT_CASES = [("lstm", 1024, 64, 256), ("lstm", 512, 64, 256), ("lstm", 1024, 8, 256), ("gru", 1024, 64, 256),
             ("lstm", 768, 32, 256), ("rnn_tanh", 1024, 16, 256), ("lstm", 1024, 128, 64), ("gru", 512, 8, 256)]
# shapes the fit has not seen: its picks checked there
CHECK_CASES = [("lstm", 650, 20, 128), ("lstm", 300, 64, 256), ("gru", 1000, 48, 128), ("lstm", 1024, 3, 64),
               ("lstm", 516, 5, 7)]
GATES = {"lstm": 4, "gru": 3}


def candidates(cell: str, H: int, B: int, target) -> list:
    return tiles.ksplit_backward_tiles(GATES.get(cell, 1), H, B, target.clusters_at_once,
                                       tiles.grid_shared_max(target.shared_memory_per_block_optin))


def tile_of(row: dict):
    t = {k: v for k, v in row["tile"].items() if k != "lane_units"} if row["form"] == "ksplit" \
        else {k: v for k, v in row["tile"].items() if k in ("units", "blocks", "rows", "w_in_shared", "threads", "k_unroll")}
    return (tiles.KSplitBackwardTile if row["form"] == "ksplit" else tiles.BackwardTile)(**t)


def planned_rows(files: list[str]) -> list[dict]:
    """The sweeps' rows of the grid form and of the K-split tiles the planner weighs (others
    timed once, as 16 warps, are left out)."""
    target = get("h100")
    rows = [json.loads(line) for f in files for line in Path(f).read_text().splitlines()]
    return [r for r in rows if r["form"] == "grid"
            or tile_of(r) in candidates(r["cell"], r["hidden"], r["batch"], target)]


def fit(files: list[str], every_case: bool) -> None:
    import numpy as np
    from scipy.optimize import nnls

    rows = planned_rows(files)
    models = {"ksplit": (tiles.ksplit_backward_terms, "KSPLIT_BACKWARD_SECONDS"),
              "grid": (tiles.grid_backward_terms, "GRID_BACKWARD_SECONDS")}
    fitted = {}
    for form, (terms, name) in models.items():
        mine = [r for r in rows if r["form"] == form and (r["fitted"] or every_case)]
        features = [terms(tile_of(r), GATES.get(r["cell"], 1), r["hidden"], r["batch"]) for r in mine]
        names = list(features[0])
        a = np.array([[f[n] / r["us_per_step"] for n in names] for f, r in zip(features, mine)])
        x, _ = nnls(a, np.ones(len(mine)))
        fitted[form] = dict(zip(names, x))
        errors = [math.log(sum(fitted[form][n] * f[n] for n in names) / r["us_per_step"]) for f, r in zip(features, mine)]
        print(f"{name} = {{" + ", ".join(f'"{n}": {v * 1e-6:.4g}' for n, v in fitted[form].items())
              + f"}}  # {len(mine)} tiles, rms log error {math.sqrt(sum(e * e for e in errors) / len(errors)):.3f}")

    def predicted(form, r):
        f = models[form][0](tile_of(r), GATES.get(r["cell"], 1), r["hidden"], r["batch"])
        return sum(fitted[form][n] * v for n, v in f.items())

    cases = {}
    for r in rows:
        cases.setdefault((r["cell"], r["hidden"], r["batch"], r["seq_len"], r["fitted"]), []).append(r)
    for (cell, H, B, S, was_fitted), rs in cases.items():
        ks = [r for r in rs if r["form"] == "ksplit"]
        grid = next(r for r in rs if r["form"] == "grid")
        pick = min(ks, key=lambda r: predicted("ksplit", r)) if ks else None
        best = min(rs, key=lambda r: r["us_per_step"])
        chosen = "ksplit" if pick and predicted("ksplit", pick) < predicted("grid", grid) else "grid"
        took = pick["us_per_step"] if chosen == "ksplit" else grid["us_per_step"]
        print(f"{cell} H={H} B={B} S={S}{'' if was_fitted else ' (not fitted)'}: grid {grid['us_per_step']:.2f} "
              f"(predicted {predicted('grid', grid):.2f}), K-split pick "
              + (f"{pick['us_per_step']:.2f} (predicted {predicted('ksplit', pick):.2f}; {tile_of(pick)})"
                 if pick else "none")
              + f"; fastest {best['us_per_step']:.2f}; the models choose {chosen}: {took / best['us_per_step']:.3f}× the fastest")


# Counts of a K-split step that --select weighs as model terms (tiles.ksplit_backward_terms'
# are the subset it chose): those and five more.
def candidate_terms(tile, gates: int, hidden: int, batch: int) -> dict[str, float]:
    terms = tiles.ksplit_backward_terms(tile, gates, hidden, batch)
    passes = terms["PASS"]
    return terms | {"WARP_SUMS": passes * tile.threads // 32,
                    "CELL": passes * -(-tile.rows_per_pass * tile.units // tile.threads),
                    "L2_MIB": tile.blocks(hidden) * terms["STAGED_KIB"] / 1024,
                    "LANE_FMA_SCALAR": terms["LANE_FMA"] if tile.lane_units % 2 else 0.0}


def select(files: list[str]) -> None:
    """Every subset of candidate_terms holding STEP and LANE_FMA, fitted to the fitted
    cases' candidate tiles; prints the best eight by the worst pick over every case (then
    the rms log error): how tiles.ksplit_backward_terms' set was chosen."""
    import itertools

    import numpy as np
    from scipy.optimize import nnls

    rows = [r for r in planned_rows(files) if r["form"] == "ksplit"]
    counts = [candidate_terms(tile_of(r), GATES.get(r["cell"], 1), r["hidden"], r["batch"]) for r in rows]
    cases: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        cases.setdefault((r["cell"], r["hidden"], r["batch"]), []).append(i)
    fitted = [i for i, r in enumerate(rows) if r["fitted"]]
    base, extra = ["STEP", "LANE_FMA"], [n for n in counts[0] if n not in ("STEP", "LANE_FMA")]
    ranked = []
    for k in range(len(extra) + 1):
        for chosen in itertools.combinations(extra, k):
            names = base + list(chosen)
            a = np.array([[counts[i][n] / rows[i]["us_per_step"] for n in names] for i in fitted])
            x, _ = nnls(a, np.ones(len(fitted)))
            pred = [sum(c * counts[i][n] for c, n in zip(x, names)) for i in range(len(rows))]
            worst = max(rows[min(ix, key=lambda i: pred[i])]["us_per_step"] / min(rows[i]["us_per_step"] for i in ix)
                        for ix in cases.values())
            rms = math.sqrt(sum(math.log(pred[i] / rows[i]["us_per_step"]) ** 2 for i in range(len(rows))) / len(rows))
            ranked.append((worst, rms, names))
    for worst, rms, names in sorted(ranked, key=lambda t: t[:2])[:8]:
        print(f"worst pick {worst:.3f}×, rms log error {rms:.3f}: {' '.join(names)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", default=".")
    parser.add_argument("--cases", choices=("fit", "check", "all"), default="all")
    parser.add_argument("--precompile", action="store_true", help="build the kernels only (no GPU)")
    parser.add_argument("--fit", nargs="+", metavar="FILE", help="fit the step models to these sweeps (no GPU)")
    parser.add_argument("--every-case", action="store_true", help="with --fit: the check cases' rows too")
    parser.add_argument("--select", nargs="+", metavar="FILE", help="rank the K-split model's term sets (no GPU)")
    args = parser.parse_args()
    if args.fit:
        return fit(args.fit, args.every_case)
    if args.select:
        return select(args.select)
    cases = {"fit": FIT_CASES, "check": CHECK_CASES, "all": FIT_CASES + CHECK_CASES}[args.cases]
    if args.precompile:
        target = get("h100")
        for cell, H, B, _ in cases:
            found = candidates(cell, H, B, target)
            for t in found:
                build.compile_cubin(codegen.render_backward(cell, H, GATES.get(cell, 1), "float32", t), target.arch)
            print(f"{cell} H={H} B={B}: {len(found)} kernels built", flush=True)
        return

    import torch

    from rnncc import backward
    target = backward._device()[0]
    shared_max = tiles.grid_shared_max(target.shared_memory_per_block_optin)
    rows = []
    for cell, H, B, S in cases:
        G = GATES.get(cell, 1)
        inputs = recurrence_inputs(cell, "float32", H, B, S)
        layer, w_hh, pre, pre_h, h_prev, dy = inputs
        grid = tiles.backward_tile(G, H, B, target.sm_count, shared_max)
        forms = {"grid": grid} | {str(t): t for t in candidates(cell, H, B, target)}

        def run(tile):
            out = backward.recurrence(layer, w_hh, pre, pre_h, h_prev, None, dy, None, None, tile=tile,
                                      overwrite=False)
            return [t.clone() for t in out if t is not None]

        want = run(grid)
        errors = {}
        for k, tile in forms.items():
            got = run(tile)
            errors[k] = max(float((g - w).abs().max() / w.abs().max().clamp_min(1e-30)) for g, w in zip(got, want))
        times = time_forms(inputs, forms)
        for k, tile in forms.items():
            rows.append({"cell": cell, "dtype": "float32", "hidden": H, "batch": B, "seq_len": S,
                         "form": "grid" if k == "grid" else "ksplit", "tile": tile.to_dict(),
                         "fitted": (cell, H, B, S) in FIT_CASES, "max_relative_error_vs_grid": errors[k],
                         "us_per_step": times[k] * 1e3 / (S + 1)})
            print(f"  {k:<70s} {times[k] * 1e3 / (S + 1):7.2f} µs a step, within {errors[k]:.1e} of the grid form",
                  flush=True)
        best = min((k for k in forms if k != "grid"), key=times.get, default=None)
        print(f"{cell} H={H} B={B} S={S}: grid {times['grid'] * 1e3 / (S + 1):.2f}"
              + (f", best K-split {times[best] * 1e3 / (S + 1):.2f} ({best})" if best else ", no K-split tile"),
              flush=True)
    out = Path(args.output) / f"backward-ksplit-{torch.cuda.get_device_name().split()[1].lower()}.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
