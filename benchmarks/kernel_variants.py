"""One layer's recurrent kernel against variants of its templates, in one process.

A variant is a directory of template files that stand in for those of the same name in
``templates/`` (the others are the checkout's), or ``git:REV``: every template as commit
REV had it (the kernel before a change, beside it). The layer is planned once; its recurrent
kernel is rendered again under each variant, and every variant's outputs (y, h_n, c_n) are
checked against the planned kernel's before its time counts. Times are CUDA-graph replays
of the layer's forward, in interleaved rounds so that clocks move them alike. This is how a
kernel idea is measured before it goes into ``templates/``: the plan, launch and arguments
stay the planned kernel's, so a variant may change only the code inside them.

    python3 benchmarks/kernel_variants.py lstm float16 512 8 DIR [DIR ...]
    python3 benchmarks/kernel_variants.py lstm float16 512 8 git:7ff6650 DIR
    python3 benchmarks/kernel_variants.py lstm float16 512 8 DIR ... --build-only

``--build-only`` plans for the h100 preset and fills the cubin cache (no GPU). Needs a
Hopper GPU and PyTorch otherwise.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jinja2

import rnncc
from rnncc import codegen
from rnncc.build import compile_all
from rnncc.runtime import CompiledModel

S = 256


def overlay_environment(variant: str) -> jinja2.Environment:
    """codegen's environment, with the files of directory ``variant`` in place of
    templates/'s, or with templates/ as of commit REV for ``git:REV``."""
    root = codegen.templates_dir()

    def load(name: str) -> str:
        if variant.startswith("git:"):
            return subprocess.run(["git", "show", f"{variant[4:]}:templates/{name}"], cwd=root.parent,
                                  check=True, capture_output=True, text=True).stdout
        path = Path(variant) / name
        return (path if path.exists() else root / name).read_text()

    base = codegen.environment()
    return jinja2.Environment(loader=jinja2.FunctionLoader(load), undefined=base.undefined,
                              autoescape=False, trim_blocks=True, lstrip_blocks=True,
                              keep_trailing_newline=True)


def variant_models(base: CompiledModel, variants: list[str]) -> dict[str, CompiledModel]:
    """The planned model ("planned") and, per variant, the model with its layer's recurrent
    kernel rendered under that overlay (named by its source, so it caches apart)."""
    kernel = base.kernel_of("l0", "recurrent")
    layer = next(l for l in base.plan.layers if l.name == "l0")
    out = {"planned": base}
    planned_environment = codegen.environment
    for variant in variants:
        env = overlay_environment(variant)
        codegen.environment = lambda env=env: env
        try:
            source = codegen.render_recurrent(base.plan, layer, kernel.users)
        finally:
            codegen.environment = planned_environment
        if source.source == kernel.source:
            print(f"  {variant}: changes nothing in {kernel.name}, left out", flush=True)
            continue
        kernels = tuple(source if k is kernel else k for k in base.kernels)
        label = variant if variant.startswith("git:") else Path(variant).name
        out[label] = CompiledModel(base.model, base.plan, base.target, kernels, None)
    return out


def main(cell: str, dtype: str, H: int, B: int, variants: list[str], build_only: bool) -> None:
    spec = {"name": "kernel_variants", "dtype": dtype, "input_size": H,
            "layers": [{"name": "l0", "cell": cell, "hidden_size": H}]}
    base = rnncc.compile(spec, target="h100" if build_only else "device", batch=B, seq_len=S)
    models = variant_models(base, variants)
    compile_all([k for m in models.values() for k in m.kernels], base.target.arch)
    plan = base.plan.layers[0].persistence.value
    print(f"{cell} {dtype} H={H} B={B} S={S}: {plan.mode}, tile {plan.tile}", flush=True)
    if build_only:
        return
    import torch

    from rnncc.timing import time_graphs_interleaved

    torch.manual_seed(0)
    x = torch.randn(S, B, H, device="cuda", dtype=getattr(torch, dtype))
    with torch.no_grad():
        reference = [t.float() for t in _flat(models["planned"](x))]
        for label, model in models.items():
            got = [t.float() for t in _flat(model(x))]
            worst = max(((g - r).abs().max() / r.abs().max().clamp_min(1e-30)).item()
                        for g, r in zip(got, reference))
            print(f"  {label:<24} max relative difference from planned: {worst:.2e}", flush=True)
        ms = time_graphs_interleaved({label: lambda m=m: m(x) for label, m in models.items()})
    for label in models:
        print(f"  {label:<24} {ms[label] * 1e3 / S:6.3f} µs a step "
              f"({ms[label] / ms['planned']:.3f} of planned)", flush=True)


def _flat(out) -> list:
    if isinstance(out, dict):
        return [t for key in sorted(out) for t in _flat(out[key])]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flat(o)]
    return [out]


if __name__ == "__main__":
    flags = {a for a in sys.argv[1:] if a.startswith("--")}
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(args[0], args[1], int(args[2]), int(args[3]), args[4:],
         "--build-only" in flags)
