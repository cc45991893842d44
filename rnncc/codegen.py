"""Codegen: the Plan rendered into CUDA source, one template per kernel family.

The renderer knows nothing about devices. Templates receive plain values only. Each
kernel's parameter list is written here once: the template renders the signature from
it and the runtime passes arguments by these names.
"""

from __future__ import annotations

import importlib.resources
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jinja2

from . import __version__
from .dtypes import DTYPES
from .plan import LAYOUTS, LayerPlan, OutputPlan, Plan, _show


@dataclass(frozen=True)
class Param:
    name: str
    kind: str   # "ptr" | "i64" | "i32": how the runtime passes it (PyCUDA "P", "q", "i")
    decl: str   # C declaration
    doc: str    # shape and meaning, shown next to the declaration


@dataclass(frozen=True)
class KernelSource:
    name: str                     # unique in the model, e.g. "l1_input_projection"
    family: str                   # "input_projection" | "recurrent_step" | "merge" | ...
    owner: str                    # layer or output name (the first user)
    entry: str                    # the extern "C" function
    source: str
    params: tuple[Param, ...]
    block: tuple[int, int, int]
    dynamic_shared: int = 0       # bytes of dynamic shared memory per block
    users: tuple[str, ...] = ()   # every layer that runs it (identical layers share kernels)

    @property
    def filename(self) -> str:
        return f"{self.name}.cu"


def templates_dir():
    """``templates/`` of a source checkout (also what an editable install uses), else the
    copy installed as the package ``rnncc.templates``."""
    checkout = Path(__file__).resolve().parent.parent / "templates"
    if (checkout / "common.cuh.j2").exists():
        return checkout
    return importlib.resources.files("rnncc.templates")


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The one Jinja environment: templates from :func:`templates_dir`, StrictUndefined."""
    root = templates_dir()
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(lambda name: (root / name).read_text()),
        undefined=jinja2.StrictUndefined, autoescape=False,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


def _ptr(name: str, ctype: str, doc: str, const: bool = True) -> Param:
    return Param(name, "ptr", f"{'const ' if const else ''}{ctype}* __restrict__ {name}", doc)


def _i64(name: str, doc: str) -> Param:
    return Param(name, "i64", f"long long {name}", doc)


def _i32(name: str, doc: str) -> Param:
    return Param(name, "i32", f"int {name}", doc)


def _source_params(sources, named: bool = True) -> list[Param]:
    out = []
    for i, s in enumerate(sources):
        what = f"source '{s.name}'" if named else f"source {i}"
        out += [_ptr(f"x{i}", "T", f"{what}: [S, B, {s.size}], features contiguous"),
                _i64(f"x{i}_stride_t", f"x{i}: elements between time steps"),
                _i64(f"x{i}_stride_b", f"x{i}: elements between batch entries")]
    return out


def projection_params(l: LayerPlan, shared: bool = False) -> tuple[Param, ...]:
    G, H = l.gates, l.hidden_size
    y = "[rows, G·H]" if l.layout.value == "xw" else "[G·H, rows]"
    params = _source_params(l.sources, named=not shared)
    params.append(_ptr("w_ih", "T", f"[{G}·{H}, {l.input_size}] W_ih, row u·G+g (gate g of unit u)"))
    if l.bias:
        params.append(_ptr("bias", "float", "[G·H] b_ih + b_hh folded (GRU: without b_hn), same rows"))
    params += [_ptr("xproj", "float", f"{y} out: projection of these steps", const=False),
               _i32("rows", "steps · batch in this launch (row r = step r / batch)"),
               _i32("batch", "B")]
    return tuple(params)


def step_params(l: LayerPlan, library_product: bool = False) -> tuple[Param, ...]:
    """Parameters of the step kernel, or with ``library_product`` of the cell kernel that
    follows cuBLASLt's product (hw instead of W_hhᵀ)."""
    G, H = l.gates, l.hidden_size
    product = (_ptr("step_product", "float", f"[B, {G}·{H}] h·W_hhᵀ from cuBLASLt, column u·G+g (nullptr: zeros)")
               if library_product else
               _ptr("w_hh_t", "T", f"[{H}, {G}·{H}] W_hhᵀ, column u·G+g (gate g of unit u)"))
    params = [_ptr("h_prev", "T", f"[B, {H}] h of the previous step (nullptr: zeros); not aliased by h_out"),
              _i64("h_prev_stride_b", "h_prev: elements between batch entries"),
              product,
              _ptr("xproj", "float", "this step's projection: (b, u·G+g) at b·stride_b + (u·G+g)·stride_n"),
              _i64("xproj_stride_b", "xproj: elements between batch entries"),
              _i64("xproj_stride_n", "xproj: elements between gate columns")]
    if l.cell == "gru" and l.bias:
        params.append(_ptr("bias_hn", "float", f"[{H}] b_hn, applied inside r * (h W_hnᵀ + b_hn)"))
    if l.cell == "lstm":
        params += [_ptr("c0", "T", f"[B, {H}] initial cell state read at the first step (nullptr: zeros)"),
                   _ptr("c", "float", f"[B, {H}] cell state in float32, updated in place", const=False),
                   _ptr("c_out", "T", f"[B, {H}] out: cell state in storage dtype, or nullptr", const=False)]
    params += [_ptr("h_out", "T", f"[B, {H}] out: h of this step (the layer's output at t)", const=False),
               _i64("h_out_stride_b", "h_out: elements between batch entries"),
               _i32("batch", "B")]
    if l.cell == "lstm":
        params.append(_i32("first_step", "1: take the cell state from c0 instead of c"))
    return tuple(params)


