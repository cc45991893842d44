"""Codegen: the Plan rendered into CUDA source, one template per kernel family.

The renderer knows nothing about devices. Templates receive plain values only. Each
kernel's parameter list is written here once: the template renders the signature from
it and the runtime passes arguments by these names.
"""

from __future__ import annotations

import hashlib
import importlib.resources
from dataclasses import dataclass, field, replace
from functools import lru_cache, partial
from pathlib import Path

import jinja2

from . import __version__
from .dtypes import DTYPES
from .plan import LAYOUTS, LayerPlan, OutputPlan, Plan, _show
from .tiles import (CLUSTER_BACKWARD_TILES, H_PROJECTION_BLOCK, BackwardKernelTile, ClusterBackwardTile,
                    ClusterTile, FmaClusterBackwardTile, KSplitBackwardTile, PersistentTile, StepRows,
                    StepRowsTensor, StepTile, TENSOR_MAP_SHARED_BYTES, register_cap)


@dataclass(frozen=True)
class Param:
    name: str
    kind: str   # "ptr" | "i64" | "i32" | "map": how the runtime passes it (driver.param_layout)
    decl: str   # C declaration
    doc: str    # shape and meaning, shown next to the declaration


@dataclass(frozen=True)
class KernelSource:
    name: str                     # readable + hash of the code, e.g. "merge_sum2_f256_f32_1a2b3c4d5e"
    family: str                   # "input_projection" | "recurrent_step" | "merge" | ...
    owner: str                    # layer or output name (the first user)
    entry: str                    # the extern "C" function
    source: str
    params: tuple[Param, ...]
    block: tuple[int, int, int]
    dynamic_shared: int = 0       # bytes of dynamic shared memory per block
    cluster: int = 0              # blocks per thread-block cluster, compiled in (0: none)
    users: tuple[str, ...] = ()   # every layer that runs it (identical layers share kernels)
    # The model's comment block (model, layers, hints, reasons) that ``rnncc compile`` writes
    # above the source; not part of the code, its name or its cache key.
    header: str = field(default="", compare=False)

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


def tensor_map_params(source: str) -> list[Param]:
    """Parameters of a kernel that stages by tensor-map copies (lane_product.cuh.j2,
    tensor_map_staging): the template of its maps by value (its value in a launch's
    arguments: the box's rows; driver.tensor_map_template), and the call's slots where each
    block puts its map of ``source``."""
    return [Param("tensor_map_template", "map", "const __grid_constant__ TensorMap tensor_map_template",
                  "template of the map (box, type, swizzle); the block puts in the address, dims, strides"),
            Param("tensor_map_slots", "ptr", "TensorMap* __restrict__ tensor_map_slots",
                  f"[blocks] out: each block's map of {source} (workspace; nullptr: cp.async)")]


def _source_params(sources) -> list[Param]:
    out = []
    for i, s in enumerate(sources):
        what = f"source {i}"
        out += [_ptr(f"x{i}", "T", f"{what}: [S, B, {s.size}], features contiguous"),
                _i64(f"x{i}_stride_t", f"x{i}: elements between time steps"),
                _i64(f"x{i}_stride_b", f"x{i}: elements between batch entries")]
    return out


def projection_params(l: LayerPlan) -> tuple[Param, ...]:
    G, H = l.gates, l.hidden_size
    y = "[rows, G·H]" if l.layout.value == "xw" else "[G·H, rows]"
    params = _source_params(l.sources)
    params.append(_ptr("w_ih", "T", f"[{G}·{H}, {l.input_size}] W_ih, row u·G+g (gate g of unit u)"))
    if l.bias:
        params.append(_ptr("bias", "float", "[G·H] b_ih + b_hh folded (GRU: without b_hn), same rows"))
    params += [_ptr("xproj", "float", f"{y} out: projection of these steps", const=False),
               _i32("rows", "steps · batch in this launch (row r = step r / batch)"),
               _i32("batch", "B")]
    return tuple(params)


