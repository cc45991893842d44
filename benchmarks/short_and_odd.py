"""Short sequences and odd sizes beside cuDNN: decode-like calls (S=1), a few steps, batches
that are not a multiple of 8, hidden sizes no bench row has, and layers whose W_hh fits no
persistent mode. For each point rnncc as planned and cuDNN, eager and captured in a CUDA
graph (rnncc.sweep's measurement), and rnncc with each persistence mode forced, in a graph:
a plan that picks a slower mode than one it could have run shows as `best forced` below
`planned`.

    python3 benchmarks/short_and_odd.py OUT_DIR   (from the repository root; needs a GPU)

Writes OUT_DIR/short-and-odd-<gpu>-<date>.json and prints a table.
"""
import json
import statistics
import sys

import torch

import rnncc
from rnncc.bench import Config, graph_baselines, graph_planned
from rnncc.build import compile_all
from rnncc.cli import _environment
from rnncc.errors import PlanError
from rnncc.sweep import Point, prepare, run_point
from result_files import result_path

# (cell, dtype, layers, H, B, S)
POINTS = [
    # One step a call (autoregressive decoding), B = 1 and small odd batches.
    *[Point(c, d, 1, H, B, 1) for c in ("lstm", "gru") for d in ("float32", "float16")
      for H, B in ((256, 1), (1024, 1), (650, 5))],
    # A few steps, odd batches and sizes.
    Point("lstm", "float16", 1, 333, 3, 16), Point("lstm", "float16", 1, 1024, 13, 4),
    Point("gru", "float16", 1, 777, 5, 16), Point("lstm", "float32", 1, 512, 3, 4),
    Point("gru", "float32", 1, 1000, 13, 16), Point("lstm", "float16", 2, 512, 7, 8),
    # W_hh past every persistent mode (fp16 H=2048: 32 MiB; fp32 H=1536: 36 MiB).
    Point("lstm", "float16", 1, 2048, 16, 64), Point("gru", "float16", 1, 2048, 4, 64),
    Point("lstm", "float32", 1, 1536, 8, 64),
    # Stacks whose graph plans ran slower than their eager plans (results/ab-replay-moves-
    # h100-2026-11-28.jsonl): a wgmma partition tile at B=64; a launch a step at K=650.
    Point("gru", "bfloat16", 2, 768, 64, 100), Point("lstm", "bfloat16", 4, 650, 20, 16),
]
MODES = ("none", "grid", "cluster")


def forced(p: Point, model, weights, mode: str):
    try:
        return rnncc.compile(model, target="device", weights=weights, batch=p.batch, seq_len=p.seq_len,
                             persistence=mode)
    except PlanError:
        return None


def main(out: str) -> int:
    env = _environment(torch)
    prepared = [prepare(p) for p in POINTS]
    variants = [{m: forced(p, *rnncc.from_torch(prep[0]), m) for m in MODES} for p, prep in zip(POINTS, prepared)]
    kernels = {k.name: k for _, m, _ in prepared for k in m.kernels}
    kernels.update({k.name: k for v in variants for m in v.values() if m is not None for k in m.kernels})
    print(f"nvcc: {len(kernels)} distinct kernels for {len(POINTS)} points", file=sys.stderr)
    compile_all(list(kernels.values()), prepared[0][1].target.arch)
    rows = []
    for p, prep, forms in zip(POINTS, prepared, variants):
        row = run_point(p, prep, 3, 30)
        module, _, x = prep
        forced_ms = {}
        with torch.no_grad():
            for mode, m in forms.items():
                if m is not None:
                    forced_ms[mode] = graph_baselines(module, m, x, 3, 30)["rnncc_graph_ms"]
        row["forced_graph_ms"] = forced_ms
        # The plan a user who captures the call compiles (launches="graph").
        cfg = Config(p.cell, p.dtype, p.hidden, p.batch, seq_len=p.seq_len, layers=p.layers)
        with torch.no_grad():
            row |= graph_planned(*rnncc.from_torch(module), cfg, prep[1], x, row, 3, 30)
        rows.append(row)
        best = min(forced_ms, key=forced_ms.get) if forced_ms else None
        print(f"{p.label:<40} planned {','.join(row['modes']):<14} eager {row['speedup']:5.2f}×  graph "
              f"{row['speedup_graph'] or float('nan'):5.2f}×  graph plan {row['speedup_graph_plan'] or float('nan'):5.2f}×"
              f"  rnncc {row['rnncc_graph_ms']:.4f} ms  cuDNN "
              f"{row['cudnn_graph_ms']:.4f} ms  forced: "
              + " ".join(f"{k} {v:.4f}" for k, v in forced_ms.items())
              + (f"  best {best}" if best else "") + ("" if row["agree"] else "  DISAGREES"), flush=True)
    ratios = [r["speedup_graph"] for r in rows if r.get("speedup_graph")]
    planned = [r["speedup_graph_plan"] for r in rows if r.get("speedup_graph_plan")]
    summary = {"points": len(rows), "median_speedup_graph": statistics.median(ratios),
               "median_speedup_graph_plan": statistics.median(planned),
               "below_1x_graph_plan": sum(r < 1 for r in planned),
               "median_speedup_eager": statistics.median(r["speedup"] for r in rows),
               "below_1x_graph": sum(r < 1 for r in ratios), "below_1x_eager": sum(r["speedup"] < 1 for r in rows)}
    print(json.dumps(summary))
    path = result_path(out, "short-and-odd")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"environment": env, "method": "rnncc.sweep.run_point (eager interleaved, "
                                "3 warm-up, median of 30; graph replays); forced_graph_ms: rnncc with "
                                "persistence forced, captured in a CUDA graph; graph_plan: rnncc "
                                "compiled with launches='graph', captured (bench.graph_planned)", "summary": summary,
                                "results": rows}, indent=1) + "\n")
    print(f"wrote {path}")
    return 0 if all(r["agree"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
