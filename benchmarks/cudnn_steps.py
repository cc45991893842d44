"""cuDNN's µs a step in CUDA graphs, for comparing with grid_tile_sweep.py's per-tile steps:
one layer's forward captured at S=256 and at S=129, the step the difference over 127 steps
(so the GEMM and the kernel's start drop out), for each case given. Needs a GPU.

    python3 benchmarks/cudnn_steps.py lstm,float16,1024,16 [CASE ...]   (cell,dtype,H,B)

With --once, one forward a case at S=64 and no timing, for Nsight Compute to read the launch
of cuDNN's persistent kernel (grid, block, registers, shared memory):

    ncu --kernel-name regex:lstm --section LaunchStats --section Occupancy \\
        python3 benchmarks/cudnn_steps.py --once lstm,float16,1024,16 lstm,float16,1024,8
"""
import sys

import torch

from rnncc.driver import device_context
from rnncc.timing import time_graph


def forward_of(case: str):
    """(cuDNN's module, a function of S that makes an input) for "cell,dtype,H,B"."""
    cell, dtype, H, B = case.split(",")
    tdt = getattr(torch, dtype)
    torch.manual_seed(0)
    module = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cell](int(H), int(H)).to("cuda", tdt)
    return module, lambda S: torch.randn(S, int(B), int(H), device="cuda", dtype=tdt)


def step_us(case: str) -> tuple[float, float]:
    """(µs a step, ms of the S=256 call) of cuDNN's forward in a CUDA graph."""
    module, input_of = forward_of(case)
    ms = {}
    with torch.no_grad():
        for S in (129, 256):
            x = input_of(S)
            ms[S] = time_graph(lambda: module(x), 3, 20).median_ms
    return (ms[256] - ms[129]) * 1e3 / 127, ms[256]


if __name__ == "__main__":
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    once = "--once" in sys.argv
    cases = [a for a in sys.argv[1:] if a != "--once"]
    if once:
        for case in cases:
            module, input_of = forward_of(case)
            with torch.no_grad():
                module(input_of(64))
            torch.cuda.synchronize()
            print(f"ran {case}", flush=True)
        sys.exit(0)
    device_context(0).make_current()  # rnncc.timing's events are PyCUDA's, on torch's context
    for case in cases:
        cell, dtype, H, B = case.split(",")
        us, ms = step_us(case)
        print(f"cuDNN {cell} {dtype} H={H} B={B}: {us:.2f} µs/step (S=256 less S=129, in graphs); "
              f"S=256 {ms:.3f} ms", flush=True)