def step_params(l: LayerPlan, library_product: bool = False, lengths: bool = False,
                rows: bool = False, library_padding: tuple[int, int] | None = None) -> tuple[Param, ...]:
    """Parameters of the step kernel (with ``rows``, of its rows form, which reads W_hh
    rather than W_hhᵀ), or with ``library_product`` of the cell kernel that follows
    cuBLASLt's product (hw instead of W_hhᵀ; with ``library_padding`` (K, M), the product
    [B, M] and h written into a [B, K] copy as well, LayerPlan.library_padding); with
    ``lengths``, length_params."""
    G, H, K = l.gates, l.hidden_size, l.out_size
    if library_product:
        columns = f"{library_padding[1]} (padded)" if library_padding else f"{G}·{H}"
        product = _ptr("step_product", "float", f"[B, {columns}] h·W_hhᵀ from cuBLASLt, column u·G+g (nullptr: zeros)")
    elif rows:
        product = _ptr("w_hh", "T", f"[{G}·{H}, {K}] W_hh, row u·G+g (gate g of unit u), K contiguous and "
                                    "padded with zeros to whole 16-byte loads (StepRows.row_stride)")
    else:
        product = _ptr("w_hh_t", "T", f"[{K}, {G}·{H}] W_hhᵀ, column u·G+g (gate g of unit u)")
    params = [_ptr("h_prev", "T", f"[B, {K}] h of the previous step (nullptr: zeros); not aliased by h_out"),
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
    out = ("r = o ⊙ tanh c of this step, the h projection's input" if l.proj_size
           else "h of this step (the layer's output at t)")
    params += [_ptr("h_out", "T", f"[B, {H}] out: {out}", const=False),
               _i64("h_out_stride_b", "h_out: elements between batch entries"),
               _ptr("h_final", "T", f"[B, {H}] out: h_out's values again, dense (the call's h_n, "
                                    "given at its last step only), or nullptr", const=False),
               _i32("batch", "B")]
    if library_padding:
        params.append(_ptr("h_library", "T", f"[B, {library_padding[0]}] out: h again, the next step's cuBLASLt "
                                             "operand (its padding stays zero)", const=False))
    if l.cell == "lstm":
        params.append(_i32("first_step", "1: take the cell state from c0 instead of c"))
    return tuple(params + residual_params(l, per_step=True) + gates_params(l, per_step=True, lengths=lengths)
                 + (length_params() if lengths else []))


def h_projection_params(l: LayerPlan, lengths: bool = False) -> tuple[Param, ...]:
    """Parameters of a projected LSTM's h projection, h = r·W_hrᵀ, one launch per step;
    with ``lengths``, h of the step before (an ended row keeps it) and length_params."""
    H, P = l.hidden_size, l.proj_size
    params = [_ptr("r", "T", f"[B, {H}] o ⊙ tanh c of this step, rows contiguous"),
              _ptr("w_hr", "T", f"[{P}, {H}] W_hr as torch stores it, rows (K) contiguous")]
    if lengths:
        params += [_ptr("h_prev", "T", f"[B, {P}] h of the previous step (nullptr: zeros), kept by "
                                       "a row that has ended"),
                   _i64("h_prev_stride_b", "h_prev: elements between batch entries")]
    params += [_ptr("h_out", "T", f"[B, {P}] out: h of this step (the layer's output at t)", const=False),
               _i64("h_out_stride_b", "h_out: elements between batch entries"),
               _i32("batch", "B")]
    return tuple(params + (length_params() if lengths else []))


def folded_first_step_params() -> tuple[Param, ...]:
    """Parameters of a folded projected LSTM's first-step term, h0·W_hhᵀ added to the
    projection of each row's first step (templates/folded_first_step.cu.j2)."""
    return (_ptr("xproj", "float", "the chunk's projection: step j, (b, u·G+g) at j·stride_t + "
                 "b·stride_b + (u·G+g)·stride_n", const=False),
            _i64("xproj_stride_t", "xproj: elements between the chunk's steps (negative: reverse)"),
            _i64("xproj_stride_b", "xproj: elements between batch entries"),
            _i64("xproj_stride_n", "xproj: elements between gate columns"),
            _ptr("w_hh_t", "T", "[P, G·H] W_hhᵀ, column u·G+g (gate g of unit u)"),
            _ptr("h0", "T", "[B, P] the initial h"),
            _i64("h0_stride_b", "h0: elements between batch entries"),
            _i32("batch", "B"), _i32("seq_len", "S"), _i32("steps", "the chunk's steps"),
            _i32("length_time", "the time (in the whole sequence) of the chunk's step 0"),
            _i32("length_dir", "1, or -1 for a reverse layer: step j is time length_time + length_dir·j"),
            _ptr("lengths", "int", "[B] steps of each batch row (nullptr: all S)"),
            _i32("phase", "0: h0·W_hhᵀ into the projection; 1: h0 into y_last for rows of length 0"),
            _ptr("y_last", "T", "phase 1: [B, P] h at the layer's last step", const=False),
            _i64("y_last_stride_b", "y_last: elements between batch entries"))


def length_params() -> list[Param]:
    """The parameters of a recurrent kernel compiled for sequences of different lengths:
    row b keeps its state at the times t ≥ lengths[b] (cells.unit_update)."""
    return [_ptr("lengths", "int", "[B] steps of each batch row; from time lengths[b] on, the row keeps its h and c"),
            _i32("length_time", "the time (in the whole sequence) of this launch's step 0"),
            _i32("length_dir", "1, or -1 for a reverse layer: step j is time length_time + length_dir·j")]


def residual_params(l: LayerPlan, per_step: bool) -> list[Param]:
    """A residual layer's extra parameters: its input (the sources x0, x1, ... of its merge)
    and residual_out, where the epilogue writes h + input, the layer's output; step t of
    the launch at t·stride_t (per-step kernels: this step, t = 0)."""
    if not l.residual:
        return []
    H, where = l.hidden_size, "this step" if per_step else "step t at t·stride_t"
    params = []
    for i, s in enumerate(l.sources):
        what = "the layer's input" + (f" (source {i} of its {l.merge})" if len(l.sources) > 1 else "")
        params += [_ptr(f"x{i}", "T", f"[S, B, {s.size}] {what}, added to h; {where}"),
                   _i64(f"x{i}_stride_t", f"x{i}: elements between time steps"),
                   _i64(f"x{i}_stride_b", f"x{i}: elements between batch entries")]
    return params + [
        _ptr("residual_out", "T", f"[S, B, {H}] out: h + the layer's input (the layer's output); "
                                  f"{where}", const=False),
        _i64("residual_out_stride_t", "residual_out: elements between time steps"),
        _i64("residual_out_stride_b", "residual_out: elements between batch entries")]


def saves_gates(l: LayerPlan, lengths: bool = False) -> bool:
    """Whether layer l's recurrent kernels write its gates' pre-activations (a training
    forward's plan: passes/backward.py). Not in the variant for sequences of different
    lengths, which no training call runs."""
    return l.backward_gates is not None and l.backward_gates.value == "save" and not lengths


def gates_params(l: LayerPlan, per_step: bool, lengths: bool = False) -> list[Param]:
    """A training forward's extra parameters (``saves_gates``): where each step's epilogue
    writes the pre-activations the layer's backward reads, float32 [S, B, G·H] dense in
    the order the layer runs its steps, torch's gate order (column g·H + u); a GRU's h part
    (h·W_hhᵀ + b_hh) apart. Step t of the launch at t·B·G·H (per-step kernels: this step,
    t = 0). nullptr: not written."""
    if not saves_gates(l, lengths):
        return []
    G, H, where = l.gates, l.hidden_size, "this step" if per_step else "step t at t·B·G·H"
    if l.cell == "gru":
        return [_ptr("gates", "float", f"[S, B, {G}·{H}] out: x·W_ihᵀ + biases (b_hr, b_hz folded in "
                                       f"as the projection holds them); {where}; nullptr: none", const=False),
                _ptr("gates_h", "float", f"[S, B, {G}·{H}] out: h·W_hhᵀ (+ b_hn for n); {where}",
                     const=False)]
    return [_ptr("gates", "float", f"[S, B, {G}·{H}] out: x·W_ihᵀ + h·W_hhᵀ + biases; {where}; "
                                   "nullptr: none", const=False)]


def fused_projection_params(l: LayerPlan) -> list[Param]:
    """What the producers of a launch that computes its own projection read (plan.LayerPlan.
    projection_fused): the layer's input in its step order, W_ih and the bias as the
    projection kernels read them, and the chunks' flags."""
    G, H, I = l.gates, l.hidden_size, l.input_size
    params = [_ptr("proj_x", "T", f"[S, B, {I}] the layer's input at its step 0 of this launch (a reverse "
                                  "layer's: its last time step, proj_x_stride_t negative)"),
              _i64("proj_x_stride_t", "proj_x: elements between the layer's steps"),
              _i64("proj_x_stride_b", "proj_x: elements between batch entries"),
              _ptr("w_ih", "T", f"[{G}·{H}, {I}] W_ih, row u·G+g (gate g of unit u)")]
    if l.bias:
        params.append(_ptr("bias", "float", "[G·H] b_ih + b_hh folded (GRU: without b_hn), same rows"))
    return params + [_ptr("projection_flags", "unsigned", "[chunks] zeroed before the launch: each producer "
                                                          "adds 1 to a chunk's word once its columns are written",
                          const=False)]


def persistent_params(l: LayerPlan, barrier: bool, lengths: bool = False,
                      h_final: bool = True) -> tuple[Param, ...]:
    """Parameters of a persistent (grid or cluster) kernel; ``h_final``: whether it writes
    the call's h_n itself (runtime copies it from y after kernels that do not)."""
    G, H = l.gates, l.hidden_size
    weight = _ptr("w_hh_fragments", "T", "W_hh as the kernel holds it (mma fragments, or wgmma's swizzled "
                                         "operand), block by block (weights.fragment_index)") \
        if l.fragments_tile is not None else \
        _ptr("w_hh_t", "T", f"[{H}, {G}·{H}] W_hhᵀ, column u·G+g (gate g of unit u)")
    params = [_ptr("h0", "T", f"[B, {H}] initial h (nullptr: zeros); row stride h0_stride_b"),
              _i64("h0_stride_b", "h0: elements between batch entries"),
              weight,
              _ptr("xproj_all", "float", "projection of these steps: step t, (b, u·G+g) at "
                                         "t·stride_t + b·stride_b + (u·G+g)·stride_n"
                                         + ("; written by the launch's producers" if l.projection_fused else ""),
                   const=not l.projection_fused),
              _i64("xproj_stride_t", "xproj_all: elements between steps"),
              _i64("xproj_stride_b", "xproj_all: elements between batch entries"),
              _i64("xproj_stride_n", "xproj_all: elements between gate columns")]
    if l.projection_fused:
        params += fused_projection_params(l)
    if l.cell == "gru" and l.bias:
        params.append(_ptr("bias_hn", "float", f"[{H}] b_hn, applied inside r * (h W_hnᵀ + b_hn)"))
    if l.cell == "lstm":
        params += [_ptr("c0", "T", f"[B, {H}] initial cell state, read when first_chunk (nullptr: zeros)"),
                   _ptr("c", "float", f"[B, {H}] cell state in float32, updated in place", const=False),
                   _ptr("c_final", "T", f"[B, {H}] out: cell state after the last step, or nullptr",
                        const=False)]
    if h_final:
        params.append(_ptr("h_final", "T", f"[B, {H}] out: h after the launch's last step again, dense "
                                           "(the call's h_n, given to the launch that ends the call), or nullptr",
                           const=False))
    params += [_ptr("y", "T", f"[S, B, {H}] out: h of every step (the layer's output); step t "
                              "at t·y_stride_t", const=False),
               _i64("y_stride_t", "y: elements between steps"),
               _i64("y_stride_b", "y: elements between batch entries"),
               _i32("steps", "time steps in this launch"),
               _i32("batch", "B")]
    if l.cell == "lstm":
        params.append(_i32("first_chunk", "1: the first step takes its cell state from c0"))
    if l.persistence.value.tensor_maps:
        params += tensor_map_params("y (h of the steps before)")
    if barrier:
        params.append(_ptr("barrier", "unsigned", "[4] grid barrier: arrivals (top bit flips), gave up "
                                                   "(zeroed once per call, on its stream)",
                           const=False))
    params += [_ptr("status", "unsigned", "[1] host-mapped: set when a spin-wait passed its bound "
                                          "(1 grid barrier, 2 cluster exchange)", const=False),
               _i64("spin_timeout_ns", "bound of every spin-wait in ns (0: give up at once, "
                                       "a debug knob); unused where the kernel has no spin-wait")]
    return tuple(params + residual_params(l, per_step=False) + gates_params(l, per_step=False, lengths=lengths)
                 + (length_params() if lengths else []))


def merge_params(sources, size: int) -> tuple[Param, ...]:
    return tuple(_source_params(sources) + [
        _ptr("out", "T", f"[S, B, {size}] out: the merged tensor", const=False),
        _i64("out_stride_t", "out: elements between time steps"),
        _i64("out_stride_b", "out: elements between batch entries"),
        _i32("seq_len", "S (steps in this launch)"), _i32("batch", "B")])


def mask_params() -> tuple[Param, ...]:
    return (_ptr("out", "T", "[S, B, F] an output, zeroed at t ≥ lengths[b]", const=False),
            _i64("out_stride_t", "out: elements between time steps"),
            _i64("out_stride_b", "out: elements between batch entries"),
            _i32("seq_len", "S"), _i32("batch", "B"), _i32("features", "F"),
            _ptr("lengths", "int", "[B] steps of each batch row"))


MERGE_THREADS = 256
CELL_THREADS = 128  # the cell kernel after a cuBLASLt product: one thread per (row, unit)


def _code_header(what: str, dtype: str, decisions: list[str]) -> dict:
    """The header inside the kernel's source: what the code is and the decision values it
    is specialised to. Nothing about the model (its name, layers, the shape hints, the
    reasons): those would make equal code compile twice (see :func:`_identify`)."""
    return dict(version=__version__, what=what, dtype=dtype, decisions=decisions)


def _model_header(plan: Plan, what: str, decisions: list[str]) -> str:
    """The comment block written above a kernel's source by ``rnncc compile``: which model
    and layers run it, the target and shape hints, and each decision with its reason."""
    lines = [f"model {plan.model}: {what}",
             f"target {plan.target} ({plan.arch}); planned for S={plan.options.seq_len}, "
             f"B={plan.options.batch}", *decisions]
    return "".join(f"// {line}\n" for line in lines) + "\n"


# The decisions each kernel of a layer depends on (its code header lists their values and
# its model header their reasons). The cell kernel after a cuBLASLt product has no tile, and
# a persistent kernel's tile is its persistence's (the step tile is a launch per step's).
PROJECTION_DECISIONS = ("precision", "layout", "gate_concat", "projection_tile", "merge_fusion")
RECURRENT_DECISIONS = ("precision", "gate_concat", "persistence", "step_tile")
PERSISTENT_DECISIONS = CELL_DECISIONS = ("precision", "gate_concat", "persistence")


def _values(l: LayerPlan, keys: tuple[str, ...]) -> list[str]:
    return [f"{key}: {_show(getattr(l, key).value)}" for key in keys]


def _reasons(l: LayerPlan, keys: tuple[str, ...]) -> list[str]:
    return [f"{key}: {_show(getattr(l, key).value)} -- {getattr(l, key).reason}" for key in keys]


_ENTRY = "__RNNCC_ENTRY__"  # stands for the entry name until the code is hashed
_SHORT_DTYPE = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}


