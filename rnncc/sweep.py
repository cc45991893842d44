"""``rnncc bench --sweep``: rnncc against cuDNN captured in a CUDA graph (what a
speed-minded user runs) over the shapes people use, not just the bench rows.

The values: LSTM and GRU, float32 and float16, 1 and 2 layers, H ∈ {100, 256, 650, 1024},
B ∈ {1, 4, 20, 64}, S ∈ {35, 256, 2200}. Their full product (384 points) takes too long for
a routine run, so :func:`points` takes a covering subset: for each (cell, dtype), eight
(H, B) pairs that use every H and every B twice, with S and the layer count cycling so
that every value of each meets several of the others. S=2200 goes with B ≤ 20 only (at
B=64 it is minutes of cuDNN time per point and a GEMM-bound regime the bench rows cover).
Each point is checked against cuDNN, then both are timed eager and captured; the record
is JSON, and a heatmap PNG shows ``speedup_graph`` per point with the plan's modes.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

CELLS, DTYPES = ("lstm", "gru"), ("float32", "float16")
HIDDEN, BATCH, SEQ = (100, 256, 650, 1024), (1, 4, 20, 64), (35, 256, 2200)
# (H, B) pairs: each H and each B twice, small with large and alike.
PAIRS = ((100, 1), (256, 4), (650, 20), (1024, 64), (100, 20), (256, 64), (650, 1), (1024, 4))


@dataclass(frozen=True)
class Point:
    cell: str
    dtype: str
    layers: int
    hidden: int
    batch: int
    seq_len: int

    @property
    def label(self) -> str:
        return (f"{self.cell} {self.dtype} L={self.layers} H={self.hidden} B={self.batch} "
                f"S={self.seq_len}")


# Models named in the issue that asked for the sweep: a word-level language model (2-layer
# LSTM, 650 units, batch 20, 35-step BPTT) and WaveRNN's GRU (512 units, batch 4, 2200 steps).
NAMED = (("lstm", 2, 650, 20, 35), ("gru", 1, 512, 4, 2200))


def points() -> list[Point]:
    out = []
    for c, (cell, dtype) in enumerate((c, d) for c in CELLS for d in DTYPES):
        for i, (H, B) in enumerate(PAIRS):
            seqs = [s for s in SEQ if s != 2200 or B <= 20]
            S = seqs[(i + c) % len(seqs)]
            out.append(Point(cell, dtype, 1 + (i + c) % 2, H, B, S))
    named = [Point(cell, dtype, L, H, B, S) for cell, L, H, B, S in NAMED for dtype in DTYPES]
    return out + [p for p in named if p not in out]


def prepare(p: Point):
    """(torch.nn module, rnncc model compiled for the point's shape, input), not built."""
    import torch

    import rnncc

    torch.manual_seed(0)
    tdt = getattr(torch, p.dtype)
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[p.cell]
    module = cls(p.hidden, p.hidden, num_layers=p.layers).to("cuda", tdt).eval()
    model, weights = rnncc.from_torch(module)
    compiled = rnncc.compile(model, target="device", weights=weights, batch=p.batch,
                             seq_len=p.seq_len)
    return module, compiled, torch.randn(p.seq_len, p.batch, p.hidden, device="cuda", dtype=tdt)


def run_point(p: Point, prepared, warmup: int, repeats: int) -> dict:
    import torch

    from .bench import graph_baselines
    from .dtypes import max_relative_error, tolerance
    from .timing import time_interleaved

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    module, compiled, x = prepared
    with torch.no_grad():
        ours, theirs = compiled(x)[0], module(x)[0]
        error = max_relative_error(ours.float().cpu().numpy(), theirs.float().cpu().numpy())
        timed = time_interleaved({"rnncc": lambda: compiled(x), "cudnn": lambda: module(x)},
                                 warmup, repeats, settle=1)
        t_ours, t_theirs = timed["rnncc"], timed["cudnn"]
        graphs = graph_baselines(module, compiled, x, warmup, repeats)
    math = "exact" if p.dtype == "float32" else "tensor"
    return {**asdict(p), "agree": error <= 2 * tolerance(p.dtype, math),
            "max_relative_error_vs_cudnn": error,
            "rnncc_ms": t_ours.median_ms, "cudnn_ms": t_theirs.median_ms,
            "speedup": t_theirs.median_ms / t_ours.median_ms, **graphs,
            "modes": [l.persistence.value.mode + ("/cublas" if l.persistence.value.math == "cublas" else "")
                      for l in compiled.plan.layers],
            "schedule": compiled.plan.schedule.value.kind,
            "rnncc_graph_us_per_layer_step": (graphs["rnncc_graph_ms"] or float("nan")) * 1e3
            / (p.seq_len * p.layers)}


def heatmap(results: list[dict], path: Path) -> None:
    """One panel per (cell, dtype): a row per (H, S, layers) measured, B across; each point
    coloured by speedup_graph (log scale, 1× white) and annotated with it and the modes
    (∥: the layers pipelined)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import LogNorm

    combos = [(c, d) for c in CELLS for d in DTYPES]
    fig, axes = plt.subplots(2, 2, figsize=(14, 11))
    fig.subplots_adjust(wspace=0.55, right=0.78)
    norm = LogNorm(vmin=0.25, vmax=4.0)
    batches = sorted({r["batch"] for r in results})
    im = None
    for ax, (cell, dtype) in zip(axes.flat, combos):
        mine = [r for r in results if (r["cell"], r["dtype"]) == (cell, dtype) and r.get("speedup_graph")]
        rows = sorted({(r["hidden"], r["seq_len"], r["layers"]) for r in mine})
        grid = np.full((max(len(rows), 1), len(batches)), np.nan)
        for r in mine:
            i, j = rows.index((r["hidden"], r["seq_len"], r["layers"])), batches.index(r["batch"])
            grid[i, j] = r["speedup_graph"]
            modes = ",".join(sorted(set(r["modes"]))) + (" ∥" if r.get("schedule") == "pipelined" else "")
            ax.text(j, i, f"{r['speedup_graph']:.2f}×\n{modes}", ha="center", va="center", fontsize=7)
        im = ax.imshow(grid, cmap="RdBu", norm=norm, aspect="auto")
        ax.set_xticks(range(len(batches)), [str(b) for b in batches])
        ax.set_yticks(range(len(rows)), [f"H={h} S={s} L={n}" for h, s, n in rows], fontsize=7)
        ax.set_xlabel("batch B")
        ax.set_ylabel("hidden size (= input size), steps, layers")
        ax.set_title(f"{cell.upper()} {dtype}")
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8,
                 label="cuDNN in a CUDA graph ÷ rnncc in a CUDA graph (> 1: rnncc faster)")
    fig.suptitle("rnncc vs cuDNN, both captured in CUDA graphs, one process (blank: not in the sweep)")
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(out_dir: Path, warmup: int, repeats: int) -> int:
    import torch

    from .bench import _progress
    from .cli import _environment

    from .build import compile_all

    env = _environment(torch)
    pts = points()
    prepared = [prepare(p) for p in pts]
    kernels = {k.name: k for _, m, _ in prepared for k in m.kernels}
    print(f"nvcc: {len(kernels)} distinct kernels for {len(pts)} points", file=sys.stderr)
    compile_all(list(kernels.values()), prepared[0][1].target.arch)
    results = []
    for i, (p, prep) in enumerate(zip(pts, prepared)):
        _progress(i, len(pts), p.label)
        results.append(run_point(p, prep, warmup, repeats))
    _progress(len(pts), len(pts), "done")
    ratios = [r["speedup_graph"] for r in results if r.get("speedup_graph")]
    worst = sorted((r for r in results if r.get("speedup_graph")), key=lambda r: r["speedup_graph"])[:5]
    for r in results:
        print(f"{r['cell']} {r['dtype']:<8} L={r['layers']} H={r['hidden']:<5} B={r['batch']:<3} "
              f"S={r['seq_len']:<5} {','.join(r['modes']):<22} eager {r['speedup']:5.2f}×  "
              f"graph {r['speedup_graph'] or float('nan'):5.2f}×  (rnncc {r['rnncc_graph_ms'] or float('nan'):.3f} "
              f"ms, cuDNN {r['cudnn_graph_ms'] or float('nan'):.3f} ms)  {'' if r['agree'] else 'DISAGREES'}")
    summary = {"points": len(results), "median_speedup_graph": statistics.median(ratios) if ratios else None,
               "below_1x": sum(r < 1.0 for r in ratios),
               "worst": [{k: w[k] for k in ("cell", "dtype", "layers", "hidden", "batch", "seq_len",
                                             "modes", "speedup_graph", "rnncc_graph_ms", "cudnn_graph_ms")}
                         for w in worst]}
    print(json.dumps(summary, indent=1))
    day = time.strftime("%Y-%m-%d", time.gmtime())
    device = "h100" if "H100" in env["device"] else env["device"].split()[-1].lower()
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"sweep-{device}-{day}"
    record = {"environment": env, "method": f"CUDA events, {warmup} warm-up calls, median of "
              f"{repeats}, rnncc and cuDNN interleaved call by call, each timed call after an untimed one of its own; graph: each side captured in a CUDA graph, timed by replays; TF32 off",
              "summary": summary, "results": results}
    (out_dir / f"{stem}.json").write_text(json.dumps(record, indent=1) + "\n")
    try:
        heatmap(results, out_dir / f"{stem}.png")
    except ImportError:
        print("matplotlib not installed: no heatmap", file=sys.stderr)
    print(f"wrote {out_dir / (stem + '.json')}")
    return 0 if all(r["agree"] for r in results) else 1
