"""ptxas' registers and spills for the grid kernel's wgmma blocks of several batch tiles
that its register bound (tiles.WGMMA_GRID_BASE_REGISTERS, TensorTile.wgmma_registers) keeps
out of the planner's grid family (persistence.grid_family) and that would otherwise be
priced below every tile it admits: the 3 cheapest a shape, fp16 LSTM and GRU layers at
B = 96-256; each kernel once. No GPU: nvcc only. The estimate is printed beside what ptxas
gives, to fit the bound to (34f3f4b's rests on four shapes: 3 tiles a block fitted at LSTM
H=700 B=256, 4 spilled at H=777-1024).

    python3 benchmarks/wgmma_grid_spills.py [CELLS [HIDDEN [BATCHES]]] > OUT.txt   (from the repository root)
        e.g. lstm,gru 768,777,1024 128,256

A line a kernel: "ok" or "SPILL", [cell, dtype, H, B, variant, units, batch rows, batch tiles
a block, threads, the best admitted tile's price ÷ this one's], the estimate and the cap,
ptxas' registers, spill stores, stack frame bytes.
"""
import sys

import rnncc
import rnncc.tiles
from rnncc.passes.persistence import grid_family
from rnncc.tiles import Persistent, register_cap

from hybrid_forward_spills import report  # run as a script: benchmarks/ is on sys.path

CELLS = ("lstm", "gru")
HIDDEN = (512, 700, 768, 777, 900, 1000, 1024, 1100, 1300)
BATCHES = (96, 128, 192, 256)
TOP = 3  # tiles a shape


def kernels(cells, hidden, batches, variants=("plain",)):
    """(key, (estimate, cap), kernel) of the wgmma grid tiles of several batch tiles a block
    that the bound keeps out and that tensor_seconds prices below every tile it admits (the
    cheapest TOP of them), the first key of each distinct kernel."""
    seen = {}
    for cell in cells:
        for H in hidden:
            for B in batches:
                for variant in variants:
                    m = rnncc.compile({"name": "s", "dtype": "float16", "input_size": H,
                                       "layers": [{"name": "l0", "cell": cell, "hidden_size": H}]},
                                      target="h200", batch=B, seq_len=64,
                                      **({"backward_gates": "save"} if variant == "gates" else {}))
                    l = m.plan.layers[0]
                    picked = getattr(l.persistence.value, "tile", None)
                    admitted, price, _ = grid_family(l, B, m.target, 2)
                    bound = rnncc.tiles.WGMMA_GRID_BASE_REGISTERS
                    rnncc.tiles.WGMMA_GRID_BASE_REGISTERS = -10 ** 6  # every block of several tiles
                    try:
                        lifted = grid_family(l, B, m.target, 2)[0]
                    finally:
                        rnncc.tiles.WGMMA_GRID_BASE_REGISTERS = bound
                    best = min(price(B, H, l.gates, t, m.target, 2) for t in admitted)
                    kept_out = sorted((price(B, H, l.gates, t, m.target, 2), i, t) for i, t in enumerate(lifted)
                                      if t not in admitted and price(B, H, l.gates, t, m.target, 2) < best)
                    for seconds, _, t in kept_out[:TOP]:
                        k = m.with_persistence("l0", Persistent.of("grid", "tensor", t, H, l.gates, 2),
                                               "forced by wgmma_grid_spills").kernel_of("l0", "recurrent")
                        key = [cell, "float16", H, B, variant, t.units_per_block, t.batch_per_block,
                               t.tiles_per_block, t.threads, round(best / seconds, 3)]
                        seen.setdefault(k.name + str(hash(k.source)),
                                        (key, (t.wgmma_registers(l.gates), register_cap(t.threads)), k))
    return list(seen.values())


if __name__ == "__main__":
    args = sys.argv[1:] + [None] * (3 - len(sys.argv[1:]))
    sys.exit(report(kernels(args[0].split(",") if args[0] else CELLS,
                            [int(h) for h in args[1].split(",")] if args[1] else HIDDEN,
                            [int(b) for b in args[2].split(",")] if args[2] else BATCHES)))
