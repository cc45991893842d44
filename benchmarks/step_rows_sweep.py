"""Every rows tile of the step kernel, measured beside the plan's pick, the tiles form's best,
cuBLASLt's product with the cell kernel, and cuDNN: one layer from a given state, a launch
per step, each call captured in a CUDA graph and timed by replays, a point's candidates
interleaved in one process (rnncc.timing.time_graphs_interleaved). A step's time is
(T(S=17) − T(S=1)) / 16. The data the rows models (passes/cost.py, step_rows_seconds and
step_rows_tensor_seconds) are fitted to, and the check of their picks.

    python3 benchmarks/step_rows_sweep.py OUT_DIR   (from the repository root; needs a GPU)
    python3 benchmarks/step_rows_sweep.py OUT_DIR --points lstm:float32:1300:1,gru:float32:1536:8 --precision exact
        # other points (cell:dtype:H:B[:proj_size]); cuBLASLt's product in that precision
    python3 benchmarks/step_rows_sweep.py OUT_DIR --points ... --seqs 17,33 --same-projection
        # every form forced on the planner's plan, which keeps its projection (with the
        # default, gemm='rnncc' also moves the projection to rnncc's kernel, and its extra
        # rows' time reads as the step's); steps as (T(33) − T(17)) / 16
    RNNCC_CACHE_DIR=.cubins python3 benchmarks/step_rows_sweep.py OUT_DIR --points ... --build-only
        # no GPU: nvcc over the kernels the sweep runs on the H200, into the build cache

Writes OUT_DIR/step-rows-sweep-<gpu>-<date>.json and prints each point's ranking.
"""
import argparse
import json
import os
import sys
from dataclasses import replace

import torch

import rnncc
from rnncc.build import compile_all
from rnncc.cli import _environment
from rnncc.dtypes import DTYPES
from rnncc.passes.cost import step_kernel_seconds, step_rows_tensor_tiles, step_rows_tiles
from rnncc.passes.geometry import step_tile_label
from rnncc.plan import Decision
from rnncc.tiles import PerStep
from rnncc.timing import time_graphs_interleaved
from step_forms import SEQS, module_of  # benchmarks/step_forms.py, beside this file
from result_files import result_path

# (cell, dtype, H, B, proj_size)
POINTS = [("lstm", "float16", 1024, 1, 0), ("lstm", "float16", 1024, 4, 0), ("lstm", "float16", 1024, 8, 0),
          ("lstm", "float16", 1024, 16, 0), ("gru", "float16", 650, 5, 0), ("lstm", "bfloat16", 512, 8, 0),
          ("lstm", "float16", 256, 32, 0), ("lstm", "float16", 2048, 16, 0), ("lstm", "float16", 2048, 16, 512),
          ("lstm", "float32", 1024, 1, 0), ("lstm", "float32", 1024, 8, 0), ("gru", "float32", 256, 1, 0),
          ("rnn_tanh", "float16", 64, 1, 0)]


def with_step_tile(m, tile):
    return m.with_plan(m.plan.map_layers(lambda l: replace(l, step_tile=Decision(tile, "swept", "user"))))


def parse_points(text: str) -> list[tuple[str, str, int, int, int]]:
    """``cell:dtype:H:B[:proj_size]``, comma-separated."""
    out = []
    for item in text.split(","):
        cell, dtype, H, B, *proj = item.split(":")
        out.append((cell, dtype, int(H), int(B), int(proj[0]) if proj else 0))
    return out


def same_projection_forms(model, weights, target: str, B: int, seqs: tuple[int, ...], options: dict) -> dict:
    """The forms of --same-projection: each forced on one plan per S (the planner's, its
    projection included), so that every form runs the same projection and T(S) − T(S')
    is the steps' alone: gemm='rnncc' would also move the projection to rnncc's kernel,
    whose time over the extra rows then reads as the step's (LSTM fp32 H=1300 B=1: the
    rows kernel 12.0 µs a step so, 6.7 in S=256 forwards with cuBLASLt's projection,
    results/persistence-moves-h200-2026-11-29-replay.jsonl)."""
    base = {S: rnncc.compile(model, target=target, weights=weights, batch=B, seq_len=S, **options) for S in seqs}
    tiles = rnncc.compile(model, target=target, weights=weights, batch=B, seq_len=seqs[-1], gemm="rnncc",
                          step_kernel="tiles", **options).plan.layers[0].step_tile.value
    pick = base[seqs[-1]].plan.layers[0].step_tile.value
    fma = {S: m.with_persistence("l0", PerStep("fma"), "swept") for S, m in base.items()}
    return {"pick": {S: with_step_tile(m, pick) for S, m in fma.items()},
            "tiles best": {S: with_step_tile(m, tiles) for S, m in fma.items()},
            "cublas": {S: m.with_persistence("l0", PerStep("cublas"), "swept") for S, m in base.items()},
            "fma": fma}


