"""PyTorch modules run by rnncc: drop-in twins of ``torch.nn.LSTM``, ``GRU`` and ``RNN``,
and ``Model(spec)`` for any spec graph.

The twins take their twin's constructor arguments, have its parameters (same names, shapes
and initialisation, so ``load_state_dict`` of a ``torch.nn`` checkpoint works unchanged)
and return what it returns. On a CUDA tensor the forward runs the compiled kernels (one
compile per dtype, for any S and B); on a CPU tensor it runs the float64 reference
executor and returns the input's dtype (a slow path for development, warned once).

Gradients: on CUDA the forward of inputs or parameters that require grad (grad mode on)
runs the training forward, which also keeps every layer's output sequence, and its
backward is rnncc's (``rnncc.backward``: the gates recomputed by GEMMs, the reverse
recurrence in one grid-persistent kernel, the weight and input gradients as GEMMs): in
eager code through one autograd.Function, traced through the custom ops
rnncc::forward_train and rnncc::backward, so torch.compile sees them. Dropout between
layers in training mode runs the stack one level (a layer and its reverse) at a time, each
level's input times a mask drawn on the GPU. Not yet on CUDA: LSTMP (proj_size) and packed
sequences with gradients, each refused by name. On the CPU the reference's hand-written
float64 backward (``reference_grad``) serves autograd, dropout included (slowly).
"""

from __future__ import annotations

import json
import math
import sys
import uuid
import warnings
import weakref
from functools import lru_cache
from typing import Any, Mapping

import numpy as np
import torch
from torch.nn.utils.rnn import PackedSequence

from .call_graphs import CallGraphs, signature
from .compiler import compile as compile_model
from .errors import SpecError
from .ir import Model as IrModel
from .passes.backward import saved_gate_buffers
from .plan import check_choice
from .reference_autograd import ReferenceFunction
from .spec import load as load_spec


class CpuPathWarning(RuntimeWarning):
    """rnncc ran on the CPU through its NumPy reference executor (slow; for development)."""


# Once per process, whichever line calls: appended, so a filter of the user's still wins.
warnings.filterwarnings("once", category=CpuPathWarning, append=True)


def _user_stacklevel() -> int:
    """The ``stacklevel`` (for a warning raised by our caller) of the first frame outside
    rnncc and torch: the user's line that called the module, not torch's dispatch."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and \
            frame.f_globals.get("__name__", "").partition(".")[0] in ("rnncc", "torch"):
        frame, level = frame.f_back, level + 1
    return level


_TORCH_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def _needs_grad(tensors, parameters) -> bool:
    """Whether autograd would want this forward's backward: grad mode on, and the input,
    a state or a parameter requires grad."""
    return torch.is_grad_enabled() and (any(t.requires_grad for t in tensors if t is not None)
                                        or any(p.requires_grad for p in parameters))


def _refuse_training(owner: str, needs_grad: bool, cuda: bool, proj_size: int = 0,
                     packed: bool = False) -> None:
    """Raise where a CUDA forward would need a backward (``needs_grad``) the kernels lack:
    of an LSTMP layer or of packed sequences. On the CPU the reference does both."""
    unsupported = ("proj_size (LSTMP)" if proj_size else
                   "packed sequences (lengths)" if packed else None)
    if cuda and needs_grad and unsupported:
        raise RuntimeError(
            f"{owner}: this forward needs gradients (grad mode is on and the input or parameters "
            f"require grad), and rnncc's CUDA backward does not cover {unsupported} yet. Run it "
            "under torch.no_grad(), or train on CPU tensors, where rnncc's float64 reference "
            "computes gradients (slowly).")


def _dropout_masks(suffixes, directions: int, width: int, p: float, S: int,
                   B: int) -> dict[str, np.ndarray]:
    """torch.nn's dropout between layers, drawn from torch's generator: for each layer past
    the first, a mask [S, B, width] (its input's width) of 0 and 1/(1 − p) (all 0 at p = 1),
    by the reference's layer names (``suffixes``: layer after layer, ``directions`` names
    a layer, which share its mask since they read the same tensor)."""
    masks = {}
    for first in range(directions, len(suffixes), directions):
        mask = _dropout_mask(torch.rand(S, B, width, dtype=torch.float64), p).numpy()
        masks |= {name: mask for name in suffixes[first:first + directions]}
    return masks


def _dropout_mask(uniform: torch.Tensor, p: float) -> torch.Tensor:
    """torch's dropout mask from uniform draws in [0, 1): 1/(1 − p) where kept, else 0
    (all 0 at p = 1), in the draws' dtype."""
    return (uniform >= p).to(uniform.dtype) * (0.0 if p >= 1.0 else 1.0 / (1.0 - p))


def _layout(model: IrModel) -> tuple:
    """What the traced forward needs of a model, as plain tuples (torch.compile traces
    through them): (outputs, ((layer, is LSTM), ...), weight names in the op's order)."""
    return (len(model.outputs), tuple((l.name, l.cell == "lstm") for l in model.layers),
            tuple(_weight_names(model)))


def _op_states(layers, state: Mapping, x: torch.Tensor) -> tuple[list, list]:
    """The custom ops' h0 and c0 lists from a state dict: one tensor per layer (per LSTM
    layer for c0), an empty one where the state is not given (zeros), and empty lists when
    none is. ``layers``: (name, is LSTM) in model order."""
    if not state:
        return [], []
    none = x.new_empty(0)
    h0 = [(state[n][0] if lstm else state[n]) if n in state else none for n, lstm in layers]
    c0 = [state[n][1] if n in state else none for n, lstm in layers if lstm]
    return h0, c0


def _finals(flat, first: int, layers) -> dict:
    """Each layer's h_n, or (h_n, c_n) for an LSTM, from a flat list whose finals start at
    ``first`` (the ops' and the reference node's order). ``layers``: (name, is LSTM)."""
    final, i = {}, first
    for n, lstm in layers:
        final[n] = (flat[i], flat[i + 1]) if lstm else flat[i]
        i += 2 if lstm else 1
    return final


def _run_gpu(spec: str, layout: tuple, weights: dict[str, torch.Tensor], x: torch.Tensor,
             state: dict, batch_first: bool):
    """The CUDA forward. Traced (torch.compile, or tensor subclasses such as fake
    tensors): one call of the custom op rnncc::forward, so that the tracer sees one node
    with a fake implementation. Eager on plain tensors: the compiled model directly, with
    the state as a dict, since the op's dispatch and the flattening around it cost ~100 µs
    of host time a call, as much as rnncc's own launches for a small model."""
    if not (torch.compiler.is_compiling() or type(x) is not torch.Tensor):
        return _runner_of(spec).gpu(_model_of(spec), weights, x, state, batch_first)
    outputs, layers, names = layout
    h0, c0 = _op_states(layers, state, x)
    flat = torch.ops.rnncc.forward(spec, x, [weights[n].detach() for n in names], h0, c0,
                                   batch_first)
    return tuple(flat[:outputs]), _finals(flat, outputs, layers)


