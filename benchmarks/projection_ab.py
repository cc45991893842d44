"""The one-layer half plans whose input projection a change moved, and, on the GPU, each
moved plan timed both ways: what the change buys, call by call. The change is the padded K
(cuBLASLt's GEMM over K padded to a multiple of 8, tiles.projection_padded_k; "before"
plans with it switched off), or, with ``--before unaligned=F,R``, the price of cuBLASLt's
unaligned GEMMs ("before" plans with cost.LIBRARY_UNALIGNED_FIXED_SECONDS = F and
LIBRARY_UNALIGNED_FLOPS = R, "after" with the code's).

    python3 benchmarks/projection_ab.py census OUT.json [--target h200] [--before ...]
        # no GPU: {"dtype cell H B S launches": {"before": .., "after": .., predicted µs each}}
        # for every plan whose projection moved
    RNNCC_CACHE_DIR=.cubins python3 benchmarks/projection_ab.py ab CENSUS.json --precompile [--every N] [--before ...] [--among ...]
    python3 benchmarks/projection_ab.py ab CENSUS.json -o DIR [--every N] [--before ...] [--among MOVES.jsonl]
        # GPU: each moved plan compiled both ways (same seed, same weights), its outputs compared,
        # timed as CUDA-graph replays and, for plans of eager calls, as eager calls, interleaved;
        # and one eager call of each profiled (torch.profiler): the GPU µs of its merge,
        # cuBLASLt, projection-tile and recurrent kernels

    python3 benchmarks/projection_ab.py summary MOVES.jsonl
        # the ratios by the projection before (rnncc's tile or cuBLASLt unpadded) and by
        # whether G·H is a multiple of 8, and each kind's cuBLASLt µs before and after

By default "before" is the plan as the planner makes it with the padding switched off
(``projection_padded_k`` answering 0 in passes/geometry.py), which is the plan of the
commit before the padding. The persistence of both must agree (else the point is skipped
and said so), so that a ratio reads the projection alone. ``--every N`` takes every Nth
moved plan (in the census's order: dtype, cell, H, B, S, launches), to fit a time budget;
``--among MOVES.jsonl`` only the plans an earlier A/B timed (whose kernels it built).

Writes DIR/projection-moves-<gpu>.jsonl, a line a point, and prints a summary.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import statistics
import sys
import warnings
from pathlib import Path

import rnncc
import rnncc.passes.cost as cost
import rnncc.passes.geometry as geometry

sys.path.insert(0, str(Path(__file__).parent))
from persistence_census import layer_spec  # noqa: E402

CELLS = ("lstm", "gru", "rnn_tanh")
HIDDEN = (333, 500, 650, 700, 777, 900, 1100, 1300, 1500, 1700, 1024)
BATCH = (1, 8, 20, 64, 128, 256)
LENGTHS = (35, 256)


@contextlib.contextmanager
def planned_before(before: str):
    """The planner as it was before the change: "padding-off" (``projection_padded_k``
    answering 0), or "unaligned=F,R" (cuBLASLt's unaligned GEMMs priced at a fixed F seconds
    and R FLOP/s)."""
    if before == "padding-off":
        saved = [(geometry, "projection_padded_k", lambda *args: 0)]
    elif before.startswith("unaligned="):
        fixed, flops = (float(v) for v in before.removeprefix("unaligned=").split(","))
        saved = [(cost, "LIBRARY_UNALIGNED_FIXED_SECONDS", fixed), (cost, "LIBRARY_UNALIGNED_FLOPS", flops)]
    else:
        raise ValueError(f"projection_ab: --before {before!r}, expected padding-off or unaligned=F,R")
    originals = [(module, name, getattr(module, name)) for module, name, _ in saved]
    for module, name, value in saved:
        setattr(module, name, value)
    try:
        yield
    finally:
        for module, name, value in originals:
            setattr(module, name, value)


def compiled(key: str, target: str, before: str | None):
    """The plan of ``key`` after the change (``before`` None) or before it."""
    dtype, cell, H, B, S, launches = key.split()
    with contextlib.nullcontext() if before is None else planned_before(before):
        return rnncc.compile(layer_spec(dtype, cell, int(H)), target=target, batch=int(B), seq_len=int(S),
                             launches=launches, seed=0)


def describe(model) -> dict:
    layer = model.plan.layers[0]
    schedule = model.plan.schedule
    predicted = schedule.alternatives.get(schedule.value.label) if schedule and schedule.alternatives else None
    return {"projection": str(layer.projection_tile.value),
            "persistence": f"{layer.persistence.value.mode}/{layer.persistence.value.math}",
            "predicted_us": predicted and predicted * 1e6}


def census(path: Path, target: str, before_change: str) -> None:
    out = {}
    for dtype, cell, H, B, S, launches in itertools.product(("float16",), CELLS, HIDDEN, BATCH, LENGTHS,
                                                            ("eager", "graph")):
        key = f"{dtype} {cell} {H} {B} {S} {launches}"
        before, after = (describe(compiled(key, target, b)) for b in (before_change, None))
        if before["projection"] != after["projection"]:
            out[key] = {"before": before, "after": after}
    path.write_text(json.dumps(out, indent=0))
    ratios = sorted(v["after"]["predicted_us"] / v["before"]["predicted_us"] for v in out.values())
    # each side predicted at its own prices (with --before unaligned=..., two price sets)
    print(f"{len(out)} projections moved; predicted calls after ÷ before: median {statistics.median(ratios):.3f}, "
          f"{ratios[0]:.3f}-{ratios[-1]:.3f}; persistence moved at "
          f"{sum(v['before']['persistence'] != v['after']['persistence'] for v in out.values())}")


def points(path: Path, every: int, among: Path | None = None) -> list[str]:
    keys = list(json.loads(path.read_text()))
    if among is not None:
        timed = {json.loads(line)["key"] for line in among.read_text().splitlines()}
        keys = [k for k in keys if k in timed]
    return keys[::every]


def precompile(path: Path, every: int, before: str, among: Path | None) -> None:
    from staged_sweep import build_kernels  # benchmarks/ is this script's directory
    build_kernels(compiled(key, "h200", b) for key in points(path, every, among) for b in (before, None))


def kernel_us(model, x) -> dict[str, float]:
    """GPU µs of one eager call's kernels by kind (torch.profiler, after warm calls): rnncc's
    merge, input projection and recurrent kernels (by name), and the library's ("cublaslt")."""
    import torch
    from partition_profile import kernel_events
    for _ in range(3):
        model(x)
    torch.cuda.synchronize()
    out: dict[str, float] = {}
    for e in kernel_events(lambda: model(x)):
        kind = next((k for k in ("merge", "input_projection", "recurrent") if f"rnncc_{k}" in e["name"]), "cublaslt")
        out[kind] = out.get(kind, 0.0) + e["dur"]
    return out


