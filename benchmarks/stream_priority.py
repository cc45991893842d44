"""Does the order in which the GPU's block scheduler serves a pipelined call's kernels move
its time? The same plans run with their side streams made at different priorities.

    python3 benchmarks/stream_priority.py [-o DIR] [--build-only]

A pipelined call (passes/schedule.py) runs each layer's recurrence on a stream of its own
and, where they run ahead, its projections on another (Stage.projection_stream). On SM
partitions the four grid kernels hold 128 of the 132 SMs; when a chunk ends its SMs go to
whichever queued kernel the scheduler serves first: the layer's next chunk, another
layer's, or a projection GEMM. Stream priorities order that, and a CUDA graph keeps them
(torch instantiates graphs with cudaGraphInstantiateFlagUseNodePriority; a kernel node
takes its capturing stream's priority). Policies, over the side streams of a call
(the caller's stream, which runs the first layer, keeps its own):
  base        every side stream at the default priority (what rnncc does);
  recur_high  the layers' streams at the highest priority, the projection streams default;
  proj_high   the projection streams at the highest, the layers' default;
  deep_high   a layer's streams the higher the later it comes in the model.
Each (case, variant, policy) is timed as CUDA-graph replays and eager calls, policies
interleaved, two rounds. Writes DIR/stream-priority-<gpu>.jsonl. Needs a GPU and PyCUDA.
"""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import rnncc
from rnncc import driver

from partition_profile import script_args
from pipeline_schedule import stack, with_chunk

# (name, spec, S, B, precision, variants: "chosen" or (chunk, parts))
CASES = [("GNMT fp16 B=8", "examples/gnmt_encoder_fp16.yaml", 128, 8, None, ["chosen", (16, 4)]),
         ("4×LSTM fp16 H=1024 B=8", stack(4, 1024, "float16"), 256, 8, None, ["chosen", (16, 4)]),
         ("8×LSTM fp16 H=512 B=8", stack(8, 512, "float16"), 256, 8, None, ["chosen"]),
         ("4×LSTM fp32 exact H=512 B=8", stack(4, 512, "float32"), 256, 8, "exact", ["chosen"])]
POLICIES = ("base", "recur_high", "proj_high", "deep_high")


def priorities(policy: str, layers: int, sides: int, greatest: int) -> list[int]:
    """The priority of each side stream (side i is stream i + 1: streams 1 … layers−1 run
    layers 2 … L, the rest the projections ahead of layers 1 … L; 0 is the default and
    least, ``greatest`` the highest, a negative number)."""
    out = []
    for i in range(sides):
        stream = i + 1
        is_layer = stream < layers
        layer = stream if is_layer else stream - layers  # the layer's index in the model
        if policy == "recur_high":
            out.append(greatest if is_layer else 0)
        elif policy == "proj_high":
            out.append(0 if is_layer else greatest)
        elif policy == "deep_high":
            out.append(round(greatest * layer / max(1, layers - 1)))
        else:
            out.append(0)
    return out


def with_priorities(model, policy: str, greatest: int):
    """``model`` whose side streams are made at ``policy``'s priorities (before its first
    call, which makes them)."""
    layers = len(model.plan.layers)
    streams = model._streams
    made = streams._made

    def side(caller: int, count: int) -> list[int]:
        with streams._lock:
            have = streams._side.setdefault(caller, [])
            wanted = priorities(policy, layers, count, greatest)
            while len(have) < count:
                handle = ctypes.c_void_p()
                driver._check(driver._lib().cuStreamCreateWithPriority(
                    ctypes.byref(handle), driver._STREAM_NON_BLOCKING, wanted[len(have)]), "creating a stream")
                have.append(handle.value)
                made.append(("stream", handle.value))
            return have[:count]

    streams.side = side
    return model


def main() -> None:
    args = script_args(__doc__)
    models = {}
    for name, spec, S, B, precision, variants in CASES:
        chosen = rnncc.compile(spec, target=args.target, seq_len=S, batch=B, precision=precision, launches="graph")
        base = rnncc.compile(spec, target=args.target, seq_len=S, batch=B, precision=precision,
                             schedule="sequential", launches="graph")
        for v in variants:
            label = "chosen" if v == "chosen" else f"C={v[0]} parts={v[1]}"
            models[(name, label)] = (chosen if v == "chosen" else with_chunk(base, *v), S, B)
    from rnncc.build import compile_all
    kernels = {k.name: k for m, _, _ in models.values() for k in m.kernels}
    compile_all(list(kernels.values()), "sm_90a")
    if args.build_only:
        return
    import torch
    from rnncc.timing import time_graph, time_interleaved

    least, greatest = ctypes.c_int(), ctypes.c_int()
    driver._check(driver._lib().cuCtxGetStreamPriorityRange(ctypes.byref(least), ctypes.byref(greatest)),
                  "reading the stream priority range")
    gpu = torch.cuda.get_device_name().split()[1].lower()
    out = Path(args.output) / f"stream-priority-{gpu}.jsonl"
    with open(out, "w") as f:
        for (name, label), (m, S, B) in models.items():
            x = torch.randn(S, B, m.model.input_size, device="cuda", dtype=getattr(torch, m.model.dtype))
            twins = {p: with_priorities(m.with_plan(m.plan), p, greatest.value) for p in POLICIES}
            first = lambda out: (out[0] if isinstance(out, tuple) else out).float()
            reference = first(twins["base"](x))
            for p, t in twins.items():  # same outputs whatever the order
                err = (first(t(x)) - reference).abs().max().item()
                assert err == 0.0 or err < 1e-2, (name, label, p, err)
            graph = {p: [] for p in POLICIES}
            eager = {p: [] for p in POLICIES}
            for _ in range(2):
                for p, t in twins.items():
                    graph[p].append(round(time_graph(lambda: t(x), warmup=2, repeats=10).median_ms, 4))
                times = time_interleaved({p: (lambda t=t: t(x)) for p, t in twins.items()}, warmup=2, repeats=10)
                for p in POLICIES:
                    eager[p].append(round(times[p].median_ms, 4))
            row = {"case": name, "variant": label, "schedule": m.plan.schedule.value.label,
                   "priority_range": [least.value, greatest.value],
                   "graph_ms": graph, "eager_ms": eager}
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(json.dumps(row), flush=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
