"""cuBLASLt through ctypes: the GEMMs the plan hands to NVIDIA's library.

Where a product is a large GEMM (a hoisted input projection of many rows, or a step whose
batch makes h·W_hhᵀ a GEMM of its own), the library's Hopper kernels (wgmma, TMA) run it
at several times the rate of rnncc's mma.sync tiles. The plan says where (``math:
cublas``); rnncc's own kernels do everything around those calls.

Only ``libcublasLt`` is needed, from the CUDA toolkit that nvcc comes with or from the
nvidia-cublas wheel; it is loaded on first use, like PyCUDA. Each call goes on the stream
the runtime gives it (the caller's), in order with rnncc's kernels.

Every matrix here is column-major, as the library sees it: rnncc's row-major [rows, cols]
array with row stride ``ld`` is a column-major cols × rows matrix with leading dimension
``ld``. Output is float32 (a folded LSTMP's h: the storage dtype); the scale and the
accumulation are float32.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys
import threading
from dataclasses import dataclass
from typing import Callable

from .errors import DeviceUnavailable, RuntimeCheckError
from .passes.workspace import LIBRARY_SCRATCH_BYTES

# Values from cublasLt.h, cublas_api.h and library_types.h (CUDA 12 and 13).
_CUDA_TYPE = {"float32": 0, "float16": 2, "bfloat16": 14}
_COMPUTE_32F, _COMPUTE_32F_FAST_TF32 = 68, 77
_DESC_TRANSA, _DESC_TRANSB, _DESC_EPILOGUE, _DESC_BIAS_POINTER = 3, 4, 7, 8
_EPILOGUE_DEFAULT, _EPILOGUE_BIAS = 1, 4
_LAYOUT_BATCH_COUNT, _LAYOUT_STRIDED_BATCH_OFFSET = 5, 6
_PREF_MAX_WORKSPACE_BYTES = 1
_PREF_MIN_ALIGNMENT = {"a": 5, "b": 6, "c": 7, "d": 8}
_ALGO_BYTES, _HEURISTIC_BYTES = 64, 96  # cublasLtMatmulAlgo_t, cublasLtMatmulHeuristicResult_t

# The scratch a run is given by default (split-K partials); a call's are sized in
# passes/workspace.py (LIBRARY_SCRATCH_BYTES, a layer's own where layers run at once).
WORKSPACE_BYTES = LIBRARY_SCRATCH_BYTES


@dataclass(frozen=True)
class Matmul:
    """D[m, n] = op(A)·B (+ bias[m]) (+ D when ``accumulate``), column-major, in
    ``batches`` independent groups of n columns. A is m × k (stored k × m when
    ``transpose_a``), B is k × n; both of ``dtype``; bias is float32, D ``out_dtype``."""

    dtype: str
    precision: str          # "exact" | "tensor" (TF32 for float32)
    m: int
    n: int
    k: int
    transpose_a: bool
    lda: int
    ldb: int
    ldd: int
    batches: int = 1
    stride_b: int = 0       # elements between the batches' B (A is shared)
    stride_d: int = 0
    bias: bool = False
    accumulate: bool = False
    scratch: int = WORKSPACE_BYTES  # bytes of scratch a run is given (and the algorithm may use)
    out_dtype: str = "float32"      # D's type: float32, or ``dtype`` (rounded once, from float32)

    def describe(self) -> str:
        return (f"{self.m}×{self.n}×{self.k} {self.dtype} ({self.precision})"
                + (f" in {self.batches} batches" if self.batches > 1 else ""))


def _library_paths() -> list[str]:
    """Where libcublasLt may be: $RNNCC_CUBLASLT, the loader's search path, the CUDA
    toolkit, and the nvidia wheels of this Python."""
    names = ("libcublasLt.so", "libcublasLt.so.13", "libcublasLt.so.12")
    found = [os.environ["RNNCC_CUBLASLT"]] if os.environ.get("RNNCC_CUBLASLT") else []
    if ctypes.util.find_library("cublasLt"):
        found.append(ctypes.util.find_library("cublasLt"))
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    found += [os.path.join(r, "lib64", n) for r in roots if r for n in names]
    for p in sys.path:
        found += sorted(glob.glob(os.path.join(p, "nvidia", "*", "lib", "libcublasLt.so*")))
    return found


def _load() -> ctypes.CDLL:
    tried = _library_paths()
    for path in tried:
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    raise DeviceUnavailable(
        "the plan runs GEMMs in cuBLASLt (math: cublas) but libcublasLt was not found "
        f"(tried {', '.join(tried) or 'nothing'}); set RNNCC_CUBLASLT to its path, or "
        "compile with gemm='rnncc'")


def alignment(*values: int) -> int:
    """The largest power of two up to 256 that divides every value (pointers or byte
    offsets): the alignment the library may assume."""
    align = 256
    for v in values:
        while v % align:
            align //= 2
    return align


class CublasLt:
    """A cuBLASLt handle and the descriptors and algorithm of every GEMM shape seen so far
    (built once per shape and pointer alignment). The library's scratch memory
    (WORKSPACE_BYTES) is the caller's, per call, so that calls on two streams never share
    it; a lock keeps two threads from setting one descriptor's bias pointer at once."""

    def __init__(self) -> None:
        self._lib = _load()
        self._lib.cublasLtGetStatusName.restype = ctypes.c_char_p
        # No argtypes: every argument is passed wrapped in its exact ctypes type.
        handle = ctypes.c_void_p()
        self._check(self._lib.cublasLtCreate(ctypes.byref(handle)), "cublasLtCreate")
        self._handle = handle
        self._lock = threading.Lock()
        self._plans: dict[tuple, tuple] = {}
        self._runs: dict[tuple, Callable[..., None]] = {}  # prepare()'s result per (g, alignments)
        self._bias_of: dict[int, int] = {}  # the bias pointer each descriptor holds now
        self._one, self._zero = ctypes.c_float(1.0), ctypes.c_float(0.0)

    def _check(self, status: int, what: str) -> None:
        if status != 0:
            name = self._lib.cublasLtGetStatusName(status).decode()
            raise RuntimeCheckError(f"cuBLASLt: {what} failed with {name} ({status})")

    def _set(self, setter, obj, attribute: int, value: ctypes._SimpleCData, what: str) -> None:
        self._check(setter(obj, attribute, ctypes.byref(value), ctypes.c_size_t(ctypes.sizeof(value))),
                    what)

    def _layout(self, dtype: str, rows: int, cols: int, ld: int, batches: int, stride: int):
        layout = ctypes.c_void_p()
        self._check(self._lib.cublasLtMatrixLayoutCreate(
            ctypes.byref(layout), _CUDA_TYPE[dtype], ctypes.c_uint64(rows), ctypes.c_uint64(cols),
            ctypes.c_int64(ld)), "cublasLtMatrixLayoutCreate")
        if batches > 1:
            setter = self._lib.cublasLtMatrixLayoutSetAttribute
            self._set(setter, layout, _LAYOUT_BATCH_COUNT, ctypes.c_int32(batches), "batch count")
            self._set(setter, layout, _LAYOUT_STRIDED_BATCH_OFFSET, ctypes.c_int64(stride),
                      "batch stride")
        return layout

    def _plan(self, g: Matmul, alignments: tuple[int, ...]) -> tuple:
        key = (g, alignments)
        if key in self._plans:
            return self._plans[key]
        lib = self._lib
        compute = _COMPUTE_32F_FAST_TF32 if (g.dtype == "float32" and g.precision == "tensor") \
            else _COMPUTE_32F
        desc = ctypes.c_void_p()
        self._check(lib.cublasLtMatmulDescCreate(ctypes.byref(desc), compute, _CUDA_TYPE["float32"]),
                    "cublasLtMatmulDescCreate")
        setter = lib.cublasLtMatmulDescSetAttribute
        self._set(setter, desc, _DESC_TRANSA, ctypes.c_int32(int(g.transpose_a)), "transa")
        self._set(setter, desc, _DESC_TRANSB, ctypes.c_int32(0), "transb")
        self._set(setter, desc, _DESC_EPILOGUE,
                  ctypes.c_int32(_EPILOGUE_BIAS if g.bias else _EPILOGUE_DEFAULT), "epilogue")
        a_rows, a_cols = (g.k, g.m) if g.transpose_a else (g.m, g.k)
        a = self._layout(g.dtype, a_rows, a_cols, g.lda, g.batches, 0)
        b = self._layout(g.dtype, g.k, g.n, g.ldb, g.batches, g.stride_b)
        d = self._layout(g.out_dtype, g.m, g.n, g.ldd, g.batches, g.stride_d)
        pref = ctypes.c_void_p()
        self._check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "preference")
        psetter = lib.cublasLtMatmulPreferenceSetAttribute
        self._set(psetter, pref, _PREF_MAX_WORKSPACE_BYTES, ctypes.c_uint64(g.scratch),
                  "workspace size")
        for which, align in zip("abcd", alignments):
            self._set(psetter, pref, _PREF_MIN_ALIGNMENT[which], ctypes.c_uint32(align), "alignment")
        result = ctypes.create_string_buffer(_HEURISTIC_BYTES)
        count = ctypes.c_int(0)
        self._check(lib.cublasLtMatmulAlgoGetHeuristic(self._handle, desc, a, b, d, d, pref, 1,
                                                       result, ctypes.byref(count)),
                    f"choosing an algorithm for {g.describe()}")
        lib.cublasLtMatmulPreferenceDestroy(pref)
        if count.value == 0:
            raise RuntimeCheckError(f"cuBLASLt: no algorithm for {g.describe()} with pointer "
                                    f"alignments {alignments} bytes; compile with gemm='rnncc'")
        algo = ctypes.create_string_buffer(result.raw[:_ALGO_BYTES], _ALGO_BYTES)
        self._plans[key] = plan = (desc, a, b, d, algo)
        return plan

    def prepare(self, g: Matmul, align_a: int = 256, align_b: int = 256,
                align_d: int = 256) -> Callable[..., None]:
        """``run(a, b, d, bias, stream, workspace)`` queueing D = op(A)·B (+ bias) (+ D) on
        ``stream`` (a raw CUstream; 0 the legacy default) with ``g.scratch`` bytes of scratch at
        ``workspace``, for pointers aligned to at least ``align_*`` bytes. The descriptors
        and the algorithm are chosen here, once; a run costs one library call (per-step use)."""
        item = 4 if g.dtype == "float32" else 2
        d_item = 4 if g.out_dtype == "float32" else 2
        d_align = alignment(align_d, g.ldd * d_item, g.stride_d * d_item)
        desc, la, lb, ld, algo = self._plan(g, (alignment(align_a, g.lda * item),
                                                alignment(align_b, g.ldb * item, g.stride_b * item),
                                                d_align, d_align))
        matmul, check, what, ptr = self._lib.cublasLtMatmul, self._check, g.describe(), ctypes.c_void_p
        handle, one = self._handle, ctypes.byref(self._one)
        beta = ctypes.byref(self._one if g.accumulate else self._zero)
        # Everything but the three pointers as ready ctypes objects: ctypes converts those
        # fastest, and a step's host time is mostly this call.
        size = ctypes.c_size_t(g.scratch)

        def run(a: int, b: int, d: int, bias: int, stream: int, workspace: int) -> None:
            dp = ptr(d)
            args = (handle, desc, one, ptr(a), la, ptr(b), lb, beta, dp, ld, dp, ld, algo,
                    ptr(workspace), size, ptr(stream))
            if not g.bias:
                check(matmul(*args), what)
                return
            with self._lock:  # the bias pointer lives in the shared descriptor
                if self._bias_of.get(desc.value) != bias:  # set only when it changes (~3 µs)
                    self._set(self._lib.cublasLtMatmulDescSetAttribute, desc, _DESC_BIAS_POINTER,
                              ptr(bias), "bias pointer")
                    self._bias_of[desc.value] = bias
                check(matmul(*args), what)
        return run

    def prepared(self, g: Matmul, align_a: int, align_b: int, align_d: int) -> Callable[..., None]:
        """:meth:`prepare`'s run, made once per shape and alignments and kept."""
        key = (g, align_a, align_b, align_d)
        run = self._runs.get(key)
        if run is None:
            run = self._runs[key] = self.prepare(g, align_a, align_b, align_d)
        return run

    def prepared_for(self, g: Matmul, a: int, b: int, d: int) -> Callable[..., None]:
        """:meth:`prepared`'s run for pointers a, b and d (their alignments)."""
        return self.prepared(g, alignment(a), alignment(b), alignment(d))
