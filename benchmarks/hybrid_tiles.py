"""The tensor grid kernel with W_hh partly in registers (TensorTile.register_steps), timed
against what the plan ran before: per case, CUDA-graph replays interleaved in one process,
µs a step beside each variant's predicted step, outputs checked against the first variant.

- fp16/bf16 H=1024 B=8, one layer, on the partition tiles of 2, 3 and 4 parts (64, 43 and
  32 blocks; 4 parts only with part of W_hh in registers) and on its own 128-block tile;
- fp16 H=2048 B=1, 8 and 20: the planned hybrid grid tile against a launch a step (the
  plan before), and GRU alike.

    python3 benchmarks/hybrid_tiles.py OUT_DIR   (from the repository root; needs a GPU)
    python3 benchmarks/hybrid_tiles.py --build-only   (plan for the h100 preset, fill the cubin cache)

Writes OUT_DIR/hybrid-tiles-<gpu>-<date>.json and prints a table.
"""
import sys
from pathlib import Path

import torch

import rnncc
from rnncc.build import compile_all
from rnncc.passes.schedule import chunk_seconds, partitioned
from rnncc.timing import time_graphs_interleaved

from result_files import write_results  # run as a script: benchmarks/ is on sys.path

S = 256


def spec_of(cell: str, dtype: str, hidden: int) -> dict:
    return {"name": f"{cell}_{hidden}", "dtype": dtype, "input_size": hidden,
            "layers": [{"name": "l0", "cell": cell, "hidden_size": hidden}]}


def partition_variants(cell: str, dtype: str, hidden: int, batch: int, target: str) -> dict:
    """(model, the layer priced) per variant: its own tile, then each partition's tile."""
    base = rnncc.compile(spec_of(cell, dtype, hidden), target=target, seq_len=S, batch=batch)
    out = {"own tile": (base, base.plan.layers[0])}
    for parts in (2, 3, 4):
        l = partitioned(base.plan, parts, base.target).layers[0]
        if l != base.plan.layers[0]:
            out[f"{parts} parts ({l.persistence.value.blocks} blocks, "
                f"R={l.persistence.value.tile.register_steps})"] = \
                (base.with_persistence("l0", l.persistence.value, "forced"), l)
    return out


def large_variants(cell: str, dtype: str, hidden: int, batch: int, target: str) -> dict:
    spec = spec_of(cell, dtype, hidden)
    models = {"planned": rnncc.compile(spec, target=target, seq_len=S, batch=batch),
              "a launch a step": rnncc.compile(spec, target=target, seq_len=S, batch=batch, persistence="none")}
    return {k: (m, m.plan.layers[0]) for k, m in models.items()}


def step_price(l, target) -> float:
    """Layer l's price a step, as the schedule prices its chunks (from the planned layer:
    a forced decision has no alternatives to read its price from)."""
    return (chunk_seconds(l, S, 0.0, 2, target) - chunk_seconds(l, 0, 0.0, 2, target)) / S


CASES = [("partitions", c, d, 1024, 8) for c in ("lstm", "gru") for d in ("float16", "bfloat16")] + \
        [("large", c, "float16", 2048, b) for c in ("lstm", "gru") for b in (1, 8, 20)]


def main() -> None:
    build_only = "--build-only" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--build-only"]
    target = "h100" if build_only else "device"
    cases = [(c, (partition_variants if c[0] == "partitions" else large_variants)(*c[1:], target)) for c in CASES]
    compile_all([k for _, variants in cases for m, _ in variants.values() for k in m.kernels], "sm_90a")
    if build_only:
        return
    out = Path(args[0] if args else "benchmarks/results")
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for (kind, cell, dtype, hidden, batch), variants in cases:
        models = {k: m for k, (m, _) in variants.items()}
        x = torch.randn(S, batch, hidden, device="cuda", dtype=getattr(torch, dtype))
        outputs = {k: m(x)[0].float() for k, m in models.items()}
        first = next(iter(outputs.values()))
        ms = time_graphs_interleaved({k: (lambda m=m: m(x)) for k, m in models.items()})
        row = {"case": f"{cell} {dtype} H={hidden} B={batch}",
               "us_per_step": {k: round(v * 1e3 / S, 3) for k, v in ms.items()},
               "predicted_us_per_step": {k: round(step_price(l, m.target) * 1e6, 2) for k, (m, l) in variants.items()},
               "tiles": {k: str(getattr(m.plan.layers[0].persistence.value, "tile", m.plan.layers[0].persistence.value))
                         for k, m in models.items()},
               "max_abs_difference": {k: float((o - first).abs().max()) for k, o in outputs.items()}}
        rows.append(row)
        print(row["case"], flush=True)
        for k in ms:
            print(f"  {k:28s} {row['us_per_step'][k]:7.3f} µs a step (predicted {row['predicted_us_per_step'][k]:6.2f}),"
                  f" max |Δ| {row['max_abs_difference'][k]:.2e}", flush=True)
    write_results(out, "hybrid-tiles", rows)


if __name__ == "__main__":
    main()
