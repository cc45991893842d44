"""Issue 15's stacks with their layers at once, prototyped (resident_chunks.cu): each layer's
recurrent kernel stays resident for the whole sequence on its own NB SMs and waits chunk by
chunk for its input projection, which a cuBLAS GEMM on another stream writes once the
previous layer has released that chunk of h. Measures the mechanism, with a step that
stands for the recurrent step by a calibrated spin, at two of the issue's rows:

- GNMT B=8 (8 layers, H=1024, B=8, S=128, fp16): the step 4.1 µs (rnncc's grid
  step at H=1024 B=8 beside three others), 4 partitions of 30 SMs (two waves of 4 layers);
- the same with rnncc's own partition tile (4 × 32 blocks of 32 units, 4 SMs left: too few
  for the GEMMs), each layer projecting its own chunk in its kernel at the chunk's start
  (its units' gate columns, wmma from L2: no GEMM launch, the lag the chunk plus that);
  gnmt-ring2 and gnmt-ring4 the same through a cp.async ring of 2 or 4 slots in the shared
  memory W_hh leaves (188 or 160 KiB standing for it);
- 4 × LSTM fp32 exact H=512 B=8 S=256: the step 5.5 µs (the registers form ran 4.96 on
  32 SMs; here on 26, so that the exact fp32 GEMMs of three layer boundaries get 28 SMs),
  4 partitions of 26 SMs, one wave.

For each: the step alone (one layer, every projection ready) at SPIN = 0 and calibrated;
the whole stack at chunks of 8, 16 and 32, the GEMMs gated two ways: stream memory
operations (cuStreamWaitValue32 / cuStreamWriteValue32, through libcuda) and a one-thread
wait kernel before each GEMM and a set kernel after; from the kernels' clock stamps, the
lag between layers (layer l releasing chunk c to layer l + 1 seeing its projection of
chunk c: the GEMM and the two flag trips), each layer's span and start.

All work is queued behind a start flag first (the host's queueing is not timed), then the
flag is written and the GPU's time from it to the last stream's end read by events.
Needs nvcc, CuPy and torch on a Hopper GPU.

    python3 benchmarks/resident_chunks.py [gnmt|gnmt-fused|gnmt-ring2|gnmt-ring4|fp32] > benchmarks/results/resident-chunks-<gpu>-<date>.txt
"""
from __future__ import annotations

import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# One hardware queue a stream (12 here), so that a stream blocked on a flag never holds back
# another stream's work queued on the same connection (the default is 8).
os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

SOURCE = Path(__file__).with_suffix(".cu")
G = 4
RING_SLOT_BYTES = (64 + 128) * 40 * 2   # resident_chunks.cu's RING_SLOT, in bytes
REPEATS = 5


@dataclass(frozen=True)
class Case:
    name: str
    layers: int
    hidden: int
    batch: int
    seq_len: int
    dtype: str
    step_us: float           # what the spin stands for
    parts: int               # partitions (one stream each) of `blocks` SMs for the recurrences
    blocks: int
    fused: bool = False      # each layer projects its own chunks in its kernel (no GEMMs)
    ring_stages: int = 0     # fused: 0 reads both operands from L2; n > 1 through n cp.async slots
    w_hh_kib: int = 200      # the shared memory W_hh stands for (the ring gets what is left)

    @property
    def shared(self) -> int:
        """Dynamic shared memory a block: W_hh's stand-in, and the projection's ring after it."""
        return self.w_hh_kib * 1024 + self.ring_stages * RING_SLOT_BYTES

    @property
    def flags(self) -> list[str]:
        flags = ["-DELEM=float"] if self.dtype == "float32" else []
        flags += ["-DFUSED"] if self.fused else []
        flags += [f"-DRING_STAGES={self.ring_stages}", f"-DW_HH_KIB={self.w_hh_kib}"] if self.ring_stages else []
        return flags


