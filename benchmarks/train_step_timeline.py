"""Where an eager training step's host time goes before its backward reaches the GPU
(issue 17's LSTM fp16 H=512 B=8 row, which is host-bound): the twin's step
``torch.autograd.grad(twin(x)[0], [x, *params], dy)`` with timestamps (host µs from the
step's start, median of 20 steps, the GPU drained before each) where rnncc's forward and
backward functions, the autograd engine's handoffs and the backward graph's replay begin
and end. Needs a GPU.

    python3 benchmarks/train_step_timeline.py [INDEX] [--fine]
        INDEX of rnncc.bench.training_configs(), default 0; --fine also marks the training
        forward's parts (the compiled model's lookup, its call, the program's replay and
        each launch and GEMM it queues)
"""
import statistics
import sys
import time

import torch

sys.path.insert(0, "benchmarks")
from backward_profile import training_case  # noqa: E402

import rnncc.backward as bw  # noqa: E402
import rnncc.call_graphs as cg  # noqa: E402
import rnncc.call_program as cp  # noqa: E402
import rnncc.nn as nn  # noqa: E402
import rnncc.runtime as rt  # noqa: E402
from rnncc.bench import training_configs  # noqa: E402

STEPS = 20
marks: list[tuple[str, float]] = []


def mark(label: str) -> None:
    marks.append((label, time.perf_counter()))


def stamped(owner, name: str, static: bool = False, label: str | None = None) -> None:
    """``owner.name`` replaced by a call that marks its entry (">") and return ("<")."""
    f, label = getattr(owner, name), label or name

    def g(*a, **k):
        mark(label + " >")
        r = f(*a, **k)
        mark(label + " <")
        return r
    setattr(owner, name, staticmethod(g) if static else g)


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--fine"]
    cfg = training_configs()[int(args[0]) if args else 0]
    module, twin, x, dy = training_case(cfg)
    for _ in range(4):  # compiled, recorded, the backward's graph captured
        torch.autograd.grad(twin(x)[0], [x, *twin.parameters()], dy)
    stamped(nn._EagerTraining, "forward", True, "_EagerTraining.forward")
    stamped(nn._EagerTraining, "backward", True, "_EagerTraining.backward")
    for name in ("_run_train", "_forward_train_cuda", "_saved_by_training", "_backward_inputs",
                 "_backward_replayed", "_backward_cuda", "_saving_layers"):
        stamped(nn, name)
    stamped(cg.CallGraphs, "run")
    stamped(cg.CallGraphs, "_replay", True)
    stamped(cg, "signature")
    for name in ("launch_settings", "check_status", "graph_worthy"):
        stamped(bw, name)
    stamped(torch.cuda.CUDAGraph, "replay", label="CUDAGraph.replay")
    stamped(torch, "_foreach_copy_")
    stamped(type(twin), "forward", label="the twin's forward")
    if "--fine" in sys.argv:
        for name in ("compiled_for", "gpu"):
            stamped(nn._Runner, name, label=f"_Runner.{name}")
        for name in ("_saving_of", "_gate_shapes", "_saved_buffers", "_given_state"):
            stamped(nn, name)
        for name in ("__call__", "_call", "_run", "_replayed", "_replay", "_gate_arrays"):
            stamped(rt.CompiledModel, name, label=f"CompiledModel.{name}")
        stamped(rt.CompiledModel, "_replay_key", True, "CompiledModel._replay_key")
        stamped(cp.CallProgram, "run", label="CallProgram.run")
        for name in ("launch", "gemm"):
            stamped(cp.Queue, name, label=f"queued {name}")
    runs = []
    for _ in range(STEPS):
        marks.clear()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = twin(x)[0]
        mark("[0] taken")
        inputs = [x, *twin.parameters()]
        mark("parameters listed")
        mark("autograd.grad >")
        torch.autograd.grad(out, inputs, dy)
        mark("autograd.grad <")
        runs.append([(label, (t - t0) * 1e6) for label, t in marks])
        torch.cuda.synchronize()
    print(f"== {cfg.label} S={cfg.seq_len}: host µs from the step's start (median of {STEPS}), "
          "and since the mark before")
    before = 0.0
    for j in range(min(len(r) for r in runs)):
        at = statistics.median(r[j][1] for r in runs)
        print(f"  {at:7.1f}  (+{at - before:6.1f})  {runs[0][j][0]}")
        before = at


if __name__ == "__main__":
    main()