def persistent_params(l: LayerPlan, barrier: bool) -> tuple[Param, ...]:
    G, H = l.gates, l.hidden_size
    params = [_ptr("h0", "T", f"[B, {H}] initial h (nullptr: zeros); row stride h0_stride_b"),
              _i64("h0_stride_b", "h0: elements between batch entries"),
              _ptr("w_hh_t", "T", f"[{H}, {G}·{H}] W_hhᵀ, column u·G+g (gate g of unit u)"),
              _ptr("xproj_all", "float", "projection of these steps: step t, (b, u·G+g) at "
                                         "t·stride_t + b·stride_b + (u·G+g)·stride_n"),
              _i64("xproj_stride_t", "xproj_all: elements between steps"),
              _i64("xproj_stride_b", "xproj_all: elements between batch entries"),
              _i64("xproj_stride_n", "xproj_all: elements between gate columns")]
    if l.cell == "gru" and l.bias:
        params.append(_ptr("bias_hn", "float", f"[{H}] b_hn, applied inside r * (h W_hnᵀ + b_hn)"))
    if l.cell == "lstm":
        params += [_ptr("c0", "T", f"[B, {H}] initial cell state, read when first_chunk (nullptr: zeros)"),
                   _ptr("c", "float", f"[B, {H}] cell state in float32, updated in place", const=False),
                   _ptr("c_final", "T", f"[B, {H}] out: cell state after the last step, or nullptr",
                        const=False)]
    params += [_ptr("y", "T", f"[S, B, {H}] out: h of every step (the layer's output); step t "
                              "at t·y_stride_t", const=False),
               _i64("y_stride_t", "y: elements between steps"),
               _i64("y_stride_b", "y: elements between batch entries"),
               _i32("steps", "time steps in this launch"),
               _i32("batch", "B")]
    if l.cell == "lstm":
        params.append(_i32("first_chunk", "1: the first step takes its cell state from c0"))
    if barrier:
        params.append(_ptr("barrier", "unsigned", "[2] grid barrier: arrivals, generation (zeroed once)",
                           const=False))
    return tuple(params)


def merge_params(o: OutputPlan) -> tuple[Param, ...]:
    return tuple(_source_params(o.sources) + [
        _ptr("out", "T", f"[S, B, {o.size}] out: the merged output", const=False),
        _i64("out_stride_t", "out: elements between time steps"),
        _i64("out_stride_b", "out: elements between batch entries"),
        _i32("seq_len", "S"), _i32("batch", "B")])