def _identify(readable: str, source: str) -> tuple[str, str, str]:
    """(name, entry, source) of a kernel whose code was rendered with the entry ``_ENTRY``:
    the name is ``readable`` plus a hash of that code, so it changes exactly when the code
    does, and equal code (the same layer in two models, or two hints that pick the same
    tiles) gets one name, one cubin in the cache, one nvcc run."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:10]
    name = f"{readable}_{digest}"
    return name, f"rnncc_{name}", source.replace(_ENTRY, f"rnncc_{name}")


def _layers_what(l: LayerPlan, users: tuple[str, ...]) -> str:
    layers = f"layers {', '.join(users)}" if len(users) > 1 else f"layer {l.name}"
    sources = f"{l.merge} of {', '.join(s.name for s in l.sources)}" if len(l.sources) > 1 \
        else l.sources[0].name
    return f"{layers} ({l.cell}, H={l.hidden_size}, input {l.input_size} = {sources})"


def _code_what(l: LayerPlan, projection: bool = False) -> str:
    """What the code is, in words: the recurrent kernels do not depend on the input size."""
    if projection:
        return f"{l.cell} layer, H={l.hidden_size}, input {l.input_size}"
    return f"{l.cell} layer, H={l.hidden_size}" + (", residual (writes h + input too)" if l.residual else "") \
        + (f", proj_size {l.proj_size} (writes r = o ⊙ tanh c)" if l.proj_size else "")


def _common(plan: Plan, l: LayerPlan) -> dict:
    return dict(dtype=plan.dtype, gates=l.gates, bias=l.bias, proj_size=l.proj_size,
                sources=[dict(size=s.size, offset=s.offset) for s in l.sources], merge=l.merge,
                exchange_polled=False)


def _lengths_step(lengths: bool, per_step: bool) -> str | None:
    """For cells.unit_update in kernels compiled for lengths: the launch's step index
    ("0" in per-step kernels, launched at their step; "t" in persistent ones); None
    without lengths."""
    if not lengths:
        return None
    return "0" if per_step else "t"


def _residual_step(l: LayerPlan, per_step: bool) -> str | None:
    """For cells.unit_update, which writes a residual layer's h + input: the step its
    pointers are offset by ("0" in per-step kernels, which get them at their step); None
    where the layer is not residual. The input's sources and merge are _common's."""
    if not l.residual:
        return None
    return "0" if per_step else "t"


def _gates_step(l: LayerPlan, per_step: bool, lengths: bool) -> str | None:
    """For cells.unit_update, which writes a training forward's pre-activations: the step
    the ``gates`` pointers are offset by ("0" per step, "t" in persistent kernels); None
    where the kernel writes none (``saves_gates``)."""
    if not saves_gates(l, lengths):
        return None
    return "0" if per_step else "t"


def _h_final_when(per_step: bool) -> str:
    """For cells.unit_update, which stores h into ``h_final`` (the call's h_n) as well: when.
    A step kernel is given h_final at the call's last step only; a persistent kernel at
    the launch that ends the call, whose last step stores it."""
    return "h_final != nullptr" if per_step else "t == steps - 1 && h_final != nullptr"


def render_projection(plan: Plan, l: LayerPlan, users: tuple[str, ...] = ()) -> KernelSource | None:
    """Layer l's input-projection kernel, run by ``users`` (default: l alone); None where
    cuBLASLt runs it."""
    users = users or (l.name,)
    tile = l.projection_tile.value
    if tile.math in ("cublas", "fused"):  # the library's, or the recurrent launch's producers
        return None
    params = projection_params(l)
    template = {"tensor": "input_projection_tensor.cu.j2", "rows": "input_projection_rows.cu.j2",
                "rows_tensor": "input_projection_rows_tensor.cu.j2"}.get(tile.math, "input_projection.cu.j2")
    source = environment().get_template(template).render(
        kernel=_code_header(_code_what(l, projection=True) + ", input projection", plan.dtype,
                            _values(l, PROJECTION_DECISIONS)),
        entry=_ENTRY, params=params, K=l.input_size, GH=l.gates * l.hidden_size,
        tile=tile, layout=l.layout.value, layout_text=LAYOUTS[l.layout.value],
        operand_a="activations" if l.layout.value == "xw" else "weights",
        operand_b="weights" if l.layout.value == "xw" else "activations",
        **_common(plan, l))
    merged = f"{l.merge}{len(l.sources)}_" if len(l.sources) > 1 else ""
    name, entry, source = _identify(f"input_projection_{merged}i{l.input_size}_gh{l.gates * l.hidden_size}_"
                                    f"{_SHORT_DTYPE[plan.dtype]}", source)
    return KernelSource(name, "input_projection", l.name, entry, source, params,
                        (tile.threads, 1, 1), users=users,
                        header=_model_header(plan, _layers_what(l, users) + ", input projection",
                                             _reasons(l, PROJECTION_DECISIONS)))


def _fma_block(tile: StepTile | PersistentTile | ClusterTile) -> tuple[int, int, int]:
    """Block of an FMA tile (step, grid, cluster): threads along units, rows, K split."""
    return (tile.units_per_block // tile.units_per_thread,
            tile.batch_per_block // tile.batch_per_thread, tile.k_split)


def render_recurrent(plan: Plan, l: LayerPlan, users: tuple[str, ...] = (),
                     lengths: bool = False) -> KernelSource:
    """Layer l's recurrent kernel (step, cell, grid- or cluster-persistent), run by
    ``users`` (default: l alone); with ``lengths``, the variant for sequences of different
    lengths (length_params)."""
    users = users or (l.name,)
    l = l.recurrence  # a folded LSTMP's recurrence is a plain LSTM's (plan.LayerPlan.recurrence)
    env = environment()
    common = _common(plan, l)
    mode = l.persistence.value.mode
    readable = f"{l.cell}_h{l.hidden_size}{f'_p{l.proj_size}' if l.proj_size else ''}" \
               f"{'_residual' if l.residual else ''}" \
               f"{'_lengths' if lengths else ''}{'_gates' if saves_gates(l, lengths) else ''}" \
               f"_{_SHORT_DTYPE[plan.dtype]}"
    what_lengths = (", sequences of different lengths" if lengths else "") \
        + (", writes its gates' pre-activations (a training forward)" if saves_gates(l, lengths) else "")
    name_form = ""
    if mode in ("grid", "cluster"):
        # The same family (launch and arguments) on FMA or on tensor cores.
        persistent = l.persistence.value
        family = {"grid": "recurrent_persistent", "cluster": "recurrent_cluster"}[mode]
        tensor, lanes, registers = persistent.math == "tensor", persistent.lanes, persistent.registers
        staged = persistent.staged or registers  # the registers form is a form of the staged template
        if tensor:
            form = "_tensor_registers" if persistent.tile.weights_in_registers else "_tensor"
        else:
            form = "_lanes" if lanes else "_staged" if staged else ""
        template = f"{family}{form}.cu.j2"
        # A grid kernel's name says its FMA form (staged, registers); the template says the rest.
        name_form = ("_staged" if persistent.staged else "_registers" if registers else "") \
            if mode == "grid" else ""
        what = f", recurrent steps, persistent ({mode}{', tensor cores' if tensor else ''}" \
               f"{', h staged by chunks' if persistent.staged else ''}{', W_hh in registers' if registers else ''})"
        keys = PERSISTENT_DECISIONS
        fused = l.projection_tile.value if l.projection_fused else None
        if fused is not None:  # its producers' blocks are the launch's too
            keys = keys + ("projection_tile",)
            name_form = "_fused"
            what += ", its input projection computed in the launch by producer blocks"
        # The call's h_n is stored by the kernel itself (cells.unit_update), except where
        # registers leave no room and it is copied after the launch: the staged FMA form
        # (its registers form spilled 12-44 bytes at GRU H=1024, 16 units, 4 rows, 2 phases,
        # with the store in the cell or after the step loop) and tensor-core blocks of 512
        # threads (128 registers a thread: the grid kernel of LSTM fp32 TF32 H=1024 B=64,
        # several batch tiles in registers, spilled 20-36 bytes instead of 12).
        writes_h_n = form != "_staged" and not (tensor and register_cap(persistent.threads) <= 128)
        params = persistent_params(l, barrier=mode == "grid", lengths=lengths, h_final=writes_h_n)
        # The grid kernel on tensor cores waits for h by polling y (common.polled_exchange).
        common["exchange_polled"] = mode == "grid" and tensor and persistent.tile.polled_exchange
        source = env.get_template(template).render(
            kernel=_code_header(_code_what(l) + what + what_lengths, plan.dtype, _values(l, keys)),
            entry=_ENTRY, params=params, H=l.hidden_size, cell=l.cell, tile=persistent.tile,
            shared_bytes=persistent.shared_bytes, residual_step=_residual_step(l, per_step=False),
            lengths_step=_lengths_step(lengths, per_step=False),
            gates_step=_gates_step(l, False, lengths),
            h_final_when=_h_final_when(per_step=False) if writes_h_n else None,
            registers=registers, fused=fused, tensor_map_bytes=TENSOR_MAP_SHARED_BYTES,
            hybrid=tensor and persistent.tile.weights_in_registers and persistent.tile.register_steps > 0,
            input_size=l.input_size,
            fused_shared=fused.shared_bytes(l.input_size, DTYPES[plan.dtype].itemsize) if fused else 0,
            **common)
        # The lanes and staged forms lay their threads out themselves (warps along K).
        block = (persistent.threads, 1, 1) if tensor or lanes or staged else _fma_block(persistent.tile)
        shared = persistent.shared_bytes
        if fused is not None:
            shared = max(shared, fused.shared_bytes(l.input_size, DTYPES[plan.dtype].itemsize))
    elif l.persistence.value.math == "cublas":
        family, what, keys = "recurrent_step", ", cell of a recurrent step (product in cuBLASLt)", \
            CELL_DECISIONS
        padding = l.library_padding(DTYPES[plan.dtype].itemsize)
        params = step_params(l, library_product=True, lengths=lengths, library_padding=padding)
        source = env.get_template("recurrent_step_cell.cu.j2").render(
            kernel=_code_header(_code_what(l) + what + what_lengths, plan.dtype, _values(l, keys)),
            entry=_ENTRY, params=params, H=l.hidden_size, cell=l.cell, threads=CELL_THREADS,
            product_columns=l.library_product_columns(DTYPES[plan.dtype].itemsize),
            library_h_columns=padding[0] if padding else 0,
            residual_step=_residual_step(l, per_step=True),
            lengths_step=_lengths_step(lengths, per_step=True),
            gates_step=_gates_step(l, True, lengths), h_final_when=_h_final_when(per_step=True), **common)
        block, shared, readable = (CELL_THREADS, 1, 1), 0, "cell_" + readable
    elif l.steps_by_rows:
        tile = l.step_tile.value
        tensor = isinstance(tile, StepRowsTensor)
        family, what, keys = "recurrent_step", f", recurrent step (rows{', tensor cores' if tensor else ''})", \
            RECURRENT_DECISIONS
        params = step_params(l, lengths=lengths, rows=True)
        source = env.get_template("recurrent_step_rows_tensor.cu.j2" if tensor else "recurrent_step_rows.cu.j2").render(
            kernel=_code_header(_code_what(l) + what + what_lengths, plan.dtype, _values(l, keys)),
            entry=_ENTRY, params=params, H=l.hidden_size, K=l.out_size, cell=l.cell, tile=tile,
            row_stride=StepRows.row_stride(l.out_size, DTYPES[plan.dtype].itemsize),
            residual_step=_residual_step(l, per_step=True),
            lengths_step=_lengths_step(lengths, per_step=True),
            gates_step=_gates_step(l, True, lengths), h_final_when=_h_final_when(per_step=True), **common)
        block, shared, readable = (tile.threads, 1, 1), 0, ("rows_tensor_" if tensor else "rows_") + readable
    else:
        family, what, keys = "recurrent_step", ", recurrent step", RECURRENT_DECISIONS
        params = step_params(l, lengths=lengths)
        tile = l.step_tile.value
        source = env.get_template("recurrent_step.cu.j2").render(
            kernel=_code_header(_code_what(l) + what + what_lengths, plan.dtype, _values(l, keys)),
            entry=_ENTRY, params=params, H=l.hidden_size, K=l.out_size, cell=l.cell, tile=tile,
            async_copy=tile.async_copy, residual_step=_residual_step(l, per_step=True),
            lengths_step=_lengths_step(lengths, per_step=True),
            gates_step=_gates_step(l, True, lengths), h_final_when=_h_final_when(per_step=True), **common)
        block, shared = _fma_block(tile), 0
    name, entry, source = _identify(f"{family}{name_form}_{readable}", source)
    cluster = l.persistence.value.tile.cluster if mode == "cluster" else 0
    return KernelSource(name, family, l.name, entry, source, params, block, shared, cluster, users,
                        header=_model_header(plan, _layers_what(l, users) + what + what_lengths,
                                             _reasons(l, keys)))


def render_h_projection(plan: Plan, l: LayerPlan, users: tuple[str, ...] = (),
                        lengths: bool = False) -> KernelSource | None:
    """A projected LSTM's h projection, h = r·W_hrᵀ after each step (None for other
    layers); with ``lengths``, the variant that keeps an ended row's h. None where the
    layer is folded (its h of a chunk is a cuBLASLt GEMM)."""
    if not l.proj_size or l.folded:
        return None
    users = users or (l.name,)
    params = h_projection_params(l, lengths)
    what = f"{l.cell} layer, H={l.hidden_size}, proj_size {l.proj_size}, h = r·W_hrᵀ of a step" \
        + (", sequences of different lengths" if lengths else "")
    source = environment().get_template("recurrent_h_projection.cu.j2").render(
        kernel=_code_header(what, plan.dtype, ["kernel: h projection"]), entry=_ENTRY, params=params,
        H=l.hidden_size, P=l.proj_size, dtype=plan.dtype, block=H_PROJECTION_BLOCK,
        lengths_step=_lengths_step(lengths, per_step=True))
    name, entry, source = _identify(f"h_projection_h{l.hidden_size}_p{l.proj_size}"
                                    f"{'_lengths' if lengths else ''}_{_SHORT_DTYPE[plan.dtype]}", source)
    return KernelSource(name, "h_projection", l.name, entry, source, params,
                        (H_PROJECTION_BLOCK.threads, 1, 1), users=users,
                        header=_model_header(plan, f"{_layers_what(l, users)}, its h projection",
                                             _reasons(l, ("persistence",))))


FOLDED_FIRST_STEP_THREADS = 256


def render_folded_first_step(plan: Plan, l: LayerPlan, users: tuple[str, ...] = ()) -> KernelSource | None:
    """A folded projected LSTM's first-step term, h0·W_hhᵀ added to the projection at each
    row's first step, and (phase 1) h0 as the last h of rows of length 0; run where the
    call gives h0. None for other layers."""
    if not l.folded:
        return None
    users = users or (l.name,)
    params = folded_first_step_params()
    GH = l.gates * l.hidden_size
    source = environment().get_template("folded_first_step.cu.j2").render(
        kernel=_code_header(f"{l.cell} layer, H={l.hidden_size}, proj_size {l.proj_size}, folded: "
                            "h0·W_hhᵀ into the first step's projection", plan.dtype,
                            ["kernel: folded first step"]),
        entry=_ENTRY, params=params, P=l.proj_size, GH=GH, dtype=plan.dtype,
        threads=FOLDED_FIRST_STEP_THREADS)
    name, entry, source = _identify(f"folded_first_step_g{GH}_p{l.proj_size}_{_SHORT_DTYPE[plan.dtype]}",
                                    source)
    return KernelSource(name, "folded_first_step", l.name, entry, source, params,
                        (FOLDED_FIRST_STEP_THREADS, 1, 1), users=users,
                        header=_model_header(plan, f"{_layers_what(l, users)}, its first step's h0·W_hhᵀ",
                                             _reasons(l, ("h_projection",))))


def _render_merge(plan: Plan, mode: str, sources, size: int, padded: int = 0) -> tuple[str, str, str, tuple]:
    """(name, entry, source, params) of the element-wise merge kernel; ``padded``: the
    features it writes a row, zeros past ``size`` (0: ``size``)."""
    padded = padded or size
    params = merge_params(sources, padded)
    source = environment().get_template("merge.cu.j2").render(
        kernel=_code_header(f"{mode} of {len(sources)} sources", plan.dtype, [f"kernel: merge_{mode}"]),
        entry=_ENTRY, params=params, merge=mode, F=size, padded_F=padded, dtype=plan.dtype,
        threads=MERGE_THREADS, sources=[dict(size=s.size, offset=s.offset) for s in sources])
    readable = f"merge_{mode}{len(sources)}_f{size}{f'_p{padded}' if padded != size else ''}"
    return (*_identify(f"{readable}_{_SHORT_DTYPE[plan.dtype]}", source), params)


def render_output(plan: Plan, o: OutputPlan) -> KernelSource:
    name, entry, source, params = _render_merge(plan, o.merge, o.sources, o.size)
    header = _model_header(plan, f"output {o.name} ({o.merge} of "
                                 f"{', '.join(s.name for s in o.sources)})",
                           [f"kernel: {o.kernel.value} -- {o.kernel.reason}"])
    return KernelSource(name, "merge", o.name, entry, source, params, (MERGE_THREADS, 1, 1),
                        users=(o.name,), header=header)


def render_library_input(plan: Plan, l: LayerPlan, users: tuple[str, ...] = ()) -> KernelSource | None:
    """The merge kernel that writes the input of layer l's cuBLASLt projection where it is
    not a source as stored: its sources' sum (merge fusion "summed"), or its source copied
    with zeros past K (LibraryProjection.padded_k; a sum is written so padded); None
    where the layer has neither."""
    padded = l.projection_padded_k
    if l.merge_fusion.value != "summed" and not padded:
        return None
    users = users or (l.name,)
    name, entry, source, params = _render_merge(plan, l.merge if len(l.sources) > 1 else "sum", l.sources,
                                                l.input_size, padded)
    what = "summed input" if l.merge_fusion.value == "summed" else "input"
    header = _model_header(plan, f"{_layers_what(l, users)}, its {what}"
                                 f"{f' padded to K={padded} for cuBLASLt' if padded else ''}",
                           _reasons(l, ("merge_fusion", "projection_tile") if padded else ("merge_fusion",)))
    return KernelSource(name, "merge", l.name, entry, source, params, (MERGE_THREADS, 1, 1),
                        users=users, header=header)


def render_mask(plan: Plan) -> KernelSource:
    """The kernel that zeroes the outputs past each row's length (calls with lengths)."""
    params = mask_params()
    source = environment().get_template("mask.cu.j2").render(
        kernel=_code_header("outputs zeroed past each sequence's length", plan.dtype, ["kernel: mask"]),
        entry=_ENTRY, params=params, dtype=plan.dtype, threads=MERGE_THREADS)
    name, entry, source = _identify(f"mask_{_SHORT_DTYPE[plan.dtype]}", source)
    outputs = tuple(o.name for o in plan.outputs)
    return KernelSource(name, "mask", outputs[0], entry, source, params, (MERGE_THREADS, 1, 1),
                        users=outputs, header=_model_header(
                            plan, f"outputs {', '.join(outputs)} past each sequence's length",
                            ["kernel: mask -- a call with lengths pads its outputs with zeros"]))


