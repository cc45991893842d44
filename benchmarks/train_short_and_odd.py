"""Training steps at shapes no bench row has, beside cuDNN: stacks with dropout between
layers, bidirectional stacks, batches that are not a multiple of 8, short sequences and
hidden sizes of real models (PTB's medium and small LSTMs, a tagger's bidirectional GRU).
The bench's forward+backward rows are one layer at S=256; these are what a user trains.

Each point is a torch.nn module and its rnncc twin (``rnncc.nn.twin_of``, same weights),
timed as the bench's training rows are (``rnncc.bench.run_training_config``): a step is the
forward and ``torch.autograd.grad`` of the input and every parameter from one output
gradient; both sides interleaved in this process, eager and each captured in a CUDA graph.
Without dropout the two sides' gradients are compared (four times the dtype's tolerance, as
the bench); with dropout the masks differ (each draws its own), so the point is timed only
and its p = 0 twin carries the comparison.

    RNNCC_COMMIT=<sha> python3 benchmarks/train_short_and_odd.py OUT_DIR [--only TEXT]
        (repository root; a GPU; the commit named, since the device copy's git HEAD may be stale)

Writes OUT_DIR/train-short-and-odd-<gpu>-<date>.json and prints a table. Each point runs in
a process of its own: a CUDA-graph capture that fails (cuDNN's bidirectional GRU did once,
with 3 warm-up calls) leaves torch's generator in a capture state, and every later point of
that process then failed too (results/train-short-and-odd-h200-2026-11-29-at-1c17987.json).
"""
import argparse
import json
import subprocess
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

import rnncc.nn
from rnncc.bench import graph_baselines
from rnncc.dtypes import max_relative_error, tolerance
from rnncc.timing import time_interleaved
from result_files import write_results


@dataclass(frozen=True)
class Point:
    what: str  # the model it stands for
    cell: str
    dtype: str
    layers: int
    input_size: int
    hidden: int
    batch: int
    seq_len: int
    dropout: float = 0.0
    bidirectional: bool = False
    batch_first: bool = False

    @property
    def label(self) -> str:
        parts = [f"{self.layers} × " if self.layers > 1 else "", f"{'bi' if self.bidirectional else ''}"
                 f"{self.cell.upper()} {self.dtype} I={self.input_size} H={self.hidden} "
                 f"B={self.batch} S={self.seq_len}"]
        if self.dropout:
            parts.append(f" p={self.dropout}")
        if self.batch_first:
            parts.append(" batch_first")
        return "".join(parts)


POINTS = [
    # PTB's medium LSTM (Zaremba et al.): 2 × 650, B=20, 35 steps, dropout 0.5; and the
    # same without dropout, whose gradients are compared.
    Point("ptb-medium", "lstm", "float16", 2, 650, 650, 20, 35, dropout=0.5),
    Point("ptb-medium", "lstm", "float16", 2, 650, 650, 20, 35),
    Point("ptb-small", "lstm", "float32", 2, 200, 200, 20, 35),
    # A tagger's / speech front end's bidirectional GRU at an odd batch.
    Point("tagger", "gru", "float16", 2, 100, 256, 13, 50, bidirectional=True),
    # A short call, batch 5: a step of a longer training loop on truncated sequences.
    Point("short", "lstm", "bfloat16", 1, 1024, 1024, 5, 4),
    Point("odd", "gru", "float32", 1, 300, 300, 7, 16, batch_first=True),
    # A 4-layer stack with the dropout most stacks train with.
    Point("stack", "lstm", "float16", 4, 512, 512, 32, 64, dropout=0.2),
    Point("stack", "lstm", "float16", 4, 512, 512, 32, 64),
    Point("odd", "lstm", "float16", 1, 333, 333, 3, 7),
]


