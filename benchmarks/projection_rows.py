"""The projection of a few rows, each kernel form forced, timed alone: rnncc's rows kernels in
FMA (input_projection_rows.cu.j2, every pass size that fits) and on tensor cores (fp16/bf16,
input_projection_rows_tensor.cu.j2), the plan's pick, and cuBLASLt; the kernels' GPU time
from torch.profiler over a one-step call (S=1, B = the rows) of one layer. The data the rows
projection models (passes/cost.py) are fitted to.

    python3 benchmarks/projection_rows.py OUT_DIR   (from the repository root; needs a GPU)

Writes OUT_DIR/projection-rows-<gpu>-<date>.json and prints each point's ranking.
"""
import json
import os
import sys
from dataclasses import replace

import torch
from torch.profiler import ProfilerActivity, profile

import rnncc
from rnncc.build import compile_all
from rnncc.cli import _environment
from rnncc.dtypes import DTYPES
from rnncc.passes.cost import (rows_projection_seconds, rows_projection_tensor_seconds,
                               rows_projection_tensor_tiles, rows_projection_tiles)
from rnncc.passes.geometry import projection_label
from rnncc.plan import Decision
from result_files import result_path

# (cell, dtype, H = input size, rows)
POINTS = [("lstm", "float32", 1024, 1), ("lstm", "float32", 1024, 8), ("lstm", "float32", 650, 5),
          ("gru", "float32", 256, 1), ("lstm", "float16", 1024, 1), ("lstm", "float16", 1024, 8),
          ("gru", "float16", 650, 5), ("lstm", "bfloat16", 512, 16), ("lstm", "float16", 2048, 16)]


def projection_us(m, x, calls: int = 20) -> float:
    """Mean GPU µs of the call's input projection: its rnncc kernel, or, where cuBLASLt runs
    it, every kernel that is not rnncc's (the call has no state, so no step product runs;
    cuBLASLt's H100 kernels are named nvjet_*, not *gemm*). The run at 0c80491 matched
    "gemm" and so read 0 µs for cuBLASLt in most rows of projection-rows-h100-2026-11-27.json."""
    for _ in range(3):
        m(x)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            m(x)
        torch.cuda.synchronize()
    ours = {k.name for k in m.kernels}
    names = {k.name for k in m.kernels if k.family == "input_projection"}
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA" and not e.name.startswith("Memcpy")
               and not e.name.startswith("Memset")]
    times = [e.device_time for e in kernels
             if (any(n in e.name for n in names) if names else not any(n in e.name for n in ours))]
    return sum(times) / calls


def main(out: str) -> int:
    env = _environment(torch)
    commit = os.environ.get("RNNCC_COMMIT", "unknown")
    prepared = []
    for cell, dtype, H, rows in POINTS:
        torch.manual_seed(0)
        module = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cell](H, H).to("cuda", getattr(torch, dtype)).eval()
        model, weights = rnncc.from_torch(module)
        base = rnncc.compile(model, target="device", weights=weights, batch=rows, seq_len=1, persistence="none",
                             gemm="rnncc")
        l = base.plan.layers[0]
        itemsize = DTYPES[dtype].itemsize
        GH = l.gates * H
        tiles = rows_projection_tiles(rows, H, itemsize, base.target)
        predicted = {projection_label(t): rows_projection_seconds(rows, GH, H, t, base.target, itemsize) * 1e6
                     for t in tiles}
        if itemsize == 2:
            tensor = rows_projection_tensor_tiles(rows, H, itemsize, base.target)
            predicted |= {projection_label(t): rows_projection_tensor_seconds(rows, GH, t, itemsize) * 1e6
                          for t in tensor}
            tiles += tensor
        forms = {f"pick {projection_label(l.projection_tile.value)}": base,
                 "cuBLASLt": rnncc.compile(model, target="device", weights=weights, batch=rows, seq_len=1,
                                           persistence="none", gemm="cublas")}
        for t in tiles:
            forms[projection_label(t)] = base.with_plan(base.plan.map_layers(
                lambda l, t=t: replace(l, projection_tile=Decision(t, "swept", "user"))))
        prepared.append(((cell, dtype, H, rows), forms, predicted))
    kernels = {k.name: k for _, forms, _ in prepared for m in forms.values() for k in m.kernels}
    print(f"nvcc: {len(kernels)} distinct kernels", file=sys.stderr)
    compile_all(list(kernels.values()), prepared[0][1]["cuBLASLt"].target.arch)
    results = []
    for (cell, dtype, H, rows), forms, predicted in prepared:
        x = torch.randn(1, rows, H, device="cuda", dtype=getattr(torch, dtype))
        with torch.no_grad():
            us = {name: projection_us(m, x) for name, m in forms.items()}
        results.append({"cell": cell, "dtype": dtype, "input": H, "rows": rows, "us": us, "predicted_us": predicted})
        print(f"== {cell} {dtype} K={H} rows={rows}")
        for name in sorted(us, key=us.get):
            p = predicted.get(name.removeprefix("pick "))
            print(f"   {name:<36} {us[name]:7.2f} µs" + (f"  predicted {p:6.2f}" if p is not None else ""), flush=True)
    path = result_path(out, "projection-rows")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"environment": env, "commit": commit, "method":
                                "torch.profiler: mean GPU µs of the projection's kernels over 20 one-step calls "
                                "(3 warm-up) without a state; predicted: passes/cost.py", "results": results},
                               indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
