"""A small cost model for the decisions of this version (see each function).

Numbers come from the Target; the constants below are per-SM issue rates of sm_80/sm_90
(4 FP32 warp-instructions and 1 shared-memory warp-instruction per clock) and a
nominal clock. They rank candidates; they do not promise absolute times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..target import Target

FMA_PER_CLOCK = 4.0         # warp FMA instructions per SM per clock
LDS_PER_CLOCK = 1.0         # warp shared-memory load instructions per SM per clock
LATENCY_WORK = 256.0        # warps × accumulators per SM needed to hide latency (≈8 warps × 32)
L2_BYTES_PER_CLOCK = 24.0   # per SM, from L2 (≈5.5 TB/s over 132 SMs at 1.75 GHz)


def clock_hz(target: Target) -> float:
    return target.fp32_flops / (target.sm_count * 128 * 2)


@dataclass(frozen=True)
class ProjectionTile:
    bm: int   # rows of C per block
    bn: int   # columns of C per block
    tm: int   # rows per thread (two halves of tm/2, bm/2 apart, for conflict-free reads)
    tn: int
    bk: int = 8

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)


PROJECTION_TILES = (ProjectionTile(128, 128, 8, 8), ProjectionTile(64, 64, 4, 4),
                    ProjectionTile(32, 32, 2, 2))


def projection_seconds(m: int, n: int, k: int, tile: ProjectionTile, target: Target,
                       itemsize: int) -> float:
    """C[m,n] = A[m,k]·B[n,k]ᵀ: waves of tiles at an efficiency set by the FMAs each
    shared-memory value feeds (8×8 per thread = 1.0), or the bytes over HBM bandwidth."""
    tiles = math.ceil(m / tile.bm) * math.ceil(n / tile.bn)
    blocks_per_sm = 2  # 256 threads × ≤128 registers
    waves = math.ceil(tiles / (target.sm_count * blocks_per_sm))
    efficiency = tile.tm * tile.tn / (tile.tm + tile.tn) / 4.0
    sm_flops = target.fp32_flops / target.sm_count
    compute = waves * blocks_per_sm * 2.0 * tile.bm * tile.bn * k / (sm_flops * efficiency)
    memory = ((m + n) * k * itemsize + m * n * 4) / target.memory_bandwidth
    return max(compute, memory)


@dataclass(frozen=True)
class StepTile:
    units_per_block: int
    units_per_thread: int
    batch_per_block: int
    batch_per_thread: int
    k_split: int
    k_tile: int = 32
    stages: int = 2          # shared-memory buffers of K tiles
    async_copy: bool = False  # cp.async global → shared (float32 storage), else via registers

    @property
    def threads(self) -> int:
        return (self.units_per_block // self.units_per_thread) * \
            (self.batch_per_block // self.batch_per_thread) * self.k_split

    def shared_bytes(self, gates: int, itemsize: int) -> int:
        tile = self.stages * self.k_tile * (self.units_per_block * gates + self.batch_per_block + 4) * 4
        reduce = (self.k_split - 1) * (self.threads // self.k_split) * \
            self.batch_per_thread * self.units_per_thread * gates * 4
        return tile + reduce


def step_seconds(batch: int, hidden: int, gates: int, tile: StepTile, target: Target,
                 itemsize: int) -> float:
    """One recurrent step h·W_hhᵀ + cell: the busiest SM's instruction and L2 cycles,
    slowed when too few independent FMAs are in flight to hide latency."""
    blocks = math.ceil(hidden / tile.units_per_block) * math.ceil(batch / tile.batch_per_block)
    per_sm = math.ceil(blocks / target.sm_count)
    warps = math.ceil(tile.threads / 32)
    k_steps = math.ceil(hidden / tile.k_split)
    acc = tile.batch_per_thread * tile.units_per_thread * gates
    lds = math.ceil(tile.batch_per_thread / 4) + tile.units_per_thread * gates
    compute = warps * k_steps * max(acc / FMA_PER_CLOCK, lds / LDS_PER_CLOCK)
    l2 = (tile.units_per_block * gates + tile.batch_per_block) * hidden * itemsize / L2_BYTES_PER_CLOCK
    block_cycles = max(compute, l2) + (200 if tile.k_split > 1 else 0)
    utilisation = min(1.0, per_sm * warps * acc / LATENCY_WORK)
    return per_sm * block_cycles / utilisation / clock_hz(target) + 2e-6  # + launch


def step_tiles(gates: int, async_copy: bool) -> list[StepTile]:
    out = []
    for tu in (1, 2, 4):
        for tmb in (1, 2, 4):
            if tu * gates * tmb > 32 or tu * gates > 16:
                continue
            for ut in (4, 8, 16, 32, 64):
                for bmb in (1, 2, 4, 8, 16, 32, 64):
                    for ks in (1, 2, 4, 8, 16):
                        if ut % tu or bmb % tmb:
                            continue
                        t = StepTile(ut, tu, bmb, tmb, ks, stages=3 if async_copy else 2,
                                     async_copy=async_copy)
                        if 32 <= t.threads <= 256:
                            out.append(t)
    return out