def run_point(p: Point, warmup: int, repeats: int) -> dict:
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    tdt = getattr(torch, p.dtype)
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[p.cell]
    module = cls(p.input_size, p.hidden, num_layers=p.layers, dropout=p.dropout,
                 bidirectional=p.bidirectional, batch_first=p.batch_first).to("cuda", tdt)
    module.train()
    start = time.perf_counter()
    twin, _ = rnncc.nn.twin_of(module)
    shape = (p.batch, p.seq_len) if p.batch_first else (p.seq_len, p.batch)
    inputs = [torch.randn(*shape, p.input_size, device="cuda", dtype=tdt).requires_grad_() for _ in range(3)]
    dy = torch.randn(*shape, p.hidden * (1 + p.bidirectional), device="cuda", dtype=tdt)
    turn = iter(range(10**9))

    def step(m, x=None):
        x = inputs[next(turn) % 3] if x is None else x
        return torch.autograd.grad(m(x)[0], [x, *m.parameters()], dy)

    ours = step(twin, inputs[0])
    torch.cuda.synchronize()
    first_s = time.perf_counter() - start
    row = {**asdict(p), "label": p.label, "first_call_s": first_s}
    if not p.dropout:
        theirs = step(module, inputs[0])
        error = max(max_relative_error(a.float().cpu().numpy(), b.float().cpu().numpy())
                    for a, b in zip(ours, theirs))
        row |= {"max_relative_error_vs_cudnn": error, "agree": error <= 4 * tolerance(p.dtype)}
    timed = time_interleaved({"rnncc": lambda: step(twin), "cudnn": lambda: step(module)},
                             warmup, repeats, settle=1)
    row |= {"rnncc_ms": timed["rnncc"].median_ms, "cudnn_ms": timed["cudnn"].median_ms,
            "speedup": timed["cudnn"].median_ms / timed["rnncc"].median_ms}
    row |= graph_baselines(lambda x: step(module, x), lambda x: step(twin, x), inputs[0], warmup, repeats)
    return row


def table(rows: list[dict]) -> str:
    lines = ["| point | agree | rnncc ms | cuDNN ms | eager × | rnncc graph | cuDNN graph | graph × |",
             "|---|---|---|---|---|---|---|---|"]
    fmt = lambda v, f="{:.3f}": "—" if v is None else f.format(v)  # noqa: E731
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['label']} | {r['error']} | | | | | | |")
            continue
        lines.append(f"| {r['label']} | {fmt(r.get('agree'), '{}')} | {fmt(r['rnncc_ms'])} | "
                     f"{fmt(r['cudnn_ms'])} | {fmt(r['speedup'], '{:.2f}')} | {fmt(r['rnncc_graph_ms'])} | "
                     f"{fmt(r['cudnn_graph_ms'])} | {fmt(r['speedup_graph'], '{:.2f}')} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--only", default="", help="run the points whose label contains this")
    ap.add_argument("--point", type=int, default=None, help=argparse.SUPPRESS)  # one point, its row as JSON
    args = ap.parse_args()
    if args.point is not None:
        p = POINTS[args.point]
        try:
            row = run_point(p, args.warmup, args.repeats)
        except Exception as exc:  # noqa: BLE001 - recorded in the row and the table
            row = {**asdict(p), "label": p.label, "error": f"{type(exc).__name__}: {exc}"[:300]}
        print(json.dumps(row))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    chosen = [i for i, p in enumerate(POINTS) if args.only in p.label]
    for n, i in enumerate(chosen):
        p = POINTS[i]
        print(f"[{n + 1}/{len(chosen)}] {p.label}", file=sys.stderr, flush=True)
        run = subprocess.run([sys.executable, __file__, str(args.out), "--point", str(i), "--warmup",
                              str(args.warmup), "--repeats", str(args.repeats)], capture_output=True, text=True)
        lines = run.stdout.strip().splitlines()
        rows.append(json.loads(lines[-1]) if run.returncode == 0 and lines else
                    {**asdict(p), "label": p.label, "error": f"exit {run.returncode}: {run.stderr[-300:]}"})
        print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    write_results(args.out, "train-short-and-odd", rows)
    print(table(rows))
    eager = [r["speedup"] for r in rows if "speedup" in r]
    graph = [r["speedup_graph"] for r in rows if r.get("speedup_graph")]
    if eager:
        print(f"median eager {statistics.median(eager):.2f}×, in graphs "
              f"{statistics.median(graph) if graph else float('nan'):.2f}×; below 1×: "
              f"{[r['label'] for r in rows if r.get('speedup', 2) < 1 or (r.get('speedup_graph') or 2) < 1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
