"""Timing on the GPU: warm-up, CUDA events around each repeat, median and spread."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Timing:
    median_ms: float
    min_ms: float
    max_ms: float
    repeats: int

    def per_step_us(self, steps: int) -> float:
        return self.median_ms * 1e3 / steps


def time_gpu(fn: Callable[[], object], warmup: int = 3, repeats: int = 20) -> Timing:
    """Times ``fn`` (which launches work on the default stream) with PyCUDA events, the
    GPU drained before each repeat. Events on the legacy default stream also order
    PyTorch's default-stream work."""
    return time_interleaved({"fn": fn}, warmup, repeats)["fn"]


def time_interleaved(fns: dict[str, Callable[[], object]], warmup: int = 3,
                     repeats: int = 20, settle: int = 0) -> dict[str, Timing]:
    """Times several ``fn`` s against each other: each repeat runs every one once (the
    order rotating), each between its own events with the GPU drained before it. Clocks,
    power state and other processes' load then weigh on all of them alike, which timing
    them one after another (``time_gpu`` each) does not: back to back, two runs of the
    same call differ by up to ±15% on the H100. With ``settle`` each timed call follows
    that many untimed calls of the same fn (GPU drained after them): the time of a call
    in a loop of its own, whose host code and data are warm in the CPU's caches, rather
    than of a call right after another library's."""
    import pycuda.driver as cuda

    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    cuda.Context.synchronize()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            for _ in range(settle):
                fns[name]()
            if settle:
                cuda.Context.synchronize()
            start, end = cuda.Event(), cuda.Event()
            start.record()
            fns[name]()
            end.record()
            end.synchronize()
            times[name].append(end.time_since(start))
    return {name: Timing(statistics.median(t), min(t), max(t), repeats) for name, t in times.items()}


def capture(fn: Callable[[], object], warm: int = 2) -> tuple[object, object]:
    """``fn`` captured in a CUDA graph (``torch.cuda.graph``), after ``warm`` calls on a
    side stream (allocations, compiles, workspaces), as capture requires. Returns the graph
    and what the captured call returned: tensors each replay writes again, from fn's inputs
    as they are at the replay."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warm):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def time_graph(fn: Callable[[], object], warmup: int = 3, repeats: int = 20) -> Timing:
    """Times ``fn`` captured in a CUDA graph (``capture``): a replay is the GPU time of fn's
    work without its host time, which is what a user who captures the call
    (``torch.cuda.graph``, ``torch.compile(mode="reduce-overhead")``) gets; replays reuse
    fn's inputs."""
    graph, _ = capture(fn)
    return time_gpu(graph.replay, warmup, repeats)


def time_graphs_interleaved(fns: dict[str, Callable[[], object]], rounds: int = 3, warmup: int = 2,
                            repeats: int = 7) -> dict[str, float]:
    """Median ms of each fn as a CUDA-graph replay (time_graph), over ``rounds`` rounds that
    each time every fn once: clocks and power state move them alike, so kernel variants
    compare within one process."""
    times = [{name: time_graph(fn, warmup, repeats).median_ms for name, fn in fns.items()}
             for _ in range(rounds)]
    return {name: statistics.median(t[name] for t in times) for name in fns}
