"""The step's GEMM, h·W_hhᵀ in 16 bits, as cuBLAS runs it where K = H is not whole 16-byte
vectors (rows of h and W_hh H elements apart: the align2 kernels), with K padded to a
multiple of 8 (rows Hp apart, the padding zero), and with the output's rows padded too (W_hh's
G·H rows to a multiple of 8: the product's rows G·Hp' elements apart): what padding for the
library step would save (docs/design-notes.md, forty-third session, "Next"). torch.matmul (cuBLAS), CUDA-graph
replays of 20 products, the median of 5 replays; µs a product. Needs a GPU.

    PYTHONPATH=. python3 benchmarks/padded_k_gemm.py > results/padded-k-gemm-<gpu>-<date>.txt
"""

from __future__ import annotations

import sys

import torch

from rnncc.timing import capture

# (cell gates, H, B)
CASES = [(3, 650, 8), (3, 650, 64), (4, 777, 64), (4, 777, 256), (3, 900, 64), (4, 900, 256),
         (3, 1100, 64), (4, 1100, 128), (3, 1300, 128), (1, 1300, 64), (4, 1024, 128), (3, 1024, 256)]


def replay_us(calls, reps: int) -> float:
    """µs a call of ``calls`` (which makes ``reps`` of them), captured in a CUDA graph
    (rnncc.timing.capture) and timed by torch's events: the median of 5 replays after 2."""
    graph, _ = capture(calls)
    times = []
    for _ in range(7):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / reps)
    return sorted(times[2:])[len(times[2:]) // 2]


def product_us(h: torch.Tensor, w: torch.Tensor, reps: int = 20) -> float:
    out = torch.empty(h.shape[0], w.shape[0], device="cuda", dtype=h.dtype)

    def products():
        for _ in range(reps):
            torch.matmul(h, w.t(), out=out)
    return replay_us(products, reps)


def main() -> int:
    print(f"# {__doc__.splitlines()[0]}\n# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("# gates H B: K=H µs, K padded µs (Hp), K and G·H padded µs (Mp); unaligned ÷ each")
    torch.manual_seed(0)
    for G, H, B in CASES:
        Hp = -(-H // 8) * 8
        w = torch.randn(G * H, H, device="cuda", dtype=torch.float16)
        h = torch.randn(B, H, device="cuda", dtype=torch.float16)
        wp = torch.zeros(G * H, Hp, device="cuda", dtype=torch.float16)
        wp[:, :H] = w
        hp = torch.zeros(B, Hp, device="cuda", dtype=torch.float16)
        hp[:, :H] = h
        Mp = -(-G * H // 8) * 8
        wm = torch.zeros(Mp, Hp, device="cuda", dtype=torch.float16)
        wm[:G * H] = wp
        assert torch.allclose(h @ w.t(), (hp @ wm.t())[:, :G * H], rtol=1e-2, atol=1e-1)
        u, p, m = product_us(h, w), product_us(hp, wp), product_us(hp, wm)
        print(f"{G} {H:5d} {B:4d}: {u:7.2f} {p:7.2f} ({Hp}) {m:7.2f} ({Mp})  {u / p:5.2f} {u / m:5.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
