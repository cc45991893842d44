"""The schedule's picks over a census of stacks, for comparing two checkouts of rnncc on
this machine (no GPU): run `plans` once per checkout (its directory first on PYTHONPATH),
then `diff` the two files.

    PYTHONPATH=old python3 benchmarks/schedule_census.py plans /tmp/old.json [N]
    PYTHONPATH=.   python3 benchmarks/schedule_census.py plans /tmp/new.json [N]
    python3 benchmarks/schedule_census.py diff /tmp/old.json /tmp/new.json [-o MOVED.json]
    python3 benchmarks/schedule_census.py ab MOVED.json [-o DIR] [--build-only]

`plans` compiles N stacks (default 500, drawn with a fixed seed from 2-8 layers, H 128-2048,
fp16/bf16/fp32, LSTM/GRU, B 1-64, S 16-256), plus the bench's 4 × and 8 × stacks, for the
H100 preset, each for eager and for graphed calls, and records each plan's schedule, its
predicted time and its layers' projection kinds. `diff` counts what moved: to another
chunk or partition, only the chunks' projections, or between sequential and pipelined.

`ab` (on the GPU) times each stack whose schedule moved, with the code that runs it: the
plan as it now chooses beside its sequential plan forced into the old schedule
(pipeline_schedule.with_chunk, which re-tiles grid layers to the old partitions), CUDA-graph
replays interleaved and, for plans of eager calls, eager calls; it writes
DIR/schedule-moves-<gpu>.jsonl. Where a change also moved the layers' persistence, the old
schedule runs on the new layers' kernels.
"""

from __future__ import annotations

import argparse
import ast
import collections
import json
import random
import re
import warnings


def census(n: int) -> list[tuple]:
    configs = [(L, H, dtype, cell, B, S)
               for L in (2, 3, 4, 8) for H in (128, 256, 333, 512, 650, 768, 1024, 1536, 2048)
               for dtype in ("float16", "bfloat16", "float32") for cell in ("lstm", "gru")
               for B in (1, 3, 8, 20, 64) for S in (16, 35, 100, 128, 256)]
    random.Random(1).shuffle(configs)
    return configs[:n] + [(8, 512, "float16", "lstm", 8, 256), (4, 1024, "float16", "lstm", 8, 256),
                          (4, 512, "float32", "lstm", 8, 256), (2, 1024, "float16", "lstm", 8, 256)]


def plans(path: str, n: int) -> None:
    warnings.filterwarnings("ignore")
    import rnncc

    out = {}
    for L, H, dtype, cell, B, S in census(n):
        spec = {"name": "s", "dtype": dtype, "input_size": H,
                "layers": [{"name": f"l{i}", "cell": cell, "hidden_size": H} for i in range(1, L + 1)]}
        for launches in ("eager", "graph"):
            key = str((L, H, dtype, cell, B, S, launches))
            try:
                plan = rnncc.compile(spec, target="h100", seq_len=S, batch=B, launches=launches).plan
            except Exception as e:  # a census point the planner refuses is recorded as such
                out[key] = {"error": type(e).__name__}
                continue
            d = plan.schedule
            out[key] = {"schedule": d.value.label, "predicted_us": round(min(d.alternatives.values()) * 1e6, 1),
                        "projections": sorted({type(l.projection_tile.value).__name__ for l in plan.layers})}
    with open(path, "w") as f:
        json.dump({"rnncc_from": rnncc.__file__, "plans": out}, f, indent=0)
    print(f"wrote {path}: {len(out)} plans")


def diff(old_path: str, new_path: str, moved_path: str | None) -> None:
    old, new = (json.load(open(p))["plans"] for p in (old_path, new_path))
    kinds: collections.Counter = collections.Counter()
    moved = {}
    for key, o in old.items():
        n = new.get(key)
        if n is None or o == n or (o.get("schedule"), o.get("projections")) == (n.get("schedule"), n.get("projections")):
            continue
        so, sn = (str(x.get("schedule", x.get("error"))).split(" C=")[0] for x in (o, n))
        kinds[f"{so} → {sn}" if so != sn else
              "chunk or partitions" if o.get("schedule") != n.get("schedule") else "projections only"] += 1
        moved[key] = {"old": o, "new": n}
    print(f"{len(moved)} of {len(old)} plans moved: {dict(kinds)}")
    if moved_path:
        with open(moved_path, "w") as f:
            json.dump({"old": old_path, "new": new_path, "plans": len(old), "moved_by_kind": dict(kinds),
                       "moved": moved}, f, indent=1, ensure_ascii=False)
        print(f"wrote {moved_path}")


