"""Which forward rows of `rnncc bench` replay their recorded call (call_program.py), why
not where one does not, and what replaying saves: each row's compiled model timed in the
bench's setting (timing.time_interleaved, the GPU drained before each call) replayed from
a CUDA graph (call_graphs.py, where the call is worth one), replaying its program
(``graphs = False``) and with ``replay = False`` (its forward every call), beside cuDNN
(the row's torch module), in one process. Prints one line a row, and with --json writes
them as JSON lines. Needs a GPU, PyTorch and PyCUDA.

    python3 benchmarks/replay_status.py [--rows=SUBSTRING ...] [--json FILE]
"""

from __future__ import annotations

import argparse
import json

import torch

import rnncc
from rnncc import bench
from rnncc.timing import time_interleaved


def compiled_for(cfg: bench.Config):
    """The row's compiled model, as `rnncc bench` builds it."""
    torch.manual_seed(0)
    tdt = getattr(torch, cfg.dtype)
    if cfg.model == "gnmt":
        module = bench.gnmt_loop(cfg.hidden, cfg.layers).to("cuda", tdt).eval()
        model = bench.gnmt_spec(cfg.dtype, cfg.hidden, cfg.layers)
        weights = {f"l{i + 1}.{k}": getattr(m, f"{k}_l0").detach().float().cpu().numpy()
                   for i, m in enumerate(module.lstms) for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
    else:
        cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cfg.cell]
        module = cls(cfg.hidden, cfg.hidden, num_layers=cfg.layers, bidirectional=cfg.bidirectional,
                     **({"proj_size": cfg.proj} if cfg.proj else {})).to("cuda", tdt)
        model, weights = rnncc.from_torch(module)
    return module, rnncc.compile(model, target="device", weights=weights, batch=cfg.batch,
                                 seq_len=cfg.seq_len, precision=cfg.math)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", action="append", help="only rows whose label contains this")
    parser.add_argument("--json", help="also write one JSON line a row here")
    args = parser.parse_args()
    out = open(args.json, "w") if args.json else None
    rows = [c for c in bench.issue_configs() if c.passes == "forward" and not c.packed
            and (not args.rows or any(s in c.label for s in args.rows))]
    for cfg in rows:
        module, m = compiled_for(cfg)
        tdt = getattr(torch, cfg.dtype)
        xs = [torch.randn(cfg.seq_len, cfg.batch, cfg.hidden, device="cuda", dtype=tdt) for _ in range(3)]
        turn = iter(range(10**9))

        def without(switch: str):
            """A call of m with its attribute ``switch`` (replay, graphs) off."""
            def call():
                setattr(m, switch, False)
                try:
                    return m(xs[next(turn) % 3])
                finally:
                    setattr(m, switch, True)
            return call
        forward, program = without("replay"), without("graphs")
        with torch.no_grad():
            m(xs[0])
            recorded = {id(r): r for r in m._programs.values()}
            why = "; ".join(r.why_not for r in recorded.values() if r.program is None) or "replayed"
            graphed = any(r.graphed for r in recorded.values())
            t = time_interleaved({"graph": lambda: m(xs[next(turn) % 3]), "program": program,
                                  "forward": forward, "cudnn": lambda: module(xs[next(turn) % 3])},
                                 3, 15, settle=1)
        ms = {k: v.median_ms for k, v in t.items()}
        print(f"{cfg.label:<44} eager ms: graph {ms['graph']:.3f}"
              f"{'' if graphed else ' (not graphed)'}, program {ms['program']:.3f}, the forward "
              f"every call {ms['forward']:.3f}, cuDNN {ms['cudnn']:.3f} ({why}); cuDNN / graph "
              f"{ms['cudnn'] / ms['graph']:.2f}×, cuDNN / program {ms['cudnn'] / ms['program']:.2f}×",
              flush=True)
        if out:
            out.write(json.dumps({"row": cfg.label, "graphed": graphed, "why_not": why, **ms,
                                  "captures": m._graphs.captures if m._graphs else 0}) + "\n")
            out.flush()


if __name__ == "__main__":
    main()
