"""Where the host time of one eager call goes, call by call of the driver: each launch,
library call, copy, allocation and event of a compiled model's forward timed on the host (time.perf_counter
around the call), with the GPU idle before the call, beside the call's CUDA-event time
and a CUDA-graph replay's (the GPU's part alone). Medians of 30 calls. Needs a GPU.

    python3 benchmarks/launch_timeline.py
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict

import torch

import rnncc
from rnncc import call_program, driver, runtime
from rnncc.timing import time_graph, time_interleaved

ROWS = [("lstm", torch.float16, 1024, 8), ("lstm", torch.float16, 256, 8),
        ("gru", torch.float32, 256, 1), ("lstm", torch.float32, 1024, 64)]
S, CALLS = 256, 30


def _launch_label(args, kwargs) -> str:
    kernel, cooperative = args[0], args[6] if len(args) > 6 else kwargs.get("cooperative", False)
    return f"launch {'_'.join(kernel.name.split('_')[:2])}{' coop' if cooperative else ''}"


# (owner, attribute, label or label(args, kwargs)): the host operations of a call timed one
# by one; "variant" marks where the call, past its checks, looks up its plan.
TIMED = ((driver.Kernel, "launch", _launch_label), (call_program.Queue, "gemm", "cuBLASLt run"),
         (torch, "empty", "torch.empty"), (driver, "copy_rows", "copy_rows"),
         (driver, "memset_async", "memset"), (driver, "event_record", "event_record"),
         (driver, "stream_wait_event", "stream_wait_event"), (runtime.CompiledModel, "variant", "variant"))


def host_operations(call, calls: int = CALLS) -> tuple[float, list[tuple[str, float, float]]]:
    """(the median host µs of ``call``, its TIMED operations in order as (name #i, median
    µs from the call's start, median µs it took)), over ``calls`` calls, the GPU drained
    before each."""
    marks: list[tuple[str, float, float]] = []

    def timed(fn, label):
        def wrapper(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                marks.append((label(args, kwargs) if callable(label) else label, t, time.perf_counter()))
        return wrapper
    originals = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in TIMED]
    for (owner, attr, fn), (*_, label) in zip(originals, TIMED):
        setattr(owner, attr, timed(fn, label))
    spans: dict[str, list[float]] = defaultdict(list)
    starts: dict[str, list[float]] = defaultdict(list)
    totals = []
    try:
        for _ in range(calls):
            torch.cuda.synchronize()
            marks.clear()
            t0 = time.perf_counter()
            call()
            totals.append((time.perf_counter() - t0) * 1e6)
            seen: dict[str, int] = defaultdict(int)
            for name, a, b in marks:
                key = f"{name} #{seen[name]}"
                seen[name] += 1
                spans[key].append((b - a) * 1e6)
                starts[key].append((a - t0) * 1e6)
    finally:
        for owner, attr, fn in originals:
            setattr(owner, attr, fn)
        torch.cuda.synchronize()
    ordered = sorted(spans, key=lambda k: statistics.median(starts[k]))
    return statistics.median(totals), [(k, statistics.median(starts[k]), statistics.median(spans[k]))
                                       for k in ordered]


def main() -> None:
    torch.manual_seed(0)
    for cell, dtype, H, B in ROWS:
        module = getattr(torch.nn, cell.upper())(H, H).to("cuda", dtype).eval()
        model, weights = rnncc.from_torch(module)
        with torch.no_grad():
            compiled = rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=S)
            x = torch.randn(S, B, H, device="cuda", dtype=dtype)
            compiled(x)
            eager = time_interleaved({"c": lambda: compiled(x)}, 5, CALLS, settle=1)["c"].median_ms
            graph = time_graph(lambda: compiled(x), 5, CALLS).median_ms
            host, ordered = host_operations(lambda: compiled(x))
        plan = compiled.plan.layers[0].persistence.value
        print(f"{cell} {str(dtype).removeprefix('torch.')} H={H} B={B} S={S} ({plan.mode}): event "
              f"{eager:.3f} ms, graph {graph:.3f} ms, eager − graph {(eager - graph) * 1e3:.0f} µs; "
              f"host of the call {host:.1f} µs")
        # A launch a step (mode none) would print hundreds of lines: the first 8, the last 2.
        shown = ordered if len(ordered) <= 10 else ordered[:8] + ordered[-2:]
        for key, start, took in shown:
            if len(ordered) > 10 and key == ordered[-2][0]:
                print(f"  … {len(ordered) - 10} more")
            print(f"  {key:<32} starts at {start:7.1f} µs, takes {took:6.1f} µs")


if __name__ == "__main__":
    main()
