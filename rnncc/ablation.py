"""``rnncc bench --ablate``: every alternative of the planner's choices, forced and timed.

Over a grid of one-layer shapes (H ∈ {64, 256, 1024, 2048}, B ∈ {1, 8, 64, 256},
S ∈ {16, 256}, LSTM and GRU, fp16 and fp32) each valid combination of the layout
(``xw``/``wx``), the persistence (``none``/``grid``/``cluster``) and where the GEMMs run
(``rnncc``/``cublas``) is compiled and timed (a forward, CUDA events, median). Per point
the record says which combination the cost model picks, which one autotuning picks (the
fastest of the cost model's best ``autotune.TOP``, from the same measurements) and which
one was fastest. ``summary`` checks them against the targets of the issue; ``plot`` draws
one PNG per decision.

All kernels of a batch of points are built by nvcc in parallel before any timing. The
JSON is rewritten after every point and a run resumes from it, so a long grid can span
several sessions.
"""

from __future__ import annotations

import gc
import itertools
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from . import autotune, codegen
from .autotune import effective
from .plan import Measurement

HIDDEN, BATCH, SEQ, CELLS, DTYPES = (64, 256, 1024, 2048), (1, 8, 64, 256), (16, 256), \
    ("lstm", "gru"), ("float16", "float32")
WARMUP, REPEATS = 1, 5
DECISIONS = {"layout": 0, "persistence": 1, "gemm": 2}  # position in a candidate's label


@dataclass(frozen=True)
class Point:
    cell: str
    dtype: str
    hidden: int
    batch: int
    seq_len: int

    @property
    def key(self) -> str:
        return f"{self.cell} {self.dtype} H={self.hidden} B={self.batch} S={self.seq_len}"

    def spec(self) -> dict:
        return {"name": f"ablate_{self.cell}", "dtype": self.dtype, "input_size": self.hidden,
                "layers": [{"name": "l0", "cell": self.cell, "hidden_size": self.hidden}]}


def grid(quick: bool = False) -> list[Point]:
    if quick:
        return [Point(c, d, h, b, 256) for c, d, h, b in
                itertools.product(("lstm",), DTYPES, (256, 1024), (8, 64))]
    return [Point(*p) for p in itertools.product(CELLS, DTYPES, HIDDEN, BATCH, SEQ)]


def _models(point: Point, target):
    """(cost model's plan, [(predicted seconds, label, compiled model)]): every valid
    combination, best predicted first (autotuning's candidates), then the cost model's own
    plan if it mixes the libraries in a way no forced combination does (label 'model')."""
    import rnncc
    from .runtime import CompiledModel

    base = rnncc.compile(point.spec(), target, seq_len=point.seq_len, batch=point.batch)
    l = base.plan.layers[0]
    models = [(s, Measurement.label(*choice), CompiledModel(model, plan, target, codegen.render(plan), None))
              for s, choice, model, plan in autotune._candidates(l, point.dtype, base.plan.options, target)]
    if effective(l) not in {effective(m.plan.layers[0]) for _, _, m in models}:
        models.append((None, "model", base))
    return base, models


def measure_points(points: list[Point], target, progress) -> list[dict]:
    import pycuda.gpuarray as gpuarray
    import numpy as np

    import rnncc
    from .build import compile_all
    from .dtypes import to_storage
    from .timing import time_gpu

    prepared = []
    for p in points:
        base, models = _models(p, target)
        prepared.append((p, effective(base.plan.layers[0]), models))
    kernels = {k.name + str(hash(k.source)): k for _, _, ms in prepared for _, _, m in ms
               for k in m.kernels}
    progress(f"nvcc: {len(kernels)} kernels for {len(points)} points")
    compile_all(list(kernels.values()), target.arch)
    records = []
    for p, pick, models in prepared:
        rng = np.random.default_rng(0)
        x = gpuarray.to_gpu(to_storage(rng.uniform(-1, 1, (p.seq_len, p.batch, p.hidden)), p.dtype))
        rows = []
        for predicted, label, m in models:
            t = time_gpu(lambda: m(x), WARMUP, REPEATS)
            l = m.plan.layers[0]
            rows.append({"label": label, "predicted_s": predicted, "measured_s": t.median_ms / 1e3,
                         "spread_ms": [t.min_ms, t.max_ms], "effective": list(effective(l))})
        del x
        gc.collect()
        best = min(rows, key=lambda r: r["measured_s"])
        # Autotuning times the cost model's best TOP combinations (rows are in that order).
        tuned = min([r for r in rows if r["label"] != "model"][:autotune.TOP],
                    key=lambda r: r["measured_s"])
        model_row = next(r for r in rows if tuple(r["effective"]) == pick)
        records.append({**p.__dict__, "key": p.key, "candidates": rows, "best": best["label"],
                        "model_pick": model_row["label"], "model_pick_runs": list(pick),
                        "autotune_pick": tuned["label"],
                        "model_over_best": model_row["measured_s"] / best["measured_s"],
                        "autotune_over_best": tuned["measured_s"] / best["measured_s"]})
        progress(f"{p.key}: best {best['label']} {best['measured_s'] * 1e3:.3f} ms, model "
                 f"{model_row['label']} ×{records[-1]['model_over_best']:.2f}, autotune "
                 f"{tuned['label']} ×{records[-1]['autotune_over_best']:.2f}")
    return records