def main(out: str, points: list, precision: str | None, build_only: bool, seqs: tuple[int, ...] = SEQS,
         same_projection: bool = False) -> int:
    target = "h200" if build_only else "device"
    options = {"persistence": "none", **({"precision": precision} if precision else {})}
    prepared = []
    for cell, dtype, H, B, proj in points:
        module = module_of(cell, dtype, H, proj, "cpu" if build_only else "cuda")
        model, weights = rnncc.from_torch(module)
        if same_projection:
            forms = same_projection_forms(model, weights, target, B, seqs, options)
            base = forms.pop("fma")
        else:
            base = {S: rnncc.compile(model, target=target, weights=weights, batch=B, seq_len=S, gemm="rnncc",
                                     **options) for S in seqs}
            forms = {"pick": base,
                     "tiles best": {S: rnncc.compile(model, target=target, weights=weights, batch=B, seq_len=S,
                                                     gemm="rnncc", step_kernel="tiles", **options) for S in seqs},
                     "cublas": {S: rnncc.compile(model, target=target, weights=weights, batch=B, seq_len=S,
                                                 gemm="cublas", **options) for S in seqs}}
        l = forms["pick"][seqs[-1]].plan.layers[0]
        itemsize = DTYPES[dtype].itemsize
        K = l.out_size
        candidates = step_rows_tiles(B, K, itemsize, base[seqs[-1]].target)
        if itemsize == 2:
            candidates += step_rows_tensor_tiles(B, l.gates, K, itemsize, base[seqs[-1]].target)
        forms = {f"pick {step_tile_label(l.step_tile.value)}" if k == "pick" else k: v for k, v in forms.items()}
        for t in candidates:
            forms[step_tile_label(t)] = {S: with_step_tile(base[S], t) for S in seqs}
        predicted = {step_tile_label(t): step_kernel_seconds(B, H, l.gates, t, base[seqs[-1]].target, itemsize, K) * 1e6
                     for t in candidates}
        prepared.append(((cell, dtype, H, B, proj), module, forms, predicted, l.step_tile.value))
    kernels = {k.name: k for *_, forms, _, _ in prepared for by_s in forms.values() for m in by_s.values()
               for k in m.kernels}
    print(f"nvcc: {len(kernels)} distinct kernels", file=sys.stderr)
    compile_all(list(kernels.values()), prepared[0][2]["cublas"][seqs[0]].target.arch)
    if build_only:
        return 0
    env = _environment(torch)
    commit = os.environ.get("RNNCC_COMMIT", "unknown")
    rows = []
    for (cell, dtype, H, B, proj), module, forms, predicted, pick in prepared:
        tdt = getattr(torch, dtype)
        x = {S: torch.randn(S, B, H, device="cuda", dtype=tdt) for S in seqs}
        h = torch.randn(1, B, proj or H, device="cuda", dtype=tdt)
        c = torch.randn(1, B, H, device="cuda", dtype=tdt)
        hx = (h, c) if cell == "lstm" else h
        state = {"l0": (h[0], c[0]) if cell == "lstm" else h[0]}
        fns = {f"{name} S={S}": (lambda m=m, S=S: m(x[S], state)) for name, by_s in forms.items()
               for S, m in by_s.items()}
        fns.update({f"cudnn S={S}": (lambda S=S: module(x[S], hx)) for S in seqs})
        with torch.no_grad():
            ms = time_graphs_interleaved(fns, rounds=3, warmup=3, repeats=20)
        short, long = seqs
        step_us = {name: (ms[f"{name} S={long}"] - ms[f"{name} S={short}"]) / (long - short) * 1e3
                   for name in [*forms, "cudnn"]}
        call_us = {name: ms[f"{name} S={short}"] * 1e3 for name in [*forms, "cudnn"]}
        row = {"cell": cell, "dtype": dtype, "hidden": H, "batch": B, "proj": proj, "precision": precision,
               "seqs": list(seqs), "same_projection": same_projection, "step_us": step_us, "call_s1_us": call_us, "predicted_step_us": predicted, "pick": step_tile_label(pick)}
        rows.append(row)
        print(f"== {cell} {dtype} H={H} B={B} P={proj}: pick {row['pick']}")
        for name in sorted(step_us, key=step_us.get):
            p = predicted.get(name)
            print(f"   {name:<34} step {step_us[name]:7.2f} µs  S={short} call {call_us[name]:7.2f} µs"
                  + (f"  predicted {p:6.2f}" if p is not None else ""), flush=True)
    path = result_path(out, "step-rows-sweep")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"environment": env, "commit": commit, "method":
                                "CUDA-graph replays interleaved (3 rounds, 3 warm-up, 20 replays); step = "
                                f"(T(S={long}) − T(S={short})) / {long - short}"
                                + ("; every form forced on the planner's plan (its projection)" if same_projection else "")
                                + "; predicted: cost.step_kernel_seconds (a launch's host "
                                "time included)", "results": rows}, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=".")
    parser.add_argument("--points", type=parse_points, default=POINTS, help="cell:dtype:H:B[:proj_size],...")
    parser.add_argument("--precision", choices=("exact", "tensor"),
                        help="every point's precision (cuBLASLt's product: exact is fp32 FMA; default: the planner's)")
    parser.add_argument("--build-only", action="store_true", help="nvcc only, the kernels planned for the H200")
    parser.add_argument("--seqs", type=lambda t: tuple(map(int, t.split(","))), default=SEQS,
                        help="the two lengths whose difference is the steps' time (default: 1,17)")
    parser.add_argument("--same-projection", action="store_true",
                        help="every form forced on the planner's plan, so all run its projection")
    args = parser.parse_args()
    sys.exit(main(args.out, args.points, args.precision, args.build_only, args.seqs, args.same_projection))
