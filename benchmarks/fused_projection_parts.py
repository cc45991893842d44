"""Where the fused projection's launch spends its time (tiles.FusedProjection): the recurrent
kernel with its producers, timed as CUDA-graph replays against variants of its source that
each leave one part out, and against the layer with its projection launched before
(gemm="cublas"). The variants race (the recurrent blocks read the projection without waiting
or not at all), so only their times mean anything.

- fused: the kernel as rnncc renders it;
- no waits: the recurrent blocks never await a chunk's flag (the producers still run);
- no producers: the producers return at once and nothing is awaited: the recurrent part
  alone, with the launch's shared memory and grid;
- thread 0: thread 0 awaits the flags, a bulk sender (rnncc's: the block's last thread);
- loaded where checked: the flag's load issued where its value is checked, not a step
  before (no value carried from step to step);
- no spin bound: the flag's wait without its time bound;
- before: the projection by cuBLASLt, then the recurrent kernel without producers.

    python3 benchmarks/fused_projection_parts.py > benchmarks/results/fused-projection-parts-<gpu>-<date>.txt
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import torch

import rnncc
from rnncc.runtime import CompiledModel
from rnncc.timing import time_graphs_interleaved

sys.path.insert(0, str(Path(__file__).parent))
from fused_projection_rows import with_fused_projection  # noqa: E402

ROWS = [("lstm", "float16", 512, 8, 256), ("lstm", "float16", 256, 8, 256)]
NO_WAITS = ("auto await_chunk = [&](int c, unsigned seen) {", "auto await_chunk = [&](int c, unsigned seen) { return;")
LOADED_WHERE_CHECKED = ("        if (chunk_starts(t + 2)) await_chunk((t + 2) / P_CHUNK, flag_seen);",
                        "        if (chunk_starts(t + 2)) await_chunk((t + 2) / P_CHUNK, flag_load((t + 2) / P_CHUNK));")
NO_CARRY = ("        if (chunk_starts(t + 3)) flag_seen = flag_load((t + 3) / P_CHUNK);", "")
PATCHES = {
    "no waits": [NO_WAITS],
    "no producers": [NO_WAITS, ("        produce_projection(", "        if (steps < 0) produce_projection(")],
    "thread 0": [("constexpr int FLAG_THREAD = THREADS - 1;", "constexpr int FLAG_THREAD = 0;")],
    "loaded where checked": [LOADED_WHERE_CHECKED, NO_CARRY],
    "no spin bound": [("            if (spin_expired(++spins, start, spin_timeout_ns)) {",
                       "            if (false) {")],
    "loaded where checked, no spin bound": [LOADED_WHERE_CHECKED, NO_CARRY,
                                            ("            if (spin_expired(++spins, start, spin_timeout_ns)) {",
                                             "            if (false) {")],
}


def patched(m, edits):
    """m with its recurrent kernel's source edited (the kernel's name kept; the build cache
    keys by source)."""
    def edit(k):
        if k.family != "recurrent_cluster":
            return k
        source = k.source
        for old, new in edits:
            assert old in source, old
            source = source.replace(old, new)
        return replace(k, source=source)
    return CompiledModel(m.model, m.plan, m.target, tuple(edit(k) for k in m.kernels), m._weights_now, m._seed)


def fused_layer(cell: str, dtype: str, H: int, B: int, S: int):
    """(the model, its weights, the layer compiled with its projection in the recurrent
    launch: as planned, or forced where the plan keeps it before the launch, as at S=256)."""
    torch.manual_seed(0)
    module = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cell](H, H).to("cuda", getattr(torch, dtype)).eval()
    model, weights = rnncc.from_torch(module)
    fused = with_fused_projection(rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=S))
    assert fused is not None and fused.plan.layers[0].projection_fused
    return model, weights, fused


def main() -> None:
    print(f"fused_projection_parts: CUDA-graph replays, µs, median of 3 rounds, {torch.cuda.get_device_name()}")
    for cell, dtype, H, B, S in ROWS:
        model, weights, fused = fused_layer(cell, dtype, H, B, S)
        models = {"fused": fused} | {name: patched(fused, edits) for name, edits in PATCHES.items()}
        models["before"] = rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=S, gemm="cublas")
        x = torch.randn(S, B, H, device="cuda", dtype=getattr(torch, dtype))
        with torch.no_grad():
            fns = {name: (lambda m=m: m(x)) for name, m in models.items()}
            graph = time_graphs_interleaved(fns, rounds=3)
        print(f"{cell} {dtype} H={H} B={B} S={S}: " + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in graph.items()),
              flush=True)


if __name__ == "__main__":
    main()