def _run(spec: str, layout: tuple, weights: dict[str, torch.Tensor], x: torch.Tensor,
         state: dict, batch_first: bool, lengths: torch.Tensor | None = None,
         dropout_masks: dict[str, np.ndarray] | None = None):
    """(outputs tuple, final state dict of torch tensors) of the model ``spec`` (JSON) on x:
    on CUDA through the custom op rnncc::forward, on the CPU by the reference executor.
    ``lengths`` (a CPU tensor [B]): sequences of different lengths, run eagerly (their
    callers, packed sequences, have shapes that depend on the data anyway).
    ``dropout_masks`` (the CPU path's): by layer name, time-major masks of its input."""
    if x.is_cuda and lengths is not None:
        return _runner_of(spec).gpu(_model_of(spec), weights, x, state, batch_first, lengths=lengths)
    if x.is_cuda and _needs_grad((x, *_state_tensors(state)), weights.values()):
        return _run_train(spec, layout, weights, x, state, batch_first)
    if x.is_cuda:
        return _run_gpu(spec, layout, weights, x, state, batch_first)
    model = _model_of(spec)
    warnings.warn("rnncc on CPU tensors runs its NumPy reference executor, a slow path "
                  "meant for development; move the module and its inputs to CUDA for the "
                  "compiled kernels", CpuPathWarning, stacklevel=_user_stacklevel())
    # One autograd node: the reference forward, and its float64 backward if asked for.
    names = _weight_names(model)
    given = tuple((k, isinstance(v, tuple)) for k, v in state.items())
    flat = ReferenceFunction.apply(
        model, names, given, None if lengths is None else lengths.numpy(), dropout_masks,
        x.transpose(0, 1) if batch_first else x, *(weights[n] for n in names),
        *(t for v in state.values() for t in (v if isinstance(v, tuple) else (v,))))
    outs = tuple(o.transpose(0, 1) if batch_first else o for o in flat[:len(model.outputs)])
    return outs, _finals(flat, len(model.outputs), layout[1])


class _Runner:
    """The compiled models (one per dtype and float32 precision) of one spec in this
    process, each with its plans per shape class, planned for ``launches`` (eager calls, or
    calls replayed from a CUDA graph: CompileOptions.launches). Weights are re-sent to the
    GPU only when a parameter has changed, packed there by device copies where they can be."""

    def __init__(self, owner: str, launches: str | None = None, backward_gates: str | None = None,
                 instance: str | None = None):
        self.owner, self.launches, self.backward_gates = owner, launches, backward_gates
        self.instance = instance  # the spec's "instance": whose weights these are (_new_instance)
        self.compiled: dict[tuple[str, bool], tuple[Any, tuple]] = {}

    def compiled_for(self, model: IrModel, weights: dict[str, torch.Tensor], x: torch.Tensor):
        """The compiled model that runs CUDA tensor x (one per dtype and float32
        precision), compiled on first use, with the weights re-sent if a parameter changed."""
        if x.get_device() != 0:
            raise RuntimeError(f"{self.owner}: rnncc runs on cuda:0 for now; got {x.device}")
        # float32 on TF32 tensor cores exactly where torch's float32 matmuls are
        # (torch.set_float32_matmul_precision("high"), or matmul.allow_tf32).
        tf32 = model.dtype == "float32" and torch.get_float32_matmul_precision() != "highest"
        key = (model.dtype, tf32)
        version = tuple((w.data_ptr(), w._version) for w in weights.values())
        entry = self.compiled.get(key)
        if entry is None:
            # Compiled once; every call's shape class gets its plan on first use.
            entry = self.compiled[key] = (compile_model(
                model, target="device", weights=weights, precision="tensor" if tf32 else None,
                launches=self.launches, backward_gates=self.backward_gates), version)
        elif entry[1] != version:
            # An optimizer's step: packed on the GPU into the kernels' memory where the model
            # allows (CompiledModel.refresh_weights), else through the host.
            if not entry[0].refresh_weights(weights, torch.cuda.current_stream(x.device).cuda_stream):
                entry[0].load_state_dict(weights)
            entry = self.compiled[key] = (entry[0], version)
        return entry[0]

    def gpu(self, model: IrModel, weights: dict[str, torch.Tensor], x: torch.Tensor,
            state: dict, batch_first: bool, stacked_state: bool = False, lengths=None, gates=None,
            compiled=None):
        """(outputs tuple, final state) of the model on CUDA tensor x: the state as a dict
        per layer, or with ``stacked_state`` torch.nn's h_n (or (h_n, c_n)); ``lengths``
        and ``gates`` as the compiled model takes them; ``compiled``: ``compiled_for``'s
        model where the caller has it already."""
        y, final = (compiled if compiled is not None else self.compiled_for(model, weights, x))(
            x.contiguous() if x.stride(-1) != 1 else x, state or None,
            batch_first=batch_first, stacked_state=stacked_state, lengths=lengths, gates=gates)
        return (y if isinstance(y, tuple) else (y,)), final


# ---- the GPU forward as a torch.library custom op -----------------------------------------
# torch.compile(fullgraph=True) traces through the modules to this op; its fake
# implementation gives the output shapes. The op receives the spec as JSON text (ops take
# tensors and plain values), and compiled models are kept per spec text in this process,
# each module's specs its own ("instance" below): that is rnncc's in-memory compile cache.

# A spec's text may carry, beside the model, "launches": "graph" (the modules' ``launches``):
# the plans its runner makes are then for calls replayed from a CUDA graph;
# "backward_gates": "auto" (the training forward's spec): its layers save their gates'
# pre-activations for the backward where their plans say it pays; and "instance": the
# module whose weights its runner holds (``_new_instance``). A compiled model holds one set
# of weights on the device, so two modules of one spec (an encoder and a decoder of one
# size; a stack's levels, run one at a time under dropout) must not share one: each call
# of the other would send its weights again, through the host where the plan reads forms
# of them that are not packed on the device (0.03× cuDNN at PTB's 2 × LSTM H=650 with
# dropout, results/train-short-and-odd-h200-2026-11-29-shared-runner.json), and a CUDA
# graph recorded by one would replay with the other's weights.
_SPEC_OPTIONS = ("launches", "backward_gates", "instance")


def _spec_text(model: IrModel, launches: str | None, backward_gates: str | None = None,
               instance: str | None = None) -> str:
    """The JSON text the ops and the runners take: the model, and its ``launches``,
    ``backward_gates`` and ``instance`` where not the default."""
    raw = model.to_dict()
    if launches == "graph":
        raw["launches"] = launches
    if backward_gates is not None:
        raw["backward_gates"] = backward_gates
    if instance is not None:
        raw["instance"] = instance
    return json.dumps(raw)


# Bounded: every module's specs are texts of their own (their "instance").
@lru_cache(maxsize=1024)
def _model_of(spec: str) -> IrModel:
    raw = json.loads(spec)
    for option in _SPEC_OPTIONS:
        raw.pop(option, None)
    return IrModel.from_dict(raw)


# The runners by spec text, each with its compiled models and their device memory: the
# in-memory compile cache. A module's runners are dropped when it is collected
# (``_new_instance``), and their device memory with them.
_RUNNERS: dict[str, _Runner] = {}


