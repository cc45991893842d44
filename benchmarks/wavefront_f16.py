"""Times the fp16 wavefront prototype (wavefront_f16.cu; issue 15's GNMT B=8 row) beside
rnncc's plans for the same stacks, in one process: L × LSTM fp16 H=1024 B=8, every layer's
whole sequence in one launch on 32 SMs, layer l + 1 P steps behind layer l through its
progress word, each layer's input projection computed in the launch P steps at a time.

Prints each build's defines and spilled bytes, then for each build in BUILDS (P; how the
projection's warps split the work and where x's fragments come from; one without the
projection; wavefront_f16.cu's header lists every define, SPREAD among them):
- one layer's kernel alone, in µs a step;
- 4 layers at S=256, one after another and as a wavefront, and how far the wavefront's last
  layer is from a float64 recurrence;
- 8 layers at S=128 (two rounds of 4: layer l + 4 queued behind layer l on its stream);
then rnncc's forward of the same stacks and of GNMT's encoder in CUDA graphs. Needs nvcc,
CuPy, torch and rnncc's runtime on a Hopper GPU; benchmarks/wavefront_f16_emulate.py checks
the kernel's indexing on the CPU. Measured on the H200 (results/wavefront-f16-h200-2026-11-28.txt,
its earlier forms beside it): at best 1.68 ms for 4 layers against rnncc's 1.45, 1.22
without the projection; docs/design-notes.md, "The fp16 wavefront, run".

    python3 benchmarks/wavefront_f16.py > benchmarks/results/wavefront-f16-<gpu>-<date>.txt
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cupy as cp
import numpy as np

SOURCE = Path(__file__).with_suffix(".cu")
H, B, G, NT, UNITS = 1024, 8, 4, 512, 32
BLOCKS, M_TILES = H // UNITS, 4 * UNITS // 16
REPEATS = 7


def shared_bytes(defines: dict) -> int:
    """wavefront_f16.cu's SHARED_BYTES for a build's defines."""
    warps, ksteps, hp = NT // 32, H // 32, H + 8
    step = B * hp * 2 + M_TILES * 32 * 16 + 4 * UNITS * B * 4
    x_chunks = 2 * 2 * defines.get("XKC", 2) * defines["P"] * 32 * 8 if "X_STAGED" in defines else 0
    return warps * (ksteps - defines.get("REG_KS", 8)) * 32 * 16 + max(step, x_chunks)


def compile_cubin(tmp: Path, name: str, defines: dict) -> tuple[Path, int]:
    """(the cubin, the bytes its kernel spills: ptxas' spill stores)."""
    cubin = tmp / f"{name}.cubin"
    flags = [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in defines.items()]
    done = subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", "-Xptxas", "-v", f"-DH={H}", f"-DB={B}",
                           *flags, "-o", str(cubin), str(SOURCE)], check=True, capture_output=True, text=True)
    spills = re.search(r"(\d+) bytes spill stores", done.stderr)
    return cubin, int(spills.group(1)) if spills else 0


def load(cubin: Path, defines: dict):
    """(the kernel, its dynamic shared memory): loaded in the calling thread."""
    kernel = cp.RawModule(path=str(cubin)).get_function("k_wavefront_layer")
    size = shared_bytes(defines)
    kernel.max_dynamic_shared_size_bytes = size
    return kernel, size