def summary(records: list[dict]) -> dict:
    """The issue's checks over the measured grid."""
    n = len(records)
    tuned_10 = sum(r["autotune_over_best"] <= 1.10 for r in records)
    model_20 = sum(r["model_over_best"] <= 1.20 for r in records)
    layout_wins = []
    for r in records:
        best_of = {lay: min((c["measured_s"] for c in r["candidates"] if c["label"].startswith(lay + "/")),
                            default=None) for lay in ("xw", "wx")}
        if None in best_of.values():
            continue
        winner = min(best_of, key=best_of.get)
        margin = max(best_of.values()) / min(best_of.values())
        if margin >= 1.2:
            layout_wins.append({"key": r["key"], "winner": winner, "margin": margin,
                                "model_picks": r["model_pick_runs"][0],
                                "autotune_picks": r["autotune_pick"].split("/")[0]})
    picked = sum(w["model_picks"] == w["winner"] for w in layout_wins)
    tuned_picked = sum(w["autotune_picks"] == w["winner"] for w in layout_wins)
    return {"points": n,
            "autotune_within_10pct": tuned_10, "autotune_within_10pct_share": tuned_10 / n if n else 0,
            "model_within_20pct": model_20, "model_within_20pct_share": model_20 / n if n else 0,
            "layout_wins_by_1.2x": layout_wins,
            "model_picks_the_winning_layout": picked, "autotune_picks_the_winning_layout": tuned_picked,
            "layouts_that_win_somewhere": sorted({w["winner"] for w in layout_wins})}


def plot(records: list[dict], out_dir: Path, stem: str) -> list[Path]:
    """One PNG per decision: for each of its values, the fastest candidate with that value
    over the fastest overall, at every grid point."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for decision, position in DECISIONS.items():
        values = sorted({c["label"].split("/")[position] for r in records for c in r["candidates"]
                         if c["label"] != "model"})
        fig, ax = plt.subplots(figsize=(max(8, len(records) * 0.12), 4.5))
        xs = range(len(records))
        for value in values:
            ys = []
            for r in records:
                with_value = [c["measured_s"] for c in r["candidates"]
                              if c["label"] != "model" and c["label"].split("/")[position] == value]
                best = min(c["measured_s"] for c in r["candidates"])
                ys.append(min(with_value) / best if with_value else float("nan"))
            ax.plot(xs, ys, "o", ms=3, label=f"{decision} = {value}")
        ax.plot(xs, [r["model_over_best"] for r in records], "k_", ms=6, label="cost model's pick")
        ax.set_yscale("log")
        ax.axhline(1.1, color="grey", lw=0.5, ls="--")
        ax.set_ylabel("fastest with this value ÷ fastest overall")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([r["key"].replace("float", "f") for r in records], rotation=90, fontsize=5)
        ax.set_title(f"ablation of '{decision}': forced values, one layer, forward time")
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out_dir / f"{stem}-{decision}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def main(out_dir: Path, quick: bool = False, batch_points: int = 8,
         time_limit_s: float | None = None) -> int:
    import torch  # only for the environment record

    from .cli import _environment
    from .target import from_device

    target = from_device()
    day = time.strftime("%Y-%m-%d", time.gmtime())
    stem = f"ablation-{'h100' if 'H100' in target.name else target.name.split()[-1].lower()}-{day}" \
        + ("-quick" if quick else "")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{stem}.json"
    done = {r["key"]: r for r in json.loads(path.read_text())["points"]} if path.exists() else {}
    todo = [p for p in grid(quick) if p.key not in done]
    start, total, timed = time.perf_counter(), len(grid(quick)), [len(done)]

    def progress(msg: str) -> None:
        if not msg.startswith("nvcc"):
            timed[0] += 1
        sys.stderr.write(f"[{timed[0]}/{total} points, {time.perf_counter() - start:.0f} s] {msg}\n")
        sys.stderr.flush()

    while todo and (time_limit_s is None or time.perf_counter() - start < time_limit_s):
        chunk, todo = todo[:batch_points], todo[batch_points:]
        for r in measure_points(chunk, target, progress):
            done[r["key"]] = r
        records = [done[p.key] for p in grid(quick) if p.key in done]
        path.write_text(json.dumps({"environment": _environment(torch), "grid": {
            "hidden": HIDDEN, "batch": BATCH, "seq_len": SEQ, "cells": CELLS, "dtypes": DTYPES},
            "method": f"one layer, input size = H; each candidate a forward, CUDA events, "
                      f"{WARMUP} warm-up, median of {REPEATS}; autotune pick = fastest of the "
                      f"cost model's best {autotune.TOP}",
            "complete": not todo, "summary": summary(records), "points": records}, indent=1) + "\n")
    records = [done[p.key] for p in grid(quick) if p.key in done]
    print(json.dumps(summary(records), indent=1))
    if not todo:
        for png in plot(records, out_dir, stem):
            print(f"wrote {png}")
    print(f"wrote {path} ({len(records)} points{'' if not todo else f', {len(todo)} left'})")
    return 0