def _runner_of(spec: str) -> _Runner:
    runner = _RUNNERS.get(spec)
    if runner is None:
        raw = json.loads(spec)
        runner = _RUNNERS.setdefault(spec, _Runner(f"rnncc model '{_model_of(spec).name}'", raw.get("launches"),
                                                   raw.get("backward_gates"), raw.get("instance")))
    return runner


def _new_instance(module: torch.nn.Module) -> str:
    """A token for ``module``'s specs (``_SPEC_OPTIONS``' "instance"), so that its compiled
    models are its own; a level k of it is "<token>/k". The runners of its specs go when
    the module is collected (not at the interpreter's exit, whose end frees them anyway)."""
    token = uuid.uuid4().hex
    weakref.finalize(module, _forget_instance, token).atexit = False
    return token


def _forget_instance(token: str) -> None:
    for spec, runner in list(_RUNNERS.items()):
        owner = runner.instance or ""
        if owner == token or owner.startswith(token + "/"):
            _RUNNERS.pop(spec, None)


def _parameter_kinds(bias: bool, proj: bool = False) -> tuple[str, ...]:
    """A layer's parameters, in torch.nn's order (W_hr of a projected LSTM last)."""
    return ("weight_ih", "weight_hh") + (("bias_ih", "bias_hh") if bias else ()) \
        + (("weight_hr",) if proj else ())


def _weight_names(model: IrModel) -> list[str]:
    return [f"{l.name}.{n}" for l in model.layers for n in _parameter_kinds(l.bias, bool(l.proj_size))]


def _forward_cuda(spec: str, x: torch.Tensor, weights: list[torch.Tensor], h0: list[torch.Tensor],
                  c0: list[torch.Tensor], batch_first: bool) -> list[torch.Tensor]:
    """Outputs of the model ``spec`` on CUDA tensor x, then each layer's h_n (and c_n for
    an LSTM layer). ``h0`` has one tensor per layer or none, ``c0`` one per LSTM layer; an
    empty tensor means that layer starts from zeros."""
    model = _model_of(spec)
    outs, final = _runner_of(spec).gpu(model, dict(zip(_weight_names(model), weights)), x,
                                       _given_state(model, h0, c0), batch_first)
    flat = [o for o in outs]
    for l in model.layers:
        flat += list(final[l.name]) if l.cell == "lstm" else [final[l.name]]
    return flat


_forward = torch.library.custom_op("rnncc::forward", mutates_args=())(_forward_cuda)


@_forward.register_fake
def _(spec, x, weights, h0, c0, batch_first):
    model = _model_of(spec)
    S, B = (x.shape[1], x.shape[0]) if batch_first else (x.shape[0], x.shape[1])
    out = [x.new_empty((B, S, o.size) if batch_first else (S, B, o.size)) for o in model.outputs]
    for l in model.layers:
        out += [x.new_empty(B, l.out_size)] + ([x.new_empty(B, l.hidden_size)] if l.cell == "lstm" else [])
    return out


# ---- the CUDA training forward and its backward, as custom ops --------------------------
# rnncc::forward_train runs a variant of the model whose outputs also include every layer's
# tensor (what the backward reads); rnncc::backward computes every gradient from them
# (rnncc.backward). The first's registered autograd formula calls the second, which
# torch.compile(fullgraph=True) traces; eager autograd calls the same two functions through
# _EagerTraining, without the ops' dispatch. Both take time-major x.

def _state_tensors(state: Mapping) -> list[torch.Tensor]:
    return [t for v in state.values() for t in (v if isinstance(v, tuple) else (v,))]


@lru_cache(maxsize=1024)  # bounded as _model_of: a spec text per module
def _training_spec(spec: str) -> str:
    """The spec with every layer's tensor an output (after the model's own), compiled as a
    training forward (backward_gates "auto"): it returns each layer's sequence and, in
    buffers of its own, the pre-activations of the layers whose plans save them
    (``_gate_shapes``, ``_saving_layers``), which the backward reads."""
    model = _model_of(spec)
    raw = model.to_dict()
    plain = {o.name for o in model.outputs if o.is_layer}
    raw["outputs"] = raw["outputs"] + [l.name for l in model.layers
                                       if l.tensor_name == l.name and l.name not in plain]
    options = json.loads(spec)
    return _spec_text(IrModel.from_dict(raw), options.get("launches"), "auto", options.get("instance"))


def _given_state(model: IrModel, h0: list[torch.Tensor], c0: list[torch.Tensor]) -> dict:
    """The state dict of the ops' h0/c0 lists (an empty tensor: not given)."""
    state, lstm_c0 = {}, iter(c0)
    for i, l in enumerate(model.layers if h0 else ()):
        c = next(lstm_c0) if l.cell == "lstm" else None
        if h0[i].numel():
            state[l.name] = (h0[i], c) if l.cell == "lstm" else h0[i]
    return state


def _gate_layers(model: IrModel) -> list[str]:
    """The layer of each of the training forward's buffers for saved pre-activations, in
    its outputs' order: two for a GRU layer (the x and h parts), one for any other layer the
    CUDA backward covers (not LSTMP). The op's outputs cannot depend on the plan, which the
    fake implementation does not make, so a layer whose plan recomputes
    (``_saving_layers``) still gets its buffers, unwritten."""
    return [l.name for l in model.layers if not l.proj_size for _ in range(saved_gate_buffers(l.cell))]


def _gate_shapes(model: IrModel, S: int, B: int) -> list[tuple[str, tuple[int, int, int]]]:
    """(layer, shape) of each buffer of ``_gate_layers``: float32 [S, B, G·H]."""
    return [(name, (S, B, model.layer(name).gates * model.layer(name).hidden_size)) for name in _gate_layers(model)]


def _saved_buffers(model: IrModel, buffers: list[torch.Tensor], saving: set[str]) -> dict[str, tuple]:
    """The buffers (in ``_gate_layers``' order) of the layers in ``saving``, by layer: one,
    or a GRU's two."""
    by_layer: dict[str, tuple] = {}
    for name, t in zip(_gate_layers(model), buffers):
        if name in saving:
            by_layer[name] = (*by_layer.get(name, ()), t)
    return by_layer


def _saving_layers(spec: str, named: dict[str, torch.Tensor], x: torch.Tensor) -> set[str]:
    """The layers whose training forward at x's [S, B] saves the pre-activations (their
    plans' backward_gates)."""
    train = _model_of(_training_spec(spec))
    return _saving_of(_runner_of(_training_spec(spec)).compiled_for(train, named, x), x)


def _saving_of(compiled, x: torch.Tensor) -> set[str]:
    """``_saving_layers`` of the training forward's compiled model."""
    return {l.name for l in compiled.variant(*x.shape[:2]).plan.layers if l.backward_gates.value == "save"}


def _forward_train_cuda(spec: str, x: torch.Tensor, weights: list[torch.Tensor],
                        h0: list[torch.Tensor], c0: list[torch.Tensor]) -> list[torch.Tensor]:
    """The model's outputs, each layer's h_n (and c_n), then the tensors of the layers that
    are not an output as they are, all [S, B, ·] time-major, then the buffers of the
    gates' pre-activations (``_gate_shapes``), written where the plan saves them."""
    return _forward_train_saving(spec, x, weights, h0, c0)[0]


