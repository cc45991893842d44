"""The tensor grid kernel's tiles with as much of W_hh in registers as a thread can hold
(TensorTile.register_steps: all but one k-step of each warp's share where ptxas' cap
allows), beside the same tiles with W_hh in shared memory, at the shapes where cuDNN's
persistent kernel steps faster than rnncc's (LSTM fp16 H=1024 B=16 and 32). Nsight Compute
shows cuDNN's `ampere_lstm_tile16<64, 2>` there as 64 blocks of 256 threads at 214
registers a thread, 97 KiB of shared memory (results/ncu-cudnn-lstm-h1024-h200-2026-11-28.txt):
W_hh of 16 units a block (128 KiB) mostly in registers. µs a step: CUDA-graph replays of
one layer's forward at S=256 and S=129, the difference over 127 steps (the projection and
the kernel's start drop out). Needs a Hopper GPU and PyTorch, except with --build-only.

    python3 benchmarks/register_tiles.py [--build-only] [--case=lstm,float16,1024,16 ...]
    python3 benchmarks/register_tiles.py --offered [--case=...]   (every resident tile the
        planner offers, TensorTile.with_weights_resident, beside its pick)
"""

from __future__ import annotations

import sys
from dataclasses import replace

import rnncc
from rnncc.build import compile_all
from rnncc.passes.cost import tensor_seconds, tensor_tiles
from rnncc.tiles import Persistent, TensorTile, register_cap
from rnncc.timing import time_graph
from ab_rows import build_target
from grid_tile_sweep import describe

CASES = [("lstm", "float16", 1024, 16), ("lstm", "float16", 1024, 8), ("lstm", "float16", 1024, 32),
         ("gru", "float16", 1024, 16)]
PER_CASE = 6  # the model's best mma.sync grid tiles, each also with W_hh in registers
LENGTHS = (129, 256)


def most_in_registers(t: TensorTile, hidden: int, gates: int) -> TensorTile | None:
    """``t`` with the most k-steps of each warp's share in registers that the HYBRID_*
    estimate puts under ptxas' cap (at most all but one, as the template asks)."""
    steps = min(t.k_steps(hidden, 2) - 1, (register_cap(t.threads) - t.registers_beside_w(gates)) // 4)
    return replace(t, register_steps=steps) if steps > 0 else None


def variants(cell: str, dtype: str, H: int, B: int, target: str, offered: bool = False):
    """(tile, predicted seconds, {S: compiled model}, the planner's pick?) for the model's
    PER_CASE best grid tiles on mma.sync, each with W_hh in shared memory and in registers;
    ``offered``: the planner's pick and every resident tile it weighs instead."""
    spec = {"name": "register_tiles", "dtype": dtype, "input_size": H,
            "layers": [{"name": "l0", "cell": cell, "hidden_size": H}]}
    bases = {S: rnncc.compile(spec, target=target, batch=B, seq_len=S, persistence="grid") for S in LENGTHS}
    l, tgt = bases[LENGTHS[-1]].plan.layers[0], bases[LENGTHS[-1]].target
    budget = tgt.shared_memory_per_block_optin
    fits = [t for t in tensor_tiles(H, l.gates, B, tgt, "grid", 2)
            if not t.wgmma and t.shared_bytes(H, l.gates, 2) <= budget]
    ranked = sorted(fits, key=lambda t: tensor_seconds(B, H, l.gates, t, tgt, 2))[:PER_CASE]
    chosen = l.persistence.value.tile
    if offered:
        resident = [r for r in (t.with_weights_resident(H, l.gates, 2) for t in fits) if r is not None]
        ranked = sorted(resident, key=lambda t: tensor_seconds(B, H, l.gates, t, tgt, 2))
        tiles = ([chosen] if chosen not in ranked else []) + ranked
    else:
        tiles = ([chosen] if chosen not in ranked else []) + ranked
        tiles += [r for r in (most_in_registers(t, H, l.gates) for t in ranked) if r is not None]
    out = []
    for t in tiles:
        value = Persistent.of("grid", "tensor", t, H, l.gates, 2)
        models = {S: m.with_persistence(l.name, value, "forced by register_tiles.py") for S, m in bases.items()}
        out.append((t, tensor_seconds(B, H, l.gates, t, tgt, 2), models, t == chosen))
    return out


def main(build_only: bool, only: list[tuple] | None, offered: bool = False) -> None:
    cases = [(c, variants(*c, build_target() if build_only else "device", offered)) for c in (only or CASES)]
    kernels = {k.name: k for _, vs in cases for _, _, ms, _ in vs for m in ms.values() for k in m.kernels}
    print(f"nvcc: {len(kernels)} kernels", file=sys.stderr, flush=True)
    compile_all(list(kernels.values()), cases[0][1][0][2][LENGTHS[0]].target.arch)
    if build_only:
        return
    import torch
    torch.manual_seed(0)
    for (cell, dtype, H, B), vs in cases:
        xs = {S: torch.randn(S, B, H, device="cuda", dtype=getattr(torch, dtype)) for S in LENGTHS}
        for t, predicted, models, chosen in vs:
            try:
                ms = {S: time_graph(lambda: models[S](xs[S]), 3, 15).median_ms for S in LENGTHS}
            except Exception as e:  # noqa: BLE001 (a tile the GPU refuses: reported, not timed)
                print(f"{cell} {dtype} H={H} B={B}: {describe(t)}: failed: {e}", flush=True)
                continue
            step = (ms[LENGTHS[1]] - ms[LENGTHS[0]]) * 1e3 / (LENGTHS[1] - LENGTHS[0])
            print(f"{cell} {dtype} H={H} B={B}: {describe(t)} register_steps={t.register_steps}: "
                  f"{step:.2f} µs/step, S=256 {ms[256]:.3f} ms, predicted {predicted * 1e6:.2f}"
                  f"{'  (the planner picks this)' if chosen else ''}", flush=True)


if __name__ == "__main__":
    only = [(c, d, int(h), int(b)) for c, d, h, b in
            (a.removeprefix("--case=").split(",") for a in sys.argv[1:] if a.startswith("--case="))]
    main("--build-only" in sys.argv, only or None, "--offered" in sys.argv)
