"""The device layer: the context, module loading, launches and stream-ordered memory.

PyCUDA holds the context (the device's primary one, shared with PyTorch and CuPy);
everything else goes through ctypes on libcuda, because PyCUDA launches only on streams
it created and rnncc must launch on the caller's stream: ``torch.cuda.current_stream()``
(which is also how ``torch.cuda.graph`` captures it) or CuPy's current stream.

What the runtime needs of a GPU is here and nowhere else: whether there is one
(:func:`device_context` says so in one line when not), kernels (:func:`load`,
:meth:`Kernel.launch`, cooperative for grid-persistent kernels), memory ordered on a
stream (:func:`alloc_async`, :func:`free_async`, :func:`memset_async`, :func:`copy_rows`),
streams and events for work a call spreads over several streams (:class:`Streams`,
:func:`event_record`, :func:`stream_wait_event`) and host-mapped words that kernels
report errors in (:class:`HostWords`).
"""

from __future__ import annotations

import atexit
import ctypes
import struct
import threading
import weakref
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .errors import DeviceUnavailable, RuntimeCheckError

NEEDS_GPU = ("needs an NVIDIA GPU with its driver, and then PyCUDA (pip install 'rnncc[cuda]'); "
             "compiling to CUDA source and cubins needs neither")

# cuda.h: CUfunction_attribute and CUmemorytype values.
_ATTR_SHARED_SIZE_BYTES, _ATTR_NUM_REGS, _ATTR_MAX_DYNAMIC_SHARED = 1, 4, 8
_ATTR_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14
PORTABLE_CLUSTER_SIZE = 8  # larger clusters need the kernel's opt-in (above)
_MEMORYTYPE_DEVICE = 2
# A kernel parameter's struct code, and its alignment where that is not its size: a "map"
# is a CUtensorMap template passed by value (128 bytes, 64-byte aligned; its value in a
# launch's arguments is the box's rows, :func:`tensor_map_template`).
_PARAM_CODES = {"ptr": "Q", "i64": "q", "i32": "i", "map": "128s"}
_PARAM_ALIGN = {"map": 64}
# cuda.h: cuLaunchKernel's `extra` keys (CU_LAUNCH_PARAM_*).
_LAUNCH_PARAM_END, _LAUNCH_PARAM_BUFFER_POINTER, _LAUNCH_PARAM_BUFFER_SIZE = 0, 1, 2


def param_offsets(kinds: tuple[str, ...]) -> list[int]:
    """Each parameter's offset in a kernel's parameter buffer, as the CUDA ABI lays them
    out: in order, each at a multiple of its alignment (pointers and 64-bit integers 8
    bytes, 32-bit integers 4, tensor maps 64)."""
    offsets, offset = [], 0
    for kind in kinds:
        size = struct.calcsize(_PARAM_CODES[kind])
        offset += -offset % _PARAM_ALIGN.get(kind, size)
        offsets.append(offset)
        offset += size
    return offsets


def param_layout(kinds: tuple[str, ...]) -> struct.Struct:
    """The parameter buffer of :func:`param_offsets` as a struct to pack the values into."""
    fmt, end = "<", 0
    for kind, offset in zip(kinds, param_offsets(kinds)):
        fmt += "x" * (offset - end) + _PARAM_CODES[kind]
        end = offset + struct.calcsize(_PARAM_CODES[kind])
    return struct.Struct(fmt)


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
    raise DeviceUnavailable(f"no NVIDIA driver here (libcuda.so.1 not found): running kernels {NEEDS_GPU}")


@dataclass(frozen=True)
class DeviceContext:
    device: Any       # pycuda.driver.Device
    context: Any      # its primary context, pushed on the thread that made it
    ordinal: int
    handle: int       # the raw CUcontext
    sm_count: int

    def make_current(self) -> None:
        """Make the context current on the calling thread (once per thread): a call from
        a thread that has not used CUDA yet finds no current context."""
        if getattr(_thread, "context", None) != self.handle:
            _check(_lib().cuCtxSetCurrent(ctypes.c_void_p(self.handle)), "making the context current")
            _thread.context = self.handle


_thread = threading.local()


