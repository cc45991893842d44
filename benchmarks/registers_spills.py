"""Which tiles of the FMA grid kernel's registers form spill (no GPU: nvcc and ptxas only).
For float32 LSTM, GRU and RNN layers at H 512–1400, B 1–16, every candidate of
cost.register_tiles whose register demand (weights + (columns + 4) × rows) lies in
[LOW, HIGH), one per (demand, cell, columns, rows, phases), is built in the CPU tests' stack
(tests/test_codegen.py's compile_case: concat, sum and a residual layer) with the gates
stored, with and without lengths; each persistent kernel's registers and spill stores are
written a line each. tiles.RegisterPersistentTile.registers_fit is read off this.

    PATH=$PATH:/usr/local/cuda/bin python3 benchmarks/registers_spills.py 200 240 > results/registers-spills-<date>.jsonl

results/registers-spills-2026-11-27.jsonl came from an earlier form of this script (the same
tiles and variants, at the rule of 232 and the templates of the commit that adds it), whose
lines lack B, units, batch_blocks and spill_loads; registers-spills-2026-11-27-at-72728e6.jsonl
the same at 72728e6's templates, for demand 220–232.

The candidates come from register_tiles, which applies registers_fit: to see the tiles the
rule refuses, run it with the rule relaxed (as the committed file was, at the rule of 232).
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from test_codegen import compile_case  # noqa: E402

from rnncc import build, tiles  # noqa: E402
from rnncc.passes import cost  # noqa: E402
from rnncc.target import get  # noqa: E402

GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1}


def main(low: int, high: int) -> None:
    target, picked = get("h100"), {}
    for cell, g in GATES.items():
        for H in (512, 650, 768, 1000, 1024, 1200, 1400):
            for B in (1, 2, 3, 4, 5, 8, 12, 16):
                for tile in cost.register_tiles(H, g, B, target):
                    weights = tile.weight_registers(H, g)
                    demand = weights + (tile.lane_columns(g) + 4) * tile.batch_per_block
                    key = (demand, cell, tile.lane_columns(g), tile.batch_per_block, tile.k_phases)
                    if low <= demand < high and key not in picked:
                        picked[key] = (cell, H, B, tile, weights)
    jobs = []
    for key, (cell, H, B, tile, weights) in sorted(picked.items()):
        m = compile_case(dict(cell=cell, layout="xw", H=H, unroll=None, dtype="float32", bias=True, batch=B),
                         backward_gates="save")
        value = tiles.Persistent.of("grid", "fma", tile, H, GATES[cell], 4)
        for l in m.plan.layers:
            m = m.with_persistence(l.name, value, "forced by registers_spills.py")
        kernels = {k.name: k for lengths in (True, False) for k in m.variant(16, B, lengths=lengths).kernels
                   if k.family == "recurrent_persistent"}
        jobs += [(key, H, B, tile, weights, k) for k in kernels.values()]
    print(f"{len(jobs)} kernels", file=sys.stderr, flush=True)

    def one(job):
        (demand, cell, columns, rows, phases), H, B, tile, weights, k = job
        build.compile_cubin(k, "sm_90a")
        r = build.resources(k, "sm_90a")
        return {"cell": cell, "H": H, "B": B, "units": tile.units_per_block, "rows": rows, "batch_blocks": tile.batch_blocks,
                "k_phases": phases, "lane_columns": columns, "weights": weights, "demand": demand, "kernel": k.name,
                "registers": r.registers, "spill_stores": r.spill_stores, "spill_loads": r.spill_loads}

    with ThreadPoolExecutor() as pool:
        for row in pool.map(one, jobs):
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
