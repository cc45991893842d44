"""Each example's planned schedule against the schedules it beat, measured in one process:
sequential, and pipelined with each chunk of CHUNKS forced, eager and as CUDA-graph
replays, at the examples' planned shape (B=64, S=256, as generated/) and at B=8. Checks
that the planner's pick is within a few percent of the fastest measured, on models no
bench row names (a concat DAG, bidirectional layers, residual GRUs), and that every
variant's outputs agree with the plan's.

    python3 benchmarks/example_schedules.py OUT_DIR [EXAMPLE ...]

Writes OUT_DIR/example-schedules-<gpu>-<date>.json and prints a table. Needs a GPU,
PyTorch and PyCUDA.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

import rnncc
from rnncc.dtypes import max_relative_error, tolerance
from rnncc.timing import time_graphs_interleaved, time_interleaved

sys.path.insert(0, str(Path(__file__).parent))
from pipeline_schedule import first  # noqa: E402
from result_files import write_results  # noqa: E402

EXAMPLES = ["bilstm_tagger", "dense_skip", "gru_residual"]
SHAPES = [(256, 64), (256, 8)]
CHUNKS = [32, 64, 128, 256]


def variants(path: str, S: int, B: int) -> dict:
    """label: compiled model: the plan, sequential, and pipelined in chunks of each CHUNKS."""
    out = {"plan": rnncc.compile(path, target="device", seq_len=S, batch=B)}
    out["sequential"] = rnncc.compile(path, target="device", seq_len=S, batch=B, schedule="sequential")
    for chunk in CHUNKS:
        out[f"pipelined C={chunk}"] = rnncc.compile(path, target="device", seq_len=S, batch=B,
                                                    schedule="pipelined", unroll=chunk)
    return out


def main() -> None:
    out_dir = Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results")
    names = sys.argv[2:] or EXAMPLES
    rows = []
    for name in names:
        for S, B in SHAPES:
            models = variants(f"examples/{name}.yaml", S, B)
            dtype = models["plan"].model.dtype
            x = torch.randn(S, B, models["plan"].model.input_size, device="cuda").to(getattr(torch, dtype))
            want = first(models["plan"](x)).float().cpu().numpy()
            errors = {label: max_relative_error(first(m(x)).float().cpu().numpy(), want)
                      for label, m in models.items()}
            calls = {label: (lambda m=m: m(x)) for label, m in models.items()}
            graph = time_graphs_interleaved(calls, rounds=3)
            eager = {label: t.median_ms for label, t in time_interleaved(calls, warmup=3, repeats=10).items()}
            planned = models["plan"].plan.schedule.value.label
            best_graph, best_eager = min(graph.values()), min(eager.values())
            for label, m in models.items():
                row = {"example": name, "S": S, "B": B, "variant": label,
                       "schedule": m.plan.schedule.value.label, "planned": label == "plan",
                       "graph_ms": round(graph[label], 4), "eager_ms": round(eager[label], 4),
                       "graph_vs_best": round(graph[label] / best_graph, 3),
                       "eager_vs_best": round(eager[label] / best_eager, 3),
                       "max_relative_error_vs_plan": float(errors[label]),
                       "agree": bool(errors[label] <= 2 * tolerance(dtype))}
                rows.append(row)
                print(f"{name:<14} S={S} B={B:<3} {label:<16} {row['schedule']:<22} graph {graph[label]:7.3f} ms "
                      f"({row['graph_vs_best']:.3f}× best)  eager {eager[label]:7.3f} ms ({row['eager_vs_best']:.3f}×)"
                      f"{'  <- planned' if label == 'plan' else ''}{'' if row['agree'] else '  DISAGREES'}", flush=True)
            print(f"{name} S={S} B={B}: planned {planned}, {graph['plan'] / best_graph:.3f}× the fastest "
                  f"in graphs, {eager['plan'] / best_eager:.3f}× eager", flush=True)
    write_results(out_dir, "example-schedules", rows)


if __name__ == "__main__":
    main()
