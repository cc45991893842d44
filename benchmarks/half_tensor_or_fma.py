"""fp16/bf16 layers at small H: the planner weighs the tensor-core cluster kernel against the
FMA cluster kernel (whose lanes form computes the same exact fp32 products of half
operands). This times, in one process, each case as planned (precision "tensor", the
default) beside the same layer with precision "exact" (the FMA kernels only), as CUDA-graph
replays in interleaved rounds, to check the pick. Needs a GPU.

    python3 benchmarks/half_tensor_or_fma.py > results/half-tensor-or-fma-<gpu>-<date>.txt
"""

from __future__ import annotations

import torch

import rnncc
from rnncc.timing import time_graphs_interleaved

S = 256
CASES = [("gru", "float16", 33, 1), ("gru", "float16", 64, 8), ("gru", "float16", 100, 1),
         ("gru", "bfloat16", 100, 1), ("gru", "float16", 100, 20), ("lstm", "float16", 64, 5),
         ("lstm", "float16", 128, 8), ("rnn_tanh", "float16", 64, 1), ("gru", "float16", 256, 5)]


def describe(model) -> str:
    v = model.plan.layers[0].persistence.value
    tile = getattr(v, "tile", None)
    form = "lanes" if getattr(v, "lanes", False) else \
        "registers" if getattr(tile, "weights_in_registers", False) else "shared memory"
    return f"{v.mode} {v.math} {form}, cluster {getattr(tile, 'cluster', 0)}"


def main() -> None:
    torch.manual_seed(0)
    for cell, dtype, H, B in CASES:
        spec = {"name": "half_forms", "dtype": dtype, "input_size": H,
                "layers": [{"name": "l0", "cell": cell, "hidden_size": H}]}
        models = {precision: rnncc.compile(spec, target="device", batch=B, seq_len=S, precision=precision)
                  for precision in ("tensor", "exact")}
        x = torch.randn(S, B, H, device="cuda", dtype=getattr(torch, dtype))
        with torch.no_grad():
            ms = time_graphs_interleaved({p: lambda m=m: m(x) for p, m in models.items()})
        line = "; ".join(f"{p}: {describe(m)} {ms[p] * 1e3 / S:.2f} µs a step" for p, m in models.items())
        print(f"{cell} {dtype} H={H} B={B}: {line}; planned/exact {ms['tensor'] / ms['exact']:.2f}", flush=True)


if __name__ == "__main__":
    main()
