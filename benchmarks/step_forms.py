"""A launch per step in each form, beside cuDNN: rnncc's step kernel as tiles and as rows
(step_kernel forced, gemm='rnncc'), cuBLASLt's product with rnncc's cell kernel
(gemm='cublas'), and the plan's own pick, for one layer from a given state. Each call is
captured in a CUDA graph and timed by replays, all forms of a point interleaved in one
process (rnncc.timing.time_graphs_interleaved); a step's time is (T(S=17) − T(S=1)) / 16,
which leaves out the launch-free part of a call. The plans' predicted step times are
written beside (the models' fit).

    python3 benchmarks/step_forms.py [--build-only] OUT_DIR [CASES [FORMS]]   (from the repository root)

--build-only plans for the H200 preset and builds the kernels into RNNCC_CACHE_DIR (no GPU),
to carry to the device; FORMS: a comma list of tiles, rows, cublas (default all; the plan's
own pick is always timed).

CASES: "small" (default; the shapes the graphed cuBLASLt step was first fitted on, B ≤ 32),
"losses" (the graphed plans the two-stage grid price, first form, moved to slower ones),
"unaligned" (K not whole 16-byte vectors, B = 8-256) or "wide" (B = 16-64, where a plan for graphed calls put 2 × GRU bf16 H=768 B=64 on cuBLASLt
steps and ran 1.33× slower than the eager plan's grid kernel on the H200,
results/graph-plans-h200-2026-11-28-at-dd06e38.json). Writes OUT_DIR/step-forms-<gpu>-<date>.json and
prints a table.
"""
import json
import os
import sys

import torch

import rnncc
from rnncc.build import compile_all
from rnncc.cli import _environment
from rnncc.passes.persistence import persistence_label
from rnncc.timing import time_graphs_interleaved
from result_files import result_path

# (cell, dtype, H, B, proj_size)
CASES = [("lstm", "float16", 1024, 1, 0), ("lstm", "float16", 1024, 4, 0), ("lstm", "float16", 1024, 8, 0),
         ("lstm", "float16", 1024, 16, 0), ("lstm", "float32", 1024, 1, 0), ("lstm", "float32", 1024, 8, 0),
         ("gru", "float16", 650, 5, 0), ("gru", "float32", 256, 1, 0), ("lstm", "bfloat16", 512, 8, 0),
         ("rnn_tanh", "float16", 64, 1, 0), ("lstm", "float16", 2048, 16, 0), ("lstm", "float16", 256, 32, 0),
         ("lstm", "float16", 2048, 16, 512)]
CASE_SETS = {"small": CASES,
             "wide": [("gru", "bfloat16", 768, 64, 0), ("lstm", "float16", 1024, 16, 0), ("lstm", "float16", 1024, 32, 0),
                      ("lstm", "float16", 1024, 64, 0), ("lstm", "float16", 512, 64, 0), ("gru", "float16", 1024, 32, 0),
                      ("lstm", "bfloat16", 256, 64, 0), ("gru", "float16", 2048, 64, 0)],
             # where pricing the grid pick as measured on the H200 moved plans for graphed calls
             # to slower ones (the two-stage grid price, first form; landed in 963fd0a): the library step at
             # one gate and large B, and LSTM H=1400-2048 at B=32-64
             "losses": [("rnn_tanh", "float16", 1400, 64, 0), ("rnn_tanh", "float16", 1536, 64, 0),
                        ("rnn_tanh", "float16", 1024, 64, 0), ("rnn_tanh", "float16", 2048, 32, 0),
                        ("lstm", "float16", 1400, 32, 0), ("lstm", "float16", 1536, 32, 0),
                        ("lstm", "float16", 2048, 64, 0), ("gru", "float16", 2048, 32, 0)],
             # K not whole 16-byte vectors (H not a multiple of 8 in 16 bits): cuBLASLt's graphed
             # step there ran 5-10 µs above its price at B = 64-256 in the unaligned grid refit's
             # A/B (persistence-moves-h200-2026-11-29-unaligned-refit-b.txt); two aligned controls
             "unaligned": [("gru", "float16", 650, 8, 0), ("gru", "float16", 900, 32, 0),
                           ("gru", "float16", 900, 64, 0), ("gru", "float16", 900, 128, 0),
                           ("gru", "float16", 1100, 16, 0), ("gru", "float16", 1100, 64, 0),
                           ("gru", "float16", 1100, 128, 0), ("gru", "float16", 1100, 256, 0),
                           ("gru", "float16", 1300, 64, 0), ("gru", "float16", 1300, 128, 0),
                           ("lstm", "float16", 650, 64, 0), ("lstm", "float16", 700, 128, 0),
                           ("lstm", "float16", 777, 64, 0), ("lstm", "float16", 777, 128, 0),
                           ("lstm", "float16", 777, 256, 0), ("lstm", "float16", 900, 256, 0),
                           ("lstm", "float16", 1100, 32, 0), ("lstm", "float16", 1100, 64, 0),
                           ("lstm", "float16", 1100, 128, 0), ("lstm", "bfloat16", 900, 64, 0),
                           ("rnn_tanh", "float16", 1300, 64, 0), ("rnn_tanh", "float16", 1100, 128, 0),
                           ("lstm", "float16", 768, 128, 0), ("gru", "float16", 1024, 256, 0)]}
