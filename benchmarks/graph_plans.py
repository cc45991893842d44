"""Plans priced for eager calls against plans priced for calls replayed from a CUDA graph
(``launches="graph"``), both replayed from CUDA graphs, beside cuDNN in a graph.

For each point (short_and_odd.py's, and the bench's one-layer and stack rows at their
shapes) the model is compiled twice with the same weights: as planned for eager calls
(the default) and for graphed calls. Where the two plans differ, both are timed as CUDA-
graph replays in interleaved rounds (timing.time_graphs_interleaved), with cuDNN's graph
in the same rounds, and the graph plan's outputs are checked against the eager plan's,
within twice the dtype's tolerance (each approximates the float64 reference, which the GPU
tests check them against).

    python3 benchmarks/graph_plans.py OUT_DIR [--only TEXT]   (from the repository root; needs a GPU)

``--only``: the points whose label contains TEXT (a point a change moved, measured again).

Writes OUT_DIR/graph-plans-<gpu>-<date>.json and prints a table.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import torch

import rnncc
from rnncc.bench import Config, issue_configs, modes_of, stack_configs
from rnncc.build import compile_all
from rnncc.cli import _environment
from rnncc.dtypes import max_relative_error, tolerance
from rnncc.timing import time_graphs_interleaved

sys.path.insert(0, str(Path(__file__).parent))
from short_and_odd import POINTS  # noqa: E402
from result_files import result_path


def configs() -> list[Config]:
    """short_and_odd's points, then the bench's forward rows of torch.nn modules (a named
    model and packed input take other harnesses)."""
    out = [Config(p.cell, p.dtype, p.hidden, p.batch, seq_len=p.seq_len, layers=p.layers) for p in POINTS]
    out += [c for c in issue_configs() + stack_configs()
            if not (c.model or c.packed) and c.passes == "forward"]
    return list(dict.fromkeys(out))  # issue_configs holds some stacks too


def label(c: Config) -> str:
    precision = f" {c.precision}" if c.dtype == "float32" and c.precision else ""
    return (f"{c.layers}×{'bi' if c.bidirectional else ''}{c.cell} {c.dtype}{precision} H={c.hidden}"
            + (f" P={c.proj}" if c.proj else "") + f" B={c.batch} S={c.seq_len}")


def precision_of(c: Config) -> str | None:
    """The precision a point is compiled with: float32's as the config says, the planner's
    own choice for the half types."""
    return c.precision if c.dtype == "float32" else None


def summary(plan) -> str:
    """Each layer's mode/math and projection (bench.modes_of), and the schedule."""
    return f"{','.join(modes_of(l) for l in plan.layers)} {plan.schedule.value.label}"


def prepare(c: Config):
    torch.manual_seed(0)
    tdt = getattr(torch, c.dtype)
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[c.cell]
    module = cls(c.hidden, c.hidden, num_layers=c.layers, bidirectional=c.bidirectional,
                 **({"proj_size": c.proj} if c.proj else {})).to("cuda", tdt).eval()
    model, weights = rnncc.from_torch(module)
    models = {launches: rnncc.compile(model, target="device", weights=weights, batch=c.batch,
                                      seq_len=c.seq_len, precision=precision_of(c), launches=launches)
              for launches in ("eager", "graph")}
    x = torch.randn(c.seq_len, c.batch, c.hidden, device="cuda", dtype=tdt)
    return module, models, x


def main(out: str, only: str = "") -> int:
    env = _environment(torch)
    prepared = [(c, *prepare(c)) for c in configs() if only in label(c)]
    differing = [(c, module, models, x) for c, module, models, x in prepared
                 if summary(models["eager"].plan) != summary(models["graph"].plan)]
    kernels = {k.name: k for _, _, models, _ in differing for m in models.values() for k in m.kernels}
    print(f"{len(differing)} of {len(prepared)} points plan differently; nvcc: {len(kernels)} kernels",
          file=sys.stderr)
    compile_all(list(kernels.values()), differing[0][2]["eager"].target.arch)
    rows = []
    for c, module, models, x in differing:
        tf32 = c.dtype == "float32" and c.precision == "tensor"
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
        with torch.no_grad():
            eager_out = models["eager"](x)[0].float()
            graph_out = models["graph"](x)[0].float()
            error = max_relative_error(graph_out.cpu().numpy(), eager_out.cpu().numpy())
            times = time_graphs_interleaved({"eager_plan": lambda: models["eager"](x),
                                             "graph_plan": lambda: models["graph"](x),
                                             "cudnn": lambda: module(x)}, rounds=3, warmup=3, repeats=20)
        precision = "tensor" if tf32 or c.dtype != "float32" else "exact"
        row = {"label": label(c), "cell": c.cell, "dtype": c.dtype, "precision": precision,
               "layers": c.layers, "hidden": c.hidden, "batch": c.batch, "seq_len": c.seq_len,
               "proj": c.proj, "bidirectional": c.bidirectional,
               "eager_plan": summary(models["eager"].plan), "graph_plan": summary(models["graph"].plan),
               "eager_plan_graph_ms": times["eager_plan"], "graph_plan_graph_ms": times["graph_plan"],
               "cudnn_graph_ms": times["cudnn"],
               "graph_plan_over_eager_plan": times["graph_plan"] / times["eager_plan"],
               "predicted_us": {k: m.plan.schedule.alternatives[m.plan.schedule.value.label] * 1e6
                                if m.plan.schedule.alternatives else None for k, m in models.items()},
               "error_vs_eager_plan": error, "agree": error <= 2 * tolerance(c.dtype, precision)}
        rows.append(row)
        print(f"{row['label']:<44} eager plan {times['eager_plan']:.4f} ms  graph plan {times['graph_plan']:.4f} "
              f"({row['graph_plan_over_eager_plan']:.2f}×)  cuDNN {times['cudnn']:.4f}  "
              f"[{row['eager_plan']} → {row['graph_plan']}]" + ("" if row["agree"] else "  DISAGREES"), flush=True)
    ratios = [r["graph_plan_over_eager_plan"] for r in rows]
    summary_ = {"points": len(prepared), "differing": len(rows),
                "median_graph_plan_over_eager_plan": statistics.median(ratios) if ratios else None,
                "faster": sum(r < 0.98 for r in ratios), "slower": sum(r > 1.02 for r in ratios)}
    print(json.dumps(summary_))
    path = result_path(out, "graph-plans")
    path.write_text(json.dumps({"environment": env, "method": __doc__.split("\n\n")[1].replace("\n", " "),
                                "summary": summary_, "results": rows}, indent=1))
    print(path)
    return 0


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--only", default="", help="the points whose label contains this")
    args = parser.parse_args()
    sys.exit(main(args.out, args.only))
