"""The library step's GEMM exactly as the runtime calls it (rnncc.cublaslt, column-major
D[G·H, B] = W_hhᵀ[G·H, H] · h[H, B], D in float32), at unaligned H, with each leading
dimension padded to whole 16-byte vectors or not: W_hhᵀ's (lda = G·H), h's (ldb = H) and
D's (ldd = G·H), the sizes m = G·H and k = H kept, and with the sizes padded too. Says which
buffers padding must reach for the align2 kernels to give way (padded_k_gemm.py measured
torch's layout). CUDA-graph replays of 20 calls, the median of 5 replays, µs a call. Needs a
GPU.

    PYTHONPATH=.:benchmarks python3 benchmarks/library_step_padding.py > results/library-step-padding-<gpu>-<date>.txt
"""

from __future__ import annotations

import sys

import torch

from padded_k_gemm import replay_us  # run as a script: benchmarks/ is on sys.path
from rnncc import cublaslt

# (gates, H, B)
CASES = [(3, 650, 64), (4, 777, 64), (4, 777, 256), (3, 900, 64), (4, 900, 256), (3, 1100, 64),
         (4, 1100, 128), (3, 1300, 128), (1, 1300, 64), (4, 1024, 128)]


def call_us(lib, g: cublaslt.Matmul, a, b, d, scratch, reps: int = 20) -> float:
    run = lib.prepared_for(g, a.data_ptr(), b.data_ptr(), d.data_ptr())

    def calls():
        for _ in range(reps):
            run(a.data_ptr(), b.data_ptr(), d.data_ptr(), 0, torch.cuda.current_stream().cuda_stream,
                scratch.data_ptr())
    return replay_us(calls, reps)


def main() -> int:
    lib = cublaslt.CublasLt()
    scratch = torch.empty(cublaslt.WORKSPACE_BYTES, device="cuda", dtype=torch.uint8)
    forms = ("as now", "h padded", "W and D padded", "all padded", "all and sizes padded")
    print(f"# {__doc__.splitlines()[0]}\n# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("# gates H B: " + ", ".join(forms) + " (µs); as now ÷ all padded")
    torch.manual_seed(0)
    for G, H, B in CASES:
        M, K = G * H, H
        Mp, Kp = -(-M // 8) * 8, -(-K // 8) * 8
        w = torch.zeros(Kp, Mp, device="cuda", dtype=torch.float16)  # W_hhᵀ rows, Mp apart
        w[:K, :M] = torch.randn(K, M, device="cuda", dtype=torch.float16) / K ** 0.5
        h = torch.zeros(B, Kp, device="cuda", dtype=torch.float16)
        h[:, :K] = torch.randn(B, K, device="cuda", dtype=torch.float16)
        w_tight, h_tight = w[:K, :M].contiguous(), h[:, :K].contiguous()
        d = torch.zeros(B, Mp, device="cuda")
        times, results = [], []
        for name in forms:
            pad_h, pad_wd = name != "as now" and name != "W and D padded", name != "as now" and name != "h padded"
            sizes = name == "all and sizes padded"
            g = cublaslt.Matmul("float16", "tensor", m=Mp if sizes else M, n=B, k=Kp if sizes else K,
                                transpose_a=False, lda=Mp if pad_wd else M, ldb=Kp if pad_h else K,
                                ldd=Mp if pad_wd else M)
            a, b = (w if pad_wd else w_tight), (h if pad_h else h_tight)
            d.zero_()
            times.append(call_us(lib, g, a, b, d, scratch))
            out = d.view(-1)[:B * (Mp if pad_wd else M)].view(B, -1)[:, :M]
            results.append(out.clone())
        ref = (h_tight.float() @ w_tight.float())
        for r in results:
            assert torch.allclose(r, ref, rtol=2e-2, atol=2e-2), (G, H, B, float((r - ref).abs().max()))
        print(f"{G} {H:5d} {B:4d}: " + " ".join(f"{t:7.2f}" for t in times) + f"  {times[0] / times[3]:5.2f}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
