"""Where a float32 layer's FMA cluster kernel needs a second wave: one cluster tile, forced,
at batches whose cluster counts step across what the driver says the GPU holds at once
(cuOccupancyMaxActiveClusters for the tile's threads and shared memory), and beside it the
staged grid kernel's tile of least predicted step at the same batch (the form the planner
weighs the cluster kernel against there). Each forward is timed as CUDA-graph replays at
S = 35 and 256; a step is (f256 − f35) / 221, so the projection and the start cancel.

Written for GRU fp32 exact H=256 B=64 (a bench row): its 32 clusters of 4 ran 4.97 µs a
step, priced 2.89 by `cost.cluster_seconds`, which counts waves by SMs (132 ÷ 4 = 33),
not by the driver's count (30 on the H100). Writes cluster-waves-<gpu>.jsonl; prints a
line a form and batch.

    python3 benchmarks/cluster_waves.py [-o DIR]
    RNNCC_CACHE_DIR=.cubins python3 benchmarks/cluster_waves.py --precompile   # no GPU: nvcc only
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

import rnncc
from rnncc.passes import cost
from rnncc.target import get
from rnncc.tiles import ClusterTile, Persistent

from form_starts import GATES, forms  # benchmarks/ is this script's directory
from staged_sweep import build_kernels, spec_of

# (cell, H, the cluster tile the planner picks at the bench row, cluster counts): counts
# around the H100's driver count for the tile's cluster size (4: 30, 8: 15) and the SMs'
# (4: 33, 8: 16).
CASES = [
    ("gru", 256, ClusterTile(cluster=4, units_per_block=64, batch_per_block=2, batch_per_thread=2, k_split=8,
                             units_per_thread=1, k_tile=32), (24, 28, 30, 31, 32, 33, 36, 48)),
    ("lstm", 256, ClusterTile(cluster=8, units_per_block=32, batch_per_block=4, batch_per_thread=2, k_split=8,
                              units_per_thread=1, k_tile=32), (12, 14, 15, 16, 17, 20)),
]
LENGTHS = (35, 256)


def models(cell: str, H: int, tile: ClusterTile, clusters: int, S: int, target: str):
    """(form, tile, predicted s a step, model) for the cluster tile and the staged one."""
    B = clusters * tile.batch_per_block
    G = GATES[cell]
    t = get(target)
    base = rnncc.compile(spec_of(cell, H), target=target, batch=B, seq_len=S, precision="exact")
    yield ("cluster", tile, cost.cluster_seconds(B, H, G, tile, t, 4),
           base.with_persistence("l0", Persistent.of("cluster", "fma", tile, H, G, 4), "forced by cluster_waves"))
    staged, price = next((t, p) for form, t, p in forms(cell, H, B, target) if form == "staged")
    yield ("staged", staged, price,
           base.with_persistence("l0", Persistent.of("grid", "fma", staged, H, G, 4), "forced by cluster_waves"))


def measure(out_dir: Path) -> None:
    import torch
    from rnncc.driver import clusters_at_once
    from rnncc.timing import time_graph
    torch.backends.cuda.matmul.allow_tf32 = False
    gpu = torch.cuda.get_device_name().split()[1].lower()
    get("device")  # the driver's context, which the occupancy query needs
    path = out_dir / f"cluster-waves-{gpu}.jsonl"
    with path.open("w") as f:
        for cell, H, tile, counts in CASES:
            shared = tile.shared_bytes(H, GATES[cell], 4)
            at_once = clusters_at_once(tile.cluster, tile.threads, shared)[tile.cluster - 1]
            print(f"{cell} H={H} clusters of {tile.cluster}, {tile.threads} threads, {shared} B shared: "
                  f"the driver says {at_once} at once", flush=True)
            for n in counts:
                B = n * tile.batch_per_block
                forward: dict[tuple[str, int], float] = {}
                for S in LENGTHS:
                    torch.manual_seed(0)
                    x = torch.randn(S, B, H, device="cuda")
                    for name, t, predicted, m in models(cell, H, tile, n, S, "device"):
                        forward[name, S] = time_graph(lambda: m(x), 2, 10).median_ms * 1e3
                        if S == LENGTHS[-1]:
                            step = (forward[name, S] - forward[name, LENGTHS[0]]) / (LENGTHS[-1] - LENGTHS[0])
                            row = {"cell": cell, "H": H, "B": B, "clusters": n if name == "cluster" else None,
                                   "driver_at_once": at_once, "form": name, "tile": asdict(t),
                                   "predicted_us_step": predicted * 1e6, "forward_us": forward[name, S],
                                   "forward_us_s35": forward[name, LENGTHS[0]], "step_us": step}
                            f.write(json.dumps(row) + "\n")
                            f.flush()
                            print(f"{cell} H={H} B={B:<4} {name:<8} {'' if name != 'cluster' else f'{n} clusters':<12}"
                                  f" step {step:5.2f} µs (predicted {predicted * 1e6:5.2f}), forward "
                                  f"{forward[name, S]:7.1f} µs", flush=True)
    print(f"wrote {path}")


def precompile() -> None:
    build_kernels(m for cell, H, tile, counts in CASES for n in counts for S in LENGTHS
                  for *_, m in models(cell, H, tile, n, S, "h200"))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--out", type=Path, default=Path("."))
    p.add_argument("--precompile", action="store_true")
    a = p.parse_args()
    if a.precompile:
        precompile()
    else:
        measure(a.out)
