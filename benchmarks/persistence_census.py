"""The persistence one-layer plans take over a grid of shapes, and, on the GPU, the plans a
change moved timed both ways: for a change to the cost model, what it moves and whether
each move runs faster.

    python3 benchmarks/persistence_census.py census OUT.json [--target h200] [--dtypes D,..] [--hidden H,..] [--batch B,..]
        # no GPU: {"dtype cell H B S launches": [persistence, backward tile]} at CELLS × H × B × S
    python3 benchmarks/persistence_census.py moved BEFORE.json AFTER.json
        # no GPU: the plans that moved, grouped by dtype and persistence before → after
    python3 benchmarks/persistence_census.py ab BEFORE.json AFTER.json [-o DIR] [--limit N]
        # GPU: every S=256 eager plan whose persistence moved, both ways, forced in turn on the
        # same model and timed as CUDA-graph replays of the forward at S=256 and S=35, and as
        # eager calls at S=256 (the host's launches included)
    python3 benchmarks/persistence_census.py ab BEFORE.json AFTER.json --launches graph
        # the same for the plans of graphed calls (CUDA-graph replays only)
    python3 benchmarks/persistence_census.py ab BEFORE.json AFTER.json --length 35
        # the plans for S=35 that moved (after ÷ before then reads S=35)
    RNNCC_CACHE_DIR=.cubins python3 benchmarks/persistence_census.py ab BEFORE.json AFTER.json --precompile

`ab` writes persistence-moves-<gpu>.jsonl, a line a moved shape: both persistences, the
forward's µs each way at both lengths, and after ÷ before. Float32 layers are planned with
precision "exact" (FMA), half layers by the planner's choice.
"""

from __future__ import annotations

import argparse
import itertools
import json
import warnings
from pathlib import Path

import rnncc
import rnncc.tiles
from rnncc import spec as spec_mod
from rnncc.pipeline import build_plan
from rnncc.plan import CompileOptions
from rnncc.target import get

DTYPES = ("float32", "float16")
CELLS = ("lstm", "gru", "rnn_tanh")
HIDDEN = (32, 64, 100, 128, 200, 256, 300, 384, 512)
BATCH = (1, 4, 8, 16, 20, 32, 48, 64, 96, 128, 256)
LENGTHS = (35, 256)


def layer_spec(dtype: str, cell: str, H: int) -> dict:
    return {"name": "c", "dtype": dtype, "input_size": H, "layers": [{"name": "l0", "cell": cell, "hidden_size": H}]}


def precision(dtype: str) -> dict:
    return {"precision": "exact"} if dtype == "float32" else {}


def layer_plan(dtype: str, cell: str, H: int, B: int, S: int, launches: str, target, **options):
    """The one layer's plan (a LayerPlan) for B, S and ``launches`` calls on ``target`` (a
    Target), in the census's precision, with further CompileOptions ``options``."""
    model = spec_mod.load(layer_spec(dtype, cell, H))
    return build_plan(model, target, CompileOptions(batch=B, seq_len=S, launches=launches, **precision(dtype),
                                                    **options)).layers[0]


def census(path: Path, target: str, dtypes=DTYPES, hidden=HIDDEN, batch=BATCH) -> None:
    t, out = get(target), {}
    for dtype, cell, H, B, S in itertools.product(dtypes, CELLS, hidden, batch, LENGTHS):
        for launches in ("eager", "graph"):
            layer = layer_plan(dtype, cell, H, B, S, launches, t, backward_gates="auto")
            out[f"{dtype} {cell} {H} {B} {S} {launches}"] = [
                str(layer.persistence.value), str(layer.backward_tile and layer.backward_tile.value)]
    path.write_text(json.dumps(out, indent=0))
    print(f"{len(out)} plans written to {path}")


def moves(before: Path, after: Path, limit: int | None, launches: str = "eager",
          length: int = 256) -> list[tuple[str, str, int, int, str, str]]:
    """(dtype, cell, H, B, persistence before, after) of each plan for ``length`` steps and
    ``launches`` calls that moved."""
    old, new = json.loads(before.read_text()), json.loads(after.read_text())
    out = []
    for key, (persistence, _) in old.items():
        dtype, cell, H, B, S, planned_for = key.split()
        if int(S) == length and planned_for == launches and new[key][0] != persistence:
            out.append((dtype, cell, int(H), int(B), persistence, new[key][0]))
    return out[:limit]


def key_of(persistence: str) -> str:
    """The short label of a persistence's alternative: its mode ('grid', 'cluster'), or
    'none/fma' and 'none/lib' for a launch a step on rnncc's kernel or cuBLASLt's."""
    if persistence.startswith("PerStep"):
        return "none/lib" if "cublas" in persistence else "none/fma"
    return persistence.split("'")[1]


def mode_of(persistence: str) -> str:
    """key_of with a persistent mode's tile class ('grid/StagedPersistentTile')."""
    key = key_of(persistence)
    return key if key.startswith("none") else f"{key}/{persistence.split('tile=')[1].split('(')[0]}"


def moved(before: Path, after: Path) -> None:
    """Prints the plans that moved between two census files, grouped by dtype and persistence
    before → after, with the cells, H, B, lengths and launches each group spans."""
    old, new = json.loads(before.read_text()), json.loads(after.read_text())
    groups: dict[tuple, list[list[str]]] = {}
    for key, (persistence, _) in old.items():
        if new[key][0] != persistence:
            groups.setdefault((key.split()[0], mode_of(persistence), mode_of(new[key][0])), []).append(key.split())
    changes = sum(len(v) for k, v in groups.items() if k[1].split("/")[0] != k[2].split("/")[0])
    print(f"{sum(map(len, groups.values()))} of {len(old)} plans moved; mode changes: {changes}")
    for key, keys in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        spans = [sorted({k[i] for k in keys}, key=lambda v: (len(v), v)) for i in (1, 2, 3, 4, 5)]
        print(len(keys), key, *(f"{name} {span}" for name, span in zip(("cells", "H", "B", "S", "launches"), spans)))


