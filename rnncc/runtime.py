"""Runtime: compile a spec, load the cubins with PyCUDA, run the schedule.

PyCUDA is imported lazily: ``rnncc.compile`` renders source and plan on any machine;
only calling the model (or ``build()`` for cubins, which needs nvcc) goes further.
Kernels run on the device's primary context, so PyTorch/CuPy pointers are valid here,
and on the caller's stream (PyTorch's or CuPy's current stream for their arrays, else the
legacy default stream), so they order with the caller's work and a ``torch.cuda.graph``
captures them. Once a model has run at a shape, a call allocates nothing but its outputs
(through the caller's allocator) and never synchronises.

Debug knob: ``RNNCC_DEBUG_POISON=1`` fills every output and workspace buffer with NaN
bytes before the kernels run, so an element no kernel wrote shows up as NaN.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from . import arrays, build, codegen, cublaslt, driver, spec as spec_mod, target as target_mod
from . import weights as weights_mod
from .dtypes import DTYPES, round_to, to_storage
from .errors import DeviceUnavailable, RuntimeCheckError, SpecError
from .ir import INPUT, Model
from .passes import build_plan
from .plan import CompileOptions, Plan

log = logging.getLogger("rnncc")


@dataclass(frozen=True)
class DeviceContext:
    device: Any       # pycuda.driver.Device
    context: Any      # its primary context, pushed on this thread
    ordinal: int


@lru_cache(maxsize=None)
def device_context(ordinal: int = 0) -> DeviceContext:
    """PyCUDA on the primary context of GPU ``ordinal`` (shared with PyTorch and CuPy)."""
    try:
        import pycuda.driver as cuda
    except ImportError as exc:
        raise DeviceUnavailable("running kernels needs PyCUDA: pip install 'rnncc[cuda]' "
                                f"({exc})") from None
    try:
        cuda.init()
        if cuda.Device.count() <= ordinal:
            raise DeviceUnavailable(f"no CUDA device {ordinal} ({cuda.Device.count()} found)")
        device = cuda.Device(ordinal)
        context = device.retain_primary_context()
    except cuda.Error as exc:
        raise DeviceUnavailable(f"CUDA is not usable here: {exc}") from None
    context.push()
    atexit.register(_pop_context, context)
    return DeviceContext(device, context, ordinal)


def _pop_context(context) -> None:
    try:
        context.pop()
    except Exception:  # the process is exiting; the driver may be gone already
        pass


class CompiledModel:
    """A model compiled for a target: plan and CUDA source now, cubins and a callable
    forward on first use.

    ``y, state = model(x, state=None, batch_first=False)``: x is [S, B, I] (or [B, S, I]);
    y is one array for one output, a tuple for several; state maps each layer name to
    h [B, H] (GRU/RNN) or (h, c) (LSTM), both for the initial and the returned state.
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
        self._functions: dict[str, Any] | None = None
        self._device_weights: dict[str, Any] | None = None
        self._workspace: dict[str, Any] = {}
        self._workspace_key: tuple[int, int] | None = None

    # ---- inspection (no GPU) -----------------------------------------------------------
    def explain(self) -> str:
        return self.plan.explain()

    def kernel(self, name: str) -> codegen.KernelSource:
        return next(k for k in self.kernels if k.name == name)

    def kernel_of(self, user: str, family: str) -> codegen.KernelSource | None:
        """The kernel of ``family`` (a prefix: "input_projection", "recurrent", "merge")
        that layer or output ``user`` runs; None where it has none (a cuBLASLt projection)."""
        return next((k for k in self.kernels if user in k.users and k.family.startswith(family)),
                    None)

    def write(self, directory: str | os.PathLike) -> list[Path]:
        """Write one ``.cu`` per kernel and ``plan.json`` (only files whose content changed),
        and remove ``.cu`` files rnncc generated there before that this plan no longer has."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        written = []
        files = {k.filename: k.header + k.source for k in self.kernels}
        files["plan.json"] = self.plan.to_json()
        for name, text in files.items():
            path = directory / name
            if not path.exists() or path.read_text() != text:
                path.write_text(text)
            written.append(path)
        for stale in directory.glob("*.cu"):
            if stale.name not in files and "// Generated by rnncc" in stale.read_text():
                stale.unlink()
        return written

    def build(self, jobs: int | None = None, progress=None) -> dict[str, bytes]:
        """Cubins of every kernel (nvcc in parallel, cached on disk); needs no GPU.
        ``progress(done, total, name)`` is called as each kernel is ready."""
        return build.compile_all(self.kernels, self.target.arch, jobs, progress)

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
            self._weights_now = weights_mod.init(self.model, self._seed)
        return self._weights_now

    def state_dict(self) -> dict[str, np.ndarray]:
        """Weights as float32 NumPy arrays, named ``<layer>.weight_ih`` etc."""
        return {k: v.copy() for k, v in self._weights.items()}

    def device_weights(self) -> dict[str, np.ndarray]:
        """Weights as the device holds them (rounded to the storage dtype), float32."""
        return {k: round_to(v, self.model.dtype) for k, v in self._weights.items()}

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> None:
        self._weights_now = {**self._weights, **weights_mod.check(self.model, state_dict, strict)}
        self._device_weights = None

    # ---- device ----------------------------------------------------------------------
    def _load(self) -> DeviceContext:
        ctx = device_context(0)
        if self._functions is None:
            import pycuda.driver as cuda

            cubins = self.build()
            self._functions = {k.name: driver.load(k.name, cubins[k.name], k.entry,
                                                   tuple(p.kind for p in k.params), k.dynamic_shared)
                               for k in self.kernels}
            # cuBLASLt, where the plan hands it GEMMs (a handle and workspace per model).
            uses_library = any(l.projection_tile.value["math"] == "cublas"
                               or l.persistence.value["math"] == "cublas" for l in self.plan.layers)
            self._library = cublaslt.CublasLt() if uses_library else None
            # Grid-persistent kernels: how many blocks the device holds at once, checked
            # before each launch (computed once, from the compiled kernel).
            self._resident = {k.name: self._co_resident_blocks(k) for k in self.kernels
                              if k.family == "recurrent_persistent"}
            # Grid barriers of persistent kernels: [arrivals, generation], zeroed once.
            self._barrier = cuda.mem_alloc(8)
            cuda.memset_d32(self._barrier, 0, 2)
        if self._device_weights is None:
            self._device_weights = self._upload_weights()
        return ctx

    def _upload_weights(self) -> dict[str, Any]:
        import pycuda.driver as cuda

        dtype = self.model.dtype
        out = {}
        for layer in self.model.layers:
            packed = weights_mod.pack(layer, self._weights)
            for name, arr, store in (("w_ih", packed.w_ih, True), ("w_hh_t", packed.w_hh_t, True),
                                     ("bias", packed.bias, False), ("bias_hn", packed.bias_hn, False)):
                if arr.size == 0:
                    continue
                host = to_storage(arr, dtype) if store else np.ascontiguousarray(arr, np.float32)
                out[f"{layer.name}.{name}"] = cuda.to_device(host)
        return out

    def _alloc(self, nbytes: int):
        import pycuda.driver as cuda

        mem = cuda.mem_alloc(nbytes)
        if os.environ.get("RNNCC_DEBUG_POISON") == "1":
            cuda.memset_d8(mem, 0xFF, nbytes)
        return mem

    def _workspace_for(self, seq_len: int, batch: int) -> dict[str, Any]:
        """Projection buffer, cell state and the sequences of non-output layers; kept
        between calls and grown when a call needs more."""
        from .passes.workspace import workspace_bytes

        if self._workspace_key != (seq_len, batch):
            need = workspace_bytes(self.plan, seq_len, batch)
            ws: dict[str, Any] = {"projection": self._alloc(max(need["projection"], 4))}
            for part in ("cell_state", "step_product"):
                if need[part]:
                    ws[part] = self._alloc(need[part])
            item = DTYPES[self.model.dtype].itemsize
            for l in self.plan.layers:
                if not l.is_output:
                    ws[l.name] = self._alloc(seq_len * batch * l.hidden_size * item)
            self._workspace, self._workspace_key = ws, (seq_len, batch)
        return self._workspace

    # ---- forward ---------------------------------------------------------------------
    def __call__(self, x: Any, state: Mapping[str, Any] | None = None, *,
                 batch_first: bool = False):
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
        state = dict(state or {})
        for name in state:
            if name not in {l.name for l in self.model.layers}:
                raise RuntimeCheckError(f"state: unknown layer '{name}', expected one of "
                                        f"{', '.join(l.name for l in self.model.layers)}")

        ctx = self._load()
        import pycuda.driver as cuda

        # The caller's stream (PyTorch's or CuPy's current one; else the legacy default
        # stream): every kernel, library call and copy of this call is queued on it.
        stream = arrays.stream_of(x, kind)

        def make(shape_: tuple[int, ...]) -> tuple[Any, arrays.DeviceView]:
            arr = arrays.empty_like_kind("numpy" if host else kind, x, shape_, dtype, self._alloc)
            v = arrays.to_view(arr, shape_, dtype)
            if os.environ.get("RNNCC_DEBUG_POISON") == "1":
                cuda.memset_d8(v.ptr, 0xFF, int(np.prod(shape_)) * DTYPES[dtype].itemsize)
            return arr, v

        if host:
            x_arr, x_view = make(shape)
            cuda.memcpy_htod(x_view.ptr, x_host)
        seq_shape = (lambda H: (B, S, H)) if batch_first else (lambda H: (S, B, H))
        t_b = (lambda v: (v.strides[1], v.strides[0])) if batch_first else \
            (lambda v: (v.strides[0], v.strides[1]))

        # Where every tensor lives: (view, stride_t, stride_b).
        tensors: dict[str, tuple[arrays.DeviceView, int, int]] = {INPUT: (x_view, *t_b(x_view))}
        ws = self._workspace_for(S, B)
        results: dict[str, Any] = {}
        for l in self.plan.layers:
            if l.is_output:
                arr, v = make(seq_shape(l.hidden_size))
                results[l.name] = arr
                tensors[l.name] = (v, *t_b(v))
            else:
                v = arrays.to_view(ws[l.name], (S, B, l.hidden_size), dtype)
                tensors[l.name] = (v, v.strides[0], v.strides[1])

        final_state: dict[str, Any] = {}
        for l in self.plan.layers:
            h0, c0 = self._initial_state(l, state.get(l.name), B, host, make)
            c_arr = c_view = None
            if l.cell == "lstm":
                c_arr, c_view = make((B, l.hidden_size))
            self._run_layer(l, tensors, ws, S, B, h0, c0, c_view, stream)
            y_view, st, sb = tensors[l.name]
            h_arr, h_view = make((B, l.hidden_size))
            item = DTYPES[dtype].itemsize
            driver.copy_rows(h_view.ptr, l.hidden_size * item, y_view.offset((S - 1) * st),
                             sb * item, l.hidden_size * item, B, stream)
            final_state[l.name] = (h_arr, c_arr) if l.cell == "lstm" else h_arr

        outputs = []
        for o in self.plan.outputs:
            if o.kernel is None:
                outputs.append(results[o.name])
                continue
            arr, v = make(seq_shape(o.size))
            self._run_merge(o, tensors, v, t_b(v), S, B, stream)
            outputs.append(arr)

        if host:
            to_host = lambda a, shp: self._to_host(a, shp, kind)  # noqa: E731
            outputs = [to_host(a, seq_shape(o.size)) for a, o in zip(outputs, self.plan.outputs)]
            final_state = {
                name: tuple(to_host(a, (B, self.model.layer(name).hidden_size)) for a in s)
                if isinstance(s, tuple) else to_host(s, (B, self.model.layer(name).hidden_size))
                for name, s in final_state.items()}
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
        """(h0 view or None, c0 view or None) of layer l, checked and on the device."""
        if given is None:
            return None, None
        parts = given if l.cell == "lstm" else (given,)
        if l.cell == "lstm" and (not isinstance(given, (tuple, list)) or len(given) != 2):
            raise RuntimeCheckError(f"state['{l.name}']: expected (h, c) for an LSTM layer")
        views = []
        for what, p in zip(("h", "c"), parts):
            where = f"state['{l.name}'] {what}"
            if tuple(p.shape) != (B, l.hidden_size):
                raise RuntimeCheckError(f"{where}: shape {tuple(p.shape)}, expected "
                                        f"({B}, {l.hidden_size}) = (B, hidden_size)")
            if host:
                import pycuda.driver as cuda
                h = arrays.host_array(p, where, self.model.dtype)
                _, v = make((B, l.hidden_size))
                cuda.memcpy_htod(v.ptr, h)
            else:
                v = arrays.view(p, where, self.model.dtype)
                if v.strides != (l.hidden_size, 1):
                    raise RuntimeCheckError(f"{where}: strides {v.strides}, expected a "
                                            "contiguous array; call .contiguous()")
            views.append(v)
        return views[0], (views[1] if len(views) > 1 else None)

    def _co_resident_blocks(self, k: codegen.KernelSource) -> int:
        """Blocks of kernel k that fit on the device at once (the occupancy calculation
        of the CUDA programming guide, from the compiled kernel's registers and shared
        memory)."""
        import pycuda.driver as cuda

        fn = self._functions[k.name]
        dev = device_context().device
        a = cuda.device_attribute
        threads = k.block[0] * k.block[1] * k.block[2]
        warps = -(-threads // 32)
        regs_per_warp = -(-fn.num_regs * 32 // 256) * 256
        by_regs = (dev.get_attribute(a.MAX_REGISTERS_PER_MULTIPROCESSOR) // regs_per_warp) // warps
        smem = fn.shared_static + k.dynamic_shared + 1024  # 1 KiB reserved per block
        by_smem = dev.get_attribute(a.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR) // smem
        by_threads = dev.get_attribute(a.MAX_THREADS_PER_MULTIPROCESSOR) // threads
        per_sm = min(by_regs, by_smem, by_threads, dev.get_attribute(a.MAX_BLOCKS_PER_MULTIPROCESSOR))
        return per_sm * dev.get_attribute(a.MULTIPROCESSOR_COUNT)

    def _run_layer(self, l, tensors, ws, S, B, h0, c0, c_out, stream: int) -> None:
        persistent = l.persistence.value["mode"] != "none"
        # The layer's one recurrent kernel (step, cell, persistent or cluster family).
        step_k = self.kernel_of(l.name, "recurrent")
        step_fn = self._functions[step_k.name]
        library_product = l.persistence.value["math"] == "cublas"
        w = self._device_weights
        GH = l.gates * l.hidden_size
        y, y_st, y_sb = tensors[l.name]
        xproj = int(ws["projection"])
        cell = int(ws["cell_state"]) if l.cell == "lstm" else 0
        st = l.step_tile.value
        chunk = min(l.unroll.value, S)
        if library_product:
            step_grid = (math.ceil(l.hidden_size / step_k.block[0]), B)
            # hw = h·W_hhᵀ: column-major GH × B = W_hhᵀ (GH × H, as stored) · h (H × B), h
            # being h0 or a step of y (one prepared call for each row stride; the alignment
            # is that of every step).
            item = DTYPES[self.model.dtype].itemsize
            h_align = cublaslt.alignment(y.ptr, y_st * item, h0.ptr if h0 is not None else 0)
            products = {h_sb: self._library.prepare(
                cublaslt.Matmul(self.model.dtype, l.precision.value, m=GH, n=B, k=l.hidden_size,
                                transpose_a=False, lda=GH, ldb=h_sb, ldd=GH), align_b=h_align)
                for h_sb in {y_sb, *([h0.strides[0]] if h0 is not None else [])}}
        else:
            step_grid = (math.ceil(l.hidden_size / st["units_per_block"]),
                         math.ceil(B / st["batch_per_block"]))
        for t0 in range(0, S, chunk):
            steps = min(chunk, S - t0)
            self._project(l, tensors, t0, steps, B, xproj, stream)
            xp_t, xp_b, xp_n = _projection_strides(l.layout.value, B, GH, steps * B)
            if persistent:
                self._run_persistent(l, step_fn, step_k, t0, steps, S, B, y, y_st, y_sb,
                                     h0, c0, c_out, xproj, cell, (xp_t, xp_b, xp_n), stream)
                continue
            for j in range(steps):
                t = t0 + j
                h_prev, h_sb = _previous_h(t, h0, y, y_st, y_sb)
                args = {"h_prev": h_prev, "h_prev_stride_b": h_sb,
                        "xproj": xproj + j * xp_t * 4, "xproj_stride_b": xp_b, "xproj_stride_n": xp_n,
                        "h_out": y.offset(t * y_st), "h_out_stride_b": y_sb, "batch": B}
                if library_product:
                    if h_prev:
                        products[h_sb](int(w[f"{l.name}.w_hh_t"]), h_prev, int(ws["step_product"]),
                                       stream=stream)
                    args["step_product"] = int(ws["step_product"]) if h_prev else 0
                else:
                    args["w_hh_t"] = w[f"{l.name}.w_hh_t"]
                if l.cell == "gru" and l.bias:
                    args["bias_hn"] = w[f"{l.name}.bias_hn"]
                if l.cell == "lstm":
                    args |= {"c0": c0.ptr if c0 is not None else 0, "c": cell,
                             "c_out": c_out.ptr if t == S - 1 else 0, "first_step": int(t == 0)}
                _launch(step_fn, step_k, step_grid, args, stream)

    def _project(self, l, tensors, t0: int, steps: int, B: int, xproj: int, stream: int) -> None:
        """The input projection of steps t0 .. t0+steps-1 of layer l into ``xproj``: rnncc's
        kernel, or (math: cublas) one cuBLASLt call per source, the first adding the bias."""
        w = self._device_weights
        GH, rows = l.gates * l.hidden_size, steps * B
        tile = l.projection_tile.value
        if tile["math"] == "cublas":
            # Y [rows, GH] (layout xw) is column-major GH × rows: W_ih (stored I × GH, used
            # transposed) times the source's columns. A source whose steps are not B rows
            # apart (batch-first input) is a batch of `steps` GEMMs of B columns.
            item = DTYPES[self.model.dtype].itemsize
            for i, s in enumerate(l.sources):
                v, s_t, s_b = tensors[s.name]
                dense = s_t == B * s_b
                g = cublaslt.Matmul(
                    self.model.dtype, l.precision.value, m=GH, n=rows if dense else B, k=s.size,
                    transpose_a=True, lda=l.input_size, ldb=s_b, ldd=GH,
                    batches=1 if dense else steps, stride_b=0 if dense else s_t,
                    stride_d=0 if dense else B * GH, bias=l.bias and i == 0, accumulate=i > 0)
                self._library(g, int(w[f"{l.name}.w_ih"]) + s.offset * item, v.offset(t0 * s_t),
                              xproj, int(w[f"{l.name}.bias"]) if g.bias else 0, stream)
            return
        k = self.kernel_of(l.name, "input_projection")
        fn = self._functions[k.name]
        args = {"w_ih": w[f"{l.name}.w_ih"], "xproj": xproj, "rows": rows, "batch": B}
        if l.bias:
            args["bias"] = w[f"{l.name}.bias"]
        for i, s in enumerate(l.sources):
            v, s_t, s_b = tensors[s.name]
            args |= {f"x{i}": v.offset(t0 * s_t), f"x{i}_stride_t": s_t, f"x{i}_stride_b": s_b}
        if l.layout.value == "xw":
            grid = (math.ceil(GH / tile["bn"]), math.ceil(rows / tile["bm"]))
        else:
            grid = (math.ceil(rows / tile["bn"]), math.ceil(GH / tile["bm"]))
        _launch(fn, k, grid, args, stream)

    def _run_persistent(self, l, fn, k, t0, steps, S, B, y, y_st, y_sb, h0, c0, c_out,
                        xproj, cell, xproj_strides, stream: int) -> None:
        """One persistent launch (grid or cluster) for the steps t0 .. t0+steps-1 of layer l
        (all of them when F = S)."""
        p = l.persistence.value
        if p["mode"] == "cluster":
            # Clusters are independent: one per batch tile, no grid-wide co-residency needed.
            grid = (p["cluster"], -(-B // p["batch_per_block"]))
        else:
            grid = (-(-l.hidden_size // p["units_per_block"]), p["batch_blocks"])
        if p["mode"] == "grid" and grid[0] * grid[1] > self._resident[k.name]:
            raise RuntimeCheckError(
                f"layer '{l.name}': the persistent kernel needs {grid[0] * grid[1]} co-resident "
                f"blocks but this GPU holds {self._resident[k.name]}; refusing to launch (it would hang). "
                "Compile with persistence='none' or for this device (target='device').")
        h_prev, h_sb = _previous_h(t0, h0, y, y_st, y_sb)
        xp_t, xp_b, xp_n = xproj_strides
        args = {"h0": h_prev, "h0_stride_b": h_sb, "w_hh_t": self._device_weights[f"{l.name}.w_hh_t"],
                "xproj_all": xproj, "xproj_stride_t": xp_t, "xproj_stride_b": xp_b,
                "xproj_stride_n": xp_n,
                "y": y.offset(t0 * y_st), "y_stride_t": y_st, "y_stride_b": y_sb,
                "steps": steps, "batch": B}
        if p["mode"] == "grid":
            args["barrier"] = self._barrier
        if l.cell == "gru" and l.bias:
            args["bias_hn"] = self._device_weights[f"{l.name}.bias_hn"]
        if l.cell == "lstm":
            args |= {"c0": c0.ptr if c0 is not None else 0, "c": cell,
                     "c_final": c_out.ptr if t0 + steps == S else 0, "first_chunk": int(t0 == 0)}
        _launch(fn, k, grid, args, stream)

    def _run_merge(self, o, tensors, out, out_tb, S, B, stream: int) -> None:
        k = self.kernel_of(o.name, "merge")
        fn = self._functions[k.name]
        args = {"out": out.ptr, "out_stride_t": out_tb[0], "out_stride_b": out_tb[1],
                "seq_len": S, "batch": B}
        for i, s in enumerate(o.sources):
            v, s_t, s_b = tensors[s.name]
            args |= {f"x{i}": v.ptr, f"x{i}_stride_t": s_t, f"x{i}_stride_b": s_b}
        total = S * B * o.size
        blocks = max(1, min(math.ceil(total / k.block[0]), self.target.sm_count * 8))
        _launch(fn, k, (blocks, 1), args, stream)


def _previous_h(t: int, h0, y, y_st: int, y_sb: int) -> tuple[int, int]:
    """(pointer, batch stride) of h before step t: h0 (0 = zeros) at t = 0, else y[t-1]."""
    if t == 0:
        return (h0.ptr, h0.strides[0]) if h0 is not None else (0, 0)
    return y.offset((t - 1) * y_st), y_sb


def _projection_strides(layout: str, B: int, GH: int, rows: int) -> tuple[int, int, int]:
    """Elements between steps, batch entries and gate columns of the projection buffer:
    Y [rows, G·H] for "xw", Yᵀ [G·H, rows] for "wx" (row = step·B + b)."""
    return (B * GH, GH, 1) if layout == "xw" else (B, 1, rows)


def _launch(fn: driver.Kernel, kernel: codegen.KernelSource, grid: tuple[int, int], args: dict,
            stream: int) -> None:
    if grid[1] > 65535:
        raise RuntimeCheckError(f"{kernel.name}: grid {grid} exceeds 65535 blocks in y; "
                                "the call is too large (split the sequence)")
    fn.launch(grid, kernel.block, [int(args[p.name]) for p in kernel.params],
              kernel.dynamic_shared, stream)


def compile(spec: spec_mod.SpecLike, target: str | target_mod.Target | None = None, *,
            weights: Mapping[str, Any] | None = None, options: CompileOptions | None = None,
            seed: int = 0, autotune: bool = False, progress=None, **option_kwargs) -> CompiledModel:
    """Compile a spec (YAML path or text, dict, or Model) for ``target``.

    ``target``: a preset name (``h100``, ``h200``, ``a100``), ``"device"``, or ``None``
    for the GPU present (the h100 preset on a machine without one). ``weights``: a dict
    named like PyTorch's per layer (``l0.weight_ih`` …); by default PyTorch-style random
    weights from ``seed``. Option keywords (``seq_len``, ``batch``, ``layout``, ``unroll``,
    ``persistence``, ``precision``, ``gemm``, ``workspace_budget``) build :class:`CompileOptions`.
    Nothing here touches a GPU, unless ``autotune``: then the cost model's best candidates
    of each layer are timed on the GPU present (``target`` must be it) and the fastest
    kept, cached on disk (see :mod:`rnncc.autotune`); ``progress(message)`` hears of each
    timing.
    """
    model = spec_mod.load(spec)
    tgt = target_mod.get(target)
    if options is None:
        options = CompileOptions(**option_kwargs)
    elif option_kwargs:
        raise SpecError("compile: pass either options= or option keywords, not both")
    if options.persistence not in (None, "none", "grid", "cluster"):
        raise SpecError(f"compile option 'persistence': got {options.persistence!r}, expected "
                        "'none', 'grid' or 'cluster'")
    if options.precision not in (None, "exact", "tensor"):
        raise SpecError(f"compile option 'precision': got {options.precision!r}, expected "
                        "'exact' (fp32 FMA) or 'tensor' (tensor cores; TF32 for float32)")
    if options.gemm not in (None, "rnncc", "cublas"):
        raise SpecError(f"compile option 'gemm': got {options.gemm!r}, expected 'rnncc' (rnncc's "
                        "kernels only) or 'cublas' (cuBLASLt wherever it can run a GEMM)")
    if options.layout not in (None, "xw", "wx"):
        raise SpecError(f"compile option 'layout': got {options.layout!r}, expected 'xw' "
                        "(Y = X·Wᵀ) or 'wx' (Yᵀ = W·Xᵀ)")
    for field_name in ("seq_len", "batch", "workspace_budget"):
        value = getattr(options, field_name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(f"compile option '{field_name}': got {value!r}, expected a positive integer")
    plan = build_plan(model, tgt, options)
    if autotune:
        from . import autotune as autotune_mod
        if target not in (None, "auto", "device") and not (
                isinstance(target, target_mod.Target) and target == target_mod.get("device")):
            raise SpecError(f"compile: autotune measures on the GPU present; got target={target!r}, "
                            "expected target='device'")
        options = replace(options, tuned=autotune_mod.tune(model, plan, tgt, progress))
        plan = build_plan(model, tgt, options)
    kernels = codegen.render(plan)
    return CompiledModel(model, plan, tgt, kernels, weights, seed)
