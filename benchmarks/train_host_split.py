"""Where an eager training step's time goes (issue 17): for the forward+backward rows of
``rnncc bench``, the host time to queue one step (twin forward + torch.autograd.grad), a
step back to back, one step on a drained GPU and a CUDA-graph replay (the GPU time), the
same for torch.nn (cuDNN), then cProfile's functions of the twin's step by own and by
cumulative time. Needs a GPU.

    python3 benchmarks/train_host_split.py [-o DIR]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from pathlib import Path

import torch
from backward_profile import training_case  # benchmarks/ is this script's directory
from host_overhead import per_call_us

from rnncc.bench import training_configs
from rnncc.timing import time_graph, time_interleaved

CALLS = 50


def inclusive_us(step) -> list[tuple[str, float]]:
    """Host µs a step spent inside each of the training path's functions (wrapped with
    perf_counter for CALLS steps, the GPU drained before and after), largest first."""
    import rnncc.backward as backward
    import rnncc.nn as nn
    import rnncc.runtime as runtime
    wrapped = [(nn, "_run_train"), (nn, "_forward_train_cuda"), (nn._Runner, "gpu"),
               (runtime.CompiledModel, "__call__"), (nn, "_backward_cuda"), (backward, "model_backward"),
               (backward, "layer_backward"), (backward, "recurrence"), (backward, "_gemm"),
               (nn._EagerTraining, "forward"), (nn._EagerTraining, "backward"), (nn, "_stacked_finals"),
               (torch.autograd, "grad")]
    spent: dict[str, float] = {}
    originals = [(owner, name, owner.__dict__[name]) for owner, name in wrapped]

    def timed(label, fn):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[label] = spent.get(label, 0.0) + time.perf_counter() - t
        return wrapper
    for owner, name, fn in originals:
        label = f"{getattr(owner, '__name__', owner)}.{name}"
        inner = fn.__func__ if isinstance(fn, staticmethod) else fn
        setattr(owner, name, staticmethod(timed(label, inner)) if isinstance(fn, staticmethod) else timed(label, inner))
    try:
        torch.cuda.synchronize()
        for _ in range(CALLS):
            step()
        torch.cuda.synchronize()
    finally:
        for owner, name, fn in originals:
            setattr(owner, name, fn)
    return sorted(((k, v / CALLS * 1e6) for k, v in spent.items()), key=lambda r: -r[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", default=".")
    parser.add_argument("--only", default="", help="a substring of the rows' labels to keep")
    parser.add_argument("--trace", action="store_true", help="write a Chrome trace of three steps")
    args = parser.parse_args()
    lines = []
    for cfg in training_configs():
        if args.only not in cfg.label:
            continue
        module, twin, x, dy = training_case(cfg)
        for name, m in (("rnncc", twin), ("cuDNN", module)):
            step = lambda: torch.autograd.grad(m(x)[0], [x, *m.parameters()], dy)  # noqa: E731
            host, loop = per_call_us(step, CALLS)
            drained = time_interleaved({"s": step}, warmup=3, repeats=20)["s"].median_ms
            graph = time_graph(lambda: step(), warmup=3, repeats=20).median_ms
            header = (f"== {cfg.label} S={cfg.seq_len}, {name}: µs a step: host to queue {host:.1f}, "
                      f"back to back {loop:.1f}, one step drained {drained * 1e3:.1f}, graph {graph * 1e3:.1f}")
            print(header, flush=True)
            lines.append(header)
            if name != "rnncc":
                continue
            # The same step with its backward run directly, not replayed from a CUDA graph
            # (rnncc.call_graphs): what the replay saves, in this process.
            import rnncc.backward as backward
            worthy, backward.graph_worthy = backward.graph_worthy, lambda *a: False
            try:
                host_d, loop_d = per_call_us(step, CALLS)
                drained_d = time_interleaved({"s": step}, warmup=3, repeats=20)["s"].median_ms
            finally:
                backward.graph_worthy = worthy
            direct = (f"   the backward run directly (not replayed): host to queue {host_d:.1f}, "
                      f"back to back {loop_d:.1f}, one step drained {drained_d * 1e3:.1f}")
            print(direct, flush=True)
            lines.append(direct)
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(CALLS):
                step()
            profile.disable()
            torch.cuda.synchronize()
            lines.append(f"host µs a step inside each function (inclusive, {CALLS} steps, no profiler):")
            lines.extend(f"  {us:8.1f}  {name}" for name, us in inclusive_us(step))
            for order in ("tottime", "cumulative"):
                text = io.StringIO()
                pstats.Stats(profile, stream=text).sort_stats(order).print_stats(30)
                lines.append(f"cProfile, {CALLS} steps, by {order}:")
                lines.append(text.getvalue().split("\n", 6)[-1].rstrip())
            # The host's operators of one step (torch.profiler, CPU): what each costs to issue.
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(5):
                    step()
                torch.cuda.synchronize()
            if args.trace:  # three steps back to back, host and GPU, as a Chrome trace
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as traced:
                    for _ in range(3):
                        step()
                    torch.cuda.synchronize()
                traced.export_chrome_trace(str(Path(args.output) / f"train-trace-{cfg.cell}-{cfg.dtype}-{cfg.hidden}.json"))
            lines.append("torch.profiler, 5 steps, operators by self CPU time:")
            lines.append(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
    out = Path(args.output) / f"train-host-split-{torch.cuda.get_device_name().split()[1].lower()}.txt"
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text())


if __name__ == "__main__":
    main()
