"""Caller arrays on the device: NumPy (copied), PyTorch, CuPy, PyCUDA GPUArray and any
``__cuda_array_interface__`` object (used in place). Results come back in the kind of
the input. Only this module knows about the array libraries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .dtypes import DTYPES, storage_numpy_dtype
from .errors import RuntimeCheckError

_TYPESTR = {"<f4": "float32", "<f2": "float16"}


@dataclass
class DeviceView:
    """A strided view of device memory: pointer, shape and strides in elements."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str
    keep: Any = None   # what keeps the memory alive (caller's array or our allocation)

    def offset(self, elements: int) -> int:
        return self.ptr + elements * DTYPES[self.dtype].itemsize


def kind_of(x: Any) -> str:
    module = type(x).__module__
    if isinstance(x, np.ndarray):
        return "numpy"
    if module.startswith("torch"):
        return "torch" if x.is_cuda else "torch-cpu"
    if module.startswith("cupy"):
        return "cupy"
    if module.startswith("pycuda"):
        return "gpuarray"
    if hasattr(x, "__cuda_array_interface__"):
        return "cai"
    raise RuntimeCheckError(f"got {type(x).__name__}, expected a NumPy array, a PyTorch tensor, "
                            "a CuPy array, a PyCUDA GPUArray or an object with "
                            "__cuda_array_interface__")


def _torch_dtype_name(t) -> str:
    return str(t.dtype).replace("torch.", "")


def view(x: Any, what: str, dtype: str, device_ordinal: int = 0) -> DeviceView:
    """A DeviceView of a caller's device array; checks dtype and device, copies nothing."""
    kind = kind_of(x)
    if kind == "torch":
        got = _torch_dtype_name(x)
        _check_dtype(what, got, dtype)
        if x.device.index != device_ordinal:
            raise RuntimeCheckError(f"{what}: on {x.device}, expected cuda:{device_ordinal} "
                                    "(the device rnncc runs on)")
        return DeviceView(x.data_ptr(), tuple(x.shape), tuple(x.stride()), dtype, x)
    if kind in ("cupy", "gpuarray", "cai"):
        cai = x.__cuda_array_interface__
        got = _TYPESTR.get(cai["typestr"], cai["typestr"])
        if dtype == "bfloat16" and cai["typestr"] == "<V2":
            got = "bfloat16"
        _check_dtype(what, got, dtype)
        shape = tuple(cai["shape"])
        item = DTYPES[dtype].itemsize
        if cai.get("strides") is None:
            strides = contiguous_strides(shape)
        else:
            strides = tuple(s // item for s in cai["strides"])
        return DeviceView(int(cai["data"][0]), shape, strides, dtype, x)
    raise RuntimeCheckError(f"{what}: {kind} arrays are not device arrays")


def _check_dtype(what: str, got: str, expected: str) -> None:
    if got != expected:
        raise RuntimeCheckError(f"{what}: dtype {got}, expected {expected} (the model's dtype); "
                                f"cast it first, e.g. x.to(torch.{expected}) / x.astype('{expected}')")


def host_array(x: Any, what: str, dtype: str) -> np.ndarray:
    """A NumPy input in device storage format (bfloat16 models take float32 NumPy input,
    since NumPy has no bfloat16)."""
    if kind_of(x) == "torch-cpu":
        x = x.detach().float().numpy() if dtype == "bfloat16" else x.detach().numpy()
    a = np.asarray(x)
    allowed = {"float32": [np.float32], "float16": [np.float16],
               "bfloat16": [np.float32]}[dtype]
    if a.dtype not in allowed:
        raise RuntimeCheckError(f"{what}: NumPy dtype {a.dtype}, expected "
                                f"{' or '.join(str(np.dtype(d)) for d in allowed)} for a {dtype} model")
    from .dtypes import to_storage
    return np.ascontiguousarray(to_storage(a, dtype) if dtype == "bfloat16" else a)


def call_lengths(lengths: Any, S: int, B: int) -> "np.ndarray | DeviceView":
    """The length of each batch row: on the host (a list, a NumPy array or a CPU tensor),
    B integers in [0, S], checked and as int32; or on the device (a CUDA tensor or a
    ``__cuda_array_interface__`` array of B contiguous int32), used in place and not
    checked (reading the values would wait for the GPU), which a CUDA graph can capture."""
    kind = kind_of_or_none(lengths)
    if kind in ("torch", "cupy", "gpuarray", "cai"):
        if kind == "torch":
            dtype, shape, ptr = str(lengths.dtype).replace("torch.", ""), tuple(lengths.shape), \
                lengths.data_ptr()
            contiguous = lengths.is_contiguous()
        else:
            cai = lengths.__cuda_array_interface__
            dtype = str(np.dtype(cai["typestr"]))
            shape, ptr = tuple(cai["shape"]), int(cai["data"][0])
            contiguous = cai.get("strides") in (None, (4,))
        if dtype != "int32" or shape != (B,) or not contiguous:
            raise RuntimeCheckError(f"lengths: a device array of shape {shape}, dtype {dtype}, expected "
                                    f"{B} contiguous int32 (one per batch row)")
        return DeviceView(ptr, (B,), (1,), "int32", lengths)
    if kind == "torch-cpu":
        lengths = lengths.numpy()
    a = np.asarray(lengths)
    if a.shape != (B,) or not (a.dtype.kind in "iu" or a.size == 0):
        raise RuntimeCheckError(f"lengths: shape {a.shape}, dtype {a.dtype}, expected {B} integers "
                                "(one per batch row)")
    if a.size and (a.min() < 0 or a.max() > S):
        raise RuntimeCheckError(f"lengths: values from {a.min()} to {a.max()}, expected each in "
                                f"[0, {S}] (S, the input's steps)")
    return np.ascontiguousarray(a, dtype=np.int32)


def kind_of_or_none(x: Any) -> str | None:
    """kind_of for what may also be a plain Python value (None then)."""
    try:
        return kind_of(x)
    except RuntimeCheckError:
        return None


def torch_stream(device_index: int) -> int:
    """The raw CUstream of PyTorch's current stream on the device, without building a
    torch.cuda.Stream object (torch.compile's generated code reads it the same way); the
    public call costs ~10 µs a forward."""
    import torch
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(device_index)
    return torch.cuda.current_stream(device_index).cuda_stream


class _DeviceMemory:
    """``__cuda_array_interface__`` (version 2: no stream to wait on) of contiguous device
    memory that rnncc allocated, for torch.as_tensor."""

    def __init__(self, ptr: int, shape: tuple[int, ...], typestr: str):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": shape, "typestr": typestr,
                                         "strides": None, "version": 2}


