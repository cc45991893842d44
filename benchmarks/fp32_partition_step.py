"""The step a 4 × LSTM fp32 exact H=512 B=8 stack's layer would run at if its grid kernel left
SMs for the next layers' projections (issue 15's fp32 row; design notes, "Layers at once,
measured"). Today's plan runs each layer on 32 blocks (W_hhᵀ in registers), which leaves 4
SMs: the chunks' exact GEMMs wait for the recurrences (rounds of ~125 µs of chunks, then
~55 µs of GEMMs). A resident schedule hides the GEMMs if the four layers leave ~28 SMs,
i.e. 24–26 blocks a layer, where the registers form cannot hold W_hh.

For units a block of 16 (32 blocks, today's), 20 (26 blocks) and 22 (24 blocks): the
cheapest FMA grid tile the planner's family has (passes.persistence.grid_family), forced on
one layer, timed in a CUDA graph at S=256 and S=129 (their difference: the step without
the call's fixed costs) alone, and four such layers on four streams at once in one graph
(each its own weights and input: the step beside three others), by rnncc.timing.time_graph. Prints each tile, its
price and its times. Needs a GPU, PyTorch and PyCUDA.

    python3 benchmarks/fp32_partition_step.py > benchmarks/results/fp32-partition-step-<gpu>-<date>.txt
"""
from __future__ import annotations

import torch

import rnncc
from rnncc.passes.persistence import grid_family, grid_description
from rnncc.tiles import Persistent
from rnncc.timing import time_graph

H, B, G = 512, 8, 4
SPEC = {"name": "l", "dtype": "float32", "input_size": H,
        "layers": [{"name": "l1", "cell": "lstm", "hidden_size": H}]}


def four_at_once(models, xs):
    """A callable running the four models on four streams forked from the current one."""
    streams = [torch.cuda.Stream() for _ in models]

    def run():
        main = torch.cuda.current_stream()
        for s, m, x in zip(streams, models, xs):
            s.wait_stream(main)
            with torch.cuda.stream(s):
                m(x)
        for s in streams:
            main.wait_stream(s)
    return run


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    print(f"# benchmarks/fp32_partition_step.py, {torch.cuda.get_device_name()}, torch {torch.__version__}")
    base = [rnncc.compile(SPEC, target="device", batch=B, seq_len=256, precision="exact", schedule="sequential")
            for _ in range(4)]  # four models: four sets of random weights
    layer = base[0].plan.layers[0]
    print(f"the plan's own tile: {grid_description(layer.persistence.value)}")
    xs = {S: [torch.randn(S, B, H, device="cuda") for _ in range(4)] for S in (256, 129)}
    target = base[0].target
    for units in (16, 20, 22):
        most = -(-H // units)  # blocks: the batch in one tile (no split along y)
        tiles, price, math_ = grid_family(layer, B, target, 4, units)
        tiles = [t for t in tiles if Persistent.of("grid", math_, t, H, G, 4).blocks <= most]
        if not tiles:
            print(f"units {units}: no grid tile of {most} blocks fits")
            continue
        tile = min(tiles, key=lambda t: (price(B, H, G, t, target, 4), t.threads))
        value = Persistent.of("grid", math_, tile, H, G, 4)
        models = [m.with_persistence("l1", value, f"{units} units a block, forced") for m in base]
        with torch.no_grad():
            alone = {S: time_graph(lambda: models[0](xs[S][0]), 3, 20).median_ms for S in (256, 129)}
            beside = {S: time_graph(four_at_once(models, xs[S]), 3, 20).median_ms for S in (256, 129)}
            differ = float((models[0](xs[256][0])[0] - base[0](xs[256][0])[0]).abs().max())
        step = {k: (t[256] - t[129]) / (256 - 129) * 1e3 for k, t in (("alone", alone), ("beside 3", beside))}
        print(f"units {units}: {value.blocks} blocks, {grid_description(value)}; priced "
              f"{price(B, H, G, tile, target, 4) * 1e6:.2f} µs a step. Graph ms at S=256: alone "
              f"{alone[256]:.3f}, four at once {beside[256]:.3f}; µs a step (S=256 less S=129): alone "
              f"{step['alone']:.2f}, beside three others {step['beside 3']:.2f}; y within {differ:.1e} of the "
              "plan's own tile's", flush=True)


if __name__ == "__main__":
    main()
