"""Where a forward's GPU time goes, kernel by kernel, for rnncc and cuDNN on the same
module: each kernel's count and mean time in one forward (torch.profiler, CUDA
activity), after warm-up. Rows are ``cell:dtype:H:B[:layers[:proj_size]]``, S=256; the
default is the bench's LSTMP rows. Needs a GPU.

    python3 benchmarks/kernel_split.py [lstm:float16:1024:8:2:256 ...] > split.txt
"""

from __future__ import annotations

import collections
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import rnncc

S = 256
ROWS = ["lstm:float16:1024:8:2:256", "lstm:float32:512:8:1:128"]


def kernel_times(fn) -> dict[str, list[float]]:
    """GPU microseconds of each kernel (by name) in one call of fn."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    times: dict[str, list[float]] = collections.defaultdict(list)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            times[e.name].append(e.device_time_total)
    return times


def main(rows: list[str]) -> None:
    # float32 exact on both sides (torch lets cuDNN use TF32 by default).
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    for row in rows:
        cell, dtype, *sizes = row.split(":")
        H, B, layers, proj = (list(map(int, sizes)) + [1, 0])[:4]
        tdt = getattr(torch, dtype)
        torch.manual_seed(0)
        module = getattr(torch.nn, cell.upper())(H, H, num_layers=layers,
                                                 **({"proj_size": proj} if proj else {}))
        module = module.to("cuda", tdt).eval()
        model, weights = rnncc.from_torch(module)
        compiled = rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=S,
                                 precision="exact" if dtype == "float32" else None)
        x = torch.randn(S, B, H, device="cuda", dtype=tdt)
        print(f"{row}: S={S}, one forward")
        with torch.no_grad():
            for _ in range(3):
                compiled(x), module(x)
            torch.cuda.synchronize()
            for who, fn in (("rnncc", lambda: compiled(x)), ("cuDNN", lambda: module(x))):
                times = kernel_times(fn)
                total = sum(sum(ts) for ts in times.values())
                print(f"  {who}: kernels {total / 1000:.3f} ms in all")
                for name, ts in sorted(times.items(), key=lambda kv: -sum(kv[1]))[:6]:
                    print(f"    {name[:72]:<72} n={len(ts):4d} mean {sum(ts) / len(ts):7.2f} µs "
                          f"total {sum(ts) / 1000:7.3f} ms")


if __name__ == "__main__":
    main(sys.argv[1:] or ROWS)