def gpu_count() -> int:
    """NVIDIA GPUs the driver sees (0 without a driver); needs no PyCUDA."""
    try:
        lib = _lib()
    except DeviceUnavailable:
        return 0
    count = ctypes.c_int(0)
    if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


@lru_cache(maxsize=None)
def device_context(ordinal: int = 0) -> DeviceContext:
    """PyCUDA on the primary context of GPU ``ordinal`` (shared with PyTorch and CuPy).
    Raises :class:`DeviceUnavailable` with a one-line message when there is no GPU, no
    driver or no PyCUDA: the GPU is checked first, since installing PyCUDA on a machine
    without one fails."""
    found = gpu_count()
    if found <= ordinal:
        where = "no NVIDIA GPU" if found == 0 else f"no CUDA device {ordinal} ({found} found)"
        raise DeviceUnavailable(f"{where}: running kernels {NEEDS_GPU}")
    try:
        import pycuda.driver as cuda
    except ImportError as exc:
        raise DeviceUnavailable(f"PyCUDA is not installed ({exc}): running kernels {NEEDS_GPU}") from None
    try:
        cuda.init()
        device = cuda.Device(ordinal)
        context = device.retain_primary_context()
    except cuda.Error as exc:
        raise DeviceUnavailable(f"CUDA is not usable here ({exc}): running kernels {NEEDS_GPU}") from None
    context.push()
    atexit.register(_pop_context, context)
    handle = ctypes.c_void_p()
    _check(_lib().cuCtxGetCurrent(ctypes.byref(handle)), "reading the current context")
    _thread.context = handle.value
    return DeviceContext(device, context, ordinal, handle.value,
                         device.get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT))


def _pop_context(context) -> None:
    try:
        context.pop()
    except Exception:  # the process is exiting; the driver may be gone already
        pass


def _check(status: int, what: str) -> None:
    if status != 0:
        name = ctypes.c_char_p()
        _lib().cuGetErrorName(status, ctypes.byref(name))
        raise RuntimeCheckError(f"CUDA driver: {what} failed with "
                                f"{(name.value or b'?').decode()} ({status})")


