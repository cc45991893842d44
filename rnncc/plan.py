"""The Plan: every decision the passes made, with its reason, as plain frozen values.

Codegen reads only the Plan (never the Model or the Target), and ``plan.json`` is its
serialised form. A Decision records where it came from: ``model`` (a rule or the cost
model), ``user`` (forced by a compile option), ``forced`` (the only way the kernels have,
the others costed in the reason) or ``measured`` (autotuning).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any

from . import __version__
from .tiles import library_padded_sizes

LAYOUTS = {
    "xw": "Y = X·Wᵀ",   # rows = time·batch, columns = gates; A = activations, B = weights
    "wx": "Yᵀ = W·Xᵀ",  # rows = gates, columns = time·batch; A = weights, B = activations
}


@dataclass(frozen=True)
class Decision:
    value: Any
    reason: str
    source: str = "model"  # "model" | "user" | "forced" | "measured"
    # Predicted seconds of each alternative considered (the chosen one included), where
    # the decision was made by time; None for rules.
    alternatives: dict[str, float] | None = None
    # Measured seconds of each autotuning candidate (layout/persistence/gemm), if tuned.
    measured: dict[str, float] | None = None


@dataclass(frozen=True)
class Measurement:
    """What autotuning measured for one layer: the fastest candidate and every candidate's
    time (a forward of the layer alone, seconds), and where the numbers came from."""

    layer: str
    layout: str            # the fastest candidate's choices
    persistence: str
    gemm: str
    times: tuple[tuple[str, float], ...]  # (candidate label, seconds), fastest first
    origin: str            # "measured now" or "disk cache <file>"

    @staticmethod
    def label(layout: str, persistence: str, gemm: str) -> str:
        return f"{layout}/{persistence}/{gemm}"


# The values each forcing option takes, with what each means (the CLI's choices and help
# come from here too).
OPTION_CHOICES: dict[str, dict[str, str]] = {
    "layout": {"xw": "Y = X·Wᵀ", "wx": "Yᵀ = W·Xᵀ"},
    "persistence": {"none": "a launch per step", "grid": "one launch, a grid barrier a step",
                    "cluster": "one launch, thread-block clusters"},
    "precision": {"exact": "fp32 FMA", "tensor": "tensor cores; TF32 for float32"},
    "gemm": {"rnncc": "rnncc's kernels only",
             "cublas": "cuBLASLt wherever it can run a GEMM"},
    "schedule": {"sequential": "layers one after another",
                 "pipelined": "layers side by side, each a chunk of steps behind its inputs"},
    "step_kernel": {"tiles": "a launch per step: tiles of units × batch rows, W_hhᵀ staged in shared memory",
                    "rows": "a launch per step: a warp per unit reading its rows of W_hh once for a few batch rows"},
    "launches": {"eager": "calls queued by the host: a launch and a library call cost their host time",
                 "graph": "calls replayed from a CUDA graph: a launch and a library call cost their GPU time"},
    "backward_gates": {"recompute": "the backward recomputes the gates' pre-activations from h by two GEMMs",
                       "save": "every layer's forward writes its gates' pre-activations for the backward",
                       "auto": "a training forward: each layer saves them where the stores are predicted "
                               "to cost less than the backward's GEMMs"},
}


def check_choice(owner: str, name: str, value):
    """``value`` if one of OPTION_CHOICES[name], else a SpecError naming ``owner``'s option
    ``name``, the value and the choices with what each means."""
    from .errors import SpecError

    if value not in OPTION_CHOICES[name]:
        listed = ", ".join(f"'{k}' ({v})" for k, v in OPTION_CHOICES[name].items())
        raise SpecError(f"{owner} option '{name}': got {value!r}, expected {listed}")
    return value


@dataclass(frozen=True)
class CompileOptions:
    """Shape hints the plan is tuned for (any S and B still run) and overrides. Checked
    when made: a bad value raises SpecError naming the option, the value and the choices."""

    seq_len: int = 256           # S the decisions are made for
    batch: int = 64              # B the decisions are made for
    workspace_budget: int = 512 * 2**20  # bytes the input-projection buffer may take
    layout: str | None = None    # force "xw" or "wx" for every layer
    unroll: int | None = None    # force F (time steps per input-projection launch)
    persistence: str | None = None  # force "none", "grid" or "cluster" (where it fits)
    precision: str | None = None    # force "exact" (fp32 FMA) or "tensor" (tensor cores)
    gemm: str | None = None         # force "rnncc" (own kernels only) or "cublas" (cuBLASLt
                                    # for every projection and per-step product it can run)
    schedule: str | None = None     # force "sequential" or "pipelined" (passes/schedule.py)
    step_kernel: str | None = None  # force the step kernel's form, "tiles" or "rows" (where a
                                    # layer runs rnncc's step kernel; passes/geometry.py)
    launches: str | None = None     # how calls reach the GPU: "eager" (the default: each launch
                                    # and library call costs the host's time) or "graph" (calls
                                    # replayed from a CUDA graph, which cost their GPU time only)
    backward_gates: str | None = None  # a training forward: "auto" (rnncc.nn's training twins) saves
                                    # each layer's gates' pre-activations for the backward where
                                    # predicted to pay, "save" in every layer; default: an inference
                                    # forward, whose backward would recompute them by two GEMMs
    tuned: tuple[Measurement, ...] = ()  # autotuning's picks: per layer, over the above

    def __post_init__(self) -> None:
        from .errors import SpecError

        for name in OPTION_CHOICES:
            if getattr(self, name) is not None:
                check_choice("compile", name, getattr(self, name))
        for name in ("seq_len", "batch", "workspace_budget") + (("unroll",) if self.unroll is not None else ()):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError(f"compile option '{name}': got {value!r}, expected a positive integer")

    @property
    def graphed(self) -> bool:
        """Whether the plan is priced for calls replayed from a CUDA graph (``launches``)."""
        return self.launches == "graph"

    def measured(self, layer: str) -> Measurement | None:
        return next((m for m in self.tuned if m.layer == layer), None)

    def gemm_for(self, layer: str) -> str | None:
        m = self.measured(layer)
        return m.gemm if m else self.gemm


@dataclass(frozen=True)
class Source:
    """One tensor feeding a merge: the model input or a layer's output."""

    name: str
    size: int
    offset: int  # first feature of this source in a concat (0 for sum)


