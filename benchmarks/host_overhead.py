"""Host time of an eager forward of the rnncc.nn modules, where the GPU work is small
enough that launch overhead decides the time: per call, the host time to queue it, the
time of back-to-back calls (max of host and GPU), and a CUDA-graph replay (the GPU time
alone), beside torch.nn (cuDNN) in the same process. Needs a GPU and PyTorch.

    RNNCC_COMMIT=<sha> python3 benchmarks/host_overhead.py > benchmarks/results/host-overhead-<gpu>-<date>.txt
"""

from __future__ import annotations

import time

import torch

import rnncc.nn as rnn
from rnncc.cli import _environment
from rnncc.timing import capture

# (cell, dtype, num_layers, H, B, S): the launch-bound case, and a 2-layer fp32 one.
CASES = [("lstm", torch.float16, 1, 256, 8, 64), ("gru", torch.float16, 1, 256, 8, 64),
         ("lstm", torch.float32, 2, 128, 4, 32)]
CALLS = 200


def per_call_us(fn, calls: int = CALLS) -> tuple[float, float]:
    """(host µs to queue one call, µs a call back to back, the GPU drained at the end)."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    queued = time.perf_counter()
    torch.cuda.synchronize()
    done = time.perf_counter()
    return (queued - start) / calls * 1e6, (done - start) / calls * 1e6


def replay_us(fn) -> float:
    """µs a replay of fn captured in a CUDA graph (CUDA events)."""
    graph, _ = capture(fn, warm=1)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    start.record()
    for _ in range(CALLS):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / CALLS * 1e3


def main() -> None:
    env = _environment(torch)
    print(f"host overhead of an eager forward, {env['date']}, commit {env['commit']}")
    print(f"device: {env['device']}, driver {env['driver']}, torch {env['torch']}, cuDNN {env['cudnn']}")
    print(f"µs a forward, {CALLS} calls; host = time to queue a call; back to back = calls in a "
          "loop, GPU drained at the end; graph = a CUDA-graph replay (GPU time)")
    torch.manual_seed(0)
    for cell, dtype, layers, H, B, S in CASES:
        theirs = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cell](H, H, layers).cuda().to(dtype).eval()
        ours = rnn.twin_of(theirs)[0]
        x = torch.randn(S, B, H, device="cuda", dtype=dtype)
        label = f"{cell} {str(dtype).removeprefix('torch.')} L={layers} H={H} B={B} S={S}"
        with torch.inference_mode():
            for who, module in (("rnncc", ours), ("torch.nn", theirs)):
                host, loop = per_call_us(lambda: module(x))
                try:
                    graph = f"{replay_us(lambda: module(x)):7.1f}"
                except RuntimeError as exc:  # a library that cannot be captured
                    graph = f"not capturable ({str(exc).splitlines()[0][:60]})"
                print(f"{label:34s} {who:8s} host {host:7.1f}  back to back {loop:7.1f}  graph {graph}")


if __name__ == "__main__":
    main()