@dataclass
class Kernel:
    """A loaded kernel: its module and function handles and what the occupancy check needs.

    The argument buffer is made once and refilled for each launch (the driver copies it
    when the launch is queued): a launch per step must cost little host time. A lock keeps
    two threads from filling it at once."""

    name: str
    module: ctypes.c_void_p
    function: ctypes.c_void_p
    kinds: tuple[str, ...]   # per parameter: "ptr" | "i64" | "i32" | "map"
    num_regs: int
    shared_static: int       # bytes

    def __post_init__(self) -> None:
        # The arguments go to the driver packed in one buffer (cuLaunchKernel's `extra`), not
        # as a pointer per argument: with 42 parameters the driver call took 4.4 µs of host
        # time packed against 5.9 given pointers, and setting 42 ctypes values cost ~3 µs
        # more (benchmarks/results/launch-host-h100-2026-11-25-at-2dd0d26.txt).
        self._layout = param_layout(self.kinds)
        self._maps = "map" in self.kinds
        self._buffer = ctypes.create_string_buffer(max(self._layout.size, 1))
        self._size = ctypes.c_size_t(self._layout.size)
        self._extra = (ctypes.c_void_p * 5)(_LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(self._buffer),
                                            _LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(self._size),
                                            _LAUNCH_PARAM_END) if self.kinds else None
        # cuLaunchKernelEx refuses `extra` while a stream is being captured into a CUDA
        # graph (CUDA_ERROR_INVALID_VALUE, driver 13.0), so the cooperative launch passes
        # a pointer per argument, each into the same packed buffer.
        base = ctypes.addressof(self._buffer)
        self._pointers = (ctypes.c_void_p * max(len(self.kinds), 1))(
            *[base + offset for offset in param_offsets(self.kinds)])
        self._lock = threading.Lock()
        # cuLaunchKernelEx's config with one attribute, cooperative (filled per launch).
        self._attribute = _LaunchAttribute(id=_LAUNCH_ATTRIBUTE_COOPERATIVE, value=(ctypes.c_uint * 16)(1))
        self._config = _LaunchConfig(attrs=ctypes.pointer(self._attribute), numAttrs=1)

    def launch(self, grid: tuple[int, int], block: tuple[int, int, int], values, shared: int,
               stream: int, cooperative: bool = False) -> None:
        """Queue the kernel on ``stream`` (a raw CUstream; 0 is the legacy default stream).
        ``cooperative``: the driver starts the grid only when every block can be resident at
        once, and refuses a grid that can never be (a grid barrier then cannot deadlock).
        A "map" parameter's value is the rows of its template's box (the bytes passed are
        :func:`tensor_map_template`'s)."""
        if self._maps:
            values = [tensor_map_template(v) if k == "map" else v for k, v in zip(self.kinds, values)]
        with self._lock:
            try:
                self._layout.pack_into(self._buffer, 0, *values)
            except struct.error as exc:
                raise RuntimeCheckError(
                    f"launching {self.name}: arguments {list(values)} do not fit its parameters "
                    f"{self.kinds} ({exc}), a bug in rnncc") from None
            if cooperative:
                c = self._config
                c.gridDimX, c.gridDimY, c.gridDimZ = grid[0], grid[1], 1
                c.blockDimX, c.blockDimY, c.blockDimZ = block
                c.sharedMemBytes, c.hStream = shared, stream
                status = _launch_kernel_ex()(ctypes.byref(c), self.function, self._pointers, None)
            else:
                status = _launch_kernel()(self.function, grid[0], grid[1], 1, block[0], block[1],
                                          block[2], shared, stream, None, self._extra)
        if status:
            _check(status, f"launching {self.name}{' (cooperative)' if cooperative else ''} "
                           f"with grid {grid}")

    def max_active_blocks_per_sm(self, block: tuple[int, int, int], shared: int) -> int:
        """How many blocks of this kernel one SM holds at once (the driver's occupancy
        calculation, from the compiled registers and shared memory)."""
        count = ctypes.c_int()
        _check(_lib().cuOccupancyMaxActiveBlocksPerMultiprocessor(
            ctypes.byref(count), self.function, ctypes.c_int(block[0] * block[1] * block[2]),
            ctypes.c_size_t(shared)), f"occupancy of {self.name}")
        return count.value

    def max_active_clusters(self, cluster: int, block: tuple[int, int, int], shared: int) -> int:
        """How many clusters of this kernel (its cluster size compiled in) the GPU holds at
        once: 0 when even one cannot be resident (a cluster of 16 needs a GPC with 16 free
        SMs, each with room for a block)."""
        return _max_active_clusters(self.function, cluster, block, shared, compiled_in=True,
                                    what=f"cluster occupancy of {self.name}")


_LAUNCH_ATTRIBUTE_COOPERATIVE, _LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 2, 4  # CUlaunchAttributeID


class _LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute: the id, padding to 8 bytes, a 64-byte value union (cooperative: an
    int; cluster dimension: three)."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint * 16)]


class _LaunchConfig(ctypes.Structure):
    """CUlaunchConfig."""

    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


assert ctypes.sizeof(_LaunchAttribute) == 72


def _max_active_clusters(function, cluster: int, block: tuple[int, int, int], shared: int,
                         compiled_in: bool, what: str) -> int:
    """cuOccupancyMaxActiveClusters for clusters of ``cluster`` blocks: the size is the
    kernel's own where ``compiled_in``, else passed as a launch attribute."""
    attribute = _LaunchAttribute(id=_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, value=(ctypes.c_uint * 16)(cluster, 1, 1))
    config = _LaunchConfig(gridDimX=cluster, gridDimY=1, gridDimZ=1, blockDimX=block[0], blockDimY=block[1],
                           blockDimZ=block[2], sharedMemBytes=shared, hStream=None,
                           attrs=None if compiled_in else ctypes.pointer(attribute),
                           numAttrs=0 if compiled_in else 1)
    count = ctypes.c_int()
    _check(_lib().cuOccupancyMaxActiveClusters(ctypes.byref(count), function, ctypes.byref(config)), what)
    return count.value

# An empty kernel, JIT-compiled by the driver from PTX: what the cluster occupancy query
# needs (a function whose cluster size is not compiled in).
_EMPTY_PTX = b""".version 7.8
.target sm_90
.address_size 64
.visible .entry rnncc_empty() { ret; }
"""


