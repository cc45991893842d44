"""One layer with its hoisted projection in cuBLASLt (gemm='cublas') and in rnncc's GEMM
(gemm='rnncc'), timed eager (interleaved) and as CUDA-graph replays, one process: whether
the library's call costs an eager call more than its GPU time.

    python3 benchmarks/projection_gemm_eager.py [-o DIR] [--build-only]

Writes DIR/projection-gemm-eager-<gpu>.jsonl. Needs a GPU, PyTorch and PyCUDA. The committed
run (results/projection-gemm-eager-h100-2026-11-25.jsonl, at 4566bd3) named cuBLASLt "plan":
the plan picked it then.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

import rnncc
from rnncc.build import compile_all
from rnncc.timing import time_graph, time_interleaved

from partition_profile import script_args  # run as a script: benchmarks/ is on sys.path
from pipeline_schedule import stack

# (cell, dtype, precision, H, B): rows whose projection the plan put in cuBLASLt at 4566bd3.
CASES = [("lstm", "float16", "tensor", 256, 8), ("lstm", "float32", "tensor", 256, 8),
         ("gru", "float32", "tensor", 256, 8), ("lstm", "bfloat16", "tensor", 256, 8),
         ("gru", "float16", "tensor", 512, 5)]


def models_of(cell: str, dtype: str, precision: str, H: int, B: int, target: str) -> dict:
    """The layer compiled with each projection GEMM, by gemm option."""
    return {g: rnncc.compile(stack(1, H, dtype, cell), target=target, batch=B, seq_len=256,
                             precision=precision, gemm=g) for g in ("cublas", "rnncc")}


def main() -> None:
    args = script_args(__doc__)
    cases = [(case, models_of(*case, args.target)) for case in CASES]
    kernels = {k.name: k for _, models in cases for m in models.values() for k in m.kernels}
    compile_all(list(kernels.values()), cases[0][1]["rnncc"].target.arch)
    if args.build_only:
        return
    rows = []
    for (cell, dtype, precision, H, B), models in cases:
        x = torch.randn(256, B, H, device="cuda", dtype=getattr(torch, dtype))
        eager = time_interleaved({g: (lambda m=m: m(x)) for g, m in models.items()}, warmup=3, repeats=30)
        row = {"case": f"{cell} {dtype} {precision} H={H} B={B}",
               "projection": {g: m.plan.layers[0].projection_tile.value.math for g, m in models.items()},
               "eager_ms": {g: round(t.median_ms, 4) for g, t in eager.items()},
               "graph_ms": {g: round(time_graph(lambda m=m: m(x), warmup=3, repeats=30).median_ms, 4)
                            for g, m in models.items()}}
        print(json.dumps(row), flush=True)
        rows.append(row)
    out = Path(args.output) / f"projection-gemm-eager-{torch.cuda.get_device_name().split()[1].lower()}.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