CASES = {"gnmt": Case("GNMT B=8", 8, 1024, 8, 128, "float16", 4.1, 4, 30),
         # rnncc's own tile for it: 4 partitions of 32 blocks (32 units a block) leave 4 SMs,
         # too few for the GEMMs, so each layer projects its chunks itself.
         "gnmt-fused": Case("GNMT B=8, the projection in the layer's kernel", 8, 1024, 8, 128, "float16",
                            4.1, 4, 32, fused=True),
         # The same through a cp.async ring in what rnncc's hybrid tile (188.8 KB of W_hh in
         # shared memory at 32 blocks) leaves, and with 4 slots if W_hh left 60 KiB.
         "gnmt-ring2": Case("GNMT B=8, the projection in the kernel by a 2-slot cp.async ring", 8, 1024, 8, 128,
                            "float16", 4.1, 4, 32, fused=True, ring_stages=2, w_hh_kib=188),
         "gnmt-ring4": Case("GNMT B=8, the projection in the kernel by a 4-slot cp.async ring", 8, 1024, 8, 128,
                            "float16", 4.1, 4, 32, fused=True, ring_stages=4, w_hh_kib=160),
         "fp32": Case("4 x LSTM fp32 exact H=512 B=8", 4, 512, 8, 256, "float32", 5.5, 4, 26)}


