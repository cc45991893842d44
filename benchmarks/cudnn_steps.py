"""cuDNN's µs a step in CUDA graphs, for comparing with grid_tile_sweep.py's per-tile steps:
one layer's forward captured at S=256 and at S=129, the step the difference over 127 steps
(so the GEMM and the kernel's start drop out), for each case given. Needs a GPU.

    python3 benchmarks/cudnn_steps.py lstm,float16,1024,16 [CASE ...]   (cell,dtype,H,B)
"""
import sys

import torch

from rnncc.driver import device_context
from rnncc.timing import time_graph


def step_us(cell: str, dtype: str, H: int, B: int) -> tuple[float, float]:
    """(µs a step, ms of the S=256 call) of cuDNN's forward in a CUDA graph."""
    torch.manual_seed(0)
    module = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cell](H, H).to("cuda", getattr(torch, dtype))
    ms = {}
    with torch.no_grad():
        for S in (129, 256):
            x = torch.randn(S, B, H, device="cuda", dtype=getattr(torch, dtype))
            ms[S] = time_graph(lambda: module(x), 3, 20).median_ms
    return (ms[256] - ms[129]) * 1e3 / 127, ms[256]


if __name__ == "__main__":
    device_context(0).make_current()  # rnncc.timing's events are PyCUDA's, on torch's context
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    for case in sys.argv[1:]:
        cell, dtype, H, B = case.split(",")
        us, ms = step_us(cell, dtype, int(H), int(B))
        print(f"cuDNN {cell} {dtype} H={H} B={B}: {us:.2f} µs/step (S=256 less S=129, in graphs); "
              f"S=256 {ms:.3f} ms", flush=True)
