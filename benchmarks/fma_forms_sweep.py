"""The step of every FMA persistent form the planner weighs for a layer, beside the model's
price: the data for refitting the forms' prices on the H200 (benchmarks/fit_fma_forms.py),
where the H100 fits read small H 1.3-1.5× slow (docs/design-notes.md, forty-seventh and
forty-eighth sessions).

For each case (cell, float32, H, B) and each form, the model's best FORMS_PER_GROUP tiles of
that form are put into the one-layer plan in turn (CompiledModel.with_persistence), and the
step is timed alone: CUDA-graph replays of the forward at S=256 and S=129, the difference
over 127 steps (the launch cancels) less the input projection's share of it (the GPU time
of the kernels other than the recurrence at both lengths, torch.profiler:
grid_tile_sweep.projection_us_a_step; the committed runs, at 12e2bbc, counted the kernels
named input_projection, the same kernels in these one-layer plans). The forms:
- grid: the plain FMA grid kernel (PersistentTile, cost.grid_fma_terms), h staged by chunks
  (StagedPersistentTile, cost.staged_terms; with or without tensor maps) and W_hhᵀ in
  registers (RegisterPersistentTile, cost.register_terms), as persistence.grid_family lists them;
- cluster: the FMA cluster kernel with W in shared memory or in registers
  (cost.cluster_shared_terms) and its lanes form (cost.lanes_terms), as cost.cluster_tiles
  lists them;
- none: the planner's kernel a step (its price as the plan records it), for the ranking;
- for float16 layers (--half), the FMA cluster forms beside the cluster kernel on tensor
  cores (cost.tensor_seconds), in the layer's default precision.

    RNNCC_CACHE_DIR=.cubins-forms python3 benchmarks/fma_forms_sweep.py --build-only   # nvcc only
    python3 benchmarks/fma_forms_sweep.py OUT.jsonl [--case=gru,333,16 ...]             # GPU
    python3 benchmarks/fma_forms_sweep.py OUT.jsonl --wide   # CASES and WIDE_CASES, 3 tiles a form
    python3 benchmarks/fma_forms_sweep.py OUT.jsonl --large --half   # LARGE_CASES and HALF_CASES
    python3 benchmarks/fma_forms_sweep.py OUT.jsonl --grid-large     # GRID_LARGE_CASES

One JSON line a tile: the case, the form, the tile (its class and fields), the µs a step
measured (the projection's share taken off, recorded beside) and predicted, and whether the
planner picks it for the layer in its mode.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import rnncc
from rnncc.build import compile_all
from rnncc.passes.cost import cluster_seconds, cluster_tiles, persistent_seconds, tensor_seconds, tensor_tiles
from rnncc.passes.persistence import grid_family
from rnncc.tiles import ClusterTile, Persistent, RegisterPersistentTile, StagedPersistentTile, TensorTile
from ab_rows import build_target
from grid_tile_sweep import S, S_SHORT, projection_us_a_step  # the step less the projection's share

FORMS_PER_GROUP = 2
WIDE_PER_GROUP = 3  # with --wide
# --large: float32 shapes past the wide grid (B up to 256, H up to 2048) where the refit to
# it moved plans that ran slower (persistence-moves-h200-2026-11-29-fma-forms-*.jsonl).
LARGE_CASES = [("gru", 200, 256), ("gru", 333, 256), ("gru", 333, 128), ("rnn_tanh", 650, 128),
               ("rnn_tanh", 300, 128), ("lstm", 200, 96), ("gru", 650, 64), ("lstm", 650, 128),
               ("gru", 1024, 16), ("lstm", 1300, 32), ("lstm", 1300, 20), ("rnn_tanh", 2048, 64),
               ("rnn_tanh", 1700, 128), ("gru", 1024, 96)]
# --grid-large: the plain FMA grid kernel's large batches beside the other forms, where the
# refit reads it 7-15% low (GRU H=650 B=20 ran 1.16×, rnn_tanh H=650 B=128 1.30× eager the
# launch a step it replaced; docs/design-notes.md, forty-eighth session's Next 2).
GRID_LARGE_CASES = [(cell, H, B) for cell in ("gru", "lstm", "rnn_tanh") for H in (333, 650, 1024)
                    for B in (20, 64, 256)]
# --half: float16 layers where the FMA cluster kernel and the cluster kernel on tensor cores
# compete (HALF_FMA_CLUSTER_FACTOR prices the first from the float32 terms).
HALF_CASES = [(cell, H, B) for cell, H in (("rnn_tanh", 100), ("rnn_tanh", 200), ("rnn_tanh", 300), ("rnn_tanh", 384),
                                           ("gru", 100), ("gru", 333), ("lstm", 128), ("lstm", 256))
              for B in (1, 4, 20, 64)]
# (cell, H, B), float32 exact: the shapes the plan-choice check misranks between a launch a
# step and the grid or cluster kernels (results/plan-choice-check-rows-fit-2026-11-29.txt),
# their neighbours, and larger H at B=8 as a control beside the bench's fp32 rows.
CASES = [("gru", 300, 1), ("gru", 333, 1), ("gru", 384, 1), ("gru", 333, 4), ("gru", 333, 16),
         ("gru", 333, 32), ("gru", 333, 48), ("gru", 384, 16), ("lstm", 300, 1), ("lstm", 333, 1),
         ("lstm", 300, 8), ("lstm", 333, 4), ("lstm", 333, 32), ("rnn_tanh", 300, 1), ("rnn_tanh", 650, 1),
         ("rnn_tanh", 650, 16), ("rnn_tanh", 900, 1), ("rnn_tanh", 900, 32), ("rnn_tanh", 333, 96),
         ("gru", 512, 1), ("lstm", 512, 8), ("gru", 768, 8), ("lstm", 1024, 8), ("lstm", 200, 16)]
# --wide: a grid of shapes besides, for a fit that holds away from CASES.
WIDE_CASES = [(cell, H, B) for cell in ("gru", "lstm", "rnn_tanh") for H in (100, 256, 333, 512, 768, 1024)
              for B in (1, 4, 16, 64)]


def form_of(tile) -> str:
    """The form a tile belongs to, as the fit groups them."""
    if isinstance(tile, ClusterTile):
        return "cluster lanes" if tile.k_lanes else \
            "cluster registers" if tile.weights_in_registers else "cluster shared"
    if isinstance(tile, StagedPersistentTile):
        return "grid staged, tensor maps" if tile.tensor_map else "grid staged"
    if isinstance(tile, RegisterPersistentTile):
        return "grid registers"
    if isinstance(tile, TensorTile):
        return "cluster tensor registers" if tile.weights_in_registers else "cluster tensor"
    return "grid"


def tile_record(tile) -> dict:
    return {"class": type(tile).__name__, **dataclasses.asdict(tile)}


def variants(cell: str, H: int, B: int, target: str, per_group: int = FORMS_PER_GROUP, dtype: str = "float32"):
    """(form, tile, predicted seconds, compiled model, the mode's pick?) for the model's
    best ``per_group`` tiles of each form that fits: for float32 (precision exact) the FMA
    grid and cluster forms, for a half type (its default precision, tensor) the FMA cluster
    forms and the cluster kernel on tensor cores, whose prices the FMA ones are ranked against."""
    spec = {"name": "forms_sweep", "dtype": dtype, "input_size": H,
            "layers": [{"name": "l0", "cell": cell, "hidden_size": H}]}
    itemsize = 4 if dtype == "float32" else 2
    options = {"precision": "exact"} if itemsize == 4 else {}
    out = []
    # A launch a step (the planner's per-step kernel, priced as its decision prices it), for
    # the ranking against the persistent forms.
    none = rnncc.compile(spec, target=target, batch=B, seq_len=S, persistence="none", gemm="rnncc", **options)
    d = none.plan.layers[0].persistence
    step = none.plan.layers[0].step_tile.value if d.value.math == "fma" else d.value
    out.append((f"none {d.value.math}", step, min(v for k, v in d.alternatives.items() if k.startswith("none")), none, True))
    for mode in ("grid", "cluster") if itemsize == 4 else ("cluster",):
        try:
            base = rnncc.compile(spec, target=target, batch=B, seq_len=S, persistence=mode, gemm="rnncc", **options)
        except rnncc.PlanError:  # W_hh fits no cluster
            continue
        l, t = base.plan.layers[0], base.target
        fits = lambda tiles: [c for c in tiles if c.shared_bytes(H, l.gates, itemsize)  # noqa: E731
                              <= t.shared_memory_per_block_optin]
        if mode == "grid":
            families = [(grid_family(l, B, t, 4)[0], persistent_seconds, "fma")]
        else:
            families = [(fits(cluster_tiles(H, l.gates, B, t)), cluster_seconds, "fma")]
            if itemsize == 2:
                families.append((fits(tensor_tiles(H, l.gates, B, t, "cluster", 2)), tensor_seconds, "tensor"))
        chosen = l.persistence.value.tile if isinstance(l.persistence.value, Persistent) else None
        for tiles, price, math_ in families:
            groups: dict[str, list] = {}
            for tile in sorted(tiles, key=lambda c: price(B, H, l.gates, c, t, itemsize)):
                groups.setdefault(form_of(tile), []).append(tile)
            for form, ts in groups.items():
                for tile in ts[:per_group]:
                    value = Persistent.of(mode, math_, tile, H, l.gates, itemsize)
                    out.append((form, tile, price(B, H, l.gates, tile, t, itemsize),
                                base.with_persistence(l.name, value, "forced by the sweep"), tile == chosen))
    return out


def main(path: str | None, build_only: bool, only: list[tuple] | None, sets: tuple[str, ...] = ()) -> None:
    """``sets``: "wide", "large", "grid-large" and "half" add those cases (the wide ones at
    WIDE_PER_GROUP tiles a form); none: CASES; ``only``: these float32 cases alone."""
    if only:
        float32 = list(only)
    elif "wide" in sets:
        float32 = CASES + [c for c in WIDE_CASES if c not in CASES]
    else:
        float32 = [] if sets else CASES
    float32 += LARGE_CASES if "large" in sets else []
    float32 += [c for c in GRID_LARGE_CASES if c not in float32] if "grid-large" in sets else []
    chosen = [(*c, "float32") for c in float32] + [(*c, "float16") for c in HALF_CASES if "half" in sets]
    per_group = WIDE_PER_GROUP if "wide" in sets else FORMS_PER_GROUP
    cases = [(c, variants(*c[:3], build_target() if build_only else "device", per_group, c[3])) for c in chosen]
    kernels = {k.name: k for _, vs in cases for *_, m, _ in vs for k in m.kernels}
    print(f"nvcc: {len(kernels)} kernels", file=sys.stderr, flush=True)
    compile_all(list(kernels.values()), cases[0][1][0][3].target.arch)
    if build_only:
        return
    import torch
    from rnncc.timing import time_graph
    torch.manual_seed(0)
    with open(path, "w") as out:
        for (cell, H, B, dtype), vs in cases:
            x = torch.randn(S, B, H, device="cuda", dtype=getattr(torch, dtype))
            projection = {}  # µs a step of the input projection, by mode (one kernel for its tiles)
            for form, tile, predicted, m, chosen in vs:
                mode = form.split()[0]
                record = {"cell": cell, "dtype": dtype, "H": H, "B": B, "form": form,
                          "tile": tile_record(tile), "predicted_us": predicted * 1e6, "mode_pick": chosen}
                try:
                    long = time_graph(lambda: m(x), 2, 7).median_ms
                    short = time_graph(lambda: m(x[:S_SHORT]), 2, 7).median_ms
                    if mode not in projection:
                        projection[mode] = projection_us_a_step(m, x)
                    record["projection_us"] = projection[mode]
                    record["measured_us"] = (long - short) * 1e3 / (S - S_SHORT) - projection[mode]
                except Exception as e:  # noqa: BLE001 (a tile the GPU refuses: reported, not timed)
                    record["failed"] = str(e)[:200]
                print(json.dumps(record), file=out, flush=True)
                print(f"{cell} H={H} B={B} {form}: {record.get('measured_us', float('nan')):.2f} µs measured, "
                      f"{record['predicted_us']:.2f} predicted{'  (picked)' if chosen else ''}", flush=True)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    only = [(c, int(h), int(b)) for c, h, b in
            (a.removeprefix("--case=").split(",") for a in sys.argv[1:] if a.startswith("--case="))]
    main(args[0] if args else None, "--build-only" in sys.argv, only or None,
         tuple(name for name in ("wide", "large", "grid-large", "half") if f"--{name}" in sys.argv))
