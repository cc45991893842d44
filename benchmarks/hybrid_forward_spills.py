"""ptxas' registers and spills for every hybrid registers-form tile the forward's planner
may take (TensorTile.with_shared_steps_for, W_hh past the registers of any cluster): the
candidates of cost.tensor_tiles at a set of half layers (LSTM H=520-768, GRU H=560-900, tanh
RNN H=1100-1600, fp16 and bf16, B = 1, 8, 20, 64), each plain, saving its gates (a training
forward) and as a residual layer; each kernel once. No GPU: nvcc only.

    python3 benchmarks/hybrid_forward_spills.py > OUT.txt   (from the repository root)

A line a kernel: "ok" or "SPILL", [cell, dtype, H, B, variant, cluster, batch rows, warps,
k-steps in registers, whether the planner picks it at that B], registers, spill stores,
stack frame bytes. benchmarks/results/hybrid-forward-spills-2026-11-29.txt is its run at
bc62b8e less the batch-tile cap (HYBRID_SHARED_ROWS), whose one spill it shows.
"""
import json
import sys
from concurrent.futures import ThreadPoolExecutor

import rnncc
from rnncc import build
from rnncc.passes.cost import tensor_tiles
from rnncc.tiles import Persistent

HIDDEN = {"lstm": (520, 600, 650, 700, 768), "gru": (560, 650, 768, 900), "rnn_tanh": (1100, 1400, 1600)}


def layer_variants(hidden: dict, batches: tuple[int, ...]):
    """(cell, dtype, H, B, variant, compiled model) of every half layer of ``hidden``
    ({cell: (H, ...)}) at ``batches``, fp16 and bf16, plain, saving its gates (a training
    forward) and as a residual layer, planned for the H200."""
    for cell, hiddens in hidden.items():
        for dtype in ("float16", "bfloat16"):
            for H in hiddens:
                for B in batches:
                    for variant in ("plain", "gates", "residual"):
                        layer = {"name": "l0", "cell": cell, "hidden_size": H}
                        if variant == "residual":
                            layer["residual"] = True
                        yield cell, dtype, H, B, variant, rnncc.compile(
                            {"name": "s", "dtype": dtype, "input_size": H, "layers": [layer]}, target="h200",
                            batch=B, seq_len=64, **({"backward_gates": "save"} if variant == "gates" else {}))


def report(found: list) -> int:
    """Builds each (key, columns, kernel) of ``found`` (16 at a time) and prints a line each:
    "ok" or "SPILL", the key, the columns, ptxas' registers, spill stores and stack frame."""
    print(f"{len(found)} kernels", file=sys.stderr)

    def one(item):
        key, columns, k = item
        build.compile_cubin(k, "sm_90a")
        return key, columns, build.resources(k, "sm_90a")
    spilled = 0
    with ThreadPoolExecutor(16) as pool:
        for key, columns, r in pool.map(one, found):
            bad = bool(r.spill_stores or r.spill_loads or r.stack_frame)
            spilled += bad
            print(("SPILL " if bad else "ok    ") + json.dumps(key), *columns, r.registers, r.spill_stores,
                  r.stack_frame, flush=True)
    print(f"{len(found)} kernels, {spilled} with local memory", file=sys.stderr)
    return 0


def kernels():
    """(key, (), kernel) of every hybrid candidate that fits shared memory, the first key of
    each distinct kernel."""
    seen = {}
    for cell, dtype, H, B, variant, m in layer_variants(HIDDEN, (1, 8, 20, 64)):
        G = m.plan.layers[0].gates
        picked = m.plan.layers[0].persistence.value.tile
        for t in tensor_tiles(H, G, B, m.target, "cluster", 2):
            if not t.register_steps or t.shared_bytes(H, G, 2) > m.target.shared_memory_per_block_optin:
                continue
            k = m.with_persistence("l0", Persistent.of("cluster", "tensor", t, H, G, 2),
                                   "forced by hybrid_forward_spills").kernel_of("l0", "recurrent")
            key = [cell, dtype, H, B, variant, t.cluster, t.batch_per_block, t.m_tiles, t.register_steps, t == picked]
            seen.setdefault(k.name + str(hash(k.source)), (key, (), k))
    return list(seen.values())


if __name__ == "__main__":
    sys.exit(report(kernels()))
