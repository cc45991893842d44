"""Host time of one kernel launch and of the other driver calls an eager call makes, by
how the arguments reach the driver: an empty kernel of a persistent kernel's parameter
count (JIT-compiled from PTX), launched on PyTorch's stream. Writes
DIR/launch-host-<gpu>.txt. Needs a GPU, PyTorch and PyCUDA.

    python3 benchmarks/launch_host.py [-o DIR]
"""

from __future__ import annotations

import argparse
import ctypes
import struct
from pathlib import Path

import torch
from host_overhead import per_call_us  # benchmarks/ is this script's directory

from rnncc import driver

CALLS = 3000
ROUNDS = 5
# A persistent kernel's parameters: pointers and 64-bit strides, then 32-bit sizes.
KINDS = ("ptr",) * 24 + ("i64",) * 8 + ("i32",) * 10


def ptx(kinds: tuple[str, ...]) -> bytes:
    types = {"ptr": ".u64", "i64": ".s64", "i32": ".s32"}
    params = ",\n".join(f"    .param {types[k]} p{i}" for i, k in enumerate(kinds))
    return (".version 7.8\n.target sm_90\n.address_size 64\n"
            f".visible .entry empty(\n{params}\n) {{ ret; }}\n").encode()


def packed_launcher(function, kinds: tuple[str, ...], grid, block, stream: int):
    """A launch whose arguments are packed into one buffer (struct.pack_into, each at its
    natural alignment) and passed as cuLaunchKernel's ``extra``, not a pointer each."""
    fmt, offset = "<", 0
    for k in kinds:
        size = 4 if k == "i32" else 8
        pad = -offset % size
        fmt += "x" * pad + {"ptr": "Q", "i64": "q", "i32": "i"}[k]
        offset += pad + size
    layout = struct.Struct(fmt)
    buffer = ctypes.create_string_buffer(layout.size)
    size = ctypes.c_size_t(layout.size)
    extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(buffer), 2, ctypes.addressof(size), 0)
    launch = driver._launch_kernel()
    pack = layout.pack_into

    def run(values) -> None:
        pack(buffer, 0, *values)
        launch(function, grid[0], grid[1], 1, block[0], block[1], block[2], 0, stream, None, extra)
    return run


def pointer_launcher(function, kinds: tuple[str, ...], grid, block, stream: int):
    """The launch as driver.Kernel made it before: each argument a ctypes value, set per
    launch, and cuLaunchKernel given an array of pointers to them."""
    types = {"ptr": ctypes.c_uint64, "i64": ctypes.c_int64, "i32": ctypes.c_int32}
    args = [types[k]() for k in kinds]
    params = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
    launch = driver._launch_kernel()

    def run(values) -> None:
        for arg, value in zip(args, values):
            arg.value = value
        launch(function, grid[0], grid[1], 1, block[0], block[1], block[2], 0, stream, params, None)
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", default="benchmarks/results")
    args = ap.parse_args()
    driver.device_context(0).make_current()
    torch.zeros(1, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    lib = driver._lib()
    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    driver._check(lib.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(ptx(KINDS))), "loading")
    driver._check(lib.cuModuleGetFunction(ctypes.byref(function), module, b"empty"), "finding")
    kernel = driver.Kernel("empty", module, function, KINDS, 0, 0)
    values = [0] * len(KINDS)
    grid, block = (128, 1), (256, 1, 1)
    pointers = pointer_launcher(kernel.function, KINDS, grid, block, stream)
    packed = packed_launcher(kernel.function, KINDS, grid, block, stream)
    rows = {
        f"Kernel.launch, {len(KINDS)} parameters": lambda: kernel.launch(grid, block, values, 0, stream),
        "Kernel.launch, cooperative": lambda: kernel.launch(grid, block, values, 0, stream, cooperative=True),
        "a pointer per argument (before 2026-11-25)": lambda: pointers(values),
        "packed buffer, cuLaunchKernel extra (no lock, no status check)": lambda: packed(values),
        "torch.empty(4096, uint8)": lambda: torch.empty(4096, dtype=torch.uint8, device="cuda"),
        "memset_async 64 B": lambda: driver.memset_async(buffer.data_ptr(), 0, 64, stream),
        "copy_rows 8 × 512 B": lambda: driver.copy_rows(buffer.data_ptr(), 512, buffer.data_ptr() + 8192,
                                                        512, 512, 8, stream),
    }
    buffer = torch.empty(1 << 16, dtype=torch.uint8, device="cuda")
    for fn in rows.values():  # warm
        per_call_us(fn, 100)
    # Rounds over all rows, each row's least: the host's speed drifts within a run.
    least = {name: per_call_us(fn, CALLS)[0] for name, fn in rows.items()}
    for _ in range(ROUNDS - 1):
        for name, fn in reversed(rows.items()):
            least[name] = min(least[name], per_call_us(fn, CALLS)[0])
    lines = [f"host µs a call, least of {ROUNDS} rounds of {CALLS} over all rows, on {torch.cuda.get_device_name()}"]
    lines += [f"{us:8.2f}  {name}" for name, us in least.items()]
    print("\n".join(lines))
    out = Path(args.output) / f"launch-host-{torch.cuda.get_device_name().split()[1].lower()}.txt"
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
