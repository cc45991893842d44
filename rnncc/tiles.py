"""Tile shapes and the values of the plan's kernel decisions, typed: the cost model ranks
these, codegen renders from them and launch computes grids from them.

A plan keeps these as Decision values (``projection_tile``, ``step_tile``,
``persistence``); ``to_dict`` gives each one's form in ``plan.json`` and in the kernels'
headers. Geometry that follows from a tile (threads, shared memory, registers) is here;
what a tile costs is in ``passes/cost.py``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, replace
from typing import Any, ClassVar, Iterator, Sequence, Union


@dataclass(frozen=True)
class HProjectionBlock:
    """The block of a projected LSTM's h projection (h = r·W_hrᵀ, a kernel per step): one
    shape for every layer. ``warps`` / ``k_slices`` features of h per block, each summed by
    ``k_slices`` warps over K (H) in runs of 32 adjacent k (W_hr's rows and r's rows read
    coalesced), for ``rows`` batch rows: each block reads its rows of W_hr once for them.
    Many small blocks, since a step's product is a few microseconds of latency: P=256 at
    B=8 is 128 blocks of 8 warps, each warp 8 runs of k at H=1024."""

    warps: int = 8
    k_slices: int = 4
    rows: int = 8

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def features(self) -> int:
        return self.warps // self.k_slices


H_PROJECTION_BLOCK = HProjectionBlock()


@dataclass(frozen=True)
class ProjectionTile:
    bm: int   # rows of C per block
    bn: int   # columns of C per block
    tm: int   # rows per thread (two halves of tm/2, bm/2 apart, for conflict-free reads)
    tn: int
    bk: int = 8

    math: ClassVar[str] = "fma"

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    def to_dict(self) -> dict[str, Any]:
        return {"math": self.math, "bm": self.bm, "bn": self.bn, "bk": self.bk, "tm": self.tm,
                "tn": self.tn, "threads": self.threads}


@dataclass(frozen=True)
class TensorProjectionTile:
    """Tile of the input projection on tensor cores: a block of warps_m × warps_n warps
    computes bm × bn of C, each warp (bm/warps_m) × (bn/warps_n) in 16×8 mma tiles."""

    bm: int
    bn: int
    warps_m: int
    warps_n: int
    bk: int = 32   # K per shared-memory tile (see cost.tensor_projection_k_tile)
    # W_ih's row pitch in elements where K is not whole 16-byte loads: the kernel then reads
    # a copy whose rows are padded with zeros to it ("w_ih_rows"), 16 bytes a load; 0: W_ih
    # as stored, K wide.
    row_stride: int = 0
    math: ClassVar[str] = "tensor"

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    def to_dict(self) -> dict[str, Any]:
        return {"math": self.math, "bm": self.bm, "bn": self.bn, "bk": self.bk,
                "warps_m": self.warps_m, "warps_n": self.warps_n, "threads": self.threads,
                **({"row_stride": self.row_stride} if self.row_stride else {})}


class FmaThreads:
    """Threads of an FMA tile: a thread per (units_per_thread units, batch_per_thread
    rows) of the block's tile, times the K split (step, grid and cluster kernels alike)."""

    @property
    def threads(self) -> int:
        return (self.units_per_block // self.units_per_thread) * \
            (self.batch_per_block // self.batch_per_thread) * self.k_split


@dataclass(frozen=True)
class StepTile(FmaThreads):
    units_per_block: int
    units_per_thread: int
    batch_per_block: int
    batch_per_thread: int
    k_split: int
    k_tile: int = 32
    stages: int = 2          # shared-memory buffers of K tiles
    async_copy: bool = False  # cp.async global → shared (float32 storage), else via registers
    math: ClassVar[str] = "fma"

    def shared_bytes(self, gates: int, itemsize: int) -> int:
        tile = self.stages * self.k_tile * (self.units_per_block * gates + self.batch_per_block + 4) * 4
        reduce = (self.k_split - 1) * (self.threads // self.k_split) * \
            self.batch_per_thread * self.units_per_thread * gates * 4
        return tile + reduce

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "threads": self.threads}


@dataclass(frozen=True)
class StepRows:
    """The step of a few batch rows as matrix-vector products (recurrent_step_rows.cu.j2):
    a warp a hidden unit, reading its G rows of W_hh ([G·H, K] as stored, gates
    interleaved, K contiguous) once in 16-byte loads for ``rows`` batch rows of h staged in
    shared memory as float32; after the lanes' sums meet, lane r runs the cell of row r.
    ``warps`` units a block; a call's batch takes ⌈B / rows⌉ blocks along y."""

    warps: int
    rows: int
    math: ClassVar[str] = "rows"

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def units_per_block(self) -> int:
        return self.warps

    @property
    def batch_per_block(self) -> int:
        return self.rows

    def shared_bytes(self, k: int, itemsize: int) -> int:
        return self.rows * RowsProjection.padded_k(k, itemsize) * 4

    @staticmethod
    def row_stride(k: int, itemsize: int) -> int:
        """Elements between rows of W_hh as this form reads it: K padded with zeros to whole
        16-byte loads (the runtime uploads it so)."""
        per_load = 16 // itemsize
        return -(-k // per_load) * per_load

    def to_dict(self) -> dict[str, Any]:
        return {"math": self.math, "warps": self.warps, "rows": self.rows, "threads": self.threads}


@dataclass(frozen=True)
class StepRowsTensor:
    """The step of a few batch rows on tensor cores, fp16/bf16
    (recurrent_step_rows_tensor.cu.j2): ``units`` units a block, their units·G gate rows of
    W_hh (as stored, rows padded like StepRows') in ``row_groups`` warps of 16 rows, the mma's
    A operand read once from global memory; ``k_split`` warps over K for each 16 rows;
    ``n_tiles`` tiles of 8 batch rows of h staged in shared memory, the B operand."""

    units: int
    row_groups: int
    k_split: int
    n_tiles: int
    math: ClassVar[str] = "rows_tensor"

    @classmethod
    def of(cls, gates: int, row_groups: int, k_split: int, n_tiles: int) -> "StepRowsTensor | None":
        """The tile of ``row_groups`` warps of 16 gate rows, None where they are not whole units."""
        rows = 16 * row_groups
        return cls(rows // gates, row_groups, k_split, n_tiles) if rows % gates == 0 else None

    @property
    def warps(self) -> int:
        return self.row_groups * self.k_split

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def units_per_block(self) -> int:
        return self.units

    @property
    def batch_per_block(self) -> int:
        return 8 * self.n_tiles

    def shared_bytes(self, k: int, itemsize: int) -> int:
        return rows_mma_shared_bytes(self.batch_per_block, 16 * self.row_groups, self.k_split, k, itemsize)

    def to_dict(self) -> dict[str, Any]:
        return {"math": self.math, "units": self.units, "row_groups": self.row_groups,
                "k_split": self.k_split, "n_tiles": self.n_tiles, "threads": self.threads}


def resident_shared_bytes(tile, hidden: int, gates: int, itemsize: int) -> int:
    """Shared memory of a persistent block (grid or cluster): the resident W_hhᵀ slice
    (K rows padded to the K tile, 16-byte aligned), h of its batch tile for all K
    ([k][row + 4]) and the K-split partial sums."""
    k_rows = math.ceil(hidden / tile.k_tile) * tile.k_tile
    w = (k_rows * tile.units_per_block * gates * itemsize + 15) // 16 * 16
    h = k_rows * (tile.batch_per_block + 4) * 4
    partial = (tile.k_split - 1) * tile.batch_per_thread * tile.units_per_thread * gates * \
        (tile.threads // tile.k_split) * 4
    return w + h + partial


@dataclass(frozen=True)
class PersistentTile(FmaThreads):
    """Tile of the grid-persistent step: a block owns `units_per_block` units for the
    whole sequence and loops over batch tiles of `batch_per_block` rows."""

    units_per_block: int
    batch_per_block: int
    batch_per_thread: int
    k_split: int
    batch_blocks: int          # blocks along y sharing the batch tiles
    units_per_thread: int = 1
    k_tile: int = 32

    def shared_bytes(self, hidden: int, gates: int, itemsize: int) -> int:
        """Must equal SHARED_BYTES in recurrent_persistent.cu.j2 (a static_assert checks)."""
        return resident_shared_bytes(self, hidden, gates, itemsize)


def stage_buffer_floats(stages: int, rows: int, k_chunk: int, threads: int, pitch: int,
                        tensor_map: bool = False) -> int:
    """Floats of the stage buffers of the kernels that stage one operand by chunks of K
    (``lane_product.cuh.j2``'s: the K-split backward, the staged grid forward; their SUMS):
    ``stages`` buffers of ``rows`` × ``k_chunk`` + 4 floats (``tensor_map``: dense, rows ×
    ``k_chunk``, the 128-byte swizzle keeping the reads apart), which after the product hold
    half the ``threads`` / 32 warps' sums, rows × ``pitch`` floats each; the larger."""
    row = k_chunk if tensor_map else k_chunk + 4
    return max(stages * rows * row, threads // 64 * rows * pitch)


# Shared memory the tensor-map form of the staged kernels takes besides its buffers
# (lane_product.cuh.j2, tensor_map_staging): up to 1008 bytes to put the stage buffers on a
# 1024-byte boundary (the 128-byte swizzle's period; align_shared takes a 16-byte aligned
# address), 8 mbarriers (one a stage buffer, at most KSPLIT_STAGES), and the block's map
# being made (128 bytes on a 128-byte boundary: up to 240 with its padding).
TENSOR_MAP_SHARED_BYTES = 1024 + 8 * 8 + 256

# Why the staged kernels copy their chunks by tensor maps (one thread issues a copy of a box
# of 32 floats × the chunk's rows, an mbarrier counts the bytes) rather than by cp.async
# from every thread: cp.async's issue took the product's warps' issue slots. Measured on the
# H200 (prototypes benchmarks/forward_step.cu and ksplit_step.cu, -DTMA): the float32 LSTM
# H=1024 forward 19.87 → 16.04 µs a step at B=64, 12.18 → 10.36 at B=32, 9.14 → 8.28 at
# B=16; the K-split backward in clusters of 2 22.30 → 16.52, of 4 17.98 → 14.84
# (results/forward-step-h200-2026-11-28.txt, forward-step-b16-b32-h200-2026-11-28.txt,
# ksplit-step-h200-2026-11-28.txt).
TENSOR_MAP_STAGING = ("measured: tensor-map copies of the chunks beat every thread's cp.async "
                      "(forward 19.87 → 16.04 µs a step at LSTM H=1024 B=64, K-split backward "
                      "22.30 → 16.52; results/forward-step-h200-2026-11-28.txt, ksplit-step-h200-2026-11-28.txt)")


@dataclass(frozen=True)
class StagedPersistentTile:
    """Tile of the grid-persistent float32 step with h staged by chunks
    (``templates/recurrent_persistent_staged.cu.j2``), for batches too large for the FMA grid
    kernel's whole-h staging: block x owns ``units_per_block`` units (W_hhᵀ's gate columns
    over all K in shared memory, as ``PersistentTile``), and each step stages h of its batch
    tile ``k_chunk`` rows of K at a time into ``stages`` buffers (stages − 1 chunks in
    flight; by tensor-map copies with ``tensor_map``, else by cp.async), the ``threads`` /
    32 warps each summing a share of every chunk. A
    lane (8 row groups × 4 column groups) keeps ``lane_rows`` × ``lane_columns`` sums; the
    warps' sums meet in shared memory, where the cells read them. The product is the one the
    K-split backward runs (``KSplitBackwardTile``), turned to the forward."""

    units_per_block: int
    batch_per_block: int       # 8 row groups × lane_rows
    batch_blocks: int          # blocks along y sharing the batch tiles
    k_chunk: int = 128
    stages: int = 2
    threads: int = 256
    tensor_map: bool = False   # chunks by tensor-map copies (sm_90; TENSOR_MAP_STAGING), else cp.async

    @property
    def lane_rows(self) -> int:
        return self.batch_per_block // 8

    def lane_columns(self, gates: int) -> int:
        """Gate columns a lane sums: the block's over 4 column groups, rounded up (the
        resident W_hhᵀ's rows padded with zero columns to 4 × this)."""
        return -(-self.units_per_block * gates // 4)

    def k_rows(self, hidden: int) -> int:
        """K rows of the resident W_hhᵀ: H in whole chunks (zero rows past H)."""
        return -(-hidden // self.k_chunk) * self.k_chunk

    def shared_bytes(self, hidden: int, gates: int, itemsize: int) -> int:
        """Must equal SHARED_BYTES in recurrent_persistent_staged.cu.j2 (a static_assert
        checks): W_hhᵀ's padded columns over the K rows, the stage buffers of h (rows ×
        k_chunk + 4 floats), which then hold half the warps' sums, and the LSTM cell state
        of the batch tile (kept for every cell, a batch tile × units floats); with tensor
        maps, dense buffers and TENSOR_MAP_SHARED_BYTES."""
        pitch = 4 * self.lane_columns(gates)
        sums = stage_buffer_floats(self.stages, self.batch_per_block, self.k_chunk, self.threads, pitch,
                                   self.tensor_map)
        return 4 * (self.k_rows(hidden) * pitch + sums + self.batch_per_block * self.units_per_block) \
            + (TENSOR_MAP_SHARED_BYTES if self.tensor_map else 0)


@dataclass(frozen=True)
class RegisterPersistentTile:
    """Tile of the grid-persistent float32 step with W_hhᵀ in registers, for small batches
    (``templates/recurrent_persistent_staged.cu.j2``, its registers form): block x owns
    ``units_per_block`` units, and warp w of its ``threads`` / 32 owns ``warp_k_rows`` rows
    of K. Lane (phase p, column group g) keeps W_hhᵀ of its ``lane_columns`` gate columns
    over every ``k_phases``-th float4 of its warp's K rows in registers for the whole
    sequence; each step the warp stages h of its own K rows of the batch tile (no block
    barrier), a lane's h values are float4 broadcasts from shared memory, the phases' sums
    meet by shuffles and the warps' sums in shared memory, where the cells read them.
    Measured against the FMA grid kernel, whose product reads both operands from shared
    memory: LSTM H=1024 B=8 4.76 µs a step against 6.29, B=1 2.35 against 3.00
    (``benchmarks/forward_registers.cu``, results/forward-registers-h100-2026-11-27.txt)."""

    units_per_block: int
    batch_per_block: int       # rows of h a block stages and sums (any count)
    batch_blocks: int          # blocks along y sharing the batch tiles
    threads: int = 256
    k_phases: int = 1          # lanes sharing a column group, each a phase of K (1, 2, 4, 8)

    @property
    def lane_groups(self) -> int:
        """Column groups of a warp (lanes of one phase)."""
        return 32 // self.k_phases

    def lane_columns(self, gates: int) -> int:
        """Gate columns a lane sums: the block's over the column groups, rounded up (zero
        weights past the block's columns)."""
        return -(-self.units_per_block * gates // self.lane_groups)

    def warp_k_rows(self, hidden: int) -> int:
        """K rows a warp owns: H over the warps, in whole float4s of every phase."""
        step = 4 * self.k_phases
        return -(-hidden // (self.threads // 32 * step)) * step

    def k_rows(self, hidden: int) -> int:
        """K rows of the staged h: the warps' rows (zeros past H)."""
        return self.threads // 32 * self.warp_k_rows(hidden)

    def weight_registers(self, hidden: int, gates: int) -> int:
        """Floats of W_hhᵀ a thread keeps in registers."""
        return self.warp_k_rows(hidden) // self.k_phases * self.lane_columns(gates)

    def registers_fit(self, hidden: int, gates: int) -> bool:
        """Whether a thread's registers hold its W_hhᵀ, its sums (columns × rows) and a
        float4 of h a row, and leave the cells' epilogue enough, without spilling. At 256
        threads (255 registers), read off ptxas at 64 tiles of demand (weights + sums + 4 a
        row) 200–232, each built with lengths, with the gates stored and as a residual
        layer (results/registers-spills-2026-11-27.jsonl):
        - demand ≤ 220, or ≤ 228 with at most 136 weights: above, tiles of 144–192 weights
          spilled 4–56 bytes;
        - at most 192 weights: 200 spilled 8–100 bytes, 220 up to 252, in every variant;
        - from 176 weights, 2 or 4 phases of K: with one, 176–192 weights spilled 8–104
          bytes.
        Three admitted tiles still spill 12–36 bytes, in a residual layer with lengths or
        its gates stored: GRU H=1000 at 16 units (1 row and 4 phases; 2 rows and 2
        phases), RNN H=1200 (12 rows, 1 phase).
        Not at 512 threads: at 128 registers a thread tiles of 44–64 weights spilled 8–48
        bytes (GRU H=1024 B=8, RNN H=650 B=8, LSTM H=1024 B=8), and in the prototype 512
        threads ran no faster than 256 (results/forward-registers-h100-2026-11-27.txt)."""
        weights = self.weight_registers(hidden, gates)
        demand = weights + (self.lane_columns(gates) + 4) * self.batch_per_block
        return (self.threads == 256 and weights <= 192 and (weights < 176 or self.k_phases > 1)
                and (demand <= 220 or (demand <= 228 and weights <= 136)))

    def shared_bytes(self, hidden: int, gates: int, itemsize: int) -> int:
        """Must equal SHARED_BYTES in recurrent_persistent_staged.cu.j2 (a static_assert
        checks): h of the batch tile over the K rows, the warps' sums (rows × the padded
        columns a warp), and the LSTM cell state of the batch tile."""
        columns = self.lane_groups * self.lane_columns(gates)
        return 4 * self.batch_per_block * (self.k_rows(hidden) + self.threads // 32 * columns + self.units_per_block)


def library_unaligned(k: int, itemsize: int) -> bool:
    """Whether cuBLASLt's GEMM over K = ``k`` runs the align2 kernels: 16-bit operands whose
    rows are not whole 16-byte vectors."""
    return itemsize == 2 and k * itemsize % 16 != 0


def library_padded_sizes(k: int, m: int, itemsize: int) -> tuple[int, int] | None:
    """(k, m) rounded up to multiples of 8 where cuBLASLt's GEMM of K = ``k`` and M = ``m``
    would run the align2 kernels (16-bit operands, either not whole 16-byte vectors), None
    where it would not. Padded with zeros to those sizes, the step's product runs at the
    aligned rate: the leading dimensions alone change nothing, the sizes 1.7-3.9× at H=650-1300
    (results/library-step-padding-h200-2026-11-29.txt)."""
    if not (library_unaligned(k, itemsize) or library_unaligned(m, itemsize)):
        return None
    return -(-k // 8) * 8, -(-m // 8) * 8


def projection_padded_k(k: int, columns: int, itemsize: int) -> int:
    """K rounded up to a multiple of 8 where cuBLASLt's projection over K = ``k`` (16-bit
    operands, rows not whole 16-byte vectors) runs its unaligned kernels and padding K
    alone lets it run the aligned ones: where the output's ``columns`` (M = G·H) are a
    multiple of 8 too; else 0. Measured (results/projection-moves-h200-2026-11-29.jsonl,
    profiled): at M % 8 = 0 the padded GEMM ran 2-5× faster (LSTM fp16 H=500 B=256 S=35:
    119.5 → 41.7 µs); at M % 8 = 4 (GRU, tanh RNN at H % 8 = 4) it ran as slowly as the
    unpadded one (GRU H=1100 B=64 S=35: 270.9 → 268.4), so padding there bought only the
    merge kernel's copy."""
    if not library_unaligned(k, itemsize) or columns % 8:
        return 0
    return -(-k // 8) * 8


def batch_tiles_per_block(batch: int, batch_per_block: int, batch_blocks: int) -> int:
    """Batch tiles of `batch_per_block` rows each block of a grid-persistent kernel runs a
    step when `batch_blocks` blocks along y share the batch."""
    return math.ceil(math.ceil(batch / batch_per_block) / batch_blocks)


# Registers a thread of the tensor grid kernel takes besides W_hh's part in registers
# (register_steps): a base, the accumulators and B operands of each batch tile of 8, and the
# projection and cell state of its (unit, row) elements in each batch tile a block runs. Fitted
# to ptxas over 30 kernels of a census of fp16/bf16 layers (H 1024-2048, B 1-256): with these,
# every kernel estimated to fit ran without spills, and every one that spilled was estimated
# not to (LSTM fp16 H=1024 in 32-unit blocks, K split 2, 512 threads: 12 k-steps in registers
# used 128 of 128; H=2048 in 16-unit blocks at 3 batch tiles a block spilled 24 bytes at 9).
HYBRID_BASE_REGISTERS = 68
HYBRID_REGISTERS_PER_BATCH_TILE = 6
HYBRID_REGISTERS_PER_ELEMENT_VALUE = 2


# Registers a thread of the grid kernel's wgmma blocks of several batch tiles takes: a base, each batch tile's
# accumulators (BATCH / 2 floats; the block's tiles run one after another, unrolled) and the
# values of its (unit, row) elements (the projection's gates and the cell state,
# element_registers in tensor_core.cuh.j2), 2 each as in HYBRID_REGISTERS_PER_ELEMENT_VALUE.
# The base is what ptxas says (nvcc 13, rnncc/ at 2dc3007, results/local-memory-census-2026-11-29.txt)
# of 16-unit blocks of 256 threads with batch tiles of 32: at 3 tiles a block (LSTM fp16 H=700
# B=256: 48 + 2 × 30) all 255 registers without spills, at 4 (GRU: 64 + 2 × 32, LSTM: 64 + 2 × 40,
# H=777-1024 B=256) 4-320 bytes spilled, and those steps ran 1.2-3.3× their price (LSTM fp16
# H=900 B=256: 64.9 µs a step against 19.8, results/step-forms-h200-2026-11-29-unaligned.json).
# Blocks of one batch tile are not bounded: none the planner took spilled (the census above;
# at 512 threads, 128 registers a thread, this estimate would read them 8-20 over).
WGMMA_GRID_BASE_REGISTERS = 128


# The hybrid registers form's A fragments of the pair of shared-memory k-steps a warp loads
# a pair ahead of its mma (two pairs of 16 bytes a lane).
HYBRID_SHARED_A_REGISTERS = 16
# Its batch tiles: at most 16 rows. At 32 the estimate missed (GRU fp16 H=560, a residual
# layer, 6 k-steps in registers: 168 registers and 20 bytes spilled; nvcc 13, rnncc/ at 12ade59).
HYBRID_SHARED_ROWS = 16


def register_cap(threads: int) -> int:
    """Registers a thread may use in a block of ``threads`` with one block per SM, as ptxas
    caps them: 64 K registers over the threads rounded up to 128, at most 255 (128 at
    257–512 threads)."""
    return min(255, 65536 // (-(-threads // 128) * 128))


def lanes_k_tile(k_split: int) -> int:
    """The K tile of the FMA cluster kernel's lanes form: its K split, so that K is padded
    to the split only (H=100 in 4 lanes multiplies 100 k, not the 128 of a 32-wide tile);
    at least 2, so that a row of half weights is whole 4-byte words."""
    return max(k_split, 2)


@dataclass(frozen=True)
class ClusterTile(FmaThreads):
    """Tile of the cluster-persistent step: `cluster` blocks share one batch tile of
    `batch_per_block` rows; block r owns units [r·units_per_block, (r+1)·units_per_block)."""

    cluster: int
    units_per_block: int
    batch_per_block: int
    batch_per_thread: int
    k_split: int
    units_per_thread: int = 1
    k_tile: int = 32
    # Each thread copies its share of W_hhᵀ (its K slice × units × gates, as float) from
    # shared memory into registers once, and steps multiply from there.
    weights_in_registers: bool = False
    # The lanes form (recurrent_cluster_lanes.cu.j2): the K split's threads adjacent lanes
    # whose partial sums meet by shuffles, one block barrier a step.
    k_lanes: bool = False

    def shared_bytes(self, hidden: int, gates: int, itemsize: int) -> int:
        """Must equal SHARED_BYTES in the cluster templates (a static_assert checks). The
        shared-memory form: the resident tile with a second buffer of h (the peers send the
        next step's into it). The lanes form: the block's rows of W_hh (k contiguous, each
        an odd number of 4-byte words) and two buffers of h for all K, rows an odd number of
        floats apart. Either, in a cluster of several blocks: the buffers' two mbarriers."""
        k_rows = math.ceil(hidden / self.k_tile) * self.k_tile
        mbarriers = 2 * 8 if self.cluster > 1 else 0
        if not self.k_lanes:
            return resident_shared_bytes(self, hidden, gates, itemsize) + \
                k_rows * (self.batch_per_block + 4) * 4 + mbarriers
        row_words = k_rows * itemsize // 4 | 1
        w = (self.units_per_block * gates * row_words * 4 + 15) // 16 * 16
        return w + 2 * k_rows * (self.batch_per_block | 1) * 4 + mbarriers

    @property
    def cells(self) -> int:
        """(row, unit) pairs a thread (its K group) runs the cell for."""
        return self.batch_per_thread * self.units_per_thread

    @property
    def projection_ahead(self) -> int:
        """Steps the lanes form loads the projection ahead, a ring of registers (gates ×
        cells × steps): four where a thread's cells are few, fewer where the ring would crowd
        out the product's registers."""
        return 4 if self.cells <= 2 else 2 if self.cells <= 8 else 1

    def weight_registers(self, hidden: int, gates: int) -> int:
        """Floats of W_hhᵀ a thread holds with weights_in_registers."""
        k_per_thread = math.ceil(hidden / self.k_tile) * self.k_tile // self.k_split
        return k_per_thread * self.units_per_thread * gates

    def registers_fit(self, hidden: int, gates: int) -> bool:
        """Whether the W share fits beside the rest of the kernel's registers (up to 80 a
        thread, and the projection's ring) under the cap ptxas gives a block of this size
        (register_cap: 128 a thread at 257–512 threads; ptxas spilled at 64 weights under a
        cap of 128, none at 48)."""
        cap = register_cap(self.threads)
        ring = self.projection_ahead * self.cells * gates if self.k_lanes else 0
        return self.weight_registers(hidden, gates) <= min(96, cap - 80 - ring)


MMA_M, MMA_N = 16, 8


def mma_k(itemsize: int) -> int:
    """K of one mma.sync: 16 for fp16/bf16 operands, 8 for TF32."""
    return 16 if itemsize == 2 else 8


@dataclass(frozen=True)
class TensorTile:
    """Tile of a persistent step on tensor cores. A block owns `units_per_block` units,
    i.e. M = units·G rows of W_hh (padded to `m_tiles`·16), kept in shared memory in
    mma fragment order, and a batch tile of `batch_per_block` rows (N, a multiple of 8).
    Its warps are m_tiles × k_split: each computes one 16-row tile for every batch column
    over 1/k_split of K; the partial sums meet in shared memory, where the epilogue runs
    the cell for each (unit, row). `cluster` > 0: blocks per cluster (mode cluster);
    `batch_blocks`: blocks along y sharing the batch tiles (mode grid), each running
    `tiles_per_block` of them a step at the planned batch with their projection and cell
    state in registers (a larger batch loops over more, from memory).

    `weights_in_registers` (mode cluster, k_split 1): the registers form
    (recurrent_cluster_tensor_registers.cu.j2). Each warp keeps its 16 rows' A fragments
    for all of K in registers and runs the cell from its accumulators (no partial sums
    in shared memory, one block barrier a step); a unit's gates are `rows_per_unit` rows
    (GRU: a zero fourth), so that they meet in 4 lanes of one C fragment."""

    units_per_block: int
    batch_per_block: int
    k_split: int
    m_tiles: int
    cluster: int = 0
    batch_blocks: int = 1
    weights_in_registers: bool = False
    tiles_per_block: int = 1
    wgmma: bool = False
    # Mode grid, 16-bit operands: the first `register_steps` k-steps of each warp's share of
    # K stay in its registers, shared memory holds the rest (a block holds more of W_hh than
    # shared memory alone: fp16 H=1024 in 32 blocks, 4 layers side by side; planned by
    # persistence.grid_family where W_hh does not fit shared memory alone).
    # The registers form (cluster, mma.sync), > 0: the hybrid registers form, for a W_hh
    # more than the registers of any cluster hold: each warp keeps the first
    # `register_steps` k-steps of its rows in registers and reads the rest from shared
    # memory (with_shared_steps_for; 0 there is all of K in registers).
    register_steps: int = 0
    # Mode grid: a block waits for h of the step before by polling y itself (the launch fills
    # the rows it waits for first), not at a grid barrier a step (common.polled_exchange).
    # Planned for SM partitions whose threads stage ≤ 2 vectors of h (persistence.grid_family),
    # as where it measured faster.
    polled_exchange: bool = False

    def __post_init__(self) -> None:
        if self.polled_exchange and (self.cluster or self.weights_in_registers):
            raise ValueError(f"tiles: TensorTile polled_exchange=True needs mode grid, got cluster={self.cluster}, "
                             f"weights_in_registers={self.weights_in_registers}")
        if self.register_steps and (self.wgmma or (self.cluster and not self.weights_in_registers)):
            raise ValueError(f"tiles: TensorTile register_steps={self.register_steps} needs mma.sync in mode "
                             f"grid or in the cluster registers form, got cluster={self.cluster}, "
                             f"wgmma={self.wgmma}, weights_in_registers={self.weights_in_registers}")
        if self.wgmma and not ((self.weights_in_registers or self.cluster == 0) and self.m_tiles % 4 == 0):
            raise ValueError(f"tiles: TensorTile wgmma=True needs the registers form or mode grid "
                             f"(cluster 0), and whole warpgroups (m_tiles a multiple of 4), got "
                             f"weights_in_registers={self.weights_in_registers}, cluster={self.cluster}, "
                             f"m_tiles={self.m_tiles}")

    @property
    def threads(self) -> int:
        return 32 * self.m_tiles * self.k_split

    @classmethod
    def registers_form(cls, hidden: int, gates: int, cluster: int, rows: int) -> "TensorTile":
        """The registers form's tile for a cluster size and batch rows: the units split
        evenly over the blocks, in whole warps (a warp's 16 rows are whole units) and
        16-byte chunks of h."""
        per_warp = MMA_M // cls.rows_per_unit(gates)
        step = math.lcm(8, per_warp)
        units = math.ceil(hidden / cluster / step) * step
        return cls(units, rows, 1, units // per_warp, cluster, 1, weights_in_registers=True)

    @staticmethod
    def rows_per_unit(gates: int) -> int:
        """Rows of W_hh a unit takes in the registers form: its gates padded to 4 (one for
        a single gate)."""
        return 1 if gates == 1 else 4

    def weight_registers(self, hidden: int, itemsize: int) -> int:
        """32-bit registers of A fragments a thread holds in the registers form: 4 a
        k-step."""
        return 4 * self.k_steps(hidden, itemsize)

    def registers_fit(self, hidden: int, gates: int, itemsize: int) -> bool:
        """Whether the registers form's A fragments fit beside the rest of a thread's
        registers under ptxas' cap for one block of this size per SM (register_cap; 128
        at 448 threads): the B operands in flight, the accumulators, the projection and
        cell state of its elements and 40 more (64 for fp16/bf16). fp16/bf16 load B by
        ldmatrix, two k-steps a load, one load ahead of the mma (8 registers a batch tile
        of 8), two ahead at a single batch tile (12); TF32's B operands are plain loads,
        which ptxas hoists for every k-step (2 registers each).
        With fp16/bf16 the estimate passed the cap wherever ptxas spilled, over 67
        candidates of 8 shapes (H 64-512, clusters 1-16, B 8-32; LSTM fp16 H=512 in a
        cluster of 16: estimate 213, ptxas 231 of 255); TF32 LSTM H=256 used 241
        (estimate 245). tests/test_codegen.py checks that no candidate spills."""
        return 4 * self.k_steps(hidden, itemsize) + self.registers_beside_fragments(hidden, gates, itemsize) \
            <= register_cap(self.threads)

    def registers_beside_fragments(self, hidden: int, gates: int, itemsize: int) -> int:
        """The registers form's estimate of a thread's registers other than its W_hh
        fragments (registers_fit)."""
        n_tiles = self.batch_per_block // MMA_N
        chains = 2 if n_tiles == 1 else 1
        elements = n_tiles * (1 if self.rows_per_unit(gates) == 4 else 4)
        b_operands = 2 * self.k_steps(hidden, itemsize) * n_tiles if itemsize == 4 else (12 if n_tiles == 1 else 8) * n_tiles
        return b_operands + 4 * n_tiles * chains + elements * (gates + 1) + (40 if itemsize == 4 else 64)

    def with_shared_steps_for(self, hidden: int, gates: int, itemsize: int, budget: int) -> "TensorTile | None":
        """This registers-form tile (mma.sync, fp16/bf16) as the hybrid registers form: as
        many of each warp's k-steps in registers as a thread holds beside the rest of the
        registers form's (registers_beside_fragments) and the A fragments of a pair of
        shared-memory k-steps loaded ahead (HYBRID_SHARED_A_REGISTERS), under
        thread_register_limit, even (the product takes k-steps in pairs) and at least 2;
        the rest in shared memory, which must fit ``budget`` bytes; batch tiles of at most
        HYBRID_SHARED_ROWS. None elsewhere. ptxas (nvcc 13) spilled nothing at the 182
        kernels of LSTM fp16/bf16 H=520-700, GRU H=560-768 and tanh RNN H=1100-1400, plain,
        saving their gates and residual, that this admits."""
        if itemsize != 2 or not self.weights_in_registers or self.wgmma or self.register_steps \
                or self.batch_per_block > HYBRID_SHARED_ROWS:
            return None
        k_steps = self.k_steps(hidden, itemsize)
        spare = thread_register_limit(self.threads) - self.registers_beside_fragments(hidden, gates, itemsize) \
            - HYBRID_SHARED_A_REGISTERS
        steps = min(spare // 4, k_steps - 1) // 2 * 2
        if steps < 2:
            return None
        tile = replace(self, register_steps=steps)
        return tile if tile.shared_bytes(hidden, gates, itemsize) <= budget else None

    def shared_steps(self, hidden: int, itemsize: int) -> int:
        """The hybrid registers form's k-steps a warp reads from shared memory (0 elsewhere)."""
        return self.k_steps(hidden, itemsize) - self.register_steps \
            if self.weights_in_registers and self.register_steps else 0

    def with_weights_in_registers_for(self, hidden: int, gates: int, itemsize: int,
                                      budget: int) -> "TensorTile | None":
        """This grid tile (mma.sync, 16-bit operands) with the fewest k-steps of each warp's
        share of W_hh in registers (register_steps) that bring its shared memory within
        ``budget`` bytes, where the registers allow them (4 a k-step beside the HYBRID_*
        estimate of the rest, under register_cap); None where no such split exists."""
        if itemsize != 2 or self.cluster or self.wgmma or self.weights_in_registers:
            return None
        other = self.registers_beside_w(gates)
        for steps in range(1, self.k_steps(hidden, itemsize)):
            tile = replace(self, register_steps=steps)
            if 4 * steps + other > register_cap(self.threads):
                return None
            if tile.shared_bytes(hidden, gates, itemsize) <= budget:
                return tile
        return None

    def with_weights_resident(self, hidden: int, gates: int, itemsize: int) -> "TensorTile | None":
        """This grid tile (mma.sync, 16-bit operands, W_hh in shared memory) with all but
        one k-step of each warp's share of W_hh in registers for the launch (register_steps;
        the template keeps one in shared memory), as cuDNN's persistent LSTM at fp16 H=1024
        holds it (64 blocks of 256 threads, 214 registers a thread:
        results/ncu-cudnn-lstm-h1024-h200-2026-11-28.txt). Only where measured faster
        (results/register-tiles-h200-2026-11-28.txt, 9 tiles 0.30-0.58 µs a step faster):
        one batch tile a block, ≤ 256 threads (ptxas' cap of 255 registers; at 512 threads
        the cap of 128 left 7 of 8 k-steps, which ran 0.02 µs faster at one shape and 0.17
        slower at another), under the HYBRID_* estimate. None elsewhere."""
        if itemsize != 2 or self.cluster or self.wgmma or self.weights_in_registers or self.register_steps \
                or self.tiles_per_block != 1 or self.threads > 256:
            return None
        steps = self.k_steps(hidden, itemsize) - 1
        if steps < 1 or 4 * steps + self.registers_beside_w(gates) > register_cap(self.threads):
            return None
        return replace(self, register_steps=steps)

    def exchange_vectors(self, hidden: int, itemsize: int) -> int:
        """16-byte vectors of h a thread stages a step for one batch tile (its items in
        stage_h_polled, at most: rows of odd length go in a run)."""
        return -(-self.batch_per_block * -(-hidden * itemsize // 16) // self.threads)

    def element_values(self, gates: int) -> int:
        """Values a thread keeps in registers for its (unit, row) elements of every batch
        tile the block runs (the projection's gates and the cell state)."""
        return self.tiles_per_block * -(-self.units_per_block * self.batch_per_block // self.threads) * (gates + 1)

    def wgmma_registers(self, gates: int) -> int:
        """The WGMMA_GRID_* estimate of a thread's registers in a grid block with the product
        by wgmma."""
        return (WGMMA_GRID_BASE_REGISTERS + self.tiles_per_block * self.batch_per_block // 2
                + HYBRID_REGISTERS_PER_ELEMENT_VALUE * self.element_values(gates))

    def registers_beside_w(self, gates: int) -> int:
        """The HYBRID_* estimate of a thread's registers other than its k-steps of W_hh (4
        each): a base, the B fragments of each batch tile of 8, and the values a thread
        keeps for each of its (unit, row) elements of each batch tile (the projection's
        gates and the cell state)."""
        return (HYBRID_BASE_REGISTERS + HYBRID_REGISTERS_PER_BATCH_TILE * (self.batch_per_block // MMA_N)
                + HYBRID_REGISTERS_PER_ELEMENT_VALUE * self.element_values(gates))

    def register_w_bytes(self, itemsize: int) -> int:
        """Bytes of W_hh a block keeps in registers (register_steps k-steps of each warp's
        share), which shared memory does not hold."""
        return self.m_tiles * MMA_M * self.register_steps * self.k_split * mma_k(itemsize) * itemsize

    def resident(self, hidden: int, itemsize: int) -> bool:
        """Whether all but one k-step of each warp's share of W_hh stay in registers
        (with_weights_resident's tiles)."""
        return self.register_steps > 0 and self.register_steps == self.k_steps(hidden, itemsize) - 1

    def k_steps(self, hidden: int, itemsize: int) -> int:
        """mma k-steps of one warp's chain over its share of K (padded)."""
        return self.k_padded(hidden, itemsize) // mma_k(itemsize) // self.k_split

    def k_padded(self, hidden: int, itemsize: int) -> int:
        chunk = mma_k(itemsize) * self.k_split
        return math.ceil(hidden / chunk) * chunk

    def shared_bytes(self, hidden: int, gates: int, itemsize: int) -> int:
        """Must equal SHARED_BYTES in the persistent templates (a static_assert checks):
        W_hh fragments [m_tiles·16 × K] in the operand type (TF32 in 4 bytes), h of the
        batch tile [rows][K + 16 bytes of padding] (two buffers in a cluster, where the
        peers write the next step's while this one is read, each with an 8-byte
        mbarrier), and the K-split partial sums [k_split][rows][m_tiles·16 + 4] in
        float32."""
        k = self.k_padded(hidden, itemsize)
        if self.weights_in_registers:  # two h buffers and their mbarriers (W comes from memory)
            # The hybrid form's fragments past the registers first: 16 bytes a lane a k-step.
            shared_w = self.m_tiles * self.shared_steps(hidden, itemsize) * 32 * 16
            return shared_w + 2 * self.batch_per_block * (k * itemsize + 16) + 2 * 8
        partial = self.k_split * self.batch_per_block * (self.m_tiles * MMA_M + 4) * 4
        if self.wgmma:  # K in whole 64-wide blocks of the 128-byte swizzle, no row padding
            k64 = math.ceil(k / 64) * 64
            return (self.m_tiles * MMA_M + self.batch_per_block) * k64 * itemsize + partial
        w = self.m_tiles * MMA_M * k * itemsize - self.register_w_bytes(itemsize)
        h = (2 if self.cluster else 1) * self.batch_per_block * (k * itemsize + 16)
        mbarriers = 2 * 8 if self.cluster else 0
        return w + h + partial + mbarriers


# ---- the input projection -----------------------------------------------------------

@dataclass(frozen=True)
class RowsProjection:
    """The input projection of a few rows as matrix-vector products
    (input_projection_rows.cu.j2): a warp ``cols`` adjacent columns of the gates (rows of
    W_ih, read once a pass in 16-byte loads; ``row_stride`` apart, K or, where K is not whole
    16-byte loads, a copy's padded rows), ``rows`` input rows a pass staged in shared memory,
    ``warps`` warps a block."""

    rows: int
    row_stride: int
    warps: int = 8
    cols: int = 4
    math: ClassVar[str] = "rows"

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @staticmethod
    def padded_k(k: int, itemsize: int) -> int:
        """K as the kernel stages it: whole 16-byte loads of all 32 lanes."""
        per_round = 32 * 16 // itemsize
        return -(-k // per_round) * per_round

    def shared_bytes(self, k: int, itemsize: int) -> int:
        return self.rows * self.padded_k(k, itemsize) * 4

    def to_dict(self) -> dict[str, Any]:
        return {"math": self.math, "rows": self.rows, "warps": self.warps, "cols": self.cols,
                "row_stride": self.row_stride, "threads": self.threads}


@dataclass(frozen=True)
class RowsProjectionTensor:
    """The input projection of a few rows on tensor cores, fp16/bf16
    (input_projection_rows_tensor.cu.j2): ``row_groups`` warps of 16 gate columns a block
    (rows of W_ih, the mma's A operand read once from global memory), ``k_split`` warps
    over K for each, ``n_tiles`` tiles of 8 input rows staged in shared memory. Where K is
    not whole 16-byte loads, the kernel reads a copy of W_ih whose rows are padded with zeros
    (``row_stride``; the runtime uploads it as "w_ih_rows")."""

    row_groups: int
    k_split: int
    n_tiles: int
    row_stride: int  # elements between W_ih's rows as read: K, or K padded to whole 16-byte loads
    math: ClassVar[str] = "rows_tensor"

    @property
    def m_rows(self) -> int:
        return 16 * self.row_groups

    @property
    def rows(self) -> int:
        return 8 * self.n_tiles

    @property
    def threads(self) -> int:
        return 32 * self.row_groups * self.k_split

    def shared_bytes(self, k: int, itemsize: int) -> int:
        return rows_mma_shared_bytes(self.rows, self.m_rows, self.k_split, k, itemsize)

    def to_dict(self) -> dict[str, Any]:
        return {"math": self.math, "row_groups": self.row_groups, "k_split": self.k_split,
                "n_tiles": self.n_tiles, "row_stride": self.row_stride, "threads": self.threads}


def rows_mma_shared_bytes(rows: int, m_rows: int, k_split: int, k: int, itemsize: int) -> int:
    """Static shared memory of a rows kernel on tensor cores (rows_mma.cuh.j2): the staged
    rows (K padded to runs of 32, the row pitch to 32 past a multiple of 64 elements) and
    the K split's partial sums."""
    staged = -(-StepRows.row_stride(k, itemsize) // 64) * 64 + 32
    return rows * staged * itemsize + k_split * m_rows * (rows + 1) * 4


@dataclass(frozen=True)
class LibraryProjection:
    """The input projection as cuBLASLt GEMMs (one per source), no rnncc kernel of its own.
    ``padded_k``: where the input's width is not whole 16-byte vectors of 16-bit operands
    (projection_padded_k), the K both operands are padded to with zeros: W_ih's rows (a
    weight of their own, "w_ih_padded") and the chunk's input, which the merge kernel copies
    (or, for a sum, writes) into the workspace; 0: as stored."""

    math: ClassVar[str] = "cublas"
    padded_k: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"math": self.math, **({"padded_k": self.padded_k} if self.padded_k else {})}


@dataclass(frozen=True)
class FusedProjection:
    """The input projection inside the recurrent launch (fp16/bf16 cluster kernel, W_hh in
    registers; recurrent_cluster_tensor_registers.cu.j2 with projection_producer.cuh.j2):
    ``producer_rows`` rows of ``cluster`` producer blocks ahead of the recurrent clusters in
    the grid, each keeping COLUMNS gate columns of W_ih in shared memory and writing
    x·W_ihᵀ + b of ``chunk`` steps at a time into the projection buffer, a flag a chunk;
    the recurrent blocks check a chunk's flag two steps before they read it. No kernel or
    library call of its own (passes/fusion.py says when)."""

    chunk: int          # steps a flag covers
    producer_rows: int  # grid rows of producer clusters (producers = producer_rows · cluster)
    cluster: int        # the recurrent kernel's cluster size, which the producers share
    math: ClassVar[str] = "fused"
    COLUMNS: ClassVar[int] = 32     # gate columns a producer: 2 warps of 16 along columns
    PASS_ROWS: ClassVar[int] = 32   # x rows a producer multiplies at a time: 2 warps of 16 along rows
    WARPS: ClassVar[int] = 4        # the producer's warps that multiply, at least (8 where the block has them); all copy

    @property
    def producers(self) -> int:
        return self.producer_rows * self.cluster

    @staticmethod
    def row_pitch(k: int) -> int:
        """Elements between staged rows of W_ih and x: K padded to whole k-steps of 16, plus
        16 bytes, so that ldmatrix's 8 rows fall in distinct banks."""
        return -(-k // 16) * 16 + 8

    def shared_bytes(self, k: int, itemsize: int) -> int:
        """W_ih's columns and two buffers of PASS_ROWS x rows."""
        return (self.COLUMNS + 2 * self.PASS_ROWS) * self.row_pitch(k) * itemsize

    @staticmethod
    def producer_rows_for(gate_columns: int, cluster: int) -> int:
        return -(-gate_columns // (FusedProjection.COLUMNS * cluster))

    def flags(self, steps: int) -> int:
        """Flag words of a launch of ``steps`` steps: one a chunk."""
        return -(-steps // self.chunk)

    def to_dict(self) -> dict[str, Any]:
        return {"math": self.math, "chunk": self.chunk, "producer_rows": self.producer_rows,
                "cluster": self.cluster, "producers": self.producers, "columns": self.COLUMNS}


Projection = Union[ProjectionTile, TensorProjectionTile, RowsProjection, RowsProjectionTensor, LibraryProjection, FusedProjection]


# ---- the recurrent steps ---------------------------------------------------------------

@dataclass(frozen=True)
class PerStep:
    """Persistence ``none``: a launch per step, of rnncc's FMA step kernel (``math`` fma,
    tiled by the layer's ``step_tile``) or of cuBLASLt's h·W_hhᵀ and rnncc's cell kernel
    (``math`` cublas)."""

    math: str   # "fma" | "cublas"
    mode: ClassVar[str] = "none"

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "math": self.math}


@dataclass(frozen=True)
class Persistent:
    """Persistence ``grid`` or ``cluster``: one launch for the sequence, W_hh resident, the
    step tiled by ``tile`` (FMA tiles for ``math`` fma, TensorTile for tensor)."""

    mode: str                    # "grid" | "cluster"
    math: str                    # "fma" | "tensor"
    tile: Union[PersistentTile, StagedPersistentTile, RegisterPersistentTile, ClusterTile, TensorTile]
    shared_bytes: int            # dynamic shared memory of a block
    blocks: int | None = None    # grid: the blocks launched (units × batch blocks)

    @classmethod
    def of(cls, mode: str, math: str, tile, hidden: int, gates: int, itemsize: int) -> "Persistent":
        """The value for ``tile`` in ``mode``: its shared memory, and in grid mode the blocks
        of the units × batch blocks."""
        blocks = -(-hidden // tile.units_per_block) * tile.batch_blocks if mode == "grid" else None
        return cls(mode, math, tile, tile.shared_bytes(hidden, gates, itemsize), blocks)

    @property
    def threads(self) -> int:
        return self.tile.threads

    @property
    def lanes(self) -> bool:
        """The lanes form of the FMA cluster kernel (recurrent_cluster_lanes.cu.j2)."""
        return isinstance(self.tile, ClusterTile) and self.tile.k_lanes

    @property
    def staged(self) -> bool:
        """The FMA grid kernel with h staged by chunks (recurrent_persistent_staged.cu.j2)."""
        return isinstance(self.tile, StagedPersistentTile)

    @property
    def registers(self) -> bool:
        """The FMA grid kernel with W_hhᵀ in registers (recurrent_persistent_staged.cu.j2's
        registers form)."""
        return isinstance(self.tile, RegisterPersistentTile)

    @property
    def tensor_maps(self) -> bool:
        """The staged form copying its chunks by tensor maps: a map a block in the call's
        workspace (passes/workspace.py)."""
        return self.staged and self.tile.tensor_map

    def to_dict(self) -> dict[str, Any]:
        tile = asdict(self.tile)
        if isinstance(self.tile, TensorTile):  # defaults left out, as plans have named tiles
            if not self.tile.weights_in_registers:
                del tile["weights_in_registers"]
            if self.tile.tiles_per_block == 1:
                del tile["tiles_per_block"]
            if not self.tile.wgmma:
                del tile["wgmma"]
            if not self.tile.register_steps:
                del tile["register_steps"]
            if not self.tile.polled_exchange:
                del tile["polled_exchange"]
        out = {"mode": self.mode, "math": self.math, **tile,
               "threads": self.tile.threads, "shared_bytes": self.shared_bytes}
        if self.lanes:
            out["projection_ahead"] = self.tile.projection_ahead
        if self.blocks is not None:
            out["blocks"] = self.blocks
        return out


Persistence = Union[PerStep, Persistent]


@dataclass(frozen=True)
class BackwardTile:
    """The block of a layer's backward recurrence (``templates/backward_recurrent.cu.j2``):
    a grid-persistent kernel, one block an SM, block x owning ``units`` hidden units.

    Each step in reverse time a block needs the gradient dh of its units, which is
    dG·W_hh[:, its units] over every gate row of every unit (K = G·H): so it keeps those
    columns of W_hh (G·H × units float32) in shared memory where they fit
    (``w_in_shared``; else it reads them from L2 every step), and reads all of dG of the
    step after from L2 once. Its warps split K, and each thread takes ``rows`` batch rows
    at once, so that each W value it reads serves that many rows; the warps' sums meet in
    shared memory, and one thread per (row, unit) runs the cell's backward. ``units`` is
    as few as the SMs allow, so that the step spreads over as many SMs as can meet at a
    grid barrier."""

    units: int
    blocks: int
    rows: int
    w_in_shared: bool
    threads: int = 256
    k_unroll: int = 4  # K iterations whose dG loads are in flight together

    @property
    def units_padded(self) -> int:
        """A row of the resident W_hh columns: units rounded up to 4 floats, one 16-byte
        load a lane (lanes reading adjacent rows then hit no bank twice)."""
        return _padded_to_4(self.units)

    @property
    def sums_padded(self) -> int:
        """A thread's sums (rows × units_padded) rounded up to a power of two, the count
        the warp's reduction takes."""
        return 1 << (self.rows * self.units_padded - 1).bit_length()

    def w_bytes(self, gates: int, hidden: int) -> int:
        return 4 * gates * hidden * self.units_padded

    def shared_bytes(self, gates: int, hidden: int, batch: int) -> int:
        """Dynamic shared memory of a launch: the W_hh columns where they are resident, two
        float32 carries (dh, dc) per batch row and unit, and the warps' partial sums."""
        return (self.w_bytes(gates, hidden) if self.w_in_shared else 0) + 8 * batch * self.units \
            + 4 * (self.threads // 32) * self.rows * self.units

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"threads": self.threads}


def _padded_to_4(units: int) -> int:
    return -(-units // 4) * 4


@dataclass(frozen=True)
class ClusterBackwardTile:
    """The block of a half layer's backward recurrence in thread-block clusters
    (``templates/backward_cluster.cu.j2``), W_hh resident in registers as mma A fragments:
    a cluster of ``cluster`` blocks holds all of W_hh for ``batch_per_cluster`` batch rows,
    block rank r owning units [r·units, (r+1)·units), and clusters along y cover the batch
    (they share nothing, so they need not be resident at once).

    Step t of a block: dh_t of its units = W_hh[:, its units]ᵀ·dG_{t+1}, an mma product of
    M = its units (``m_tiles`` tiles of 16) over K = every gate row of every unit of the
    cluster (G·cluster·units, unit-major, so that each block's rows are one contiguous
    slice) against the batch rows (N); ``k_split`` warps share a tile's K, each holding its
    K share of A in registers; the warps' sums meet in shared memory, the cell's backward
    gives the block's dG_t, and one bulk copy a peer sends it into every peer's buffer (the
    forward's registers form, with dG in the place of h).

    ``register_steps`` > 0 is the hybrid form, for a W_hh the registers of the largest
    cluster cannot hold: each warp keeps the first ``register_steps`` k-steps of its share
    in registers and reads the rest from its run of shared memory every step (the forward's
    hybrid grid tiles do the same). 0: all of the share in registers."""

    cluster: int
    m_tiles: int
    k_split: int
    batch_per_cluster: int
    register_steps: int = 0

    @property
    def units(self) -> int:
        return MMA_M * self.m_tiles

    @property
    def threads(self) -> int:
        return 32 * self.m_tiles * self.k_split

    def k_rows(self, gates: int) -> int:
        """K of the product: every gate row of the cluster's units, padding included."""
        return gates * self.cluster * self.units

    def split_steps(self, gates: int) -> int:
        """k-steps of 16 a warp runs (and keeps A fragments of, 4 registers each)."""
        return self.k_rows(gates) // (16 * self.k_split)

    def shared_steps(self, gates: int) -> int:
        """k-steps of a warp's share read from shared memory every step (the hybrid form's)."""
        return self.split_steps(gates) - self.register_steps if self.register_steps else 0

    def shared_bytes(self, gates: int, itemsize: int) -> int:
        """The hybrid form's W_hh fragments (16 bytes a lane a k-step, a warp's run each),
        then two dG buffers (K × the cluster's batch rows), the warps' partial sums (float32,
        rows padded by 4) and the buffers' two mbarriers; at least the slots W_hh is staged
        through first (up to 4 k-steps of 16-byte fragments a lane, a warp)."""
        steady = 2 * self.k_rows(gates) * self.batch_per_cluster * itemsize \
            + 4 * self.k_split * self.batch_per_cluster * (self.units + 4) + 16
        w = (self.threads // 32) * self.shared_steps(gates) * 32 * 16
        return w + max(steady, (self.threads // 32) * min(self.split_steps(gates), 4) * 32 * 16)

    def clusters(self, batch: int) -> int:
        return -(-batch // self.batch_per_cluster)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"units": self.units, "threads": self.threads}


@dataclass(frozen=True)
class FmaClusterBackwardTile:
    """The block of a float32 layer's backward recurrence in thread-block clusters
    (``templates/backward_cluster.cu.j2``, its FMA product): the same cluster, exchange and
    cell as ``ClusterBackwardTile``'s, with exact fp32 products on the FMA units (TF32 tensor
    cores would not be exact).

    Block rank r owns ``units`` units; K (G·cluster·units gate rows, unit-major) is split
    over ``k_split`` warps. A lane owns one unit (lanes across ``lane_units``, the units
    rounded up to a power of two) and ``lane_rows`` batch rows: it keeps W_hh of its unit
    over its warp's K share in registers (``share`` floats) and sums those rows of dG read
    from shared memory, where the lanes of one row group read the same words (broadcast).
    dG's buffers hold [k][row], so a block's slice (its units' gate rows, every row) is one
    contiguous run for the bulk copy to each peer."""

    cluster: int
    units: int
    k_split: int
    lane_rows: int

    @property
    def lane_units(self) -> int:
        return 1 << (self.units - 1).bit_length()

    @property
    def row_groups(self) -> int:
        return 32 // self.lane_units

    @property
    def batch_per_cluster(self) -> int:
        return self.row_groups * self.lane_rows

    @property
    def threads(self) -> int:
        return 32 * self.k_split

    def k_rows(self, gates: int) -> int:
        """K of the product: every gate row of the cluster's units, padding included."""
        return gates * self.cluster * self.units

    def share(self, gates: int) -> int:
        """K rows a warp sums, and the W_hh values each of its lanes keeps in registers."""
        return self.k_rows(gates) // self.k_split

    def partial_bytes(self) -> int:
        """The warps' partial sums, [k_split][rows][units + 1] float32 (a pitch one past the
        units, so that the cells' reads of one unit's rows do not all fall on one bank where
        units is a power of two), rounded to 16 bytes."""
        return -(-4 * self.k_split * self.batch_per_cluster * (self.units + 1) // 16) * 16

    def shared_bytes(self, gates: int, itemsize: int = 4) -> int:
        """Two dG buffers (K × the cluster's batch rows, float32), the partial sums and the
        buffers' two mbarriers."""
        return 2 * self.k_rows(gates) * self.batch_per_cluster * itemsize + self.partial_bytes() + 16

    def clusters(self, batch: int) -> int:
        return -(-batch // self.batch_per_cluster)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"batch_per_cluster": self.batch_per_cluster, "threads": self.threads}


@dataclass(frozen=True)
class KSplitBackwardTile:
    """The block of a float32 layer's backward recurrence with K split across a cluster
    (``templates/backward_ksplit.cu.j2``): grid-persistent like ``BackwardTile`` (one grid
    barrier a step, every cluster resident at once), but a cluster of ``cluster`` blocks
    shares cluster × ``units`` units, and block rank q keeps W_hh of those units for its
    ``k_rows_block`` rows of K (= G·H) and reads only that range of dG a step, where the
    grid form's blocks each read all of it. The blocks' partial sums meet over DSMEM in
    the block that owns their unit (rank q owns ``units`` of them and runs their cells).

    The product: dG staged ``k_chunk`` K rows at a time into ``stages`` buffers (stages − 1
    chunks in flight; by tensor-map copies, TENSOR_MAP_STAGING: clusters mean sm_90, which
    has them; by cp.async into the same layout where dG cannot be a map's source), each of
    the ``threads`` / 32 warps summing its share of each chunk; a
    lane (8 row groups × 4 unit groups) keeps ``lane_rows`` × ``lane_units`` sums. A pass
    covers 8 × ``lane_rows`` batch rows."""

    cluster: int
    units: int
    lane_rows: int
    k_chunk: int = 128
    stages: int = 2
    threads: int = 256  # warps along K: 8 (the candidates'), or 16

    @property
    def cluster_units(self) -> int:
        return self.cluster * self.units

    @property
    def lane_units(self) -> int:
        """Units a lane sums: the cluster's over 4 unit groups, rounded up."""
        return -(-self.cluster_units // 4)

    @property
    def rows_per_pass(self) -> int:
        return 8 * self.lane_rows

    def clusters(self, hidden: int) -> int:
        return -(-hidden // self.cluster_units)

    def blocks(self, hidden: int) -> int:
        return self.cluster * self.clusters(hidden)

    def k_rows_block(self, gates: int, hidden: int) -> int:
        """K rows a block: a cluster's share of G·H in whole chunks (W_hh's rows past G·H
        are zeros)."""
        share = -(-gates * hidden // self.cluster)
        return -(-share // self.k_chunk) * self.k_chunk

    def shared_bytes(self, gates: int, hidden: int, batch: int) -> int:
        """W_hh's columns of the cluster's units over the block's K rows; the stage buffers
        of dG (rows of a pass × k_chunk floats, dense as the tensor-map copies lay them out),
        which then hold half the warps' sums; two receive buffers (a pass's rows × the
        cluster's blocks × the block's units) and two float32 carries (dh, dc) per batch row
        and unit; the tensor maps' own bytes."""
        pitch = 4 * self.lane_units
        sums = stage_buffer_floats(self.stages, self.rows_per_pass, self.k_chunk, self.threads, pitch,
                                   tensor_map=True)
        return 4 * (self.k_rows_block(gates, hidden) * pitch + sums
                    + 2 * self.cluster * self.rows_per_pass * self.units + 2 * batch * self.units) \
            + TENSOR_MAP_SHARED_BYTES

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"lane_units": self.lane_units}


# A lane's sums (lane_rows × lane_units registers): at most this many. At 80 (LSTM H=512 in
# clusters of 8, lanes of 8 × 10: 255 registers) and 72 (H=1024 in clusters of 4, 8 × 9:
# 254) the kernels compile without spills.
KSPLIT_LANE_SUMS = 80
KSPLIT_CLUSTERS = (2, 4, 8)
KSPLIT_STAGES = 8


def ksplit_backward_tiles(gates: int, hidden: int, batch: int, clusters_at_once: Sequence[int],
                          shared_bytes_max: int) -> list[KSplitBackwardTile]:
    """Every block the K-split backward can take for a float32 layer of ``gates`` ×
    ``hidden`` at ``batch`` rows (G·H a multiple of 4: dG's rows are staged by 16 bytes):
    for each cluster size of KSPLIT_CLUSTERS that the GPU holds (``clusters_at_once[c −
    1]``), the fewest units a block whose clusters are all resident at once; lanes of the
    fewest rows (1, 2, 4 or 8) that cover the batch in a pass, and of half as many (twice the
    passes), whose sums fit KSPLIT_LANE_SUMS registers; chunks of 64 and of 128 K rows, each
    in as many stage buffers (2 to KSPLIT_STAGES) as fit shared memory; 8 warps along K
    (16 ran slower at 12 of 13 shapes, results/backward-ksplit-h100-2026-11-27.jsonl; at 128
    registers a thread most of them spilled 8-88 bytes, where no 8-warp tile spills); the
    chunks copied by tensor maps (TENSOR_MAP_STAGING; clusters mean sm_90)."""
    if gates * hidden % 4:
        return []
    found = []
    covering = min(8, 1 << (-(-batch // 8) - 1).bit_length())
    for cluster in KSPLIT_CLUSTERS:
        if cluster > len(clusters_at_once) or clusters_at_once[cluster - 1] < 1:
            continue
        units = -(-hidden // (cluster * clusters_at_once[cluster - 1]))
        if (cluster - 1) * units >= hidden:  # a cluster whose last block owns no unit
            continue
        for lane_rows, k_chunk in itertools.product(sorted({max(1, covering // 2), covering}), (64, 128)):
            fitting = [t for t in (KSplitBackwardTile(cluster, units, lane_rows, k_chunk, stages)
                                   for stages in range(KSPLIT_STAGES, 1, -1))
                       if t.shared_bytes(gates, hidden, batch) <= shared_bytes_max]
            if fitting and lane_rows * fitting[0].lane_units <= KSPLIT_LANE_SUMS:
                found.append(fitting[0])
    return found


def ksplit_backward_terms(tile: KSplitBackwardTile, gates: int, hidden: int, batch: int) -> dict[str, float]:
    """The counts of one step of the K-split backward that the KSPLIT_BACKWARD_SECONDS
    price, by name: the step (the grid barrier), each pass of rows (the warps' sums, the
    cluster barrier, the cells), each chunk of a pass (a block barrier and a wait for its
    copies), each FMA of a lane's product, each shared load of it (4 K rows of the lane's
    dG rows as float4s, and of its W_hh units in vectors of 4, 2 or 1), each sum a thread
    sends to its owner (DSMEM stores), and each KiB of dG a block stages from L2 a step."""
    passes = -(-batch // tile.rows_per_pass)
    k_rows = tile.k_rows_block(gates, hidden)
    lane_k = passes * k_rows // (tile.threads // 32)
    vector = 4 if tile.lane_units % 4 == 0 else 2 if tile.lane_units % 2 == 0 else 1
    return {"STEP": 1.0, "PASS": passes, "CHUNK": passes * k_rows // tile.k_chunk,
            "LANE_FMA": lane_k * tile.lane_rows * tile.lane_units,
            "LANE_LOAD": lane_k / 4 * (tile.lane_rows + 4 * tile.lane_units // vector),
            "SEND": passes * tile.rows_per_pass * tile.cluster_units / tile.threads,
            "STAGED_KIB": passes * tile.rows_per_pass * k_rows * 4 / 1024}


# A step of the K-split backward, fitted (non-negative least squares of relative error,
# `benchmarks/backward_ksplit.py --fit`) to the 76 candidate tiles it timed at 8 float32
# shapes on the H200, chunks copied by tensor maps (benchmarks/results/backward-ksplit-h200-2026-11-29.jsonl,
# rnncc/ at b26fc37; rms log error 0.086). The terms were chosen among subsets of eleven
# counts (`backward_ksplit.py --select`) by the worst pick over all 13 shapes of that run, 5
# of them outside the fit: LANE_LOAD joined the set there (worst pick 1.051× against 1.075×
# without it, at LSTM H=768 B=32). The pick is the fastest candidate timed at 7 shapes and
# within 1.051× at the other 6. The candidates are all tensor-map tiles (clusters mean
# sm_90); the cp.async form's kernels, timed on the H100 at 119 of the same tiles
# (backward-ksplit-h100-2026-11-27.jsonl), took a median 1.09× these steps (0.94-1.33×).
KSPLIT_BACKWARD_SECONDS = {"STEP": 1.659e-06, "PASS": 8.751e-07, "CHUNK": 1.631e-07, "LANE_FMA": 1.352e-09,
                           "LANE_LOAD": 2.025e-09, "SEND": 2.772e-07, "STAGED_KIB": 4.965e-09}


def ksplit_backward_step_seconds(tile: KSplitBackwardTile, gates: int, hidden: int, batch: int) -> float:
    terms = ksplit_backward_terms(tile, gates, hidden, batch)
    return sum(KSPLIT_BACKWARD_SECONDS[name] * count for name, count in terms.items())


def grid_backward_terms(tile: BackwardTile, gates: int, hidden: int, batch: int) -> dict[str, float]:
    """The counts of one step of the grid form that the GRID_BACKWARD_* constants price: the
    step (the grid barrier, the cells), each pass of rows (its block barriers, the warps'
    sums), each FMA of a thread's product, each round trip to L2 of its K loop (K_UNROLL
    iterations' loads in flight at once) and each MiB of dG the GPU's blocks read from L2
    (every block all of it)."""
    passes = -(-batch // tile.rows)
    k_thread = -(-gates * hidden // (tile.threads // 32)) / 32
    return {"STEP": 1.0, "PASS": passes, "THREAD_FMA": passes * k_thread * tile.rows * tile.units_padded,
            "ROUND_TRIP": passes * math.ceil(k_thread / tile.k_unroll),
            "L2_MIB": tile.blocks * batch * gates * hidden * 4 / 2**20}


# The grid form's step, fitted the same way to its timings at the same 8 shapes (rms log
# error 0.029). With the K-split's, the tile the two choose is the fastest timed at 10 of
# the 13 shapes and within 1.031× at the other 3; the form is the faster one at all 13 (at
# GRU H=1000 B=48 S=128 the grid form took 27.5 µs a step against 19.3 predicted).
GRID_BACKWARD_SECONDS = {"STEP": 1.51e-06, "PASS": 4.712e-07, "THREAD_FMA": 1.233e-09, "ROUND_TRIP": 4.629e-07,
                         "L2_MIB": 1.567e-08}


def grid_backward_step_seconds(tile: BackwardTile, gates: int, hidden: int, batch: int) -> float:
    terms = grid_backward_terms(tile, gates, hidden, batch)
    return sum(GRID_BACKWARD_SECONDS[name] * count for name, count in terms.items())


def ksplit_backward_tile(gates: int, hidden: int, batch: int, clusters_at_once: Sequence[int],
                         shared_bytes_max: int) -> KSplitBackwardTile | None:
    """The K-split backward's block (``ksplit_backward_tiles``' candidates) of the least
    predicted step, or None where none applies."""
    return min(ksplit_backward_tiles(gates, hidden, batch, clusters_at_once, shared_bytes_max),
               key=lambda t: ksplit_backward_step_seconds(t, gates, hidden, batch), default=None)


# The cluster forms of the backward recurrence: no grid barrier, clusters along y share nothing.
CLUSTER_BACKWARD_TILES = (ClusterBackwardTile, FmaClusterBackwardTile)
BackwardKernelTile = Union[BackwardTile, ClusterBackwardTile, FmaClusterBackwardTile, KSplitBackwardTile]
# A lane of the FMA cluster form keeps at most this many W_hh values (its K share).
FMA_BACKWARD_SHARE = 64
FMA_BACKWARD_UNITS = 32  # a lane a unit: at most a warp's lanes
FMA_BACKWARD_WARPS = 16  # past 8 warps only where 8 would hold more than FMA_BACKWARD_SHARE


def cluster_backward_exchange_bytes(tile: ClusterBackwardTile | FmaClusterBackwardTile, gates: int,
                                    itemsize: int, batch: int) -> int:
    """The global copies a cluster backward keeps of its blocks' dG slices, the source of
    each step's multicast to the peers: [clusters][2 (step parity)][K rows × the cluster's
    batch rows] in the layer's type (float32 for the FMA form)."""
    return tile.clusters(batch) * 2 * tile.k_rows(gates) * tile.batch_per_cluster * itemsize


def fma_backward_cluster_tiles(gates: int, hidden: int, batch: int, max_cluster: int,
                               shared_bytes_max: int) -> list[FmaClusterBackwardTile]:
    """Every block the FMA cluster backward can take for a float32 layer of ``gates`` ×
    ``hidden`` at ``batch`` rows (none where W_hh does not fit the registers of
    ``max_cluster`` blocks: FMA_BACKWARD_SHARE values a lane, up to FMA_BACKWARD_WARPS
    warps, so G·H up to 1024: LSTM H ≤ 256, GRU H ≤ 341). Each cluster size up to
    ``max_cluster`` whose blocks each own units below H (at most 32 a block); each lane row
    count of 1, 2, 4 or 8 whose block slices of dG are whole 16-byte chunks (the bulk
    copy's unit), up to the first that covers the batch in one cluster (more rows: clusters
    along y); for each, the most warps along K up to 8 that split it evenly into shares of
    at most 64 (9 to 16 warps where 8 cannot)."""
    found = []
    for cluster in range(max_cluster, 0, -1):
        units = -(-hidden // cluster)
        if units > FMA_BACKWARD_UNITS or (cluster - 1) * units >= hidden:
            continue
        shape = FmaClusterBackwardTile(cluster, units, 1, 1)  # what the warps and lane rows leave alone
        covering = min(8, 1 << (-(-batch // shape.row_groups) - 1).bit_length())
        k_rows = shape.k_rows(gates)
        for lane_rows in (1, 2, 4, 8):
            if gates * units * replace(shape, lane_rows=lane_rows).batch_per_cluster % 4:
                continue
            for k_split in range(8, FMA_BACKWARD_WARPS + 1) if k_rows >= 8 else (k_rows,):
                tile = FmaClusterBackwardTile(cluster, units, k_split, lane_rows)
                if k_rows % k_split == 0 and tile.share(gates) <= FMA_BACKWARD_SHARE \
                        and tile.shared_bytes(gates) <= shared_bytes_max:
                    found.append(tile)
                    break
            if lane_rows >= covering:
                break
    return found


def fma_backward_cluster_tile(gates: int, hidden: int, batch: int, max_cluster: int, shared_bytes_max: int,
                              sm_count: int = 132, clusters_at_once: Sequence[int] = ()
                              ) -> FmaClusterBackwardTile | None:
    """The FMA cluster backward's block (``fma_backward_cluster_tiles``' candidates) of the
    least predicted time a step (``fma_backward_step_seconds``), or None where none applies.
    ``clusters_at_once[c − 1]``: clusters of c blocks the GPU holds at once (else SMs ÷ c)."""
    candidates = fma_backward_cluster_tiles(gates, hidden, batch, max_cluster, shared_bytes_max)
    return min(candidates, key=lambda t: fma_backward_step_seconds(
        t, gates, batch, clusters_held(t.cluster, clusters_at_once, sm_count)), default=None)


def clusters_held(cluster: int, clusters_at_once: Sequence[int], sm_count: int, at_least: int = 1) -> int:
    """Clusters of ``cluster`` blocks the GPU holds at once, one block an SM:
    ``clusters_at_once[cluster − 1]`` where the target lists it (measured), else SMs ÷
    cluster, and then at least ``at_least`` (0 where a caller asks whether any fits)."""
    return clusters_at_once[cluster - 1] if cluster <= len(clusters_at_once) else max(at_least, sm_count // cluster)


def backward_batch_per_cluster(batch: int, held: int) -> int:
    """The half cluster backward's batch tile: 8 rows, unless the clusters of 8 rows need
    more waves than those of 16 (``held``: clusters the GPU holds at once). Clusters of 8
    rows spread a batch over twice as many SMs; on the H200, clusters of 16 blocks, a step
    took 0.56-0.84 of the 16-row tile's time at LSTM H=512 B=16/32/48, GRU H=256 B=32 and
    LSTM H=256 B=20 (one wave either way), and 1.17× at GRU H=512 B=64, where 8 clusters of
    8 rows ran in two waves of 7 against one wave of 4
    (results/backward-batch-tile-h200-2026-11-29.txt)."""
    def waves(rows: int) -> int:
        return math.ceil(math.ceil(batch / rows) / held)

    return 8 if waves(8) <= waves(16) else 16


# A step of the FMA cluster backward, fitted (least squares of relative error) to the 181
# tiles of 8 to 16 warps that backward_forms.py --sweep timed at 10 float32 shapes, at c8a24a4
# and f9ef567 (benchmarks/results/backward-fma-tiles-h100-2026-11-27.jsonl and -at-f9ef567;
# rms log error 0.16): a fixed part, each warp (the cells sum a partial per warp, and the
# block's barriers wait for them all), each FMA of a lane's product, each KiB a block
# receives from its peers, all of it once per wave of clusters. Its pick is the measured
# best at 13 of the 15 shapes of those runs (5 of them outside the fit) and within 2.1% at
# the other two.
FMA_BACKWARD_STEP_SECONDS = 0.28e-6
FMA_BACKWARD_WARP_SECONDS = 49e-9
FMA_BACKWARD_LANE_FMA_SECONDS = 2.32e-9
FMA_BACKWARD_RECEIVED_KIB_SECONDS = 46e-9


def fma_backward_step_seconds(tile: FmaClusterBackwardTile, gates: int, batch: int, at_once: int) -> float:
    """Predicted seconds a step of the FMA cluster backward takes at ``batch`` rows, the GPU
    holding ``at_once`` of its clusters at once: its warps, one row group's sums of a lane
    (its share × lane rows FMAs), the dG a block receives a step (every peer's slice), and
    the waves its clusters run in (each runs every step of the sequence)."""
    received_kib = (tile.cluster - 1) * gates * tile.units * tile.batch_per_cluster * 4 / 1024
    lane_fmas = tile.share(gates) * tile.lane_rows
    waves = -(-tile.clusters(batch) // at_once)
    return waves * (FMA_BACKWARD_STEP_SECONDS + tile.k_split * FMA_BACKWARD_WARP_SECONDS
                    + lane_fmas * FMA_BACKWARD_LANE_FMA_SECONDS + received_kib * FMA_BACKWARD_RECEIVED_KIB_SECONDS)


# A warp's A fragments: at most this many k-steps (4 registers each), the forward registers
# form's most (LSTM fp16 H=512 in a cluster of 16: 32 k-steps, 231 registers, no spill).
BACKWARD_CLUSTER_STEPS = 32
BACKWARD_CLUSTER_WARPS = 8


def cluster_backward_shapes(gates: int, hidden: int, batch: int, max_cluster: int, max_warps: int,
                            sm_count: int, clusters_at_once: Sequence[int]) -> Iterator[ClusterBackwardTile]:
    """The half cluster backward's block shapes, most preferred first: the largest cluster
    (up to ``max_cluster``) whose blocks each own units below H, each block the fewest
    16-unit tiles that cover H, then the most warps (up to ``max_warps`` in all) whose
    shares split K evenly; each with its batch tile (``backward_batch_per_cluster``). The
    all-register and hybrid forms take the first that their registers and shared memory hold."""
    for cluster in range(max_cluster, 0, -1):
        m_tiles = -(-hidden // (MMA_M * cluster))  # the fewest units a block that cover H
        if m_tiles > max_warps or (cluster - 1) * MMA_M * m_tiles >= hidden:
            continue  # every block owns units below H
        batch_per_cluster = backward_batch_per_cluster(batch, clusters_held(cluster, clusters_at_once, sm_count))
        for k_split in range(max_warps // m_tiles, 0, -1):
            shape = ClusterBackwardTile(cluster, m_tiles, k_split, batch_per_cluster)
            if shape.k_rows(gates) % (MMA_M * k_split) == 0:
                yield shape


def backward_cluster_tile(gates: int, hidden: int, batch: int, itemsize: int, max_cluster: int,
                          shared_bytes_max: int, sm_count: int = 132,
                          clusters_at_once: Sequence[int] = ()) -> ClusterBackwardTile | None:
    """The cluster backward's block for a layer of ``gates`` × ``hidden`` in a type of
    ``itemsize`` bytes at ``batch`` rows, or None where it does not apply: float32 layers
    (the product is on fp16/bf16 tensor cores; TF32 would not be exact), or W_hh too large
    for the registers and shared memory of ``max_cluster`` blocks. Where the registers hold
    it (at most BACKWARD_CLUSTER_STEPS k-steps a warp, 8 warps a block), all of it there;
    else the hybrid form (``hybrid_backward_cluster_tile``), which took 0.13-0.64 of the
    grid form's time a step at 7 shapes, LSTM, GRU and tanh RNN H=520-1400, B=8-64
    (results/backward-hybrid-h200-2026-11-29.txt). The step spread as wide as it goes: the largest cluster (any
    size up to ``max_cluster``) whose blocks each own units below H, each block the fewest
    16-unit tiles that cover H, then the most warps along K. Measured against narrower
    tiles at 7 shapes (results/backward-split-h100-2026-11-25.txt), the widest took 0.45-1.0
    of their time a step but at GRU H=256 (1.06×): shorter mma chains and fewer cells a
    block outweighed more peers in the exchange. A batch tile of 8 rows, 16 where 8 would
    take more waves of clusters (``backward_batch_per_cluster``; ``clusters_at_once`` and
    ``sm_count`` as ``clusters_held`` takes them)."""
    if itemsize != 2 or max_cluster < 1:
        return None
    for tile in cluster_backward_shapes(gates, hidden, batch, max_cluster, BACKWARD_CLUSTER_WARPS, sm_count,
                                        clusters_at_once):
        if tile.split_steps(gates) <= BACKWARD_CLUSTER_STEPS and tile.shared_bytes(gates, itemsize) <= shared_bytes_max:
            return tile
    return hybrid_backward_cluster_tile(gates, hidden, batch, max_cluster, shared_bytes_max, sm_count,
                                        clusters_at_once)


# The hybrid form's registers a thread besides its W_hh fragments: a fixed part, each
# (row, unit) element a thread runs the cell of (its inputs are fetched two steps ahead)
# and each 8 batch rows past 8 (accumulators and B fragments). Chosen so that ptxas spills
# nothing at the tiles the rule picks for LSTM, GRU and tanh RNN fp16 H=520-1400 at
# batch rows 8 and 16 (tests/test_codegen.py compiles a set; rnncc/ at 8489ce8: LSTM H=650,
# 22 k-steps in registers, 384 threads, used the 168 registers it may; H=560 at 42 of them,
# 256 threads, 2 elements a thread, spilled at a fixed part of 80).
HYBRID_BACKWARD_REGISTERS = 76
HYBRID_BACKWARD_REGISTERS_PER_ELEMENT = 12
HYBRID_BACKWARD_REGISTERS_PER_8_ROWS = 44
HYBRID_BACKWARD_WARPS = 16  # past the all-register form's 8: more warps hold more of W_hh's share in registers


def thread_register_limit(threads: int) -> int:
    """Registers a thread may use at one block an SM: 65536 over the block's warps, which
    ptxas counts in fours (288 threads get 168 registers, as 384 do), at most 255, in 8s."""
    warps = -(-threads // 128) * 4
    return min(255, 65536 // (32 * warps)) // 8 * 8


def hybrid_register_steps(tile: ClusterBackwardTile, gates: int) -> int:
    """k-steps of a warp's share the hybrid form keeps in registers: what a thread's
    registers hold beside the rest of the kernel's, even (the product takes k-steps in
    pairs), fewer than the share."""
    elements = -(-tile.units * tile.batch_per_cluster // tile.threads)
    spare = thread_register_limit(tile.threads) - HYBRID_BACKWARD_REGISTERS \
        - HYBRID_BACKWARD_REGISTERS_PER_ELEMENT * elements \
        - HYBRID_BACKWARD_REGISTERS_PER_8_ROWS * (tile.batch_per_cluster // 8 - 1)
    return max(0, min(spare // 4, tile.split_steps(gates) - 1)) // 2 * 2


def hybrid_backward_cluster_tile(gates: int, hidden: int, batch: int, max_cluster: int, shared_bytes_max: int,
                                 sm_count: int = 132,
                                 clusters_at_once: Sequence[int] = ()) -> ClusterBackwardTile | None:
    """The cluster backward's hybrid block (``ClusterBackwardTile.register_steps``), for a
    half W_hh that the registers of no cluster hold: the first of ``cluster_backward_shapes``
    (up to HYBRID_BACKWARD_WARPS warps) whose fragments past the registers fit shared memory
    beside the dG buffers; None where none does."""
    for shape in cluster_backward_shapes(gates, hidden, batch, max_cluster, HYBRID_BACKWARD_WARPS, sm_count,
                                         clusters_at_once):
        steps = hybrid_register_steps(shape, gates)
        if steps < 2:
            continue
        tile = replace(shape, register_steps=steps)
        if tile.shared_bytes(gates, 2) <= shared_bytes_max:
            return tile
    return None


def backward_kernel_tile(gates: int, hidden: int, batch: int, itemsize: int, sm_count: int,
                        max_cluster: int, shared_memory_per_block_optin: int,
                        clusters_at_once: Sequence[int] = ()) -> BackwardKernelTile:
    """The backward recurrence's tile: a cluster form (W_hh in registers, the exchange
    inside a cluster: mma for half layers, FMA for float32) wherever it applies, else the
    grid form (a barrier of up to an SM's worth of blocks a step): for float32 with W_hh's
    columns in shared memory, K split across clusters where its step model predicts less
    than the grid form's (``ksplit_backward_step_seconds``, ``grid_backward_step_seconds``). Measured on the same
    inputs, the half cluster form took 0.10-0.68 of the grid form's time a step at 10
    shapes, B=3 to 128, also where its clusters ran in two waves
    (benchmarks/results/backward-forms-h100-2026-11-25.txt); the float32 form's picks took
    0.13-0.39 of it at 10 shapes, H=33 to 512, B=5 to 64
    (benchmarks/results/backward-fma-tiles-h100-2026-11-27.jsonl)."""
    shared_max = grid_shared_max(shared_memory_per_block_optin)
    cluster = backward_cluster_tile(gates, hidden, batch, itemsize, max_cluster, shared_memory_per_block_optin,
                                    sm_count, clusters_at_once) \
        if itemsize == 2 else \
        fma_backward_cluster_tile(gates, hidden, batch, max_cluster, shared_max, sm_count, clusters_at_once)
    if cluster is not None:
        return cluster
    grid = backward_tile(gates, hidden, batch, sm_count, shared_max)
    ksplit = ksplit_backward_tile(gates, hidden, batch, clusters_at_once, shared_max) \
        if itemsize == 4 and grid.w_in_shared else None
    if ksplit is not None and ksplit_backward_step_seconds(ksplit, gates, hidden, batch) \
            < grid_backward_step_seconds(grid, gates, hidden, batch):
        return ksplit
    return grid


# A thread's sums are rows × units_padded registers: at most this many.
BACKWARD_SUMS = 64
# A grid-barrier kernel's own __shared__ bytes (the barrier's flag; the backward kernels and
# the staged grid forward), which the opt-in limit counts beside a launch's dynamic shared
# memory: GRU fp32 H=1024 on the staged forward's 16 units a block asked for exactly the
# limit and the driver refused it (results/staged-sweep-h100-2026-11-27.txt).
GRID_BARRIER_STATIC_SHARED = 1024


def grid_shared_max(shared_memory_per_block_optin: int) -> int:
    """The dynamic shared memory a block of a kernel with a grid barrier may ask for: the
    opt-in maximum less the barrier's own __shared__ bytes (forward and backward)."""
    return shared_memory_per_block_optin - GRID_BARRIER_STATIC_SHARED


def backward_tile(gates: int, hidden: int, batch: int, sm_count: int,
                  shared_bytes_max: int) -> BackwardTile:
    """The backward block of a layer of ``gates`` × ``hidden`` run on ``batch`` rows with
    ``sm_count`` SMs: the fewest units a block such that there is one block an SM at most;
    as many batch rows a pass as the batch has, up to 8 and BACKWARD_SUMS registers of
    sums; W_hh's columns in shared memory if they fit beside the rest."""
    units = math.ceil(hidden / sm_count)
    if units > BackwardTile.threads:  # a thread runs one unit's cell a pass
        raise ValueError(f"backward: hidden size {hidden} takes {units} units a block on {sm_count} "
                         f"SMs; the backward recurrence runs at most {BackwardTile.threads}")
    blocks = math.ceil(hidden / units)
    rows = max(1, min(batch, 8, BACKWARD_SUMS // _padded_to_4(units)))
    resident = BackwardTile(units, blocks, rows, True)
    return resident if resident.shared_bytes(gates, hidden, batch) <= shared_bytes_max \
        else BackwardTile(units, blocks, rows, False)