class Driver:
    """cuStreamWaitValue32 / cuStreamWriteValue32 from libcuda (v2 entry points)."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self._wait = self._entry("cuStreamWaitValue32")
        self._write = self._entry("cuStreamWriteValue32")

    def _entry(self, name):
        for n in (name + "_v2", name):
            try:
                f = getattr(self.lib, n)
            except AttributeError:
                continue
            f.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
            f.restype = ctypes.c_int
            return f
        raise RuntimeError(f"libcuda has no {name}")

    def wait_geq(self, stream: torch.cuda.Stream, addr: int, value: int = 1) -> None:
        err = self._wait(ctypes.c_void_p(stream.cuda_stream), addr, value, 0)  # CU_STREAM_WAIT_VALUE_GEQ
        if err:
            raise RuntimeError(f"cuStreamWaitValue32: CUresult {err}")

    def write_value(self, stream: torch.cuda.Stream, addr: int, value: int = 1) -> None:
        err = self._write(ctypes.c_void_p(stream.cuda_stream), addr, value, 0)  # with a fence before it
        if err:
            raise RuntimeError(f"cuStreamWriteValue32: CUresult {err}")


def build(tmp: Path, case: Case):
    cubin = tmp / ("resident_chunks" + "".join(f.replace("=", "_") for f in case.flags) + ".cubin")
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", *case.flags, "-o", str(cubin), str(SOURCE)],
                   check=True)
    module = cp.RawModule(path=str(cubin))
    kernels = {name: module.get_function(name) for name in ("k_resident_layer", "k_wait_flag", "k_set_flag")}
    if case.fused:
        kernels["k_resident_layer_fused"] = module.get_function("k_resident_layer_fused")
    for name in ("k_resident_layer", "k_resident_layer_fused"):
        if name in kernels:
            kernels[name].max_dynamic_shared_size_bytes = case.shared
    return kernels


class Stack:
    def __init__(self, case: Case, kernels, driver: Driver | None):
        self.case = case
        self.plain, self.fused_kernel = kernels["k_resident_layer"], kernels.get("k_resident_layer_fused")
        self.wait_kernel, self.set_kernel = kernels["k_wait_flag"], kernels["k_set_flag"]
        self.driver = driver
        torch.manual_seed(0)
        dev, dt = "cuda", getattr(torch, case.dtype)
        L, H, B, S = case.layers, case.hidden, case.batch, case.seq_len
        self.x = torch.randn(S * B, H, device=dev, dtype=dt)
        self.w = [torch.randn(H, G * H, device=dev, dtype=dt) / H ** 0.5 for _ in range(L)]
        self.proj = [torch.empty(S * B, G * H, device=dev, dtype=dt) for _ in range(L)]
        self.h = [torch.empty(S * B, H, device=dev, dtype=dt) for _ in range(L)]
        if case.fused:  # the kernels' float32 projections, and layer 0's input, ready
            if (8 * B) % 16 or (4 * H // case.blocks) % 16 or H % case.blocks:
                raise ValueError(f"{case.name}: the fused projection needs rows and columns in whole 16s")
            if case.ring_stages and ((8 * B) % 64 or 4 * H // case.blocks != 128 or H % 32):
                raise ValueError(f"{case.name}: the ring's projection needs rows in 64s, 128 gate columns a "
                                 "block and K in 32s")
            self.projf = [torch.empty(S * B, G * H, device=dev, dtype=torch.float32) for _ in range(L)]
            self.wt = [w.t().contiguous() for w in self.w]  # W_ih as [gate columns][K]
            self.ready = torch.ones(S, device=dev, dtype=torch.int32)
        self.flags = torch.zeros(L, 2, S, device=dev, dtype=torch.int32)   # [l][0]: proj ready, [1]: h ready
        self.bars = torch.zeros(L, 2, device=dev, dtype=torch.int32)
        self.seen = torch.zeros(L, S, device=dev, dtype=torch.int64)
        self.done = torch.zeros(L, S, device=dev, dtype=torch.int64)
        self.timed_out = torch.zeros(1, device=dev, dtype=torch.int32)
        self.start = torch.zeros(1, device=dev, dtype=torch.int32)
        self.parts = [torch.cuda.Stream() for _ in range(case.parts)]
        self.gemms = [torch.cuda.Stream() for _ in range(L - 1)]
        self.gate = torch.cuda.Stream()

    def ptr(self, t: torch.Tensor) -> int:
        return t.data_ptr()

    def launch_layer(self, l: int, stream: torch.cuda.Stream, chunk: int, spin: int, plain: bool):
        c = self.case
        if c.fused and not plain:
            x_in = self.x if l == 0 else self.h[l - 1]
            ready = self.ready if l == 0 else self.flags[l - 1, 1]
            with cp.cuda.ExternalStream(stream.cuda_stream):
                self.fused_kernel((c.blocks,), (256,),
                           (cp.uint64(self.ptr(x_in)), cp.uint64(self.ptr(self.wt[l])), np.int32(c.hidden),
                            cp.uint64(self.ptr(ready)), cp.uint64(self.ptr(self.flags[l, 1])),
                            cp.uint64(self.ptr(self.bars[l])), cp.uint64(self.ptr(self.projf[l])),
                            cp.uint64(self.ptr(self.h[l])), np.int32(c.seq_len), np.int32(chunk), np.int64(spin),
                            np.int32(c.hidden), np.int32(c.batch), cp.uint64(self.ptr(self.seen[l])),
                            cp.uint64(self.ptr(self.done[l])), cp.uint64(self.ptr(self.timed_out))),
                           shared_mem=c.shared)
            return
        with cp.cuda.ExternalStream(stream.cuda_stream):
            self.plain((c.blocks,), (256,),
                       (cp.uint64(self.ptr(self.flags[l, 0])), cp.uint64(self.ptr(self.flags[l, 1])),
                        cp.uint64(self.ptr(self.bars[l])), cp.uint64(self.ptr(self.proj[l])),
                        cp.uint64(self.ptr(self.h[l])), np.int32(c.seq_len), np.int32(chunk), np.int64(spin),
                        np.int32(c.hidden), np.int32(c.batch), cp.uint64(self.ptr(self.seen[l])),
                        cp.uint64(self.ptr(self.done[l])), cp.uint64(self.ptr(self.timed_out))),
                       shared_mem=c.shared)

    def flag_wait(self, stream, flag: torch.Tensor) -> None:
        if self.driver:
            self.driver.wait_geq(stream, self.ptr(flag))
        else:
            with cp.cuda.ExternalStream(stream.cuda_stream):
                self.wait_kernel((1,), (1,), (cp.uint64(self.ptr(flag)), cp.uint64(self.ptr(self.timed_out))))

    def flag_set(self, stream, flag: torch.Tensor) -> None:
        if self.driver:
            self.driver.write_value(stream, self.ptr(flag))
        else:
            with cp.cuda.ExternalStream(stream.cuda_stream):
                self.set_kernel((1,), (1,), (cp.uint64(self.ptr(flag)),))

    def warm(self, chunk: int, layers: int, plain: bool) -> None:
        """Run every kernel the queue below launches once, unblocked, on its own stream. With
        CUDA's lazy module loading (the default), the first launch of a kernel loads its
        module, which may synchronise the context: queued behind the start flag, that wait
        never ends (the first run hung so, on cuBLAS's kernels for the chunk GEMMs)."""
        S, B = self.case.seq_len, self.case.batch
        for l in range(1, layers if plain or not self.case.fused else 0):
            with torch.cuda.stream(self.gemms[l - 1]):
                for rows in {chunk * B, (S - (S - 1) // chunk * chunk) * B}:  # a chunk, the last one
                    torch.matmul(self.h[l - 1][:rows], self.w[l], out=self.proj[l][:rows])
        scratch = torch.zeros(1, device="cuda", dtype=torch.int32)
        with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            self.set_kernel((1,), (1,), (cp.uint64(self.ptr(scratch)),))
            self.wait_kernel((1,), (1,), (cp.uint64(self.ptr(scratch)), cp.uint64(self.ptr(self.timed_out))))
        torch.cuda.synchronize()

    def run(self, chunk: int, spin: int, layers: int | None = None, plain: bool = False) -> float:
        """Queue the stack (or its first ``layers``) behind the start flag, release it,
        return the GPU ms from the release to the end of every stream. ``plain``: the
        kernel without the fused projection, fed by GEMMs (the fused cases' calibration)."""
        layers = layers or self.case.layers
        S, B = self.case.seq_len, self.case.batch
        self.warm(chunk, layers, plain)  # before the resets below: its writes are overwritten
        for t in (self.flags, self.bars, self.seen, self.done, self.timed_out, self.start):
            t.zero_()
        for t in self.proj[1:] + self.h + getattr(self, "projf", []):  # a read before its
            t.fill_(float("nan"))                                          # write shows as NaN in check()
        chunks = -(-S // chunk)
        # Layer 0's projection: one GEMM before everything (as rnncc's plan does), flags set.
        torch.matmul(self.x, self.w[0], out=self.proj[0])
        self.flags[0, 0, :chunks] = 1
        torch.cuda.synchronize()
        for s in self.parts + self.gemms:
            self.flag_wait(s, self.start)
        for l in range(layers):
            self.launch_layer(l, self.parts[l % self.case.parts], chunk, spin, plain)
        for l in range(1, layers if plain or not self.case.fused else 0):
            s = self.gemms[l - 1]
            with torch.cuda.stream(s):
                for c in range(chunks):
                    rows = slice(c * chunk * B, min(S, (c + 1) * chunk) * B)
                    self.flag_wait(s, self.flags[l - 1, 1, c])
                    torch.matmul(self.h[l - 1][rows], self.w[l], out=self.proj[l][rows])
                    self.flag_set(s, self.flags[l, 0, c])
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self.gate):
            begin.record(self.gate)
            self.start.fill_(1)
        main = torch.cuda.current_stream()
        for s in self.parts + self.gemms:
            main.wait_stream(s)
        end.record(main)
        torch.cuda.synchronize()
        if int(self.timed_out.item()):
            raise RuntimeError("a bounded wait timed out")
        return begin.elapsed_time(end)

    def check(self) -> float:
        """The largest difference of the last layer's h from the same cell run by torch one
        step at a time (the projections by whole-sequence GEMMs); NaN if a layer read a
        projection or an h before it was written."""
        layers, H, B, S = self.case.layers, self.case.hidden, self.case.batch, self.case.seq_len
        dt = getattr(torch, self.case.dtype)
        h_in = self.x
        for l in range(layers):
            p = (h_in.float() @ self.w[l].float() if self.case.fused else h_in @ self.w[l]).view(S, B, H, G).float()
            h, out = torch.zeros(B, H, device="cuda"), []
            for t in range(S):
                h = torch.tanh(p[t].sum(-1) + 0.5 * h).to(dt).float()
                out.append(h)
            h_in = torch.stack(out).view(S * B, H).to(dt)
        return float((self.h[layers - 1].float() - h_in.float()).abs().max())

    def lags_us(self, chunk: int) -> tuple[list, list, list]:
        """Per layer boundary, the median µs from layer l's release of a chunk to layer
        l + 1 seeing its projection; per layer, the µs from its first chunk seen to its
        last chunk done, and from layer 0's first chunk seen to its own."""
        layers, S = self.case.layers, self.case.seq_len
        chunks = -(-S // chunk)
        seen, done = self.seen.cpu().numpy(), self.done.cpu().numpy()
        lags = [float(np.median(seen[l + 1, :chunks] - done[l, :chunks])) / 1e3 for l in range(layers - 1)]
        spans = [float(done[l, chunks - 1] - seen[l, 0]) / 1e3 for l in range(layers)]
        starts = [float(seen[l, 0] - seen[0, 0]) / 1e3 for l in range(layers)]
        return lags, spans, starts


def measure(case: Case, driver: Driver | None, clock_khz: int, tmp: Path) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 exact: the GEMMs in IEEE float32
    print(f"== {case.name}: {case.layers} layers, H={case.hidden} B={case.batch} S={case.seq_len} "
          f"{case.dtype}; {case.parts} partitions of {case.blocks} blocks ({case.shared // 1024} KiB shared a "
          f"block), the step a spin standing for {case.step_us} µs", flush=True)
    # Calibrated with wait kernels (always available); a failing stream memory operation
    # raises at the first gate below, before anything is queued behind it.
    stack = Stack(case, build(tmp, case), None)
    S = case.seq_len
    # The step alone: one layer, every chunk's projection ready (chunk = S: one wait), by
    # the plain kernel (a fused one would count its projection here too).
    base = statistics.median(stack.run(S, 0, layers=1, plain=True) for _ in range(REPEATS)) * 1e3 / S
    spin = int(max(0.0, case.step_us - base) * clock_khz / 1e3)
    step = statistics.median(stack.run(S, spin, layers=1, plain=True) for _ in range(REPEATS)) * 1e3 / S
    print(f"one layer alone: {base:.2f} µs a step at SPIN=0 (the barrier and the h update); "
          f"SPIN={spin} cycles: {step:.2f} µs a step, {step * S / 1e3:.3f} ms a layer", flush=True)
    if case.fused:  # one layer projecting its own chunks: the projection's time a chunk
        for chunk in (8, 16, 32):
            one = statistics.median(stack.run(chunk, spin, layers=1) for _ in range(REPEATS)) * 1e3
            print(f"one layer, its projection in the kernel, chunks of {chunk}: {one / S:.2f} µs a step, "
                  f"{(one - step * S) / (S // chunk):.1f} µs a chunk more than the plain kernel", flush=True)
    gates = (("projection in the layer's kernel", None),) if case.fused else \
        (("stream memory operations", driver), ("wait and set kernels", None))
    for name, drv in gates:
        if name.startswith("stream") and drv is None:
            continue
        stack.driver = drv
        for chunk in (8, 16, 32):
            try:
                times = [stack.run(chunk, spin) for _ in range(REPEATS)]
            except RuntimeError as e:
                print(f"{name}, chunks of {chunk}: {e}", flush=True)
                continue
            lags, spans, starts = stack.lags_us(chunk)
            print(f"{name}, chunks of {chunk}: stack {statistics.median(times):.3f} ms "
                  f"({min(times):.3f}-{max(times):.3f}; last layer's h within {stack.check():.1e} of torch's); "
                  "lag between layers (µs, median over chunks) " + " ".join(f"{x:.1f}" for x in lags)
                  + "; layer spans (ms) " + " ".join(f"{x / 1e3:.3f}" for x in spans)
                  + "; starts (ms) " + " ".join(f"{x / 1e3:.3f}" for x in starts), flush=True)


def main() -> int:
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    clock_khz = cp.cuda.runtime.getDeviceProperties(0)["clockRate"]
    try:
        driver = Driver()
    except (OSError, RuntimeError) as e:
        print(f"no stream memory operations: {e}")
        driver = None
    picked = [CASES[n] for n in sys.argv[1:]] or list(CASES.values())
    with tempfile.TemporaryDirectory() as tmp:
        for case in picked:
            measure(case, driver, clock_khz, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
