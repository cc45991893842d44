"""When the recurrent blocks of a fused-projection launch wait (tiles.FusedProjection): the
kernel's source, instrumented with %globaltimer stamps into a global array, run a few calls:
how long the first block of the first recurrent cluster waited for chunk 0 and for the other
chunks, at how many chunks the flag was not full when checked, and when producer 0
published its first and last chunk, against the recurrent block's start and end (µs).

    python3 benchmarks/fused_projection_waits.py > benchmarks/results/fused-projection-waits-<gpu>-<date>.txt
"""

from __future__ import annotations

import ctypes
import statistics
import sys
from pathlib import Path

import torch

from rnncc import driver

sys.path.insert(0, str(Path(__file__).parent))
from fused_projection_parts import fused_layer, patched  # noqa: E402

ROWS = [("lstm", "float16", 512, 8, 256), ("lstm", "float16", 256, 8, 256), ("lstm", "float16", 512, 8, 35)]
WATCHED = "blockIdx.x == 0 && blockIdx.y == PRODUCER_ROWS"
EDITS = [
    ("// ---- the input projection's producers ----",
     "__device__ unsigned long long rnncc_waits[8];\n// ---- the input projection's producers ----"),
    ("    auto await_chunk = [&](int c, unsigned seen) {\n        unsigned spins = 0;",
     "    auto await_chunk = [&](int c, unsigned seen) {\n"
     "        const unsigned long long w0 = global_ns();\n"
     "        const bool late = seen < (unsigned)P_ACTIVE;\n        unsigned spins = 0;"),
    ("            seen = flag_load(c);\n        }\n    };",
     "            seen = flag_load(c);\n        }\n"
     f"        if ({WATCHED}) {{\n"
     "            atomicAdd(&rnncc_waits[c == 0 ? 0 : 1], global_ns() - w0);\n"
     "            if (late) atomicAdd(&rnncc_waits[2], 1ull);\n        }\n    };"),
    ("            atomicAdd(flags + c, 1u);",
     "            atomicAdd(flags + c, 1u);\n"
     "            if (producer == 0) { if (c == 0) rnncc_waits[4] = global_ns(); rnncc_waits[5] = global_ns(); }"),
    ("    T* h_s = reinterpret_cast<T*>(shared);",
     f"    if ({WATCHED} && threadIdx.x == 0) rnncc_waits[3] = global_ns();\n"
     "    T* h_s = reinterpret_cast<T*>(shared);"),
    ("    fetch_projection(0);\n",
     f"    if ({WATCHED} && threadIdx.x == 0) rnncc_waits[7] = global_ns();\n    fetch_projection(0);\n"),
    ("    cluster.sync();  // no block leaves",
     f"    if ({WATCHED} && threadIdx.x == 0) rnncc_waits[6] = global_ns();\n"
     "    cluster.sync();  // no block leaves"),
]


# The same, the recurrent blocks awaiting no flag (the producers still run; the outputs race).
NO_WAITS = ("    auto await_chunk = [&](int c, unsigned seen) {\n",
            "    auto await_chunk = [&](int c, unsigned seen) {\n        return;\n")


def instrumented(m, more=()):
    """m with its recurrent kernel stamped (EDITS), and ``more`` edits after them."""
    return patched(m, [*EDITS, *more])


def main() -> None:
    print(f"fused_projection_waits: µs, median over 9 calls, {torch.cuda.get_device_name()}")
    for cell, dtype, H, B, S in ROWS:
        _, _, compiled = fused_layer(cell, dtype, H, B, S)
        x = torch.randn(S, B, H, device="cuda", dtype=getattr(torch, dtype))
        for what, more in (("", ()), (" with no waits", (NO_WAITS,))):
            print(f"{cell} {dtype} H={H} B={B} S={S}{what}: " + waits(instrumented(compiled, more), x), flush=True)


def waits(m, x) -> str:
    """The median stamps of 9 calls of m on x, as a line."""
    lib = driver._lib()
    m(x)
    torch.cuda.synchronize()
    kernel = m._functions[m.kernels[0].name]
    address, size = ctypes.c_uint64(), ctypes.c_size_t()
    assert lib.cuModuleGetGlobal_v2(ctypes.byref(address), ctypes.byref(size), kernel.module,
                                    b"rnncc_waits") == 0
    rows = []
    for _ in range(9):
        lib.cuMemsetD8_v2(address, 0, size)
        torch.cuda.synchronize()
        m(x)
        torch.cuda.synchronize()
        words = (ctypes.c_uint64 * 8)()
        lib.cuMemcpyDtoH_v2(words, address, size)
        w = list(words)
        start = w[3]
        rows.append({"first wait": w[0] / 1e3, "later waits": w[1] / 1e3, "late chunks": w[2],
                     "producer 0's chunk 0 at": (w[4] - start) / 1e3,
                     "its last chunk at": (w[5] - start) / 1e3, "step 0 at": (w[7] - start) / 1e3,
                     "recurrent end at": (w[6] - start) / 1e3})
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    return ", ".join(f"{k} {v:.1f}" for k, v in med.items())


if __name__ == "__main__":
    main()
