"""Times the grid-persistent float32 LSTM forward prototype (forward_step.cu; issue 17's fp32
row) at H=1024 B=64: 128 blocks of 8 units, W_hhᵀ's gate columns in shared memory, h staged
by chunks, a lane's 8 rows × 8 gate columns, a grid barrier a step. Prints µs a step for
each variant (chunk of K staged, stage buffers; h by bulk copies or tensor-map copies, or
either multicast to clusters of 2) and how far h after 16 steps is from a float64 recurrence. Against: rnncc's plan at
the time of the first run, a launch a step (cuBLASLt and the cell kernel), 35.4 µs a step
with the projection; its FMA grid kernel 53.9
(results/forward-persistence-lstm1024-b64-h100-2026-11-27.txt); rnncc's staged kernel since
(recurrent_persistent_staged.cu.j2) has this one's product. Needs nvcc and CuPy on a
Hopper GPU.

    python3 benchmarks/forward_step.py [B] > benchmarks/results/forward-step-<gpu>-<date>.txt
    python3 benchmarks/forward_step.py 64 --only TMA,DEVICE_MAP   # one form (KC=128, STAGES=2), e.g. under ncu

(B other than 64: the cp.async form and the tensor-map forms only.)
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
import tempfile
from pathlib import Path

import cupy as cp
import numpy as np

SOURCE = Path(__file__).with_suffix(".cu")
H, B, U, NT = 1024, 64, 8, 256
STEPS, CHECKED = 256, 16
VARIANTS = [(128, 2), (64, 2), (64, 4), (32, 6)]  # (KC, STAGES): each fits 227 KiB
# parts left out of the first variant's step (forward_step.cu's -D flags): where its time goes
SPLITS = {"without the staging": ("NO_STAGE",), "without the product": ("NO_PRODUCT",),
          "without the grid barrier": ("NO_BARRIER",), "the cells and warp sums alone":
          ("NO_STAGE", "NO_PRODUCT", "NO_BARRIER")}


def shared_bytes(kc: int, stages: int, flags: tuple = ()) -> int:
    cols = 4 * U
    mbarriers = 8 * stages if {"MULTICAST", "BULK", "TMA"} & set(flags) else 0
    mbarriers += 256 if "DEVICE_MAP" in flags else 0  # and a map, 128-byte aligned
    pitch = kc if "TMA" in flags else kc + 4
    return 4 * (H * cols + max(stages * B * pitch, 4 * B * cols) + B * U) + mbarriers


def encode_tensor_map(ptr: int, dims: tuple, strides: tuple, box: tuple):
    """A CUtensorMap (cuTensorMapEncodeTiled) of float32 rows at device address ``ptr``, on
    the device: ``dims`` innermost first, ``strides`` in bytes past the innermost, ``box`` a
    copy's extent, the 128-byte swizzle (a box's rows 128 bytes: 32 floats)."""
    encode = ctypes.CDLL("libcuda.so.1").cuTensorMapEncodeTiled
    raw = (ctypes.c_uint8 * 192)()                      # CUtensorMap: 128 bytes, 64-byte aligned
    at = (ctypes.addressof(raw) + 63) // 64 * 64
    u64, u32, rank = ctypes.c_uint64, ctypes.c_uint32, len(dims)
    FLOAT32, NO_INTERLEAVE, SWIZZLE_128B, L2_128B, NO_FILL = 7, 0, 3, 2, 0
    status = encode(ctypes.c_void_p(at), FLOAT32, u32(rank), ctypes.c_void_p(ptr), (u64 * rank)(*dims),
                    (u64 * (rank - 1))(*strides), (u32 * rank)(*box), (u32 * rank)(*[1] * rank),
                    NO_INTERLEAVE, SWIZZLE_128B, L2_128B, NO_FILL)
    if status != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled: CUresult {status}")
    return cp.asarray(np.frombuffer(ctypes.string_at(at, 128), np.uint8))


def tensor_map(h, rows: int):
    """forward_step.cu's -DTMA map of h [2][B][H]: boxes of 32 floats × ``rows`` rows × 1."""
    return encode_tensor_map(h.data.ptr, (H, B, 2), (H * 4, B * H * 4), (32, rows, 1))


def reference(w: np.ndarray, xp: np.ndarray, steps: int, batch: int = B, hidden: int = H) -> np.ndarray:
    """h after ``steps`` steps of the LSTM from zeros, float64: gates = xp_t + h·w."""
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    n = hidden
    h, c = np.zeros((batch, n)), np.zeros((batch, n))
    for t in range(steps):
        g = xp[t] + h @ w
        c = sig(g[:, n:2 * n]) * c + sig(g[:, :n]) * np.tanh(g[:, 2 * n:3 * n])
        h = sig(g[:, 3 * n:]) * np.tanh(c)
    return h