@dataclass(frozen=True)
class LayerPlan:
    name: str
    cell: str
    gates: int
    hidden_size: int
    input_size: int
    bias: bool
    merge: str                   # how the sources form the input: "sum" | "concat"
    sources: tuple[Source, ...]
    is_output: bool              # its sequence is returned to the caller
    residual: bool = False       # its output is h + its input (ir.Layer.residual)
    reverse: bool = False        # steps run from S−1 down to 0 (ir.Layer.reverse)
    tensor: str = ""             # the tensor its h fills ("" = its name; ir.Layer.tensor)
    column: int = 0              # from this feature of the tensor on
    tensor_size: int = 0         # the tensor's features (0 = out_size; 2·out_size bidirectional)
    proj_size: int = 0           # h = W_hr (o ⊙ tanh c), proj_size wide (ir.Layer.proj_size)
    precision: Decision | None = None
    layout: Decision | None = None
    gate_concat: Decision | None = None
    unroll: Decision | None = None
    persistence: Decision | None = None
    projection_tile: Decision | None = None
    step_tile: Decision | None = None
    merge_fusion: Decision | None = None
    residual_fusion: Decision | None = None  # where h + input is computed (residual layers)
    # A projected LSTM's h = r·W_hrᵀ: "per step" (a kernel after each step's) or "folded"
    # (the recurrence runs on r through W_hh·W_hr, h of a chunk is one GEMM after it);
    # decided with persistence, since each prices the other (passes/persistence.py).
    h_projection: Decision | None = None
    backward_gates: Decision | None = None   # training: gates saved or recomputed (passes/backward.py)
    backward_tile: Decision | None = None    # training: the backward recurrence's block

    def decisions(self) -> dict[str, Decision]:
        return {k: v for k, v in self.__dict__.items() if isinstance(v, Decision)}

    @property
    def tensor_name(self) -> str:
        return self.tensor or self.name

    @property
    def out_size(self) -> int:
        """h's width: proj_size for a projected LSTM, else hidden_size (ir.Layer.out_size)."""
        return self.proj_size or self.hidden_size

    @property
    def tensor_width(self) -> int:
        return self.tensor_size or self.out_size

    @property
    def folded(self) -> bool:
        """Whether this projected LSTM's recurrence runs folded (h_projection "folded")."""
        return self.h_projection is not None and self.h_projection.value == "folded"

    @property
    def projection_fused(self) -> bool:
        """Whether the input projection runs inside the recurrent launch, by producer blocks
        (projection_tile a tiles.FusedProjection: passes/fusion.py)."""
        return self.projection_tile is not None and self.projection_tile.value.math == "fused"

    @property
    def projection_padded_k(self) -> int:
        """K of the input and W_ih that cuBLASLt's projection reads padded with zeros
        (LibraryProjection.padded_k; a merge kernel writes the input so), 0 where none."""
        value = self.projection_tile.value if self.projection_tile is not None else None
        return value.padded_k if value is not None and value.math == "cublas" else 0

    def library_padding(self, itemsize: int) -> tuple[int, int] | None:
        """(K, M) of the step product padded (tiles.library_padded_sizes) where cuBLASLt
        computes it and its sizes are unaligned, else None. Then the GEMM reads W_hhᵀ padded
        with zeros to [K, M] (a weight of its own, "w_hh_t_padded") and h from a [B, K] copy
        (the workspace's library_h) that the cell kernel writes each step's h into as well,
        zeros after it (h0's copied in by the call), and the product is [B, M]. Not for a
        projected LSTM, whose h comes from its h projection."""
        if self.persistence.value.math != "cublas":
            return None
        return self.library_step_sizes(itemsize)

    def library_product_columns(self, itemsize: int) -> int:
        """Floats between batch rows of a library step's product: M where its sizes are
        padded (library_padding), else G·H."""
        padding = self.library_padding(itemsize)
        return padding[1] if padding else self.gates * self.hidden_size

    def library_step_sizes(self, itemsize: int) -> tuple[int, int] | None:
        """library_padding's sizes whatever the persistence (the persistence pass prices
        the library step with them): None for a projected LSTM or aligned sizes."""
        return None if self.proj_size else library_padded_sizes(self.out_size, self.gates * self.hidden_size,
                                                                  itemsize)

    @property
    def steps_by_rows(self) -> bool:
        """Whether the layer's steps run the step kernel's rows forms (a launch a step, the
        product in rnncc's kernel, a StepRows or StepRowsTensor tile), which read W_hh as
        stored: codegen renders them, the runtime uploads that copy."""
        p = self.persistence.value
        return p.mode == "none" and p.math != "cublas" and \
            getattr(self.step_tile.value, "math", None) in ("rows", "rows_tensor")

    @property
    def fragments_tile(self) -> Any:
        """The tiles.TensorTile of a persistent kernel on tensor cores (grid or cluster),
        which copies W_hh from a copy of it in the order it holds it (weights.
        fragment_index, uploaded by the runtime): mma fragments in registers or in shared
        memory, or wgmma's swizzled operand; else None."""
        p = self.persistence.value
        return p.tile if p.mode in ("grid", "cluster") and p.math == "tensor" else None

    @property
    def recurrence(self) -> "LayerPlan":
        """The layer as its recurrent kernel sees it. Folded: a plain LSTM of width H
        whose state is r = o ⊙ tanh c, since h_{t−1}·W_hhᵀ = r_{t−1}·(W_hh·W_hr)ᵀ; its
        kernel is a plain LSTM's (W_hh·W_hr is an argument), and h = r·W_hrᵀ follows."""
        return replace(self, proj_size=0, h_projection=None) if self.folded else self


