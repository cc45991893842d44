"""Host µs to queue one cuBLASLt GEMM through rnncc's prepared call (``cublaslt.CublasLt``,
ctypes), beside torch's own calls of the same product: the input projection of LSTM H=512
B=8 S=256 (D[S·B, 4H] = X·W_ihᵀ + bias), fp16 and fp32, in a tight loop (least and median
of 7 rounds of host_overhead.per_call_us, 200 calls each, warmed and the GPU drained around
them). A training step's marks (train_step_timeline.py --fine) read each call 2-3× this:
the loop is the warm floor.

    python3 benchmarks/library_call_host.py     (a GPU; prints the table)
"""
import statistics

import torch
from host_overhead import per_call_us  # benchmarks/ is this script's directory

from rnncc import cublaslt
from rnncc.cublaslt import CublasLt, Matmul


def host_us(fn, calls: int = 200, rounds: int = 7) -> tuple[float, float]:
    """(least, median) over ``rounds`` of per_call_us's host µs to queue one call."""
    out = [per_call_us(fn, calls)[0] for _ in range(rounds)]
    return min(out), statistics.median(out)


def main() -> None:
    lt = CublasLt()
    H, S, B, I = 512, 256, 8, 512
    print(f"host µs a call (least, median), {torch.cuda.get_device_name()}")
    for name, tdt in (("float16", torch.float16), ("float32", torch.float32)):
        W = torch.randn(4 * H, I, device="cuda", dtype=tdt)
        X = torch.randn(S * B, I, device="cuda", dtype=tdt)
        bias = torch.randn(4 * H, device="cuda")
        D = torch.empty(S * B, 4 * H, device="cuda")
        ws = torch.empty(cublaslt.WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
        stream = torch.cuda.current_stream().cuda_stream
        for with_bias in (True, False):
            g = Matmul(name, "exact", 4 * H, S * B, I, True, I, I, 4 * H, bias=with_bias)
            run = lt.prepared_for(g, W.data_ptr(), X.data_ptr(), D.data_ptr())
            a, x, d, b, w = W.data_ptr(), X.data_ptr(), D.data_ptr(), bias.data_ptr(), ws.data_ptr()
            t = host_us(lambda: run(a, x, d, b, stream, w))
            print(f"  {name:8s} rnncc's prepared cuBLASLt run{' with bias' if with_bias else '':10s} {t[0]:6.2f} {t[1]:6.2f}")
        if tdt == torch.float32:
            t = host_us(lambda: torch.addmm(bias, X, W.T))
        else:
            t = host_us(lambda: torch.addmm(bias, X, W.T, out_dtype=torch.float32))
        print(f"  {name:8s} torch.addmm, float32 result{'':13s} {t[0]:6.2f} {t[1]:6.2f}")
        t = host_us(lambda: torch.mm(X, W.T))
        print(f"  {name:8s} torch.mm{'':32s} {t[0]:6.2f} {t[1]:6.2f}")
        t = host_us(lambda: torch.empty(S * B, 4 * H, device="cuda"))
        print(f"  {name:8s} torch.empty of D{'':24s} {t[0]:6.2f} {t[1]:6.2f}")


if __name__ == "__main__":
    main()
