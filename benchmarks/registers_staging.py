"""What W_hh's staging into registers costs a launch of the registers-form cluster kernel:
the kernel as rendered against its source with the staging loop skipped (garbage weights,
only the time means anything; zero weights where they are loaded as uploaded), CUDA-graph replays, median of 3 rounds, µs. Run once per
checkout for an A/B of the staging itself (its directory first on PYTHONPATH):

    python3 benchmarks/registers_staging.py LABEL >> benchmarks/results/registers-staging-<gpu>-<date>.txt
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import rnncc
from rnncc.timing import time_graphs_interleaved

sys.path.insert(0, str(Path(__file__).parent))
from fused_projection_parts import patched  # noqa: E402

# The staging skipped, in either form the checkout renders: W_hhᵀ gathered through shared
# memory (up to 371ac5c's), or the fragments loaded as uploaded (weights.fragment_index).
SKIPS = {"gathered": ("        for (int s0 = 0; s0 < K_STEPS; s0 += STAGE_STEPS) {",
                      "        for (int s0 = 0; s0 < 0; s0 += STAGE_STEPS) {"),
         "uploaded": ("for (int s = 0; s < K_STEPS; ++s) w_reg[s] = __ldg(w_lane + s * 32);",
                      "for (int s = 0; s < K_STEPS; ++s) w_reg[s] = make_uint4(0u, 0u, 0u, 0u);")}
# (cell, dtype, H, B, S), planned for graphed calls.
ROWS = [("lstm", "float16", 512, 8, 256), ("lstm", "float16", 512, 8, 16), ("lstm", "float16", 256, 8, 16),
        ("gru", "float16", 512, 5, 7), ("lstm", "bfloat16", 512, 1, 4)]


def main() -> None:
    label = sys.argv[1] if len(sys.argv) > 1 else ""
    for cell, dtype, H, B, S in ROWS:
        torch.manual_seed(0)
        tdt = getattr(torch, dtype)
        module = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cell](H, H).to("cuda", tdt).eval()
        model, weights = rnncc.from_torch(module)
        m = rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=S, launches="graph")
        p = m.plan.layers[0].persistence.value
        if p.mode != "cluster" or not p.tile.weights_in_registers:
            print(f"{label} {cell} {dtype} H={H} B={B} S={S}: not the registers form", flush=True)
            continue
        source = next(k.source for k in m.kernels if k.family == "recurrent_cluster")
        form, skip = next((form, skip) for form, skip in SKIPS.items() if skip[0] in source)
        models = {f"as rendered ({form})": m, "staging skipped": patched(m, [skip])}
        x = torch.randn(S, B, H, device="cuda", dtype=tdt)
        with torch.no_grad():
            t = time_graphs_interleaved({k: (lambda v=v: v(x)) for k, v in models.items()}, rounds=3)
        print(f"{label} {cell} {dtype} H={H} B={B} S={S} (clusters of {p.tile.cluster}): "
              + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in t.items()), flush=True)


if __name__ == "__main__":
    main()