@dataclass(frozen=True)
class OutputPlan:
    name: str
    size: int
    merge: str
    sources: tuple[Source, ...]
    kernel: Decision | None = None  # None for a layer's own sequence (no kernel)


@dataclass(frozen=True)
class Stage:
    """One layer in a schedule: the stream it runs on, the share of the GPU its recurrent
    kernel holds at the planned batch, and the predicted time of one chunk (its projection,
    its steps and the launch)."""

    layer: str
    stream: int            # 0: the caller's stream; i > 0: the call's side stream i
    share: float           # of the GPU's SMs (or clusters) its recurrent kernel holds
    chunk_seconds: float   # predicted: one chunk's projection, steps and launch
    after: tuple[str, ...]  # layers whose chunk k this layer's chunk k reads
    # Layers read in the other direction of time (a bidirectional layer's halves read by
    # the next layer): its first chunk reads their last, so every chunk waits for all.
    whole: tuple[str, ...] = ()
    # The side stream this layer's input projections run on, each chunk's as soon as the
    # chunks it reads are done, into one of two buffers (chunk k's into k % 2), so that it
    # runs beside the layer's recurrence of the chunk before; None: a chunk's projection is
    # queued before its recurrence on the layer's stream.
    projection_stream: int | None = None

    def chunk_after(self, k: int, chunks: int) -> tuple[tuple[str, int], ...]:
        """The (layer, chunk) of other layers that this layer's chunk k waits for."""
        return tuple((s, k) for s in self.after) + tuple((s, chunks - 1) for s in self.whole)


