"""Which float32 layers' FMA cluster backward tile (tiles.fma_backward_cluster_tile, the H200
preset) moves if a KiB a block receives from its peers costs less than the fitted
FMA_BACKWARD_RECEIVED_KIB_SECONDS (46 ns, fitted when the dG slices went by a bulk copy a
peer; since bc73db1 one multicast copy from a global copy sends them, whose floor was
0.42× the bulk copies' at 2 KB slices, results/slice-exchange-h200-2026-11-30.txt). No GPU:
the points a resweep (backward_forms.py --sweep) should time first.

    python3 benchmarks/fma_backward_kib_moves.py [SCALE ...]   (default 0.5 0.25)
"""

from __future__ import annotations

import itertools
import sys

from rnncc import tiles
from rnncc.target import get

CELLS = {"lstm": 4, "gru": 3, "rnn_tanh": 1}
HIDDEN = (33, 64, 100, 128, 200, 256, 300, 384, 512)
BATCH = (1, 3, 8, 16, 20, 32, 64, 128)


def picks(scale: float) -> dict:
    """(cell, H, B) → the picked tile with the received-KiB price scaled by ``scale``."""
    fitted = tiles.FMA_BACKWARD_RECEIVED_KIB_SECONDS
    h200 = get("h200")
    tiles.FMA_BACKWARD_RECEIVED_KIB_SECONDS = fitted * scale
    try:
        return {(cell, H, B): tiles.fma_backward_cluster_tile(G, H, B, 16, tiles.grid_shared_max(h200.shared_memory_per_block_optin),
                                                              h200.sm_count, h200.clusters_at_once)
                for (cell, G), H, B in itertools.product(CELLS.items(), HIDDEN, BATCH)}
    finally:
        tiles.FMA_BACKWARD_RECEIVED_KIB_SECONDS = fitted


def main(scales: list[float]) -> None:
    base = picks(1.0)
    print(f"{len(base)} float32 shapes (cells {', '.join(CELLS)}, H {HIDDEN}, B {BATCH}); FMA cluster tiles "
          "(cluster, units, k_split, lane_rows) that move when a received KiB costs SCALE × 46 ns:")
    for scale in scales:
        moved = {k: t for k, t in picks(scale).items() if t != base[k]}
        print(f"\nscale {scale}: {len(moved)} of {len(base)} move")
        for (cell, H, B), t in moved.items():
            b = base[(cell, H, B)]
            print(f"  {cell:8s} H={H:4d} B={B:4d}: c{b.cluster} u{b.units} k{b.k_split} r{b.lane_rows} "
                  f"-> c{t.cluster} u{t.units} k{t.k_split} r{t.lane_rows}")


if __name__ == "__main__":
    main([float(a) for a in sys.argv[1:]] or [0.5, 0.25])
