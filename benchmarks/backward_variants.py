"""The backward recurrence kernel alone, and variants of it with a part taken out, timed
on random inputs (``rnncc.backward.recurrence``): what a step of it costs and where that
goes. Each variant is the kernel's source with one substitution, renamed so that it builds
and caches apart; its outputs mean nothing and are not checked, only timed.

    python3 benchmarks/backward_variants.py > results/backward-variants-<gpu>-<date>.txt

Needs a Hopper GPU and PyTorch.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

import torch

from rnncc import backward, codegen
from rnncc.ir import INPUT, Layer, Merge

CASES = (("lstm", "float16", 512, 8), ("gru", "float16", 512, 8), ("lstm", "bfloat16", 1024, 8),
         ("lstm", "float32", 1024, 64))
S = 256
# name: (source edits, blocks the tile is planned for as a fraction of the SMs). Fewer
# blocks give each more units, and read less of dG from L2 a step in all (each block reads
# all of it), for a longer product a block.
VARIANTS = {
    "full": ((), 1),
    "K loop unrolled 8": ((("constexpr int K_UNROLL = 4;", "constexpr int K_UNROLL = 8;"),), 1),
    "no grid barrier": ((("if (s < S && !grid_barrier(barrier, status, spin_timeout_ns)) return;",
                          "__syncthreads();"),), 1),
    "no dG loads": ((("to_float(__ldcg(d + (long long)r * GH + k))", "(float)(k + r)"),), 1),
    "half the blocks": ((), 2),
}


def variant_renderer(render, edits):
    def rendered(*args):
        k = render(*args)
        source = k.source
        for old, new in edits:
            if old not in source:
                raise ValueError(f"backward_variants: the kernel has no {old!r}")
            source = source.replace(old, new)
        if not edits:
            return k
        name = f"{k.name}_v{hashlib.sha256(source.encode()).hexdigest()[:6]}"
        return replace(k, name=name, entry=f"rnncc_{name}", source=source.replace(k.entry, f"rnncc_{name}"))
    return rendered


def time_ms(fn, repeats: int = 30) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[repeats // 2]


def main() -> None:
    print(__doc__.split("\n\n")[0].replace("\n", " "))
    render, tile = codegen.render_backward, backward.backward_tile
    torch.manual_seed(0)
    for cell, dtype, H, B in CASES:
        G = {"lstm": 4, "gru": 3}[cell]
        layer = Layer(name="l0", cell=cell, hidden_size=H, input_size=H, bias=True,
                      input=Merge("sum", (INPUT,)))
        dt = getattr(torch, dtype)
        w_hh = (torch.randn(G * H, H, device="cuda") / H ** 0.5).to(dt)
        pre = torch.randn(S, B, G * H, device="cuda")
        pre_h = torch.randn(S, B, G * H, device="cuda") if cell == "gru" else None
        h_prev = torch.randn(S, B, H, device="cuda").to(dt)
        dy = torch.randn(S, B, H, device="cuda")
        line = []
        for name, (edits, fewer) in VARIANTS.items():
            codegen.render_backward = variant_renderer(render, edits)
            backward.backward_tile = lambda g, h, b, sms, shared, f=fewer: tile(g, h, b, sms // f, shared)
            backward._kernel.cache_clear()
            # float32 writes dG over pre: later runs read other values, at the same cost.
            ms = time_ms(lambda: backward.recurrence(layer, w_hh, pre, pre_h, h_prev, None, dy, None, None))
            target = backward._device()[0]
            t = backward.backward_tile(G, H, B, target.sm_count, backward._dynamic_shared_max(target))
            line.append(f"{name} ({t.units} units × {t.blocks} blocks, {t.rows} rows a pass) "
                        f"{ms:.3f} ms ({ms * 1e3 / S:.2f} µs a step)")
        codegen.render_backward, backward.backward_tile = render, tile
        print(f"{cell} {dtype} H={H} B={B} S={S}:\n  " + "\n  ".join(line))


if __name__ == "__main__":
    main()