def _forward_train_saving(spec: str, x: torch.Tensor, weights: list[torch.Tensor], h0: list[torch.Tensor],
                          c0: list[torch.Tensor]) -> tuple[list[torch.Tensor], frozenset[str]]:
    """``_forward_train_cuda``'s outputs and its ``_saving_layers``, which the eager
    backward then need not look up again (~35 µs of host a step on the H200)."""
    model, train = _model_of(spec), _model_of(_training_spec(spec))
    runner, named = _runner_of(_training_spec(spec)), dict(zip(_weight_names(model), weights))
    compiled = runner.compiled_for(train, named, x)  # once: it checks the weights' versions
    saving = frozenset(_saving_of(compiled, x))
    buffers = [x.new_empty(shape, dtype=torch.float32) for _, shape in _gate_shapes(model, *x.shape[:2])]
    gates = {name: p if len(p) > 1 else p[0] for name, p in _saved_buffers(model, buffers, saving).items()}
    outs, final = runner.gpu(train, named, x, _given_state(model, h0, c0), False, gates=gates or None,
                             compiled=compiled)
    flat = list(outs[:len(model.outputs)])
    for l in model.layers:
        flat += list(final[l.name]) if l.cell == "lstm" else [final[l.name]]
    return flat + list(outs[len(model.outputs):]) + buffers, saving


def _backward_cuda(spec: str, x: torch.Tensor, weights: list[torch.Tensor], h0: list[torch.Tensor],
                   c0: list[torch.Tensor], sequences: list[torch.Tensor],
                   grads: list[torch.Tensor]) -> list[torch.Tensor]:
    """Gradients of x, of each weight, of each h0 and c0 (empty where not given), from the
    training forward's outputs, extra sequences and pre-activation buffers (``sequences``;
    a buffer is read where the layer's plan saved into it) and the gradients of its outputs
    and final states (``grads``)."""
    from . import backward

    model, train = _model_of(spec), _model_of(_training_spec(spec))
    tensors = {o.name: t for o, t in zip(train.outputs, sequences) if o.is_layer}
    names = _weight_names(model)
    saved = _saved_buffers(model, sequences[len(train.outputs):], _saving_layers(spec, dict(zip(names, weights)), x))
    n = len(model.outputs)
    final = _finals(grads, n, _layout(model)[1])
    dx, dw, dstate = backward.model_backward(model, dict(zip(names, weights)), x, tensors,
                                             _given_state(model, h0, c0), grads[:n], final, saved)
    out = [dx.to(x.dtype)] + [dw[name].to(w.dtype) for name, w in zip(names, weights)]
    for l, h in zip(model.layers, h0):
        d = dstate[l.name][0] if l.cell == "lstm" else dstate[l.name]
        out.append(d.to(h.dtype) if h.numel() else h.new_empty(0))
    for l, c in zip([l for l in model.layers if l.cell == "lstm"], c0):
        out.append(dstate[l.name][1].to(c.dtype) if c.numel() else c.new_empty(0))
    return out


def _saved_by_training(spec: str, x, weights, h0, c0, output) -> tuple[tuple, tuple[int, ...]]:
    """What a training forward's backward reads — x, the weights, the initial states, the
    model's outputs and the extra sequences (not the final states) — and the counts that
    ``_backward_inputs`` splits them by."""
    model = _model_of(spec)
    n, finals = len(model.outputs), sum(2 if l.cell == "lstm" else 1 for l in model.layers)
    return (x, *weights, *h0, *c0, *output[:n], *output[n + finals:]), \
        (len(weights), len(h0), len(c0), n + finals)


def _backward_inputs(saved, counts) -> tuple:
    """(x, weights, h0, c0, sequences, how many leading outputs have gradients) of what
    ``_saved_by_training`` kept."""
    nw, nh, nc, graded = counts
    x, weights = saved[0], list(saved[1:1 + nw])
    h0, c0 = list(saved[1 + nw:1 + nw + nh]), list(saved[1 + nw + nh:1 + nw + nh + nc])
    return x, weights, h0, c0, list(saved[1 + nw + nh + nc:]), graded


_forward_train = torch.library.custom_op("rnncc::forward_train", mutates_args=())(_forward_train_cuda)
_backward = torch.library.custom_op("rnncc::backward", mutates_args=())(_backward_cuda)


@_forward_train.register_fake
def _(spec, x, weights, h0, c0):
    model, train = _model_of(spec), _model_of(_training_spec(spec))
    S, B = x.shape[:2]
    out = [x.new_empty(S, B, o.size) for o in model.outputs]
    for l in model.layers:
        out += [x.new_empty(B, l.out_size)] + ([x.new_empty(B, l.hidden_size)] if l.cell == "lstm" else [])
    return out + [x.new_empty(S, B, o.size) for o in train.outputs[len(model.outputs):]] \
        + [x.new_empty(shape, dtype=torch.float32) for _, shape in _gate_shapes(model, S, B)]


@_backward.register_fake
def _(spec, x, weights, h0, c0, sequences, grads):
    return [torch.empty_like(x)] + [torch.empty_like(w) for w in weights] \
        + [torch.empty_like(h) for h in h0] + [torch.empty_like(c) for c in c0]


def _setup_train(ctx, inputs, output):
    spec, x, weights, h0, c0 = inputs
    saved, ctx.counts = _saved_by_training(spec, x, weights, h0, c0, output)
    ctx.spec = spec
    ctx.save_for_backward(*saved)


def _train_backward(ctx, grads):
    x, weights, h0, c0, sequences, graded = _backward_inputs(ctx.saved_tensors, ctx.counts)
    flat = torch.ops.rnncc.backward(ctx.spec, x, weights, h0, c0, sequences, list(grads[:graded]))
    nw, nh = len(weights), len(h0)
    return (None, flat[0], list(flat[1:1 + nw]), list(flat[1 + nw:1 + nw + nh]),
            list(flat[1 + nw + nh:]))


_forward_train.register_autograd(_train_backward, setup_context=_setup_train)


class _EagerTraining(torch.autograd.Function):
    """The eager form of rnncc::forward_train with its backward: the same two functions,
    without the custom ops' dispatch. Through the ops, a training step of LSTM fp16 H=512
    B=8 S=256 took 2.4 ms of host time (the GPU's share 2.2 ms), so the GPU waited on the
    host; traced code (torch.compile) still sees the ops. The tensors come flat, since
    autograd.Function tracks only tensors passed as arguments: x, the weights, h0, c0."""

    @staticmethod
    def forward(ctx, spec: str, counts: tuple[int, int, int], *tensors):
        nw, nh, _ = counts
        x, weights = tensors[0], list(tensors[1:1 + nw])
        h0, c0 = list(tensors[1 + nw:1 + nw + nh]), list(tensors[1 + nw + nh:])
        output, ctx.saving = _forward_train_saving(spec, x, weights, h0, c0)
        saved, ctx.counts = _saved_by_training(spec, x, weights, h0, c0, output)
        ctx.spec = spec
        ctx.save_for_backward(*saved)
        # An output nothing read (h_n and c_n, mostly) keeps None for its gradient, which
        # the kernels read as zero, rather than a tensor of zeros filled for the call.
        ctx.set_materialize_grads(False)
        return tuple(output)

    @staticmethod
    def backward(ctx, *grads):
        x, weights, h0, c0, sequences, graded = _backward_inputs(ctx.saved_tensors, ctx.counts)
        flat = _backward_replayed(ctx.spec, x, weights, h0, c0, sequences, list(grads[:graded]),
                                  ctx.saving)
        return (None, None, *flat)


