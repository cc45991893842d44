"""An eager call's time before and after a change to the host path, in one process: the
package as it was at an earlier commit, importable as ``rnncc_before`` from a directory
(made by ``git archive <sha> rnncc templates``, rnncc/ renamed), beside this checkout's
rnncc, on the same kernels. Per case: one call on a drained GPU (what `rnncc bench` times
eager), the host time to queue a call, and a CUDA-graph replay (GPU time, which the host
path does not change). Rounds alternate the two, so the host's changing speed (±50%
between runs on the device machine) weighs on both alike. Writes
DIR/host-ab-<gpu>.jsonl. Needs a GPU, PyTorch and PyCUDA.

    python3 benchmarks/host_ab.py --before .before [-o DIR] [--build-only]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
from host_overhead import per_call_us  # benchmarks/ is this script's directory
from pipeline_schedule import stack

import rnncc
from rnncc.timing import time_graph, time_interleaved

# (name, spec, S, B, compile options)
CASES = [("LSTM fp16 H=256 B=8 S=256", stack(1, 256, "float16"), 256, 8, {}),
         ("LSTM fp16 H=1024 B=8 S=256", stack(1, 1024, "float16"), 256, 8, {}),
         ("LSTM fp16 H=650 B=5 S=17", stack(1, 650, "float16"), 17, 5, {}),
         ("2×LSTM fp32 H=128 B=4 S=32", stack(2, 128, "float32"), 32, 4, {}),
         ("2×GRU fp16 H=100 B=20 S=35", stack(2, 100, "float16", "gru"), 35, 20, {}),
         ("RNN fp32 H=33 B=5 S=64, a launch a step", stack(1, 33, "float32", "rnn_tanh"), 64, 5,
          {"persistence": "none"}),
         ("2×LSTM bf16 H=768 B=3 S=100", stack(2, 768, "bfloat16"), 100, 3, {}),
         ("8×LSTM fp16 H=512 B=8 S=256", stack(8, 512, "float16"), 256, 8, {}),
         ("GNMT fp16 B=8 S=128", "examples/gnmt_encoder_fp16.yaml", 128, 8, {})]
ROUNDS, CALLS = 7, 60


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="a directory holding the package rnncc_before")
    ap.add_argument("-o", "--output", default="benchmarks/results")
    ap.add_argument("--build-only", action="store_true", help="plan for the h100 preset and fill the cubin cache")
    args = ap.parse_args()
    sys.path.insert(0, args.before)
    import rnncc_before

    target = "h100" if args.build_only else "device"
    cases = [(name, S, B, {"before": rnncc_before.compile(spec, target=target, seq_len=S, batch=B, **kw),
                           "after": rnncc.compile(spec, target=target, seq_len=S, batch=B, **kw)})
             for name, spec, S, B, kw in CASES]
    if args.build_only:
        from rnncc.build import compile_all
        kernels = {k.name: k for *_, models in cases for k in models["after"].kernels}
        compile_all(list(kernels.values()), cases[0][3]["after"].target.arch)
        return
    rows = []
    for name, S, B, models in cases:
        m = models["after"]
        x = torch.randn(S, B, m.model.input_size, device="cuda", dtype=getattr(torch, m.model.dtype))
        calls = {k: (lambda m=m: m(x)) for k, m in models.items()}
        assert all(m.plan.schedule.value.label == models["before"].plan.schedule.value.label
                   for m in models.values()), f"{name}: the two plan differently"
        drained = time_interleaved(calls, warmup=3, repeats=40, settle=1)
        hosts: dict[str, list[float]] = {k: [] for k in calls}
        for r in range(ROUNDS):
            for k in (list(calls) if r % 2 else list(calls)[::-1]):
                hosts[k].append(per_call_us(calls[k], CALLS)[0])
        graph = {k: time_graph(fn, warmup=2, repeats=20).median_ms for k, fn in calls.items()}
        row = {"case": name, "S": S, "B": B, "schedule": m.plan.schedule.value.label,
               "drained_us": {k: round(v.median_ms * 1e3, 1) for k, v in drained.items()},
               "host_us": {k: round(statistics.median(v), 1) for k, v in hosts.items()},
               "graph_us": {k: round(v * 1e3, 1) for k, v in graph.items()}}
        print(json.dumps(row, ensure_ascii=False), flush=True)
        rows.append(row)
    out = Path(args.output) / f"host-ab-{torch.cuda.get_device_name().split()[1].lower()}.jsonl"
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


if __name__ == "__main__":
    main()