def render(plan: Plan, lengths: bool = False) -> tuple[KernelSource, ...]:
    """Every kernel of the model, in the order of first use; with ``lengths``, those that
    a call with sequences of different lengths runs (recurrent kernels that keep an ended
    row's state, and the mask of the outputs). Kernels are named by their code, so layers
    whose code is equal (a stack of equal layers) share one, whose ``users`` (and model
    header) lists them all."""
    renderers = (render_library_input, render_projection, render_folded_first_step,
                 partial(render_recurrent, lengths=lengths), partial(render_h_projection, lengths=lengths))
    first: dict[str, tuple[LayerPlan, KernelSource, object]] = {}
    users: dict[str, list[str]] = {}
    for l in plan.layers:
        for renderer in renderers:
            k = renderer(plan, l)
            if k is not None:
                first.setdefault(k.name, (l, k, renderer))
                users.setdefault(k.name, []).append(l.name)
    kernels = []
    for name, (l, k, renderer) in first.items():
        if len(users[name]) > 1:  # the model header names every user
            k = renderer(plan, l, tuple(users[name]))
        kernels.append(k)
    # An output's merge kernel may have the code of a layer's summed input: one kernel,
    # both users.
    for o in plan.outputs:
        if o.kernel is None:
            continue
        k = render_output(plan, o)
        same = next((i for i, q in enumerate(kernels) if q.name == k.name), None)
        if same is None:
            kernels.append(k)
        else:
            kernels[same] = replace(kernels[same], users=kernels[same].users + (o.name,),
                                    header=kernels[same].header.rstrip("\n") + "\n" + k.header)
    if lengths:
        kernels.append(render_mask(plan))
    return tuple(kernels)



