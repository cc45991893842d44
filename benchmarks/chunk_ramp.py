"""Pipelined stacks with ramps of short chunks at the start or end (Schedule.first_chunks,
last_chunks), timed beside the plan's chunks of C in one process, as CUDA-graph replays.

The question it answered (2026-11-28): at GNMT fp16 B=8 (8 layers, chunks of 32 in 4 SM
partitions) the fill and the drain are 3 to 7 lags of a whole chunk; does a short first
(or last) chunk shorten them with only a few more chunks? No: every ramp ran 1.01-1.08×
slower (results/chunk-ramp-h200-2026-11-28.jsonl, chunk-ramp-traced-h200-2026-11-28.jsonl).
Layer l + 1's chunk k starts when layer l's ends and lasts as long, so a layer's lag behind
the layer it reads is its largest chunk so far (docs/design-notes.md, "Short first chunks,
and projections ahead priced beside clusters"). Each case is compiled for graphed calls
(the bench's graph plan, uniform chunks), then run with each ramp forced on the same
kernels; the outputs of every ramp are checked against the plan's.

    python3 benchmarks/chunk_ramp.py OUT_DIR [--build-only] [--trace] [--case NAME]...

Schedule.first_chunks and last_chunks are not in rnncc: they are
benchmarks/variants/chunk-ramp.patch. Run this with the patched tree first on PYTHONPATH
(`git apply` it in a worktree; copy its rnncc/ and templates/ to .ab-chunk-ramp/new and
carry that).

Writes OUT_DIR/chunk-ramp-<gpu>-<date>.jsonl (one line per case and ramp: graph ms, the
schedule model's prediction; with --trace each replay's kernels, partition_profile.summary)
and prints a table. Needs a GPU, PyTorch and PyCUDA
(--build-only: nvcc; plans for the preset RNNCC_BUILD_TARGET, default h200).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import rnncc
from rnncc.passes.schedule import predicted_seconds
from rnncc.plan import Decision

sys.path.insert(0, str(Path(__file__).parent))
from ab_rows import build_target  # noqa: E402
from pipeline_schedule import first, stack  # noqa: E402
from result_files import result_path  # noqa: E402

# (name, spec, S, B, precision)
CASES = [("GNMT fp16 B=8", "examples/gnmt_encoder_fp16.yaml", 128, 8, None),
         ("4×LSTM fp16 H=1024 B=8", stack(4, 1024, "float16"), 256, 8, None),
         ("4×LSTM fp32 exact H=512 B=8", stack(4, 512, "float32"), 256, 8, "exact"),
         ("8×LSTM fp16 H=512 B=8", stack(8, 512, "float16"), 256, 8, None)]
# (first chunks, last chunks), each at most the plan's chunk (else the ramp is skipped).
RAMPS = [((), ()), ((8,), ()), ((16,), ()), ((8, 8), ()), ((8, 8, 16), ()), ((8, 24), ()),
         ((4, 4, 8, 16), ()), ((16, 16), ()),
         ((), (8,)), ((), (16, 8)), ((), (16, 8, 8)), ((8, 24), (16, 8, 8)), ((8,), (8,))]
ROUNDS = 3


def ramped(base, head: tuple[int, ...], tail: tuple[int, ...]):
    """``base`` with its pipelined schedule's first chunks ``head`` and last chunks ``tail``
    forced; None where the plan is not pipelined or a ramp's chunk exceeds its chunk."""
    schedule = base.plan.schedule.value
    if not schedule.pipelined or any(c > schedule.chunk for c in head + tail):
        return None
    if not head and not tail:
        return base
    forced = replace(schedule, first_chunks=head, last_chunks=tail)
    return base.with_plan(replace(base.plan, schedule=Decision(forced, f"ramps {head}, {tail} forced", "user")))


def graph_trace(m, x) -> dict:
    """partition_profile.summary of one CUDA-graph replay of ``m(x)``: each kernel's kind,
    stream, start and duration (µs), the idle time between a stream's kernels."""
    import torch

    from partition_profile import kernel_events, summary
    from rnncc.timing import capture

    graph, _ = capture(lambda: m(x))
    graph.replay()
    torch.cuda.synchronize()
    return summary(kernel_events(graph.replay))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", default="benchmarks/results")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--case", action="append", default=[])
    ap.add_argument("--trace", action="store_true", help="add each variant's kernel trace of one graph replay")
    args = ap.parse_args()
    cases = [c for c in CASES if not args.case or c[0] in args.case]
    if args.build_only:  # a ramp changes no kernel: the plan's are every ramp's
        from rnncc.build import compile_all
        kernels = {}
        for name, spec, S, B, precision in cases:
            m = rnncc.compile(spec, target=build_target(), seq_len=S, batch=B, precision=precision, launches="graph")
            kernels |= {k.name: k for k in m.kernels}
            print(f"{name}: {m.plan.schedule.value.label}", flush=True)
        compile_all(list(kernels.values()), "sm_90a")
        return

    import torch

    from rnncc.dtypes import max_relative_error, tolerance
    from rnncc.timing import time_graph

    out = result_path(Path(args.out), "chunk-ramp", "jsonl")
    rows = []
    for name, spec, S, B, precision in cases:
        torch.manual_seed(0)
        base = rnncc.compile(spec, target="device", seq_len=S, batch=B, precision=precision, launches="graph")
        models = {ramp: m for ramp in RAMPS if (m := ramped(base, *ramp)) is not None}
        x = torch.randn(S, B, base.model.input_size, device="cuda").to(getattr(torch, base.model.dtype))
        want = first(base(x)).float()
        errors = {}
        for ramp, m in models.items():
            got = first(m(x)).float()
            errors[ramp] = max_relative_error(got.cpu().numpy(), want.cpu().numpy())
        times = {ramp: [] for ramp in models}
        for _ in range(ROUNDS):
            for ramp, m in models.items():
                times[ramp].append(time_graph(lambda m=m: m(x), 2, 7).median_ms)
        uniform = statistics.median(times[((), ())])
        for ramp, m in models.items():
            ms = statistics.median(times[ramp])
            schedule = m.plan.schedule.value
            row = {"case": name, "S": S, "B": B, "schedule": schedule.label,
                   "first_chunks": list(ramp[0]), "last_chunks": list(ramp[1]),
                   "graph_ms": round(ms, 4), "rounds_ms": [round(t, 4) for t in times[ramp]],
                   "vs_plan": round(ms / uniform, 3),
                   "predicted_ms": round(predicted_seconds(m.plan, schedule, S, m.target) * 1e3, 4),
                   "max_relative_error_vs_plan": float(errors[ramp]),
                   "within_tolerance": bool(errors[ramp] <= tolerance(base.model.dtype))}
            if args.trace:
                row |= graph_trace(m, x)
            rows.append(row)
            print(f"{name:<28} {schedule.label:<34} {ms:8.3f} ms  {ms / uniform:5.3f}×  "
                  f"predicted {row['predicted_ms']:7.3f}  err {errors[ramp]:.1e}", flush=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
