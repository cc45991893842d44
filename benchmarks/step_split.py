"""Where a step of a persistent kernel goes, by leaving one part out.

The templates (the grid kernels on tensor cores, the FMA one's planned path, and the
registers form of the cluster kernel on tensor cores) mark a step's parts with
``/* part X */ … /* end X */`` comments:
- stage:      h of the previous step into shared memory and the block barrier after it;
- product:    the mma.sync (or FMA) chain over the warp's K range, partial sums into shared
              memory;
- cell:       the K split's sum, the gates and the cell update, h and c written;
- projection: the next step's input projection loaded into registers;
- sync:       the grid barrier, where the kernel has one, or the cluster's h exchange (its
              sends and its wait, two regions; a block barrier stands in for each).
Each variant is the planned kernel with parts cut out of its source (renamed, so it builds
and caches apart), timed as a CUDA-graph replay of the layer's forward beside the full
kernel in one process. A part's cost a step is (full − without it) / S: what the step gains
when it is gone, which for parts that overlap others is less than their time alone. "only
exchange" keeps the stage and sync; "none" keeps only the loop. The variants' outputs mean
nothing and are not checked, only timed. (The stamped-h kernel of 8ce4ab8, reverted, was
measured with that commit's version of this script, which never cut its cell: the cell
wrote the words the readers waited for.)

    python3 benchmarks/step_split.py                       # the issue's LSTM fp16 H=1024 B=8
    python3 benchmarks/step_split.py gru float16 1024 8    # another case
    python3 benchmarks/step_split.py lstm float32 1024 8 exact   # the FMA grid kernel
    python3 benchmarks/step_split.py lstm float16 512 8 tensor cluster   # the cluster kernel

Needs a Hopper GPU and PyTorch. Results: benchmarks/results/step-split-<gpu>-<date>.txt.
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
PARTS = ("stage", "product", "cell", "projection", "sync")
# What stands in for a part that is left out (nothing, unless the loop needs it).
STAND_IN = {"sync": "__syncthreads();"}


def without(source: str, parts: tuple[str, ...]) -> str:
    """``source`` with the marked regions of ``parts`` replaced by their stand-ins."""
    for part in parts:
        pattern = re.compile(rf"/\* part {part} \*/.*?/\* end {part} \*/", re.DOTALL)
        if not pattern.search(source):
            raise ValueError(f"step_split: the kernel has no part {part!r}; expected markers "
                             f"/* part {part} */ … /* end {part} */")
        source = pattern.sub(STAND_IN.get(part, ""), source)
    return source


def variants(base: CompiledModel) -> dict[str, CompiledModel]:
    """The model as planned ("full") and with its recurrent kernel cut: one part left out
    at a time, all but the exchange, and all."""
    kernel = base.kernel_of("l0", "recurrent")
    present = [p for p in PARTS if f"/* part {p} */" in kernel.source]
    cuts = {"full": ()} | {f"without {p}": (p,) for p in present} | \
        {"only exchange": tuple(p for p in present if p not in ("stage", "sync")),
         "none": tuple(present)}
    out = {}
    for label, parts in cuts.items():
        cut = replace(kernel, name=kernel.name + "".join(f"_no_{p}" for p in parts),
                      source=without(kernel.source, parts))
        kernels = tuple(cut if k is kernel else k for k in base.kernels)
        out[label] = CompiledModel(base.model, base.plan, base.target, kernels, None)
    return out


def main(cell: str = "lstm", dtype: str = "float16", H: int = 1024, B: int = 8,
         precision: str = "tensor", persistence: str = "grid") -> None:
    import torch

    spec = {"name": "step_split", "dtype": dtype, "input_size": H,
            "layers": [{"name": "l0", "cell": cell, "hidden_size": H}]}
    base = rnncc.compile(spec, target="device", batch=B, seq_len=S, persistence=persistence,
                         precision=precision)
    plan = base.plan.layers[0].persistence.value
    models = variants(base)
    compile_all([k for m in models.values() for k in m.kernels], base.target.arch)
    torch.manual_seed(0)
    x = torch.randn(S, B, H, device="cuda", dtype=getattr(torch, dtype))
    ms = time_graphs_interleaved({label: lambda m=m: m(x) for label, m in models.items()})
    print(f"{cell} {dtype} H={H} B={B} S={S}: {plan.mode}, tile {plan.tile}")
    print(f"  full: {ms['full'] * 1e3 / S:.2f} µs a step ({ms['full']:.3f} ms the forward)")
    for label in models:
        if label.startswith("without"):
            saved = (ms["full"] - ms[label]) * 1e3 / S
            print(f"  {label:<20} {ms[label] * 1e3 / S:6.2f} µs a step: the part costs {saved:5.2f}")
    for label in ("only exchange", "none"):
        print(f"  {label:<20} {ms[label] * 1e3 / S:6.2f} µs a step")
    print(f"  the exchange alone (only exchange − none): "
          f"{(ms['only exchange'] - ms['none']) * 1e3 / S:.2f} µs a step", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    main(*args[:2], *(int(a) for a in args[2:4]), *args[4:6]) if args else main()