@dataclass(frozen=True)
class Schedule:
    """How the layers of a call run. ``sequential``: one after another on the caller's
    stream, each over the whole sequence in chunks of its own unroll. ``pipelined``: each
    layer on a stream of its own, in chunks of ``chunk`` steps; chunk k of a layer starts
    when chunk k of every layer it reads is done, so layer l+1 runs a chunk behind layer l
    while both hold part of the GPU."""

    kind: str                    # "sequential" | "pipelined"
    chunk: int                   # steps per chunk (pipelined; 0 for sequential)
    stages: tuple[Stage, ...]    # in the model's layer order
    # Pipelined: the grid-persistent layers were re-tiled to hold 1/parts of the SMs each,
    # so that `parts` of them run side by side (1: each keeps the tile it runs fastest alone).
    parts: int = 1

    @property
    def pipelined(self) -> bool:
        return self.kind == "pipelined"

    def stage(self, layer: str) -> Stage:
        return next(s for s in self.stages if s.layer == layer)

    @property
    def label(self) -> str:
        """The kind, with the chunk and SM partitions where pipelined ("pipelined C=64 parts=2")."""
        if not self.pipelined:
            return self.kind
        return f"{self.kind} C={self.chunk}" + (f" parts={self.parts}" if self.parts > 1 else "")

    @property
    def streams(self) -> int:
        """Streams a call uses, the caller's included."""
        return 1 + max((max(s.stream, s.projection_stream or 0) for s in self.stages), default=0)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "chunk": self.chunk, **({"parts": self.parts} if self.parts > 1 else {}),
                "stages": [{"layer": s.layer, "stream": s.stream, "share": round(s.share, 3),
                            "chunk_us": round(s.chunk_seconds * 1e6, 1), "after": list(s.after)}
                           | ({"whole": list(s.whole)} if s.whole else {})
                           | ({"projection_stream": s.projection_stream} if s.projection_stream is not None else {})
                           for s in self.stages]}


