"""The FMA grid kernel with h staged by chunks (recurrent_persistent_staged.cu.j2), or with
--form registers its registers form (W_hhᵀ in registers, small batches), against what
float32 layers ran before it: at each case, the staged model's best tiles of each
(units a block, batch tile, blocks along y), the planner's pick, the whole-h FMA grid
kernel's best tile by its model and persistence none (cuBLASLt or the step kernel, as
planned). Each forward (S=256 unless the case says) is timed by CUDA-graph replays, and a
persistent kernel alone by torch.profiler (its GPU time over the steps: what the STAGED_*
step model prices). Writes staged-sweep-<gpu>.jsonl; prints a line a variant.

    python3 benchmarks/staged_sweep.py [-o DIR] [--per-group N]
    RNNCC_CACHE_DIR=.cubins python3 benchmarks/staged_sweep.py --precompile   # no GPU: nvcc only
    python3 benchmarks/staged_sweep.py --fit FILE.jsonl   # no GPU: fit the STAGED_* constants
    python3 benchmarks/staged_sweep.py --form registers [...]  # the registers form, REGISTERS_*

--fit: non-negative least squares of the staged kernel's µs a step over cost.staged_terms,
weighted by 1/measured (relative error) and by 1/(tiles timed at the case), so that each
case counts once whatever its number of tiles; prints the constants, then at every case the
staged pick's time against the fastest staged tile timed, and the variant the planner
would choose with the fitted constants against the fastest forward timed. Files named
form-starts-* (benchmarks/form_starts.py) add their staged kernels' steps, a tile a case.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Callable, NamedTuple
import sys
from pathlib import Path

import rnncc
from rnncc.passes import cost
from rnncc.target import get
from rnncc.tiles import Persistent, PersistentTile, RegisterPersistentTile, StagedPersistentTile

# (cell, H, B, S): float32 layers at batches where the whole-h grid kernel stages its batch
# tile in pieces or not at all (B ≥ 16), a small batch where it should keep winning, and
# shapes no bench row names (H=650 B=20, H=300, GRU H=768 B=48).
CASES = [("lstm", 1024, 64, 256), ("lstm", 1024, 32, 256), ("lstm", 512, 64, 256), ("gru", 1024, 64, 256),
         ("lstm", 768, 32, 256), ("rnn_tanh", 1024, 64, 256), ("lstm", 650, 20, 128), ("gru", 768, 48, 128),
         ("lstm", 1024, 16, 256), ("lstm", 1024, 8, 256), ("lstm", 300, 64, 256), ("gru", 512, 32, 256)]
# --form registers (W_hhᵀ in registers, batches up to cost.REGISTERS_MAX_BATCH): the bench's
# B=1 and B=8 rows, B=16, and shapes no row names (H=650 loads h a float at a time, WaveRNN's
# GRU H=512 B=4, B=3 and 5, H=768).
REGISTER_CASES = [("lstm", 1024, 8, 256), ("lstm", 1024, 1, 256), ("gru", 1024, 8, 256), ("lstm", 1024, 16, 256),
                  ("lstm", 512, 8, 256), ("gru", 512, 4, 256), ("lstm", 650, 5, 128), ("rnn_tanh", 1024, 8, 256),
                  ("lstm", 768, 3, 256), ("gru", 1024, 1, 256), ("lstm", 256, 8, 256), ("gru", 650, 16, 128)]


class Form(NamedTuple):
    """A form of the FMA grid kernel the sweep times: its tile, candidates, step model's
    counts and prices, and the cases it is timed at."""
    tile: type
    candidates: Callable
    terms: Callable
    prices: dict[str, float]
    cases: list[tuple[str, int, int, int]]


FORMS = {"staged": Form(StagedPersistentTile, cost.staged_tiles, cost.staged_terms, cost.STAGED_PRICES, CASES),
         "registers": Form(RegisterPersistentTile, cost.register_tiles, cost.register_terms, cost.REGISTERS_PRICES,
                           REGISTER_CASES)}
PER_GROUP = 1  # the staged model's best tiles of each (units, batch tile, blocks along y); --per-group


def spec_of(cell: str, H: int) -> dict:
    return {"name": "staged_sweep", "dtype": "float32", "input_size": H,
            "layers": [{"name": "l0", "cell": cell, "hidden_size": H}]}


def variants(cell: str, H: int, B: int, S: int, target: str, per_group: int = PER_GROUP, form: str = "staged"):
    """[(form, tile or None, predicted s a step or None, model, the planner's pick?)]: the
    form's model's best ``per_group`` tiles of each group (for the staged form, 2 or more
    reach the chunks of 64 in 3 buffers, which the model ranks below those of 128)."""
    kind, candidates = FORMS[form].tile, FORMS[form].candidates
    spec = spec_of(cell, H)
    planned = rnncc.compile(spec, target=target, batch=B, seq_len=S, precision="exact")
    t = planned.target
    pick = planned.plan.layers[0].persistence.value
    G = planned.plan.layers[0].gates
    base = rnncc.compile(spec, target=target, batch=B, seq_len=S, precision="exact", persistence="grid",
                         weights=planned.state_dict())
    fits = lambda tiles: [x for x in tiles if x.shared_bytes(H, G, 4) <= t.shared_memory_per_block_optin]  # noqa: E731
    price = lambda x: cost.persistent_seconds(B, H, G, x, t, 4)  # noqa: E731
    groups: dict[tuple, list] = {}
    for x in sorted(fits(candidates(H, G, B, t)), key=price):
        key = (x.units_per_block, x.batch_per_block, x.batch_blocks) + ((x.threads,) if form == "registers" else ())
        groups.setdefault(key, []).append(x)
    staged = [x for xs in groups.values() for x in xs[:per_group]]
    if isinstance(pick, Persistent) and isinstance(pick.tile, kind) and pick.tile not in staged:
        staged.append(pick.tile)
    whole = fits(cost.persistent_tiles(H, G, B, t))
    out = []
    for x in staged:
        m = base.with_persistence("l0", Persistent.of("grid", "fma", x, H, G, 4), "forced by the sweep")
        out.append((form, x, price(x), m, isinstance(pick, Persistent) and pick.tile == x))
    if whole:
        best = min(whole, key=price)
        m = base.with_persistence("l0", Persistent.of("grid", "fma", best, H, G, 4), "forced by the sweep")
        out.append(("grid", best, price(best), m, isinstance(pick, Persistent) and pick.tile == best))
    none = rnncc.compile(spec, target=target, batch=B, seq_len=S, precision="exact", persistence="none",
                         weights=planned.state_dict())
    out.append(("none " + none.plan.layers[0].persistence.value.math, None, None, none,
                not isinstance(pick, Persistent)))
    if isinstance(pick, Persistent) and pick.mode == "cluster":
        out.append(("cluster", pick.tile, None, planned, True))
    return out


def describe(tile) -> str:
    if isinstance(tile, StagedPersistentTile):
        return (f"units={tile.units_per_block} rows={tile.batch_per_block} batch_blocks={tile.batch_blocks} "
                f"chunk={tile.k_chunk} stages={tile.stages}")
    if isinstance(tile, RegisterPersistentTile):
        return (f"units={tile.units_per_block} rows={tile.batch_per_block} batch_blocks={tile.batch_blocks} "
                f"threads={tile.threads} phases={tile.k_phases}")
    if isinstance(tile, PersistentTile):
        return (f"units={tile.units_per_block} rows={tile.batch_per_block} rows/thread={tile.batch_per_thread} "
                f"ks={tile.k_split} batch_blocks={tile.batch_blocks}")
    return "" if tile is None else str(tile)


def persistent_kernel_us(fn) -> float | None:
    """GPU µs of the call's persistent recurrent kernel (torch.profiler), or None."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    times = [e.device_time_total for e in prof.events()
             if e.device_type == torch.autograd.DeviceType.CUDA and "recurrent_persistent" in e.name]
    return sum(times) if times else None


def measure(out_dir: Path, per_group: int, form: str) -> None:
    import torch
    from rnncc.timing import time_graph
    torch.backends.cuda.matmul.allow_tf32 = False
    gpu = torch.cuda.get_device_name().split()[1].lower()
    path = out_dir / f"{form}-sweep-{gpu}.jsonl"
    with path.open("w") as f:
        for cell, H, B, S in FORMS[form].cases:
            torch.manual_seed(0)
            x = torch.randn(S, B, H, device="cuda")
            for kind, tile, predicted, m, chosen in variants(cell, H, B, S, "device", per_group, form):
                try:
                    ms = time_graph(lambda: m(x), 2, 7).median_ms
                    for _ in range(2):
                        m(x)
                    kernel = min(persistent_kernel_us(lambda: m(x)) or 0.0 for _ in range(3)) or None
                except Exception as e:  # noqa: BLE001 (a tile the GPU refuses: reported, not timed)
                    print(f"{cell} H={H} B={B} S={S} {kind} {describe(tile)}: failed: {e}", flush=True)
                    continue
                row = {"cell": cell, "H": H, "B": B, "S": S, "form": kind,
                       "tile": None if tile is None else asdict(tile), "predicted_us": predicted and predicted * 1e6,
                       "forward_us_step": ms * 1e3 / S, "kernel_us_step": kernel and kernel / S, "chosen": chosen}
                f.write(json.dumps(row) + "\n")
                f.flush()
                print(f"{cell} H={H} B={B} S={S} {kind:<12} {describe(tile):<58} forward {ms * 1e3 / S:6.2f} µs/step"
                      + (f", kernel {kernel / S:6.2f}" if kernel else "")
                      + (f", predicted {predicted * 1e6:6.2f}" if predicted else "")
                      + ("  (the planner's pick)" if chosen else ""), flush=True)
    print(f"wrote {path}")


def build_kernels(models) -> None:
    """nvcc over the kernels of ``models`` (compiled models), each once, into the build
    cache: the --precompile of the scripts that force tiles, run where there is no GPU."""
    from rnncc.build import compile_all
    kernels = {k.name: k for m in models for k in m.kernels}
    print(f"nvcc: {len(kernels)} kernels", file=sys.stderr, flush=True)
    compile_all(list(kernels.values()), "sm_90a",
                progress=lambda done, total, name: print(f"{done}/{total} {name}", file=sys.stderr, flush=True))


def precompile(per_group: int, form: str) -> None:
    build_kernels(m for cell, H, B, S in FORMS[form].cases
                  for *_, m, _ in variants(cell, H, B, S, "h100", per_group, form))


def fit(files: list[str], form: str) -> None:
    import numpy as np
    from scipy.optimize import nnls
    from form_starts import step_rows
    rows = [row for f in files for row in (
        step_rows(f, form) if Path(f).name.startswith("form-starts") else
        [json.loads(line) for line in Path(f).read_text().splitlines() if line.strip()])]
    target = get("h100")
    gates = {"lstm": 4, "gru": 3}
    f = FORMS[form]
    staged = [r for r in rows if r["form"] == form and r["kernel_us_step"]]
    names = list(f.prices)
    terms = lambda r: f.terms(r["B"], r["H"], gates.get(r["cell"], 1), f.tile(**r["tile"]))  # noqa: E731
    case = lambda r: (r["cell"], r["H"], r["B"], r["S"])  # noqa: E731
    tiles_at = {c: sum(case(r) == c for r in staged) for c in map(case, staged)}
    weight = np.array([1 / tiles_at[case(r)] for r in staged])
    a = np.array([[terms(r)[n] for n in names] for r in staged]) / np.array([[r["kernel_us_step"]] for r in staged])
    x, _ = nnls(a * weight[:, None], weight)
    for n, v in zip(names, x):
        print(f"{n} = {v * 1e-6:.4e}")
    predicted = lambda r: sum(terms(r)[n] * v for n, v in zip(names, x))  # noqa: E731
    errors = sorted(abs(predicted(r) / r["kernel_us_step"] - 1) for r in staged)
    print(f"{len(staged)} tiles: median error {errors[len(errors) // 2]:.1%}, worst {errors[-1]:.1%}")
    for case in dict.fromkeys((r["cell"], r["H"], r["B"], r["S"]) for r in rows):
        mine = [r for r in staged if (r["cell"], r["H"], r["B"], r["S"]) == case]
        if not mine:
            continue
        best = min(mine, key=lambda r: r["kernel_us_step"])
        pick = min(mine, key=predicted)
        others = {r["form"]: r["forward_us_step"] for r in rows
                  if (r["cell"], r["H"], r["B"], r["S"]) == case and r["form"] != form}
        print(f"{case}: {form} pick {pick['kernel_us_step']:.2f} µs/step (predicted {predicted(pick):.2f}), "
              f"fastest {form} {best['kernel_us_step']:.2f}; forward µs/step: {form} pick "
              f"{pick['forward_us_step']:.2f}, " + ", ".join(f"{k} {v:.2f}" for k, v in others.items()))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--out", type=Path, default=Path("."))
    p.add_argument("--precompile", action="store_true")
    p.add_argument("--fit", nargs="+")
    p.add_argument("--per-group", type=int, default=PER_GROUP)
    p.add_argument("--form", choices=sorted(FORMS), default="staged")
    a = p.parse_args()
    if a.fit:
        fit(a.fit, a.form)
    elif a.precompile:
        precompile(a.per_group, a.form)
    else:
        measure(a.out, a.per_group, a.form)
