"""ptxas' registers and spills for the grid tiles with W_hh resident in registers
(TensorTile.with_weights_resident: all but one k-step of each warp's share) whose register
estimate is near ptxas' cap: every such tile of the planner's grid family (persistence.
grid_family) at a set of half layers (LSTM H=768-1024, GRU H=1024-1400, tanh RNN
H=1400-2560, fp16 and bf16, B = 1, 8, 16), each plain, saving its gates (a training forward)
and as a residual layer; each kernel once. No GPU: nvcc only.

    python3 benchmarks/resident_grid_spills.py [LOW] > OUT.txt   (from the repository root)

LOW (default 200): the least estimate (4 registers a k-step in registers and
TensorTile.registers_beside_w) of the tiles built. A line a kernel: "ok" or "SPILL",
[cell, dtype, H, B, variant, units, batch rows, k split, warps along M, k-steps in
registers, threads, whether the planner picks it at that B], the estimate, ptxas' registers, spill stores,
stack frame bytes.
"""
import sys

from rnncc.passes.persistence import grid_family
from rnncc.tiles import Persistent

from hybrid_forward_spills import layer_variants, report  # run as a script: benchmarks/ is on sys.path

HIDDEN = {"lstm": (768, 900, 1024), "gru": (1024, 1100, 1200, 1300, 1400), "rnn_tanh": (1400, 2048, 2400, 2560)}


def kernels(low: int):
    """(key, (estimate,), kernel) of every resident grid tile whose estimate is ≥ ``low``, the
    first key of each distinct kernel."""
    seen = {}
    for cell, dtype, H, B, variant, m in layer_variants(HIDDEN, (1, 8, 16)):
        l = m.plan.layers[0]
        picked = l.persistence.value.tile
        for t in grid_family(l, B, m.target, 2)[0]:
            if not t.resident(H, 2):
                continue
            estimate = 4 * t.register_steps + t.registers_beside_w(l.gates)
            if estimate < low:
                continue
            k = m.with_persistence("l0", Persistent.of("grid", "tensor", t, H, l.gates, 2),
                                   "forced by resident_grid_spills").kernel_of("l0", "recurrent")
            key = [cell, dtype, H, B, variant, t.units_per_block, t.batch_per_block, t.k_split, t.m_tiles,
                   t.register_steps, t.threads, t == picked]
            seen.setdefault(k.name + str(hash(k.source)), (key, (estimate,), k))
    return list(seen.values())


if __name__ == "__main__":
    sys.exit(report(kernels(int(sys.argv[1]) if len(sys.argv) > 1 else 200)))