FORMS = {"tiles": {"gemm": "rnncc", "step_kernel": "tiles"}, "rows": {"gemm": "rnncc", "step_kernel": "rows"},
         "cublas": {"gemm": "cublas"}}
SEQS = (1, 17)


def module_of(cell: str, dtype: str, H: int, proj: int, device: str = "cuda"):
    torch.manual_seed(0)
    kind = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn_tanh": torch.nn.RNN}[cell]
    extra = {"proj_size": proj} if proj else {}
    return kind(H, H, **extra).to(device, getattr(torch, dtype)).eval()


def main(out: str, cases: str = "small", form_names: str = ",".join(FORMS), build_only: bool = False) -> int:
    env = None if build_only else _environment(torch)
    commit = os.environ.get("RNNCC_COMMIT", "unknown")
    chosen = {name: FORMS[name] for name in form_names.split(",")}
    points = []
    for cell, dtype, H, B, proj in CASE_SETS[cases]:
        module = module_of(cell, dtype, H, proj, "cpu" if build_only else "cuda")
        model, weights = rnncc.from_torch(module)
        forms = {}
        for name, options in {**chosen, "planned": {}}.items():
            forms[name] = {S: rnncc.compile(model, target="h200" if build_only else "device", weights=weights,
                                            batch=B, seq_len=S,
                                            **({"persistence": "none", **options} if options else {}))
                           for S in SEQS}
        points.append(((cell, dtype, H, B, proj), module, forms))
    kernels = {k.name: k for *_, forms in points for by_s in forms.values() for m in by_s.values()
               for k in m.kernels}
    print(f"nvcc: {len(kernels)} distinct kernels", file=sys.stderr)
    compile_all(list(kernels.values()), points[0][2]["planned"][1].target.arch)
    if build_only:
        return 0
    rows = []
    for (cell, dtype, H, B, proj), module, forms in points:
        tdt = getattr(torch, dtype)
        P = proj or H
        x = {S: torch.randn(S, B, H, device="cuda", dtype=tdt) for S in SEQS}
        h, c = torch.randn(1, B, P, device="cuda", dtype=tdt), torch.randn(1, B, H, device="cuda", dtype=tdt)
        hx = (h, c) if cell == "lstm" else h
        state = {"l0": (h[0], c[0]) if cell == "lstm" else h[0]}
        fns = {}
        for name, by_s in forms.items():
            for S, m in by_s.items():
                fns[f"{name} S={S}"] = (lambda m=m, S=S: m(x[S], state))
        for S in SEQS:
            fns[f"cudnn S={S}"] = (lambda S=S: module(x[S], hx))
        with torch.no_grad():
            ms = time_graphs_interleaved(fns, rounds=3, warmup=3, repeats=20)
        step_us = {name: (ms[f"{name} S=17"] - ms[f"{name} S=1"]) / 16 * 1e3 for name in [*forms, "cudnn"]}
        call_us = {name: ms[f"{name} S=1"] * 1e3 for name in [*forms, "cudnn"]}
        planned = forms["planned"][17].plan.layers[0]
        predicted = {}
        for name in chosen:
            l = forms[name][17].plan.layers[0]
            predicted[name] = l.persistence.alternatives[persistence_label(l.persistence.value)] * 1e6
        tiles = {name: forms[name][17].plan.layers[0].step_tile.value.to_dict()
                 for name in ("tiles", "rows") if name in chosen}
        row = {"cell": cell, "dtype": dtype, "hidden": H, "batch": B, "proj": proj, "step_us": step_us,
               "call_s1_us": call_us, "predicted_step_us": predicted, "tiles": tiles,
               "planned": f"{planned.persistence.value.mode}/{planned.persistence.value.math}/"
                          f"{planned.step_tile.value.math}"}
        rows.append(row)
        print(f"{cell:<8} {dtype:<8} H={H:<5} B={B:<3} P={proj:<4} step µs: "
              + " ".join(f"{k} {v:6.1f}" for k, v in step_us.items())
              + "  | S=1 call µs: " + " ".join(f"{k} {v:6.1f}" for k, v in call_us.items())
              + "  | predicted: " + " ".join(f"{k} {v:5.1f}" for k, v in predicted.items())
              + f"  | planned {row['planned']}", flush=True)
    path = result_path(out, "step-forms")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"environment": env, "commit": commit, "method":
                                "CUDA-graph replays, forms interleaved (time_graphs_interleaved: 3 rounds, 3 "
                                "warm-up, 20 replays); step = (T(S=17) − T(S=1)) / 16; predicted: the plan's "
                                "price of its per-step form (a launch's host time included)", "results": rows},
                               indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    build_only = "--build-only" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--build-only"]
    sys.exit(main(*args[:3], build_only=build_only) if args else main(".", build_only=build_only))
