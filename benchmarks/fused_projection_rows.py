"""The projection inside the recurrent launch (tiles.FusedProjection) against the same layer
with its projection launched before (cuBLASLt, as the plan was before fusion: gemm="cublas"
turns fusion off) and cuDNN, in one process: eager calls interleaved (timing.time_interleaved,
a settle call before each) and CUDA-graph replays (timing.time_graphs_interleaved), with
each plan's outputs checked against the other's.

    python3 benchmarks/fused_projection_rows.py [--quick] > benchmarks/results/fused-projection-rows-<gpu>-<date>.txt
"""

from __future__ import annotations

import sys

import torch

import rnncc
from rnncc.dtypes import max_relative_error, tolerance
from rnncc.timing import time_graphs_interleaved, time_interleaved

# (cell, dtype, H, B, S): issue 14's row first; short and odd calls.
ROWS = [("lstm", "float16", 512, 8, 256), ("lstm", "float16", 256, 8, 256), ("gru", "float16", 512, 8, 256),
        ("lstm", "bfloat16", 512, 8, 256), ("lstm", "float16", 512, 1, 256), ("lstm", "float16", 512, 16, 100),
        ("lstm", "float16", 512, 5, 35), ("lstm", "float16", 512, 8, 16), ("lstm", "float16", 256, 3, 7),
        ("gru", "float16", 512, 2, 10), ("rnn_tanh", "float16", 512, 8, 64)]


def with_fused_projection(m):
    """m with layer 0's projection in its recurrent launch, as planned or forced; None where
    the layer's kernel cannot carry producers."""
    from dataclasses import replace

    from rnncc.passes.fusion import fused_tile, why_not_fused
    from rnncc.plan import Decision

    l = m.plan.layers[0]
    if l.projection_fused:
        return m
    if l.persistence.value.mode != "cluster":
        return None
    tile = fused_tile(l)
    if why_not_fused(l, m.plan, m.target, tile) is not None:
        return None
    return m.with_plan(m.plan.map_layers(
        lambda l: replace(l, projection_tile=Decision(tile, "forced by the benchmark", "user"))))


def row(cell: str, dtype: str, H: int, B: int, S: int, repeats: int) -> str:
    torch.manual_seed(0)
    tdt = getattr(torch, dtype)
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn_tanh": torch.nn.RNN}[cell]
    module = cls(H, H).to("cuda", tdt).eval()
    model, weights = rnncc.from_torch(module)
    planned = rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=S)
    fused = with_fused_projection(planned)
    if fused is None:
        return f"{cell} {dtype} H={H} B={B} S={S}: cannot be fused ({planned.plan.layers[0].persistence.reason})"
    before = rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=S, gemm="cublas")
    l = fused.plan.layers[0]
    x = torch.randn(S, B, H, device="cuda", dtype=tdt)
    with torch.no_grad():
        a, b = fused(x)[0], before(x)[0]
        error = max_relative_error(a.float().cpu().numpy(), b.float().cpu().numpy())
        fns = {"fused": lambda: fused(x), "before": lambda: before(x), "cudnn": lambda: module(x)}
        eager = time_interleaved(fns, 5, repeats, settle=1)
        graph = time_graphs_interleaved(fns)
    e = {k: v.median_ms * 1e3 for k, v in eager.items()}
    g = {k: v * 1e3 for k, v in graph.items()}
    ok = "agree" if error <= 2 * tolerance(dtype, l.precision.value) else "DISAGREE"
    return (f"{cell} {dtype} H={H} B={B} S={S} (planned {'fused' if planned.plan.layers[0].projection_fused else 'before'}; "
            f"{l.projection_tile.value.producers} producers, chunks of "
            f"{l.projection_tile.value.chunk}; outputs {ok}, {error:.1e}): eager µs fused {e['fused']:.1f}, "
            f"before {e['before']:.1f}, cuDNN {e['cudnn']:.1f} ({e['cudnn'] / e['fused']:.2f}× against "
            f"{e['cudnn'] / e['before']:.2f}×); graphs µs fused {g['fused']:.1f}, before {g['before']:.1f}, "
            f"cuDNN {g['cudnn']:.1f} ({g['cudnn'] / g['fused']:.2f}× against {g['cudnn'] / g['before']:.2f}×)")


def main() -> None:
    quick = "--quick" in sys.argv
    print(f"fused_projection_rows: rnncc with the projection in the recurrent launch ('fused'), with it "
          f"before the launch in cuBLASLt ('before', gemm='cublas') and cuDNN, one process, "
          f"{torch.cuda.get_device_name()}", flush=True)
    for r in ROWS[:3] if quick else ROWS:
        print(row(*r, repeats=15 if quick else 30), flush=True)


if __name__ == "__main__":
    main()
