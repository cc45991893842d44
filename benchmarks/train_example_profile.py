"""Where a training step of examples/train_char_lm.py spends its host time on CUDA: the
example's model (2 × LSTM H=128, dropout 0.1, S=32, B=16) trained as the example trains it,
torch.nn's and rnncc.optimize()'s, each step timed (median of the steps after the first 14,
the GPU drained by the step's loss.item() as in the example), then cProfile over 70 (or
--profiled) of rnncc's steps: functions by own time and by cumulative time. Needs a GPU.
With --profiled 0 and a tree of rnncc first on PYTHONPATH, one side of an A/B of rnncc's
host path (the ratio to torch.nn in the same process is what compares across processes).

    python3 benchmarks/train_example_profile.py [--dropout P] [--steps N] [--profiled N]
"""
from __future__ import annotations

import argparse
import copy
import cProfile
import importlib.util
import io
import pstats
import statistics
import time
from pathlib import Path

import torch

import rnncc

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "train_char_lm.py"


def example():
    spec = importlib.util.spec_from_file_location("train_char_lm", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--steps", type=int, default=200, help="steps timed each way")
    p.add_argument("--profiled", type=int, default=70, help="rnncc's steps under cProfile (0: none)")
    args = p.parse_args()
    ex = example()
    text = ex.TEXT.read_text()
    alphabet = "".join(sorted(set(text)))
    data = torch.tensor([alphabet.index(c) for c in text], device="cuda")
    torch.manual_seed(0)
    start = ex.CharLM(len(alphabet), 128, 2, args.dropout).cuda()
    models = {"torch.nn": copy.deepcopy(start), "rnncc": rnncc.optimize(copy.deepcopy(start))}
    seq, batch = 32, 16
    offsets = torch.arange(seq, device="cuda")
    g = torch.Generator().manual_seed(0)
    starts = [torch.randint(0, len(text) - seq - 1, (batch,), generator=g)
              for _ in range(14 + args.steps + args.profiled)]

    def step(model, optimizer, s):
        return ex.train_step(model, optimizer, data, s, offsets)

    optimizers = {}
    for name, model in models.items():
        model.train()
        optimizers[name] = torch.optim.Adam(model.parameters(), lr=3e-3)
        for s in starts[:14]:  # compiled, recorded, captured
            step(model, optimizers[name], s)
    times = {name: [] for name in models}
    for s in starts[14:14 + args.steps]:
        for name, model in models.items():  # interleaved, step by step
            began = time.perf_counter()
            step(model, optimizers[name], s)
            times[name].append(time.perf_counter() - began)
    for name, t in times.items():
        print(f"{name:8s}: {statistics.median(t) * 1e6:7.0f} µs a step (median of {len(t)}), dropout {args.dropout}")
    print(f"rnncc / torch.nn: {statistics.median(times['rnncc']) / statistics.median(times['torch.nn']):.3f}")
    if not args.profiled:
        return
    profile = cProfile.Profile()
    profile.enable()
    for s in starts[14 + args.steps:]:
        step(models["rnncc"], optimizers["rnncc"], s)
    profile.disable()
    for key in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats(key).print_stats(40)
        print(f"== rnncc's {args.profiled} steps by {key}\n" + out.getvalue())


if __name__ == "__main__":
    main()
