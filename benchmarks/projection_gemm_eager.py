"""One layer with its hoisted projection in cuBLASLt (the plan's pick) and in rnncc's GEMM
(gemm='rnncc'), timed eager (interleaved) and as CUDA-graph replays, one process: whether
the library's call costs an eager call more than its GPU time.

    python3 benchmarks/projection_gemm_eager.py [-o DIR]

Writes DIR/projection-gemm-eager-<gpu>.jsonl. Needs a GPU, PyTorch and PyCUDA.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import rnncc
from rnncc.timing import time_graph, time_interleaved

# (cell, dtype, precision, H, B): rows whose projection moved to cuBLASLt at 4566bd3.
CASES = [("lstm", "float16", "tensor", 256, 8), ("lstm", "float32", "tensor", 256, 8),
         ("gru", "float32", "tensor", 256, 8), ("lstm", "bfloat16", "tensor", 256, 8),
         ("gru", "float16", "tensor", 512, 5)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", default="benchmarks/results")
    ap.add_argument("--build-only", action="store_true", help="plan and build on this machine (h100 preset)")
    args = ap.parse_args()
    target = "h100" if args.build_only else "device"
    rows = []
    for cell, dtype, precision, H, B in CASES:
        spec = {"name": "m", "dtype": dtype, "input_size": H,
                "layers": [{"name": "l0", "cell": cell, "hidden_size": H}]}
        models = {g: rnncc.compile(spec, target=target, batch=B, seq_len=256, precision=precision,
                                   **({"gemm": g} if g != "plan" else {})) for g in ("plan", "rnncc")}
        if args.build_only:
            from rnncc.build import compile_all
            compile_all([k for m in models.values() for k in m.kernels], models["plan"].target.arch)
            continue
        x = torch.randn(256, B, H, device="cuda", dtype=getattr(torch, dtype))
        eager = time_interleaved({g: (lambda m=m: m(x)) for g, m in models.items()}, warmup=3, repeats=30)
        row = {"case": f"{cell} {dtype} {precision} H={H} B={B}",
               "projection": {g: m.plan.layers[0].projection_tile.value.math for g, m in models.items()},
               "eager_ms": {g: round(t.median_ms, 4) for g, t in eager.items()},
               "graph_ms": {g: round(time_graph(lambda m=m: m(x), warmup=3, repeats=30).median_ms, 4)
                            for g, m in models.items()}}
        print(json.dumps(row), flush=True)
        rows.append(row)
    if not args.build_only:
        out = Path(args.output) / f"projection-gemm-eager-{torch.cuda.get_device_name().split()[1].lower()}.jsonl"
        out.write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
