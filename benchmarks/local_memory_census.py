"""Local memory (ptxas' spills and stack frame) in every distinct kernel of the one-layer
plans over a grid of shapes: what the planner takes, not the candidates a tile rule admits
(hybrid_forward_spills.py, resident_grid_spills.py check those). No GPU: nvcc only, the
plans for the H200, each shape planned for eager and for graphed calls at S=256.

    python3 benchmarks/local_memory_census.py DTYPES HIDDEN BATCHES > OUT.txt
        e.g. float16,bfloat16,float32 100,256,512,777,1024 1,8,64,256

A line "LOCAL dtype cell H B launches kernel registers spill-stores stack-frame" a kernel
with local memory (the first shape that plans it), then the count.
"""

from __future__ import annotations

import itertools
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor

import rnncc
from rnncc import build
from persistence_census import CELLS, layer_spec, precision  # benchmarks/ is this script's directory


def planned_kernels(dtypes, hidden, batches) -> dict:
    """{kernel name: (the first "dtype cell H B launches" that plans it, kernel)}."""
    seen = {}
    for dtype, cell, H, B, launches in itertools.product(dtypes, CELLS, hidden, batches, ("eager", "graph")):
        m = rnncc.compile(layer_spec(dtype, cell, H), target="h200", batch=B, seq_len=256, launches=launches,
                          **precision(dtype))
        for k in m.kernels:
            seen.setdefault(k.name, (f"{dtype} {cell} {H} {B} {launches}", k))
    return seen


def main(dtypes: str, hidden: str, batches: str) -> None:
    warnings.filterwarnings("ignore")
    seen = planned_kernels(dtypes.split(","), [int(h) for h in hidden.split(",")],
                           [int(b) for b in batches.split(",")])
    print(f"{len(seen)} kernels", flush=True)

    def one(item):
        shape, k = item
        build.compile_cubin(k, "sm_90a")
        return shape, k.name, build.resources(k, "sm_90a")
    local = 0
    with ThreadPoolExecutor(4) as pool:
        for shape, name, r in pool.map(one, seen.values()):
            if r.spill_stores or r.spill_loads or r.stack_frame:
                local += 1
                print("LOCAL", shape, name, r.registers, r.spill_stores, r.stack_frame, flush=True)
    print(f"{local} of {len(seen)} kernels with local memory")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    main(*sys.argv[1:])