def ab(moved_path: str, out: str, build_only: bool) -> None:
    import rnncc
    from pipeline_schedule import with_chunk

    moved = json.load(open(moved_path))["moved"]
    target = "h100" if build_only else "device"
    cases = []
    for key, plans_ in moved.items():
        L, H, dtype, cell, B, S, launches = ast.literal_eval(key)
        was, now = plans_["old"].get("schedule"), plans_["new"].get("schedule")
        if was is None or now is None:
            continue
        spec = {"name": "s", "dtype": dtype, "input_size": H,
                "layers": [{"name": f"l{i}", "cell": cell, "hidden_size": H} for i in range(1, L + 1)]}
        chosen = rnncc.compile(spec, target=target, seq_len=S, batch=B, launches=launches)
        base = rnncc.compile(spec, target=target, seq_len=S, batch=B, launches=launches, schedule="sequential")
        m = re.fullmatch(r"pipelined C=(\d+)(?: parts=(\d+))?", was)
        before = base if m is None else with_chunk(base, int(m.group(1)), int(m.group(2) or 1))
        cases.append(((L, H, dtype, cell, B, S, launches), was, now, before, chosen))
    print(f"{len(cases)} moved schedules", flush=True)
    from rnncc.build import compile_all
    kernels = {k.name: k for *_, b, c in cases for m in (b, c) for k in m.kernels}
    compile_all(list(kernels.values()), cases[0][3].target.arch)
    if build_only:
        return
    import torch

    from rnncc.timing import time_graphs_interleaved, time_interleaved

    rows, ratios = [], []
    for (L, H, dtype, cell, B, S, launches), was, now, before, after in cases:
        x = torch.randn(S, B, H, device="cuda", dtype=getattr(torch, dtype))
        fns = {"before": lambda m=before: m(x), "after": lambda m=after: m(x)}
        graph = time_graphs_interleaved(fns)
        row = {"layers": L, "H": H, "dtype": dtype, "cell": cell, "B": B, "S": S, "launches": launches,
               "before": was, "after": now, "before_graph_us": round(graph["before"] * 1e3, 1),
               "after_graph_us": round(graph["after"] * 1e3, 1)}
        line = (f"{L} × {cell} {dtype} H={H} B={B} S={S} ({launches}): {was} -> {now}: graph "
                f"{row['before_graph_us']:8.1f} -> {row['after_graph_us']:8.1f} µs")
        if launches == "eager":
            eager = time_interleaved(fns, warmup=2, repeats=10)
            row |= {"before_eager_us": round(eager["before"].median_ms * 1e3, 1),
                    "after_eager_us": round(eager["after"].median_ms * 1e3, 1)}
            line += f", eager {row['before_eager_us']:8.1f} -> {row['after_eager_us']:8.1f}"
        measure = "eager" if launches == "eager" else "graph"
        row["after_over_before"] = round(row[f"after_{measure}_us"] / row[f"before_{measure}_us"], 3)
        ratios.append(row["after_over_before"])
        print(f"{line} ({row['after_over_before']:.3f}× as planned for)", flush=True)
        rows.append(row)
    ratios.sort()
    print(f"{len(ratios)} moves: after ÷ before median {ratios[len(ratios) // 2]:.3f}, best {ratios[0]:.3f}, "
          f"worst {ratios[-1]:.3f}; slower by > 3%: {sum(r > 1.03 for r in ratios)}")
    gpu = torch.cuda.get_device_name().split()[1].lower()
    path = f"{out}/schedule-moves-{gpu}.jsonl"
    with open(path, "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("plans")
    p.add_argument("path")
    p.add_argument("n", nargs="?", type=int, default=500)
    d = sub.add_parser("diff")
    d.add_argument("old")
    d.add_argument("new")
    d.add_argument("-o", "--output")
    a = sub.add_parser("ab")
    a.add_argument("moved")
    a.add_argument("-o", "--output", default="benchmarks/results")
    a.add_argument("--build-only", action="store_true", help="plan for the h100 preset and compile, no GPU")
    args = ap.parse_args()
    if args.what == "plans":
        plans(args.path, args.n)
    elif args.what == "diff":
        diff(args.old, args.new, args.output)
    else:
        ab(args.moved, args.output, args.build_only)


if __name__ == "__main__":
    main()
