"""The backward recurrence kernel alone at a set of shapes, each at the tile the plan takes
for the H200 (tiles.backward_kernel_tile with the h200 preset), timed by CUDA-graph replays
(backward.recurrence on backward_forms.recurrence_inputs' random inputs): for comparing two
trees of rnncc whose backward kernels differ, run once in each (their tree first on
PYTHONPATH, a cubin cache each). A JSON line a shape: µs a step.

    PYTHONPATH=TREE:benchmarks python3 benchmarks/backward_trees.py --build-only   (no GPU)
    PYTHONPATH=TREE:benchmarks python3 benchmarks/backward_trees.py LABEL          (on the GPU)
"""

from __future__ import annotations

import json
import sys

from rnncc import build, codegen
from rnncc.dtypes import DTYPES
from rnncc.ir import CELL_GATES
from rnncc.target import get
from rnncc.tiles import backward_kernel_tile

# (cell, dtype, H, B, S): the mma cluster form (plain and hybrid, one gate to four), the
# FMA cluster form (float32), and LSTMs on the grid and K-split forms (their c scan)
CASES = [("lstm", "float16", 512, 8, 256), ("gru", "float16", 512, 8, 256), ("rnn_tanh", "float16", 1024, 8, 256),
         ("lstm", "float16", 256, 64, 256), ("lstm", "float16", 650, 8, 256), ("gru", "float16", 700, 8, 256),
         ("rnn_tanh", "bfloat16", 333, 8, 256), ("lstm", "float32", 128, 16, 32), ("gru", "float32", 256, 64, 256),
         ("rnn_tanh", "float32", 512, 8, 256), ("lstm", "float32", 256, 8, 256),
         ("lstm", "bfloat16", 1024, 8, 256), ("lstm", "float16", 650, 20, 35), ("lstm", "float32", 1024, 64, 256)]


def planned_tile(cell: str, dtype: str, H: int, B: int):
    """(gates, the backward tile the plan takes for the H200)."""
    target, G = get("h200"), len(CELL_GATES[cell])
    return G, backward_kernel_tile(G, H, B, DTYPES[dtype].itemsize, target.sm_count, 16,
                                   target.shared_memory_per_block_optin, target.clusters_at_once)


def main(label: str) -> int:
    if label == "--build-only":
        kernels = []
        for cell, dtype, H, B, _ in CASES:
            G, tile = planned_tile(cell, dtype, H, B)
            kernels.append(codegen.render_backward(cell, H, G, dtype, tile))
        build.compile_all(kernels, "sm_90a")
        return 0
    from backward_forms import time_forms, recurrence_inputs
    for cell, dtype, H, B, S in CASES:
        _, tile = planned_tile(cell, dtype, H, B)
        ms = time_forms(recurrence_inputs(cell, dtype, H, B, S), {"planned": tile})["planned"]
        print(json.dumps({"tree": label, "cell": cell, "dtype": dtype, "hidden": H, "batch": B, "seq_len": S,
                          "tile": str(tile), "us_per_step": round(ms * 1e3 / (S + 1), 3)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "tree"))
