"""µs a step of the grid-persistent kernel on tensor cores for every tile the cost model
considers (persistence forced to grid, each candidate tile put into the plan in turn),
beside the model's prediction: the data for refitting the grid model (issue 18's cliffs,
e.g. LSTM fp16 H=650 B=20 at 17 µs a layer-step). Times are CUDA-graph replays of one
layer's forward at S=256 (the GPU time alone). Needs a Hopper GPU and PyTorch.

    python3 benchmarks/grid_tile_sweep.py > benchmarks/results/grid-tile-sweep-h100-<date>.txt
"""

from __future__ import annotations

import sys
from dataclasses import asdict, replace

import torch

import rnncc
from rnncc import codegen
from rnncc.build import compile_all
from rnncc.passes.cost import tensor_seconds, tensor_tiles
from rnncc.plan import Decision
from rnncc.runtime import CompiledModel
from rnncc.timing import time_graph

S = 256
# (cell, dtype, H, B): the sweep's cliffs and their neighbours, and bench rows in grid mode.
CASES = [("lstm", "float16", 650, 20), ("lstm", "float16", 640, 20), ("lstm", "float16", 650, 8),
         ("lstm", "float16", 1024, 64), ("lstm", "float16", 1024, 8), ("lstm", "float16", 512, 8),
         ("gru", "float16", 650, 20), ("lstm", "float32", 1024, 64)]


def variants(cell: str, dtype: str, H: int, B: int):
    """(tile, predicted seconds, compiled model) for every grid tile that fits."""
    spec = {"name": "grid_sweep", "dtype": dtype, "input_size": H,
            "layers": [{"name": "l0", "cell": cell, "hidden_size": H}]}
    base = rnncc.compile(spec, target="device", batch=B, seq_len=S, persistence="grid",
                         gemm="rnncc", precision="tensor")
    l, target = base.plan.layers[0], base.target
    itemsize = 2 if dtype != "float32" else 4
    out = []
    for t in tensor_tiles(H, l.gates, B, target, "grid"):
        if t.shared_bytes(H, l.gates, itemsize) > target.shared_memory_per_block_optin:
            continue
        value = {"mode": "grid", "math": "tensor", **asdict(t), "threads": t.threads,
                 "shared_bytes": t.shared_bytes(H, l.gates, itemsize),
                 "blocks": -(-H // t.units_per_block) * t.batch_blocks}
        predicted = tensor_seconds(B, H, l.gates, t, target, itemsize)
        plan = replace(base.plan, layers=(replace(l, persistence=Decision(value, "forced by the sweep", "user")),))
        out.append((t, predicted, CompiledModel(base.model, plan, target, codegen.render(plan), None),
                    t == _chosen(l)))
    return out


def _chosen(l):
    from rnncc.passes.cost import TensorTile
    v = l.persistence.value
    return TensorTile(v["units_per_block"], v["batch_per_block"], v["k_split"], v["m_tiles"],
                      v["cluster"], v["batch_blocks"])


def main() -> None:
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    cases = [(c, variants(*c)) for c in CASES]
    kernels = {k.name: k for _, vs in cases for _, _, m, _ in vs for k in m.kernels}
    print(f"nvcc: {len(kernels)} kernels", file=sys.stderr, flush=True)
    compile_all(list(kernels.values()), cases[0][1][0][2].target.arch)
    for (cell, dtype, H, B), vs in cases:
        x = torch.randn(S, B, H, device="cuda", dtype=getattr(torch, dtype))
        for t, predicted, m, chosen in vs:
            ms = time_graph(lambda: m(x), 2, 7).median_ms
            print(f"{cell} {dtype} H={H} B={B}: units={t.units_per_block} bpb={t.batch_per_block} "
                  f"ks={t.k_split} m_tiles={t.m_tiles} batch_blocks={t.batch_blocks} "
                  f"threads={t.threads}: measured {ms * 1e3 / S:.2f} µs/step, predicted "
                  f"{predicted * 1e6:.2f}{'  (the model picks this)' if chosen else ''}", flush=True)


if __name__ == "__main__":
    main()