# ---- the backward ------------------------------------------------------------------------

def _aliased_ptr(name: str, ctype: str, doc: str, const: bool = True) -> Param:
    """A pointer that may point into another parameter's array (no __restrict__)."""
    return Param(name, "ptr", f"{'const ' if const else ''}{ctype}* {name}", doc)


def backward_params(cell: str) -> tuple[Param, ...]:
    """Parameters of a layer's backward recurrence ([S, B, ·] time-major, contiguous, in the
    order the layer ran its steps). T is the layer's storage type; the pre-activations,
    states and state gradients are float32."""
    gru, lstm = cell == "gru", cell == "lstm"
    params = [_aliased_ptr("pre", "float", "[S, B, G·H] the gates' pre-activations, torch's gate order "
                           + ("(x·W_ihᵀ + b_ih)" if gru else "(x·W_ihᵀ + h·W_hhᵀ + both biases)")),
              _aliased_ptr("dg", "T", "[S, B, G·H] out: their gradients dG (float32: may be pre)",
                           const=False)]
    if gru:
        params += [_aliased_ptr("pre_h", "float", "[S, B, 3·H] h·W_hhᵀ + b_hh"),
                   _aliased_ptr("dg_h", "T", "[S, B, 3·H] out: the gradients through W_hh (n's "
                                "times r; float32: may be pre_h)", const=False),
                   _ptr("h_prev", "T", "[S, B, H] h of the step before each step")]
    if lstm:
        params += [_ptr("c_seq", "float", "[S, B, H] out: c of each step", const=False),
                   _ptr("c0", "float", "[B, H] the initial c (nullptr: zeros)")]
    params += [_ptr("w_hh", "T", "[G·H, H] W_hh"),
               _ptr("dy", "float", "[S, B, H] the loss's gradient with respect to each step's h"),
               _ptr("dh_n", "float", "[B, H] ... to the final h (nullptr: zeros)")]
    if lstm:
        params.append(_ptr("dc_n", "float", "[B, H] ... to the final c (nullptr: zeros)"))
    params.append(_ptr("dh0", "float", "[B, H] out: the gradient of the initial h", const=False))
    if lstm:
        params.append(_ptr("dc0", "float", "[B, H] out: the gradient of the initial c", const=False))
    params += [_i32("seq_len", "S"), _i32("batch", "B"),
               _ptr("barrier", "unsigned", "grid barrier words, zeroed before the launch", const=False),
               _ptr("status", "unsigned", "host word: set when a spin-wait passed its bound", const=False),
               _i64("spin_timeout_ns", "bound of every spin-wait (ns)")]
    return tuple(params)


