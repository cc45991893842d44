"""One planned layer's forward, rnncc beside cuDNN (torch.nn.RNN/LSTM/GRU) in the same
process: CUDA-graph replays and eager calls, a JSON line a shape. For cells and shapes the
bench's rows do not cover (the tanh RNN), and for A/B of a variant between two trees: run
once per tree (its directory first on PYTHONPATH), alternately, on one machine.

    PYTHONPATH=.ab-NAME/old:$PYTHONPATH python3 benchmarks/layer_times.py old SHAPE [SHAPE ...]
    RNNCC_CACHE_DIR=.cubins python3 benchmarks/layer_times.py --build-only SHAPE [...]
        (no GPU: the shapes' kernels into the cubin cache, planned for RNNCC_BUILD_TARGET,
        default h200)

SHAPE is cell,dtype,H,B[,S] (S default 256), e.g. rnn_tanh,float16,1300,1.
"""

from __future__ import annotations

import json
import os
import sys

import rnncc
from persistence_census import layer_spec, precision  # benchmarks/ is this script's directory


def layer(cell: str, dtype: str, hidden: int, batch: int, seq_len: int, target: str):
    """The one-layer model persistence_census plans (float32 exact, half on tensor cores)."""
    return rnncc.compile(layer_spec(dtype, cell, hidden), target=target, batch=batch, seq_len=seq_len,
                         **precision(dtype))


def shapes(args: list[str]) -> list[tuple[str, str, int, int, int]]:
    out = []
    for a in args:
        cell, dtype, *numbers = a.split(",")
        if len(numbers) not in (2, 3):
            raise SystemExit(f"layer_times: SHAPE {a!r}: expected cell,dtype,H,B[,S]")
        H, B, S = (*map(int, numbers), 256)[:3]
        out.append((cell, dtype, H, B, S))
    return out


def measure(tag: str, cell: str, dtype: str, H: int, B: int, S: int) -> dict:
    import torch
    from rnncc.timing import time_graph, time_interleaved

    torch.manual_seed(0)
    model = layer(cell, dtype, H, B, S, "device")
    reference = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU,
                 "rnn_tanh": lambda *a: torch.nn.RNN(*a, nonlinearity="tanh")}[cell](H, H)
    reference = reference.to("cuda", getattr(torch, dtype))
    x = torch.randn(S, B, H, device="cuda", dtype=getattr(torch, dtype))
    ours, theirs = (lambda: model(x)), (lambda: reference(x))
    ours(), theirs()
    eager = time_interleaved({"rnncc": ours, "cudnn": theirs}, 3, 10)
    # Timing only: the two hold different weights (the outputs are the GPU tests' business).
    row = {"tree": tag, "cell": cell, "dtype": dtype, "H": H, "B": B, "S": S,
           "persistence": str(model.plan.layers[0].persistence.value),
           "rnncc_eager_ms": eager["rnncc"].median_ms, "cudnn_eager_ms": eager["cudnn"].median_ms,
           "rnncc_graph_ms": time_graph(ours, 3, 10).median_ms, "cudnn_graph_ms": time_graph(theirs, 3, 10).median_ms}
    return row


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    if sys.argv[1] == "--build-only":
        from staged_sweep import build_kernels
        target = os.environ.get("RNNCC_BUILD_TARGET", "h200")
        build_kernels(layer(*s, target) for s in shapes(sys.argv[2:]))
    else:
        for s in shapes(sys.argv[2:]):
            print(json.dumps(measure(sys.argv[1], *s)), flush=True)