def clusters_at_once(largest: int, threads: int, shared: int) -> tuple[int, ...]:
    """How many clusters of 1..largest blocks (of ``threads`` and ``shared`` bytes of
    dynamic shared memory each) this GPU holds at once (cuOccupancyMaxActiveClusters): a
    cluster lives in one GPC, so with one block an SM the count falls faster than SMs ÷
    size (H100 SXM: 132 SMs, GPCs of 16–18)."""
    lib = _lib()
    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    _check(lib.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(_EMPTY_PTX)), "loading the empty kernel")
    try:
        _check(lib.cuModuleGetFunction(ctypes.byref(function), module, b"rnncc_empty"), "finding rnncc_empty")
        _check(lib.cuFuncSetAttribute(function, _ATTR_MAX_DYNAMIC_SHARED, ctypes.c_int(shared)),
               f"allowing {shared} B of dynamic shared memory for rnncc_empty")
        if largest > PORTABLE_CLUSTER_SIZE:
            _check(lib.cuFuncSetAttribute(function, _ATTR_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, ctypes.c_int(1)),
                   "allowing rnncc_empty non-portable clusters")
        return tuple(_max_active_clusters(function, size, (threads, 1, 1), shared, compiled_in=False,
                                          what=f"cluster occupancy for clusters of {size}")
                     for size in range(1, largest + 1))
    finally:
        lib.cuModuleUnload(module)


@lru_cache(maxsize=None)
def _launch_kernel_ex():
    fn = _lib().cuLaunchKernelEx
    fn.argtypes = [ctypes.c_void_p] * 4
    return fn


@lru_cache(maxsize=None)
def _launch_kernel():
    """cuLaunchKernel, typed once so that a launch passes plain ints."""
    fn = _lib().cuLaunchKernel
    fn.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    return fn


def load(name: str, cubin: bytes, entry: str, kinds: tuple[str, ...], dynamic_shared: int,
         cluster: int = 0) -> Kernel:
    """Load a kernel from its cubin; ``cluster``: its compiled cluster size (0: none), which
    above the portable size needs the kernel's opt-in before any launch."""
    lib = _lib()
    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    _check(lib.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(cubin)), f"loading {name}")
    _check(lib.cuModuleGetFunction(ctypes.byref(function), module, entry.encode()),
           f"finding {entry} in {name}")
    if dynamic_shared:
        _check(lib.cuFuncSetAttribute(function, _ATTR_MAX_DYNAMIC_SHARED, ctypes.c_int(dynamic_shared)),
               f"allowing {dynamic_shared} B of dynamic shared memory for {name}")
    if cluster > PORTABLE_CLUSTER_SIZE:
        _check(lib.cuFuncSetAttribute(function, _ATTR_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, ctypes.c_int(1)),
               f"allowing {name} its non-portable cluster of {cluster} blocks")

    def attribute(which: int) -> int:
        value = ctypes.c_int()
        _check(lib.cuFuncGetAttribute(ctypes.byref(value), which, function), f"querying {name}")
        return value.value
    kernel = Kernel(name, module, function, kinds, attribute(_ATTR_NUM_REGS),
                    attribute(_ATTR_SHARED_SIZE_BYTES))
    # Unload with the kernel (status ignored: at exit the context may be gone already).
    weakref.finalize(kernel, lib.cuModuleUnload, module)
    return kernel


# cuda.h: CUtensorMapDataType, CUtensorMapInterleave, CUtensorMapSwizzle,
# CUtensorMapL2promotion, CUtensorMapFloatOOBfill values.
_MAP_FLOAT32, _MAP_NO_INTERLEAVE, _MAP_SWIZZLE_128B, _MAP_L2_128B, _MAP_NO_FILL = 7, 0, 3, 2, 0