MERGE_THREADS = 256
CELL_THREADS = 128  # the cell kernel after a cuBLASLt product: one thread per (row, unit)


def _header(plan: Plan, what: str, decisions: list[str]) -> dict:
    return dict(version=__version__, model=plan.model, dtype=plan.dtype, what=what,
                decisions=decisions)


# The decisions each kernel of a layer depends on (and its header lists); with the layer's
# shape they are its signature: layers with equal signatures share the kernel.
PROJECTION_DECISIONS = ("precision", "layout", "gate_concat", "projection_tile", "merge_fusion")
RECURRENT_DECISIONS = ("precision", "gate_concat", "persistence", "step_tile")


def _layer_decisions(plan: Plan, l: LayerPlan, keys: tuple[str, ...]) -> list[str]:
    lines = [f"target {plan.target} ({plan.arch}); tuned for S={plan.options.seq_len}, "
             f"B={plan.options.batch}"]
    for key, d in l.decisions().items():
        if key in keys:
            lines.append(f"{key}: {_show(d.value)} -- {d.reason}")
    return lines


def kernel_signature(l: LayerPlan, family: str) -> str:
    """What the layer's kernel of ``family`` ("input_projection" or "recurrent") depends on."""
    if family == "input_projection":
        shape = [l.gates, l.hidden_size, l.input_size, l.bias, l.merge,
                 [(s.size, s.offset) for s in l.sources]]
        keys = PROJECTION_DECISIONS
    else:
        shape, keys = [l.cell, l.gates, l.hidden_size, l.bias], RECURRENT_DECISIONS
    return json.dumps([family, shape, {k: getattr(l, k).value for k in keys}], sort_keys=True)


def _what(l: LayerPlan, users: tuple[str, ...]) -> str:
    layers = f"layers {', '.join(users)}" if len(users) > 1 else f"layer {l.name}"
    return f"{layers} ({l.cell}, H={l.hidden_size}, input {l.input_size})"


def _common(plan: Plan, l: LayerPlan, users: tuple[str, ...]) -> dict:
    return dict(layer=", ".join(users), dtype=plan.dtype, gates=l.gates, bias=l.bias,
                sources=[dict(name=s.name, size=s.size, offset=s.offset) for s in l.sources],
                merge=l.merge)


def render_projection(plan: Plan, l: LayerPlan, users: tuple[str, ...]) -> KernelSource | None:
    """Layer l's input-projection kernel, run by ``users``; None where cuBLASLt runs it."""
    tile = l.projection_tile.value
    if tile["math"] == "cublas":
        return None
    name = f"{l.name}_input_projection"
    params = projection_params(l, shared=len(users) > 1)
    template = "input_projection_tensor.cu.j2" if tile["math"] == "tensor" else "input_projection.cu.j2"
    source = environment().get_template(template).render(
        kernel=_header(plan, _what(l, users) + ", input projection",
                       _layer_decisions(plan, l, PROJECTION_DECISIONS)),
        entry=f"rnncc_{name}", params=params, K=l.input_size, GH=l.gates * l.hidden_size,
        tile=tile, layout=l.layout.value, layout_text=LAYOUTS[l.layout.value],
        operand_a="activations" if l.layout.value == "xw" else "weights",
        operand_b="weights" if l.layout.value == "xw" else "activations",
        **_common(plan, l, users))
    return KernelSource(name, "input_projection", l.name, f"rnncc_{name}", source, params,
                        (tile["threads"], 1, 1), users=users)