def torch_tensor_at(ptr: int, shape: tuple[int, ...], dtype: str, device_index: int):
    """A PyTorch tensor over ``shape`` contiguous elements of ``dtype`` at device address
    ``ptr`` (memory rnncc owns, which the caller keeps alive while the tensor is used), so
    that torch's operators write it in place. bfloat16, which the interface cannot name,
    goes as int16 and is viewed as bfloat16."""
    import torch
    typestr = "<f4" if DTYPES[dtype].itemsize == 4 else "<i2"
    raw = torch.as_tensor(_DeviceMemory(ptr, shape, typestr), device=f"cuda:{device_index}")
    return raw if dtype == "float32" else raw.view(getattr(torch, dtype))


def stream_of(x: Any, kind: str) -> int:
    """The raw CUstream the caller's work on x is ordered on: PyTorch's current stream of
    x's device, CuPy's current stream, else the legacy default stream (0)."""
    if kind == "torch":
        return torch_stream(x.device.index)
    if kind == "cupy":
        import cupy
        return cupy.cuda.get_current_stream().ptr
    return 0


def empty_like_kind(kind: str, like: Any, shape: tuple[int, ...], dtype: str, alloc):
    """A new array of ``kind`` on the device. ``alloc(nbytes)`` makes raw device memory
    for kinds without their own allocator (NumPy results are copied back later)."""
    if kind == "torch":
        import torch
        return torch.empty(shape, dtype=getattr(torch, dtype), device=like.device)
    if kind == "cupy" and dtype != "bfloat16":
        import cupy
        return cupy.empty(shape, dtype=dtype)
    if kind == "gpuarray" and dtype != "bfloat16":
        import pycuda.gpuarray as gpuarray
        return gpuarray.empty(shape, dtype=np.dtype(dtype))
    nbytes = int(np.prod(shape)) * DTYPES[dtype].itemsize
    return alloc(max(nbytes, 1))


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides in elements (plain ints: this runs a few times a forward, and
    np.prod costs microseconds a call)."""
    strides, n = [], 1
    for size in reversed(shape):
        strides.append(n)
        n *= size
    return tuple(reversed(strides))


def to_view(arr: Any, shape: tuple[int, ...], dtype: str) -> DeviceView:
    """DeviceView of an array made by :func:`empty_like_kind` (contiguous)."""
    strides = contiguous_strides(shape)
    if hasattr(arr, "data_ptr"):
        ptr = arr.data_ptr()
    elif hasattr(arr, "__cuda_array_interface__"):
        ptr = int(arr.__cuda_array_interface__["data"][0])
    else:
        ptr = int(arr)  # a PyCUDA DeviceAllocation
    return DeviceView(ptr, shape, strides, dtype, arr)


def numpy_result(raw: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        from .dtypes import from_storage
        return from_storage(raw, dtype)
    return raw.view(storage_numpy_dtype(dtype))
