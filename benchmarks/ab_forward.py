"""A/B of single-layer forwards between two checkouts of rnncc: run once per checkout (its
directory first on PYTHONPATH), alternately, on one machine. Each run prints a JSON line
per case: the planned form, the forward's ms by CUDA-graph replays and its persistent
kernel's GPU µs a step (torch.profiler). Lighter than ab_rows.py (no cuDNN, no twin, no
graph plan), for kernel changes that move a step by a few percent.

    PYTHONPATH=old:$PYTHONPATH python3 benchmarks/ab_forward.py old [CASES]
    PYTHONPATH=.:$PYTHONPATH python3 benchmarks/ab_forward.py new [CASES]
    RNNCC_CACHE_DIR=.cubins python3 benchmarks/ab_forward.py --precompile [CASES]  # no GPU

CASES names a set (default "gru_lstm_fp32": float32 GRU and LSTM at small and large
batches, the forms of the FMA grid kernel that read h_old).
"""

from __future__ import annotations

import json
import sys

import rnncc

# (cell, dtype, H, B, S, lengths): lengths=True gives every row a different length.
CASES = {"gru_lstm_fp32": [("gru", "float32", 1024, 8, 256, False), ("lstm", "float32", 1024, 8, 256, False),
                           ("gru", "float32", 512, 4, 256, False), ("lstm", "float32", 512, 8, 256, False),
                           ("gru", "float32", 650, 16, 128, False), ("lstm", "float32", 1024, 1, 256, False),
                           ("gru", "float32", 1024, 64, 256, False), ("gru", "float32", 768, 48, 128, False),
                           ("lstm", "float32", 1024, 8, 256, True), ("lstm", "float32", 1024, 64, 256, True)]}


def model(cell: str, dtype: str, H: int, B: int, S: int, target: str):
    spec = {"name": f"ab_{cell}_{H}", "dtype": dtype, "input_size": H,
            "layers": [{"name": "l0", "cell": cell, "hidden_size": H}]}
    return rnncc.compile(spec, target=target, batch=B, seq_len=S, precision="exact")


def lengths_of(B: int, S: int) -> list[int]:
    return [max(1, S - (S * i) // (2 * B)) for i in range(B)]


def precompile(cases) -> None:
    from rnncc.build import compile_all
    kernels = {}
    for cell, dtype, H, B, S, lengths in cases:
        m = model(cell, dtype, H, B, S, "h100")
        kernels |= {k.name: k for k in m.variant(S, B, lengths=lengths).kernels}
    print(f"nvcc: {len(kernels)} kernels", file=sys.stderr, flush=True)
    compile_all(list(kernels.values()), "sm_90a")


def measure(label: str, cases) -> None:
    import torch
    from rnncc.timing import time_graph
    sys.path.insert(0, "benchmarks")
    from staged_sweep import persistent_kernel_us
    torch.backends.cuda.matmul.allow_tf32 = False
    for cell, dtype, H, B, S, lengths in cases:
        torch.manual_seed(0)
        m = model(cell, dtype, H, B, S, "device")
        x = torch.randn(S, B, H, device="cuda", dtype=getattr(torch, dtype))
        kw = {"lengths": torch.tensor(lengths_of(B, S))} if lengths else {}
        call = lambda: m(x, **kw)  # noqa: E731
        ms = time_graph(call, 3, 15).median_ms
        for _ in range(2):
            call()
        kernel = min(persistent_kernel_us(call) or 0.0 for _ in range(3)) or None
        print(json.dumps({"version": label, "rnncc_from": rnncc.__file__, "case": [cell, dtype, H, B, S, lengths],
                          "persistence": str(m.plan.layers[0].persistence.value)[:120],
                          "graph_ms": round(ms, 4), "kernel_us_step": kernel and round(kernel / S, 3)}), flush=True)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--precompile"]
    if "--precompile" in sys.argv:
        precompile(CASES[args[0] if args else "gru_lstm_fp32"])
    else:
        measure(args[0], CASES[args[1] if len(args) > 1 else "gru_lstm_fp32"])
