"""Where a step of the backward recurrence's cluster form goes, and what a template change
does to it (issue 17). Each variant is the planned backward kernel (tiles.backward_kernel_tile)
rendered again, either with marked parts cut out of its source (step_split.without: the
product, the cell, the exchange's sends and wait ("sync"), the fetch of the inputs of the
steps ahead ("projection")) or under a template overlay (kernel_variants.overlay_environment:
a directory, or git:REV), then run through backward.recurrence on the same inputs, CUDA-graph
replays interleaved in one process. Overlay variants must agree with the planned kernel's
dG before their time counts. Prints µs a step.

    python3 benchmarks/backward_split.py lstm float16 512 8 [--parts] [--overlay DIR|git:REV ...]
        [--tile CLUSTER,M_TILES,K_SPLIT,BATCH[,REGISTER_STEPS] ...] [--grid]
        [--grid-tile UNITS,ROWS[,THREADS[,K_UNROLL]] ...] [-o DIR]

``--tile``: the kernel at another cluster tile, beside the planned one (checked the same way);
``--grid``: the grid form's tile (tiles.backward_tile), beside;
``--grid-tile``: the grid form at UNITS units a block (⌈H / UNITS⌉ blocks) and ROWS batch
rows a pass, THREADS threads a block (256) and K_UNROLL iterations of its K loop in flight (4),
W_hh's columns in shared memory where they fit (tiles.backward_tile's block is one an SM).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import torch
from backward_forms import recurrence_inputs  # benchmarks/ is this script's directory
from kernel_variants import overlay_environment
from step_split import without

from rnncc import backward, build, codegen, driver, tiles
from rnncc.timing import time_graphs_interleaved

CUTS = {"without product": ("product",), "without cell": ("cell",), "without sync": ("sync",),
        "without projection": ("projection",), "none": ("product", "cell", "sync", "projection")}
S = 256


def load(k):
    target, _ = backward._device()
    return k, driver.load(k.name, build.compile_cubin(k, target.arch), k.entry, tuple(p.kind for p in k.params),
                          k.dynamic_shared, k.cluster)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cell")
    parser.add_argument("dtype")
    parser.add_argument("hidden", type=int)
    parser.add_argument("batch", type=int)
    parser.add_argument("--overlay", dest="overlays", action="append", default=[])
    parser.add_argument("--tile", dest="tiles", action="append", default=[])
    parser.add_argument("--grid-tile", dest="grid_tiles", action="append", default=[])
    parser.add_argument("--grid", action="store_true", help="time the grid form's tile (tiles.backward_tile) beside")
    parser.add_argument("--parts", action="store_true", help="time the kernel with each part cut out")
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()
    cell, dtype, H, B = args.cell, args.dtype, args.hidden, args.batch
    layer, w_hh, pre, pre_h, h_prev, dy = recurrence_inputs(cell, dtype, H, B, S)
    G = layer.gates
    tile = backward._tile(cell, H, G, dtype, B)
    planned = backward._kernel(cell, H, G, dtype, tile)
    variants = {"planned": (tile, planned)}
    if args.parts:
        for label, parts in CUTS.items():
            k = planned[0]
            variants[label] = (tile, load(replace(k, name=f"{k.name}_{label.replace(' ', '_')}",
                                                  source=without(k.source, parts))))
    for overlay in args.overlays:
        env = overlay_environment(overlay)
        base_environment = codegen.environment
        codegen.environment = lambda env=env: env
        try:
            k = codegen.render_backward(cell, H, G, dtype, tile)
        finally:
            codegen.environment = base_environment
        variants[overlay if overlay.startswith("git:") else Path(overlay).name] = (tile, load(k))
    for text in args.tiles:
        other = tiles.ClusterBackwardTile(*map(int, text.split(",")))
        variants[f"tile {text}"] = (other, backward._kernel(cell, H, G, dtype, other))
    target = backward._device()[0]
    shared_max = tiles.grid_shared_max(target.shared_memory_per_block_optin)
    if args.grid:
        other = tiles.backward_tile(G, H, B, target.sm_count, shared_max)
        variants["grid form"] = (other, backward._kernel(cell, H, G, dtype, other))
    for text in args.grid_tiles:
        units, rows, threads, k_unroll = (list(map(int, text.split(","))) + [256, 4])[:4]
        other = tiles.BackwardTile(units, -(-H // units), rows, True, threads, k_unroll)
        if other.shared_bytes(G, H, B) > shared_max:
            other = replace(other, w_in_shared=False)
        variants[f"grid {units}u {rows}r {threads}t k{k_unroll}{'' if other.w_in_shared else ' L2'}"] = \
            (other, backward._kernel(cell, H, G, dtype, other))

    def run(variant):  # not over the pre-activations (float32's default), which every variant reads
        return backward.recurrence(layer, w_hh, pre, pre_h, h_prev, None, dy, None, None,
                                   tile=variant[0], kernel=variant[1], overwrite=False)
    want = run(variants["planned"])[0].float()
    for label, variant in list(variants.items()):
        if label != "planned" and label not in CUTS:
            got = run(variant)[0].float()
            error = ((got - want).abs().max() / want.abs().max()).item()
            print(f"  {label}: dG within {error:.2e} of the planned kernel's", flush=True)
            if not error <= 1e-2:
                del variants[label]
    times = time_graphs_interleaved({label: (lambda v=v: run(v)) for label, v in variants.items()})
    lines = [f"backward_split: {cell} {dtype} H={H} B={B} S={S}, {tile}, µs a step (graph replays):"]
    full = times["planned"] * 1e3 / (S + 1)
    for label, ms in times.items():
        us = ms * 1e3 / (S + 1)
        lines.append(f"  {label:22s} {us:6.2f}" + (f"   the part costs {full - us:5.2f}" if label.startswith("without") else ""))
    print("\n".join(lines), flush=True)
    if args.output:
        out = Path(args.output) / f"backward-split-{cell}-{dtype}-{H}-{B}.txt"
        out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
