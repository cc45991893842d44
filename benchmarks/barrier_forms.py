"""Forms of the grid barrier, timed in the planned grid kernel (issue 14's LSTM fp16 H=1024
B=8 and others): the planned kernel's source with its `grid_barrier` replaced, built apart,
timed as CUDA-graph replays of the layer's forward beside the planned one in one process,
and its outputs checked bit for bit against the planned kernel's (the forms differ only in
how a block learns that all have arrived, so the numbers must not move).

Forms ("planned" is common.cuh.j2's `grid_barrier` as it stands):
- atom_relaxed:  the block's last thread adds with `atom.add.release.gpu`, which returns the
                 word before its add, polls (relaxed) until the top bit differs from that
                 value's, then `fence.acq_rel.gpu`: the planned form until 2026-11-27.
- atom_acquire:  the same, polling with `ld.acquire.gpu` and no fence after (planned since).
- red_relaxed:   `red.release.gpu` (no value returned) and the poll issued at once, the top
                 bit expected from the barrier before (a register of the polling thread, read
                 from the word once at the kernel's start, when it cannot flip yet: this block
                 has not arrived). The last block to arrive could learn of the flip one load
                 after its add instead of after the add's return and a load.
- red_acquire:   red, polling with `ld.acquire.gpu` and no fence after.

    python3 benchmarks/barrier_forms.py                          # LSTM fp16 H=1024 B=8
    python3 benchmarks/barrier_forms.py gru bfloat16 1024 8 tensor
    python3 benchmarks/barrier_forms.py lstm float32 1024 8 exact

Needs a Hopper GPU and PyTorch. Results: benchmarks/results/barrier-forms-<gpu>-<date>.txt.
"""

from __future__ import annotations

import re
import sys
from dataclasses import replace

import rnncc
from rnncc.build import compile_all
from rnncc.runtime import CompiledModel
from rnncc.timing import time_graphs_interleaved

S = 256
CALL = "grid_barrier(barrier, status, spin_timeout_ns)"
LAST_THREAD = ("threadIdx.x == blockDim.x - 1 && threadIdx.y == blockDim.y - 1 "
               "&& threadIdx.z == blockDim.z - 1")


def barrier_source(arrive: str, poll: str) -> str:
    """A grid_barrier with a phase argument: `arrive` "atom" or "red", `poll` "relaxed" or
    "acquire" (the fence after the poll only with "relaxed")."""
    if arrive == "atom":
        add = ('unsigned before;\n'
               '        asm volatile("atom.add.release.gpu.global.u32 %0, [%1], %2;" : "=r"(before) '
               ': "l"(barrier), "r"(add) : "memory");\n'
               '        const unsigned expected = before >> 31;')
    else:
        add = ('asm volatile("red.release.gpu.global.add.u32 [%0], %1;" :: "l"(barrier), "r"(add) : "memory");\n'
               '        const unsigned expected = phase;')
    fence = 'asm volatile("fence.acq_rel.gpu;" ::: "memory");' if poll == "relaxed" else ""
    return f"""
__device__ __forceinline__ unsigned grid_barrier_phase(const unsigned* barrier) {{
    unsigned v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(barrier) : "memory");
    return v >> 31;
}}
__device__ __forceinline__ bool grid_barrier(unsigned* barrier, unsigned* status,
                                             long long spin_timeout_ns, unsigned& phase) {{
    __shared__ int stop;
    __syncthreads();
    if ({LAST_THREAD}) {{
        stop = 0;
        const unsigned blocks = gridDim.x * gridDim.y;
        const unsigned add = blockIdx.x == 0 && blockIdx.y == 0 ? 0x80000000u - (blocks - 1) : 1u;
        {add}
        unsigned spins = 0, now;
        unsigned long long start = 0;
        do {{
            asm volatile("ld.{poll}.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(barrier) : "memory");
            if ((now >> 31) != expected) break;
            if (spin_expired(++spins, start, spin_timeout_ns)
                || (spins % SPIN_CHECK == 0 && *reinterpret_cast<volatile unsigned*>(&barrier[1]))) {{
                atomicExch(&barrier[1], 1u);
                report_timeout(status, 1u);
                stop = 1;
                break;
            }}
        }} while (true);
        phase = expected ^ 1u;
        {fence}
    }}
    __syncthreads();
    return stop == 0;
}}
"""


def with_barrier(source: str, arrive: str, poll: str) -> str:
    """The kernel source with its grid_barrier replaced by the form (arrive, poll)."""
    start = source.index("__device__ __forceinline__ bool grid_barrier(")
    end = source.index("\n}\n", start) + 3
    source = source[:start] + barrier_source(arrive, poll) + source[end:]
    if CALL not in source:
        raise ValueError("barrier_forms: the kernel calls no grid_barrier; expected " + CALL)
    source = source.replace(CALL, CALL[:-1] + ", barrier_phase)")
    # The phase, read once at the kernel's start (the entry's opening brace).
    entry = source.index('extern "C" __global__')
    brace = source.index("\n{\n", entry) + 3
    return source[:brace] + "    unsigned barrier_phase = grid_barrier_phase(barrier);\n" + source[brace:]


FORMS = {"planned": None, "atom_relaxed": ("atom", "relaxed"), "atom_acquire": ("atom", "acquire"),
         "red_relaxed": ("red", "relaxed"), "red_acquire": ("red", "acquire")}


def main(cell: str = "lstm", dtype: str = "float16", H: int = 1024, B: int = 8,
         precision: str = "tensor") -> None:
    import torch

    spec = {"name": "barrier_forms", "dtype": dtype, "input_size": H,
            "layers": [{"name": "l0", "cell": cell, "hidden_size": H}]}
    base = rnncc.compile(spec, target="device", batch=B, seq_len=S, persistence="grid",
                         precision=precision)
    kernel = base.kernel_of("l0", "recurrent")
    models = {}
    for label, form in FORMS.items():
        k = kernel if form is None else replace(kernel, name=kernel.name + "_" + label,
                                                source=with_barrier(kernel.source, *form))
        models[label] = CompiledModel(base.model, base.plan, base.target,
                                      tuple(k if x is kernel else x for x in base.kernels), None)
    compile_all([k for m in models.values() for k in m.kernels], base.target.arch)
    torch.manual_seed(0)
    x = torch.randn(S, B, H, device="cuda", dtype=getattr(torch, dtype))
    reference = models["planned"](x)
    for label, m in models.items():
        out = m(x)
        same = all(torch.equal(a, b) for a, b in zip(torch.utils._pytree.tree_leaves(out),
                                                     torch.utils._pytree.tree_leaves(reference)))
        if not same:
            raise SystemExit(f"barrier_forms: {label} gives other numbers than the planned kernel")
    ms = time_graphs_interleaved({label: lambda m=m: m(x) for label, m in models.items()}, rounds=5)
    plan = base.plan.layers[0].persistence.value
    print(f"{cell} {dtype} {precision} H={H} B={B} S={S}: {plan.mode}, tile {plan.tile}; "
          "every form's outputs equal the planned kernel's")
    for label in models:
        print(f"  {label:<13} {ms[label] * 1e3 / S:6.3f} µs a step ({ms[label]:.4f} ms the forward, "
              f"{ms[label] / ms['planned']:.3f}× planned)", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    main(*args[:2], *(int(a) for a in args[2:4]), *args[4:5]) if args else main()
