"""Where a training step's GPU time goes: each of ``rnncc bench``'s forward+backward rows run
through the twin and through torch.nn (cuDNN), one step profiled by torch.profiler after
warm-up, kernels summed by name (µs a step, largest first).

Usage: python3 benchmarks/backward_profile.py [cell,dtype,H,B[,S] ...] > results/backward-profile-<gpu>-<date>.txt
(rows named on the command line instead of the bench's; float32 exact)
"""

from __future__ import annotations

import sys

import torch
from torch.profiler import ProfilerActivity, profile

import rnncc.nn
from rnncc.bench import Config, training_configs, training_module


def kernels(step) -> list[tuple[str, float]]:
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    rows = [(e.key, e.device_time_total) for e in prof.key_averages() if e.device_time_total > 0]
    return sorted(rows, key=lambda r: -r[1])


def training_case(cfg):
    """(torch.nn's module of a forward+backward row, rnncc.bench.training_module's, its twin,
    an input requiring grad, the output's gradient)."""
    module, out_size = training_module(cfg)
    tdt = getattr(torch, cfg.dtype)
    twin, _ = rnncc.nn.twin_of(module)
    x = torch.randn(cfg.seq_len, cfg.batch, cfg.hidden, device="cuda", dtype=tdt, requires_grad=True)
    dy = torch.randn(cfg.seq_len, cfg.batch, out_size, device="cuda", dtype=tdt)
    return module, twin, x, dy


def main() -> None:
    print(__doc__.split("\n\n")[0].replace("\n", " "))
    named = [r.split(",") for r in sys.argv[1:]]
    configs = [Config(cell, dtype, int(H), int(B), *(int(x) for x in S), precision="exact" if dtype == "float32" else None,
                      passes="forward+backward") for cell, dtype, H, B, *S in named] or training_configs()
    for cfg in configs:
        module, twin, x, dy = training_case(cfg)
        for name, m in (("rnncc", twin), ("cuDNN", module)):
            rows = kernels(lambda: torch.autograd.grad(m(x)[0], [x, *m.parameters()], dy))
            total = sum(t for _, t in rows)
            print(f"\n{cfg.label} S={cfg.seq_len}, {name}: {total / 1e3:.3f} ms of kernels a step")
            for key, t in rows[:8]:
                print(f"  {t:10.1f} µs  {key[:110]}")


if __name__ == "__main__":
    main()
