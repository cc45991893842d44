"""Where an eager call's time goes when the host bounds it: for stacks of every schedule,
the host time to queue a call, the time of one call on a drained GPU (what `rnncc bench`
and time_interleaved measure), back-to-back calls and a CUDA-graph replay (the GPU time),
then cProfile's functions by own time and the call's host operations in order
(launch_timeline.host_operations). Writes DIR/host-split-<gpu>.txt. Needs a GPU,
PyTorch and PyCUDA.

    python3 benchmarks/host_split.py [-o DIR] [--build-only]
"""

from __future__ import annotations

import cProfile
import io
import pstats
from pathlib import Path

import torch
from host_overhead import per_call_us  # benchmarks/ is this script's directory
from launch_timeline import host_operations
from partition_profile import script_args
from pipeline_schedule import stack

import rnncc
from rnncc.timing import time_graph, time_interleaved

# (name, spec, S, B, schedule forced or None)
CASES = [("LSTM fp16 H=1024 B=64 S=128", stack(1, 1024, "float16"), 128, 64, None),
         ("LSTM fp16 H=1024 B=8 S=256", stack(1, 1024, "float16"), 256, 8, None),
         ("LSTM fp16 H=256 B=8 S=64", stack(1, 256, "float16"), 64, 8, None),
         ("2×GRU fp16 H=100 B=20 S=35", stack(2, 100, "float16", "gru"), 35, 20, None),
         ("2×LSTM bf16 H=768 B=3 S=100", stack(2, 768, "bfloat16"), 100, 3, None),
         ("2×LSTM bf16 H=768 B=3 S=100 sequential", stack(2, 768, "bfloat16"), 100, 3, "sequential"),
         ("8×LSTM fp16 H=512 B=8 S=256", stack(8, 512, "float16"), 256, 8, None)]
CALLS = 200


def main() -> None:
    args = script_args(__doc__)
    models = [(name, S, B, rnncc.compile(spec, target=args.target, seq_len=S, batch=B, schedule=schedule))
              for name, spec, S, B, schedule in CASES]
    from rnncc.build import compile_all
    kernels = {k.name: k for *_, m in models for k in m.kernels}
    compile_all(list(kernels.values()), models[0][3].target.arch)
    if args.build_only:
        return
    lines = []
    for name, S, B, m in models:
        x = torch.randn(S, B, m.model.input_size, device="cuda", dtype=getattr(torch, m.model.dtype))
        host, loop = per_call_us(lambda: m(x), CALLS)
        drained = time_interleaved({"m": lambda: m(x)}, warmup=3, repeats=30)["m"].median_ms
        graph = time_graph(lambda: m(x), warmup=3, repeats=30).median_ms
        header = (f"== {name}: {m.plan.schedule.value.label}; µs a call: host to queue {host:.1f}, "
                  f"one call drained {drained * 1e3:.1f}, back to back {loop:.1f}, graph {graph * 1e3:.1f}")
        lines.append(header)
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(CALLS):
            m(x)
        profile.disable()
        torch.cuda.synchronize()
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(22)
        lines.append(f"cProfile, {CALLS} calls, by own time:")
        lines.append(text.getvalue().split("\n", 6)[-1].rstrip())
        lines.append("host operations of one call (median start from the call's start, median duration):")
        lines.extend(f"  {start:8.1f} µs  +{took:6.1f}  {name}" for name, start, took in host_operations(lambda: m(x))[1])
        print(header, flush=True)
    out = Path(args.output) / f"host-split-{torch.cuda.get_device_name().split()[1].lower()}.txt"
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text())


if __name__ == "__main__":
    main()