def render_backward(cell: str, hidden: int, gates: int, dtype: str,
                    tile: BackwardKernelTile) -> KernelSource:
    """The backward recurrence of a layer of ``cell`` and ``hidden`` units stored in
    ``dtype``, tiled by ``tile``: the grid kernel for a BackwardTile, the cluster kernel
    for a ClusterBackwardTile (mma) or an FmaClusterBackwardTile (float32, FMA), the grid
    kernel with K split across clusters for a KSplitBackwardTile (float32). The code
    depends on the batch only through the tile (rows a pass; rows a cluster)."""
    params = backward_params(cell)
    if isinstance(tile, CLUSTER_BACKWARD_TILES):
        return _render_backward_cluster(cell, hidden, gates, dtype, tile, params)
    if isinstance(tile, KSplitBackwardTile):
        return _render_backward_ksplit(cell, hidden, gates, dtype, tile, params)
    where = "shared memory" if tile.w_in_shared else "L2"
    decisions = [f"backward tile: {tile.units} units a block, {tile.blocks} blocks, {tile.rows} batch rows "
                 f"a pass, W_hh columns in {where}"]
    source = environment().get_template("backward_recurrent.cu.j2").render(
        kernel=_code_header(f"{cell} layer backward, H={hidden}", dtype, decisions),
        entry=_ENTRY, params=params, cell=cell, hidden=hidden, gates=gates, dtype=dtype, tile=tile)
    name, entry, source = _identify(
        f"backward_{cell}_h{hidden}_{_SHORT_DTYPE[dtype]}_u{tile.units}_r{tile.rows}"
        f"{'' if tile.w_in_shared else '_wl2'}{'' if tile.threads == 256 else f'_t{tile.threads}'}"
        f"{'' if tile.k_unroll == 4 else f'_k{tile.k_unroll}'}", source)
    return KernelSource(name, "backward", cell, entry, source, params, (tile.threads, 1, 1))