# The eager training steps' backwards captured in CUDA graphs in this process (a cache).
_BACKWARD_GRAPHS = CallGraphs()


def _backward_replayed(spec: str, x: torch.Tensor, weights: list[torch.Tensor], h0: list[torch.Tensor],
                       c0: list[torch.Tensor], sequences: list[torch.Tensor],
                       grads: list[torch.Tensor | None], saving: frozenset[str] | None = None) -> list[torch.Tensor]:
    """``_backward_cuda``'s gradients, replayed from a CUDA graph (rnncc.call_graphs)
    where ``backward.graph_worthy`` says the model's graph is worth the memory it keeps.
    The weights are read in place, so their addresses are part of the graph's key.
    ``saving``: the forward's ``_saving_layers``, looked up here where not given."""
    from . import backward

    if not backward.graph_worthy(_model_of(spec), x.shape[0], x.shape[1]):
        return _backward_cuda(spec, x, weights, h0, c0, sequences, grads)
    backward.check_status()
    # The buffers of layers that recompute their pre-activations were not written: the
    # graph need not copy them in (16 MiB a replay at LSTM fp16 H=512 B=8).
    model = _model_of(spec)
    if saving is None:
        saving = _saving_layers(spec, dict(zip(_weight_names(model), weights)), x)
    layers = _gate_layers(model)
    unread, first = x.new_empty(0, dtype=torch.float32), len(sequences) - len(layers)
    sequences = sequences[:first] + [t if name in saving else unread
                                     for name, t in zip(layers, sequences[first:])]
    nh, nc, ns = len(h0), len(c0), len(sequences)

    def body(ins: list) -> list[torch.Tensor]:
        return _backward_cuda(spec, ins[0], weights, ins[1:1 + nh], ins[1 + nh:1 + nh + nc],
                              ins[1 + nh + nc:1 + nh + nc + ns], ins[1 + nh + nc + ns:])
    key = (spec, tuple(w.data_ptr() for w in weights), signature(weights), backward.launch_settings())
    return _BACKWARD_GRAPHS.run(key, [x, *h0, *c0, *sequences, *grads], body)


def _run_train(spec: str, layout: tuple, weights: dict[str, torch.Tensor], x: torch.Tensor,
               state: dict, batch_first: bool):
    """The CUDA forward with autograd: (outputs tuple, final state dict), as ``_run``."""
    outputs, layers, names = layout
    h0, c0 = _op_states(layers, state, x)
    xt = x.transpose(0, 1) if batch_first else x
    w = [weights[n] for n in names]
    if torch.compiler.is_compiling() or type(x) is not torch.Tensor:
        flat = torch.ops.rnncc.forward_train(spec, xt, w, h0, c0)
    else:
        flat = _EagerTraining.apply(spec, (len(w), len(h0), len(c0)), xt, *w, *h0, *c0)
    outs = tuple(o.transpose(0, 1) if batch_first else o for o in flat[:outputs])
    return outs, _finals(flat, outputs, layers)


