"""One fused-projection launch (tiles.FusedProjection), LSTM fp16 H=512 B=8 S=256, to run
under Nsight Compute: the kernel as rendered ("fused") or one of fused_projection_parts'
variants ("no waits", ...), so that the stall samples of the two can be set side by side
by SASS instruction. Three calls; profile the third launch. Needs a GPU.

    ncu --clock-control none -k regex:recurrent_cluster --launch-skip 2 --launch-count 1 \\
        --section WarpStateStats --section SourceCounters --page source --print-source sass \\
        --csv python3 benchmarks/ncu_fused.py "no waits" > OUT.csv
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from fused_projection_parts import PATCHES, fused_layer, patched  # noqa: E402

if __name__ == "__main__":
    variant = sys.argv[1] if len(sys.argv) > 1 else "fused"
    _, _, fused = fused_layer("lstm", "float16", 512, 8, 256)
    model = fused if variant == "fused" else patched(fused, PATCHES[variant])
    x = torch.randn(256, 8, 512, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        for _ in range(3):
            model(x)
    torch.cuda.synchronize()