def _render_backward_ksplit(cell: str, hidden: int, gates: int, dtype: str, tile: KSplitBackwardTile,
                            params: tuple[Param, ...]) -> KernelSource:
    if dtype != "float32":
        raise ValueError(f"codegen: the K-split backward is for float32 layers, not {dtype}")
    decisions = [f"backward tile: K split across clusters of {tile.cluster} blocks "
                 f"({tile.k_rows_block(gates, hidden)} rows of K a block), {tile.units} units a block, "
                 f"{tile.cluster_units} a cluster, {tile.clusters(hidden)} clusters; lanes of "
                 f"{tile.lane_rows} rows × {tile.lane_units} units, {tile.rows_per_pass} rows a pass, "
                 f"dG staged {tile.k_chunk} K rows at a time into {tile.stages} buffers"
                 f" by tensor-map copies, {tile.threads // 32} warps along K"]
    params = params + tuple(tensor_map_params("dG (or a GRU's dG_h) of the call"))
    source = environment().get_template("backward_ksplit.cu.j2").render(
        kernel=_code_header(f"{cell} layer backward, H={hidden}", dtype, decisions),
        entry=_ENTRY, params=params, cell=cell, hidden=hidden, gates=gates, dtype=dtype, tile=tile)
    name, entry, source = _identify(
        f"backward_ksplit_{cell}_h{hidden}_{_SHORT_DTYPE[dtype]}_c{tile.cluster}_u{tile.units}"
        f"_r{tile.lane_rows}_k{tile.k_chunk}_s{tile.stages}{'' if tile.threads == 256 else f'_t{tile.threads}'}",
        source)
    return KernelSource(name, "backward", cell, entry, source, params, (tile.threads, 1, 1), cluster=tile.cluster)


