"""Where the time of a pipelined stack in SM partitions goes: a kernel trace per variant.

    python3 benchmarks/partition_profile.py [-o DIR] [--build-only]

For each stack of grid-persistent layers, each (chunk, parts) variant is timed as CUDA-graph
replays and one eager call is traced by torch.profiler (CUPTI sees rnncc's kernels too).
Per variant the rows give the graph and eager times, each kernel kind's durations (the
recurrent chunks, the input projections), the idle time between a stream's kernels, and
the trace itself. A variant "… alone" runs the same partition tiles one layer and chunk
after another on one stream: the recurrent chunk's time with nothing beside it. Writes
DIR/partition-profile-<gpu>.jsonl, each variant with the schedule model's prediction
(``predicted_ms``, the eager plan's). ``--case NAME`` (repeatable) runs those cases only;
``--pair 16x4`` (repeatable) times those (chunk, parts) only;
``--graph-plans`` plans for graphed calls instead (launches='graph': the chunks' projections
priced without the host's time), every (chunk, parts) of GRAPH_PAIRS and the plan's own pick,
into DIR/partition-profile-graph-plans-<gpu>.jsonl.
Needs a GPU, PyTorch and PyCUDA.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path

import torch

import rnncc
from rnncc.passes.schedule import predicted_seconds, sequential_schedule
from rnncc.runtime import CompiledModel
from rnncc.timing import time_graph, time_interleaved

from ab_rows import build_target  # run as a script: benchmarks/ is on sys.path
from pipeline_schedule import stack, with_chunk


# (name, spec, S, B, precision, the (chunk, parts) variants)
CASES = [("4×LSTM fp16 H=1024 B=8", stack(4, 1024, "float16"), 256, 8, None,
          [(64, 2), (64, 3), (32, 2), (32, 3), (16, 3), (128, 2)]),
         ("GNMT fp16 B=8", "examples/gnmt_encoder_fp16.yaml", 128, 8, None,
          [(64, 2), (64, 3), (32, 2), (32, 3), (16, 2), (16, 3)]),
         # Pipelined in 2 partitions with the projections ahead it ran 1.31× its sequential
         # time eager (results/projection-ahead-ab-h200-2026-11-28.txt): what the projection
         # GEMMs take beside partitions that hold 128 of the SMs.
         ("GNMT fp16 B=64", "examples/gnmt_encoder_fp16.yaml", 128, 64, None, [(32, 2), (64, 2), (32, 3)]),
         ("4×GRU fp16 H=1024 B=8", stack(4, 1024, "float16", "gru"), 256, 8, None,
          [(64, 2), (64, 3), (64, 4), (32, 3), (32, 4)]),
         ("3×LSTM bf16 H=1024 B=8", stack(3, 1024, "bfloat16"), 256, 8, None, [(64, 2), (64, 3), (32, 2), (32, 3)]),
         ("4×LSTM fp32 exact H=512 B=8", stack(4, 512, "float32"), 256, 8, "exact",
          [(32, 4), (64, 4), (64, 2), (16, 4)])]
# With --graph-plans, every case's variants: each chunk with each SM partition.
GRAPH_PAIRS = [(chunk, parts) for chunk in (16, 32, 64) for parts in (2, 3, 4)]


def alone(pipelined: CompiledModel) -> CompiledModel:
    """``pipelined``'s tiles and chunks run one layer and chunk after another on the
    caller's stream."""
    d = pipelined.plan.schedule
    schedule = sequential_schedule(pipelined.plan, pipelined.target)
    return pipelined.with_plan(replace(pipelined.plan, schedule=replace(d, value=schedule)))


def kind(name: str) -> str:
    return "recurrent" if "recurrent" in name else "projection"