def main() -> None:
    global B
    args = sys.argv[1:]
    only = None
    if "--only" in args:  # one form: its -D flags, comma-separated
        at = args.index("--only")
        only = tuple(args[at + 1].split(","))
        del args[at:at + 2]
    if args:  # another batch: the forms rnncc could take only
        B = int(args[0])
    props = cp.cuda.runtime.getDeviceProperties(0)
    print(f"float32 LSTM forward prototype on {props['name'].decode()}: H={H} B={B}, {H // U} blocks of {U} units, "
          f"{STEPS} steps, µs a step (rnncc's launch a step: 35.4 with the projection; its FMA grid kernel 53.9)")
    rng = np.random.default_rng(0)
    w64 = rng.standard_normal((H, 4 * H)) / H ** 0.5
    xp64 = rng.standard_normal((STEPS, B, 4 * H))
    w, xp = cp.asarray(w64, cp.float32), cp.asarray(xp64, cp.float32)
    want = reference(w64.astype(np.float32).astype(np.float64), xp64.astype(np.float32).astype(np.float64), CHECKED, B)
    runs = [((kc, stages), "", ()) for kc, stages in VARIANTS] + \
        [(VARIANTS[0], what, flags) for what, flags in SPLITS.items()] + \
        [((128, 2), "h by bulk copies and mbarriers", ("BULK",)),
         ((128, 2), "h by bulk copies and mbarriers, without the staging", ("BULK", "NO_STAGE"))] + \
        [((kc, 2), "h multicast in clusters of 2", ("MULTICAST",)) for kc in (128, 64)] + \
        [((128, 2), f"h multicast in clusters of 2, {what}", ("MULTICAST", *flags))
         for what, flags in SPLITS.items()] + \
        [((128, 2), "h by tensor-map copies", ("TMA",)),
         ((128, 2), "h by tensor-map copies, the map made in the kernel from a template", ("TMA", "DEVICE_MAP")),
         ((128, 2), "h by tensor-map copies multicast in clusters of 2", ("TMA", "MULTICAST")),
         ((128, 2), "h by tensor-map copies multicast in clusters of 2, without the staging",
          ("TMA", "MULTICAST", "NO_STAGE"))]
    if B != 64:
        runs = [run for run in runs if run[0] == (128, 2) and run[2] in ((), ("TMA",), ("TMA", "DEVICE_MAP"))]
    if only is not None:
        runs = [run for run in runs if run[0] == (128, 2) and run[2] == only]
    with tempfile.TemporaryDirectory() as tmp:
        for (kc, stages), what, flags in runs:
            cubin = Path(tmp) / f"forward_{kc}_{stages}{''.join('_' + f for f in flags)}.cubin"
            subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", f"-DB={B}", f"-DKC={kc}", f"-DSTAGES={stages}",
                            *(f"-D{f}" for f in flags), "-o", str(cubin), str(SOURCE)], check=True)
            kernel = cp.RawModule(path=str(cubin)).get_function("k_forward")
            size = shared_bytes(kc, stages, flags)
            try:
                kernel.max_dynamic_shared_size_bytes = size
            except AttributeError:  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                cp.cuda.driver.funcSetAttribute(kernel.ptr, 8, size)

            def run(steps: int):
                h = cp.zeros((2, B, H), cp.float32)
                barrier = cp.zeros(1, cp.uint32)
                if "DEVICE_MAP" in flags:  # a template for xp, with other dims and strides; a slot a block
                    tmap = cp.zeros((1 + H // U) * 128, cp.uint8)
                    tmap[:128] = encode_tensor_map(xp.data.ptr, (H, 2 * B, 3), (2 * H * 4, 4 * B * H * 4), (32, B, 1))
                elif "TMA" in flags:
                    tmap = tensor_map(h, B // 2 if "MULTICAST" in flags else B)
                else:
                    tmap = barrier  # unused
                start, end = cp.cuda.Event(), cp.cuda.Event()
                start.record()
                kernel((H // U,), (NT,), (w, xp, h, barrier, np.int32(steps), tmap), shared_mem=size)
                end.record()
                end.synchronize()
                return h[(steps - 1) % 2], cp.cuda.get_elapsed_time(start, end) * 1e3 / steps

            check = "parts left out, not checked"
            if "NO_STAGE" not in flags and "NO_PRODUCT" not in flags and "NO_BARRIER" not in flags:
                got, _ = run(CHECKED)
                check = f"h after {CHECKED} steps within " \
                    f"{float(np.abs(cp.asnumpy(got) - want).max() / np.abs(want).max()):.1e} of float64"
            times = sorted(run(STEPS)[1] for _ in range(5))
            print(f"KC={kc} STAGES={stages}{', ' + what if what else ''}, shared {size // 1024} KiB: "
                  f"{times[2]:6.2f} µs a step (of 5 runs {times[0]:.2f}-{times[-1]:.2f}), {check}", flush=True)


if __name__ == "__main__":
    main()