def measure(path: Path, out_dir: Path, every: int, before: str, among: Path | None) -> None:
    import torch
    from rnncc.dtypes import max_relative_error, tolerance
    from rnncc.timing import time_graphs_interleaved, time_interleaved
    gpu = torch.cuda.get_device_name().split()[1].lower()
    out = out_dir / f"projection-moves-{gpu}.jsonl"
    ratios = {"graph": [], "eager": []}
    with out.open("w") as f:
        for key in points(path, every, among):
            dtype, cell, H, B, S, launches = key.split()
            models = {"before": compiled(key, "device", before), "after": compiled(key, "device", None)}
            row = {"key": key, **{k: describe(m) for k, m in models.items()}}
            if row["before"]["persistence"] != row["after"]["persistence"]:
                print(f"{key}: skipped, the persistence moved too ({row['before']['persistence']} -> "
                      f"{row['after']['persistence']})", flush=True)
                continue
            torch.manual_seed(0)
            x = torch.randn(int(S), int(B), int(H), device="cuda", dtype=getattr(torch, dtype))
            with torch.no_grad():
                outputs = [m(x)[0].float().cpu().numpy() for m in models.values()]
                row["error_after_vs_before"] = max_relative_error(outputs[1], outputs[0])
                row["agree"] = row["error_after_vs_before"] <= 2 * tolerance(dtype, "tensor")
                calls = {k: (lambda m=m: m(x)) for k, m in models.items()}
                graph = time_graphs_interleaved(calls, rounds=3, warmup=2, repeats=7)
                row.update({f"{k}_graph_us": v * 1e3 for k, v in graph.items()})
                row["graph_after_over_before"] = graph["after"] / graph["before"]
                ratios["graph"].append(row["graph_after_over_before"])
                if launches == "eager":  # the host's launches and library calls included
                    eager = time_interleaved(calls, warmup=3, repeats=12)
                    row.update({f"{k}_eager_us": v.median_ms * 1e3 for k, v in eager.items()})
                    row["eager_after_over_before"] = eager["after"].median_ms / eager["before"].median_ms
                    ratios["eager"].append(row["eager_after_over_before"])
                row["kernel_us"] = {k: kernel_us(m, x) for k, m in models.items()}
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(f"{key:<32} {row['before']['projection']:>44} -> {row['after']['projection']:<26} graph "
                  f"{row['before_graph_us']:8.1f} -> {row['after_graph_us']:8.1f} µs "
                  f"({row['graph_after_over_before']:.3f}×)"
                  + (f", eager {row['before_eager_us']:8.1f} -> {row['after_eager_us']:8.1f} "
                     f"({row['eager_after_over_before']:.3f}×)" if launches == "eager" else "")
                  + ("" if row["agree"] else "  DISAGREES")
                  + "".join(f"\n    {k}: " + ", ".join(f"{n} {v:.1f}" for n, v in sorted(us.items()))
                            for k, us in row["kernel_us"].items()), flush=True)
    for how, r in ratios.items():
        if r:
            r.sort()
            print(f"{how} ({'every plan' if how == 'graph' else 'plans of eager calls'}): {len(r)} moves, "
                  f"after ÷ before median {statistics.median(r):.3f}, best {r[0]:.3f}, worst {r[-1]:.3f}; "
                  f"slower by > 3%: {sum(x > 1.03 for x in r)}")
    print(f"wrote {out}")


