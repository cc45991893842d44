"""µs a step of a persistent kernel for the tiles the cost model considers (each tile put
into the plan in turn), beside the model's prediction: the data for fitting the model.
Times are CUDA-graph replays of one layer's forward at S=256 (the GPU time alone). Needs a
Hopper GPU and PyTorch.

    python3 benchmarks/grid_tile_sweep.py          # grid kernel on tensor cores, every tile
    python3 benchmarks/grid_tile_sweep.py wide     # the same at the WIDE_CASES: the model's
                                                   # best 3 tiles of each block width (units)
    python3 benchmarks/grid_tile_sweep.py cluster  # FMA cluster kernel (float32 exact): the
                                                   # model's best 3 tiles of each cluster size
    python3 benchmarks/grid_tile_sweep.py lanes    # the lanes form at small batches: the
                                                   # model's best 2 tiles of each (cluster
                                                   # size, warps a block), to tell the two apart
    python3 benchmarks/grid_tile_sweep.py fma      # the grid kernel in FMA (float32 exact):
                                                   # the model's best 2 tiles of each (units a
                                                   # block, batch tile, rows a thread, blocks
                                                   # along y)
    python3 benchmarks/grid_tile_sweep.py tensor   # the cluster kernel on tensor cores, both
                                                   # forms (W in shared memory or in
                                                   # registers): the model's best 2 tiles of
                                                   # each (form, cluster size)
    RNNCC_CACHE_DIR=.cubins python3 benchmarks/grid_tile_sweep.py cluster --build-only
                                                   # nvcc only (no GPU), for carrying the cache
                                                   # (planned for RNNCC_BUILD_TARGET, default h200)
    python3 benchmarks/grid_tile_sweep.py wgmma    # the grid kernel on tensor cores, each block
                                                   # shape near the pick with its product by
                                                   # mma.sync and by wgmma
    python3 benchmarks/grid_tile_sweep.py parts    # every grid tile on tensor cores of an SM
                                                   # partition (PARTS_CASES, PARTS)
    python3 benchmarks/grid_tile_sweep.py tensor --case=lstm,float16,512,8
                                                   # these cases only (repeat --case=)
    python3 benchmarks/grid_tile_sweep.py --family --steps --case=gru,float16,768,1
                                                   # --family (grid mode): the planner's whole
                                                   # grid family (persistence.grid_family: also
                                                   # the tiles with W_hh resident in registers or
                                                   # partly there); --steps: the step alone,
                                                   # (S=256 − S=129) / 127, not S=256's forward
                                                   # over 256 (which holds the projection),
                                                   # and a line a case with the projection's
                                                   # share of that step (torch.profiler)
    python3 benchmarks/grid_tile_sweep.py --family --projection-only --case=...
                                                   # that line alone, for each case

The grid run is committed as benchmarks/results/grid-tile-sweep-h100-2026-11-23.txt and
fitted in passes/cost.py (GRID_*). The cluster run is for the FMA cluster kernel at large
batches, which the model puts at 2.2 µs a step where it runs 11.7 (LSTM fp32 H=256 B=64).
"""

from __future__ import annotations

import sys
from dataclasses import replace

import rnncc
from rnncc.build import compile_all
from rnncc.passes.cost import (cluster_seconds, cluster_tiles, partition_units, persistent_seconds,
                               persistent_tiles, tensor_seconds, tensor_tiles)
from rnncc.passes.persistence import grid_family
from rnncc.tiles import ClusterTile, Persistent, PersistentTile, TensorTile
from rnncc.timing import time_graph
from ab_rows import build_target

S = 256
# (cell, dtype, H, B): the sweep's cliffs and their neighbours, and bench rows in grid mode.
CASES = [("lstm", "float16", 650, 20), ("lstm", "float16", 640, 20), ("lstm", "float16", 650, 8),
         ("lstm", "float16", 1024, 64), ("lstm", "float16", 1024, 8), ("lstm", "float16", 512, 8),
         ("gru", "float16", 650, 20), ("lstm", "float32", 1024, 64)]