def forced(dtype: str, cell: str, H: int, B: int, S: int, persistences: tuple[str, ...], target: str,
           launches: str = "eager"):
    """The layer compiled once (planned for ``launches`` calls), then with each persistence
    (a repr) forced in turn."""
    base = rnncc.compile(spec_mod.load(layer_spec(dtype, cell, H)), target=target, batch=B, seq_len=S,
                         launches=launches, **precision(dtype))
    return [base.with_persistence("l0", eval(p, vars(rnncc.tiles)), "forced by persistence_census")
            for p in persistences]


def measure(before: Path, after: Path, out_dir: Path, limit: int | None, launches: str = "eager",
            length: int = 256) -> None:
    import torch
    from rnncc.timing import time_graph, time_interleaved
    torch.backends.cuda.matmul.allow_tf32 = False
    gpu = torch.cuda.get_device_name().split()[1].lower()
    path = out_dir / (f"persistence-moves-{gpu}{'-graph' if launches == 'graph' else ''}"
                      f"{'' if length == 256 else f'-s{length}'}.jsonl")
    ratios = []
    with path.open("w") as f:
        for dtype, cell, H, B, old, new in moves(before, after, limit, launches, length):
            row = {"dtype": dtype, "cell": cell, "H": H, "B": B, "launches": launches, "before": old, "after": new}
            for S in (256, 35):
                torch.manual_seed(0)
                x = torch.randn(S, B, H, device="cuda", dtype=getattr(torch, dtype))
                models = forced(dtype, cell, H, B, S, (old, new), "device", launches)
                for m in models:  # built and warm before either is timed
                    m(x)
                times = [[], []]
                for _ in range(3):  # interleaved, so that drift falls on both
                    for i, m in enumerate(models):
                        times[i].append(time_graph(lambda: m(x), 2, 5).median_ms * 1e3)
                row[f"before_us_s{S}"], row[f"after_us_s{S}"] = (sorted(t)[1] for t in times)
                if S == length and launches == "eager":  # eager calls too (the host's launches): what the plan is for
                    eager = time_interleaved({"before": lambda: models[0](x), "after": lambda: models[1](x)}, 2, 6)
                    row[f"before_eager_us_s{S}"], row[f"after_eager_us_s{S}"] = (
                        eager[k].median_ms * 1e3 for k in ("before", "after"))
            row["after_over_before"] = row[f"after_us_s{length}"] / row[f"before_us_s{length}"]
            ratios.append(row["after_over_before"])
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(f"{dtype} {cell} H={H} B={B}: S=256 {row['before_us_s256']:8.1f} -> {row['after_us_s256']:8.1f} µs "
                  f"({row['after_us_s256'] / row['before_us_s256']:.3f}×), S=35 {row['before_us_s35']:7.1f} -> {row['after_us_s35']:7.1f}"
                  + (f", eager S={length} {row[f'before_eager_us_s{length}']:8.1f} -> {row[f'after_eager_us_s{length}']:8.1f}"
                     if launches == "eager" else ""), flush=True)
    if ratios:
        ratios.sort()
        print(f"{len(ratios)} moves: after ÷ before median {ratios[len(ratios) // 2]:.3f}, "
              f"best {ratios[0]:.3f}, worst {ratios[-1]:.3f}; slower by > 3%: {sum(r > 1.03 for r in ratios)}")
    print(f"wrote {path}")


def precompile(before: Path, after: Path, limit: int | None, launches: str = "eager", length: int = 256) -> None:
    from staged_sweep import build_kernels  # benchmarks/ is this script's directory
    build_kernels(m for dtype, cell, H, B, old, new in moves(before, after, limit, launches, length) for S in (256, 35)
                  for m in forced(dtype, cell, H, B, S, (old, new), "h200", launches))


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    c = sub.add_parser("census")
    c.add_argument("out", type=Path)
    c.add_argument("--target", default="h200")
    c.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated (default: %(default)s)")
    c.add_argument("--hidden", default=",".join(map(str, HIDDEN)), help="comma-separated H (default: %(default)s)")
    c.add_argument("--batch", default=",".join(map(str, BATCH)), help="comma-separated B (default: %(default)s)")
    m = sub.add_parser("moved")
    m.add_argument("before", type=Path)
    m.add_argument("after", type=Path)
    a = sub.add_parser("ab")
    a.add_argument("before", type=Path)
    a.add_argument("after", type=Path)
    a.add_argument("-o", "--out", type=Path, default=Path("."))
    a.add_argument("--limit", type=int)
    a.add_argument("--precompile", action="store_true")
    a.add_argument("--launches", choices=("eager", "graph"), default="eager",
                   help="the plans for eager calls (default) or for graphed calls that moved")
    a.add_argument("--length", type=int, choices=LENGTHS, default=256,
                   help="the plans for this many steps that moved (default: %(default)s)")
    args = p.parse_args()
    if args.what == "census":
        census(args.out, args.target, tuple(args.dtypes.split(",")),
               tuple(int(h) for h in args.hidden.split(",")), tuple(int(b) for b in args.batch.split(",")))
    elif args.what == "moved":
        moved(args.before, args.after)
    elif args.precompile:
        precompile(args.before, args.after, args.limit, args.launches, args.length)
    else:
        measure(args.before, args.after, args.out, args.limit, args.launches, args.length)