@lru_cache(maxsize=None)
def tensor_map_template(rows: int) -> bytes:
    """The template of the tensor maps the staged kernels make (lane_product.cuh.j2,
    tensor_map_staging): float32, rank 3, boxes of 32 floats × ``rows`` rows × 1, the
    128-byte swizzle, zeros past the edges. The kernel replaces its address, dims and
    strides with its source's, so those here are placeholders (a 16-byte aligned address,
    one box)."""
    if not 1 <= rows <= 256:
        raise RuntimeCheckError(f"driver: a tensor map's box of {rows} rows; expected 1 to 256")
    u64, u32 = ctypes.c_uint64, ctypes.c_uint32
    raw = (ctypes.c_uint8 * 192)()  # a CUtensorMap: 128 bytes on a 64-byte boundary
    at = (ctypes.addressof(raw) + 63) // 64 * 64
    status = _lib().cuTensorMapEncodeTiled(
        ctypes.c_void_p(at), _MAP_FLOAT32, u32(3), ctypes.c_void_p(1 << 20), (u64 * 3)(32, rows, 1),
        (u64 * 2)(128, 128 * rows), (u32 * 3)(32, rows, 1), (u32 * 3)(1, 1, 1),
        _MAP_NO_INTERLEAVE, _MAP_SWIZZLE_128B, _MAP_L2_128B, _MAP_NO_FILL)
    _check(status, f"encoding a tensor map template of {rows} rows")
    return ctypes.string_at(at, 128)


def copy_rows(dst: int, dst_pitch: int, src: int, src_pitch: int, width: int, rows: int,
              stream: int) -> None:
    """Device-to-device 2-D copy of ``rows`` rows of ``width`` bytes, queued on ``stream``."""
    c = _Memcpy2D(srcMemoryType=_MEMORYTYPE_DEVICE, srcDevice=src, srcPitch=src_pitch,
                  dstMemoryType=_MEMORYTYPE_DEVICE, dstDevice=dst, dstPitch=dst_pitch,
                  WidthInBytes=width, Height=rows)
    _check(_lib().cuMemcpy2DAsync_v2(ctypes.byref(c), ctypes.c_void_p(stream)), "copying h_n")


def copy_on_device(dst: int, src: int, nbytes: int, stream: int) -> None:
    """Device-to-device copy of ``nbytes`` contiguous bytes, queued on ``stream``."""
    _check(_lib().cuMemcpyDtoDAsync_v2(ctypes.c_uint64(dst), ctypes.c_uint64(src), ctypes.c_size_t(nbytes),
                                       ctypes.c_void_p(stream)), f"copying {nbytes} B on the device")


def copy_to_device(dst: int, host, stream: int) -> None:
    """Copy a contiguous NumPy array to device memory ``dst``, ordered on ``stream``. From
    pageable memory the call returns once the array has been staged, so the caller may
    let it go at once."""
    _check(_lib().cuMemcpyHtoDAsync_v2(ctypes.c_uint64(dst), ctypes.c_void_p(host.ctypes.data),
                                       ctypes.c_size_t(host.nbytes), ctypes.c_void_p(stream)),
           f"copying {host.nbytes} B to the device")


# ---- memory ordered on the caller's stream ---------------------------------------------

def alloc_async(nbytes: int, stream: int) -> int:
    """``nbytes`` of device memory from the device's stream-ordered pool, usable by work
    queued on ``stream`` after this call (cuMemAllocAsync)."""
    ptr = ctypes.c_uint64()
    _check(_lib().cuMemAllocAsync(ctypes.byref(ptr), ctypes.c_size_t(max(nbytes, 1)),
                                  ctypes.c_void_p(stream)), f"allocating {nbytes} B")
    return ptr.value


def free_async(ptr: int, stream: int) -> None:
    """Give memory from :func:`alloc_async` back once the work queued on ``stream`` so far
    is done (the pool reuses it for later work on that stream, never under running work)."""
    _check(_lib().cuMemFreeAsync(ctypes.c_uint64(ptr), ctypes.c_void_p(stream)), "freeing")


def memset_async(ptr: int, byte: int, nbytes: int, stream: int) -> None:
    _check(_lib().cuMemsetD8Async(ctypes.c_uint64(ptr), ctypes.c_ubyte(byte), ctypes.c_size_t(nbytes),
                                  ctypes.c_void_p(stream)), f"setting {nbytes} B")


# ---- streams and events: a call's work over several streams ----------------------------