# (cell, dtype, H, B) where the grid kernel may take twice the fewest units a block and
# split the batch between blocks (tensor_tiles): its rows at B=64, and the word-level LM.
WIDE_CASES = [("lstm", "float16", 1024, 64), ("gru", "bfloat16", 1024, 64), ("lstm", "float16", 650, 20),
              ("lstm", "float16", 512, 64), ("lstm", "float16", 1024, 20), ("gru", "float16", 1024, 64)]
WIDE_PER_WIDTH = 3
# (cell, dtype, H, B) for the FMA cluster kernel: the sweep's worst points and the bench's.
CLUSTER_CASES = [("lstm", "float32", 256, 64), ("gru", "float32", 256, 64), ("lstm", "float32", 256, 8),
                 ("gru", "float32", 100, 1), ("gru", "float32", 100, 20), ("lstm", "float32", 100, 20),
                 ("lstm", "float32", 128, 1), ("rnn_tanh", "float32", 33, 5)]
CLUSTER_PER_SIZE = 3  # the model's best tiles of each cluster size (1, 2, 4, 8)
# (cell, dtype, H, B) for the lanes form at small batches, where its model's picks ran
# 1.24–1.37× the fastest tile (docs/design-notes.md): the warps of a block and the blocks
# of a cluster varied apart, batch tiles no larger than B rounded up to a power of two.
LANES_CASES = [("gru", "float32", 100, 1), ("lstm", "float32", 128, 1), ("lstm", "float32", 64, 1),
               ("gru", "float32", 100, 4), ("lstm", "float32", 100, 20), ("gru", "float32", 256, 1)]
LANES_PER_GROUP = 2
# (cell, dtype, H, B) for the cluster kernel on tensor cores: the bench's cluster rows and
# the sweep's worst points (GRU fp16 H=100), float32 on TF32.
TENSOR_CASES = [("lstm", "float16", 256, 8), ("gru", "float16", 256, 8), ("lstm", "float16", 256, 64),
                ("gru", "float16", 100, 20), ("gru", "float16", 100, 1), ("lstm", "float32", 256, 8),
                ("lstm", "bfloat16", 128, 4), ("rnn_tanh", "float16", 64, 1),
                # clusters of 9–16 blocks (W_hh of fp16 H=512 fits no cluster of 8) and of
                # any size (GRU H=650: 14 blocks of 48 units)
                ("lstm", "float16", 512, 8), ("gru", "float16", 512, 8), ("lstm", "float16", 512, 64),
                ("gru", "float16", 650, 20)]
TENSOR_PER_GROUP = 2
# (cell, dtype, H, B) for the grid kernel in FMA (float32 exact): the sweep's fp32 grid
# points (H=650 at B=20 ran 21.5 µs a step on 3 batch tiles of 8 a block) and bench rows.
FMA_CASES = [("lstm", "float32", 650, 20), ("gru", "float32", 650, 20), ("lstm", "float32", 650, 1),
             ("gru", "float32", 512, 4), ("lstm", "float32", 1024, 4), ("lstm", "float32", 1024, 8),
             ("gru", "float32", 1024, 1), ("lstm", "float32", 300, 64), ("gru", "float32", 1024, 8),
             ("lstm", "float32", 512, 16)]
FMA_PER_GROUP = 2
# (cell, dtype, H, B) for the grid kernel's product by wgmma beside mma.sync: the batches
# where the product is a third of the step (LSTM fp16 H=1024 B=64, results/step-split-
# h100-2026-11-25.txt), odd ones, and B=8.
WGMMA_CASES = [("lstm", "float16", 1024, 64), ("gru", "bfloat16", 1024, 64), ("lstm", "float16", 650, 20),
               ("lstm", "float16", 512, 64), ("lstm", "float16", 1024, 32), ("gru", "float16", 768, 48),
               ("lstm", "bfloat16", 1024, 8), ("lstm", "float16", 1024, 8)]
