"""Input projections of few rows (a pipelined chunk's, a short sequence's) alone: rnncc's
tensor-core GEMM and cuBLASLt beside what geometry predicts for each.

    python3 benchmarks/projection_small_m.py [-o DIR] [--build-only]

One LSTM layer (H = I = 1024, fp16 and fp32 exact, B = 8) is compiled at S steps for each S
(M = S·B rows of the projection, N = 4H = 4096, K = 1024) with gemm="rnncc" and with
gemm="cublas". One eager call of each is traced by torch.profiler, after warm calls.
Rows give the projection kernels' GPU time beside the plan's prediction for that GEMM. The
partition traces (partition_profile.py) found rnncc's 256-row projection at 26 µs where
geometry says 17.4. Writes DIR/projection-small-m-<gpu>.jsonl. Needs a GPU, PyTorch and
PyCUDA.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

import rnncc

from partition_profile import kind, script_args, trace  # run as a script: benchmarks/ is on sys.path
from pipeline_schedule import stack

STEPS = (8, 16, 32, 64, 128, 256)
PRECISIONS = (("float16", "tensor"), ("float32", "exact"))


def main() -> None:
    args = script_args(__doc__)
    models = [(dtype, precision, S, gemm,
               rnncc.compile(stack(1, 1024, dtype), target=args.target, seq_len=S, batch=8, precision=precision, gemm=gemm))
              for dtype, precision in PRECISIONS for S in STEPS for gemm in ("rnncc", "cublas")]
    from rnncc.build import compile_all
    kernels = {k.name: k for *_, m in models for k in m.kernels}
    compile_all(list(kernels.values()), models[0][-1].target.arch)
    if args.build_only:
        return
    out = Path(args.output) / f"projection-small-m-{torch.cuda.get_device_name().split()[1].lower()}.jsonl"
    with open(out, "w") as f:
        for dtype, precision, S, gemm, m in models:
            x = torch.randn(S, 8, 1024, device="cuda", dtype=getattr(torch, dtype))
            runs = [trace(m, x) for _ in range(3)]
            measured = min(sum(e["dur"] for e in events if kind(e["name"]) == "projection") for events in runs)
            d = m.plan.layers[0].projection_tile
            row = {"dtype": dtype, "precision": precision, "rows": S * 8, "n": 4096, "k": 1024, "gemm": gemm,
                   "plan": str(d.value), "predicted_us": {k: round(v * 1e6, 1) for k, v in (d.alternatives or {}).items()},
                   "measured_us": round(measured, 1)}
            f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
