"""Where the host time of one eager call goes, call by call of the driver: each launch,
copy and allocation of a compiled model's forward timed on the host (time.perf_counter
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
from rnncc import driver
from rnncc.timing import time_graph, time_interleaved

ROWS = [("lstm", torch.float16, 1024, 8), ("lstm", torch.float16, 256, 8),
        ("gru", torch.float32, 256, 1), ("lstm", torch.float32, 1024, 64)]
S, CALLS = 256, 30


def main() -> None:
    marks: list[tuple[str, float, float]] = []
    original_launch, original_copy = driver.Kernel.launch, driver.copy_rows
    original_empty = torch.empty

    def launch(self, grid, block, values, shared, stream, cooperative=False):
        t = time.perf_counter()
        original_launch(self, grid, block, values, shared, stream, cooperative)
        marks.append((f"launch {self.name.split('_')[0]}_{self.name.split('_')[1]}"
                      f"{' coop' if cooperative else ''}", t, time.perf_counter()))

    def copy_rows(*args):
        t = time.perf_counter()
        original_copy(*args)
        marks.append(("copy_rows", t, time.perf_counter()))

    def empty(*args, **kwargs):
        t = time.perf_counter()
        out = original_empty(*args, **kwargs)
        marks.append(("torch.empty", t, time.perf_counter()))
        return out

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
            driver.Kernel.launch, driver.copy_rows, torch.empty = launch, copy_rows, empty
            spans: dict[str, list[float]] = defaultdict(list)
            starts: dict[str, list[float]] = defaultdict(list)
            totals = []
            try:
                for _ in range(CALLS):
                    torch.cuda.synchronize()
                    marks.clear()
                    t0 = time.perf_counter()
                    compiled(x)
                    totals.append((time.perf_counter() - t0) * 1e6)
                    seen: dict[str, int] = defaultdict(int)
                    for name, a, b in marks:
                        key = f"{name} #{seen[name]}"
                        seen[name] += 1
                        spans[key].append((b - a) * 1e6)
                        starts[key].append((a - t0) * 1e6)
            finally:
                driver.Kernel.launch, driver.copy_rows, torch.empty = original_launch, original_copy, original_empty
            torch.cuda.synchronize()
        plan = compiled.plan.layers[0].persistence.value
        print(f"{cell} {str(dtype).removeprefix('torch.')} H={H} B={B} S={S} ({plan.mode}): event "
              f"{eager:.3f} ms, graph {graph:.3f} ms, eager − graph {(eager - graph) * 1e3:.0f} µs; "
              f"host of the call {statistics.median(totals):.1f} µs")
        ordered = sorted(spans, key=lambda k: statistics.median(starts[k]))
        # A launch a step (mode none) would print hundreds of lines: the first 8, the last 2.
        shown = ordered if len(ordered) <= 10 else ordered[:8] + ordered[-2:]
        for key in shown:
            if key == ordered[-2] and len(ordered) > 10:
                print(f"  … {len(ordered) - 10} more")
            print(f"  {key:<32} starts at {statistics.median(starts[key]):7.1f} µs, "
                  f"takes {statistics.median(spans[key]):6.1f} µs")


if __name__ == "__main__":
    main()
