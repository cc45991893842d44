"""Local memory (ptxas' spills and stack frame) in every distinct kernel of the one-layer
plans over a grid of shapes: what the planner takes, not the candidates a tile rule admits
(hybrid_forward_spills.py, resident_grid_spills.py check those). No GPU: nvcc only, the
plans for the H200, each shape planned for eager and for graphed calls at S=256.

    python3 benchmarks/local_memory_census.py DTYPES HIDDEN BATCHES > OUT.txt
        e.g. float16,bfloat16,float32 100,256,512,777,1024 1,8,64,256

A line a kernel, as hybrid_forward_spills.report prints it: "ok" or "SPILL", [dtype, cell,
H, B, launches] of the first shape that plans it, the kernel's name, ptxas' registers, spill
stores, stack frame bytes.
"""

from __future__ import annotations

import itertools
import sys
import warnings

import rnncc
from hybrid_forward_spills import report  # run as a script: benchmarks/ is on sys.path
from persistence_census import CELLS, layer_spec, precision


def kernels(dtypes, hidden, batches) -> list:
    """(shape, (name,), kernel) of every distinct kernel the planner takes, the first
    [dtype, cell, H, B, launches] that plans each."""
    seen = {}
    for dtype, cell, H, B, launches in itertools.product(dtypes, CELLS, hidden, batches, ("eager", "graph")):
        m = rnncc.compile(layer_spec(dtype, cell, H), target="h200", batch=B, seq_len=256, launches=launches,
                          **precision(dtype))
        for k in m.kernels:
            seen.setdefault(k.name, ([dtype, cell, H, B, launches], (k.name,), k))
    return list(seen.values())


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    warnings.filterwarnings("ignore")
    dtypes, hidden, batches = sys.argv[1:]
    sys.exit(report(kernels(dtypes.split(","), [int(h) for h in hidden.split(",")],
                            [int(b) for b in batches.split(",")])))