def summary(path: Path) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    gates = {"lstm": 4, "gru": 3, "rnn_tanh": 1}
    groups: dict[tuple[str, bool], list[dict]] = {}
    for r in rows:
        _, cell, H, *_ = r["key"].split()
        groups.setdefault((r["before"]["projection"].split("(")[0], gates[cell] * int(H) % 8 == 0), []).append(r)
    for (before, aligned_m), rs in sorted(groups.items()):
        line = f"{before:<22} G·H % 8 {'= 0' if aligned_m else '≠ 0'}: {len(rs):3} moves"
        for how in ("graph", "eager"):
            r = sorted(x[f"{how}_after_over_before"] for x in rs if f"{how}_after_over_before" in x)
            if r:
                line += (f"; {how} after ÷ before median {statistics.median(r):.3f} ({r[0]:.3f}-{r[-1]:.3f}, "
                         f"{sum(x > 1.03 for x in r)} slower by > 3%)")
        library = [(x["kernel_us"]["before"].get("cublaslt"), x["kernel_us"]["after"].get("cublaslt"))
                   for x in rs if "kernel_us" in x and x["before"]["projection"].startswith("Library")
                   and x["before"]["persistence"] != "none/cublas"]
        if library:
            line += f"; cuBLASLt µs after ÷ before median {statistics.median(a / b for b, a in library):.3f}"
        print(line)


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    c = sub.add_parser("census")
    c.add_argument("out", type=Path)
    c.add_argument("--target", default="h200")
    a = sub.add_parser("ab")
    for parser in (c, a):
        parser.add_argument("--before", default="padding-off",
                            help="the planner before the change: padding-off (default) or unaligned=F,R")
    a.add_argument("census", type=Path)
    a.add_argument("-o", "--out", type=Path, default=Path("."))
    a.add_argument("--every", type=int, default=1, help="every Nth moved plan (default: %(default)s)")
    a.add_argument("--precompile", action="store_true")
    a.add_argument("--among", type=Path, help="only the plans this earlier A/B's jsonl timed")
    sub.add_parser("summary").add_argument("moves", type=Path)
    args = p.parse_args()
    if args.what == "summary":
        summary(args.moves)
    elif args.what == "census":
        census(args.out, args.target, args.before)
    elif args.precompile:
        precompile(args.census, args.every, args.before, args.among)
    else:
        measure(args.census, args.out, args.every, args.before, args.among)
