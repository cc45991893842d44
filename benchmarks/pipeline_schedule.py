"""Stacks run sequentially and pipelined (passes/schedule.py), eager and captured in a CUDA
graph, one process; and the host time of an eager pipelined call per layer chunk.

    python3 benchmarks/pipeline_schedule.py [-o DIR]
    python3 benchmarks/pipeline_schedule.py --partitions [--only NAME ...] [-o DIR]
    python3 benchmarks/pipeline_schedule.py --host [-o DIR]

Writes DIR/pipeline-<gpu>.jsonl: per case the plan's choice, its predicted times, and the
measured eager and graph times of the sequential, the pipelined and the chosen plan; a row
"by chunk" for 8 × LSTM fp16 H=512 with each chunk forced; rows "host" with the host time
per chunk of eager pipelined calls; with --host only those, for each projection GEMM, in
DIR/pipeline-host-<gpu>-<date>.jsonl. With --partitions, DIR/pipeline-partitions-<gpu>.jsonl
instead: the grid layers' SM partitions (schedule.partitioned), a layer's step alone on
each partition's tile beside its prediction, and the stacks of grid layers pipelined with
each (chunk, parts) forced. Needs a GPU, PyTorch and PyCUDA.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import torch

import rnncc
from rnncc.passes.schedule import partitioned, pipelined_plan, step_seconds_of
from rnncc.plan import Decision
from rnncc.runtime import CompiledModel
from rnncc.timing import time_graph, time_interleaved


def stack(L: int, H: int, dtype: str, cell: str = "lstm") -> dict:
    return {"name": f"stack{L}_{cell}_{H}_{dtype}", "dtype": dtype, "input_size": H,
            "layers": [{"name": f"l{i}", "cell": cell, "hidden_size": H} for i in range(1, L + 1)]}


CASES = [("8×LSTM fp16 H=512", stack(8, 512, "float16"), 256, 8),
         ("4×LSTM fp32 H=512", stack(4, 512, "float32"), 256, 8),
         ("4×LSTM fp16 H=1024", stack(4, 1024, "float16"), 256, 8),
         ("2×LSTM fp16 H=256", stack(2, 256, "float16"), 256, 8),
         ("2×LSTM fp16 H=650 (word LM)", stack(2, 650, "float16"), 35, 20),
         ("2×GRU fp16 H=100", stack(2, 100, "float16", "gru"), 35, 20),
         ("2×LSTM fp32 H=256", stack(2, 256, "float32"), 256, 64),
         ("gru_residual", "examples/gru_residual.yaml", 256, 64),
         ("gnmt_encoder_fp16", "examples/gnmt_encoder_fp16.yaml", 128, 8),
         ("2×LSTM bf16 H=768 B=3 S=100", stack(2, 768, "bfloat16"), 100, 3)]


def first(y):
    """The first tensor of a call's result: a call returns (outputs, final states), and
    several outputs come as a tuple."""
    while isinstance(y, (tuple, list)):
        y = y[0]
    return y


def timed(models: dict, x) -> tuple[dict, dict]:
    eager = time_interleaved({k: (lambda m=m: m(x)) for k, m in models.items()}, warmup=2, repeats=10)
    graph = {k: time_graph(lambda m=m: m(x), warmup=2, repeats=10).median_ms for k, m in models.items()}
    return ({k: round(v.median_ms, 3) for k, v in eager.items()}, {k: round(v, 3) for k, v in graph.items()})


def with_chunk(base: CompiledModel, chunk: int, parts: int = 1) -> CompiledModel:
    """``base`` pipelined in chunks of ``chunk`` steps, its grid layers in ``parts`` SM
    partitions, whatever the plan chose (re-tiled from base's tiles: pass a sequential
    plan for each layer's own)."""
    plan = partitioned(base.plan, parts, base.target) if parts > 1 else base.plan
    plan, schedule = pipelined_plan(plan, chunk, base.target, parts)
    return base.with_plan(replace(plan, schedule=Decision(schedule, f"chunks of {chunk}, {parts} parts forced", "user")))


# Layers alone on each partition's grid tile: (name, dtype, H, B, precision).
PARTITION_LAYERS = [("LSTM fp16 H=1024 B=8", "float16", 1024, 8, "tensor"),
                    ("LSTM fp16 H=1024 B=64", "float16", 1024, 64, "tensor"),
                    ("LSTM fp32 exact H=512 B=8", "float32", 512, 8, "exact"),
                    ("GRU fp16 H=1024 B=8", "float16", 1024, 8, "tensor")]
# Stacks of grid layers with (chunk, parts) forced: (name, spec, S, B, precision).
PARTITION_STACKS = [("4×LSTM fp16 H=1024", stack(4, 1024, "float16"), 256, 8, None),
                    ("gnmt_encoder_fp16 B=8", "examples/gnmt_encoder_fp16.yaml", 128, 8, None),
                    ("gnmt_encoder_fp16 B=64", "examples/gnmt_encoder_fp16.yaml", 128, 64, None),
                    ("4×LSTM fp32 exact H=512", stack(4, 512, "float32"), 256, 8, "exact")]


def partition_models(target: str, only: list[str] = ()) -> list[tuple]:
    """(case, its models by label, predicted, S, B, dtype, input size): each layer of
    PARTITION_LAYERS alone on each partition's tile, and each stack of PARTITION_STACKS
    sequential and pipelined with each (chunk, parts) forced; ``only``: the cases whose
    name contains one of these."""
    cases = []
    wanted = (lambda name: any(o in name for o in only)) if only else (lambda name: True)
    for name, dtype, H, B, precision in filter(lambda c: wanted(c[0] + " alone"), PARTITION_LAYERS):
        cell = "gru" if name.startswith("GRU") else "lstm"
        spec = {"name": "partition", "dtype": dtype, "input_size": H,
                "layers": [{"name": "l1", "cell": cell, "hidden_size": H}]}
        base = rnncc.compile(spec, target=target, seq_len=256, batch=B, precision=precision, gemm="rnncc")
        models, predicted = {}, {}
        for parts in (1, 2, 3, 4):
            plan = partitioned(base.plan, parts, base.target) if parts > 1 else base.plan
            l = plan.layers[0]
            if parts > 1 and l == base.plan.layers[0]:
                continue
            key = f"parts={parts} blocks={l.persistence.value.blocks}"
            models[key] = base.with_persistence("l1", l.persistence.value, "forced")
            predicted[key] = round(step_seconds_of(l) * 1e6, 2)
        cases.append((f"{name} alone", models, predicted, 256, B, dtype, H))
    for name, spec, S, B, precision in filter(lambda c: wanted(c[0]), PARTITION_STACKS):
        chosen = rnncc.compile(spec, target=target, seq_len=S, batch=B, precision=precision)
        # with_chunk re-tiles from each layer's own tile: the sequential plan's.
        base = rnncc.compile(spec, target=target, seq_len=S, batch=B, precision=precision, schedule="sequential")
        models = {"sequential": base, "chosen": chosen}
        for parts in (1, 2, 3, 4):
            for chunk in (32, 64):
                models[f"C={chunk} parts={parts}"] = with_chunk(base, chunk, parts)
        d = chosen.plan.schedule
        predicted = {"chosen": d.value.label, **{k: round(v * 1e6) for k, v in d.alternatives.items()}}
        cases.append((name, models, predicted, S, B, base.model.dtype, base.model.input_size))
    return cases


def partitions(emit, build_only: bool, only: list[str] = ()) -> None:
    from rnncc.build import compile_all
    cases = partition_models("h100" if build_only else "device", only)
    kernels = {k.name: k for c in cases for m in c[1].values() for k in m.kernels}
    print(f"nvcc: {len(kernels)} kernels", flush=True)
    compile_all(list(kernels.values()), next(iter(cases[0][1].values())).target.arch)
    if build_only:
        return
    for name, models, predicted, S, B, dtype, size in cases:
        x = torch.randn(S, B, size, device="cuda", dtype=getattr(torch, dtype))
        if name.endswith("alone"):
            _, graph = timed(models, x)
            # A launch's fixed cost (its start, W_hh into shared memory, the projection's
            # launch), which every chunk of a pipelined stack pays: the time of 129 steps
            # less 129 steps at the rate between 129 and 256 (one shape class, one plan).
            _, short = timed(models, x[:129])
            step = {k: (graph[k] - short[k]) / (S - 129) for k in graph}
            emit({"case": name, "predicted_us_per_step": predicted,
                  "graph_us_per_step": {k: round(v * 1e3 / S, 2) for k, v in graph.items()},
                  "graph_us_per_step_129_to_256": {k: round(v * 1e3, 2) for k, v in step.items()},
                  "graph_us_fixed": {k: round((short[k] - 129 * step[k]) * 1e3, 1) for k in graph}})
            continue
        reference = first(models["sequential"](x)[0]).float()
        error = {k: float((first(m(x)[0]).float() - reference).abs().max()) for k, m in models.items()}
        eager, graph = timed(models, x)
        emit({"case": name, "S": S, "B": B, "predicted_us": predicted, "eager_ms": eager, "graph_ms": graph,
              "max_abs_difference_from_sequential": error})


def host_per_chunk(m: CompiledModel, x, calls: int = 100) -> float:
    for _ in range(5):
        m(x)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        m(x)
    host = (time.perf_counter() - start) / calls
    torch.cuda.synchronize()
    s = m.plan.schedule.value
    return host / (len(m.plan.layers) * -(-x.shape[0] // s.chunk)) if s.pipelined else host


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", default="benchmarks/results")
    ap.add_argument("--partitions", action="store_true", help="the grid layers' SM partitions instead")
    ap.add_argument("--host", action="store_true",
                    help="only the host time per chunk, each projection (rnncc's kernel, cuBLASLt)")
    ap.add_argument("--build-only", action="store_true",
                    help="--partitions: plan for the h100 preset and fill the cubin cache, no GPU")
    ap.add_argument("--only", action="append", default=[],
                    help="--partitions: only the cases whose name contains this (repeatable)")
    args = ap.parse_args()
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    rows = []

    def emit(row: dict) -> None:
        print(json.dumps(row, ensure_ascii=False), flush=True)
        rows.append(row)

    if args.build_only:
        partitions(emit, build_only=True, only=args.only)
        return
    gpu = torch.cuda.get_device_name().split()[1].lower()
    if args.partitions:
        partitions(emit, build_only=False, only=args.only)
        path = out / f"pipeline-partitions-{gpu}-{time.strftime('%Y-%m-%d')}.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        print(f"wrote {path}")
        return

    x = torch.randn(256, 8, 512, device="cuda", dtype=torch.half)
    if args.host:
        for gemm in ("rnncc", "cublas"):
            base = rnncc.compile(stack(8, 512, "float16"), target="device", seq_len=256, batch=8, gemm=gemm)
            for c in (32, 64):
                emit({"case": "host", "model": "8×LSTM fp16 H=512", "chunk": c, "gemm": gemm,
                      "host_us_per_chunk": round(host_per_chunk(with_chunk(base, c), x) * 1e6, 1)})
        path = out / f"pipeline-host-{gpu}-{time.strftime('%Y-%m-%d')}.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        print(f"wrote {path}")
        return
    base = rnncc.compile(stack(8, 512, "float16"), target="device", seq_len=256, batch=8)
    forced = {f"C={c}": with_chunk(base, c) for c in (16, 32, 64, 128)}
    eager, graph = timed(forced, x)
    emit({"case": "8×LSTM fp16 H=512 by chunk", "S": 256, "B": 8, "eager_ms": eager, "graph_ms": graph})
    for c in (32, 64):
        emit({"case": "host", "model": "8×LSTM fp16 H=512", "chunk": c,
              "host_us_per_chunk": round(host_per_chunk(forced[f"C={c}"], x) * 1e6, 1)})
    for name, spec, S, B in CASES:
        models = {str(s): rnncc.compile(spec, target="device", seq_len=S, batch=B, schedule=s)
                  for s in ("sequential", "pipelined", None)}
        chosen = models["None"]
        x = torch.randn(S, B, chosen.model.input_size, device="cuda", dtype=getattr(torch, chosen.model.dtype))
        ys = {k: first(m(x)[0]) for k, m in models.items()}
        torch.cuda.synchronize()
        d = chosen.plan.schedule
        eager, graph = timed(models, x)
        emit({"case": name, "S": S, "B": B,
              "chosen": d.value.label,
              "pipelined_chunk": models["pipelined"].plan.schedule.value.chunk,
              "predicted_us": {k: round(v * 1e6) for k, v in d.alternatives.items()},
              "eager_ms": eager, "graph_ms": graph,
              # Partitioned tiles sum in another order: a difference, not equality.
              "max_abs_difference_sequential_pipelined":
                  float((ys["sequential"].float() - ys["pipelined"].float()).abs().max())})
    path = out / f"pipeline-{gpu}-{time.strftime('%Y-%m-%d')}.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
