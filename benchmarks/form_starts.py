"""A float32 layer's persistent forms side by side at short and long calls: for each case,
the staged FMA grid kernel's, the registers form's and the FMA cluster kernel's tiles of
least predicted step (each form's own model), forced in turn; each timed as CUDA-graph
replays of the whole forward and, by torch.profiler, as the persistent kernel's GPU time,
at S = 1, 35 and 256. The kernel's step is (k256 - k35) / 221 and its start k35 - 35 × step:
what `cost.persistent_start_seconds` prices as one PERSISTENT_START_SECONDS for every form.
Written for the plans the staged model's refit of 2026-11-29 moved (ab_rows.py
refit_moves). Writes form-starts-<gpu>.jsonl; prints a line a form and length.

    python3 benchmarks/form_starts.py [-o DIR]
    RNNCC_CACHE_DIR=.cubins python3 benchmarks/form_starts.py --precompile   # no GPU: nvcc only
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

import rnncc
from rnncc.passes import cost, persistence
from rnncc.target import get
from rnncc.tiles import Persistent

from staged_sweep import build_kernels, persistent_kernel_us, spec_of  # benchmarks/ is this script's directory

# (cell, H, B): where the refit moved a plan to the staged kernel and the A/B lost (GRU
# H=300 B=20, GRU H=512 B=16, LSTM H=1024 B=16) or won (LSTM H=300 B=32, GRU H=256 B=48,
# LSTM H=256 B=64).
CASES = [("gru", 300, 20), ("gru", 512, 16), ("lstm", 1024, 16), ("lstm", 300, 32), ("gru", 256, 48),
         ("lstm", 256, 64)]
LENGTHS = (1, 35, 256)
GATES = {"lstm": 4, "gru": 3}


def forms(cell: str, H: int, B: int, target: str) -> list[tuple[str, object, float]]:
    """[(form, tile, predicted s a step)]: each form's tile of least predicted step."""
    t = get(target)
    G = GATES[cell]
    budget = persistence.grid_shared_max(t.shared_memory_per_block_optin)
    out = []
    for name, tiles, price in (
            ("staged", cost.staged_tiles(H, G, B, t), lambda x: cost.persistent_seconds(B, H, G, x, t, 4)),
            ("registers", cost.register_tiles(H, G, B, t), lambda x: cost.persistent_seconds(B, H, G, x, t, 4)),
            ("cluster", cost.cluster_tiles(H, G, B, t), lambda x: cost.cluster_seconds(B, H, G, x, t, 4))):
        fitting = [x for x in tiles if x.shared_bytes(H, G, 4) <= budget]
        if fitting:
            best = min(fitting, key=price)
            out.append((name, best, price(best)))
    return out


def models(cell: str, H: int, B: int, S: int, target: str):
    base = rnncc.compile(spec_of(cell, H), target=target, batch=B, seq_len=S, precision="exact")
    G = GATES[cell]
    for name, tile, predicted in forms(cell, H, B, target):
        mode = "cluster" if name == "cluster" else "grid"
        yield name, tile, predicted, base.with_persistence("l0", Persistent.of(mode, "fma", tile, H, G, 4),
                                                           "forced by form_starts")


def measure(out_dir: Path) -> None:
    import torch
    from rnncc.timing import time_graph
    gpu = torch.cuda.get_device_name().split()[1].lower()
    path = out_dir / f"form-starts-{gpu}.jsonl"
    with path.open("w") as f:
        for cell, H, B in CASES:
            for S in LENGTHS:
                torch.manual_seed(0)
                x = torch.randn(S, B, H, device="cuda")
                for name, tile, predicted, m in models(cell, H, B, S, "device"):
                    ms = time_graph(lambda: m(x), 2, 10).median_ms
                    kernel = min(persistent_kernel_us(lambda: m(x)) or 0.0 for _ in range(3)) or None
                    row = {"cell": cell, "H": H, "B": B, "S": S, "form": name, "tile": asdict(tile),
                           "predicted_us_step": predicted * 1e6, "forward_us": ms * 1e3, "kernel_us": kernel}
                    f.write(json.dumps(row) + "\n")
                    f.flush()
                    print(f"{cell} H={H} B={B} S={S:<4} {name:<10} forward {ms * 1e3:8.1f} µs, kernel "
                          f"{kernel or float('nan'):8.1f} µs, predicted step {predicted * 1e6:5.2f}", flush=True)
    print(f"wrote {path}")


def step_rows(path: str | Path, form: str = "staged") -> list[dict]:
    """``form``'s rows of a form-starts file as staged_sweep.py's rows (its --fit reads
    both): the persistent kernel's step, (k256 − k35) / 221, and the forward at S=256 over
    its steps, at each case."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    kernel = {(r["cell"], r["H"], r["B"], r["S"]): r for r in rows if r["form"] == form and r["kernel_us"]}
    return [{"cell": cell, "H": H, "B": B, "S": 256, "form": form, "tile": r["tile"],
             "predicted_us": r["predicted_us_step"], "forward_us_step": r["forward_us"] / 256,
             "kernel_us_step": (r["kernel_us"] - kernel[cell, H, B, 35]["kernel_us"]) / (256 - 35), "chosen": False}
            for (cell, H, B, S), r in kernel.items() if S == 256 and (cell, H, B, 35) in kernel]


def precompile() -> None:
    build_kernels(m for cell, H, B in CASES for S in LENGTHS for *_, m in models(cell, H, B, S, "h200"))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--out", type=Path, default=Path("."))
    p.add_argument("--precompile", action="store_true")
    a = p.parse_args()
    if a.precompile:
        precompile()
    else:
        measure(a.out)
