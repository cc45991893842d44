"""Short calls, the registers form's start since it loads W_hh as uploaded (weights.
fragment_index): each call as planned, with persistence forced to "cluster" and to "none"
(a launch a step), eager (timing.time_interleaved, µs, median) and as CUDA-graph replays
(timing.time_graphs_interleaved, µs), beside cuDNN in one process; which persistence the
plan picked; outputs of the forced plans checked against the planned one. Needs a GPU.

    python3 benchmarks/short_starts.py > benchmarks/results/short-starts-<gpu>-<date>.txt
"""

from __future__ import annotations

import torch

import rnncc
from rnncc.timing import time_graphs_interleaved, time_interleaved

# (cell, dtype, H, B, S): odd and short, the registers form's cases and a float32 control.
CASES = [("gru", "float16", 650, 5, s) for s in (1, 2, 4, 8, 16)] + \
        [("lstm", "float16", 512, 8, s) for s in (1, 2, 4, 8)] + \
        [("lstm", "bfloat16", 256, 3, s) for s in (1, 4, 12)] + \
        [("gru", "float32", 256, 1, s) for s in (1, 4)]


def main() -> None:
    print(f"short_starts: µs (eager median | CUDA graph), {torch.cuda.get_device_name()}")
    for cell, dtype, H, B, S in CASES:
        torch.manual_seed(0)
        tdt = getattr(torch, dtype)
        module = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cell](H, H).to("cuda", tdt).eval()
        model, weights = rnncc.from_torch(module)
        models = {"planned": rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=S)}
        for mode in ("cluster", "none"):
            try:
                models[mode] = rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=S,
                                             persistence=mode)
            except rnncc.RnnccError as exc:  # (a mode the layer cannot run)
                print(f"  {mode}: {exc}")
        picked = models["planned"].plan.layers[0].persistence.value.mode
        x = torch.randn(S, B, H, device="cuda", dtype=tdt)
        with torch.no_grad():
            want = models["planned"](x)[0].float()
            for name, m in models.items():
                assert torch.allclose(m(x)[0].float(), want, atol=3e-3, rtol=1e-2), name
            fns = {k: (lambda m=m: m(x)) for k, m in models.items()} | {"cuDNN": lambda: module(x)}
            eager = time_interleaved(fns, settle=2)
            graphs = time_graphs_interleaved(fns, rounds=3)
        print(f"{cell} {dtype} H={H} B={B} S={S} (planned {picked}): "
              + ", ".join(f"{k} {eager[k].median_ms * 1e3:.1f} | {graphs[k] * 1e3:.1f}" for k in fns), flush=True)


if __name__ == "__main__":
    main()
