"""The torch operators an eager training step of the twin runs on the host (issue 17):
for a forward+backward row of ``rnncc bench``, torch.profiler's CPU table of one twin step
(count, self and total host µs a step by operator), and the host µs to queue a step. Needs
a GPU.

    python3 benchmarks/train_host_ops.py [--only LABEL]
"""

from __future__ import annotations

import argparse

import torch
from backward_profile import training_case  # benchmarks/ is this script's directory
from host_overhead import per_call_us
from torch.profiler import ProfilerActivity, profile

from rnncc.bench import training_configs

STEPS = 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="lstm fwd+bwd float16 H=512")
    args = parser.parse_args()
    for cfg in training_configs():
        if args.only not in cfg.label:
            continue
        module, twin, x, dy = training_case(cfg)
        for name, m in (("rnncc", twin), ("cuDNN", module)):
            step = lambda: torch.autograd.grad(m(x)[0], [x, *m.parameters()], dy)  # noqa: E731
            host, loop = per_call_us(step, 50)
            print(f"== {cfg.label} S={cfg.seq_len}, {name}: host to queue a step {host:.1f} µs, back to back {loop:.1f} µs")
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(STEPS):
                    step()
                torch.cuda.synchronize()
            rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
            calls = sum(e.count for e in rows if e.key.startswith("aten::")) / STEPS
            print(f"   aten calls a step: {calls:.0f}; by self host time (µs a step), count a step, total µs a step:")
            for e in rows[:40]:
                print(f"   {e.self_cpu_time_total / STEPS:9.1f} {e.count / STEPS:6.1f} {e.cpu_time_total / STEPS:9.1f}  {e.key[:90]}")


if __name__ == "__main__":
    main()
