"""Storage dtypes: their C type, size, host representation and test tolerance.

Tolerances are written here once and used by the tests, ``rnncc run`` and the docs. The
error measure is :func:`max_relative_error`: the largest absolute difference divided by
the largest magnitude of the reference (a norm-wise relative error, not element-wise,
so values near zero do not dominate).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    name: str
    c_type: str        # type of activations and weights in generated CUDA
    itemsize: int
    tolerance: float   # max_relative_error vs the float64 reference, S up to 256
    why: str           # one line: where the error comes from


DTYPES: dict[str, DType] = {
    "float32": DType("float32", "float", 4, 1e-4,
                     "fp32 FMA products and sums; exact fp32, no TF32"),
    "float16": DType("float16", "__half", 2, 1e-2,
                     "h rounded to fp16 (2^-11) every step; fp32 accumulation and cell state; "
                     "gates by the hardware's tanh (2^-11)"),
    "bfloat16": DType("bfloat16", "__nv_bfloat16", 2, 5e-2,
                      "h rounded to bf16 (2^-8) every step; fp32 accumulation and cell state; "
                      "gates by the hardware's tanh (2^-11)"),
}


# How the recurrent and projection products are computed (CompileOptions.precision).
PRECISIONS: dict[str, str] = {
    "exact": "fp32 FMA on the stored values: every product exact in fp32",
    "tensor": "tensor cores (mma.sync), fp32 accumulation: fp16/bf16 operands as stored "
              "(products exact in fp32), float32 storage as TF32 (operands rounded to a "
              "10-bit mantissa)",
}
# TF32 rounds both operands of every product to 2^-11 relative; the recurrence carries the
# error through S steps. Against cuDNN in TF32 the bench measured at most 1.2e-4 at S=256
# (benchmarks/results/bench-h100-2026-11-23.json); 5e-3 is the bound the GPU tests check.
TF32_TOLERANCE = 5e-3


def tolerance(dtype: str, precision: str = "exact") -> float:
    """The test tolerance of ``dtype`` computed in ``precision``: the dtype's own, except
    float32 on tensor cores (TF32), whose operands are rounded below float32's precision.
    fp16/bf16 on tensor cores multiply the stored values exactly, like FMA."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    if precision == "tensor" and dtype == "float32":
        return TF32_TOLERANCE
    return DTYPES[dtype].tolerance


def max_relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """max|out - ref| / max|ref|; NaN anywhere in ``out`` gives inf."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape:
        raise ValueError(f"shape mismatch: {out.shape} vs reference {ref.shape}")
    if not np.all(np.isfinite(out)):
        return float("inf")
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    err = float(np.max(np.abs(out - ref))) if ref.size else 0.0
    return err / max(scale, 1e-30)


def round_to(values: np.ndarray, dtype: str) -> np.ndarray:
    """Values rounded to ``dtype`` and returned as float32, for references that must see
    exactly what the device sees."""
    a = np.asarray(values, dtype=np.float32)
    if dtype == "float32":
        return a.copy()
    if dtype == "float16":
        return a.astype(np.float16).astype(np.float32)
    return from_storage(to_storage(a, dtype), dtype)


def to_storage(values: np.ndarray, dtype: str) -> np.ndarray:
    """Host array whose bytes are what the device expects for ``dtype``
    (bfloat16 as uint16 bit patterns, rounded to nearest even)."""
    a = np.ascontiguousarray(values, dtype=np.float32)
    if dtype == "float32":
        return a
    if dtype == "float16":
        return a.astype(np.float16)
    bits = a.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(a)
    out = rounded.astype(np.uint16)
    out[nan] = 0x7FC0
    return out


def from_storage(raw: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values of a host array in device storage format."""
    if dtype == "bfloat16":
        return (np.asarray(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
    return np.asarray(raw).astype(np.float32)


def storage_numpy_dtype(dtype: str) -> np.dtype:
    return np.dtype({"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16}[dtype])
