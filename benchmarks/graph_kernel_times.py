"""Where a CUDA-graph replay's time goes, kernel by kernel: for each case, the graph's median
time and, from one replay traced by torch.profiler (CUPTI sees the kernels inside a graph),
each kernel name's count, median and summed µs, and the span of the replay. For the two
wrong graph plans of the 2026-11-28 A/B (docs/design-notes.md): the launch-a-step form at
K=650 against K=640 and 1024 (is the step kernel slow, or something else in the call?),
at B = 1, 3 and 20, and 4 × LSTM bf16 H=650 B=20 S=16's plans for graphed and eager calls; and
2 × GRU bf16 H=768 B=64 S=100 pipelined in 2 partitions against sequential and against
its partition tiles run alone (a slow tile, or two tiles slowing each other?).

    python3 benchmarks/graph_kernel_times.py OUT_DIR [--build-only]

Writes OUT_DIR/graph-kernel-times-<gpu>-<date>.json. Needs a GPU (but --build-only).
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import rnncc

from pipeline_schedule import stack, with_chunk  # run as a script: benchmarks/ is on sys.path
from partition_profile import alone, kernel_events


def models(target: str) -> list[tuple[str, object, int, int]]:
    """(case, compiled model, S, B)."""
    out = []
    for cell, dtype, H, B, S in (("lstm", "float16", 650, 1, 128), ("lstm", "float16", 1024, 1, 256),
                                 ("gru", "float16", 650, 1, 128), ("lstm", "float16", 640, 1, 128),
                                 ("lstm", "float16", 650, 3, 128), ("lstm", "bfloat16", 650, 20, 16),
                                 ("lstm", "bfloat16", 640, 20, 16)):
        m = rnncc.compile(stack(1, H, dtype, cell), target=target, seq_len=S, batch=B,
                          persistence="none", launches="graph")
        out.append((f"{cell} {dtype} H={H} B={B} S={S}, none", m, S, B))
    # The projection at K not whole 16-byte loads, rnncc's tiled kernel against cuBLASLt's
    # align2 kernels (branches tiled-projection-unaligned, library-gemm-alignment).
    for dtype, K, B, S in (("bfloat16", 650, 20, 16), ("float16", 333, 3, 16), ("float16", 650, 8, 64),
                           ("float16", 640, 8, 64)):
        spec = {"name": "projection", "dtype": dtype, "input_size": K,
                "layers": [{"name": "l0", "cell": "lstm", "hidden_size": K}]}
        for gemm in ("rnncc", "cublas"):
            m = rnncc.compile(spec, target=target, seq_len=S, batch=B, gemm=gemm, launches="graph")
            out.append((f"lstm {dtype} K={K} B={B} S={S}, projection by {gemm}", m, S, B))
    lm = stack(4, 650, "bfloat16")
    for launches in ("graph", None):
        m = rnncc.compile(lm, target=target, seq_len=16, batch=20, launches=launches)
        out.append((f"4×lstm bf16 H=650 B=20 S=16, {launches or 'eager'} plan ({m.plan.schedule.value.label}, "
                    f"{m.plan.layers[0].persistence.value.mode})", m, 16, 20))
    spec = stack(2, 768, "bfloat16", "gru")
    sequential = rnncc.compile(spec, target=target, seq_len=100, batch=64, schedule="sequential", launches="graph")
    graph_plan = rnncc.compile(spec, target=target, seq_len=100, batch=64, launches="graph")
    out.append(("2×gru bf16 H=768 B=64 S=100, sequential", sequential, 100, 64))
    out.append((f"2×gru bf16 H=768 B=64 S=100, graph plan ({graph_plan.plan.schedule.value.label})",
                graph_plan, 100, 64))
    for chunk in (32,):
        p = with_chunk(sequential, chunk, 2)
        out.append((f"2×gru bf16 H=768 B=64 S=100, C={chunk} parts=2", p, 100, 64))
        out.append((f"2×gru bf16 H=768 B=64 S=100, C={chunk} parts=2 alone", alone(p), 100, 64))
    return out


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else "benchmarks/results")
    build_only = "--build-only" in sys.argv
    cases = models("h100" if build_only else "device")
    from rnncc.build import compile_all
    kernels = {k.name: k for _, m, _, _ in cases for k in m.kernels}
    compile_all(list(kernels.values()), cases[0][1].target.arch)
    if build_only:
        return
    import torch

    from rnncc.timing import capture, time_graph
    from result_files import write_results

    rows = []
    for name, m, S, B in cases:
        x = torch.randn(S, B, m.model.input_size, device="cuda", dtype=getattr(torch, m.model.dtype))
        graph_ms = time_graph(lambda: m(x), warmup=3, repeats=20).median_ms
        g, _ = capture(lambda: m(x), warm=1)
        g.replay()
        events = kernel_events(g.replay)
        by_name: dict[str, list[float]] = {}
        for e in events:
            by_name.setdefault(e["name"][:90], []).append(e["dur"])
        row = {"case": name, "graph_ms": round(graph_ms, 4),
               "span_us": round(events[-1]["ts"] + events[-1]["dur"] - events[0]["ts"], 1),
               "kernels": {k: {"n": len(v), "median_us": round(statistics.median(v), 2), "sum_us": round(sum(v), 1)}
                           for k, v in sorted(by_name.items(), key=lambda kv: -sum(kv[1]))}}
        rows.append(row)
        print(json.dumps(row), flush=True)
    write_results(out, "graph-kernel-times", rows)


if __name__ == "__main__":
    main()