def kernel_events(fn) -> list[dict]:
    """The kernels the GPU ran for ``fn()`` (CUPTI sees those inside a CUDA graph too), as
    torch.profiler's chrome-trace events, by start."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        events = [e for e in json.loads(Path(f.name).read_text())["traceEvents"] if e.get("cat") == "kernel"]
    return sorted(events, key=lambda e: e["ts"])


def trace(m: CompiledModel, x) -> list[dict]:
    """The kernels of one eager call (after warm calls), by start."""
    for _ in range(3):
        m(x)
    torch.cuda.synchronize()
    return kernel_events(lambda: m(x))


def summary(events: list[dict]) -> dict:
    t0 = events[0]["ts"]
    by_kind: dict[str, list[float]] = {}
    for e in events:
        by_kind.setdefault(kind(e["name"]), []).append(e["dur"])
    streams: dict[object, list[dict]] = {}
    for e in events:
        streams.setdefault(e["args"].get("stream"), []).append(e)
    idle = sum(b["ts"] - (a["ts"] + a["dur"]) for es in streams.values() for a, b in zip(es, es[1:]))
    return {"span_us": round(events[-1]["ts"] + events[-1]["dur"] - t0, 1),
            "kernels": {k: {"n": len(v), "median_us": round(statistics.median(v), 1),
                            "max_us": round(max(v), 1), "sum_us": round(sum(v), 1)} for k, v in by_kind.items()},
            "stream_idle_us": round(idle, 1),
            "trace": [(kind(e["name"]), e["args"].get("stream"), round(e["ts"] - t0, 1), round(e["dur"], 1))
                      for e in events]}


def script_args(doc: str, cases: bool = False) -> argparse.Namespace:
    """The options of a measuring script here: -o DIR, and --build-only (plan for the preset
    RNNCC_BUILD_TARGET, default h200, the GPU the device tool lends, and fill the cubin cache,
    no GPU); ``target`` is the one to compile for."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("-o", "--output", default="benchmarks/results")
    ap.add_argument("--build-only", action="store_true", help="plan and build on this machine (preset RNNCC_BUILD_TARGET, default h200)")
    if cases:
        ap.add_argument("--case", action="append", default=[], help="only the cases of this name (repeatable)")
        ap.add_argument("--graph-plans", action="store_true",
                        help="plans for graphed calls (launches='graph'), every (chunk, parts) of GRAPH_PAIRS")
        ap.add_argument("--pair", action="append", default=[], metavar="CHUNKxPARTS",
                        help="only these (chunk, parts) variants, e.g. 16x4 (repeatable; any chunk)")
    args = ap.parse_args()
    args.target = build_target() if args.build_only else "device"
    return args


def main() -> None:
    args = script_args(__doc__, cases=True)
    launches = "graph" if args.graph_plans else None
    cases = []
    for name, spec, S, B, precision, pairs in CASES:
        if args.case and name not in args.case:
            continue
        base = rnncc.compile(spec, target=args.target, seq_len=S, batch=B,
                             precision=precision, schedule="sequential", launches=launches)
        models = {"sequential": base}
        if args.graph_plans:
            models["chosen"] = rnncc.compile(spec, target=args.target, seq_len=S, batch=B,
                                             precision=precision, launches=launches)
        chosen_pairs = [tuple(int(v) for v in p.split("x")) for p in args.pair] or \
            (GRAPH_PAIRS if args.graph_plans else pairs)
        for chunk, parts in chosen_pairs:
            pipelined = with_chunk(base, chunk, parts)
            models[f"C={chunk} parts={parts}"] = pipelined
            if not args.graph_plans:
                models[f"C={chunk} parts={parts} alone"] = alone(pipelined)
        cases.append((name, S, B, base, models))
    from rnncc.build import compile_all
    kernels = {k.name: k for c in cases for m in c[4].values() for k in m.kernels}
    compile_all(list(kernels.values()), cases[0][3].target.arch)
    if args.build_only:
        return
    gpu = torch.cuda.get_device_name().split()[1].lower()
    out = Path(args.output) / f"partition-profile{'-graph-plans' if args.graph_plans else ''}-{gpu}.jsonl"
    with open(out, "w") as f:
        for name, S, B, base, models in cases:
            x = torch.randn(S, B, base.model.input_size, device="cuda", dtype=getattr(torch, base.model.dtype))
            for label, m in models.items():
                l = m.plan.layers[0].persistence.value
                graph = [round(time_graph(lambda: m(x), warmup=2, repeats=10).median_ms, 3) for _ in range(2)]
                eager = round(time_interleaved({"m": lambda: m(x)}, warmup=2, repeats=10)["m"].median_ms, 3)
                d = m.plan.schedule
                predicted = predicted_seconds(m.plan, d.value, S, m.target)
                row = {"case": name, "variant": label, "schedule": d.value.label, "blocks": l.blocks,
                       "graph_ms": graph, "eager_ms": eager,
                       "predicted_ms": round(predicted * 1e3, 3),
                       **summary(trace(m, x))}
                f.write(json.dumps(row) + "\n")
                f.flush()
                print(json.dumps({k: v for k, v in row.items() if k != "trace"}), flush=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