def _fma_block(tile: dict) -> tuple[int, int, int]:
    """Block of an FMA tile (step, grid, cluster): threads along units, rows, K split."""
    return (tile["units_per_block"] // tile["units_per_thread"],
            tile["batch_per_block"] // tile["batch_per_thread"], tile["k_split"])


def render_recurrent(plan: Plan, l: LayerPlan, users: tuple[str, ...]) -> KernelSource:
    """Layer l's recurrent kernel (step, cell, grid- or cluster-persistent), run by ``users``."""
    env = environment()
    what = _what(l, users)
    decisions = _layer_decisions(plan, l, RECURRENT_DECISIONS)
    common = _common(plan, l, users)
    mode = l.persistence.value["mode"]
    if mode in ("grid", "cluster"):
        # The same family (launch and arguments) on FMA or on tensor cores.
        tile = l.persistence.value
        family = {"grid": "recurrent_persistent", "cluster": "recurrent_cluster"}[mode]
        tensor = tile["math"] == "tensor"
        template = f"{family}{'_tensor' if tensor else ''}.cu.j2"
        name = f"{l.name}_{family}"
        params = persistent_params(l, barrier=mode == "grid")
        source = env.get_template(template).render(
            kernel=_header(plan, what + f", recurrent steps, persistent ({mode}"
                           f"{', tensor cores' if tensor else ''})", decisions),
            entry=f"rnncc_{name}", params=params, H=l.hidden_size, cell=l.cell, tile=tile,
            shared_bytes=tile["shared_bytes"], **common)
        block = (tile["threads"], 1, 1) if tensor else _fma_block(tile)
        return KernelSource(name, family, l.name, f"rnncc_{name}", source, params, block,
                            tile["shared_bytes"], users)

    name = f"{l.name}_recurrent_step"
    if l.persistence.value["math"] == "cublas":
        params = step_params(l, library_product=True)
        source = env.get_template("recurrent_step_cell.cu.j2").render(
            kernel=_header(plan, what + ", cell of a recurrent step (product in cuBLASLt)", decisions),
            entry=f"rnncc_{name}", params=params, H=l.hidden_size, cell=l.cell,
            threads=CELL_THREADS, **common)
        return KernelSource(name, "recurrent_step", l.name, f"rnncc_{name}", source, params,
                            (CELL_THREADS, 1, 1), users=users)
    params = step_params(l)
    tile = l.step_tile.value
    source = env.get_template("recurrent_step.cu.j2").render(
        kernel=_header(plan, what + ", recurrent step", decisions), entry=f"rnncc_{name}",
        params=params, H=l.hidden_size, cell=l.cell, tile=tile, async_copy=tile["async_copy"],
        **common)
    block = _fma_block(tile)
    return KernelSource(name, "recurrent_step", l.name, f"rnncc_{name}", source, params, block,
                        users=users)


def render_output(plan: Plan, o: OutputPlan) -> KernelSource:
    name = f"{o.name}_merge"
    params = merge_params(o)
    decisions = [f"kernel: {o.kernel.value} -- {o.kernel.reason}"]
    source = environment().get_template("merge.cu.j2").render(
        kernel=_header(plan, f"output {o.name} ({o.merge} of {len(o.sources)})", decisions),
        entry=f"rnncc_{name}", params=params, output=o.name, merge=o.merge,
        source_names=", ".join(s.name for s in o.sources), F=o.size, dtype=plan.dtype,
        threads=MERGE_THREADS,
        sources=[dict(name=s.name, size=s.size, offset=s.offset) for s in o.sources])
    return KernelSource(name, "merge", o.name, f"rnncc_{name}", source, params,
                        (MERGE_THREADS, 1, 1), users=(o.name,))


def render(plan: Plan) -> tuple[KernelSource, ...]:
    """Every kernel of the model, in the order of first use; identical layers share theirs."""
    # Each kernel once per signature, for every layer that has it (a stack of equal layers
    # compiles one recurrent kernel), in the order of first use.
    renderers = {"input_projection": render_projection, "recurrent": render_recurrent}
    users: dict[str, tuple[str, LayerPlan, list[str]]] = {}
    for l in plan.layers:
        for family in renderers:
            users.setdefault(kernel_signature(l, family), (family, l, []))[2].append(l.name)
    kernels: list[KernelSource] = []
    for family, first, names in users.values():
        kernel = renderers[family](plan, first, tuple(names))
        if kernel is not None:
            kernels.append(kernel)
    kernels += [render_output(plan, o) for o in plan.outputs if o.kernel is not None]
    return tuple(kernels)


assert set(DTYPES) == {"float32", "float16", "bfloat16"}  # storage() in common.cuh.j2 knows these
