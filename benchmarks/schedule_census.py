"""The schedule's picks over a census of stacks, for comparing two checkouts of rnncc on
this machine (no GPU): run `plans` once per checkout (its directory first on PYTHONPATH),
then `diff` the two files.

    PYTHONPATH=old python3 benchmarks/schedule_census.py plans /tmp/old.json [N]
    PYTHONPATH=.   python3 benchmarks/schedule_census.py plans /tmp/new.json [N]
    python3 benchmarks/schedule_census.py diff /tmp/old.json /tmp/new.json [-o MOVED.json]

`plans` compiles N stacks (default 500, drawn with a fixed seed from 2-8 layers, H 128-2048,
fp16/bf16/fp32, LSTM/GRU, B 1-64, S 16-256), plus the bench's 4 × and 8 × stacks, for the
H100 preset, each for eager and for graphed calls, and records each plan's schedule, its
predicted time and its layers' projection kinds. `diff` counts what moved: to another
chunk or partition, only the chunks' projections, or between sequential and pipelined.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
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
    args = ap.parse_args()
    if args.what == "plans":
        plans(args.path, args.n)
    else:
        diff(args.old, args.new, args.output)


if __name__ == "__main__":
    main()
