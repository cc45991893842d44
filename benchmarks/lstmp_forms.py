"""A projected LSTM (LSTMP, torch.nn.LSTM's proj_size) in its two forms beside cuDNN, over
speech-model shapes and odd ones: rnncc as planned (folded where predicted faster), rnncc
forced per step (persistence='none'), torch.nn (cuDNN), each eager and captured in a CUDA
graph, in one process; the plan's h_projection decision with its predicted µs a step.

    python3 benchmarks/lstmp_forms.py OUT_DIR   (from the repository root; needs a GPU)

Writes OUT_DIR/lstmp-forms-<gpu>-<date>.json and prints a table.
"""
import json
import sys

import torch

import rnncc
from rnncc.bench import graph_baselines
from rnncc.cli import _environment
from rnncc.dtypes import max_relative_error
from rnncc.timing import time_interleaved
from result_files import result_path

# (dtype, layers, H, P, B, S, bidirectional): the bench's row, then speech shapes and odd ones.
SHAPES = [("float16", 2, 1024, 256, 8, 256, False), ("float16", 2, 1024, 256, 64, 256, False),
          ("float16", 1, 640, 160, 5, 37, True), ("float32", 2, 512, 128, 8, 256, False),
          ("bfloat16", 1, 768, 256, 3, 1000, False), ("float16", 3, 2048, 512, 16, 128, False),
          ("float32", 1, 1024, 256, 1, 7, False)]


def run(dtype, layers, H, P, B, S, bidirectional) -> dict:
    torch.manual_seed(0)
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    tdt = getattr(torch, dtype)
    module = torch.nn.LSTM(H, H, num_layers=layers, proj_size=P, bidirectional=bidirectional)
    module = module.to("cuda", tdt).eval()
    model, weights = rnncc.from_torch(module)
    forms = {"planned": rnncc.compile(model, target="device", weights=weights, seq_len=S, batch=B),
             "per step": rnncc.compile(model, target="device", weights=weights, seq_len=S, batch=B,
                                       persistence="none")}
    x = torch.randn(S, B, H, device="cuda", dtype=tdt)
    row = {"dtype": dtype, "layers": layers, "hidden": H, "proj": P, "batch": B, "seq_len": S,
           "bidirectional": bidirectional}
    with torch.no_grad():
        want = module(x)[0].float().cpu().numpy()
        for name, m in forms.items():
            row[f"{name} error vs cudnn"] = max_relative_error(m(x)[0].float().cpu().numpy(), want)
        first = forms["planned"].plan.layers[0]
        row["planned form"] = f"{first.h_projection.value} ({first.persistence.value.mode})"
        row["predicted us/step"] = {k: v * 1e6 for k, v in first.h_projection.alternatives.items()} \
            if first.h_projection.alternatives else None
        timed = time_interleaved({"cudnn": lambda: module(x), **{n: (lambda m=m: m(x)) for n, m in forms.items()}},
                                 3, 20, settle=1)
        for name, t in timed.items():
            row[f"{name} ms"] = t.median_ms
        for name, m in forms.items():
            g = graph_baselines(module, m, x, 3, 20)
            row[f"{name} graph ms"], row["cudnn graph ms"] = g["rnncc_graph_ms"], g["cudnn_graph_ms"]
    return row


def main(out: str) -> None:
    rows = []
    for shape in SHAPES:
        try:
            rows.append(run(*shape))
        except Exception as exc:  # noqa: BLE001 - a shape that fails is a row that says so
            rows.append({"shape": shape, "error": f"{type(exc).__name__}: {exc}"[:400]})
        r = rows[-1]
        if "error" in r:
            print(r, flush=True)
            continue
        print(f"{r['dtype']:>8} L={r['layers']} H={r['hidden']} P={r['proj']} B={r['batch']} S={r['seq_len']}"
              f"{' bi' if r['bidirectional'] else ''}: {r['planned form']}; eager ms planned "
              f"{r['planned ms']:.3f} per-step {r['per step ms']:.3f} cudnn {r['cudnn ms']:.3f} "
              f"({r['cudnn ms'] / r['planned ms']:.2f}x); graph ms planned {r['planned graph ms']:.3f} "
              f"per-step {r['per step graph ms']:.3f} cudnn {r['cudnn graph ms']:.3f} "
              f"({r['cudnn graph ms'] / r['planned graph ms']:.2f}x); error planned "
              f"{r['planned error vs cudnn']:.1e} per-step {r['per step error vs cudnn']:.1e}; "
              f"predicted {r['predicted us/step']}", flush=True)
    with open(result_path(out, "lstmp-forms"), "w") as f:
        json.dump({"environment": _environment(torch), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