def _stacked_finals(finals: list, lstm: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """torch.nn's h_n (and c_n, None for a GRU or RNN) [layers × directions, B, ·] from
    each layer's final state in that order. One layer's is a view: a stack copies (two
    launches, 67 µs of host a training step of LSTM fp16 H=512 B=8 in
    benchmarks/train_host_split.py)."""
    stack = (lambda ts: ts[0].unsqueeze(0)) if len(finals) == 1 else torch.stack
    if lstm:
        return stack([h for h, _ in finals]), stack([c for _, c in finals])
    return stack(finals), None


def _permute_rows(state, order: torch.Tensor | None):
    """h (or (h, c)) with its batch rows in ``order`` (torch.nn's permute_hidden: hx into
    a PackedSequence's sorted order, h_n back into the caller's); as is where None."""
    if order is None:
        return state
    if isinstance(state, tuple):
        return tuple(p.index_select(1, order) for p in state)
    return state.index_select(1, order)


def _check_launches(owner: str, launches: str) -> str:
    """``launches`` if one of CompileOptions.launches' values, else a SpecError naming the owner."""
    return check_choice(owner, "launches", launches)


class _SpecsOfItsOwn(torch.nn.Module):
    """A module whose specs name it (``_make_specs``), so that its compiled models are its
    own: a copy (copy.deepcopy, pickle) makes its specs again, naming itself."""

    def _make_specs(self) -> None:
        raise NotImplementedError

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        self._make_specs()


class _RecurrentTwin(_SpecsOfItsOwn):
    """Shared body of LSTM, GRU and RNN. Beyond torch.nn's arguments, ``launches``: how
    its calls will reach the GPU, "eager" (the default) or "graph" for a module whose
    calls are captured in CUDA graphs (``torch.cuda.graph``,
    ``torch.compile(mode="reduce-overhead")``); its plans then price a launch at its GPU
    time (CompileOptions.launches). Settable later, as ``optimize`` does."""

    _gates = 1
    _torch_name = ""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, device=None, dtype=None, *, launches: str = "eager"):
        super().__init__()
        name = f"rnncc.nn.{type(self).__name__}"
        self._launches = _check_launches(name, launches)
        if not 0.0 <= dropout <= 1.0:
            raise SpecError(f"{name}: dropout={dropout}, expected a probability in [0, 1]")
        if proj_size and self._gates != 4:
            raise SpecError(f"{name}: proj_size={proj_size}, expected 0 (torch.nn.LSTM's alone)")
        if isinstance(proj_size, bool) or not isinstance(proj_size, int) or not 0 <= proj_size < hidden_size:
            raise SpecError(f"{name}: proj_size={proj_size!r}, expected 0 (none) or an integer in "
                            f"[1, hidden_size={hidden_size})")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional, self.proj_size = bool(bidirectional), proj_size
        G, H, D = self._gates, hidden_size, 2 if bidirectional else 1
        P = proj_size or hidden_size  # h's width
        kw = {"device": device, "dtype": dtype}
        # torch.nn's suffixes per layer and direction: _l0, _l0_reverse, _l1, ... (rnncc's
        # layers l0, l0_reverse, l1, ..., in the order of h_n).
        self._suffixes = tuple(f"l{k}{d}" for k in range(num_layers) for d in ("", "_reverse")[:D])
        for suffix in self._suffixes:
            fan_in = input_size if suffix.split("_")[0] == "l0" else D * P
            self.register_parameter(f"weight_ih_{suffix}", torch.nn.Parameter(torch.empty(G * H, fan_in, **kw)))
            self.register_parameter(f"weight_hh_{suffix}", torch.nn.Parameter(torch.empty(G * H, P, **kw)))
            if bias:
                self.register_parameter(f"bias_ih_{suffix}", torch.nn.Parameter(torch.empty(G * H, **kw)))
                self.register_parameter(f"bias_hh_{suffix}", torch.nn.Parameter(torch.empty(G * H, **kw)))
            if proj_size:
                self.register_parameter(f"weight_hr_{suffix}", torch.nn.Parameter(torch.empty(P, H, **kw)))
        self.reset_parameters()
        self._make_specs()
        self._layout = _layout(self._spec("float32"))
        self._weight_names = tuple((f"{suffix}.{n}", f"{n}_{suffix}") for suffix in self._suffixes
                                   for n in _parameter_kinds(bias, bool(proj_size)))

    def _make_specs(self) -> None:
        """The spec of each dtype the GPU runs, as the JSON text the custom op takes, and
        with several layers each level of the stack alone per dtype, which dropout runs
        level by level (each its own compiled model: the levels' weights differ); made
        here, not per call, so that torch.compile traces no spec building. The specs name
        this module (``_new_instance``): its compiled models are its own."""
        instance = _new_instance(self)
        self._specs = {dtype: _spec_text(self._spec(dtype), self._launches, instance=instance)
                       for dtype in _TORCH_DTYPES.values()}
        self._levels = {(dtype, k): self._level_spec(dtype, k, instance)
                        for dtype in _TORCH_DTYPES.values() for k in range(self.num_layers)} \
            if self.num_layers > 1 else {}

    @property
    def launches(self) -> str:
        """"eager" or "graph": what this module's plans are made for (the class's docstring)."""
        return self._launches

    @launches.setter
    def launches(self, value: str) -> None:
        self._launches = _check_launches(f"rnncc.nn.{type(self).__name__}", value)
        self._make_specs()

    def flatten_parameters(self) -> None:
        """Nothing to do: rnncc packs the weights for its kernels itself (once, and again
        when a parameter changes). Here so that code written for torch.nn, which often
        calls it in forward, runs unchanged."""

    @property
    def all_weights(self) -> list[list[torch.nn.Parameter]]:
        """The parameters per layer and direction, as torch.nn's ``all_weights``."""
        return [[getattr(self, f"{n}_{suffix}") for n in _parameter_kinds(self.bias, bool(self.proj_size))]
                for suffix in self._suffixes]

    def reset_parameters(self) -> None:
        """torch.nn's initialisation: every parameter uniform in ±1/√hidden_size."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            torch.nn.init.uniform_(p, -bound, bound)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.bidirectional:
            s += ", bidirectional=True"
        if self.proj_size:
            s += f", proj_size={self.proj_size}"
        if self._launches != "eager":
            s += f", launches={self._launches!r}"
        return s + self._extra()

    def _extra(self) -> str:
        return ""

    def _cell(self) -> str:
        raise NotImplementedError

    def _spec(self, dtype: str, input_size: int | None = None, layers: int | None = None) -> IrModel:
        """The stack's spec; with ``input_size`` and ``layers``, a stack of such layers
        reading that width instead (one level of it: ``_level_spec``)."""
        return IrModel.from_dict({
            "name": f"rnncc_nn_{type(self).__name__.lower()}", "dtype": dtype,
            "input_size": input_size or self.input_size,
            "layers": [{"name": f"l{k}", "cell": self._cell(), "hidden_size": self.hidden_size,
                        "bias": self.bias}
                       | ({"proj_size": self.proj_size} if self.proj_size else {})
                       | ({"direction": "bidirectional"} if self.bidirectional else {})
                       for k in range(layers or self.num_layers)]})

    @property
    def _dropout_between_layers(self) -> float:
        """The dropout a forward applies between layers now: ``dropout`` in training mode
        with several layers, else 0."""
        return self.dropout if self.training and self.num_layers > 1 else 0.0

    def _weights(self) -> dict[str, torch.Tensor]:
        """The parameters by rnncc's names (``l0.weight_ih`` …), not detached (the kernels
        only read them). From ``_parameters`` directly, the names paired once: ``getattr``
        on a module and formatting the names cost microseconds a forward, a noticeable
        part of a small model's host time."""
        params = self._parameters
        return {ours: params[theirs] for ours, theirs in self._weight_names}

    def forward(self, input: torch.Tensor | PackedSequence, hx=None):
        if hx is None and type(input) is torch.Tensor and not torch.is_grad_enabled():
            out = self._forward_plain(input)
            if out is not None:
                return out
        if isinstance(input, PackedSequence):
            return self._forward_packed(input, hx)
        return self._forward_tensor(input, hx, self.batch_first)

    def _forward_tensor(self, input: torch.Tensor, hx, batch_first: bool,
                        lengths: torch.Tensor | None = None):
        """forward on a tensor, checked; ``lengths`` (a CPU tensor [B]) runs sequences of
        different lengths (time-major input, from a PackedSequence)."""
        name = f"rnncc.nn.{type(self).__name__}"
        lstm = self._cell() == "lstm"
        states = (hx if isinstance(hx, tuple) else (hx,)) if hx is not None else ()
        dropout = self._dropout_between_layers
        needs_grad = _needs_grad((input, *states), self.parameters())
        _refuse_training(name, needs_grad, input.is_cuda, self.proj_size, lengths is not None)
        param_dtype = self._parameters["weight_ih_l0"].dtype
        dtype = _TORCH_DTYPES.get(param_dtype)
        if dtype is None and input.is_cuda:
            raise SpecError(f"{name}: parameters are {param_dtype}; the GPU path "
                            "runs float32, float16 or bfloat16")
        if input.dtype != param_dtype:
            raise RuntimeError(f"{name}: input is {input.dtype} but the parameters are "
                               f"{param_dtype}; expected the same dtype")
        unbatched = input.dim() == 2
        if input.dim() not in (2, 3) or input.shape[-1] != self.input_size:
            raise RuntimeError(f"{name}: input of shape {tuple(input.shape)}, expected "
                               f"(S, B, {self.input_size}){' batch first' if batch_first else ''}"
                               f" or unbatched (S, {self.input_size})")
        x = input.unsqueeze(0 if batch_first else 1) if unbatched else input
        B = x.shape[0 if batch_first else 1]
        state = {}
        if hx is not None:
            parts = hx if lstm else (hx,)
            if lstm and (not isinstance(hx, tuple) or len(hx) != 2):
                raise RuntimeError(f"{name}: hx must be a tuple (h_0, c_0)")
            LD = len(self._suffixes)  # layers × directions, torch.nn's first dimension
            # h is proj_size wide where there is a projection, c hidden_size.
            for p, width in zip(parts, (self.proj_size or self.hidden_size, self.hidden_size)):
                want = (LD, width) if unbatched else (LD, B, width)
                if tuple(p.shape) != want:
                    raise RuntimeError(f"{name}: initial state of shape {tuple(p.shape)}, "
                                       f"expected {want}")
            parts = [p.unsqueeze(1) if unbatched else p for p in parts]
            for k, layer in enumerate(self._suffixes):
                state[layer] = tuple(p[k].contiguous() for p in parts) if lstm \
                    else parts[0][k].contiguous()
        spec = self._specs[dtype or "float32"]
        if x.is_cuda and dropout:
            outs, final = self._run_levels(dtype, x, state, batch_first, lengths, dropout)
            h_n, c_n = _stacked_finals([final[layer] for layer in self._suffixes], lstm)
        elif x.is_cuda and type(x) is torch.Tensor and not torch.compiler.is_compiling() and not needs_grad:
            # Eager: the compiled model writes torch.nn's h_n (c_n) [L, B, H] in place.
            outs, final = _runner_of(spec).gpu(_model_of(spec), self._weights(), x, state,
                                               batch_first, stacked_state=True, lengths=lengths)
            h_n, c_n = final if lstm else (final, None)
        else:
            S, B = x.shape[:2] if not batch_first else x.shape[1::-1]
            width = (self.proj_size or self.hidden_size) * (1 + self.bidirectional)
            masks = _dropout_masks(self._suffixes, 1 + self.bidirectional, width, dropout, S, B) \
                if dropout else None
            outs, final = _run(spec, self._layout, self._weights(), x, state, batch_first,
                               lengths=lengths, dropout_masks=masks)
            h_n, c_n = _stacked_finals([final[layer] for layer in self._suffixes], lstm)
        y = outs[0]
        if unbatched:
            y = y.squeeze(0 if batch_first else 1)
            h_n = h_n.squeeze(1)
            c_n = c_n.squeeze(1) if lstm else None
        return (y, (h_n, c_n)) if lstm else (y, h_n)

    def _run_levels(self, dtype: str, x: torch.Tensor, state: dict, batch_first: bool,
                    lengths: torch.Tensor | None, p: float):
        """(outputs, final state by layer) as ``_run`` gives them, with dropout between
        layers on CUDA: one level (layer k and its reverse) at a time, as a one-level model,
        each level past the first reading the one before times a mask of 0 and 1/(1 − p)
        drawn by torch's CUDA generator, in the layer's type. The masks are constants to
        autograd, so the gradient of a level's input is its own times the mask, as torch's.
        The levels do not overlap in time, which the whole stack's kernels could."""
        D = 1 + self.bidirectional
        y, final = x, {}
        for k in range(self.num_layers):
            level = self._suffixes[k * D:(k + 1) * D]
            alone = dict(zip(level, self._suffixes[:D]))  # its layers' names in the level's spec
            spec, layout = self._levels[dtype, k]
            if k:
                y = y * _dropout_mask(torch.rand(y.shape, device=y.device), p).to(y.dtype)
            weights = {}
            for ours, theirs in self._weight_names:
                layer, _, kind = ours.partition(".")
                if layer in alone:
                    weights[f"{alone[layer]}.{kind}"] = self._parameters[theirs]
            given = {alone[name]: state[name] for name in level if name in state}
            (y, *_), ends = _run(spec, layout, weights, y, given, batch_first, lengths=lengths)
            final |= {name: ends[alone[name]] for name in level}
        return (y,), final

    def _level_spec(self, dtype: str, k: int, instance: str) -> tuple[str, tuple]:
        """(JSON spec, layout) of level k of this stack run alone, reading the input (k = 0)
        or the level before, with layer names l0 (and l0_reverse)."""
        width = (self.proj_size or self.hidden_size) * (1 + self.bidirectional)
        model = self._spec(dtype, width if k else self.input_size, 1)
        return _spec_text(model, self._launches, instance=f"{instance}/{k}"), _layout(model)

    def _forward_plain(self, x: torch.Tensor):
        """The common eager call — a batched CUDA tensor in the parameters' dtype, features
        contiguous, no initial state, grad mode off (so nothing to refuse), no dropout to
        apply — straight to the compiled model's entry for checked tensors
        (``CompiledModel.run_torch``); None
        for anything else, which ``forward`` checks and runs the general way (with its
        error messages). Its host time decides a small model's eager time: this path does
        each check once, where the general one repeats the compiled model's
        (benchmarks/twin_gap.py)."""
        if not (x.is_cuda and x.dim() == 3 and x.shape[2] == self.input_size and x.stride(2) == 1) \
                or torch.compiler.is_compiling() or self._dropout_between_layers:
            return None
        dtype = _TORCH_DTYPES.get(x.dtype)
        if dtype is None or x.dtype != self._parameters["weight_ih_l0"].dtype:
            return None
        spec = self._specs[dtype]
        y, final = _runner_of(spec).compiled_for(_model_of(spec), self._weights(), x) \
            .run_torch(x, self.batch_first)
        return y, final

    def _forward_packed(self, packed: PackedSequence, hx):
        """A PackedSequence (sequences of different lengths) in one call, as torch.nn runs
        it: each sequence's outputs up to its length, h_n/c_n at its last step (for the
        backward direction, at its first), hx and h_n in the caller's order of sequences.

        The packed data runs longest first; padded into [S_max, B, I] in that order, with
        each row's length, the kernels stop each row at its own length (a row that has
        ended keeps its state; a reverse layer's row starts at its own end) and the outputs
        past it are zero. Not traceable by torch.compile (shapes depend on the lengths).
        """
        batch_sizes = packed.batch_sizes  # on the CPU: rows still running at each step
        S, B = len(batch_sizes), int(batch_sizes[0])
        running = torch.arange(B) < batch_sizes[:, None]  # [S, B]
        lengths = running.sum(0, dtype=torch.int32)
        # The packed rows' places in the padded [S·B] rows, in packed order (time-major),
        # worked out on the host (a boolean mask on the device would wait for the GPU) and
        # sent from pinned memory, as the lengths are (from pageable memory a copy may wait
        # for the stream: the twin took 1.85 ms where its compiled model took 1.19).
        rows = running.flatten().nonzero().flatten()
        if packed.data.is_cuda:
            rows, lengths = (t.pin_memory().to(packed.data.device, non_blocking=True)
                             for t in (rows, lengths))
        padded = packed.data.new_zeros(S * B, packed.data.shape[-1]) \
            .index_copy_(0, rows, packed.data).view(S, B, -1)
        if hx is not None:
            hx = _permute_rows(hx, packed.sorted_indices)
        y, state = self._forward_tensor(padded, hx, False, lengths)
        out = PackedSequence(y.reshape(S * B, -1).index_select(0, rows), batch_sizes,
                             packed.sorted_indices, packed.unsorted_indices)
        return out, _permute_rows(state, packed.unsorted_indices)