WGMMA_WITHIN = 1.5
# (cell, dtype, H, B) for the grid tiles of SM partitions (a pipelined stack's layers side by
# side: units a block for 1/p of the SMs, p in PARTS), every tile: 2 × GRU bf16 H=768 B=64's
# partition tile ran 13.5 µs a step priced 5.2 (results/graph-kernel-times-h100-2026-11-28-at-786400f.json).
PARTS_CASES = [("gru", "bfloat16", 768, 64), ("lstm", "float16", 1024, 64), ("lstm", "float16", 1024, 8)]
PARTS = (2, 4)
FMA_WITHIN = 4.0  # ... of the groups whose best tile the model puts within 4× of its pick


def variants(cell: str, dtype: str, H: int, B: int, mode: str = "grid", target: str = "device",
             family: bool = False):
    """(tile, predicted seconds, compiled model, the model's pick?) for the tiles that fit:
    every grid tile on tensor cores (mode grid), or the model's best WIDE_PER_WIDTH of each
    block width (mode wide); the model's best CLUSTER_PER_SIZE FMA cluster tiles
    of each cluster size (mode cluster), LANES_PER_GROUP of the lanes form's groups (mode
    lanes) or TENSOR_PER_GROUP tensor-core cluster tiles of each form and cluster size
    (mode tensor); the model's pick among them."""
    spec = {"name": "tile_sweep", "dtype": dtype, "input_size": H,
            "layers": [{"name": "l0", "cell": cell, "hidden_size": H}]}
    tensor = mode in ("grid", "wide", "tensor", "wgmma", "parts")
    persistence = "grid" if mode in ("grid", "wide", "fma", "wgmma", "parts") else "cluster"
    base = rnncc.compile(spec, target=target, batch=B, seq_len=S, persistence=persistence,
                         gemm="rnncc", precision="tensor" if tensor else "exact")
    l, target = base.plan.layers[0], base.target
    itemsize = 2 if dtype != "float32" else 4
    if mode == "parts":
        candidates = [t for p in PARTS for t in tensor_tiles(H, l.gates, B, target, persistence, itemsize,
                                                             units=partition_units(H, target, p))]
    elif family and mode == "grid":  # the planner's grid family, its resident and hybrid variants included
        candidates = grid_family(l, B, target, itemsize)[0]
    elif tensor:
        candidates = tensor_tiles(H, l.gates, B, target, persistence, itemsize)
    elif mode == "fma":
        candidates = persistent_tiles(H, l.gates, B, target)
    else:
        candidates = cluster_tiles(H, l.gates, B, target)
    fits = [t for t in candidates if t.shared_bytes(H, l.gates, itemsize) <= target.shared_memory_per_block_optin]
    seconds = tensor_seconds if tensor else persistent_seconds if mode == "fma" else cluster_seconds
    ranked = sorted(fits, key=lambda t: seconds(B, H, l.gates, t, target, itemsize))
    chosen = l.persistence.value.tile
    if mode == "wide":
        widths: dict[int, list] = {}
        for t in ranked:
            widths.setdefault(t.units_per_block, []).append(t)
        ranked = [t for ts in widths.values() for t in ts[:WIDE_PER_WIDTH]]
        ranked += [chosen] if chosen not in ranked else []
    elif mode == "wgmma":
        # Each block shape (units, rows, blocks along y, K split) the model ranks within
        # WGMMA_WITHIN of its pick, with its product by mma.sync and by wgmma.
        best = seconds(B, H, l.gates, ranked[0], target, itemsize)
        shape = lambda t: (t.units_per_block, t.batch_per_block, t.batch_blocks, t.k_split)  # noqa: E731
        near = {shape(t) for t in ranked if seconds(B, H, l.gates, t, target, itemsize) <= WGMMA_WITHIN * best}
        ranked = [t for t in ranked if shape(t) in near]
        ranked += [chosen] if chosen not in ranked else []
    elif mode == "tensor":
        groups = {}
        for t in ranked:
            groups.setdefault((t.weights_in_registers, t.wgmma, t.cluster), []).append(t)
        ranked = [t for ts in groups.values() for t in ts[:TENSOR_PER_GROUP]]
        # (a half layer's pick may be the FMA lanes form, which the lanes mode sweeps)
        ranked += [chosen] if chosen not in ranked and isinstance(chosen, TensorTile) else []
    elif mode == "fma":
        groups = {}
        for t in ranked:
            groups.setdefault((t.units_per_block, t.batch_per_block, t.batch_per_thread, t.batch_blocks),
                              []).append(t)
        best = seconds(B, H, l.gates, ranked[0], target, itemsize)
        ranked = [t for ts in groups.values() for t in ts[:FMA_PER_GROUP]
                  if seconds(B, H, l.gates, ts[0], target, itemsize) <= FMA_WITHIN * best]
        ranked += [chosen] if chosen not in ranked else []
    elif mode == "lanes":
        groups: dict[tuple[int, int], list] = {}
        for t in ranked:
            if t.k_lanes and t.batch_per_block <= 1 << (B - 1).bit_length():
                groups.setdefault((t.cluster, -(-t.threads // 32)), []).append(t)
        ranked = [t for ts in groups.values() for t in ts[:LANES_PER_GROUP]]
        ranked += [chosen] if chosen not in ranked else []  # the planner's pick, either form
    elif not tensor:
        by_size: dict[int, list] = {}
        for t in ranked:
            by_size.setdefault(t.cluster, []).append(t)
        ranked = [t for ts in by_size.values() for t in ts[:CLUSTER_PER_SIZE]]
        ranked += [t for t in fits if t == chosen and t not in ranked]
        # ... and each with its weights in registers, where they fit.
        ranked += [replace(t, weights_in_registers=True) for t in ranked
                   if not t.weights_in_registers and t.registers_fit(H, l.gates)
                   and replace(t, weights_in_registers=True) not in ranked]
    out = []
    for t in ranked:
        value = Persistent.of(persistence, "tensor" if tensor else "fma", t, H, l.gates, itemsize)
        out.append((t, seconds(B, H, l.gates, t, target, itemsize),
                    base.with_persistence(l.name, value, "forced by the sweep"), t == chosen))
    return out


def describe(t) -> str:
    if isinstance(t, PersistentTile):
        return (f"units={t.units_per_block} bpb={t.batch_per_block} rows/thread={t.batch_per_thread} "
                f"ks={t.k_split} units/thread={t.units_per_thread} batch_blocks={t.batch_blocks} "
                f"threads={t.threads}")
    if isinstance(t, ClusterTile):
        return (f"cluster={t.cluster} units={t.units_per_block} bpb={t.batch_per_block} "
                f"rows/thread={t.batch_per_thread} ks={t.k_split} units/thread={t.units_per_thread} "
                f"threads={t.threads}{' registers' if t.weights_in_registers else ''}"
                f"{' lanes' if t.k_lanes else ''}")
    return (f"{f'cluster={t.cluster} ' if t.cluster else ''}units={t.units_per_block} "
            f"bpb={t.batch_per_block} ks={t.k_split} m_tiles={t.m_tiles} "
            f"batch_blocks={t.batch_blocks} threads={t.threads}"
            f"{' registers' if t.weights_in_registers else ''}{' wgmma' if t.wgmma else ''}"
            f"{f' register_steps={t.register_steps}' if t.register_steps else ''}")


S_SHORT = 129  # --steps: a step is the two forwards' difference over S − S_SHORT


def projection_us_a_step(m, x, calls: int = 5) -> float:
    """µs a step of a call's kernels other than the recurrence (the input projection, which
    the plan prices apart and a step measured as two forwards' difference holds): their GPU
    time (torch.profiler) at S and S_SHORT steps, the difference over S − S_SHORT."""
    import torch
    from partition_profile import kernel_events

    def others(xs) -> float:
        for _ in range(3):
            m(xs)
        torch.cuda.synchronize()
        events = kernel_events(lambda: [m(xs) for _ in range(calls)])
        return sum(e["dur"] for e in events if "recurrent" not in e["name"]) / calls

    return (others(x) - others(x[:S_SHORT])) / (S - S_SHORT)


def main(mode: str, build_only: bool = False, only: list[tuple] | None = None, family: bool = False,
         steps: bool = False, projection_only: bool = False) -> None:
    """``build_only``: plan for ab_rows.build_target()'s preset (RNNCC_BUILD_TARGET, default
    h200, the GPU lent since 2026-11-28) and fill the cubin cache, no GPU needed
    (then carry RNNCC_CACHE_DIR to the GPU machine, saving its nvcc time). ``only``: these
    (cell, dtype, H, B) cases instead of the mode's. ``steps``: a line a case with the
    projection's µs a step (projection_us_a_step) before its tiles; ``projection_only``: that
    line alone."""
    chosen = only or {"grid": CASES, "wide": WIDE_CASES, "cluster": CLUSTER_CASES,
                      "lanes": LANES_CASES, "tensor": TENSOR_CASES, "fma": FMA_CASES,
                      "wgmma": WGMMA_CASES, "parts": PARTS_CASES}[mode]
    cases = [(c, variants(*c, mode, build_target() if build_only else "device", family)) for c in chosen]
    cases = [(c, vs[:1]) for c, vs in cases] if projection_only else cases
    kernels = {k.name: k for _, vs in cases for _, _, m, _ in vs for k in m.kernels}
    print(f"nvcc: {len(kernels)} kernels", file=sys.stderr, flush=True)
    compile_all(list(kernels.values()), cases[0][1][0][2].target.arch)
    if build_only:
        return
    import torch
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    for (cell, dtype, H, B), vs in cases:
        x = torch.randn(S, B, H, device="cuda", dtype=getattr(torch, dtype))
        if steps:  # every tile of a case shares the projection kernel: its share of a step, once
            print(f"{cell} {dtype} H={H} B={B}: projection {projection_us_a_step(vs[0][2], x):.2f} µs/step",
                  flush=True)
        if projection_only:
            continue
        for t, predicted, m, chosen in vs:
            try:
                ms = time_graph(lambda: m(x), 2, 7).median_ms
                if steps:  # the same kernels (one shape class), S_SHORT steps
                    short = time_graph(lambda: m(x[:S_SHORT]), 2, 7).median_ms
                    us = (ms - short) * 1e3 / (S - S_SHORT)
                else:
                    us = ms * 1e3 / S
            except Exception as e:  # noqa: BLE001 (a tile the GPU refuses: reported, not timed)
                print(f"{cell} {dtype} H={H} B={B}: {describe(t)}: failed: {e}", flush=True)
                continue
            print(f"{cell} {dtype} H={H} B={B}: {describe(t)}: measured {us:.2f} µs/step, predicted "
                  f"{predicted * 1e6:.2f}{'  (the model picks this)' if chosen else ''}", flush=True)


if __name__ == "__main__":
    flags = ("--build-only", "--family", "--steps", "--projection-only")
    args = [a for a in sys.argv[1:] if a not in flags and not a.startswith("--case=")]
    only = [(c, d, int(h), int(b)) for c, d, h, b in
            (a.removeprefix("--case=").split(",") for a in sys.argv[1:] if a.startswith("--case="))]
    main(args[0] if args else "grid", "--build-only" in sys.argv, only or None, "--family" in sys.argv,
         "--steps" in sys.argv or "--projection-only" in sys.argv, "--projection-only" in sys.argv)
