"""Where a step of the FMA cluster kernel's lanes form goes, by variants of its source:
the planned kernel; with fast activations (sigmoid and tanh by __expf and __fdividef);
with the push of h and the wait cut out (each block runs its steps unsynchronised, so
its outputs mean nothing; timing only); and both. Beside them cuDNN in a CUDA graph at
the same shape. The fast-math variant's largest difference from the planned kernel's
outputs is printed. Shapes: the sweep's small-H points that ran below cuDNN-in-a-graph.

    python3 benchmarks/lanes_step_parts.py > benchmarks/results/step-parts-<gpu>-<date>.txt

Needs a Hopper GPU and PyTorch.
"""

from __future__ import annotations

import re
from dataclasses import replace

import torch

import rnncc
from rnncc.build import compile_all
from rnncc.runtime import CompiledModel
from rnncc.timing import time_graph

S = 2048
CASES = [("gru", "float32", 100, 1), ("gru", "float32", 100, 20), ("lstm", "float32", 100, 20),
         ("gru", "float16", 100, 1)]
# Activations by the hardware's exp2 and reciprocal (the sigmoid the templates use since
# this measurement; the tanh here too).
FAST = """__device__ __forceinline__ float sigmoid(float v) { return __fdividef(1.0f, 1.0f + __expf(-v)); }
__device__ __forceinline__ float tanh_fast(float v) {
    const float e = __expf(-2.0f * fabsf(v));
    return copysignf(__fdividef(1.0f - e, 1.0f + e), v);
}"""
SEND = 'asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];"'


def fast(source: str) -> str:
    source = re.sub(r"__device__ __forceinline__ float sigmoid\(float v\) \{[^\n]*\}", lambda m: FAST, source)
    return source.replace("tanhf(", "tanh_fast(")


def unsynchronised(source: str) -> str:
    """The push of h (sends and arrivals) and the wait cut out."""
    source = source.replace(SEND, "if (0) " + SEND)
    source = source.replace('asm volatile("mbarrier.arrive', 'if (0) asm volatile("mbarrier.arrive')
    return source.replace("while (!done && !gave_up) {", "while (false) {")


def main() -> None:
    for cell, dtype, H, B in CASES:
        spec = {"name": "parts", "dtype": dtype, "input_size": H,
                "layers": [{"name": "l0", "cell": cell, "hidden_size": H}]}
        base = rnncc.compile(spec, target="device", batch=B, seq_len=S)
        kernel = base.kernel_of("l0", "recurrent")
        sources = {"full": kernel.source, "fast math": fast(kernel.source),
                   "no push/wait": unsynchronised(kernel.source),
                   "fast, no push/wait": unsynchronised(fast(kernel.source))}
        models = {}
        for label, source in sources.items():
            cut = replace(kernel, name=kernel.name + "_" + re.sub(r"\W", "", label), source=source)
            models[label] = CompiledModel(base.model, base.plan, base.target,
                                          tuple(cut if k is kernel else k for k in base.kernels), None)
        compile_all([k for m in models.values() for k in m.kernels], base.target.arch)
        x = torch.randn(S, B, H, device="cuda", dtype=getattr(torch, dtype))
        difference = (models["fast math"](x)[0].float() - models["full"](x)[0].float()).abs().max()
        print(f"{cell} {dtype} H={H} B={B} ({base.plan.layers[0].persistence.value.tile}): "
              f"fast math max |dy| {float(difference):.2e}", flush=True)
        for label, m in models.items():
            ms = time_graph(lambda: m(x), 2, 7).median_ms
            print(f"  {label:20s} {ms * 1e3 / S:.3f} µs a step", flush=True)
        torch.backends.cudnn.allow_tf32 = False
        module = getattr(torch.nn, cell.upper())(H, H).cuda().to(getattr(torch, dtype))
        with torch.no_grad():
            ms = time_graph(lambda: module(x), 2, 7).median_ms
        print(f"  cuDNN graph          {ms * 1e3 / S:.3f} µs a step", flush=True)


if __name__ == "__main__":
    main()