class LSTM(_RecurrentTwin):
    """``torch.nn.LSTM`` run by rnncc, ``proj_size`` included (h = W_hr (o ⊙ tanh c))."""

    _gates = 4

    def _cell(self) -> str:
        return "lstm"


class GRU(_RecurrentTwin):
    """``torch.nn.GRU`` run by rnncc."""

    _gates = 3

    def _cell(self) -> str:
        return "gru"


class RNN(_RecurrentTwin):
    """``torch.nn.RNN`` (tanh or relu) run by rnncc."""

    def __init__(self, *args, nonlinearity: str = "tanh", **kwargs):
        if nonlinearity not in ("tanh", "relu"):
            raise SpecError(f"rnncc.nn.RNN: nonlinearity={nonlinearity!r}, expected 'tanh' or 'relu'")
        self.nonlinearity = nonlinearity
        super().__init__(*args, **kwargs)

    def _cell(self) -> str:
        return f"rnn_{self.nonlinearity}"

    def _extra(self) -> str:
        return "" if self.nonlinearity == "tanh" else ", nonlinearity='relu'"


class _LayerParameters(torch.nn.Module):
    def __init__(self, gates: int, hidden: int, inputs: int, bias: bool, proj: int = 0, **kw):
        super().__init__()
        self.weight_ih = torch.nn.Parameter(torch.empty(gates * hidden, inputs, **kw))
        self.weight_hh = torch.nn.Parameter(torch.empty(gates * hidden, proj or hidden, **kw))
        if bias:
            self.bias_ih = torch.nn.Parameter(torch.empty(gates * hidden, **kw))
            self.bias_hh = torch.nn.Parameter(torch.empty(gates * hidden, **kw))
        if proj:
            self.weight_hr = torch.nn.Parameter(torch.empty(proj, hidden, **kw))
        bound = 1.0 / math.sqrt(hidden)
        for p in self.parameters():
            torch.nn.init.uniform_(p, -bound, bound)