def _render_backward_cluster(cell: str, hidden: int, gates: int, dtype: str,
                             tile: ClusterBackwardTile | FmaClusterBackwardTile,
                             params: tuple[Param, ...]) -> KernelSource:
    itemsize = DTYPES[dtype].itemsize
    fma = isinstance(tile, FmaClusterBackwardTile)
    if fma:
        if dtype != "float32":
            raise ValueError(f"codegen: the FMA cluster backward is for float32 layers, not {dtype}")
        product = (f"{tile.units} units a block, {tile.k_split} warps along K ({tile.share(gates)} W_hh values "
                   f"in each lane's registers), lanes of {tile.lane_units} units × {tile.lane_rows} rows, FMA")
        variant = f"fma_c{tile.cluster}_u{tile.units}_k{tile.k_split}_r{tile.lane_rows}"
    elif tile.register_steps:
        product = (f"{tile.units} units a block, {tile.k_split} warps along K ({tile.register_steps} of each warp's "
                   f"{tile.split_steps(gates)} k-steps of W_hh in its registers, the rest in shared memory), mma")
        variant = f"c{tile.cluster}_m{tile.m_tiles}_k{tile.k_split}_n{tile.batch_per_cluster}_rs{tile.register_steps}"
    else:
        product = (f"{tile.units} units a block, {tile.k_split} warps along K ({tile.split_steps(gates)} "
                   f"k-steps of W_hh in each warp's registers), mma")
        variant = f"c{tile.cluster}_m{tile.m_tiles}_k{tile.k_split}_n{tile.batch_per_cluster}"
    decisions = [f"backward tile: clusters of {tile.cluster} blocks, {product}, "
                 f"{tile.batch_per_cluster} batch rows a cluster"]
    # Each step's dG slice reaches the peers by one multicast copy from a global copy of it,
    # but for the hybrid form, whose registers are budgeted to the limit without that copy
    # (tiles.hybrid_register_steps): one bulk copy a peer there.
    hybrid = not fma and tile.register_steps > 0
    multicast = not hybrid
    if multicast:
        params = params + (_ptr("exchange", "T", "[clusters][2][CLUSTER][BATCH·G·UNITS] out: each block's dG slice of "
                                "a step (scratch, step parity): the source of its multicast to the peers", const=False),)
    decisions.append("dG slices sent " + ("by one multicast copy a step from a global copy of each" if multicast
                                          else "by one bulk copy a peer"))
    source = environment().get_template("backward_cluster.cu.j2").render(
        kernel=_code_header(f"{cell} layer backward, H={hidden}", dtype, decisions),
        entry=_ENTRY, params=params, cell=cell, hidden=hidden, gates=gates, dtype=dtype, tile=tile,
        fma=fma, hybrid=hybrid, multicast=multicast,
        shared_bytes=tile.shared_bytes(gates, itemsize))
    name, entry, source = _identify(f"backward_cluster_{cell}_h{hidden}_{_SHORT_DTYPE[dtype]}_{variant}", source)
    return KernelSource(name, "backward", cell, entry, source, params, (tile.threads, 1, 1),
                        dynamic_shared=tile.shared_bytes(gates, itemsize), cluster=tile.cluster)


assert set(DTYPES) == {"float32", "float16", "bfloat16"}  # storage() in common.cuh.j2 knows these
