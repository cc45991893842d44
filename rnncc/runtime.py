"""Runtime: a compiled model, its plans per shape class, and the forward on the GPU.

Nothing here renders or plans on its own: a call in a new shape class asks the pipeline
(:mod:`rnncc.pipeline`) for that class's plan and kernels. The device (context, loading,
launches, memory) is :mod:`rnncc.driver`; grids and argument lists are :mod:`rnncc.launch`.

A call owns everything it writes: its workspace (projection buffer, cell state, the
sequences of inner layers, grid-barrier words, cuBLASLt scratch) is taken on the call's
stream, from PyTorch's caching allocator for PyTorch tensors and from the driver's
stream-ordered pool otherwise, and given back in stream order when the call has queued its
work. So one model can be called from several streams and threads at once. Kernels run
on the caller's stream (PyTorch's or CuPy's current one, else the legacy default), so they
order with the caller's work and a ``torch.cuda.graph`` captures them; a call never
synchronises, except to copy NumPy results back. A pipelined schedule (passes/schedule.py)
runs each layer on a side stream of the caller's stream, forked from it and joined back
to it by events, so that the caller (and a graph capture) sees one stream's work.

Knobs: ``RNNCC_DEBUG_POISON=1`` fills every output and workspace buffer with NaN bytes
first, so an element no kernel wrote shows up as NaN. ``RNNCC_SPIN_TIMEOUT_MS`` (default
1000) bounds every spin-wait of a persistent kernel; 0 makes the first wait give up (a
debug knob that shows the error path).
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from . import arrays, build, call_program, codegen, cublaslt, driver, launch, pipeline, target as target_mod
from . import weights as weights_mod
from .dtypes import DTYPES, round_to, to_storage
from .errors import DeviceTimeout, RuntimeCheckError
from .ir import INPUT, Model
from .launch import Sequence
from .passes.fusion import with_persistence_forced
from .passes.cost import REPLAY_BYTES, REPLAY_MIN_OPERATIONS
from .passes.schedule import Task, queue_order
from .passes.shapes import shape_class
from .passes.workspace import (library_scratch_bytes, library_scratch_parts, part_name, pipelined,
                               projection_chunk_bytes, uses_library, workspace_parts)
from .plan import Decision, Plan
from .tiles import StepRows, library_padded_sizes

DEFAULT_SPIN_TIMEOUT_MS = 1000
_ALIGN = 256  # bytes: every workspace part starts on this boundary
_TIMEOUT_WHAT = {1: "grid barrier", 2: "cluster exchange (mbarrier wait)",
                 3: "wait for its producers' projection chunks"}


@dataclass(frozen=True)
class Variant:
    """The plan of one shape class and its kernels: those of calls without lengths, or
    with ``lengths`` those of calls with sequences of different lengths (same plan)."""

    shape_class: tuple[int, int]
    plan: Plan
    kernels: tuple[codegen.KernelSource, ...]
    lengths: bool = False
    # kernel_of's answers, looked up on every launch of every call (a cache, not a value).
    _kernel_of: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def kernel_of(self, user: str, family: str) -> codegen.KernelSource | None:
        """The kernel of ``family`` (a prefix: "input_projection", "recurrent", "merge")
        that layer or output ``user`` runs; None where it has none (a cuBLASLt call)."""
        key = (user, family)
        if key not in self._kernel_of:
            self._kernel_of[key] = next(
                (k for k in self.kernels if user in k.users and k.family.startswith(family)), None)
        return self._kernel_of[key]

    @property
    def key(self) -> tuple[int, int, bool]:
        return (*self.shape_class, self.lengths)

    @property
    def uses_library(self) -> bool:
        """Whether a layer runs a GEMM in cuBLASLt (its projection or its step's product)."""
        return any(uses_library(l) for l in self.plan.layers)


def _variant_weights(l, itemsize: int) -> tuple[str, ...]:
    """Device weights layer l's plan reads beyond those every plan reads (_upload_weights):
    "w_fold_t" where it is folded, "w_hh" (W_hh as stored) where its steps run the step
    kernel's rows form, "w_ih_rows" (W_ih, rows padded) where its projection's rows kernel
    needs whole 16-byte rows, "w_hh_t_padded" (W_hhᵀ padded with zeros to the sizes of
    LayerPlan.library_padding) where cuBLASLt's step product runs at padded sizes,
    "w_ih_padded" (W_ih's rows padded with zeros to LayerPlan.projection_padded_k) where
    its projection does, W_hh
    (or the folded matrix) as a tensor-core persistent kernel holds it, in its tile's
    order (weights.fragments_name)."""
    names = ("w_fold_t",) if l.folded else ()
    if l.library_padding(itemsize):
        names += ("w_hh_t_padded",)
    if l.projection_padded_k:
        names += ("w_ih_padded",)
    if l.fragments_tile is not None:
        names += (weights_mod.fragments_name(l.fragments_tile, l.hidden_size, folded=l.folded),)
    if l.steps_by_rows:
        names += ("w_hh",)
    if launch.projection_weights(l) == "w_ih_rows":
        names += ("w_ih_rows",)
    return names


# The variant weights (_variant_weights) that are a packed matrix padded with zeros
# (weights.padded_rows), and which: W_ih's rows (for rnncc's rows kernel, or for cuBLASLt's
# projection), W_hh's interleaved rows (W_hhᵀ transposed, weights.rows_of_w_hh), W_hhᵀ padded
# to a library step's sizes.
_PADDED = {"w_ih_rows": "w_ih", "w_hh": "w_hh_t", "w_hh_t_padded": "w_hh_t", "w_ih_padded": "w_ih"}


def _device_allocation(nbytes: int):
    """Raw device memory, for array kinds without an allocator of their own."""
    import pycuda.driver as cuda
    return cuda.mem_alloc(nbytes)


def _torch_tensors(state: Mapping[str, Any], x) -> dict[str, tuple]:
    """The initial states' tensors per layer ((h,) or (h, c)), where every one is a
    contiguous tensor of x's type (what a graph's input copy takes); else {}."""
    out = {}
    for name, given in state.items():
        parts = tuple(given) if isinstance(given, (tuple, list)) else (given,)
        if not all(type(t) is type(x) and t.is_contiguous() for t in parts):
            return {}
        out[name] = parts
    return out


def _extent(v: arrays.DeviceView) -> int:
    """Bytes from a view's pointer to one past its last element."""
    return (sum((n - 1) * abs(st) for n, st in zip(v.shape, v.strides)) + 1) * DTYPES[v.dtype].itemsize


def _pointer_of(made: tuple[Any, arrays.DeviceView]) -> tuple[Any, int]:
    return made[0], made[1].ptr


class _CallMemory:
    """Device memory of one call, on the call's stream: PyTorch's caching allocator for a
    call on PyTorch tensors (stream-ordered reuse, as torch.nn does), else the driver's
    stream-ordered pool. Memory that a kernel on one stream may still use is never handed
    to work on another stream, and a new shape frees nothing under running kernels."""

    def __init__(self, torch_device: Any, stream: int, poison: bool) -> None:
        self._torch_device, self._stream, self.poison = torch_device, stream, poison
        self._held: list[Any] = []

    def take(self, nbytes: int, poison: bool = True) -> int:
        """``nbytes`` for this call; filled with NaN bytes under RNNCC_DEBUG_POISON unless
        ``poison`` is False (scratch that no result is read from)."""
        nbytes = max(nbytes, 1)
        if self._torch_device is not None:
            import torch
            t = torch.empty(nbytes, dtype=torch.uint8, device=self._torch_device)
            self._held.append(t)
            ptr = t.data_ptr()
        else:
            ptr = driver.alloc_async(nbytes, self._stream)
            self._held.append(ptr)
        if poison and self.poison:
            driver.memset_async(ptr, 0xFF, nbytes, self._stream)
        return ptr

    def release(self) -> None:
        """Give everything back, ordered after the work queued on the stream so far."""
        if self._torch_device is None:
            for ptr in self._held:
                driver.free_async(ptr, self._stream)
        self._held = []


# A forward call of a PyTorch tensor replayed from a CUDA graph (call_graphs.py) queues one
# copy and one graph launch where its program queues each of its operations from Python
# (a cuBLASLt call ~17 µs of host, a launch ~10, an event 1-2). That pays where a call queues
# many: 8 × LSTM fp16 H=512 B=8, pipelined, ran 1.911 → 1.680 ms eager. A one-layer call
# queues 3-4, which the copy and the graph launch cost as much as: LSTM fp16 H=512 B=8 0.423
# → 0.421 ms, H=256 0.304 → 0.327 (results/replay-status-h100-2026-11-27-at-2c22d9a.jsonl,
# at 2c22d9a, where every call of ≤ 64 MiB was graphed). The graph keeps the call's
# workspace and outputs for its life (up to GRAPHS_A_MODEL graphs), which bounds the bytes:
# past them a model would hold over half a GiB for calls whose GPU time hides more of the
# host's.
# The planner prices pipelined eager calls and layers a launch a step by the same rule
# (passes/schedule.replayed, passes/persistence.per_step_replayed).
GRAPH_MIN_OPERATIONS = REPLAY_MIN_OPERATIONS
FORWARD_GRAPH_BYTES = REPLAY_BYTES
GRAPHS_A_MODEL = 4


@dataclass(frozen=True)
class _Recorded:
    """A call signature's recorded call (see CompiledModel._run): the variant it ran, its
    program, or None and why it cannot be replayed (each call of it runs the forward),
    whether its buffers are poisoned (the debug knob, part of the signature), and whether
    it is replayed from a CUDA graph (never under the debug knob: a graph's outputs are
    copies of the graph's own, which a replay would not poison)."""

    variant: Variant
    program: call_program.CallProgram | None
    why_not: str
    poison: bool
    graphed: bool = False  # replayed from a CUDA graph once seen again (GRAPH_MIN_OPERATIONS)


@dataclass(frozen=True)
class _LayerRun:
    """What one layer of a call reads and writes besides its weights."""

    layer: Any             # LayerPlan
    index: int             # in the model's layers (its status word, its slot in stacked states)
    y: Sequence            # h of every step (for a residual layer, its own buffer; for a
                           # reverse layer, in its order of steps)
    residual: launch.Residual | None
    h0: tuple[int, int] | None
    c0: int
    c_arr: Any
    c_view: arrays.DeviceView | None
    lengths: int = 0       # the call's lengths on the device (0: none)
    h_final: int = 0       # where the recurrent kernel writes h_n at the call's last step (0: copied after)
    gates: launch.Gates = launch.NO_GATES  # where a training forward writes the pre-activations


class _Stamps:
    """Timing events around each layer's chunks of one call: its measured timeline."""

    def __init__(self, stream: int) -> None:
        self.origin = driver.event_create(timing=True)
        driver.event_record(self.origin, stream)
        self.marks: list[tuple[str, int, int, int]] = []  # (layer, chunk, start event, end event)

    def mark(self, stream: int) -> int:
        """A timing event recorded on ``stream`` now."""
        event = driver.event_create(timing=True)
        driver.event_record(event, stream)
        return event

    def span(self, layer: str, chunk: int, start: int, stream: int) -> None:
        """The chunk ``chunk`` of ``layer`` that began at event ``start`` ends now."""
        self.marks.append((layer, chunk, start, self.mark(stream)))

    def tasks(self) -> list[Task]:
        """The chunks with their start and end in seconds from the call's start (waits for
        the GPU), the events destroyed."""
        out = [Task(layer, chunk, driver.elapsed_ms(self.origin, a) / 1e3,
                    driver.elapsed_ms(self.origin, b) / 1e3) for layer, chunk, a, b in self.marks]
        for _, _, a, b in self.marks:
            driver.event_destroy(a)
            driver.event_destroy(b)
        driver.event_destroy(self.origin)
        return sorted(out, key=lambda t: (t.start, t.layer))


def _layout(parts: list[tuple[str, int]]) -> tuple[dict[str, int], int]:
    """Byte offsets of named parts in one block, each aligned to _ALIGN, and the total."""
    offsets, total = {}, 0
    for name, size in parts:
        offsets[name] = total
        total += -(-size // _ALIGN) * _ALIGN
    return offsets, total


class CompiledModel:
    """A model compiled for a target: plans and CUDA source now, cubins and a callable
    forward on first use.

    ``y, state = model(x, state=None, batch_first=False)`` runs it (see :meth:`__call__`).
    ``model.plan`` and ``model.kernels`` are the plan of the compile hints and its kernels;
    ``model.variant(S, B)`` the plan and kernels that a call of that shape runs.
    ``model.kernel_of("l0", "recurrent").source`` is the CUDA of layer l0's recurrent
    kernel (``.header`` says which model, layers and decisions it was rendered for).
    """

    def __init__(self, model: Model, plan: Plan, target: target_mod.Target,
                 kernels: tuple[codegen.KernelSource, ...], weights: Mapping[str, Any] | None,
                 seed: int = 0):
        self.model = model
        self.plan = plan
        self.target = target
        self.kernels = kernels
        # Given weights are checked now; the default random ones (from seed) are drawn on
        # first use, so that compiling and explaining cost no weight generation.
        self._weights_now = None if weights is None else weights_mod.check(model, weights)
        self._seed = seed
        hinted = shape_class(plan.options.seq_len, plan.options.batch)
        self._variants: dict[tuple[int, int], Variant] = {hinted: Variant(hinted, plan, kernels)}
        self._lock = threading.Lock()
        self._functions: dict[str, driver.Kernel] = {}
        self._loaded: set[tuple[int, int, bool]] = set()  # Variant.key of those loaded
        self._with_lengths: dict[tuple[int, int], Variant] = {}  # see variant()
        self._resident: dict[str, int] = {}
        self._device_weights: dict[str, dict[str, int]] | None = None
        self._device_weight_bytes: dict[int, int] = {}  # pointer → bytes of each packed array
        self._weights_on_device: dict[str, Any] | None = None  # refresh_weights' tensors, not read back
        # (layer, device weight) → weights.fragment_index of the fragments uploaded, and on the GPU
        # for refresh_weights (a torch tensor, made on the first refresh)
        self._fragment_index: dict[tuple[str, str], np.ndarray] = {}
        self._fragment_index_on_device: dict[tuple[str, str], Any] = {}
        # (pointer, shape, dtype) → a torch tensor over that device weight (refresh_weights)
        self._weight_tensors: dict[tuple[int, tuple[int, ...], str], Any] = {}
        self._device_memory: list[Any] = []
        self._library: cublaslt.CublasLt | None = None
        self._status: driver.HostWords | None = None
        self._streams = driver.Streams()  # side streams and events of pipelined calls
        self._layouts: dict[tuple, tuple] = {}  # see _workspace_layout
        self._queues: dict[tuple, tuple] = {}  # see _queue
        # Recorded calls per signature (see _run), each also keyed from a PyTorch tensor
        # alone where the call has no states (_replay_key). ``replay = False`` runs the
        # forward every call (same work and results; for measuring what replaying saves).
        self.replay = True
        self._programs: dict[tuple, _Recorded] = {}
        # Calls on PyTorch tensors replayed from CUDA graphs (call_graphs.py, made on first
        # use); ``graphs = False`` replays their programs instead.
        self.graphs = True
        self._graphs = None
        self._replay_type: type | None = None  # torch.Tensor, once a call on one was recorded
        self._constants: list[tuple[int, int]] = []  # (pointer, bytes) of the model's memory
        self._position = {l.name: i for i, l in enumerate(model.layers)}  # in stacked states

    def __repr__(self) -> str:
        p = self.plan
        modes = ", ".join(f"{l.name}: {l.persistence.value.mode}" for l in p.layers)
        return (f"<rnncc.CompiledModel {self.model.name!r}: {len(p.layers)} layers ({modes}), "
                f"{self.model.dtype}, target {self.target.name}, planned for S={p.options.seq_len} "
                f"B={p.options.batch}; {len(self.kernels)} kernels; "
                f"{len(self._variants)} shape class(es) planned>")

    # ---- plans per shape class (no GPU) ----------------------------------------------------
    def variant(self, seq_len: int, batch: int, lengths: bool = False) -> Variant:
        """The plan and kernels a call of (seq_len, batch) runs: the hints' plan in their
        class, else the plan of the call's class, made on first use (see passes/shapes.py).
        With ``lengths``, the kernels of a call with sequences of different lengths: the
        same plan, its recurrent kernels rendered to keep an ended row's state."""
        cls = shape_class(seq_len, batch)
        found = (self._with_lengths if lengths else self._variants).get(cls)
        if found is not None:
            return found
        with self._lock:
            if cls not in self._variants:
                # The class's upper bounds as hints; forced options stay, autotuning's
                # measurements (made for the hints' shape) do not.
                options = replace(self.plan.options, seq_len=cls[0], batch=cls[1], tuned=())
                plan, kernels = pipeline.plan_and_render(self.model, self.target, options)
                self._variants[cls] = Variant(cls, plan, kernels)
            if lengths and cls not in self._with_lengths:
                plan = self._variants[cls].plan
                self._with_lengths[cls] = Variant(cls, plan, codegen.render(plan, lengths=True), True)
            return (self._with_lengths if lengths else self._variants)[cls]

    def with_persistence(self, layer: str, value, why: str) -> "CompiledModel":
        """This model with layer ``layer``'s persistence forced to ``value`` (a
        tiles.Persistent the cost model need not pick: for tile sweeps and tests), its
        kernels rendered again; calls in the hints' shape class run it."""
        plan = self.plan.map_layers(
            lambda l: replace(l, persistence=Decision(value, why, "user")) if l.name == layer else l)
        return self.with_plan(plan.map_layers(
            lambda l: with_persistence_forced(l, plan, self.target) if l.name == layer else l))

    def with_plan(self, plan) -> "CompiledModel":
        """This model (its weights) with ``plan`` in place of the hints' plan, its kernels
        rendered again: for forcing what the planner would not pick (sweeps, tests)."""
        return CompiledModel(self.model, plan, self.target, codegen.render(plan),
                             self._weights_now, self._seed)

    @property
    def variants(self) -> tuple[Variant, ...]:
        """The shape classes planned so far, the hints' first."""
        return tuple(self._variants.values())

    def explain(self, seq_len: int | None = None, batch: int | None = None) -> str:
        """The decisions of the plan a call of (seq_len, batch) runs (default: the hints')."""
        if seq_len is None and batch is None:
            return self.plan.explain()
        return self.variant(seq_len or self.plan.options.seq_len,
                            batch or self.plan.options.batch).plan.explain()

    def kernel(self, name: str) -> codegen.KernelSource:
        """The kernel named ``name`` (see ``kernels``) of any planned class."""
        for v in self._variants.values():
            for k in v.kernels:
                if k.name == name:
                    return k
        raise KeyError(f"no kernel {name!r}; kernels: {', '.join(k.name for k in self.kernels)}")

    def kernel_of(self, user: str, family: str) -> codegen.KernelSource | None:
        """The hints' plan's kernel of ``family`` that layer or output ``user`` runs."""
        return self._variants[shape_class(self.plan.options.seq_len, self.plan.options.batch)] \
            .kernel_of(user, family)

    def write(self, directory: str | os.PathLike) -> list[tuple[Path, bool]]:
        """Write one ``.cu`` per kernel (its model header above its source) and
        ``plan.json``, only files whose content changed; remove ``.cu`` files rnncc wrote
        there before that this plan no longer has. Returns (path, changed) per file."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        written = []
        files = {k.filename: k.header + k.source for k in self.kernels}
        files["plan.json"] = self.plan.to_json()
        for name, text in files.items():
            path = directory / name
            changed = not path.exists() or path.read_text() != text
            if changed:
                path.write_text(text)
            written.append((path, changed))
        for stale in directory.glob("*.cu"):
            if stale.name not in files and "// Generated by rnncc" in stale.read_text():
                stale.unlink()
        return written

    def build(self, jobs: int | None = None, progress=None,
              kernels: tuple[codegen.KernelSource, ...] | None = None) -> dict[str, bytes]:
        """Cubins of every kernel of the hints' plan (or of ``kernels``): nvcc in parallel,
        cached on disk; needs no GPU. ``progress(done, total, name)`` hears of each."""
        return build.compile_all(self.kernels if kernels is None else kernels, self.target.arch,
                                 jobs, progress)

    def kernel_report(self) -> list[dict[str, Any]]:
        """Each kernel with its launch geometry and, once built (``build()``), ptxas's
        registers per thread, static shared memory and spills."""
        out = []
        for k in self.kernels:
            r = build.resources(k, self.target.arch)
            out.append({"name": k.name, "family": k.family, "users": list(k.users),
                        "block": list(k.block), "dynamic_shared_bytes": k.dynamic_shared,
                        "resources": None if r is None else asdict(r)})
        return out

    # ---- weights ---------------------------------------------------------------------
    @property
    def _weights(self) -> dict[str, np.ndarray]:
        if self._weights_now is None:
            if self._weights_on_device is not None:  # refresh_weights' tensors, read back now
                self._weights_now = weights_mod.check(self.model, self._weights_on_device)
                self._weights_on_device = None
            else:
                self._weights_now = weights_mod.init(self.model, self._seed)
        return self._weights_now

    def state_dict(self) -> dict[str, np.ndarray]:
        """Weights as float32 NumPy arrays, named ``<layer>.weight_ih`` etc."""
        return {k: v.copy() for k, v in self._weights.items()}

    def device_weights(self) -> dict[str, np.ndarray]:
        """Weights as the device holds them (rounded to the storage dtype), float32."""
        return {k: round_to(v, self.model.dtype) for k, v in self._weights.items()}

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> None:
        """New weights (PyTorch names per layer), sent to the GPU on the next call. Not to
        be called while another thread's call of this model runs."""
        self._weights_now = {**self._weights, **weights_mod.check(self.model, state_dict, strict)}
        self._weights_on_device = None
        self._device_weights = None
        self._weight_tensors = {}
        self._drop_programs()  # their pointers are the old weights'

    def refresh_weights(self, tensors: Mapping[str, Any], stream: int) -> bool:
        """New weights given as PyTorch CUDA tensors (every parameter, PyTorch names, on
        this model's GPU), packed there by torch's operators on ``stream`` straight into the
        memory the kernels read (``weights.pack_tensors_into``, through tensors over that
        memory), so that recorded calls stay valid and nothing passes through the host: what
        a training step's optimizer changed reaches the next call by device copies. The
        host's copy is read back only when asked for (state_dict, a plan that reads other
        forms of the weights). Returns False, having
        done nothing, where that does not apply (the weights not on the GPU yet, a plan's
        other forms uploaded, a tensor not on the GPU): then call load_state_dict. ``stream``:
        the one the tensors were written on (torch's current), which orders the copies like
        any call: not while another stream's call of this model runs. W_hh as the
        tensor-core persistent kernels hold it (weights.fragment_index) is gathered there too,
        and the padded rows of W_ih and W_hh that rows kernels read are copied there
        (weights.padded_rows: their padding, uploaded as zeros, is not written); a folded
        LSTMP's matrix is not made on the device."""
        expected = weights_mod.expected_keys(self.model)
        base = {name for name, _ in weights_mod.PACKED_ARRAYS}
        if self._device_weights is None or set(tensors) != set(expected) \
                or not all(name in base or name in _PADDED or name.startswith("w_hh_fragments")
                           for names in self._device_weights.values() for name in names) \
                or not all(getattr(t, "is_cuda", False) and tuple(t.shape) == expected[k]
                           for k, t in tensors.items()):
            return False
        import torch

        driver.device_context(0).make_current()
        with self._lock, contextlib.ExitStack() as on_stream:
            if stream != arrays.torch_stream(0):  # the copies are torch's: on the caller's stream
                on_stream.enter_context(torch.cuda.stream(torch.cuda.ExternalStream(stream)))
            for layer in self.model.layers:
                where = self._device_weights[layer.name]
                shapes = weights_mod.packed_tensor_shapes(layer, tensors)
                packed = {name: self._weight_tensor(layer.name, name, where[name], shape,
                                                    weights_mod.packed_dtype(name, self.model.dtype))
                          for name, shape in shapes.items()}
                # Written in place where the kernels read them (no temporaries, no driver
                # copies): each weight one copy from a view of its parameter.
                weights_mod.pack_tensors_into(layer, tensors, packed)
                for name in where:
                    if name in _PADDED:  # the packed matrix, then zeros (rows padded; W_hhᵀ's rows too)
                        values = packed[_PADDED[name]].t() if name == "w_hh" else packed[_PADDED[name]]
                        rows, K = values.shape
                        item = DTYPES[self.model.dtype].itemsize
                        shape = library_padded_sizes(rows, K, item) if name == "w_hh_t_padded" else \
                            (rows, self._device_weight_bytes[where[name]] // (rows * item))
                        self._weight_tensor(layer.name, name, where[name], shape,
                                            self.model.dtype)[:rows, :K].copy_(values)
                    elif name not in base:  # W_hh's fragments, the one other form the check above admits
                        fragments = self._fragments_on_device(layer.name, name, packed["w_hh_t"])
                        self._weight_tensor(layer.name, name, where[name], tuple(fragments.shape),
                                            self.model.dtype).copy_(fragments)
            self._weights_on_device = dict(tensors)
            self._weights_now = None
        return True

    def _weight_tensor(self, layer: str, name: str, ptr: int, shape: tuple[int, ...], dtype: str) -> Any:
        """A torch tensor over the device weight ``name`` of ``layer`` at ``ptr`` (made once),
        after checking that ``shape`` of ``dtype`` is the bytes uploaded there: a write
        through it must not pass the allocation."""
        key = (ptr, shape, dtype)
        tensor = self._weight_tensors.get(key)
        if tensor is None:
            nbytes = math.prod(shape) * DTYPES[dtype].itemsize
            if self._device_weight_bytes[ptr] != nbytes:
                raise RuntimeCheckError(f"weights: layer '{layer}' {name} packs to {nbytes} B on the device, "
                                        f"expected {self._device_weight_bytes[ptr]}")
            tensor = self._weight_tensors[key] = arrays.torch_tensor_at(ptr, shape, dtype, 0)
        return tensor

    def _fragments_on_device(self, layer: str, name: str, w_hh_t: Any) -> Any:
        """weights.fragments_tensor: the packed W_hhᵀ (a torch tensor in the storage dtype,
        on the GPU) in the order of the fragments uploaded as ``name``."""
        import torch

        key = (layer, name)
        index = self._fragment_index_on_device.get(key)
        if index is None:
            index = self._fragment_index_on_device[key] = torch.from_numpy(self._fragment_index[key]).to(w_hh_t.device)
        return weights_mod.fragments_tensor(w_hh_t, index)

    # ---- device ----------------------------------------------------------------------
    def _load(self, variant: Variant) -> None:
        """Load the variant's kernels (built if needed), the weights and the model's
        device-wide pieces (cuBLASLt handle, status words), once each."""
        driver.device_context(0).make_current()
        if variant.key in self._loaded and self._device_weights is not None:
            return
        missing = [k for k in variant.kernels if k.name not in self._functions]
        needs_library = variant.uses_library
        if missing or self._device_weights is None or self._status is None or \
                (needs_library and self._library is None):
            with self._lock:
                missing = [k for k in variant.kernels if k.name not in self._functions]
                cubins = self.build(kernels=tuple(missing)) if missing else {}
                for k in missing:
                    fn = driver.load(k.name, cubins[k.name], k.entry, tuple(p.kind for p in k.params),
                                     k.dynamic_shared, k.cluster)
                    if k.cluster and fn.max_active_clusters(k.cluster, k.block, k.dynamic_shared) < 1:
                        raise RuntimeCheckError(
                            f"layer '{k.owner}': this GPU cannot hold one cluster of {k.cluster} blocks "
                            f"with {k.dynamic_shared // 1024} KiB of shared memory each "
                            "(cuOccupancyMaxActiveClusters is 0); refusing to launch. Compile with "
                            "persistence='grid' or 'none'.")
                    if k.family == "recurrent_persistent":  # the GPU's SMs, not the target's
                        self._resident[k.name] = fn.max_active_blocks_per_sm(k.block, k.dynamic_shared) \
                            * driver.device_context(0).sm_count
                    self._functions[k.name] = fn
                if needs_library and self._library is None:
                    self._library = cublaslt.CublasLt()
                if self._status is None:
                    self._status = driver.HostWords(len(self.model.layers))
                if self._device_weights is None:
                    self._drop_programs()
                    self._device_weights = self._upload_weights()
        if any(name not in self._device_weights[l.name] for l in variant.plan.layers
               for name in _variant_weights(l, DTYPES[self.model.dtype].itemsize)):
            with self._lock:
                self._upload_variant_weights(variant)
        self._loaded.add(variant.key)

    def _upload_variant_weights(self, variant: Variant) -> None:
        """The weights only some plans read, on the first variant that reads them
        (_variant_weights): a folded LSTMP's recurrent matrix (weights.fold_projection), W_hh
        as stored for the step kernel's rows forms, W_ih with padded rows, W_hhᵀ padded to a
        library step's sizes. Added beside the
        weights, which stay where they are (a call on another stream may be reading them)."""
        import pycuda.driver as cuda

        for l in variant.plan.layers:
            layer_weights = self._device_weights[l.name]
            for name in _variant_weights(l, DTYPES[self.model.dtype].itemsize):
                if name in layer_weights:
                    continue
                layer = self.model.layer(l.name)
                if name == "w_fold_t":
                    values = weights_mod.fold_projection(layer, self._weights)
                elif name.startswith(("w_hh_fragments", "w_fold_fragments")):
                    index = weights_mod.fragment_index(l.fragments_tile, l.hidden_size, l.gates,
                                                       DTYPES[self.model.dtype].itemsize)
                    values = weights_mod.fragments(weights_mod.fold_projection(layer, self._weights) if l.folded
                                                   else weights_mod.pack(layer, self._weights).w_hh_t, index)
                    self._fragment_index[(l.name, name)] = index
                elif name == "w_ih_rows":
                    values = weights_mod.padded_rows(weights_mod.pack(layer, self._weights).w_ih,
                                                     l.projection_tile.value.row_stride)
                elif name == "w_ih_padded":
                    values = weights_mod.padded_rows(weights_mod.pack(layer, self._weights).w_ih,
                                                     l.projection_padded_k)
                elif name == "w_hh_t_padded":
                    K_pad, M_pad = l.library_padding(DTYPES[self.model.dtype].itemsize)
                    values = weights_mod.padded_rows(weights_mod.pack(layer, self._weights).w_hh_t, M_pad, K_pad)
                else:
                    values = weights_mod.rows_of_w_hh(layer, self._weights, StepRows.row_stride(
                        l.out_size, DTYPES[self.model.dtype].itemsize))
                host = to_storage(values, self.model.dtype)
                mem = cuda.to_device(host)
                self._device_memory.append(mem)
                self._device_weight_bytes[int(mem)] = host.nbytes
                self._constants.insert(0, (int(mem), host.nbytes))
                layer_weights[name] = int(mem)

    def _upload_weights(self) -> dict[str, dict[str, int]]:
        """Each layer's packed weights on the device: {layer: {"w_ih": pointer, ...}}."""
        import pycuda.driver as cuda

        dtype = self.model.dtype
        out, keep, ranges = {}, [], []
        for layer in self.model.layers:
            packed = weights_mod.pack(layer, self._weights)
            for name, store in weights_mod.PACKED_ARRAYS:
                arr = getattr(packed, name)
                if arr.size == 0:
                    continue
                host = to_storage(arr, dtype) if store else np.ascontiguousarray(arr, np.float32)
                mem = cuda.to_device(host)
                keep.append(mem)
                ranges.append((int(mem), host.nbytes))
                out.setdefault(layer.name, {})[name] = int(mem)
        self._device_memory = keep
        self._device_weight_bytes = dict(ranges)
        # What a recorded call's pointers may keep as they are: the weights, status words.
        self._constants = ranges + [(self._status.device_ptr, 4 * len(self._status.words))]
        return out

    def check_errors(self) -> None:
        """Raise :class:`DeviceTimeout` if a kernel of an earlier call gave up a spin-wait
        (reads host memory the kernels write; no synchronisation: synchronise the call's
        stream first to include calls still running). Each call checks this first."""
        status = self._status
        if status is None:
            return
        words = status.words
        for i, layer in enumerate(self.model.layers):
            code = words[i]
            if code:
                for j in range(len(words)):
                    words[j] = 0
                mode = {1: "grid", 2: "cluster", 3: "cluster"}.get(code, "?")
                bound = os.environ.get("RNNCC_SPIN_TIMEOUT_MS", str(DEFAULT_SPIN_TIMEOUT_MS))
                raise DeviceTimeout(
                    f"layer '{layer.name}' (persistence mode {mode}): a spin-wait in its "
                    f"{_TIMEOUT_WHAT.get(code, 'kernel')} passed its bound "
                    f"(RNNCC_SPIN_TIMEOUT_MS={bound}) and the kernel gave up, so an earlier "
                    "call's outputs are invalid; the model stays usable")

    # ---- forward ---------------------------------------------------------------------
    def __call__(self, x: Any, state: Mapping[str, Any] | None = None, *,
                 batch_first: bool = False, stacked_state: bool = False, lengths: Any = None,
                 gates: Mapping[str, Any] | None = None):
        """Run the model on x: [S, B, I] (or [B, S, I] with ``batch_first``), a NumPy array
        (copied; results come back as NumPy), a PyTorch CUDA tensor, a CuPy array, a PyCUDA
        GPUArray or any ``__cuda_array_interface__`` object (used in place; results of the
        same kind). ``state`` maps layer names to their initial h [B, H] (GRU/RNN) or
        (h, c) (LSTM); missing layers start from zeros. Returns (y, final state): y is one
        array for one output, a tuple for several; the final state maps every layer to
        its h_n or (h_n, c_n). With ``stacked_state`` (layers of one cell and hidden size,
        as torch.nn's) the final state is torch.nn's instead: h_n [L, B, H], or (h_n, c_n)
        for LSTM layers, layers in the model's order, each layer's slice written in place
        (no stacking copies). ``lengths`` runs sequences of different lengths in the one
        call, as torch runs a PackedSequence: row b's steps are 0 … lengths[b]−1 (a reverse
        layer's from lengths[b]−1 down), its final state is that of its last step, and its
        outputs past its length are zero. They are B integers in [0, S] on the host (a
        list, NumPy array or CPU tensor; checked), or B int32 on the device (a CUDA tensor,
        used as they are: unchecked, and capturable in a CUDA graph). ``gates`` (a training
        forward: compiled with backward_gates "auto" or "save") maps layers whose plans save
        them to the device arrays their kernels write the gates' pre-activations into, for
        the backward:
        float32 [S, B, G·H], contiguous, in the order the layer runs its steps (a reverse
        layer's last time step first), torch's gate order; a GRU layer's is a pair (the x
        part with the biases the projection holds, the h part with b_hn). The call is queued
        on the caller's stream and returns without waiting for the GPU (NumPy excepted)."""
        if not state and lengths is None and type(x) is self._replay_type:
            found = self._replayed(x, batch_first, stacked_state, gates)
            if found is not None:
                return found
        return self._call(x, state, batch_first, stacked_state, None, lengths, gates)

    def timeline(self, x: Any, *, batch_first: bool = False) -> list[Task]:
        """Run the model on x once with timing events around every layer's chunks (its
        projection and recurrent launch) and return them as measured: per layer and chunk,
        start and end in seconds from the call's start. Waits for the GPU. The events add
        a little host time; the schedule is the one a call of x's shape runs."""
        stamps: list[_Stamps] = []
        self._call(x, None, batch_first, False, stamps, None)
        return stamps[0].tasks()

    def _call(self, x, state, batch_first: bool, stacked_state: bool, stamps: list | None,
              lengths: Any, gates: Mapping[str, Any] | None = None):
        """__call__'s checks, then the call (``stamps``: where to put the timing events)."""
        dtype = self.model.dtype
        kind = arrays.kind_of(x)
        host = kind in ("numpy", "torch-cpu")
        # Checks first: nothing is launched, allocated or copied for a bad call.
        shape = tuple(x.shape)
        if len(shape) != 3 or shape[2] != self.model.input_size:
            layout = "[B, S, I]" if batch_first else "[S, B, I]"
            raise RuntimeCheckError(f"input: shape {shape}, expected {layout} with "
                                    f"I={self.model.input_size}")
        S, B = (shape[1], shape[0]) if batch_first else (shape[0], shape[1])
        if S < 1 or B < 1:
            raise RuntimeCheckError(f"input: shape {shape}, expected S ≥ 1 and B ≥ 1")
        if host:
            x_host = arrays.host_array(x, "input", dtype)
        else:
            x_view = arrays.view(x, "input", dtype)
            if x_view.strides[2] != 1:
                raise RuntimeCheckError("input: features are not contiguous (stride "
                                        f"{x_view.strides[2]}), expected stride 1; call .contiguous()")
        if stacked_state and len({(l.cell, l.hidden_size, l.proj_size) for l in self.model.layers}) > 1:
            raise RuntimeCheckError(
                "stacked_state: the layers differ in cell, hidden size or proj_size ("
                + ", ".join(f"{l.name} {l.cell} H={l.hidden_size}"
                            + (f" P={l.proj_size}" if l.proj_size else "") for l in self.model.layers)
                + "), expected one cell and size, as torch.nn's stacks have")
        state = dict(state or {})
        for name in state:
            if name not in {l.name for l in self.model.layers}:
                raise RuntimeCheckError(f"state: unknown layer '{name}', expected one of "
                                        f"{', '.join(l.name for l in self.model.layers)}")
        if lengths is not None:
            lengths = arrays.call_lengths(lengths, S, B)
        gate_arrays = self._gate_arrays(gates, S, B, host, lengths is not None) if gates else {}

        return self._run(x, kind, host, x_host if host else None, None if host else x_view, state,
                         S, B, batch_first, stacked_state, stamps, lengths, gate_arrays, gates)

    def _gate_arrays(self, gates: Mapping[str, Any], S: int, B: int, host: bool,
                     lengths: bool) -> dict[str, launch.Gates]:
        """The ``gates`` argument checked: per layer, where its kernels write the
        pre-activations (launch.Gates)."""
        if host or lengths:
            raise RuntimeCheckError("gates: given with " + ("host arrays" if host else "lengths")
                                    + ", expected a call on device arrays without lengths (a training forward)")
        plan = self.variant(S, B).plan
        out = {}
        for name, given in gates.items():
            l = next((l for l in plan.layers if l.name == name), None)
            if l is None:
                raise RuntimeCheckError(f"gates: unknown layer '{name}', expected one of "
                                        f"{', '.join(l.name for l in plan.layers)}")
            if not codegen.saves_gates(l):
                raise RuntimeCheckError(
                    f"gates['{name}']: the layer's plan does not save them (backward_gates: "
                    f"{l.backward_gates.value}); expected a layer whose plan saves (compile with "
                    "backward_gates='auto' or 'save')")
            pair = isinstance(given, (tuple, list)) and len(given) == 2
            if (l.cell == "gru") != pair:  # a tensor is iterable too: its type decides, not len()
                raise RuntimeCheckError(f"gates['{name}']: got {type(given).__name__}"
                                        + (f" of {len(given)}" if isinstance(given, (tuple, list)) else "")
                                        + (", expected a pair (x part, h part) for a GRU layer" if l.cell == "gru"
                                           else ", expected one array for a non-GRU layer"))
            parts = tuple(given) if pair else (given,)
            shape = (S, B, l.gates * l.hidden_size)
            ptrs = []
            for i, p in enumerate(parts):
                where = f"gates['{name}']" + (f"[{i}]" if l.cell == "gru" else "")
                v = arrays.view(p, where, "float32")
                if v.shape != shape or v.strides != arrays.contiguous_strides(shape):
                    raise RuntimeCheckError(f"{where}: shape {v.shape}, strides {v.strides}, expected a "
                                            f"contiguous {shape} = (S, B, G·H)")
                ptrs.append(v.ptr)
            out[name] = launch.Gates(ptrs[0], ptrs[1] if len(ptrs) > 1 else 0, B * l.gates * l.hidden_size)
        return out

    def run_torch(self, x: Any, batch_first: bool = False):
        """``self(x, batch_first=batch_first, stacked_state=True)`` for a caller that has
        checked x already (rnncc.nn's modules): a 3-d PyTorch tensor on cuda:0 in the
        model's dtype, features contiguous; no initial state. It skips __call__'s checks,
        which would repeat the caller's: a small model's eager time is its host time."""
        found = self._replayed(x, batch_first, True)
        if found is not None:
            return found
        S, B = (x.shape[1], x.shape[0]) if batch_first else (x.shape[0], x.shape[1])
        view = arrays.DeviceView(x.data_ptr(), tuple(x.shape), tuple(x.stride()), self.model.dtype, x)
        return self._run(x, "torch", False, None, view, {}, S, B, batch_first, True)

    @staticmethod
    def _replay_key(x, batch_first: bool, stacked: bool, env, gates: Mapping[str, Any] | None = None) -> tuple | None:
        """The signature of a call on a PyTorch tensor with no initial state and no
        lengths, from the tensor alone: everything __call__ checks and _run keys a program
        by (shape, strides, dtype, device, the pointer's alignment, the debug knobs); and
        with ``gates`` (a training forward's buffers, PyTorch tensors) what _gate_arrays
        checks of each: its layer, whether it is a pair, shape, strides, dtype, device and
        alignment. None where a gates buffer is not a PyTorch tensor (the long way)."""
        key = (x.shape, x.stride(), x.dtype, x.device, x.data_ptr() % 256, batch_first, stacked,
               env.get("RNNCC_DEBUG_POISON") == "1", env.get("RNNCC_SPIN_TIMEOUT_MS"))
        if not gates:
            return key
        signature = []
        for name, given in gates.items():
            pair = isinstance(given, (tuple, list))
            parts = tuple(given) if pair else (given,)
            if any(type(t) is not type(x) for t in parts):
                return None
            signature.append((name, pair, tuple((t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % 256)
                                                for t in parts)))
        return (*key, tuple(signature))

    def _replayed(self, x, batch_first: bool, stacked: bool, gates: Mapping[str, Any] | None = None):
        """The result of a call on a PyTorch tensor with no initial state and no lengths
        whose signature a recorded program has (see _run), run with none of the checks
        and lookups before it: they passed for the recorded call and depend only on what
        the key holds. None where there is no such program (the caller goes the long way).
        At LSTM fp16 H=512 B=8 the checks and lookups were ~45 µs of a drained call's host
        time before its first launch (results/call-host-parts-h100-2026-11-25-at-2aa6751.txt).
        A training forward's ``gates`` buffers are the program's inputs after x, in the
        order _run gives them (never replayed from a CUDA graph: the kernels write them)."""
        if not self.replay:
            return None
        key = self._replay_key(x, batch_first, stacked, os.environ, gates)
        found = self._programs.get(key) if key is not None else None
        if found is None:
            return None
        driver.device_context(0).make_current()  # as _load does first
        self.check_errors()
        if found.graphed and self.graphs and x.is_contiguous():
            return self._graph_replayed(found.program, x, key)
        inputs = [x.data_ptr()]
        for given in (gates or {}).values():
            inputs += [t.data_ptr() for t in (given if isinstance(given, (tuple, list)) else (given,))]
        stream = arrays.stream_of(x, "torch")
        memory = _CallMemory(x.device, stream, found.poison)
        return self._replay(found.program, inputs, stream, memory,
                            self._replay_outputs(x, memory, stream))

    @staticmethod
    def _graph_worthy(program: call_program.CallProgram, x, memory: _CallMemory, states: tuple) -> bool:
        """Whether a recorded call is replayed from a CUDA graph once seen again: it queues
        GRAPH_MIN_OPERATIONS or more, and its buffers, input and initial states fit
        FORWARD_GRAPH_BYTES (never under the debug knob: a replay would not poison)."""
        nbytes = program.buffer_bytes(x.element_size()) + x.nbytes + sum(t.nbytes for t in states)
        return not memory.poison and nbytes <= FORWARD_GRAPH_BYTES and program.operations() >= GRAPH_MIN_OPERATIONS

    def _graph_replayed(self, program: call_program.CallProgram, x, key: tuple,
                        states: dict[str, tuple] | None = None, inputs: list[int] = ()):
        """A recorded call on PyTorch tensor x replayed from a CUDA graph of it, captured on
        the second call that gets here (call_graphs.py): x copied into the graph's input,
        the graph launched, each output copied into a new tensor. The graph's input is
        contiguous, so x must be (the caller checks). With initial states (``states``, as
        _torch_tensors gives them), their tensors are copied into the graph's too, and each
        state pointer of ``inputs`` (the program's, after x's) is re-based onto the graph's
        copy of the tensor it lies in. A caller that carries its state from call to call (a
        language model's batches) otherwise queues each launch from Python: 8 × LSTM fp16
        H=512 B=8 in chunks of 16 ran 5.57 ms so against 1.20 replayed
        (results/direct-calls-h100-2026-11-28-at-8563c0a.json; 1.21 ms replayed so, in
        results/direct-calls-h100-2026-11-28.json)."""
        if self._graphs is None:
            from .call_graphs import CallGraphs
            self._graphs = CallGraphs(capacity=GRAPHS_A_MODEL, outputs="separate")
        tensors = [t for parts in (states or {}).values() for t in parts]
        where = []
        for p in inputs[1:]:
            i = next(i for i, t in enumerate(tensors) if t.data_ptr() <= p < t.data_ptr() + t.nbytes)
            where.append((i, p - tensors[i].data_ptr()))

        def body(statics: list) -> list:
            x_ = statics[0]
            stream = arrays.stream_of(x_, "torch")
            memory = _CallMemory(x_.device, stream, False)
            pointers = [x_.data_ptr()] + [statics[1 + i].data_ptr() + offset for i, offset in where]
            result = self._replay(program, pointers, stream, memory, self._replay_outputs(x_, memory, stream))
            return program.result_arrays(result)
        return program.result_of(self._graphs.run(("with states", key) if tensors else key, [x, *tensors], body))

    def _drop_programs(self) -> None:
        """Forget the recorded calls and their graphs (new weights, or too many signatures)."""
        self._programs = {}
        self._graphs = None

    def _replay(self, program: call_program.CallProgram, inputs: list[int], stream: int,
                memory: _CallMemory, make) -> Any:
        """A recorded call run again on ``stream`` (and side streams forked from it, with
        events of its own, where the call is pipelined)."""
        side = self._streams.side(stream, program.side_streams) if program.side_streams else []
        events = self._streams.take(program.events) if program.events else []
        try:
            return program.run(inputs, [stream, *side], events, memory.take, make)
        finally:
            if events:
                self._streams.give_back(events)
            memory.release()

    @staticmethod
    def _replay_outputs(x, memory: _CallMemory, stream: int):
        """make(shape) → (tensor, pointer) for a replayed call on PyTorch tensor x: new
        tensors like x, poisoned under the debug knob as _output poisons them."""
        import torch
        dtype, device = x.dtype, x.device

        def make(shape: tuple[int, ...]) -> tuple[Any, int]:
            t = torch.empty(shape, dtype=dtype, device=device)
            ptr = t.data_ptr()
            if memory.poison:
                driver.memset_async(ptr, 0xFF, t.nbytes, stream)
            return t, ptr
        return make

    def _run(self, x, kind: str, host: bool, x_host, x_view, state, S: int, B: int,
             batch_first: bool, stacked: bool, stamps: list | None = None,
             lengths: "np.ndarray | arrays.DeviceView | None" = None,
             gates: Mapping[str, launch.Gates] | None = None,
             gates_given: Mapping[str, Any] | None = None):
        """A checked call: its plan, memory and debug knobs, then the forward, or the
        program recorded from the first call of the same signature (call_program.py): a
        call on device arrays without lengths or timing events. ``gates_given``: the
        caller's arrays that ``gates`` was checked from (the fast path's key)."""
        variant = self.variant(S, B, lengths is not None)
        self._load(variant)
        self.check_errors()
        stream = arrays.stream_of(x, kind)
        # The debug knobs, read once a call (an environment read costs ~2 µs).
        env = os.environ
        memory = _CallMemory(x.device if kind == "torch" else None, stream,
                             env.get("RNNCC_DEBUG_POISON") == "1")
        spin_ns = int(float(env.get("RNNCC_SPIN_TIMEOUT_MS", DEFAULT_SPIN_TIMEOUT_MS)) * 1e6)
        ops: call_program.Queue = call_program.DIRECT
        key = None
        # Device arrays' initial states, checked once here for the key and the forward.
        initial = {} if host else {l.name: self._initial_state(l, state.get(l.name), B, False, None)
                                   for l in variant.plan.layers if state}
        if self.replay and not (host or stamps is not None or lengths is not None):
            inputs = [x_view.ptr]  # and the initial states', in the order the forward takes them
            for h0, c0 in initial.values():
                inputs += ([h0[0]] if h0 else []) + ([c0] if c0 else [])
            for g in (gates or {}).values():  # then the pre-activations' buffers, as _forward takes them
                inputs += g.pointers()
            # Whatever changes the call's work: its shapes, the input's strides, which
            # layers start from a given state or save gates, the pointers' alignment
            # (cuBLASLt's algorithm), the debug knobs.
            key = (variant.key, S, B, batch_first, stacked, kind, x_view.strides, tuple(state),
                   tuple(gates or ()), tuple(p % 256 for p in inputs), memory.poison, spin_ns)
            found = self._programs.get(key)
            if found is None or found.variant is not variant:
                ops = call_program.Recorder(stream, (x_view.ptr, _extent(x_view)), self._constants)
            elif found.program is not None:
                tensors = _torch_tensors(state, x) if found.graphed and self.graphs and x.is_contiguous() else {}
                if tensors:
                    memory.release()  # the graph's replay has its own
                    return self._graph_replayed(found.program, x, key, tensors, inputs)
                make = self._replay_outputs(x, memory, stream) if kind == "torch" else \
                    lambda shape: _pointer_of(self._output(kind, x, False, shape, memory, stream))
                return self._replay(found.program, inputs, stream, memory, make)
        if stamps is not None:
            stamps.append(_Stamps(stream))
        try:
            result = self._forward(variant, x, kind, host, x_host, x_view, state, initial, S, B,
                                   batch_first, stream, memory, spin_ns, stacked,
                                   stamps[0] if stamps else None, lengths, ops, gates or {})
            if isinstance(ops, call_program.Recorder):
                try:
                    recorded = _Recorded(variant, ops.program(result), "", memory.poison)
                except call_program.Unreplayable as exc:  # each call of it runs the forward
                    recorded = _Recorded(variant, None, str(exc), memory.poison)
                if len(self._programs) >= 256:
                    self._drop_programs()
                tensors = _torch_tensors(state, x) if kind == "torch" and state and not gates else {}
                if recorded.program is not None and tensors:
                    # A call with initial states is replayed from a CUDA graph as one
                    # without (_graph_replayed), the states copied in with x.
                    recorded = replace(recorded, graphed=self._graph_worthy(
                        recorded.program, x, memory, sum(tensors.values(), ())))
                self._programs[key] = recorded
                fast_key = self._replay_key(x, batch_first, stacked, env, gates_given) \
                    if recorded.program is not None and kind == "torch" and not state else None
                if fast_key is not None:
                    # The same program under the key that __call__ and run_torch look up
                    # first (_replayed), from the tensors alone.
                    recorded = replace(recorded, graphed=not gates and self._graph_worthy(
                        recorded.program, x, memory, ()))
                    self._programs[fast_key] = recorded
                    self._replay_type = type(x)
            return result
        finally:
            memory.release()

    def _output(self, kind: str, x, host: bool, shape: tuple[int, ...], memory: _CallMemory,
                stream: int) -> tuple[Any, arrays.DeviceView]:
        """An array the call returns: the caller's kind (a NumPy result is staged in the
        call's memory, then copied back), filled with NaN bytes under the debug knob."""
        dtype = self.model.dtype
        nbytes = math.prod(shape) * DTYPES[dtype].itemsize
        if host:
            arr = memory.take(nbytes, poison=False)  # poisoned once, below
        else:
            arr = arrays.empty_like_kind(kind, x, shape, dtype, _device_allocation)
        v = arrays.to_view(arr, shape, dtype)
        if memory.poison:
            driver.memset_async(v.ptr, 0xFF, nbytes, stream)
        return arr, v

    def _workspace_layout(self, variant: Variant, S: int, B: int):
        """(offset of each part, total bytes, each synchronising layer's word in the part
        "barriers", that part's bytes) of a call's workspace: the parts of
        passes/workspace.py, then the words of launch.sync_words (zeroed once a call).
        Kept per shape: recomputing it costs more host time than the launches of a small
        model; the cache is emptied past a few hundred shapes."""
        key = (variant.shape_class, S, B)
        found = self._layouts.get(key)
        if found is None:
            # Grid barriers and fused projections' flags: one block, one memset a call.
            sync, words = launch.sync_words(variant.plan.layers, S)
            # cuBLASLt's scratch in the same block: one allocation a call, not two.
            parts = workspace_parts(variant.plan, S, B) + \
                [("barriers", 4 * words)] + library_scratch_parts(variant.plan)
            if len(self._layouts) >= 256:
                self._layouts.clear()
            found = self._layouts[key] = (*_layout(parts), sync, 4 * words)
        return found

    def _forward(self, variant: Variant, x, kind: str, host: bool, x_host, x_view, state,
                 initial: dict, S: int, B: int, batch_first: bool, stream: int,
                 memory: _CallMemory, spin_ns: int, stacked: bool, stamps: _Stamps | None,
                 lengths_given: "np.ndarray | arrays.DeviceView | None", ops: call_program.Queue,
                 gates: Mapping[str, launch.Gates]):
        import pycuda.driver as cuda

        dtype, plan = self.model.dtype, variant.plan
        item = DTYPES[dtype].itemsize

        def make(shape_: tuple[int, ...]) -> tuple[Any, arrays.DeviceView]:
            arr, v = self._output(kind, x, host, shape_, memory, stream)
            ops.allocated(("make", shape_), v.ptr, math.prod(shape_) * item, arr)
            return arr, v

        if host:
            x_arr, x_view = make(tuple(x_host.shape))
            cuda.memcpy_htod(x_view.ptr, x_host)
        seq_shape = (lambda H: (B, S, H)) if batch_first else (lambda H: (S, B, H))

        def sequence(v: arrays.DeviceView) -> Sequence:
            st, sb = (v.strides[1], v.strides[0]) if batch_first else (v.strides[0], v.strides[1])
            return Sequence(v.ptr, item, st, sb)

        # The call's workspace, one block.
        offsets, total, sync, sync_bytes = self._workspace_layout(variant, S, B)
        base = memory.take(total)
        ops.allocated(("take", total, True), base, total)
        ws = {name: base + off for name, off in offsets.items()}
        if sync_bytes:
            ops.memset(ws["barriers"], 0, sync_bytes, stream)
        lengths = 0  # each row's length on the device (0: none)
        if isinstance(lengths_given, arrays.DeviceView):
            lengths = lengths_given.ptr
        elif lengths_given is not None:
            lengths = memory.take(lengths_given.nbytes, poison=False)
            driver.copy_to_device(lengths, lengths_given, stream)
        barrier_of = {name: ws["barriers"] + 4 * word for name, word in sync.items()}

        # Where every tensor lives.
        tensors: dict[str, Sequence] = {INPUT: sequence(x_view)}
        results: dict[str, Any] = {}
        for l in plan.layers:
            if l.column:
                continue  # a bidirectional layer's backward half fills its forward half's tensor
            width = l.tensor_width
            if l.is_output:
                arr, v = make(seq_shape(width))
                results[l.tensor_name] = arr
                tensors[l.tensor_name] = sequence(v)
            else:
                tensors[l.tensor_name] = Sequence(ws[l.tensor_name], item, B * width, width)

        final_state: dict[str, Any] = {}
        if stacked:  # torch.nn's h_n [L, B, P] (P: h's width) and c_n [L, B, H], a slice per layer
            first = self.model.layers[0]
            L, lstm = len(self.model.layers), first.cell == "lstm"
            h_shape, c_shape = (L, B, first.out_size), (L, B, first.hidden_size)
            h_all = h_all_view = None  # made after the first layer's launches (below)
            c_all, c_all_view = make(c_shape) if lstm else (None, None)

            def state_slot(view: arrays.DeviceView, name: str):
                width = view.shape[2]
                return None, arrays.DeviceView(view.ptr + self._position[name] * B * width * item,
                                               (B, width), (width, 1), dtype)
        # Checks first: a grid the GPU cannot hold is refused before any layer's launch.
        for l in plan.layers:
            self._check_resident(variant, l, B)
        runs = []
        for index, l in enumerate(plan.layers):
            h0, c0 = initial[l.name] if l.name in initial else \
                self._initial_state(l, state.get(l.name), B, host, make)
            if h0:  # the caller's arrays: a replay's inputs, in this order
                ops.allocated(("input",), h0[0], B * l.out_size * item)
            if c0:
                ops.allocated(("input",), c0, B * l.hidden_size * item)
            c_arr = c_view = None
            if l.cell == "lstm":
                c_arr, c_view = state_slot(c_all_view, l.name) if stacked else make((B, l.hidden_size))
            residual = None
            out = tensors[l.tensor_name].columns(l.column)
            if l.residual:  # the layer's tensor is h + input; h goes to a buffer of the workspace
                y = Sequence(ws[part_name(plan, "residual_h", l.name)], item, B * l.hidden_size,
                             l.hidden_size)
                residual = launch.Residual(tuple(tensors[s.name] for s in l.sources), out)
            else:
                y = out
            if l.reverse:  # its kernels count steps up: every sequence it steps through, reversed
                y = y.reversed(S)
                residual = residual.reversed(S) if residual else None
            runs.append(_LayerRun(l, index, y, residual, h0, c0, c_arr, c_view, lengths,
                                  gates=gates.get(l.name, launch.NO_GATES)))
        for g in gates.values():  # the caller's arrays: a replay's inputs after the states
            for ptr in g.pointers():
                ops.allocated(("input",), ptr, S * g.row * 4)
        if pipelined(plan):
            self._run_pipelined(variant, runs, tensors, ws, S, B, stream, barrier_of, spin_ns, stamps, ops)

        def h_n_of(l):
            """(array, view) of layer l's h_n: its slot of the stacked h_n (made on first
            need: an allocation the kernels before need not wait for), or an array of its own."""
            nonlocal h_all, h_all_view
            if stacked and h_all is None:
                h_all, h_all_view = make(h_shape)
            return state_slot(h_all_view, l.name) if stacked else make((B, l.out_size))
        for r in runs:
            l, y = r.layer, r.y
            # The recurrent kernel writes h_n at the call's last step itself where it can
            # (launch.writes_h_n): the copy after it was a node of its own, ~2 µs in a graph.
            # Not a projected LSTM's (its h comes from the h projection) nor a pipelined
            # call's (h_n would be made before the fork).
            by_kernel = not pipelined(plan) and not l.proj_size \
                and launch.writes_h_n(variant.kernel_of(l.name, "recurrent"))
            if by_kernel:
                h_arr, h_view = h_n_of(l)
                r = replace(r, h_final=h_view.ptr)
            if not pipelined(plan):
                self._run_layer(variant, r, tensors, ws, S, B, stream, barrier_of.get(l.name, 0),
                                spin_ns, stamps, ops)
            if not by_kernel:
                # A residual layer's h lives in a buffer that the next one reuses
                # (sequential), so h_n is copied right after the layer's launches.
                h_arr, h_view = h_n_of(l)
                ops.copy_rows(h_view.ptr, l.out_size * item, y.at(S - 1), y.stride_b * item,
                              l.out_size * item, B, stream)
            final_state[l.name] = (h_arr, r.c_arr) if l.cell == "lstm" else h_arr
        if stacked:
            final_state = (h_all, c_all) if lstm else h_all

        outputs = []
        for o in plan.outputs:
            if o.kernel is None:
                out = tensors[o.name]
                outputs.append(results[o.name])
            else:
                arr, v = make(seq_shape(o.size))
                out = sequence(v)
                k = variant.kernel_of(o.name, "merge")
                args = launch.merge_arguments(out, [tensors[s.name] for s in o.sources], S, B)
                self._launch(ops, k, launch.merge_grid(k, S * B * o.size, self.target.sm_count), args,
                             stream)
                outputs.append(arr)
            if lengths:  # after the layers (and h_n's copies), which read the kept states
                k = variant.kernel_of(o.name, "mask")
                self._launch(ops, k, launch.merge_grid(k, S * B * o.size, self.target.sm_count),
                             launch.mask_arguments(out, S, B, o.size, lengths), stream)

        if host:
            to_host = lambda a, shp: self._to_host(a, shp, kind)  # noqa: E731
            outputs = [to_host(a, seq_shape(o.size)) for a, o in zip(outputs, plan.outputs)]
            if stacked:
                final_state = (to_host(final_state[0], h_shape), to_host(final_state[1], c_shape)) \
                    if lstm else to_host(final_state, h_shape)
            else:
                def widths(name: str) -> tuple[int, int]:  # h's and c's
                    layer = self.model.layer(name)
                    return layer.out_size, layer.hidden_size
                final_state = {
                    name: tuple(to_host(a, (B, w)) for a, w in zip(s, widths(name)))
                    if isinstance(s, tuple) else to_host(s, (B, widths(name)[0]))
                    for name, s in final_state.items()}
            self.check_errors()  # the copies waited for the kernels
        y = outputs[0] if len(outputs) == 1 else tuple(outputs)
        return y, final_state

    def _to_host(self, arr, shape, kind):
        import pycuda.driver as cuda

        raw = np.empty(shape, dtype=arrays.storage_numpy_dtype(self.model.dtype))
        cuda.memcpy_dtoh(raw, arr)
        out = arrays.numpy_result(raw, self.model.dtype)
        if kind == "torch-cpu":
            import torch
            t = torch.from_numpy(np.ascontiguousarray(out))
            return t.to(getattr(torch, self.model.dtype))
        return out

    def _initial_state(self, l, given, B, host, make):
        """(h0 as (pointer, batch stride) or None, c0 pointer or 0) of layer l, checked and
        on the device."""
        if given is None:
            return None, 0
        parts = given if l.cell == "lstm" else (given,)
        if l.cell == "lstm" and (not isinstance(given, (tuple, list)) or len(given) != 2):
            raise RuntimeCheckError(f"state['{l.name}']: expected (h, c) for an LSTM layer")
        views = []
        for what, p in zip(("h", "c"), parts):
            where = f"state['{l.name}'] {what}"
            width, named = (l.out_size, "proj_size") if what == "h" and l.proj_size \
                else (l.hidden_size, "hidden_size")
            if tuple(p.shape) != (B, width):
                raise RuntimeCheckError(f"{where}: shape {tuple(p.shape)}, expected "
                                        f"({B}, {width}) = (B, {named})")
            if host:
                import pycuda.driver as cuda
                h = arrays.host_array(p, where, self.model.dtype)
                _, v = make((B, width))
                cuda.memcpy_htod(v.ptr, h)
            else:
                v = arrays.view(p, where, self.model.dtype)
                if v.strides != (width, 1):
                    raise RuntimeCheckError(f"{where}: strides {v.strides}, expected a "
                                            "contiguous array; call .contiguous()")
            views.append(v)
        return (views[0].ptr, views[0].strides[0]), (views[1].ptr if len(views) > 1 else 0)

    def _layer_weights(self, l) -> dict[str, int]:
        return self._device_weights[l.name]

    def _launch(self, ops: call_program.Queue, k: codegen.KernelSource, grid: tuple[int, int],
                args: dict[str, int], stream: int, cooperative: bool = False) -> None:
        ops.launch(self._functions[k.name], launch.check_grid(k, grid), k.block, launch.arguments(k, args),
                   k.dynamic_shared, stream, cooperative)

    def _run_pipelined(self, variant: Variant, runs: list[_LayerRun], tensors, ws, S: int, B: int,
                       stream: int, barrier_of: dict[str, int], spin_ns: int,
                       stamps: _Stamps | None, ops: call_program.Queue) -> None:
        """The layers as the pipelined schedule says: each on its stream (the caller's or a
        side stream forked from it), chunk by chunk; chunk k of a layer waits for chunk k
        of the layers it reads on other streams (for the last chunk of those running the
        other way in time); the caller's stream then waits for all."""
        schedule = variant.plan.schedule.value
        chunk = min(schedule.chunk, S)
        chunks = -(-S // chunk)
        runners = {r.layer.name: self._layer_chunks(variant, r, tensors, ws, S, B,
                                                    barrier_of.get(r.layer.name, 0), spin_ns, stamps, ops)
                   for r in runs}
        side = self._streams.side(stream, schedule.streams - 1)
        streams = [stream, *side]
        queue, awaited, projected = self._queue(variant, chunks)
        events = self._streams.take(1 + len(awaited) + projected + len(side))
        ops.forked(side, events)
        try:
            fork, *rest = events
            free = iter(rest)
            ops.record(fork, stream)
            for s in side:
                ops.wait(s, fork)
            done: dict[tuple[str, int], int] = {}
            for name, k, on_stream, projection_stream, waits in queue:
                on = streams[on_stream]
                project, recur = runners[name]
                # A layer whose projections run ahead projects on its own stream into buffer
                # k % 2, once the chunks it reads are done and the recurrence that read that
                # buffer last (chunk k - 2) is; its recurrence waits for the projection and
                # runs beside the projection of the next chunk. Else both on the layer's.
                ahead = projection_stream is not None
                projecting = streams[projection_stream] if ahead else on
                buffer = k % 2 if ahead else 0
                for task in waits:
                    ops.wait(projecting, done[task])
                project(k * chunk, projecting, buffer)
                if projecting != on:
                    ops.record(event := next(free), projecting)
                    ops.wait(on, event)
                recur(k * chunk, on, buffer)
                if (name, k) in awaited:
                    done[(name, k)] = event = next(free)
                    ops.record(event, on)
            for s in side:
                event = next(free)
                ops.record(event, s)
                ops.wait(stream, event)
        finally:
            self._streams.give_back(events)

    def _queue(self, variant: Variant, chunks: int):
        """(the tasks of a pipelined call in the order the host queues them, each as (layer,
        chunk, its stream's index, its projection stream's index or None, the tasks on other
        streams it waits for); the set of tasks waited for, which record an event; how many
        tasks project ahead, an event each). Kept per shape class and chunk count: working
        it out took 34 µs for 8 layers of 4 chunks, a chunk's host time."""
        key = (variant.shape_class, chunks)
        found = self._queues.get(key)
        if found is None:
            stages = variant.plan.schedule.value.stages
            stage = {s.layer: s for s in stages}
            # A layer whose projections run ahead waits, on their stream, for the chunks it
            # reads and for its own recurrence of two chunks before (their buffer).
            queue = tuple((name, k, stage[name].stream, stage[name].projection_stream,
                           tuple(d for d in stage[name].chunk_after(k, chunks)
                                 if stage[name].projection_stream is not None
                                 or stage[d[0]].stream != stage[name].stream)
                           + (((name, k - 2),) if stage[name].projection_stream is not None and k > 1 else ()))
                          for name, k in queue_order(stages, chunks))
            if len(self._queues) >= 256:
                self._queues.clear()
            found = self._queues[key] = (queue, frozenset(d for *_, waits in queue for d in waits),
                                         sum(1 for *_, projection_stream, _ in queue if projection_stream is not None))
        return found

    def _run_layer(self, variant: Variant, r: _LayerRun, tensors, ws, S, B, stream: int,
                   barrier: int, spin_ns: int, stamps: _Stamps | None, ops: call_program.Queue) -> None:
        """Layer r.layer's projection and recurrence over the call, chunk by chunk: h into
        r.y, and for a residual layer h + input into ``r.residual.out``."""
        project, recur = self._layer_chunks(variant, r, tensors, ws, S, B, barrier, spin_ns, stamps, ops)
        for t0 in range(0, S, min(r.layer.unroll.value, S)):
            project(t0, stream, 0)
            recur(t0, stream, 0)

    def _check_resident(self, variant: Variant, l, B: int) -> None:
        """Refuse a grid-persistent layer whose blocks this GPU cannot hold at once."""
        if l.persistence.value.mode != "grid":
            return
        name = variant.kernel_of(l.name, "recurrent").name
        blocks = math.prod(launch.persistent_grid(l, B))
        if blocks > self._resident[name]:
            raise RuntimeCheckError(
                f"layer '{l.name}': the persistent kernel needs {blocks} co-resident blocks "
                f"but this GPU holds {self._resident[name]}; refusing to launch (it "
                "would hang). Compile with persistence='none' or for this device (target='device').")

    def _layer_chunks(self, variant: Variant, r: _LayerRun, tensors, ws, S, B, barrier: int,
                      spin_ns: int, stamps: _Stamps | None, ops: call_program.Queue):
        """``(project, recur)``: each ``(t0, stream, buffer)`` queues on ``stream`` layer
        r.layer's projection of the chunk starting at step t0 into its projection buffer
        ``buffer`` (0 or 1, where its projections run ahead), or its recurrence of that chunk
        from it; what does not change from chunk to chunk is worked out once, here (a
        pipelined call runs many chunks)."""
        l, y, residual, h0, c0, c_out = r.layer, r.y, r.residual, r.h0, r.c0, r.c_view
        plan = variant.plan
        mode = l.persistence.value.mode
        step_k = variant.kernel_of(l.name, "recurrent")
        library_product = l.persistence.value.math == "cublas"
        weights = self._layer_weights(l)
        GH = l.gates * l.hidden_size
        xproj = ws[part_name(plan, "projection", l.name)]
        cell = ws[part_name(plan, "cell_state", l.name)] if l.cell == "lstm" else 0
        library = ws.get(part_name(plan, "library", l.name), 0)
        step_product = ws.get(part_name(plan, "step_product", l.name), 0)
        cell_output = ws.get(part_name(plan, "cell_output", l.name), 0)  # a projected LSTM's r
        tensor_maps = ws.get(part_name(plan, "tensor_maps", l.name), 0)
        h_projection = variant.kernel_of(l.name, "h_projection")
        c_out_ptr = c_out.ptr if c_out is not None else 0
        steps_per_chunk = min(l.unroll.value, S)
        status = self._status.address(r.index)
        persistent_grid = launch.persistent_grid(l, B) if mode != "none" else None
        fused_source = tensors[l.sources[0].name] if l.projection_fused else None
        item = DTYPES[self.model.dtype].itemsize
        padding = l.library_padding(item)
        library_h = 0
        if library_product and padding:
            # Sizes padded with zeros (LayerPlan.library_padding): hw = W_hhᵀ (M × K, the
            # padded copy among the weights) · h (K × B, a copy the cell kernel writes each
            # step with zeros after it, h0's at the start), [B, M] for the cell to read.
            K_pad, M_pad = padding
            library_h = ws[part_name(plan, "library_h", l.name)]
            padded_product = self._library.prepared(
                cublaslt.Matmul(self.model.dtype, l.precision.value, m=M_pad, n=B, k=K_pad, transpose_a=False,
                                lda=M_pad, ldb=K_pad, ldd=M_pad, scratch=library_scratch_bytes(plan)), 256, 256, 256)
        elif library_product:
            # hw = h·W_hhᵀ: column-major GH × B = W_hhᵀ (GH × H, as stored) · h (H × B), h
            # being h0 or a step of y (one prepared call for each row stride; the alignment
            # is that of every step).
            h_align = cublaslt.alignment(y.ptr, y.stride_t * y.itemsize, h0[0] if h0 else 0)
            products = {h_sb: self._library.prepared(
                cublaslt.Matmul(self.model.dtype, l.precision.value, m=GH, n=B, k=l.out_size,
                                transpose_a=False, lda=GH, ldb=h_sb, ldd=GH, scratch=library_scratch_bytes(plan)),
                256, h_align, 256)
                for h_sb in {y.stride_b, *([h0[1]] if h0 else [])}}
        step_grid = launch.step_grid(l, step_k, B)
        h_projection_grid = launch.h_projection_grid(l, B) if h_projection is not None else None
        recurrence, recurrent_weights = l, weights
        if l.folded:  # the recurrence on r (of every step, in the workspace) through W_hh·W_hr
            recurrence, recurrent_weights = l.recurrence, dict(weights, w_hh_t=weights["w_fold_t"])
            if l.fragments_tile is not None:  # the kernel's fragments are the folded matrix's
                recurrent_weights[weights_mod.fragments_name(l.fragments_tile, l.hidden_size)] = \
                    weights[weights_mod.fragments_name(l.fragments_tile, l.hidden_size, folded=True)]
            r_time = Sequence(cell_output, item, B * l.hidden_size, l.hidden_size)
            r_run, y_time = (r_time.reversed(S), y.reversed(S)) if l.reverse else (r_time, y)
            first_step = variant.kernel_of(l.name, "folded_first_step")
            first_step_grid = launch.folded_first_step_grid(l, B)

        # The second projection buffer, where the projections run ahead, follows the first.
        buffer_bytes = projection_chunk_bytes(l, S, B)
        started: dict[int, tuple[int, int]] = {}  # t0: (timing event, stream) of a chunk's start

        def project(t0: int, stream: int, buffer: int) -> None:
            """The projection of steps t0 … t0+steps−1 of the layer's own (for a reverse
            layer, reversed) time into projection buffer ``buffer``."""
            steps = min(steps_per_chunk, S - t0)
            if stamps:
                started[t0] = (stamps.mark(stream), stream)
            if not l.projection_fused:  # (else the recurrent launch's producers compute it)
                self._project(variant, l, tensors, launch.chunk_steps(t0, steps, S, l.reverse), steps, B,
                              xproj + buffer * buffer_bytes, stream, weights, ws, library, ops)

        def recur(t0: int, stream: int, buffer: int) -> None:
            """The recurrence of steps t0 … t0+steps−1 from projection buffer ``buffer``; the
            chunk's measured span starts at its projection where that ran on this stream."""
            steps = min(steps_per_chunk, S - t0)
            start = 0
            if stamps:
                start, on = started.pop(t0, (0, stream))
                if on != stream:  # the projection ran ahead: the span is the recurrence's
                    driver.event_destroy(start)
                    start = 0
                start = start or stamps.mark(stream)
            xproj_at, strides = launch.recurrent_projection(
                xproj + buffer * buffer_bytes, launch.projection_strides(l.layout.value, B, GH, steps * B),
                steps, l.reverse)
            if l.folded:
                # From r = 0, with h0·W_hhᵀ added at each row's first step: in the first
                # chunk, or in any of a reverse layer's where rows have lengths.
                if h0 and (t0 == 0 or (l.reverse and r.lengths)):
                    self._launch(ops, first_step, first_step_grid, launch.folded_first_step_arguments(
                        l, t0=t0, steps=steps, S=S, B=B, xproj=xproj_at, xproj_strides=strides,
                        w_hh_t=weights["w_hh_t"], h0=h0, lengths=r.lengths), stream)
                args = launch.persistent_arguments(
                    recurrence, t0=t0, steps=steps, S=S, B=B, y=r_run, h0=None, c0=c0, c_out=c_out_ptr,
                    cell=cell, xproj=xproj_at, xproj_strides=strides, weights=recurrent_weights,
                    barrier=barrier, status=status, spin_timeout_ns=spin_ns, lengths=r.lengths,
                    tensor_maps=tensor_maps)
                self._launch(ops, step_k, persistent_grid, args, stream, cooperative=mode == "grid")
                g, a, b, d = launch.folded_h_projection(
                    l, dtype=self.model.dtype, t0=t0, steps=steps, S=S, B=B, r=r_time, y=y_time,
                    w_hr=weights["w_hr"], scratch=library_scratch_bytes(plan))
                ops.gemm(self._library.prepared_for(g, a, b, d), a, b, d, 0, stream, library)
                if h0 and r.lengths and t0 + steps == S:  # rows of length 0 end on h0
                    self._launch(ops, first_step, launch.folded_first_step_grid(l, B, phase=1),
                                 launch.folded_empty_rows_arguments(S=S, B=B, y=y, w_hh_t=weights["w_hh_t"],
                                                                    h0=h0, lengths=r.lengths), stream)
            elif mode != "none":
                args = launch.persistent_arguments(
                    l, t0=t0, steps=steps, S=S, B=B, y=y, h0=h0, c0=c0, c_out=c_out_ptr, cell=cell,
                    xproj=xproj_at, xproj_strides=strides, weights=weights, barrier=barrier,
                    status=status, spin_timeout_ns=spin_ns, residual=residual, lengths=r.lengths,
                    gates=r.gates, source=fused_source, h_final=r.h_final, tensor_maps=tensor_maps)
                self._launch(ops, step_k, persistent_grid, args, stream, cooperative=mode == "grid")
            else:
                if library_h and t0 == 0 and h0 and h0[0]:  # h0, zeros after it (the first product reads it)
                    ops.memset(library_h, 0, B * K_pad * item, stream)
                    ops.copy_rows(library_h, K_pad * item, h0[0], h0[1] * item, l.out_size * item, B, stream)
                for j in range(steps):
                    t = t0 + j
                    product = 0
                    if library_product:
                        h_prev, h_sb = launch.previous_h(t, h0, y)
                        if h_prev:
                            product = step_product
                            if library_h:
                                ops.gemm(padded_product, weights["w_hh_t_padded"], library_h, product, 0, stream,
                                         library)
                            else:
                                ops.gemm(products[h_sb], weights["w_hh_t"], h_prev, product, 0, stream, library)
                    args = launch.step_arguments(
                        l, t=t, j=j, S=S, B=B, y=y, h0=h0, c0=c0, c_out=c_out_ptr, cell=cell,
                        xproj=xproj_at, xproj_strides=strides, weights=weights, step_product=product,
                        residual=residual, lengths=r.lengths, cell_output=cell_output,
                        h_final=r.h_final, gates=r.gates, library_h=library_h)
                    self._launch(ops, step_k, step_grid, args, stream)
                    if h_projection is not None:  # h = r·W_hrᵀ into y[t]
                        self._launch(ops, h_projection, h_projection_grid, launch.h_projection_arguments(
                            l, t=t, S=S, B=B, y=y, h0=h0, cell_output=cell_output,
                            weights=weights, lengths=r.lengths), stream)
            if stamps:
                stamps.span(l.name, t0 // steps_per_chunk, start, stream)
        return project, recur

    def _project(self, variant: Variant, l, tensors, t0: int, steps: int, B: int, xproj: int,
                 stream: int, weights: dict[str, int], ws: dict[str, int], library: int,
                 ops: call_program.Queue) -> None:
        """The input projection of steps t0 .. t0+steps-1 of layer l into ``xproj``: rnncc's
        kernel, or (math: cublas) one cuBLASLt call per source, the first adding the bias,
        after a merge kernel has summed a sum's sources into one (merge fusion "summed") or
        copied its source with zeros past K (LibraryProjection.padded_k; then W_ih's padded
        copy is the other operand)."""
        GH, rows = l.gates * l.hidden_size, steps * B
        if l.projection_tile.value.math == "cublas":
            # Y [rows, GH] (layout xw) is column-major GH × rows: W_ih (stored I × GH, used
            # transposed) times the source's columns. A source whose steps are not B rows
            # apart (batch-first input) is a batch of `steps` GEMMs of B columns.
            item = DTYPES[self.model.dtype].itemsize
            # (first column of W_ih, K, the operand's steps, its pointer at step t0)
            operands = [(s.offset, s.size, tensors[s.name], tensors[s.name].at(t0)) for s in l.sources]
            padded = l.projection_padded_k
            if l.merge_fusion.value == "summed" or padded:
                # The chunk's sum, or its one source copied with zeros past K to the padded K
                # (LibraryProjection.padded_k), dense [steps, B, K]: one GEMM reads it.
                K = padded or l.input_size
                part = "summed_input" if l.merge_fusion.value == "summed" else "padded_input"
                dense_input = Sequence(ws[part_name(variant.plan, part, l.name)], item, B * K, K)
                k = variant.kernel_of(l.name, "merge")
                args = launch.merge_arguments(dense_input, [v for _, _, v, _ in operands], steps, B, t0)
                self._launch(ops, k, launch.merge_grid(k, rows * K, self.target.sm_count), args, stream)
                operands = [(0, K, dense_input, dense_input.ptr)]
            w_ih, w_ih_stride = (weights["w_ih_padded"], padded) if padded else (weights["w_ih"], l.input_size)
            for i, (column, K, v, ptr) in enumerate(operands):
                dense = v.stride_t == B * v.stride_b
                g = cublaslt.Matmul(
                    self.model.dtype, l.precision.value, m=GH, n=rows if dense else B, k=K,
                    transpose_a=True, lda=w_ih_stride, ldb=v.stride_b, ldd=GH,
                    batches=1 if dense else steps, stride_b=0 if dense else v.stride_t,
                    stride_d=0 if dense else B * GH, bias=l.bias and i == 0, accumulate=i > 0,
                    scratch=library_scratch_bytes(variant.plan))
                a = w_ih + column * item
                ops.gemm(self._library.prepared_for(g, a, ptr, xproj), a, ptr, xproj,
                         weights.get("bias", 0) if g.bias else 0, stream, library)
            return
        k = variant.kernel_of(l.name, "input_projection")
        args = launch.projection_arguments(l, t0=t0, rows=rows, B=B,
                                           sources=[tensors[s.name] for s in l.sources],
                                           xproj=xproj, weights=weights)
        self._launch(ops, k, launch.projection_grid(l, rows), args, stream)

