"""Times the wavefront prototype (wavefront.cu; issue 15's float32 stacks) beside rnncc's
plan for the same stack, in one process: L × LSTM fp32 H=512 B=8 S=256, one launch a
layer, every layer at once on its own 32 SMs with the input projection of layers after the
first summed in the kernel during the grid barrier's wait. Prints, in µs (ms for whole
stacks), each layer's kernel alone with and without the fused projection, the stack run as
a wavefront and one layer after another, how far the last layer's h is from a float64
recurrence, and rnncc's forward of the same stack (its plan, in a CUDA graph and eager).
Needs nvcc, CuPy, torch and rnncc's runtime on a Hopper GPU.

    python3 benchmarks/wavefront.py > benchmarks/results/wavefront-<gpu>-<date>.txt
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import cupy as cp
import numpy as np

SOURCE = Path(__file__).with_suffix(".cu")
H, B, U, S, L, G, NT = 512, 8, 16, 256, 4, 4, 256
BLOCKS = H // U
REPEATS = 7


def shared_bytes(fused: bool) -> int:
    return 4 * (B * H + NT // 32 * B * G * U + (B * H + H * G * U if fused else 0))


def build(tmp: Path, name: str, flags: tuple[str, ...]):
    cubin = tmp / f"{name}.cubin"
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", f"-DH={H}", f"-DB={B}", f"-DUNITS={U}",
                    *(f"-D{f}" for f in flags), "-o", str(cubin), str(SOURCE)], check=True)
    kernel = cp.RawModule(path=str(cubin)).get_function("k_wavefront_layer")
    fused = any(f.startswith("FUSED=1") for f in flags)
    kernel.max_dynamic_shared_size_bytes = shared_bytes(fused)
    return kernel, shared_bytes(fused)


def reference(x: np.ndarray, w_ih: list, w_hh: list) -> np.ndarray:
    """float64 stack; weights [H][G·H] with column j·G + g; gates i, f, g, o = 0..3."""
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    for wi, wh in zip(w_ih, w_hh):
        h, c, out = np.zeros((B, H)), np.zeros((B, H)), []
        for t in range(S):
            v = (x[t] @ wi + h @ wh).reshape(B, H, G)
            c = sig(v[..., 1]) * c + sig(v[..., 0]) * np.tanh(v[..., 2])
            h = sig(v[..., 3]) * np.tanh(c)
            out.append(h)
        x = np.stack(out)
    return x


class Stack:
    def __init__(self, kernels: dict, rng):
        self.k = kernels
        self.w_ih64 = [rng.standard_normal((H, G * H)) / H ** 0.5 for _ in range(L)]
        self.w_hh64 = [rng.standard_normal((H, G * H)) / H ** 0.5 for _ in range(L)]
        self.x64 = rng.standard_normal((S, B, H))
        self.w_ih = [cp.asarray(w, cp.float32) for w in self.w_ih64]
        self.w_hh = [cp.asarray(w, cp.float32) for w in self.w_hh64]
        self.x = cp.asarray(self.x64, cp.float32)
        self.xp = cp.empty((S, B, G * H), cp.float32)
        self.y = [cp.empty((S, B, H), cp.float32) for _ in range(L)]
        self.words = cp.zeros((2 * L + 1,), cp.uint32)  # barrier and progress of each layer, status
        self.streams = [cp.cuda.Stream(non_blocking=True) for _ in range(L)]

    def launch(self, layer: int, stream, variant: str = "fused") -> None:
        fused = layer > 0
        kernel, size = self.k["first"] if not fused else self.k[variant]
        below = self.words[2 * layer - 1:] if fused else self.words[1:]
        kernel((BLOCKS,), (NT,), (self.w_hh[layer], self.w_ih[layer], self.xp,
                                   self.y[layer - 1] if fused else self.x, self.y[layer],
                                   self.words[2 * layer:], self.words[2 * layer + 1:], below,
                                   np.int32(BLOCKS), self.words[2 * L:], np.int32(S)),
               shared_mem=size, stream=stream)

    def run(self, how: str) -> float:
        """µs of one forward: "wavefront" (layers on their own streams), "sequential" (one
        stream, layer after layer), or one layer's kernel alone ("first", "fused",
        "fused_without_projection": its input sequence and the layer below's progress
        given)."""
        main = self.streams[0]
        start, end = cp.cuda.Event(), cp.cuda.Event()
        with main:
            self.words.fill(0)
            if how.startswith("fused"):  # the layer below: done
                self.words[1] = BLOCKS * S
            start.record(main)
            if how in ("wavefront", "sequential", "first"):
                cp.matmul(self.x.reshape(S * B, H), self.w_ih[0], out=self.xp.reshape(S * B, G * H))
        if how in ("first", "fused", "fused_without_projection"):
            self.launch(0 if how == "first" else 1, main, "fused" if how == "fused" else "noproj")
        elif how == "sequential":
            for layer in range(L):
                self.launch(layer, main)
        else:
            fork = cp.cuda.Event()
            fork.record(main)
            self.launch(0, main)
            joins = []
            for layer in range(1, L):
                self.streams[layer].wait_event(fork)
                self.launch(layer, self.streams[layer])
                joins.append(cp.cuda.Event())
                joins[-1].record(self.streams[layer])
            for e in joins:
                main.wait_event(e)
        end.record(main)
        end.synchronize()
        if int(self.words[2 * L]) != 0:
            raise RuntimeError(f"{how}: a wait gave up")
        return cp.cuda.get_elapsed_time(start, end) * 1e3


def rnncc_stack() -> None:
    import torch

    import rnncc
    from rnncc.timing import time_graph, time_interleaved
    torch.backends.cuda.matmul.allow_tf32 = False
    spec = {"name": "wavefront", "dtype": "float32", "input_size": H,
            "layers": [{"name": f"l{i}", "cell": "lstm", "hidden_size": H} for i in range(L)]}
    m = rnncc.compile(spec, target="device", batch=B, seq_len=S, precision="exact")
    x = torch.randn(S, B, H, device="cuda")
    graph = time_graph(lambda: m(x), 3, REPEATS).median_ms
    eager = time_interleaved({"rnncc": lambda: m(x)}, warmup=3, repeats=REPEATS)["rnncc"].median_ms
    d = m.plan.schedule.value
    print(f"rnncc's plan ({d.kind}" + (f" chunk={d.chunk} parts={d.parts}" if d.pipelined else "")
          + f"): {graph:.3f} ms in a CUDA graph, {eager:.3f} ms eager", flush=True)


def main() -> None:
    props = cp.cuda.runtime.getDeviceProperties(0)
    print(f"wavefront prototype on {props['name'].decode()}: {L} × LSTM fp32 H={H} B={B} S={S}, "
          f"{BLOCKS} blocks of {U} units a layer, {NT} threads; median of {REPEATS} runs", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        kernels = {"first": build(Path(tmp), "first", ("FUSED=0",)),
                   "fused": build(Path(tmp), "fused", ("FUSED=1",)),
                   "noproj": build(Path(tmp), "noproj", ("FUSED=1", "NO_PROJECTION"))}
        stack = Stack(kernels, np.random.default_rng(0))
        stack.run("wavefront")
        want = reference(stack.x64, [w.astype(np.float32).astype(np.float64) for w in stack.w_ih64],
                         [w.astype(np.float32).astype(np.float64) for w in stack.w_hh64])
        got = cp.asnumpy(stack.y[-1])
        print(f"the wavefront's last layer, all {S} steps: within {np.abs(got - want).max() / np.abs(want).max():.1e} "
              f"of float64", flush=True)
        for how in ("first", "fused", "fused_without_projection", "sequential", "wavefront"):
            times = sorted(stack.run(how) for _ in range(REPEATS))
            per = f", {times[len(times) // 2] / S:.2f} µs a step" if how not in ("sequential", "wavefront") else ""
            print(f"{how:<26} {times[len(times) // 2] / 1e3:.3f} ms (runs {times[0] / 1e3:.3f}-{times[-1] / 1e3:.3f}){per}",
                  flush=True)
    rnncc_stack()


if __name__ == "__main__":
    main()
