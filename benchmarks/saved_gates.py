"""A training step with the gates' pre-activations saved by the forward against the same
step recomputing them in the backward (two GEMMs a layer), beside cuDNN, in one process.

For each of ``rnncc bench``'s forward+backward rows (or the rows named on the command
line as cell,dtype,H,B[,S]), the twin of a torch.nn module takes
``torch.autograd.grad`` from its output to the input and every parameter three ways:
cuDNN (the module), rnncc as it trains (its training forward compiled with
backward_gates="save") and rnncc with a training forward that saves nothing (its plans'
"recompute", the path before saving). Each is timed eager (drained, interleaved: the
bench's method) and as a CUDA-graph replay (its GPU time). Then, without row arguments,
the forward alone at a few shapes and kernel forms (``forward_row``): what the stores cost a
step. Prints tables and writes JSON lines to ``$OUT/saved-gates-<date>.jsonl`` (or the
directory given by -o).

Usage: python3 benchmarks/saved_gates.py [-o DIR] [cell,dtype,H,B[,S] ...]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import sys
from pathlib import Path

import torch

import rnncc.nn as rnn
from rnncc.bench import training_configs
from rnncc.dtypes import max_relative_error
from rnncc.timing import time_graph, time_interleaved


@contextlib.contextmanager
def recomputing():
    """Training forwards within compile to save nothing (their plans say "recompute"), so
    that their backwards rebuild the pre-activations: _training_spec without its option."""
    saving = rnn._training_spec

    def plain(spec: str) -> str:
        raw = json.loads(saving(spec))
        raw.pop("backward_gates")
        return json.dumps(raw)
    rnn._training_spec = plain
    try:
        yield
    finally:
        rnn._training_spec = saving


def row(cell: str, dtype: str, H: int, B: int, S: int, warmup: int = 3, repeats: int = 15) -> dict:
    exact = dtype == "float32"
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.manual_seed(0)
    tdt = getattr(torch, dtype)
    module = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cell](H, H).to("cuda", tdt)
    saving, _ = rnn.twin_of(module)
    recomputing_twin, _ = rnn.twin_of(module)
    x = torch.randn(S, B, H, device="cuda", dtype=tdt).requires_grad_()
    dy = torch.randn(S, B, H, device="cuda", dtype=tdt)

    def step(m):
        return torch.autograd.grad(m(x)[0], [x, *m.parameters()], dy)

    def plain_step():
        with recomputing():
            return step(recomputing_twin)
    a, b = step(saving), plain_step()
    difference = max(max_relative_error(p.float().cpu().numpy(), q.float().cpu().numpy()) for p, q in zip(a, b))
    eager = time_interleaved({"cudnn": lambda: step(module), "saved": lambda: step(saving),
                              "recomputed": plain_step}, warmup, repeats, settle=1)
    graphs = {"cudnn": time_graph(lambda: step(module), warmup, repeats).median_ms,
              "saved": time_graph(lambda: step(saving), warmup, repeats).median_ms,
              "recomputed": time_graph(plain_step, warmup, repeats).median_ms}
    return {"cell": cell, "dtype": dtype, "hidden": H, "batch": B, "seq_len": S, "exact": exact,
            "saved_vs_recomputed_max_relative_difference": difference,
            **{f"{k}_ms": v.median_ms for k, v in eager.items()},
            **{f"{k}_graph_ms": v for k, v in graphs.items()}}


def forward_row(cell: str, dtype: str, H: int, B: int, S: int, rounds: int = 3) -> dict:
    """The forward alone, CUDA-graph replays interleaved: the inference plan's kernels
    (``plain``), the training forward's writing the pre-activations (``saving``) and the
    same kernels given no buffers (``variant``: null pointers, nothing stored), so that
    the stores' cost and the variant's own are told apart."""
    import rnncc
    from rnncc.timing import time_graphs_interleaved

    spec = {"name": "f", "dtype": dtype, "input_size": H,
            "layers": [{"name": "l0", "cell": cell, "hidden_size": H}]}
    precision = "exact" if dtype == "float32" else None
    train = rnncc.compile(spec, target="device", seq_len=S, batch=B, precision=precision, backward_gates="save")
    plain = rnncc.compile(spec, target="device", seq_len=S, batch=B, precision=precision,
                          weights=train.state_dict())
    l = train.variant(S, B).plan.layers[0]
    x = torch.randn(S, B, H, device="cuda").to(getattr(torch, dtype))
    buffers = [torch.empty(S, B, l.gates * H, device="cuda") for _ in range(2 if cell == "gru" else 1)]
    gates = {"l0": tuple(buffers) if cell == "gru" else buffers[0]}
    ms = time_graphs_interleaved({"plain": lambda: plain(x), "variant": lambda: train(x, gates={}),
                                  "saving": lambda: train(x, gates=gates)}, rounds=rounds)
    mode = l.persistence.value
    return {"cell": cell, "dtype": dtype, "hidden": H, "batch": B, "seq_len": S,
            "form": f"{mode.mode}/{mode.math}", "forward_graph_ms": ms,
            "store_us_per_step": (ms["saving"] - ms["variant"]) * 1e3 / S,
            "gate_bytes_per_step": B * l.gates * H * 4 * (2 if cell == "gru" else 1)}


FORWARD_ROWS = [("lstm", "float16", 512, 8), ("lstm", "float16", 256, 8), ("lstm", "float16", 1024, 8),
                ("lstm", "bfloat16", 1024, 8), ("gru", "float16", 512, 8), ("lstm", "float16", 1024, 64),
                ("lstm", "float32", 1024, 64), ("lstm", "float32", 256, 8), ("lstm", "float16", 33, 5)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-o", "--output", default=os.environ.get("OUT", "."))
    p.add_argument("rows", nargs="*", help="cell,dtype,H,B[,S] (default: the bench's forward+backward rows)")
    args = p.parse_args()
    rows = [tuple(r.split(",")) for r in args.rows] or \
        [(c.cell, c.dtype, c.hidden, c.batch, c.seq_len) for c in training_configs()]
    path = Path(args.output) / f"saved-gates-{datetime.date.today()}.jsonl"
    print(f"{'row':34} {'cuDNN':>8} {'saved':>8} {'recomp.':>8} | graphs: {'cuDNN':>8} {'saved':>8} {'recomp.':>8}  (ms)")
    with path.open("a") as f:
        for r in rows:
            cell, dtype, H, B, *S = r
            out = row(cell, dtype, int(H), int(B), int(S[0]) if S else 256)
            f.write(json.dumps(out) + "\n")
            print(f"{cell} {dtype} H={H} B={B} S={out['seq_len']:<12} {out['cudnn_ms']:8.3f} {out['saved_ms']:8.3f} "
                  f"{out['recomputed_ms']:8.3f} |         {out['cudnn_graph_ms']:8.3f} {out['saved_graph_ms']:8.3f} "
                  f"{out['recomputed_graph_ms']:8.3f}  (diff {out['saved_vs_recomputed_max_relative_difference']:.1e})",
                  flush=True)
        print("the forward alone, graphs (ms): plain, the saving variant given no buffers, saving")
        for cell, dtype, H, B in ([] if args.rows else FORWARD_ROWS):
            out = forward_row(cell, dtype, H, B, 256)
            f.write(json.dumps(out) + "\n")
            ms = out["forward_graph_ms"]
            print(f"{cell} {dtype} H={H} B={B} {out['form']:14} {ms['plain']:8.3f} {ms['variant']:8.3f} "
                  f"{ms['saving']:8.3f}  stores {out['store_us_per_step']:.3f} µs a step "
                  f"({out['gate_bytes_per_step'] // 1024} KiB)", flush=True)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
