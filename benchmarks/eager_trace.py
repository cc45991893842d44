"""Where an eager call's time goes on the GPU, in `rnncc bench`'s own setting: rnncc's
compiled model and cuDNN (torch.nn) called in turn on 3 rotating inputs, each call after
an untimed one of its own with the GPU drained before it (timing.time_interleaved with
settle=1); beside it the same model with ``replay = False`` (its forward every call, no
recorded call replayed: call_program.py). A few of those calls run under torch.profiler (CUPTI): for each, the GPU's
kernels and copies with their start and length from the call's host start, so the time
before the first kernel (host time the GPU waits through), the gaps between kernels and
the kernels themselves are read off one list. Also the bench's median for each side and
a CUDA-graph replay's. Writes DIR/eager-trace-<gpu>.txt. Needs a GPU, PyTorch, PyCUDA.

    python3 benchmarks/eager_trace.py [-o DIR] [--case=cell,dtype,H,B,S ...]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

import rnncc
from rnncc.timing import time_graph, time_interleaved

CASES = ["lstm,float16,1024,64,128", "lstm,float16,512,8,256", "lstm,float16,1024,8,256",
         "lstm,float16,256,8,256"]
TRACED = 6


def _subjects(cell: str, dtype: str, H: int, B: int, S: int, layers: int = 1):
    torch.manual_seed(0)
    tdt = getattr(torch, dtype)
    module = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cell](H, H, num_layers=layers).to("cuda", tdt).eval()
    model, weights = rnncc.from_torch(module)
    compiled = rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=S)
    # The same model running its forward every call, not the recorded call's replay.
    forward = rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=S)
    forward.replay = False
    inputs = [torch.randn(S, B, H, device="cuda", dtype=tdt) for _ in range(3)]
    turn = iter(range(10**9))
    return {"rnncc": lambda: compiled(inputs[next(turn) % 3]),
            "rnncc forward": lambda: forward(inputs[next(turn) % 3]),
            "cudnn": lambda: module(inputs[next(turn) % 3])}, compiled, module, inputs


def host_us(fn, calls: int = 200) -> float:
    """Host µs to queue one call, back to back (the least of 3 rounds)."""
    best = float("inf")
    for _ in range(3):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return best


def _traced_calls(fn, name: str) -> list[list[tuple[str, float, float]]]:
    """TRACED calls of fn, each after an untimed one and a drained GPU, under the profiler:
    per call, its GPU activities as (name, start µs, length µs) from its first one's start
    (the GPU's clock: the host's and the GPU's are not aligned well enough to subtract)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(TRACED):
            fn()
            torch.cuda.synchronize()
            with record_function(f"{name} call {i}"):
                fn()
            torch.cuda.synchronize()
    cuda = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    # The record_function ranges, as the GPU saw them (its user annotations).
    calls = sorted((e for e in cuda if e.name.startswith(f"{name} call ")), key=lambda e: e.time_range.start)
    work = [e for e in cuda if " call " not in e.name]
    out = []
    for c in calls:
        a, b = c.time_range.start, c.time_range.end
        mine = sorted((e for e in work if a <= e.time_range.start <= b), key=lambda e: e.time_range.start)
        if mine:
            t0 = mine[0].time_range.start
            out.append([(e.name[:60], e.time_range.start - t0, e.time_range.end - e.time_range.start)
                        for e in mine])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out", type=Path, default=Path("."))
    parser.add_argument("--case", action="append", help="cell,dtype,H,B,S[,layers]")
    args = parser.parse_args()
    lines = []
    for case in args.case or CASES:
        first = len(lines)
        cell, dtype, H, B, S, *rest = case.split(",")
        H, B, S, layers = int(H), int(B), int(S), int(rest[0]) if rest else 1
        # float32 exact on both sides, as `rnncc bench`'s rows without tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        subjects, compiled, module, inputs = _subjects(cell, dtype, H, B, S, layers)
        with torch.no_grad():
            timed = time_interleaved(subjects, 3, 30, settle=1)
            alone = time_interleaved({"rnncc": subjects["rnncc"]}, 3, 30, settle=1)["rnncc"]
            graph = time_graph(lambda: compiled(inputs[0]), 3, 30).median_ms
            cudnn_graph = time_graph(lambda: module(inputs[0]), 3, 30).median_ms
            lines.append(f"== {cell} {dtype} H={H} B={B} S={S}{f' {layers} layers' if layers > 1 else ''} "
                         f"({compiled.plan.layers[0].persistence.value.mode}): "
                         f"eager ms rnncc {timed['rnncc'].median_ms:.4f} (alone {alone.median_ms:.4f}; "
                         f"the forward every call {timed['rnncc forward'].median_ms:.4f}), "
                         f"cudnn {timed['cudnn'].median_ms:.4f}; graph rnncc {graph:.4f}, cudnn {cudnn_graph:.4f}; "
                         f"host µs to queue a call: rnncc {host_us(subjects['rnncc']):.1f}, the forward "
                         f"{host_us(subjects['rnncc forward']):.1f}, cudnn {host_us(subjects['cudnn']):.1f}")
            for name in ("rnncc", "cudnn"):
                calls = _traced_calls(subjects[name], name)
                if not calls:
                    lines.append(f"-- {name}: no GPU activity traced")
                    continue
                spans = [max(s + d for _, s, d in c) for c in calls]
                busy = [sum(d for _, _, d in c) for c in calls]
                lines.append(f"-- {name}: GPU span, first activity to last, median {statistics.median(spans):.1f} µs, "
                             f"busy {statistics.median(busy):.1f} µs ({len(calls)} profiled calls). The median's:")
                pick = sorted(calls, key=lambda c: max(s + d for _, s, d in c))[len(calls) // 2]
                prev_end = None
                for n, s, d in pick:
                    gap = "" if prev_end is None else f"  (gap {s - prev_end:+.1f})"
                    lines.append(f"   {s:9.1f} µs + {d:8.1f}  {n}{gap}")
                    prev_end = s + d
        print("\n".join(lines[first:]), flush=True)
    gpu = torch.cuda.get_device_name().replace(" ", "-").split("-80GB")[0].lower()
    path = args.out / f"eager-trace-{gpu}.txt"
    path.write_text(f"# benchmarks/eager_trace.py, {torch.cuda.get_device_name()}\n" + "\n".join(lines) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
