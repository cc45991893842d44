"""The few CUDA driver calls the runtime makes itself, through ctypes on libcuda.

PyCUDA holds the context and the memory; rnncc loads its cubins and launches its kernels
here, because PyCUDA launches only on streams it created, and rnncc must launch on the
caller's stream: ``torch.cuda.current_stream()`` (which is also how ``torch.cuda.graph``
captures it) or CuPy's current stream. Every call runs in the current context, PyCUDA's
copy of the device's primary context.
"""

from __future__ import annotations

import ctypes
import weakref
from dataclasses import dataclass
from functools import lru_cache

from .errors import DeviceUnavailable, RuntimeCheckError

# cuda.h: CUfunction_attribute and CUmemorytype values.
_ATTR_SHARED_SIZE_BYTES, _ATTR_NUM_REGS, _ATTR_MAX_DYNAMIC_SHARED = 1, 4, 8
_MEMORYTYPE_DEVICE = 2
_ARG_TYPES = {"ptr": ctypes.c_uint64, "i64": ctypes.c_int64, "i32": ctypes.c_int32}


class _Memcpy2D(ctypes.Structure):
    """CUDA_MEMCPY2D (v2)."""

    _fields_ = [("srcXInBytes", ctypes.c_size_t), ("srcY", ctypes.c_size_t),
                ("srcMemoryType", ctypes.c_int), ("srcHost", ctypes.c_void_p),
                ("srcDevice", ctypes.c_uint64), ("srcArray", ctypes.c_void_p),
                ("srcPitch", ctypes.c_size_t),
                ("dstXInBytes", ctypes.c_size_t), ("dstY", ctypes.c_size_t),
                ("dstMemoryType", ctypes.c_int), ("dstHost", ctypes.c_void_p),
                ("dstDevice", ctypes.c_uint64), ("dstArray", ctypes.c_void_p),
                ("dstPitch", ctypes.c_size_t),
                ("WidthInBytes", ctypes.c_size_t), ("Height", ctypes.c_size_t)]


@lru_cache(maxsize=None)
def _lib() -> ctypes.CDLL:
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise DeviceUnavailable("the CUDA driver (libcuda.so.1) was not found")


def _check(status: int, what: str) -> None:
    if status != 0:
        name = ctypes.c_char_p()
        _lib().cuGetErrorName(status, ctypes.byref(name))
        raise RuntimeCheckError(f"CUDA driver: {what} failed with "
                                f"{(name.value or b'?').decode()} ({status})")


@dataclass
class Kernel:
    """A loaded kernel: its module and function handles and what the occupancy check needs.

    The argument buffers are made once and refilled for each launch (the driver copies
    them when the launch is queued): a launch per step must cost little host time. So a
    Kernel is not to be launched from two threads at once."""

    name: str
    module: ctypes.c_void_p
    function: ctypes.c_void_p
    kinds: tuple[str, ...]   # per parameter: "ptr" | "i64" | "i32"
    num_regs: int
    shared_static: int       # bytes

    def __post_init__(self) -> None:
        self._args = [_ARG_TYPES[k]() for k in self.kinds]
        self._params = (ctypes.c_void_p * len(self._args))(*[ctypes.addressof(a) for a in self._args])

    def launch(self, grid: tuple[int, int], block: tuple[int, int, int], values, shared: int,
               stream: int) -> None:
        """Queue the kernel on ``stream`` (a raw CUstream; 0 is the legacy default stream)."""
        for arg, value in zip(self._args, values):
            arg.value = value
        status = _launch_kernel()(self.function, grid[0], grid[1], 1, block[0], block[1], block[2],
                                  shared, stream, self._params, None)
        if status:
            _check(status, f"launching {self.name}")


@lru_cache(maxsize=None)
def _launch_kernel():
    """cuLaunchKernel, typed once so that a launch passes plain ints."""
    fn = _lib().cuLaunchKernel
    fn.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    return fn


def load(name: str, cubin: bytes, entry: str, kinds: tuple[str, ...], dynamic_shared: int) -> Kernel:
    lib = _lib()
    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    _check(lib.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(cubin)), f"loading {name}")
    _check(lib.cuModuleGetFunction(ctypes.byref(function), module, entry.encode()),
           f"finding {entry} in {name}")
    if dynamic_shared:
        _check(lib.cuFuncSetAttribute(function, _ATTR_MAX_DYNAMIC_SHARED, ctypes.c_int(dynamic_shared)),
               f"allowing {dynamic_shared} B of dynamic shared memory for {name}")

    def attribute(which: int) -> int:
        value = ctypes.c_int()
        _check(lib.cuFuncGetAttribute(ctypes.byref(value), which, function), f"querying {name}")
        return value.value
    kernel = Kernel(name, module, function, kinds, attribute(_ATTR_NUM_REGS),
                    attribute(_ATTR_SHARED_SIZE_BYTES))
    # Unload with the kernel (status ignored: at exit the context may be gone already).
    weakref.finalize(kernel, lib.cuModuleUnload, module)
    return kernel


def copy_rows(dst: int, dst_pitch: int, src: int, src_pitch: int, width: int, rows: int,
              stream: int) -> None:
    """Device-to-device 2-D copy of ``rows`` rows of ``width`` bytes, queued on ``stream``."""
    c = _Memcpy2D(srcMemoryType=_MEMORYTYPE_DEVICE, srcDevice=src, srcPitch=src_pitch,
                  dstMemoryType=_MEMORYTYPE_DEVICE, dstDevice=dst, dstPitch=dst_pitch,
                  WidthInBytes=width, Height=rows)
    _check(_lib().cuMemcpy2DAsync_v2(ctypes.byref(c), ctypes.c_void_p(stream)), "copying h_n")