_STREAM_NON_BLOCKING, _EVENT_DISABLE_TIMING = 1, 2


class Streams:
    """Streams and events made on demand and kept: side streams per caller stream (so that
    calls on two streams never queue behind each other, and a stream being captured into
    a CUDA graph is never used by another caller), and a pool of events that a call takes
    and gives back once it has queued its waits (a wait is on the record made before it,
    so an event may be recorded again right after)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._side: dict[int, list[int]] = {}
        self._events: list[int] = []
        self._made: list[tuple[str, int]] = []
        weakref.finalize(self, _destroy, self._made)

    def side(self, caller: int, count: int) -> list[int]:
        """``count`` side streams of the caller's stream ``caller``."""
        with self._lock:
            streams = self._side.setdefault(caller, [])
            while len(streams) < count:
                handle = ctypes.c_void_p()
                _check(_lib().cuStreamCreate(ctypes.byref(handle), _STREAM_NON_BLOCKING), "creating a stream")
                streams.append(handle.value)
                self._made.append(("stream", handle.value))
            return streams[:count]

    def take(self, count: int) -> list[int]:
        """``count`` events (no timing) for one call."""
        with self._lock:
            while len(self._events) < count:
                self._events.append(event_create())
                self._made.append(("event", self._events[-1]))
            taken, self._events = self._events[:count], self._events[count:]
            return taken

    def give_back(self, events: list[int]) -> None:
        with self._lock:
            self._events.extend(events)


def _destroy(made: list[tuple[str, int]]) -> None:
    if not made:
        return
    lib = _lib()
    for kind, handle in made:  # statuses ignored: at exit the context may be gone already
        (lib.cuStreamDestroy_v2 if kind == "stream" else lib.cuEventDestroy_v2)(ctypes.c_void_p(handle))


def event_create(timing: bool = False) -> int:
    """An event; with ``timing``, one that :func:`elapsed_ms` can read."""
    handle = ctypes.c_void_p()
    _check(_lib().cuEventCreate(ctypes.byref(handle), 0 if timing else _EVENT_DISABLE_TIMING),
           "creating an event")
    return handle.value


def event_destroy(event: int) -> None:
    _check(_lib().cuEventDestroy_v2(ctypes.c_void_p(event)), "destroying an event")


def event_record(event: int, stream: int) -> None:
    _check(_lib().cuEventRecord(ctypes.c_void_p(event), ctypes.c_void_p(stream)), "recording an event")


def stream_wait_event(stream: int, event: int) -> None:
    """Work queued on ``stream`` from now on waits for ``event``'s latest record."""
    _check(_lib().cuStreamWaitEvent(ctypes.c_void_p(stream), ctypes.c_void_p(event), 0),
           "waiting on an event")


def elapsed_ms(start: int, end: int) -> float:
    """Milliseconds between two recorded timing events (waits for ``end``)."""
    _check(_lib().cuEventSynchronize(ctypes.c_void_p(end)), "waiting for an event")
    ms = ctypes.c_float()
    _check(_lib().cuEventElapsedTime(ctypes.byref(ms), ctypes.c_void_p(start), ctypes.c_void_p(end)),
           "reading an event's time")
    return ms.value


class HostWords:
    """Words of pinned host memory that kernels write and the host reads without a
    synchronisation (mapped into the device's address space): where a kernel reports an
    error, such as a spin-wait past its bound."""

    def __init__(self, count: int) -> None:
        host = ctypes.c_void_p()
        # CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP
        _check(_lib().cuMemHostAlloc(ctypes.byref(host), ctypes.c_size_t(4 * max(count, 1)), 0x3),
               "allocating pinned status words")
        device = ctypes.c_uint64()
        _check(_lib().cuMemHostGetDevicePointer_v2(ctypes.byref(device), host, 0),
               "mapping pinned status words")
        self.words = (ctypes.c_uint32 * max(count, 1)).from_address(host.value)
        for i in range(len(self.words)):
            self.words[i] = 0
        self.device_ptr = device.value
        weakref.finalize(self, _lib().cuMemFreeHost, host)

    def address(self, index: int) -> int:
        """The device address of word ``index``."""
        return self.device_ptr + 4 * index