def fragments(w: np.ndarray) -> np.ndarray:
    """W [G·H][K] (rows 4·unit + gate) as mma.sync m16n8k16 A fragments in the kernel's
    order, [BLOCKS][M_TILES][K/16][32 lanes][8 halves]: lane l holds rows l/4 and l/4 + 8
    of its m-tile at K pairs 2·(l%4) and 2·(l%4) + 8, as registers a0 … a3."""
    lane = np.arange(32)
    g, q = lane // 4, lane % 4
    rows = np.stack([g, g, g + 8, g + 8, g, g, g + 8, g + 8], axis=1)              # [32][8]
    cols = np.stack([2 * q, 2 * q + 1, 2 * q, 2 * q + 1, 2 * q + 8, 2 * q + 9, 2 * q + 8, 2 * q + 9], axis=1)
    tiles = w.reshape(BLOCKS, M_TILES, 16, w.shape[1] // 16, 16)                       # [b][mt][r][ks][k]
    picked = tiles[:, :, rows, :, cols]                                                 # [32][8][b][mt][ks]
    return np.ascontiguousarray(picked.transpose(2, 3, 4, 0, 1)).astype(np.float16)


def b_fragments(x: np.ndarray) -> np.ndarray:
    """x [S][B][K] as mma.sync m16n8k16 B fragments, the kernel's xf: [S][K/16][32 lanes][4
    halves], lane l = 4·b + q holding batch row b at K 2q, 2q + 1, 2q + 8, 2q + 9 of the
    k-step (registers b0, b1)."""
    q = np.arange(4)
    cols = np.stack([2 * q, 2 * q + 1, 2 * q + 8, 2 * q + 9], axis=1)                # [q][i]
    steps = x.reshape(x.shape[0], B, x.shape[2] // 16, 16)[..., cols]                  # [S][b][ks][q][i]
    return np.ascontiguousarray(steps.transpose(0, 2, 1, 3, 4)).reshape(x.shape[0], -1, 32, 4)


def reference(x: np.ndarray, w_ih: list, w_hh: list, bias: list) -> np.ndarray:
    """float64 stack, h rounded to fp16 each step as the kernel stores it; rows 4·unit +
    gate, gates i, f, g, o."""
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    for wi, wh, b in zip(w_ih, w_hh, bias):
        h, c, out = np.zeros((B, H)), np.zeros((B, H)), []
        for t in range(x.shape[0]):
            v = (x[t] @ wi.T + h @ wh.T + b).reshape(B, H, G)
            c = sig(v[..., 1]) * c + sig(v[..., 0]) * np.tanh(v[..., 2])
            h = (sig(v[..., 3]) * np.tanh(c)).astype(np.float16).astype(np.float64)
            out.append(h)
        x = np.stack(out)
    return x


class Stack:
    def __init__(self, kernels: dict, layers: int, S: int, rng):
        self.k, self.L, self.S = kernels, layers, S
        bound = 1.0 / H ** 0.5
        self.w_ih = [rng.uniform(-bound, bound, (G * H, H)).astype(np.float16) for _ in range(layers)]
        self.w_hh = [rng.uniform(-bound, bound, (G * H, H)).astype(np.float16) for _ in range(layers)]
        self.bias = [rng.uniform(-bound, bound, G * H).astype(np.float32) for _ in range(layers)]
        self.x16 = rng.uniform(-1, 1, (S, B, H)).astype(np.float16)
        self.f_ih = [cp.asarray(fragments(w)) for w in self.w_ih]
        self.f_hh = [cp.asarray(fragments(w)) for w in self.w_hh]
        self.d_bias = [cp.asarray(b) for b in self.bias]
        self.xf = cp.asarray(b_fragments(self.x16))
        self.xp = [cp.empty((2, S, B, G * H), cp.float32) for _ in range(layers)]  # halves: K_HALVES
        self.y = [cp.empty((S, B, H), cp.float16) for _ in range(layers)]
        self.yf = [cp.empty((S, H // 16, 32, 4), cp.float16) for _ in range(layers)]
        # progress of each layer, then the given input's word (BLOCKS·S), then status
        self.words = cp.zeros((layers + 2,), cp.uint32)
        self.streams = [cp.cuda.Stream(non_blocking=True) for _ in range(min(layers, 4))]

    def launch(self, layer: int, stream, variant: str) -> None:
        kernel, size = self.k[variant]
        below = self.words[layer - 1:] if layer > 0 else self.words[self.L:]
        kernel((BLOCKS,), (NT,), (self.f_hh[layer], self.f_ih[layer], self.d_bias[layer],
                                  self.yf[layer - 1] if layer > 0 else self.xf, self.xp[layer], self.y[layer],
                                  self.yf[layer],
                                  self.words[layer:], below, self.words[self.L + 1:], np.int32(self.S)),
               shared_mem=size, stream=stream)

    def run(self, how: str, variant: str = "full") -> float:
        """µs of one forward: "wavefront" (layer l on stream l % 4: 4 layers at once, layer
        l + 4 after layer l), "sequential" (one stream), or "alone" (layer 1's kernel, its
        input given: the layer below's word set to done)."""
        main = self.streams[0]
        start, end = cp.cuda.Event(), cp.cuda.Event()
        with main:
            for layer in ([1] if how == "alone" else range(self.L)):  # EMPTY, for POLLED builds
                self.y[layer].view(cp.uint16).fill(0xFFFF)
            self.words.fill(0)
            self.words[self.L] = BLOCKS * self.S
            if how == "alone":
                self.words[0] = BLOCKS * self.S
            start.record(main)
        if how == "alone":
            self.launch(1, main, variant)
        elif how == "sequential":
            for layer in range(self.L):
                self.launch(layer, main, variant)
        else:
            fork = cp.cuda.Event()
            fork.record(main)
            for s in self.streams[1:]:
                s.wait_event(fork)
            for layer in range(self.L):
                self.launch(layer, self.streams[layer % len(self.streams)], variant)
            for s in self.streams[1:]:
                joined = cp.cuda.Event()
                joined.record(s)
                main.wait_event(joined)
        end.record(main)
        end.synchronize()
        if int(self.words[self.L + 1]) != 0:
            raise RuntimeError(f"{how} ({variant}): a wait gave up (a layer's blocks not all resident?)")
        return cp.cuda.get_elapsed_time(start, end) * 1e3

    def median(self, how: str, variant: str = "full") -> float:
        return sorted(self.run(how, variant) for _ in range(REPEATS))[REPEATS // 2]


def rnncc_times() -> None:
    import torch

    import rnncc
    from rnncc.timing import time_graph
    for name, spec, S in (("4 × LSTM fp16 H=1024 B=8", 4, 256), ("8 × LSTM fp16 H=1024 B=8", 8, 128),
                          ("GNMT fp16 B=8 (residual)", "examples/gnmt_encoder_fp16.yaml", 128)):
        if isinstance(spec, int):
            spec = {"name": "wavefront", "dtype": "float16", "input_size": H,
                    "layers": [{"name": f"l{i}", "cell": "lstm", "hidden_size": H} for i in range(spec)]}
        m = rnncc.compile(spec, target="device", batch=B, seq_len=S, launches="graph")
        x = torch.randn(S, B, H, device="cuda", dtype=torch.float16)
        ms = time_graph(lambda m=m: m(x), 3, REPEATS).median_ms
        print(f"rnncc {name} S={S} ({m.plan.schedule.value.label}): {ms:.3f} ms in a CUDA graph", flush=True)


# The builds timed: every one polls y for h (-DPOLLED, as rnncc's partitions); DEPTH k-steps
# of the projection's operands loaded ahead; K_HALVES: the projection's warps split K, not
# the steps; X_STAGED: x's fragments staged in shared memory by chunks of XKC k-steps.
# REG_KS=7 frees registers at P=8 (its shared memory then fills 224 of 227 KiB; REG_KS=4
# would not fit at all). Builds near ptxas' cap of 128 registers spill a little (their
# bytes are in the results file's header), the P=16 ones most (the sums of 16 steps).
BUILDS = {
    "P=8 steps split": {"P": 8, "DEPTH": 1},
    "P=8 K halves": {"P": 8, "DEPTH": 1, "K_HALVES": None, "REG_KS": 7},
    "P=4 K halves, x staged by 4": {"P": 4, "K_HALVES": None, "X_STAGED": None, "XKC": 4},
    "P=4 K halves, x staged by 8": {"P": 4, "K_HALVES": None, "X_STAGED": None, "XKC": 8},
    "P=8 K halves, x staged by 2": {"P": 8, "K_HALVES": None, "X_STAGED": None, "XKC": 2, "REG_KS": 7},
    "P=8 K halves, x staged by 4": {"P": 8, "K_HALVES": None, "X_STAGED": None, "XKC": 4},
    "P=16 K halves, x staged by 1": {"P": 16, "K_HALVES": None, "X_STAGED": None, "XKC": 1, "REG_KS": 7},
    "P=16 K halves, x staged by 2": {"P": 16, "K_HALVES": None, "X_STAGED": None, "XKC": 2},
    "P=8 no projection": {"P": 8, "NO_PROJECTION": None},
}


def main() -> None:
    props = cp.cuda.runtime.getDeviceProperties(0)
    print(f"fp16 wavefront prototype on {props['name'].decode()}: LSTM H={H} B={B}, {BLOCKS} blocks of "
          f"{UNITS} units a layer, {NT} threads; median of {REPEATS} runs", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        jobs = {name: {"POLLED": None, **defines} for name, defines in BUILDS.items()}
        with ThreadPoolExecutor(max_workers=8) as pool:  # nvcc in parallel, the modules loaded here
            cubins = list(pool.map(lambda item: compile_cubin(Path(tmp), f"b{item[0]}", item[1]),
                                   enumerate(jobs.values())))
        kernels = {name: load(cubin, defines) for (name, defines), (cubin, _) in zip(jobs.items(), cubins)}
        for name, (_, spilled) in zip(jobs, cubins):
            print(f"{name:<30} -D{' -D'.join(k if v is None else f'{k}={v}' for k, v in jobs[name].items())}, "
                  f"{spilled} bytes spilled", flush=True)
        four = Stack(kernels, 4, 256, np.random.default_rng(0))
        eight = Stack(kernels, 8, 128, np.random.default_rng(1))
        want = reference(four.x16.astype(np.float64), [w.astype(np.float64) for w in four.w_ih],
                         [w.astype(np.float64) for w in four.w_hh], [b.astype(np.float64) for b in four.bias])
        for name in kernels:
            t = four.median("alone", name)
            # Without the projection the outputs are not checked (xp is left as it was), but
            # the stacks' times are the wavefront's floor.
            four.run("wavefront", name)  # (run fills y with EMPTY, a NaN, first)
            got = cp.asnumpy(four.y[-1]).astype(np.float64)
            error = "unchecked" if "NO_PROJECTION" in BUILDS[name] else \
                f"within {np.abs(got - want).max() / np.abs(want).max():.1e} of float64"
            print(f"{name:<30} one layer alone {t / 1e3:.3f} ms ({t / four.S:.2f} µs a step); 4 layers S=256: "
                  f"sequential {four.median('sequential', name) / 1e3:.3f} ms, wavefront "
                  f"{four.median('wavefront', name) / 1e3:.3f} ms (last layer {error}); 8 layers S=128 "
                  f"wavefront {eight.median('wavefront', name) / 1e3:.3f} ms (two rounds of 4)", flush=True)
    rnncc_times()


if __name__ == "__main__":
    main()