class Model(_SpecsOfItsOwn):
    """Any rnncc spec (skip connections included) as a module: parameters per layer
    (``layers.<name>.weight_ih`` …, PyTorch's shapes), ``forward(x, state=None)`` returning
    ``(y, state)`` like a compiled model (``y`` a tuple when the spec has several outputs).
    ``launches``: as the twins' (``LSTM``)."""

    def __init__(self, spec, batch_first: bool = False, device=None, dtype=None, *, launches: str = "eager"):
        super().__init__()
        self.spec = load_spec(spec)
        self.batch_first = batch_first
        torch_dtype = dtype or {v: k for k, v in _TORCH_DTYPES.items()}[self.spec.dtype]
        self.layers = torch.nn.ModuleDict({
            l.name: _LayerParameters(l.gates, l.hidden_size, l.input_size, l.bias, l.proj_size,
                                     device=device, dtype=torch_dtype)
            for l in self.spec.layers})
        self._owner = f"rnncc.nn.Model('{self.spec.name}')"
        self._launches = _check_launches(self._owner, launches)
        self._make_specs()
        self._layout = _layout(self.spec)

    def _make_specs(self) -> None:
        """The spec of each dtype, naming this module (``_new_instance``)."""
        instance = _new_instance(self)
        self._specs = {dtype: _spec_text(IrModel.from_dict({**self.spec.to_dict(), "dtype": dtype}),
                                         self._launches, instance=instance)
                       for dtype in _TORCH_DTYPES.values()}

    def forward(self, x: torch.Tensor, state: Mapping[str, Any] | None = None):
        needs_grad = _needs_grad((x, *_state_tensors(state or {})), self.parameters())
        _refuse_training(self._owner, needs_grad, x.is_cuda,
                         proj_size=max(l.proj_size for l in self.spec.layers))
        dtype = _TORCH_DTYPES.get(next(self.parameters()).dtype, self.spec.dtype)
        # Not detached: on the CPU the reference's backward gives the parameters' gradients.
        weights = {f"{name}.{k}": p for name, layer in self.layers.items()
                   for k, p in layer.named_parameters()}
        outs, final = _run(self._specs[dtype], self._layout, weights, x, dict(state or {}),
                           self.batch_first)
        return (outs[0] if len(outs) == 1 else outs), final


# ---- optimize ---------------------------------------------------------------------------

_TWINS = {torch.nn.LSTM: LSTM, torch.nn.GRU: GRU, torch.nn.RNN: RNN}


def twin_of(module: torch.nn.Module) -> tuple[torch.nn.Module | None, str]:
    """(the rnncc twin of a torch.nn.LSTM/GRU/RNN with its weights, device, dtype and
    requires_grad flags, or None; a description, or why not)."""
    cls = _TWINS.get(type(module))
    if cls is None:
        return None, f"{type(module).__name__} is not an nn.LSTM, nn.GRU or nn.RNN"
    p = module.weight_ih_l0
    if p.dtype not in (*_TORCH_DTYPES, torch.float64):
        return None, f"parameters are {p.dtype}"
    kwargs = dict(input_size=module.input_size, hidden_size=module.hidden_size,
                  num_layers=module.num_layers, bias=module.bias, batch_first=module.batch_first,
                  dropout=module.dropout, bidirectional=module.bidirectional, device=p.device,
                  dtype=p.dtype)
    if cls is RNN:
        kwargs["nonlinearity"] = module.nonlinearity
    if getattr(module, "proj_size", 0):
        kwargs["proj_size"] = module.proj_size
    twin = cls(**kwargs)
    twin.load_state_dict(module.state_dict())
    for name, param in twin.named_parameters():
        param.requires_grad_(getattr(module, name).requires_grad)
    twin.train(module.training)
    what = (f"nn.{type(module).__name__}({module.input_size}, {module.hidden_size}, "
            f"num_layers={module.num_layers}{', bidirectional=True' if module.bidirectional else ''}"
            f"{f', proj_size={module.proj_size}' if getattr(module, 'proj_size', 0) else ''}, "
            f"{str(p.dtype).removeprefix('torch.')})")
    return twin, what


def optimize(model: torch.nn.Module, verbose: bool = True, launches: str = "eager") -> torch.nn.Module:
    """Replace, in place, every ``torch.nn.LSTM/GRU/RNN`` inside ``model`` that rnncc can
    run by its ``rnncc.nn`` twin with the same weights; leave everything else alone.
    Returns the model (the twin itself when ``model`` is one) and, with ``verbose``,
    prints what it replaced and why it skipped anything. ``launches="graph"``: for a model
    whose calls will be captured in CUDA graphs (``torch.cuda.graph``,
    ``torch.compile(mode="reduce-overhead")``), the twins plan for graphed calls
    (CompileOptions.launches)."""
    _check_launches("rnncc.optimize", launches)
    report: list[str] = []
    done: dict[int, torch.nn.Module | None] = {}  # a module shared by two parents: one twin

    def swap(module: torch.nn.Module, path: str) -> torch.nn.Module | None:
        if id(module) not in done:
            twin, what = twin_of(module)
            if twin is not None:
                twin.launches = launches
            done[id(module)] = twin
            report.append(f"replaced {path or '(the model)'}: {what} → rnncc.nn.{type(module).__name__}"
                          if twin is not None else f"skipped {path or '(the model)'}: {what}")
        return done[id(module)]

    if type(model) in _TWINS:
        twin = swap(model, "")
        result = twin if twin is not None else model
    else:
        result = model
        for parent_path, parent in list(model.named_modules()):
            for name, child in list(parent.named_children()):
                if type(child) in _TWINS:
                    twin = swap(child, f"{parent_path}.{name}" if parent_path else name)
                    if twin is not None:
                        setattr(parent, name, twin)
    if verbose:
        for line in report or ["nothing to replace: no nn.LSTM, nn.GRU or nn.RNN inside"]:
            print(f"rnncc.optimize: {line}")
    return result
