"""Stacks run sequentially and pipelined (passes/schedule.py), eager and captured in a CUDA
graph, one process; and the host time of an eager pipelined call per layer chunk.

    python3 benchmarks/pipeline_schedule.py [-o DIR]

Writes DIR/pipeline-<gpu>.jsonl: per case the plan's choice, its predicted times, and the
measured eager and graph times of the sequential, the pipelined and the chosen plan; a row
"by chunk" for 8 × LSTM fp16 H=512 with each chunk forced; rows "host" with the host time
per chunk of eager pipelined calls. Needs a GPU, PyTorch and PyCUDA.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import torch

import rnncc
from rnncc import codegen
from rnncc.passes.schedule import pipelined_plan
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
         ("gnmt_encoder_fp16", "examples/gnmt_encoder_fp16.yaml", 128, 8)]


def first(y):
    return y[0] if isinstance(y, tuple) else y


def timed(models: dict, x) -> tuple[dict, dict]:
    eager = time_interleaved({k: (lambda m=m: m(x)) for k, m in models.items()}, warmup=2, repeats=10)
    graph = {k: time_graph(lambda m=m: m(x), warmup=2, repeats=10).median_ms for k, m in models.items()}
    return ({k: round(v.median_ms, 3) for k, v in eager.items()}, {k: round(v, 3) for k, v in graph.items()})


def with_chunk(base: CompiledModel, chunk: int) -> CompiledModel:
    """``base`` pipelined in chunks of ``chunk`` steps, whatever the plan chose."""
    plan, schedule = pipelined_plan(base.plan, chunk, base.target)
    plan = replace(plan, schedule=Decision(schedule, f"chunks of {chunk} forced", "user"))
    return CompiledModel(base.model, plan, base.target, codegen.render(plan), None)


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
    out = Path(ap.parse_args().output)
    out.mkdir(parents=True, exist_ok=True)
    rows = []

    def emit(row: dict) -> None:
        print(json.dumps(row, ensure_ascii=False), flush=True)
        rows.append(row)

    base = rnncc.compile(stack(8, 512, "float16"), target="device", seq_len=256, batch=8)
    x = torch.randn(256, 8, 512, device="cuda", dtype=torch.half)
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
              "chosen": d.value.kind + (f" C={d.value.chunk}" if d.value.pipelined else ""),
              "pipelined_chunk": models["pipelined"].plan.schedule.value.chunk,
              "predicted_us": {k: round(v * 1e6) for k, v in d.alternatives.items()},
              "eager_ms": eager, "graph_ms": graph,
              "sequential_equals_pipelined": bool(torch.equal(ys["sequential"], ys["pipelined"]))})
    gpu = torch.cuda.get_device_name().split()[1].lower()
    path = out / f"pipeline-{gpu}-{time.strftime('%Y-%m-%d')}.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
