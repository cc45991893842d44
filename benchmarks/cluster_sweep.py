"""µs a step of the cluster-persistent kernels on tensor cores (persistence forced to
cluster, projection in rnncc's kernel), one layer, S=256, for the cells and sizes where
one cluster holds W_hh. Needs a Hopper GPU and PyTorch. Run it at two commits to compare
kernels, e.g.

    git worktree add /tmp/before <commit>
    (cd /tmp/before && PYTHONPATH=$PWD python3 $OLDPWD/benchmarks/cluster_sweep.py)
    python3 benchmarks/cluster_sweep.py
"""

from __future__ import annotations

import torch

import rnncc
from rnncc.errors import PlanError

S = 256
CASES = [("lstm", "float16"), ("gru", "float16"), ("rnn_tanh", "float16"), ("lstm", "float32")]


def ms_a_forward(model, x, repeats: int = 20) -> float:
    for _ in range(3):
        model(x)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        model(x)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / repeats


def main() -> None:
    torch.manual_seed(0)
    for cell, dtype in CASES:
        for H in (128, 256, 512):
            for B in (8, 32):
                spec = {"name": "sweep", "dtype": dtype, "input_size": H,
                        "layers": [{"name": "l0", "cell": cell, "hidden_size": H}]}
                try:
                    model = rnncc.compile(spec, target="device", batch=B, seq_len=S,
                                          persistence="cluster", gemm="rnncc", precision="tensor")
                except PlanError as exc:
                    print(f"{cell} {dtype} H={H:4d} B={B:2d}: no cluster plan ({str(exc)[:60]}…)")
                    continue
                p = model.plan.layers[0].persistence.value
                ms = ms_a_forward(model, torch.randn(S, B, H, device="cuda", dtype=getattr(torch, dtype)))
                print(f"{cell} {dtype} H={H:4d} B={B:2d} cluster={p.tile.cluster} units={p.tile.units_per_block} "
                      f"ks={p.tile.k_split} threads={p.threads}: {ms:.3f} ms, {ms * 1e3 / S:.2f} us/step")


if __name__ == "__main__":
    main()