@dataclass(frozen=True)
class Plan:
    model: str
    dtype: str
    target: str
    arch: str
    options: CompileOptions
    layers: tuple[LayerPlan, ...]
    outputs: tuple[OutputPlan, ...]
    workspace: Decision | None = None
    shapes: Decision | None = None   # what S and B the kernels are specialised to (passes/shapes.py)
    schedule: Decision | None = None  # a Schedule: how the layers run together (passes/schedule.py)
    version: str = field(default=__version__)

    def layer(self, name: str) -> LayerPlan:
        return next(l for l in self.layers if l.name == name)

    def map_layers(self, fn) -> "Plan":
        """A new Plan with ``fn(layer_plan)`` applied to every layer (passes use this)."""
        return replace(self, layers=tuple(fn(l) for l in self.layers))

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n"

    def explain(self) -> str:
        """The decisions with their reasons, for people."""
        o = self.options
        lines = [f"model {self.model}: dtype {self.dtype}, target {self.target} ({self.arch}), "
                 f"tuned for S={o.seq_len}, B={o.batch} (any S and B run)"
                 + (", for calls replayed from a CUDA graph (launches='graph': a launch costs its GPU time only)"
                    if o.graphed else "")]
        for l in self.layers:
            srcs = " + ".join(s.name for s in l.sources) if l.merge == "sum" else \
                "concat(" + ", ".join(s.name for s in l.sources) + ")"
            lines.append(f"layer {l.name}: {l.cell} H={l.hidden_size} "
                         + (f"P={l.proj_size} (h = W_hr (o ⊙ tanh c)) " if l.proj_size else "")
                         + f"I={l.input_size} "
                         f"bias={'yes' if l.bias else 'no'}, input = {srcs}"
                         + (", output = h + input (residual)" if l.residual else "")
                         + (", steps S−1 … 0 (reverse)" if l.reverse else "")
                         + (f", h into {l.tensor_name}[..., {l.column}:{l.column + l.out_size}]"
                            if l.tensor_width != l.out_size else ""))
            for key, d in l.decisions().items():
                lines.append(f"  {key:<16} {_show(d.value):<28} {d.reason}"
                             + ("" if d.source == "model" else f"  [{d.source}]"))
                if d.alternatives and len(d.alternatives) > 1:
                    ranked = sorted(d.alternatives.items(), key=lambda kv: kv[1])
                    lines.append(f"  {'':<16} {'':<28} alternatives, predicted µs: "
                                 + " · ".join(f"{k} {v * 1e6:.1f}" for k, v in ranked))
                if d.measured:
                    ranked = sorted(d.measured.items(), key=lambda kv: kv[1])
                    lines.append(f"  {'':<16} {'':<28} measured ms (layer forward): "
                                 + " · ".join(f"{k} {v * 1e3:.3f}" for k, v in ranked))
        for out in self.outputs:
            if out.kernel is not None:
                lines.append(f"output {out.name}: {out.merge} of {', '.join(s.name for s in out.sources)}")
                lines.append(f"  {'kernel':<16} {_show(out.kernel.value):<28} {out.kernel.reason}")
            else:
                writers = [l.name for l in self.layers if l.tensor_name == out.name]
                lines.append(f"output {out.name}: the sequence of layer {out.name}, no copy"
                             if len(writers) == 1 else
                             f"output {out.name}: the sequences of layers {' and '.join(writers)} "
                             f"side by side ([S, B, {out.size}]), no copy")
        if self.schedule is not None:
            d = self.schedule
            lines.append(f"schedule: {d.value.kind}" + (f" chunk={d.value.chunk}" if d.value.pipelined else "")
                         + (f" parts={d.value.parts}" if d.value.parts > 1 else "") + f"  {d.reason}" + ("" if d.source == "model" else f"  [{d.source}]"))
            if d.alternatives and len(d.alternatives) > 1:
                ranked = sorted(d.alternatives.items(), key=lambda kv: kv[1])
                lines.append("  alternatives, predicted µs: "
                             + " · ".join(f"{k} {v * 1e6:.0f}" for k, v in ranked))
            for st in d.value.stages if len(d.value.stages) > 1 else ():
                where = "the caller's stream" if st.stream == 0 else f"side stream {st.stream}"
                lag = (f", a chunk ({d.value.chunk} steps) behind {', '.join(st.after)}"
                       if d.value.pipelined and st.after else "")
                lag += (f", after all of {', '.join(st.whole)} (the other way in time)"
                        if d.value.pipelined and st.whole else "")
                ahead = (f"; its projections a chunk ahead on side stream {st.projection_stream}, into two buffers"
                         if st.projection_stream is not None else "")
                lines.append(f"  {st.layer:<16} {where}, {st.share:.2f} of the GPU, "
                             f"{st.chunk_seconds * 1e6:.0f} µs a chunk{lag}{ahead}")
        if self.workspace is not None:
            lines.append(f"workspace: {_show(self.workspace.value)}  {self.workspace.reason}")
        if self.shapes is not None:
            lines.append(f"shapes: {_show(self.shapes.value)}  {self.shapes.reason}")
        return "\n".join(lines) + "\n"


def _plain(value: Any) -> Any:
    """``value`` as JSON's types: a typed decision value (rnncc/tiles.py) by its
    ``to_dict``, other dataclasses field by field."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _show(value: Any) -> str:
    if hasattr(value, "to_dict"):
        value = value.to_dict()
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, str) and value in LAYOUTS:
        return LAYOUTS[value]
    return str(value)
