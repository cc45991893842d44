"""Every rows tile of the step kernel, measured beside the plan's pick, the tiles form's best,
cuBLASLt's product with the cell kernel, and cuDNN: one layer from a given state, a launch
per step, each call captured in a CUDA graph and timed by replays, a point's candidates
interleaved in one process (rnncc.timing.time_graphs_interleaved). A step's time is
(T(S=17) − T(S=1)) / 16. The data the rows models (passes/cost.py, step_rows_seconds and
step_rows_tensor_seconds) are fitted to, and the check of their picks.

    python3 benchmarks/step_rows_sweep.py OUT_DIR   (from the repository root; needs a GPU)

Writes OUT_DIR/step-rows-sweep-<gpu>-<date>.json and prints each point's ranking.
"""
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


def main(out: str) -> int:
    env = _environment(torch)
    commit = os.environ.get("RNNCC_COMMIT", "unknown")
    prepared = []
    for cell, dtype, H, B, proj in POINTS:
        module = module_of(cell, dtype, H, proj)
        model, weights = rnncc.from_torch(module)
        base = {S: rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=S, persistence="none",
                                 gemm="rnncc") for S in SEQS}
        library = {S: rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=S, persistence="none",
                                    gemm="cublas") for S in SEQS}
        tiles_best = {S: rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=S,
                                       persistence="none", gemm="rnncc", step_kernel="tiles") for S in SEQS}
        l = base[17].plan.layers[0]
        itemsize = DTYPES[dtype].itemsize
        K = l.out_size
        candidates = step_rows_tiles(B, K, itemsize, base[17].target)
        if itemsize == 2:
            candidates += step_rows_tensor_tiles(B, l.gates, K, itemsize, base[17].target)
        forms = {f"pick {step_tile_label(l.step_tile.value)}": base, "tiles best": tiles_best, "cublas": library}
        for t in candidates:
            forms[step_tile_label(t)] = {S: with_step_tile(base[S], t) for S in SEQS}
        predicted = {step_tile_label(t): step_kernel_seconds(B, H, l.gates, t, base[17].target, itemsize, K) * 1e6
                     for t in candidates}
        prepared.append(((cell, dtype, H, B, proj), module, forms, predicted, l.step_tile.value))
    kernels = {k.name: k for *_, forms, _, _ in prepared for by_s in forms.values() for m in by_s.values()
               for k in m.kernels}
    print(f"nvcc: {len(kernels)} distinct kernels", file=sys.stderr)
    compile_all(list(kernels.values()), prepared[0][2]["cublas"][1].target.arch)
    rows = []
    for (cell, dtype, H, B, proj), module, forms, predicted, pick in prepared:
        tdt = getattr(torch, dtype)
        x = {S: torch.randn(S, B, H, device="cuda", dtype=tdt) for S in SEQS}
        h = torch.randn(1, B, proj or H, device="cuda", dtype=tdt)
        c = torch.randn(1, B, H, device="cuda", dtype=tdt)
        hx = (h, c) if cell == "lstm" else h
        state = {"l0": (h[0], c[0]) if cell == "lstm" else h[0]}
        fns = {f"{name} S={S}": (lambda m=m, S=S: m(x[S], state)) for name, by_s in forms.items()
               for S, m in by_s.items()}
        fns.update({f"cudnn S={S}": (lambda S=S: module(x[S], hx)) for S in SEQS})
        with torch.no_grad():
            ms = time_graphs_interleaved(fns, rounds=3, warmup=3, repeats=20)
        step_us = {name: (ms[f"{name} S=17"] - ms[f"{name} S=1"]) / 16 * 1e3 for name in [*forms, "cudnn"]}
        call_us = {name: ms[f"{name} S=1"] * 1e3 for name in [*forms, "cudnn"]}
        row = {"cell": cell, "dtype": dtype, "hidden": H, "batch": B, "proj": proj, "step_us": step_us,
               "call_s1_us": call_us, "predicted_step_us": predicted, "pick": step_tile_label(pick)}
        rows.append(row)
        print(f"== {cell} {dtype} H={H} B={B} P={proj}: pick {row['pick']}")
        for name in sorted(step_us, key=step_us.get):
            p = predicted.get(name)
            print(f"   {name:<34} step {step_us[name]:7.2f} µs  S=1 call {call_us[name]:7.2f} µs"
                  + (f"  predicted {p:6.2f}" if p is not None else ""), flush=True)
    path = result_path(out, "step-rows-sweep")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"environment": env, "commit": commit, "method":
                                "CUDA-graph replays interleaved (3 rounds, 3 warm-up, 20 replays); step = "
                                "(T(S=17) − T(S=1)) / 16; predicted: cost.step_kernel_seconds (a launch's host "
                                "time included)", "results": rows}, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
