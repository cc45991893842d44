"""The host time of one replayed eager call (call_program.py), part by part: each step of
CompiledModel.__call__ and of the program's replay timed on the host (time.perf_counter
around it; ~0.3 µs added a part), the GPU drained before each call, medians of 30 calls;
then each primitive alone (torch.empty, a memset, a launch, a 2-D copy), the least of
3 rounds of 2000. Needs a GPU, PyTorch and PyCUDA.

    python3 benchmarks/call_host_parts.py
"""

from __future__ import annotations

import torch
import launch_timeline  # benchmarks/ is this script's directory
from eager_trace import host_us

import rnncc
from rnncc import arrays, call_program, driver, runtime

ROWS = [("lstm", 512, 8, 256), ("lstm", 1024, 64, 128)]
PARTS = ((runtime.CompiledModel, "__call__", "call"), (runtime.CompiledModel, "_replayed", "_replayed"),
         (runtime.CompiledModel, "_call", "_call"), (arrays, "kind_of", "kind_of"), (arrays, "view", "view"),
         (runtime.CompiledModel, "variant", "variant"), (runtime.CompiledModel, "_load", "_load"),
         (runtime.CompiledModel, "check_errors", "check_errors"), (arrays, "stream_of", "stream_of"),
         (runtime._CallMemory, "__init__", "_CallMemory"), (call_program.CallProgram, "run", "program.run"),
         (runtime._CallMemory, "take", "take"), (runtime.CompiledModel, "_output", "_output"),
         (call_program.Queue, "gemm", "gemm"), (call_program.Queue, "launch", "launch"),
         (call_program.Queue, "memset", "memset"), (call_program.Queue, "copy_rows", "copy_rows"),
         (runtime._CallMemory, "release", "release"), (torch, "empty", "torch.empty"))


def main() -> None:
    torch.manual_seed(0)
    launch_timeline.TIMED = PARTS
    for cell, H, B, S in ROWS:
        module = torch.nn.LSTM(H, H).to("cuda", torch.half).eval()
        model, weights = rnncc.from_torch(module)
        with torch.no_grad():
            compiled = rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=S)
            x = torch.randn(S, B, H, device="cuda", dtype=torch.half)
            compiled(x), compiled(x)
            host, ordered = launch_timeline.host_operations(lambda: compiled(x))
        print(f"== {cell} fp16 H={H} B={B} S={S}: host of the call {host:.1f} µs (parts timed)")
        for key, start, took in ordered:
            print(f"  {key:<22} starts at {start:7.1f} µs, takes {took:6.1f} µs")
    ptr = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    dev = x.device
    print("primitives alone, µs a call:")
    for name, fn in (("torch.empty(4096, uint8, device)", lambda: torch.empty(4096, dtype=torch.uint8, device=dev)),
                     ("torch.empty((256, 8, 512), half)", lambda: torch.empty((256, 8, 512), dtype=torch.half, device=dev)),
                     ("x.new_empty((256, 8, 512))", lambda: x.new_empty((256, 8, 512))),
                     ("x.device", lambda: x.device),
                     ("driver.memset_async 64 B", lambda: driver.memset_async(ptr.data_ptr(), 0, 64, stream)),
                     ("driver.copy_rows 8 × 1 KiB", lambda: driver.copy_rows(ptr.data_ptr(), 1024, ptr.data_ptr() + 65536,
                                                                             2048, 1024, 8, stream)),
                     ("os.environ.get", lambda: runtime.os.environ.get("RNNCC_DEBUG_POISON")),
                     ("arrays.stream_of", lambda: arrays.stream_of(x, "torch"))):
        print(f"  {name:<36} {host_us(fn, 2000):6.2f}")
    # The projection GEMM of the first row (LSTM H=512 B=8 S=256): rnncc's prepared run,
    # then the bare library call with every argument made beforehand (what a call costs
    # without Python around it, but for ctypes' own conversion of 16 arguments).
    import ctypes
    from rnncc import cublaslt
    H, B, S = 512, 8, 256
    lib = cublaslt.CublasLt()
    g = cublaslt.Matmul("float16", "tensor", 4 * H, S * B, H, True, H, H, 4 * H, bias=True)
    w, xs = (torch.randn(n, H, device="cuda", dtype=torch.half) for n in (4 * H, S * B))
    out = torch.empty(S * B, 4 * H, device="cuda")
    bias = torch.zeros(4 * H, device="cuda")
    scratch = torch.empty(g.scratch, dtype=torch.uint8, device="cuda")
    run = lib.prepared(g, 256, 256, 256)
    args = (w.data_ptr(), xs.data_ptr(), out.data_ptr(), bias.data_ptr(), stream, scratch.data_ptr())
    run(*args)
    desc, la, lb, ld, algo = lib._plan(g, (256, 256, 256, 256))
    p = ctypes.c_void_p
    raw = (lib._handle, desc, ctypes.byref(lib._one), p(args[0]), la, p(args[1]), lb, ctypes.byref(lib._zero),
           p(args[2]), ld, p(args[2]), ld, algo, p(args[5]), ctypes.c_size_t(g.scratch), p(stream))
    matmul = lib._lib.cublasLtMatmul
    print(f"  {'cuBLASLt prepared run, 2048×2048×512':<36} {host_us(lambda: run(*args), 300):6.2f}")
    print(f"  {'cublasLtMatmul, arguments prebuilt':<36} {host_us(lambda: matmul(*raw), 300):6.2f}")


if __name__ == "__main__":
    main()
