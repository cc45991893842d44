"""Target: a small frozen description of a GPU that every pass reads explicitly.

Presets let a machine without a GPU compile for a named one; :func:`from_device` reads
the real device through PyCUDA when one is present.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from .errors import DeviceUnavailable, PlanError


@dataclass(frozen=True)
class Target:
    name: str
    arch: str                      # nvcc -arch value, e.g. "sm_90a"
    compute_capability: tuple[int, int]
    sm_count: int
    max_threads_per_sm: int
    max_threads_per_block: int
    max_blocks_per_sm: int
    registers_per_sm: int
    registers_per_block: int
    shared_memory_per_sm: int      # bytes
    shared_memory_per_block: int   # bytes without opt-in (static limit)
    shared_memory_per_block_optin: int
    max_cluster_size: int          # portable thread-block cluster size (0: no clusters)
    # The largest cluster a kernel may opt into (cudaFuncAttributeNonPortableClusterSizeAllowed):
    # 16 on Hopper, where a cluster of 16 fills most of one GPC; 0 where there is none beyond
    # the portable size. Whether a given kernel's cluster fits is the driver's to say
    # (cuOccupancyMaxActiveClusters), which the runtime asks before the first launch.
    max_cluster_size_non_portable: int
    # How many clusters of 1, 2, … blocks the GPU holds at once with one block an SM
    # (cuOccupancyMaxActiveClusters). A cluster lives in one GPC, so the count falls faster
    # than SMs ÷ size: an H100 SXM holds 15 clusters of 8 and 7 of 16.
    clusters_at_once: tuple[int, ...]
    l2_bytes: int
    memory_bytes: int
    memory_bandwidth: float        # bytes/s, HBM
    fp32_flops: float              # FLOP/s of FFMA (2 per FMA), dense
    tensor_flops: float            # FLOP/s of fp16/bf16 tensor cores, dense (TF32: half)
    dtypes: tuple[str, ...]        # storage dtypes the kernels may use on this target

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def check_dtype(self, dtype: str) -> None:
        if dtype not in self.dtypes:
            raise PlanError(f"model, field 'dtype': {dtype} cannot run on target "
                            f"{self.name} ({self.arch}); expected one of {', '.join(self.dtypes)}")


_HOPPER = dict(
    arch="sm_90a", compute_capability=(9, 0), sm_count=132,
    max_threads_per_sm=2048, max_threads_per_block=1024, max_blocks_per_sm=32,
    registers_per_sm=65536, registers_per_block=65536,
    shared_memory_per_sm=228 * 1024, shared_memory_per_block=48 * 1024,
    shared_memory_per_block_optin=227 * 1024, max_cluster_size=8,
    max_cluster_size_non_portable=16,
    # Measured on an H100 80GB HBM3 (benchmarks/results/cluster-exchange-16-h100-2026-11-23.txt);
    # another chip of the same kind may differ by its GPCs, which from_device reads.
    clusters_at_once=(132, 66, 39, 30, 22, 17, 15, 15, 9, 7, 7, 7, 7, 7, 7, 7),
    dtypes=("float32", "float16", "bfloat16"),
)

PRESETS: dict[str, Target] = {
    "h100": Target(name="h100", l2_bytes=50 * 2**20, memory_bytes=80 * 10**9,
                   memory_bandwidth=3.35e12, fp32_flops=67e12, tensor_flops=989e12,
                   **_HOPPER),
    "h200": Target(name="h200", l2_bytes=60 * 2**20, memory_bytes=141 * 10**9,
                   memory_bandwidth=4.8e12, fp32_flops=67e12, tensor_flops=989e12,
                   **_HOPPER),
    "a100": Target(name="a100", arch="sm_80", compute_capability=(8, 0), sm_count=108,
                   max_threads_per_sm=2048, max_threads_per_block=1024, max_blocks_per_sm=32,
                   registers_per_sm=65536, registers_per_block=65536,
                   shared_memory_per_sm=164 * 1024, shared_memory_per_block=48 * 1024,
                   shared_memory_per_block_optin=163 * 1024, max_cluster_size=0,
                   max_cluster_size_non_portable=0, clusters_at_once=(),
                   l2_bytes=40 * 2**20, memory_bytes=80 * 10**9, memory_bandwidth=2.0e12,
                   fp32_flops=19.5e12, tensor_flops=312e12, dtypes=("float32", "float16", "bfloat16")),
}


def get(name: "str | Target | None") -> Target:
    """A Target by preset name, ``"device"`` for the GPU present, or ``None``/``"auto"``
    for the GPU present when there is one and the h100 preset otherwise."""
    if isinstance(name, Target):
        return name
    if name in (None, "auto"):
        try:
            return from_device()
        except DeviceUnavailable:
            return PRESETS["h100"]
    if name == "device":
        return from_device()
    try:
        return PRESETS[name]
    except KeyError:
        raise PlanError(f"target: got {name!r}, expected one of {', '.join(PRESETS)}, "
                        "'device' or 'auto'") from None


def from_device(ordinal: int = 0) -> Target:
    """Read the Target from a real GPU through PyCUDA."""
    from .driver import clusters_at_once, device_context  # lazy: PyCUDA is optional

    device = device_context(ordinal).device
    import pycuda.driver as cuda

    a = cuda.device_attribute
    major, minor = device.compute_capability()
    # Architecture-specific features (wgmma, setmaxnreg) need the 'a' suffix on sm_90.
    arch = f"sm_{major}{minor}" + ("a" if (major, minor) == (9, 0) else "")
    sms = device.get_attribute(a.MULTIPROCESSOR_COUNT)
    base = min(PRESETS.values(), key=lambda t: abs(t.sm_count - sms)
               + 1000 * (t.compute_capability != (major, minor)))
    largest = max(base.max_cluster_size, base.max_cluster_size_non_portable) if major >= 9 else 0
    at_once = clusters_at_once(largest, 128, device.get_attribute(a.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)) \
        if largest else ()
    clock_khz = device.get_attribute(a.CLOCK_RATE)
    bus_bits = device.get_attribute(a.GLOBAL_MEMORY_BUS_WIDTH)
    mem_khz = device.get_attribute(a.MEMORY_CLOCK_RATE)
    return replace(
        base,
        name=device.name().strip(),
        arch=arch,
        compute_capability=(major, minor),
        sm_count=sms,
        max_threads_per_sm=device.get_attribute(a.MAX_THREADS_PER_MULTIPROCESSOR),
        max_threads_per_block=device.get_attribute(a.MAX_THREADS_PER_BLOCK),
        registers_per_sm=device.get_attribute(a.MAX_REGISTERS_PER_MULTIPROCESSOR),
        registers_per_block=device.get_attribute(a.MAX_REGISTERS_PER_BLOCK),
        shared_memory_per_sm=device.get_attribute(a.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
        shared_memory_per_block=device.get_attribute(a.MAX_SHARED_MEMORY_PER_BLOCK),
        shared_memory_per_block_optin=device.get_attribute(a.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        l2_bytes=device.get_attribute(a.L2_CACHE_SIZE),
        clusters_at_once=at_once,
        memory_bytes=device.total_memory(),
        # DDR: two transfers per clock.
        memory_bandwidth=2.0 * mem_khz * 1e3 * bus_bits / 8,
        # 128 FP32 lanes per SM on sm_80/sm_90, 2 FLOP per FMA.
        fp32_flops=sms * 128 * 2 * clock_khz * 1e3,
        # Dense fp16 FLOP per clock per SM: 4096 with sm_90's wgmma, 2048 on sm_80.
        tensor_flops=sms * (4096 if major >= 9 else 2048) * clock_khz * 1e3,
    )
