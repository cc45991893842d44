"""How the registers-form cluster kernel loads W_hh's fragments (recurrent_cluster_tensor_
registers.cu.j2): as rendered (`__ldg`, ld.global.nc, which ptxas may load again inside the
step loop instead of keeping in registers, read-only memory allowing it) against a plain
coherent `ld.global.v4`, which it may not. CUDA-graph replays, µs, median of 3 rounds, at
the rows that read slower at 48d1525 (several clusters at once) and one that did not; the
variant's outputs checked against the kernel's. Needs a GPU.

    python3 benchmarks/registers_loads.py > benchmarks/results/registers-loads-<gpu>-<date>.txt
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import rnncc
from rnncc.timing import time_graphs_interleaved

sys.path.insert(0, str(Path(__file__).parent))
from fused_projection_parts import patched  # noqa: E402

PLAIN = [("w_reg[s] = __ldg(w_lane + s * 32);",
          "asm volatile(\"ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\" : \"=r\"(w_reg[s].x), \"=r\"(w_reg[s].y), "
          "\"=r\"(w_reg[s].z), \"=r\"(w_reg[s].w) : \"l\"(w_lane + s * 32));")]
# (cell, dtype, H, B, precision)
ROWS = [("lstm", "bfloat16", 256, 64, None), ("gru", "bfloat16", 256, 64, None),
        ("gru", "float32", 256, 64, "tensor"), ("lstm", "float16", 512, 8, None)]


def main() -> None:
    print(f"registers_loads: CUDA-graph replays, µs, median of 3 rounds, {torch.cuda.get_device_name()}")
    for cell, dtype, H, B, precision in ROWS:
        torch.manual_seed(0)
        tdt = getattr(torch, dtype)
        module = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cell](H, H).to("cuda", tdt).eval()
        model, weights = rnncc.from_torch(module)
        m = rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=256,
                          **({"precision": precision} if precision else {}))
        models = {"__ldg (as rendered)": m, "ld.global": patched(m, PLAIN)}
        x = torch.randn(256, B, H, device="cuda", dtype=tdt)
        with torch.no_grad():
            assert torch.equal(models["ld.global"](x)[0], m(x)[0])
            t = time_graphs_interleaved({k: (lambda v=v: v(x)) for k, v in models.items()}, rounds=3)
        print(f"{cell} {dtype} H={H} B={B}{' ' + precision if precision else ''}: "
              + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in t.items()), flush=True)


if __name__ == "__main__":
    main()
