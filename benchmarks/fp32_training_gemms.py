"""The float32 GEMMs of issue 17's fp32 training row (LSTM H=1024 B=64 S=256, exact: TF32
off), each written the ways a layout allows, timed by CUDA events (median of 20 after
warm-up) with the kernel torch.profiler names, beside the FP32 rate it reaches: which
formulation cuBLAS runs fastest. The row's forward projection runs through rnncc's
cuBLASLt (the plan's), the backward's dW and dx through torch (rnncc/backward.py).

    python3 benchmarks/fp32_training_gemms.py > benchmarks/results/fp32-training-gemms-<gpu>-<date>.txt
"""
from __future__ import annotations

import torch
from backward_variants import time_ms  # benchmarks/ is this script's directory
from torch.profiler import ProfilerActivity, profile

torch.backends.cuda.matmul.allow_tf32 = False
torch.set_float32_matmul_precision("highest")
S, B, H, I, G = 256, 64, 1024, 1024, 4
N = S * B


def timed(fn, repeats: int = 20) -> tuple[float, str]:
    """(fn's median ms over ``repeats`` CUDA-event timings after warm-up, the kernels one
    call runs by torch.profiler's names)."""
    ms = time_ms(fn, repeats)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = [e.key for e in prof.key_averages() if e.device_time_total > 0]
    return ms, "; ".join(n[:70] for n in names)


def main() -> None:
    g = torch.Generator(device="cuda").manual_seed(0)
    r = lambda *shape: torch.randn(*shape, device="cuda", generator=g)  # noqa: E731
    x2, hp, dg, w_ih = r(N, I), r(N, H), r(N, G * H), r(G * H, I)
    bias = r(G * H)
    xh = torch.cat([x2, hp], 1)
    dgT = dg.t().contiguous()
    cases = {
        "projection x·W_ihᵀ + b (addmm)": (lambda: torch.addmm(bias, x2, w_ih.t()), N * I * G * H),
        "projection x·W_ihᵀ (mm)": (lambda: x2 @ w_ih.t(), N * I * G * H),
        "projection (W_ih·xᵀ)ᵀ": (lambda: (w_ih @ x2.t()).t(), N * I * G * H),
        "dx = dG·W_ih": (lambda: dg @ w_ih, N * I * G * H),
        "dx = (W_ihᵀ·dGᵀ)ᵀ": (lambda: (w_ih.t() @ dg.t()).t(), N * I * G * H),
        "dx = dG·W_ih, dG transposed stored": (lambda: dgT.t() @ w_ih, N * I * G * H),
        "dW_ih = dGᵀ·x": (lambda: dg.t() @ x2, N * I * G * H),
        "dW_ih, dW_hh: two GEMMs": (lambda: (dg.t() @ x2, dg.t() @ hp), 2 * N * I * G * H),
        "dW = dGᵀ·[x h]: one GEMM": (lambda: dg.t() @ xh, 2 * N * I * G * H),
        "dWᵀ = [x h]ᵀ·dG: one GEMM": (lambda: xh.t() @ dg, 2 * N * I * G * H),
    }
    print(f"{torch.cuda.get_device_name()}: float32 GEMMs of LSTM H={H} B={B} S={S}'s training step, "
          f"TF32 off; ms (median of 20), TFLOP/s, kernels")
    for name, (fn, macs) in cases.items():
        ms, kernels = timed(fn)
        print(f"{name:<38} {ms:7.3f} ms {2 * macs / ms / 1e9:6.1f} TFLOP/s  {kernels}", flush=True)


if __name__ == "__main__":
    main()
