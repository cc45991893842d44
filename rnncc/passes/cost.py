"""A small cost model for the decisions of this version (see each function).

Numbers come from the Target; the constants below are per-SM rates of sm_80/sm_90 and,
where marked, values fitted to measurements. They rank candidates; they do not promise
absolute times.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..target import Target
from ..tiles import (H_PROJECTION_BLOCK, MMA_M, MMA_N, ClusterTile, PersistentTile, clusters_held,
                     ProjectionTile, RegisterPersistentTile, StagedPersistentTile,
                     RowsProjection, RowsProjectionTensor, StepRows, StepRowsTensor, StepTile, TensorProjectionTile, TensorTile, batch_tiles_per_block,
                     grid_shared_max, lanes_k_tile, library_unaligned, mma_k, register_cap)

STEP_L2_BYTES_PER_CLOCK = 16.0 # per SM, effective for the step kernel's tile loads (fitted)
STEP_WARPS_TO_HIDE = 16        # resident warps per SM that hide the step's latencies (fitted)
# The tiles form's GPU time as measured over the fit above: the best tile of 13 shapes ran
# 1.3–5.9× (median 2.4×) longer than step_seconds predicted without its launch, most at
# halves and at B ≥ 4 (benchmarks/results/step-rows-sweep-h100-2026-11-27.json at a7646a0,
# "tiles best"); the 2023 fit was float32 at B ≤ 64 on an older kernel. With 2.4 the same 13
# still ran 0.52–2.6× (median 1.21×) the prediction of the tile the model ranks first, and
# LSTM fp32 H=1024 B=8 (23.7 µs measured, 14.9 predicted) took the tiles form over the rows
# form (16.2 measured, 15.9 predicted); 2.4 × 1.21 ≈ 2.9 puts the median at 1.
STEP_MEASURED_OVER_MODEL = 2.9
STEP_LDS_CYCLES = 3.0          # cycles of the shared-memory pipe per warp load (fitted)
# A launch per step costs host time: rnncc packs the arguments and the driver queues the
# kernel. Per-step layers measured no faster than ≈ 9.5 µs a step whatever their size
# (benchmarks/results/bench-h100-2026-11-23.json, rows with persistence none).
STEP_LAUNCH_SECONDS = 9e-6


def launch_seconds(graphed: bool) -> float:
    """What a kernel launch adds to a step beyond the GPU time the step models give: its
    host time, for calls the host queues; nothing for calls replayed from a CUDA graph
    (CompileOptions.launches), whose gap between kernels the step models already hold:
    they were fitted to CUDA-graph replays (step-rows-sweep-h100-2026-11-27.json)."""
    return 0.0 if graphed else STEP_LAUNCH_SECONDS


# A launch a step queued by the host (an eager call not replayed from a CUDA graph): the host
# queues the next step's kernel while the GPU runs this one, so a step costs the longer of
# the two, not their sum. Past the host's STEP_LAUNCH_SECONDS the steps run back to back,
# EAGER_STEP_GAP_SECONDS apart beyond a graph's gap: the FMA step kernels of 14 one-layer
# float32 plans whose calls were too large to replay (past REPLAY_BYTES), GPU steps of
# 11.6-84 µs, ran 1.26-2.66 µs a step longer eager than in CUDA-graph replays in the same
# process, median 1.9 (S=256; results/persistence-moves-h200-2026-11-29-rows-fit-{a,b}-eager.jsonl,
# -fma-forms-a-eager.jsonl). Priced as GPU time plus STEP_LAUNCH_SECONDS before, those
# steps read ~7 µs high, so that the FMA grid kernel took GRU and tanh RNN H=650 B=64-128
# from a launch a step it ran 1.2-1.5× slower than (fma-forms-sweep-h200-2026-11-29-*.jsonl).
EAGER_STEP_GAP_SECONDS = 1.9e-6


def eager_step_seconds(gpu_seconds: float) -> float:
    """A step of a kernel launched a step by the host, whose GPU time in a graph is
    ``gpu_seconds``: the host's launch or the GPU's step and the gap, whichever is longer."""
    return max(gpu_seconds + EAGER_STEP_GAP_SECONDS, STEP_LAUNCH_SECONDS)


# A lone persistent kernel's start on the GPU before its first step: the launch and W_hh's
# load into shared memory or registers, which a launch per step does not pay. Measured in
# one-step calls (benchmarks/results/short-call-kernels-h100-2026-11-27-at-356e75d.txt): the
# grid kernel of LSTM fp16 H=1024 B=1 ran 12.4 µs (a step about 3.3), the cluster kernel of
# GRU fp32 H=256 B=1 10.1 µs (a step about 1). The registers-form cluster kernel of GRU fp16
# H=650 B=5 ran 44 µs, which this constant does not explain. Weighed over a chunk's steps
# when a persistent mode is chosen; a pipelined stack's chunks are priced by the schedule.
PERSISTENT_START_SECONDS = 9e-6


def persistent_start_seconds(steps: int, graphed: bool = False) -> float:
    """A persistent kernel's start and its own launch, a step's share over a chunk of
    ``steps`` steps (mode none's price already counts a launch each step)."""
    return (PERSISTENT_START_SECONDS + launch_seconds(graphed)) / max(1, steps)


# An eager call of PyTorch tensors whose signature was seen before (initial states copied in
# with x) is replayed from a CUDA graph (runtime.CompiledModel._run, call_graphs.py) where it queues
# at least REPLAY_MIN_OPERATIONS operations and its buffers (workspace, input, outputs) fit
# REPLAY_BYTES; runtime.py reads both from here, and the schedule (pipelined plans) and
# persistence (layers a launch a step) price such calls. Its host then queues a copy and a graph
# launch instead of a call or launch a chunk, so schedule.PIPELINED_CHUNK_HOST_SECONDS does not bound
# it: 4 × LSTM fp16 H=1024 B=8 in 4 partitions, 32 chunks, ran 1.787 ms eager with cuBLASLt's
# projections (67 µs a chunk priced, 2.14 ms) and 2.177 with rnncc's kernel, which the host's
# price had chosen (results/partition-profile-graph-plans-h100-2026-11-28.jsonl,
# ab-hybrid-moves-h100-2026-11-28.jsonl). A pipelined plan for such calls is priced as a
# graphed one plus REPLAYED_CALL_SECONDS, what the replay costs an eager call beyond what
# the sequential plans' eager prices carry (a launch, ~10 µs over the graphed price). In that
# A/B file eager calls measured 65-134 µs (median 81) over the same plan in the caller's own
# graph where replayed (7 stacks), 39-129 (median 55) where run directly (6 single layers):
# the replay ~26 µs more, and 26 + 10 is the price. A layer run a launch a step is priced so
# too where its eager calls are replayed (persistence.per_step_replayed): of 16 one-layer
# 16-bit plans at S=35 that this moved from the grid kernel to cuBLASLt's step, 12 ran a
# median 0.72× eager (0.60-0.86); the other 4 were not replayed (cuBLASLt's scratch took
# their calls past REPLAY_BYTES, which call_bytes now counts, so they stay) and ran
# 1.34-1.98× (results/persistence-moves-h200-2026-11-29-replay-s35.jsonl).
REPLAY_MIN_OPERATIONS = 8
REPLAY_BYTES = 128 << 20
REPLAYED_CALL_SECONDS = 36e-6


def clock_hz(target: Target) -> float:
    return target.fp32_flops / (target.sm_count * 128 * 2)


# rnncc's projection kernels took about twice the time their models give: 4.35 ms for the
# FMA 16384×4096×1024 fp32 GEMM (model 2.1) and 4.15 ms for the mma.sync 16384×8192×2048 fp16
# one (model 1.85) (benchmarks/results/gemm-probe-h100-2026-11-23.txt). The models rank
# tiles; this factor makes their times comparable with cuBLASLt's.
PROJECTION_MEASURED_OVER_MODEL = 2.1


def gemm_memory_seconds(m: int, n: int, k: int, itemsize: int, target: Target) -> float:
    """C[m,n] (float32) = A·B over K = k: both operands read once and C written once, at
    HBM bandwidth (the floor of every GEMM model here)."""
    return ((m + n) * k * itemsize + m * n * 4) / target.memory_bandwidth


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
    memory = gemm_memory_seconds(m, n, k, itemsize, target)
    return max(compute, memory) * PROJECTION_MEASURED_OVER_MODEL


# The projection of a few rows (input_projection_rows.cu.j2) streams W_ih once a pass of
# `rows` input rows: a fixed part (staging the rows, the warps' sums, the writes), then
# W_ih's bytes at HBM bandwidth, or its multiply-adds at a fraction of the FMA peak of the
# SMs its blocks occupy, whichever is longer. The tiled kernels it replaces took 13 µs for
# one row of LSTM fp16 H=1024 (1×4096×1024) and 31 µs for 5 rows of GRU fp16 H=650, where
# cuBLAS took 3.7 and 5.0 (benchmarks/results/short-call-kernels-h100-2026-11-27-at-356e75d.txt).
# Fitted by hand to benchmarks/results/projection-rows-h100-2026-11-27.json (at 0c80491, each
# kernel alone by torch.profiler), a warp 4 columns: 0.5 µs fixed beyond the ~1.1 µs any
# kernel takes in the profile, which the tiled kernels' models leave out too (GRU fp32
# K=256, one row: 2.1 µs measured), 12% of the peak (the fitted points span 9–21%: LSTM
# fp32 K=1024 8 rows 8.0 µs, predicted 8.8 with that 1.1; bf16 K=512 16 rows 9.4, predicted
# 9.1). A warp a column, each staged value fed one FMA and the kernel ran at 4% (a7646a0's
# S=1 calls).
ROWS_PROJECTION_FIXED_SECONDS = 0.5e-6
ROWS_PROJECTION_FMA_EFFICIENCY = 0.12
# One pass over W_ih at most. Measured (results/short-and-odd-h100-2026-11-27-at-e035f74.json):
# one pass of 1–12 rows ran the calls of S=1 and of LSTM fp32 H=512 B=3 S=4 faster than the
# tiles (the projection alone 13.0 → 4.3 µs at 1 × 4096 × 1024 fp16, short-call-kernels-...-at-
# e035f74.txt), but 2 × LSTM fp16 H=512 B=7 S=8, 56 rows in 4 passes of 16, ran 0.138 ms in a
# graph against 0.075 on the tensor tiles (a warp a column then: the shared-memory bound above).
ROWS_PROJECTION_MAX_PASSES = 1


def rows_projection_tiles(m: int, k: int, itemsize: int, target: Target) -> list[RowsProjection]:
    """For m rows: rows a pass (1, 2, 4, 8, 16) whose staged rows fit static shared memory,
    in at most ROWS_PROJECTION_MAX_PASSES passes."""
    stride = StepRows.row_stride(k, itemsize)
    return [t for t in (RowsProjection(r, stride) for r in (1, 2, 4, 8, 16))
            if t.shared_bytes(k, itemsize) <= target.shared_memory_per_block
            and math.ceil(m / t.rows) <= ROWS_PROJECTION_MAX_PASSES]


def rows_projection_seconds(m: int, n: int, k: int, tile: RowsProjection, target: Target,
                            itemsize: int) -> float:
    """C[m,n] = A[m,k]·B[n,k]ᵀ as ⌈m / rows⌉ passes over B (W_ih), each its bytes at HBM
    bandwidth or its FMAs on the SMs its blocks occupy, whichever is longer, after
    ROWS_PROJECTION_FIXED_SECONDS."""
    passes = math.ceil(m / tile.rows)
    memory = n * tile.row_stride * itemsize / target.memory_bandwidth
    sms = min(target.sm_count, math.ceil(n / (tile.warps * tile.cols)) * passes)
    compute = 2.0 * tile.rows * n * k / (target.fp32_flops * sms / target.sm_count * ROWS_PROJECTION_FMA_EFFICIENCY)
    return ROWS_PROJECTION_FIXED_SECONDS + passes * max(memory, compute)


def fma_work_per_k(tile, gates: int, float4_weights: bool) -> tuple[int, int]:
    """(multiply-adds, shared loads) of one thread of an FMA tile (step or grid kernel) for
    one k: an accumulator per row × unit × gate; h as float4 of 4 rows, a unit's weights as
    one float4 of its 4 gates when `float4_weights` and G = 4, else one load per gate."""
    acc = tile.batch_per_thread * tile.units_per_thread * gates
    w_loads = tile.units_per_thread * (gates // 4 if gates % 4 == 0 and float4_weights else gates)
    return acc, math.ceil(tile.batch_per_thread / 4) + w_loads


def fma_cycles_per_k(tile, gates: int, float4_weights: bool) -> float:
    """Issue cycles of one warp for one k of an FMA step tile: its accumulators' FMAs and
    its shared loads (`fma_work_per_k`) on 4 schedulers, or the loads queued on the SM's
    one shared-memory pipe (STEP_LDS_CYCLES each)."""
    acc, lds = fma_work_per_k(tile, gates, float4_weights)
    return max((acc + lds) / 4, lds * STEP_LDS_CYCLES)


def step_seconds(batch: int, hidden: int, gates: int, tile: StepTile, target: Target,
                 itemsize: int, k: int | None = None) -> float:
    """One recurrent step h·W_hhᵀ + cell (its GPU time), over K = ``k`` (h's width; default ``hidden``,
    proj_size for a projected LSTM): the busiest SM's issue cycles (FMAs and shared
    loads) or its L2 traffic, slowed when fewer than STEP_WARPS_TO_HIDE
    warps share an SM, and by √(padded rows / B) for batch rows computed for nothing.
    The three STEP_ constants were fitted to two sweeps on an H100 (25–30 tiles × 7
    shapes, benchmarks/results/step-tile-sweep-h100-2026-11-23.json): over the measured
    tiles the pick is 7% slower than the fastest on average, 30% at worst."""
    blocks = math.ceil(hidden / tile.units_per_block) * math.ceil(batch / tile.batch_per_block)
    per_sm = math.ceil(blocks / target.sm_count)
    warps = math.ceil(tile.threads / 32)
    k = k or hidden
    k_steps = math.ceil(k / tile.k_split)
    # The step kernel stages float32 tiles: a unit's 4 gates are one float4 for any dtype.
    issue = per_sm * warps * k_steps * fma_cycles_per_k(tile, gates, float4_weights=True)
    # Counted per element at 4 bytes whatever the dtype: the kernel loads one element a
    # thread and converts it to float, so half-precision weights stream no faster (the fit
    # was float32; the ablation measured fp16 H=2048 steps 3× slower than bytes predicted,
    # benchmarks/results/ablation-h100-2026-11-23.json at 02fb222).
    l2 = per_sm * (tile.units_per_block * gates + tile.batch_per_block) * k * 4 \
        / STEP_L2_BYTES_PER_CLOCK
    utilisation = min(1.0, per_sm * warps / STEP_WARPS_TO_HIDE)
    padding = math.sqrt(math.ceil(batch / tile.batch_per_block) * tile.batch_per_block / batch)
    return padding * max(issue, l2) / utilisation / clock_hz(target) * STEP_MEASURED_OVER_MODEL


# The step of a few batch rows as matrix-vector products (recurrent_step_rows.cu.j2): a
# warp reads its unit's G rows of W_hh once for all the block's rows of h. Fitted by
# benchmarks/fit_step_rows.py (least squares of the relative error; its docstring has the
# command) to 265 rows steps on the H200: every rows tile of
# results/step-rows-sweep-h200-2026-11-29-{fp32,half}-same-projection.json (CUDA-graph
# replays, a step's GPU time; LSTM/GRU/tanh RNN, float32 H=256-2048 B=1-64, fp16/bf16
# H=1024-2048 B=1-8) and the rows steps of the S=256 forwards timed in this fit's A/B
# (results/step-rows-forwards-h200-2026-11-29.json, from persistence-moves-h200-2026-11-29-rows-fit-*.jsonl
# less the projection's price; float32, B up to 256). A fixed 2.0 µs; W_hh's first read at
# 6.3 TB/s where it stays in L2 from step to step (WEIGHTS_L2_SHARE), else at 80% of HBM
# bandwidth; each further block along y (⌈B / rows⌉ of them) reads it again at 9.9 TB/s (the
# blocks run together and share the reads); the multiply-adds at 65% of the FMA peak; and
# 3.6 ns a (row, gate, unit) sum (a warp's shuffles) and 14.8 ns a (row, unit) cell on an SM,
# both over the SMs the blocks occupy. Within 0.67-1.72× of the measured, RMS 15% (the 16-bit
# tiles and tanh RNN B=16-32 at H=650 the worst). The fit before (1.6 µs, 2.4 TB/s for every
# read, the FMAs at 7%, the larger of the two alone) was made to a sweep whose rows kernels
# ran rnncc's projection and cuBLASLt's form the library's, so that the projection's extra
# rows read as the rows kernel's steps (step-rows-sweep-h100-2026-11-27.json;
# step_rows_sweep.py --same-projection keeps them apart now): it priced the sweep's tiles
# 0.29-1.30× their time (median 0.52), so that float32 plans for graphed calls took cuBLASLt's
# step at GRU H=1500 B=1 (2.0× slower) and the tiles form at B=16 (LSTM H=1024: 24.6 µs a
# step, the rows form 11.8).
STEP_ROWS_FIXED_SECONDS = 2.00e-6
STEP_ROWS_L2_BYTES_PER_SECOND = 6.34e12
STEP_ROWS_HBM_SHARE = 0.798
STEP_ROWS_REREAD_BYTES_PER_SECOND = 9.88e12
STEP_ROWS_FMA_EFFICIENCY = 0.654
STEP_ROWS_OUTPUT_SECONDS = 3.63e-9
STEP_ROWS_CELL_SECONDS = 14.8e-9
# W_hh read whole each step stays in L2 from step to step only up to about 2/3 of it: the
# rows kernel's float32 steps ran at the L2 rate at LSTM H=1536 (37.7 MB of the H200's 60
# MiB), at HBM's past it (LSTM H=1700, 46.2 MB: 15.8 µs at B=1 in S=256 forwards; H=1800,
# 51.8 MB: 16.8), as did cuBLASLt's step (LSTM H=1800 B=1: 17.9 µs, priced 15.4 at the L2
# rate, 17.8 at HBM's; step-rows-sweep-h200-2026-11-29-fp32-same-projection.json,
# step-rows-forwards-h200-2026-11-29.json). The boundary lies within 0.60-0.73 of L2.
WEIGHTS_L2_SHARE = 2 / 3


def step_rows_tiles(batch: int, k: int, itemsize: int, target: Target) -> list[StepRows]:
    """The step-rows tiles for a batch: 8 units a block, rows a block (1–16) up to
    the batch rounded up to a power of two, the staged rows of h within static shared memory."""
    most = 1 << (max(1, batch) - 1).bit_length()
    # 8 warps a block only: 4 ran slower in all 40 pairs of the sweep above that measured
    # both (by 4-38%, every dtype, H 64-2048, 1-16 rows), which the model, pricing the SMs
    # the blocks cover, cannot tell apart.
    return [t for t in (StepRows(8, rows) for rows in (1, 2, 4, 8, 16))
            if t.rows <= most and t.shared_bytes(k, itemsize) <= target.shared_memory_per_block]


def step_rows_seconds(batch: int, hidden: int, gates: int, tile: StepRows, target: Target,
                      itemsize: int, k: int | None = None) -> float:
    """One step of the step-rows kernel over K = ``k`` (default ``hidden``): its GPU time."""
    k = k or hidden
    y_blocks = math.ceil(batch / tile.rows)
    blocks = math.ceil(hidden / tile.warps) * y_blocks
    w_bytes = gates * hidden * k * itemsize
    first = w_bytes / (STEP_ROWS_L2_BYTES_PER_SECOND if w_bytes <= WEIGHTS_L2_SHARE * target.l2_bytes
                       else STEP_ROWS_HBM_SHARE * target.memory_bandwidth)
    memory = first + (y_blocks - 1) * w_bytes / STEP_ROWS_REREAD_BYTES_PER_SECOND
    sms = min(blocks, target.sm_count)
    compute = 2.0 * y_blocks * tile.rows * gates * hidden * k / \
        (target.fp32_flops * sms / target.sm_count * STEP_ROWS_FMA_EFFICIENCY)
    cells = y_blocks * tile.rows * math.ceil(hidden / tile.warps) * tile.warps / sms
    sums = cells * (gates * STEP_ROWS_OUTPUT_SECONDS + STEP_ROWS_CELL_SECONDS)
    return STEP_ROWS_FIXED_SECONDS + memory + compute + sums


# The rows kernels on tensor cores (rows_mma.cuh.j2: the step's and the projection's of a
# few rows, fp16/bf16): W's rows stream into the mma from global memory. Fitted by hand to
# the 110 tensor tiles of benchmarks/results/step-rows-sweep-h100-2026-11-27.json (at
# a7646a0): a fixed 1.9 µs (staging, the split's sums, the cell), W's bytes at 4.2 TB/s
# (W_hh stays in L2 from step to step where it fits: LSTM fp16 H=1024 8 MiB in about 2 µs;
# read again by each block along y), and 0.06 µs a run of 32 k a warp takes for each tile
# of 8 rows (LSTM fp16 H=1024 B=1: K split 2, 16 runs a warp, 5.0–5.2 µs; split 8, 4.4).
# A round of loads in flight is a memory round trip (ROWS_MMA_ROUND_SECONDS), where a warp
# has runs for more than one. The step over many blocks along y reads W from memory each
# time and runs slower than counted (fp16 H=2048 B=16: 17–30 µs against 16–18); the
# library's step (10.4 µs) is chosen there anyway.
ROWS_MMA_FIXED_SECONDS = 1.9e-6
ROWS_MMA_BYTES_PER_SECOND = 4.2e12
ROWS_MMA_RUN_SECONDS = 0.06e-6
ROWS_MMA_ROUND_SECONDS = 0.7e-6


def rows_mma_seconds(w_rows: int, x_rows: int, k: int, row_groups: int, k_split: int, n_tiles: int,
                     itemsize: int) -> float:
    """GPU time of C [w_rows, x_rows] = W·Xᵀ (W [w_rows, k] as stored) in a rows kernel on
    tensor cores whose blocks take 16·row_groups rows of W and 8·n_tiles rows of X."""
    y_blocks = math.ceil(x_rows / (8 * n_tiles))
    runs_per_warp = math.ceil(math.ceil(k / 32) / k_split)
    rounds = math.ceil(runs_per_warp / min(runs_per_warp, 8))
    memory = y_blocks * w_rows * k * itemsize / ROWS_MMA_BYTES_PER_SECOND
    return ROWS_MMA_FIXED_SECONDS + max(memory, rounds * ROWS_MMA_ROUND_SECONDS) + \
        runs_per_warp * n_tiles * ROWS_MMA_RUN_SECONDS


def step_rows_tensor_tiles(batch: int, gates: int, k: int, itemsize: int, target: Target) -> list[StepRowsTensor]:
    """The tensor rows tiles: 16–48 gate rows a block in whole units, K split 2–8 over at most 16
    warps, one or two tiles of 8 batch rows (two only past 8 rows), within static shared memory."""
    out = []
    for groups in (1, 2, 3):
        for split in (2, 4, 8):
            for n_tiles in (1, 2):
                t = StepRowsTensor.of(gates, groups, split, n_tiles)
                if t is None or t.warps > 16 or (n_tiles > 1 and batch <= 8) or \
                        t.shared_bytes(k, itemsize) > target.shared_memory_per_block:
                    continue
                out.append(t)
    return out


# h's rows staged from a run that is not whole 16-byte rows (K · itemsize not a multiple of
# 16: common.cuh.j2 stage_dense_run) cost the tensor rows step a fixed time and a time a
# staged row that rows_mma_seconds does not count: LSTM K=650 against K=640 (rows aligned),
# 3.58 against 2.94 µs a step at B=1 (fp16) and 5.74 against 4.32 at B=20 (bf16, 16 rows a
# block), the kernels alone in CUDA-graph replays
# (results/graph-kernel-times-h100-2026-11-28-at-db7bdc7.json). Solved from those two points. Before
# stage_dense_run (element loads) it was 4.06 against 3.04 at B=1.
ROWS_MMA_UNALIGNED_SECONDS = 0.59e-6
ROWS_MMA_UNALIGNED_ROW_SECONDS = 0.052e-6
# The step's blocks each stage the call's h for their units: ⌈H / units⌉ blocks along x read
# all B rows of K values from L2 a step, which rows_mma_seconds (fitted at B ≤ 8, a few MB a
# step) leaves out. Fitted to the 15 aligned tensor rows points of step-forms-h100-2026-11-27.json
# and step-forms-h200-2026-11-28.json (rows form forced, CUDA-graph replays, B = 1-64): what
# they ran above rows_mma_seconds is 0.19 µs a MB staged (5.4 TB/s, the staging floor's rate
# of L2 reads, staging-floor-h200-2026-11-28.txt: 6.2), from −0.2 µs at B=1 to 7.8 µs at
# LSTM fp16 H=1024 B=64 (34 MB a step); the price was 1.1–1.8× low at B ≥ 8.
ROWS_MMA_STAGE_BYTES_PER_SECOND = 5.4e12
# Tiles of three row groups (48 gate rows: LSTM's 12 units, GRU's 16) run slower than the
# model of the others: with the staging above, at the H = 64-1024 points of
# step-rows-sweep-h100-2026-11-27.json (every tile measured), they ran a median 0.28 µs over
# their price, those of one and two groups -0.08 and -0.12 (18, 27 and 26 tiles). Why is not
# measured. With both terms the sweep's picks are its measured best or within 0.12 µs at
# every point but LSTM fp16 H=2048 B=16, whose 8 tiles ran 17-30 µs in no order of their
# bytes (the pick there is as slow as the old model's, 1.4× the best).
ROWS_MMA_THREE_GROUPS_SECONDS = 0.4e-6


def step_rows_tensor_seconds(batch: int, hidden: int, gates: int, tile: StepRowsTensor, target: Target,
                             itemsize: int, k: int | None = None) -> float:
    """One step of the tensor rows kernel over K = ``k`` (default ``hidden``): its GPU time."""
    k = k or hidden
    unaligned = 0.0 if k * itemsize % 16 == 0 else \
        ROWS_MMA_UNALIGNED_SECONDS + ROWS_MMA_UNALIGNED_ROW_SECONDS * min(batch, 8 * tile.n_tiles)
    staged = math.ceil(hidden / tile.units) * batch * k * itemsize / ROWS_MMA_STAGE_BYTES_PER_SECOND
    three_groups = ROWS_MMA_THREE_GROUPS_SECONDS if tile.row_groups == 3 else 0.0
    return unaligned + staged + three_groups + \
        rows_mma_seconds(gates * hidden, batch, k, tile.row_groups, tile.k_split, tile.n_tiles, itemsize)


# Blocks along the rows of X of the projection's tensor rows kernel, each reading all of W_ih:
# at most 2 (32 rows; measured up to 16), past which the tiled kernels' K loops amortise
# their loads.
ROWS_PROJECTION_TENSOR_MAX_BLOCKS_Y = 2


def rows_projection_tensor_tiles(m: int, k: int, itemsize: int, target: Target) -> list[RowsProjectionTensor]:
    """The projection's tensor rows tiles for m rows: 16–32 columns a block, K split 2–8, one
    or two tiles of 8 rows, at most ROWS_PROJECTION_TENSOR_MAX_BLOCKS_Y blocks along the rows;
    W_ih's rows read padded to whole 16-byte loads."""
    stride = StepRows.row_stride(k, itemsize)
    return [t for groups in (1, 2) for split in (2, 4, 8) for n_tiles in (1, 2)
            for t in (RowsProjectionTensor(groups, split, n_tiles, stride),)
            if math.ceil(m / t.rows) <= ROWS_PROJECTION_TENSOR_MAX_BLOCKS_Y and (n_tiles == 1 or m > 8)
            and t.shared_bytes(k, itemsize) <= target.shared_memory_per_block]


def rows_projection_tensor_seconds(m: int, n: int, tile: RowsProjectionTensor, itemsize: int) -> float:
    """C[m,n] = X[m,k]·W[n,k]ᵀ of a few rows in the tensor rows kernel (rows_mma_seconds), K
    as the kernel reads W's rows (the tile's row stride)."""
    return rows_mma_seconds(n, m, tile.row_stride, tile.row_groups, tile.k_split, tile.n_tiles, itemsize)


def step_kernel_seconds(batch: int, hidden: int, gates: int, tile: StepTile | StepRows | StepRowsTensor,
                        target: Target, itemsize: int, k: int | None = None, graphed: bool = False) -> float:
    """A step of rnncc's step kernel in any form: tiles (step_seconds), rows, rows on tensor
    cores; for a host's launch a step (not ``graphed``) eager_step_seconds of its GPU time."""
    if isinstance(tile, StepRows):
        gpu = step_rows_seconds(batch, hidden, gates, tile, target, itemsize, k)
    elif isinstance(tile, StepRowsTensor):
        gpu = step_rows_tensor_seconds(batch, hidden, gates, tile, target, itemsize, k)
    else:
        gpu = step_seconds(batch, hidden, gates, tile, target, itemsize, k)
    return gpu if graphed else eager_step_seconds(gpu)


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


# The FMA persistent forms on the H200 (forty-eighth session, 2026-11-29): the GRID_FMA_,
# REGISTERS_, STAGED_TENSOR_MAP_, CLUSTER_ and LANES_ prices below are refitted by
# benchmarks/fit_fma_forms.py (non-negative least squares, relative error, each family's
# terms as before) to benchmarks/results/fma-forms-sweep-h200-2026-11-29.jsonl and
# -large-half.jsonl (benchmarks/fma_forms_sweep.py: 131 float32 cases, H 100-2048, B 1-256,
# the model's best 2-3 tiles of every form, 919 steps of these forms; the step timed alone as CUDA-graph
# forwards at S=256 less S=129, the input projection's share taken off). Fitted on the H100,
# they read these steps a median 1.20-1.28× slow (GRID_FMA 0.71-1.55×, CLUSTER 0.86-2.11×);
# refitted, 0.99-1.00 (RMS 7-11%), and the pick among every form timed runs 1.043× the
# fastest (geometric mean over 135 cases, 1.080 before). Timed plan moves:
# results/persistence-moves-h200-2026-11-29-fma-forms-*.jsonl. Kept: terms no swept tile
# counts, GRID_FMA_TILE_SECONDS (one batch tile a block at 251 of its 294 points: the fit
# cannot tell it from the fixed step) and STAGED_LOOP_SECONDS (2 points). The sweep ran the
# kernels with the grid barrier's acquire poll, so the fixed parts now hold its gain (the
# paragraph on it below is of the H100 fits). The notes of each family below are of its first fit.
#
# The FMA grid kernel's step (recurrent_persistent.cu.j2), fitted by
# benchmarks/fit_cluster_model.py --grid (non-negative least squares, relative error) to
# the 284 tiles of benchmarks/results/grid-tile-sweep-fma-h100-2026-11-24.txt (10 cases,
# float32, H 300–1024, B 1–64; units a block 3–8, batch tiles 1–64, K split 2–16, one or
# several batch tiles a block). Median error 9%; at 8 of the 10 cases the pick is the
# fastest tile measured, at the other two within 3%. The picks read 8–20% low (the tile
# predicted fastest is the one the model underrates most). The terms the fit left at zero
# (rounds of staging loads, the chain of one thread's multiply-adds alone, the K split's
# sums) are left out. The model before, a throughput model with a 1.5 µs barrier and 1.7 µs
# a batch tile, read these cases 0.6–2.6× what they ran (GRU H=512 B=4: 6.3 µs a step
# predicted for its pick, 3.6 at the fastest tile, 5.8 at the pick).
# The grid forms' fixed parts (GRID_FMA_, STAGED_, REGISTERS_ and the tensor GRID_STEP_SECONDS)
# were fitted with the grid barrier polling relaxed and fencing after. Its acquire poll
# (2026-11-27) runs a step 0.34-0.50 µs faster in every form (benchmarks/barrier_forms.py,
# results/barrier-forms-h100-2026-11-27.txt: this form 0.36 and 0.34, staged 0.50,
# registers 0.40, tensor 0.32-0.35), which is NOT subtracted here. Subtracted, 16 of 1500
# shapes of a census plan a grid kernel instead; measured old against new
# (results/ab-barrier-moves-h100-2026-11-27.jsonl), four ran 3-16% faster but two slower: GRU
# fp32 H=333 B=1 (FMA grid against the cluster, whose model reads it 25% slow: 7% slower)
# and GRU fp16 H=2048 B=20 S=4 eager (the grid start of 225 KiB blocks, unpriced: ~50%
# slower). Until those two models are fixed, the plans stay as they were and the saving
# stays with the kernels.
GRID_FMA_STEP_SECONDS = 1.3297e-6   # the grid barrier and the fixed part of a step
GRID_FMA_TILE_SECONDS = 0.1173e-6   # a batch tile a block runs (its block barriers)
GRID_FMA_LOAD_SECONDS = 0.0321e-6   # a thread's load of h into shared memory, for a batch tile
GRID_FMA_ISSUE_SECONDS = 0.0013e-6  # an FMA or shared load of a thread's chain × warps a scheduler
GRID_FMA_CELL_SECONDS = 0.1750e-6   # a (row, unit) of one cell thread's epilogue, its h stored
GRID_FMA_LOOP_SECONDS = 1.0108e-6   # a batch tile on the path past the planned batch
GRID_FMA_PRICES = {name: value for name, value in dict(globals()).items()
                   if name.startswith("GRID_FMA_") and name.endswith("_SECONDS")}


def grid_fma_terms(batch: int, hidden: int, gates: int, tile: PersistentTile,
                   itemsize: int = 4) -> dict[str, float]:
    """The counts of one step of the FMA grid kernel that the GRID_FMA_* constants price,
    by constant name (the features benchmarks/fit_cluster_model.py --grid fits): per batch
    tile a block runs, a thread's loads of h, its chain of multiply-adds and shared loads
    times the warps that share a scheduler, the cells its epilogue runs, and whether the
    tiles run on the general path (more batch tiles than blocks along y)."""
    tiles = batch_tiles_per_block(batch, tile.batch_per_block, tile.batch_blocks)
    looped = math.ceil(batch / tile.batch_per_block) > tile.batch_blocks
    k_padded = math.ceil(hidden / tile.k_tile) * tile.k_tile
    loads = math.ceil(k_padded * tile.batch_per_block / tile.threads)
    accumulators, shared_loads = fma_work_per_k(tile, gates, float4_weights=itemsize == 4)
    chain = k_padded // tile.k_split * (accumulators + shared_loads)
    return {"GRID_FMA_STEP_SECONDS": 1.0,
            "GRID_FMA_TILE_SECONDS": tiles,
            "GRID_FMA_LOAD_SECONDS": tiles * loads,
            "GRID_FMA_ISSUE_SECONDS": tiles * chain * math.ceil(tile.threads / 32 / 4),
            "GRID_FMA_CELL_SECONDS": tiles * tile.batch_per_thread * tile.units_per_thread,
            "GRID_FMA_LOOP_SECONDS": tiles if looped else 0.0}


def persistent_seconds(batch: int, hidden: int, gates: int,
                       tile: PersistentTile | StagedPersistentTile | RegisterPersistentTile,
                       target: Target, itemsize: int) -> float:
    """One step of the FMA grid kernel: the GRID_FMA_* prices of `grid_fma_terms`, for the
    staged form the STAGED_* prices of `staged_terms`, for the registers form the
    REGISTERS_* prices of `register_terms`."""
    if isinstance(tile, StagedPersistentTile):
        prices = STAGED_TENSOR_MAP_PRICES if tile.tensor_map else STAGED_PRICES
        return sum(prices[name] * count for name, count in staged_terms(batch, hidden, gates, tile).items())
    if isinstance(tile, RegisterPersistentTile):
        return sum(REGISTERS_PRICES[name] * count for name, count in register_terms(batch, hidden, gates, tile).items())
    return sum(GRID_FMA_PRICES[name] * count
               for name, count in grid_fma_terms(batch, hidden, gates, tile, itemsize).items())


# The FMA grid kernel with h staged by chunks (recurrent_persistent_staged.cu.j2): a step is
# a grid barrier and a fixed part, then per batch tile a block runs: its chunks (a cp.async
# wait and a block barrier each), a thread's 16-byte copies of h, a lane's shared loads and
# multiply-adds (its R × C sums over K / warps rows), and the cells a thread runs. Fitted by
# benchmarks/staged_sweep.py --fit (non-negative least squares, relative error) to the
# persistent kernel's GPU time (torch.profiler) at the 99 staged tiles of
# benchmarks/results/staged-sweep-h100-2026-11-27.jsonl (12 float32 cases, H 300–1024, B
# 8–64; rnncc/ at 5530e26 plus this kernel). Median error 6.8%; at 9 of the 11 cases with
# H % 4 = 0 the pick is the fastest staged tile timed, at the other two within 5%. The
# copies were fitted at zero (the cp.async copies overlap the product). The acquire poll's
# 0.50 µs is not subtracted (see GRID_FMA_STEP_SECONDS).
STAGED_STEP_SECONDS = 2.5021e-6   # the grid barrier and the fixed part of a step
STAGED_CHUNK_SECONDS = 0.3410e-6  # a chunk: its cp.async wait and block barrier
STAGED_COPY_SECONDS = 0.0         # a thread's 16-byte copy of h
STAGED_LOAD_SECONDS = 1.6022e-9   # a lane's shared load of the product (h's float4s, W's vectors)
STAGED_FMA_SECONDS = 1.7515e-9    # a lane's multiply-add
STAGED_CELL_SECONDS = 0.1709e-6   # a cell a thread runs (its sums read, h stored)
STAGED_LOOP_SECONDS = 0.4650e-6   # a batch tile on the path past the planned batch
STAGED_W_SECONDS = 0.0            # a (K row, gate column) of W_hhᵀ a warp reads (not in this fit)
STAGED_PRICES = {name: value for name, value in dict(globals()).items()
                 if name.startswith("STAGED_") and name.endswith("_SECONDS")}
# The same terms priced for the kernel whose chunks are copied by tensor maps (sm_90,
# tiles.TENSOR_MAP_STAGING), refitted by staged_sweep.py --fit (each case weighted once,
# whatever its number of tiles) on the H200, rnncc/ at b26fc37: the 90 staged tiles of
# benchmarks/results/staged-sweep-h200-2026-11-29.jsonl and the step of the planned tile at 6
# smaller shapes (H 256-1024, B 16-64) of form-starts-h200-2026-11-29.jsonl, where this fit
# without them read 4-14% low and moved plans that then ran slower (GRU H=300 B=20 off the
# cluster kernel 1.40×, GRU H=512 B=16 off the registers form 1.11×:
# results/refit-moves-ab-h200-2026-11-29.txt). Median error 6.4%; within 3.5% at the 6; the
# pick is the fastest staged tile timed at 7 of the 10 sweep cases, 1.02× at LSTM H=512 B=64,
# 1.08× at GRU H=512 B=32 and 1.19× at LSTM H=768 B=32 (12 units × 16 rows × 2 blocks along
# y against 6 × 32: no term tried told the two apart). The cp.async prices above read these
# kernels' steps a median 1.23× slow (0.84-1.48×; LSTM H=1024 B=64: 20.7 µs predicted, 15.9
# timed). Refitted on the H200 with the FMA forms (above GRID_FMA_STEP_SECONDS), with
# STAGED_W_SECONDS added (RMS 9.6% → 7.4%).
STAGED_TENSOR_MAP_PRICES = {"STAGED_STEP_SECONDS": 1.903e-6, "STAGED_CHUNK_SECONDS": 0.0957e-6,
                            "STAGED_COPY_SECONDS": 0.0354e-6, "STAGED_LOAD_SECONDS": 0.6284e-9,
                            "STAGED_FMA_SECONDS": 0.962e-9, "STAGED_CELL_SECONDS": 0.0,
                            "STAGED_LOOP_SECONDS": 0.3690e-6, "STAGED_W_SECONDS": 0.3461e-9}


def staged_terms(batch: int, hidden: int, gates: int, tile: StagedPersistentTile) -> dict[str, float]:
    """The counts of one step of the staged FMA grid kernel that the STAGED_* constants
    price, by constant name."""
    tiles = batch_tiles_per_block(batch, tile.batch_per_block, tile.batch_blocks)
    looped = math.ceil(batch / tile.batch_per_block) > tile.batch_blocks
    chunks = tile.k_rows(hidden) // tile.k_chunk
    copies = chunks * math.ceil(tile.batch_per_block * tile.k_chunk / 4 / tile.threads)
    k_lane = tile.k_rows(hidden) // (tile.threads // 32)  # K rows a warp sums
    columns = tile.lane_columns(gates)
    vector = 4 if columns % 4 == 0 else 2 if columns % 2 == 0 else 1  # W's loads (lane_product.cuh.j2)
    loads = k_lane // 4 * (tile.lane_rows + 4 * columns // vector)
    fmas = k_lane * tile.lane_rows * columns
    cells = math.ceil(tile.batch_per_block * tile.units_per_block / tile.threads)
    return {"STAGED_STEP_SECONDS": 1.0,
            "STAGED_CHUNK_SECONDS": tiles * chunks,
            "STAGED_COPY_SECONDS": tiles * copies,
            "STAGED_LOAD_SECONDS": tiles * loads,
            "STAGED_FMA_SECONDS": tiles * fmas,
            "STAGED_CELL_SECONDS": tiles * cells,
            "STAGED_LOOP_SECONDS": tiles if looped else 0.0,
            # The block's reads of W_hhᵀ from shared memory, which the loads above count by
            # instruction: a tile of one row a lane (8 rows a block) and 12-16 columns read
            # the most W a multiply-add and ran 1.2-1.4× its price without this term
            # (results/fma-forms-sweep-h200-2026-11-29*.jsonl).
            "STAGED_W_SECONDS": tiles * (tile.threads // 32) * k_lane * columns}


# The staged kernel's candidates start at this batch. Below it, the FMA grid kernel
# stages all of h at once and ran faster: at B=8, LSTM H=1024 7.9 µs a step against 9.7
# (staged-sweep-h100-2026-11-27), GRU H=1024 7.5 against 9.2, and 4 × LSTM H=512 pipelined
# on 32-block partitions 4.84 ms against 2.76 (bench-h100-2026-11-27 at faa528f, where the
# two models, fitted apart, put the staged kernel ahead at B=8). At B=16 it ran 12.2
# against 14.4 (LSTM H=1024).
STAGED_MIN_BATCH = 16
# A lane's sums (R × C) at most: more and the staged kernel's registers spill.
STAGED_LANE_SUMS = 64


def _fma_grid_widths(hidden: int, target: Target, units: int | None) -> list[tuple[int, int]]:
    """(units a block, blocks along x) of the FMA grid kernel's staged and registers forms:
    from the fewest units that fit the SMs to twice that, with the powers of two between
    (or `units` alone); none whose blocks along x outnumber the SMs."""
    fewest = math.ceil(hidden / target.sm_count)
    widths = {units} if units else {fewest, 2 * fewest, *(w for w in (2, 4, 8, 16) if fewest <= w <= 2 * fewest)}
    return [(u, math.ceil(hidden / u)) for u in sorted(widths) if math.ceil(hidden / u) <= target.sm_count]


def staged_tiles(hidden: int, gates: int, batch: int, target: Target,
                 units: int | None = None) -> list[StagedPersistentTile]:
    """Candidates of the staged FMA grid kernel (float32): units a block from the fewest
    that fit the SMs to twice that (or `units` alone), batch tiles of 8–64 rows (powers of
    two and the batch rounded up to 8), one or as many blocks along y as the SMs allow,
    chunks of 128 rows in 2 buffers or of 64 in 3, copied by tensor maps on sm_90
    (tiles.TENSOR_MAP_STAGING); at most STAGED_LANE_SUMS sums a lane, and shared memory
    beside the kernel's own __shared__ bytes (GRID_BARRIER_STATIC_SHARED).

    None where H % 4 ≠ 0: h's rows are then not whole 16-byte words, and the kernel loads
    them a float at a time, which the model does not price; at LSTM H=650 B=20 that ran 11.3
    µs a step against 9.6 for the FMA grid kernel (staged-sweep-h100-2026-11-27). None below
    STAGED_MIN_BATCH rows, where the FMA grid kernel's whole-h staging fits and ran faster."""
    if hidden % 4 or batch < STAGED_MIN_BATCH:
        return []
    tensor_map = target.compute_capability >= (9, 0)  # TENSOR_MAP_STAGING, where the GPU has tensor maps
    out = []
    for u, unit_tiles in _fma_grid_widths(hidden, target, units):
        rows = {8, 16, 32, 64} | ({-(-batch // 8) * 8} if batch <= 64 else set())
        for bpb in sorted(r for r in rows if r <= max(8, -(-batch // 8) * 8)):
            batch_tiles = math.ceil(batch / bpb)
            for bb in sorted({1, max(1, min(batch_tiles, target.sm_count // unit_tiles))}):
                for kc, stages in ((128, 2), (64, 3)):
                    t = StagedPersistentTile(u, bpb, bb, kc, stages, tensor_map=tensor_map)
                    if t.lane_rows * t.lane_columns(gates) <= STAGED_LANE_SUMS and \
                            t.shared_bytes(hidden, gates, 4) <= grid_shared_max(target.shared_memory_per_block_optin):
                        out.append(t)
    return out


# One step of the FMA grid kernel with W_hhᵀ in registers (RegisterPersistentTile), priced
# by the counts of `register_terms`: an NNLS fit (relative error) to the kernel's GPU time
# (torch.profiler) at 90 tiles of 12 cases, `benchmarks/staged_sweep.py --form registers
# --fit`, results/registers-sweep-h100-2026-11-27.jsonl (at cd14e68). Median error 4.6%,
# worst 14.9%; at 12 of 12 cases the pick is within 4% of the fastest tile timed. The
# acquire poll's 0.40 µs is not subtracted (see GRID_FMA_STEP_SECONDS).
REGISTERS_STEP_SECONDS = 1.7613e-6      # the grid barrier and the fixed part of a step
REGISTERS_COPY_SECONDS = 0.041183e-6    # a lane's 16-byte copy of h (its warp waits for all)
REGISTERS_FLOAT_SECONDS = 0.0          # a lane's round of 8 float loads of h (H % 4 ≠ 0; fitted 0 on the H200)
REGISTERS_LOAD_SECONDS = 1.1373e-9      # a float4 of h a warp reads, over the SM's warps
REGISTERS_FMA_SECONDS = 0.18214e-9      # a warp's multiply-add, over the SM's warps
REGISTERS_SHUFFLE_SECONDS = 2.0554e-9  # a warp's shuffle of the phases' sums, over the SM's warps
REGISTERS_SUM_SECONDS = 0.0            # a warp's sums a thread adds (fitted 0 on the H200)
REGISTERS_CELL_SECONDS = 0.0            # fitted 0: every tile swept runs one cell a thread (in the fixed part)
# Not in the sweep (no candidate loops at its planned batch): the staged kernel's, whose
# path past the planned batch is the same loop.
REGISTERS_LOOP_SECONDS = STAGED_LOOP_SECONDS
REGISTERS_PRICES = {name: value for name, value in dict(globals()).items()
                    if name.startswith("REGISTERS_") and name.endswith("_SECONDS")}


def register_terms(batch: int, hidden: int, gates: int, tile: RegisterPersistentTile) -> dict[str, float]:
    """The counts of one step of the registers form of the FMA grid kernel that the
    REGISTERS_* constants price, by constant name: per batch tile a block runs, a lane's
    staging (16-byte copies, or rounds of float loads where H % 4 ≠ 0), the SM's warp
    instructions of the product (float4 loads of h, multiply-adds, shuffles), the warps'
    sums a thread adds, the cells a thread runs."""
    tiles = batch_tiles_per_block(batch, tile.batch_per_block, tile.batch_blocks)
    looped = math.ceil(batch / tile.batch_per_block) > tile.batch_blocks
    warps, rows, kw = tile.threads // 32, tile.batch_per_block, tile.warp_k_rows(hidden)
    columns = tile.lane_columns(gates)
    copies = math.ceil(rows * kw / 4 / 32) if hidden % 4 == 0 else 0
    floats = 0 if hidden % 4 == 0 else math.ceil(rows * kw / 32 / 8)
    sums = math.ceil(rows * tile.lane_groups * columns / tile.threads) * warps
    return {"REGISTERS_STEP_SECONDS": 1.0,
            "REGISTERS_COPY_SECONDS": tiles * copies,
            "REGISTERS_FLOAT_SECONDS": tiles * floats,
            "REGISTERS_LOAD_SECONDS": tiles * warps * kw // (4 * tile.k_phases) * rows,
            "REGISTERS_FMA_SECONDS": tiles * warps * kw // tile.k_phases * columns * rows,
            "REGISTERS_SHUFFLE_SECONDS": tiles * warps * int(math.log2(tile.k_phases)) * columns * rows,
            "REGISTERS_SUM_SECONDS": tiles * sums,
            "REGISTERS_CELL_SECONDS": tiles * math.ceil(rows * tile.units_per_block / tile.threads),
            "REGISTERS_LOOP_SECONDS": tiles if looped else 0.0}


# The registers form's candidates end at this batch (its sums and h's float4s take a
# lane's registers beside W_hhᵀ; the staged kernel takes larger batches).
REGISTERS_MAX_BATCH = 16


def register_tiles(hidden: int, gates: int, batch: int, target: Target,
                   units: int | None = None) -> list[RegisterPersistentTile]:
    """Candidates of the FMA grid kernel with W_hhᵀ in registers (float32, batches up to
    REGISTERS_MAX_BATCH): units a block from the fewest that fit the SMs to twice that (or
    `units` alone), the batch in one tile or split over 2 blocks along y where the SMs
    allow, 256 threads, 1, 2 or 4 phases of K; those whose registers fit
    (`RegisterPersistentTile.registers_fit`) and whose shared memory leaves the kernel's own
    __shared__ bytes (GRID_BARRIER_STATIC_SHARED)."""
    if batch > REGISTERS_MAX_BATCH:
        return []
    out = []
    for u, unit_tiles in _fma_grid_widths(hidden, target, units):
        splits = {1} | ({2} if batch > 1 and 2 * unit_tiles <= target.sm_count else set())
        for bb in sorted(splits):
            rows = math.ceil(batch / bb)
            for phases in (1, 2, 4):
                t = RegisterPersistentTile(u, rows, bb, 256, phases)
                if t.registers_fit(hidden, gates) and \
                        t.shared_bytes(hidden, gates, 4) <= grid_shared_max(target.shared_memory_per_block_optin):
                    out.append(t)
    return out


def grid_units(hidden: int, target: Target, largest: int) -> list[int]:
    """Units per block of a grid-persistent kernel (powers of two up to `largest`): no more
    blocks than SMs, and the smallest such tile, so that the work spreads over the most
    SMs. An empty list when even `largest` needs more blocks than SMs."""
    units = 1
    while math.ceil(hidden / units) > target.sm_count and units < largest:
        units *= 2
    return [units] if math.ceil(hidden / units) <= target.sm_count else []


def largest_cluster(target: Target) -> int:
    """The largest thread-block cluster the target has and can hold (0 before sm_90): 16
    where a kernel may opt into the non-portable size (Hopper), so that W_hh up to twice a
    portable cluster's shared memory (fp16 LSTM H=512: 2 MiB) still lives in one cluster."""
    largest = max(target.max_cluster_size, target.max_cluster_size_non_portable)
    while largest and clusters_at_once(target, largest) < 1:
        largest -= 1
    return largest


def clusters_at_once(target: Target, cluster: int) -> int:
    """Clusters of `cluster` blocks the target holds at once (``tiles.clusters_held``), 0
    where none fits (which ``largest_cluster`` asks)."""
    return clusters_held(cluster, target.clusters_at_once, target.sm_count, at_least=0)


def cluster_sizes(target: Target) -> list[int]:
    """Cluster sizes of the FMA cluster kernels: powers of two up to the portable size. (Their
    step ended in a cluster barrier then, which measured 1.41 µs a step alone at 16 blocks
    against 0.71 at 8, results/cluster-exchange-16-h100-2026-11-23.txt; with the st.async
    exchange, 0.69 at 16, larger clusters have not been swept.)"""
    return [c for c in (1, 2, 4, 8) if c <= min(largest_cluster(target), target.max_cluster_size)]


def cluster_splits(hidden: int, target: Target, granule: int) -> list[tuple[int, int]]:
    """(blocks of the cluster, units a block) for the cluster kernels on tensor cores: for
    each size up to the largest, the units a block in whole granules (16-byte chunks of h),
    and the cluster then launched: the blocks that own units. A cluster need not be a
    power of two, so GRU H=650 runs 14 blocks of 48 units where a cluster of 16 would
    leave two blocks without a unit."""
    splits = set()
    for c in range(1, largest_cluster(target) + 1):
        units = math.ceil(hidden / c / granule) * granule
        splits.add((math.ceil(hidden / units), units))
    return sorted(splits)


def every_block_owns_a_unit(cluster: int, units: int, hidden: int) -> bool:
    """Block r of a cluster owns units [r·units, (r+1)·units): the last must own one."""
    return (cluster - 1) * units < hidden


def partition_units(hidden: int, target: Target, parts: int) -> int:
    """Units a block of a grid-persistent kernel that holds 1/`parts` of the SMs (one block
    an SM): the fewest that fit ⌊SMs / parts⌋ blocks. A pipelined stack re-tiles its grid
    layers so that `parts` of them run side by side (passes/schedule.py)."""
    return math.ceil(hidden / (target.sm_count // parts))


def persistent_tiles(hidden: int, gates: int, batch: int, target: Target,
                     units: int | None = None) -> list[PersistentTile]:
    """Candidates with at most one block per SM and ≤ 256 threads, so that co-residency
    holds whatever the registers (256 × 255 < 65536) once shared memory fits. Units a
    block: the power of two of `grid_units` and the fewest that fit the SMs (H=650: 5 a
    block on 130 SMs beside 8 on 82), or `units` alone where given; batch tiles: powers of
    two and the batch rounded up to 4 rows (B=20: one tile of 20, where tiles of 8 or 16
    loop over the batch a step)."""
    out = []
    fewest = math.ceil(hidden / target.sm_count)
    widths = {units} if units else set(grid_units(hidden, target, largest=32)) | ({fewest} if fewest <= 32 else set())
    for units in sorted(widths):
        unit_tiles = math.ceil(hidden / units)
        for bpb in sorted({1, 2, 4, 8, 16, 32, 64} | ({-(-batch // 4) * 4} if batch <= 64 else set())):
            for tmb in (1, 2, 4):
                for ks in (1, 2, 4, 8, 16):
                    if bpb % tmb:
                        continue
                    batch_tiles = math.ceil(batch / bpb)
                    for bb in sorted({1, min(batch_tiles, target.sm_count // unit_tiles)}):
                        t = PersistentTile(units, bpb, tmb, ks, max(bb, 1))
                        if 32 <= t.threads <= 256:
                            out.append(t)
    return out


# The FMA cluster kernel's step, shared-memory form (K split through shared memory, h
# exchanged by st.async and mbarrier), fitted by benchmarks/fit_cluster_model.py --shared
# (non-negative least squares, relative error; the exchange as measured alone,
# cluster_exchange_seconds, taken off first) to the 52 tiles of that form in
# benchmarks/results/cluster-tile-sweep-exchange-h100-2026-11-24.txt (9 cases, float32,
# H 33–256, B 1–64, clusters of 1–8, W in shared memory or registers). A step is a chain of
# dependent latencies, not a throughput: one thread's multiply-adds and shared loads, the
# partial sums its K split leaves it, the rounds of sending its block's slice, and a fixed
# part. Median error 9%; at 7 of the 9 cases the pick is the fastest tile measured, at the
# other two within 4%. The form ended its step in a cluster barrier and a gather from the
# peers before (fitted at 0.55 µs a round of the gather,
# results/cluster-tile-sweep-registers-h100-2026-11-23.txt): at the same tiles LSTM fp32
# H=256 B=8 2.23 → 2.01 µs a step, B=64 8.05 → 7.20. Fitted with waves counted by SMs;
# cluster_seconds counts them by the clusters the GPU holds at once since 2026-11-29, which
# prices LSTM H=256 B=64's 16 clusters of 8 as two waves, 7.47 µs a step for the 7.20
# measured (3.7 before). A refit with those waves (fit_cluster_model.py --waves-at-once:
# median error 6%) ran slower at shapes outside the sweep, so these stand (docs/design-notes.md,
# "Clusters past what the GPU holds").
CLUSTER_FMA_SECONDS = 0.00085e-6          # a multiply-add of one thread's chain, W in shared memory
CLUSTER_FMA_REGISTERS_SECONDS = 0.0013e-6  # the same with W in registers
CLUSTER_LOAD_SECONDS = 0.0068e-6           # a shared load (h, and W unless in registers)
CLUSTER_REDUCE_SECONDS = 0.0059e-6         # a partial sum of the K split, summed by one thread
CLUSTER_FMA_STEP_SECONDS = 0.2055e-6       # the cell and the barriers of a step
CLUSTER_FMA_SEND_SECONDS = 0.0230e-6       # a round of st.async of the block's slice to its peers
# The constants above by name: cluster_shared_terms counts each step's work under these names.
CLUSTER_PRICES = {name: value for name, value in dict(globals()).items()
                  if name.startswith("CLUSTER_") and name.endswith("_SECONDS")}


def cluster_shared_terms(hidden: int, gates: int, tile: ClusterTile) -> dict[str, float]:
    """The counts of one step of the FMA cluster kernel's shared-memory form that the
    CLUSTER_* constants price, by constant name (the features benchmarks/fit_cluster_model.py
    fits): one thread's chain of multiply-adds and shared loads, the partial sums its K
    split leaves it, and the rounds of sending the block's slice of h."""
    k_per_thread, products, loads = _thread_chain(hidden, gates, tile)
    fma = "CLUSTER_FMA_REGISTERS_SECONDS" if tile.weights_in_registers else "CLUSTER_FMA_SECONDS"
    return {fma: products * k_per_thread,
            "CLUSTER_LOAD_SECONDS": k_per_thread * loads,
            "CLUSTER_REDUCE_SECONDS": (tile.k_split - 1) * products,
            "CLUSTER_FMA_SEND_SECONDS": send_rounds(hidden, tile),
            "CLUSTER_FMA_STEP_SECONDS": 1.0}


def send_rounds(hidden: int, tile: ClusterTile) -> int:
    """Rounds of st.async of the shared-memory form's exchange: a block's threads send its
    slice of h (its units × the rows of an h buffer, 4 bytes each) to every other block."""
    if tile.cluster == 1:
        return 0
    return math.ceil((tile.cluster - 1) * min(tile.units_per_block, hidden) * (tile.batch_per_block + 4)
                     / tile.threads)


# The FMA cluster kernel with the K split in lanes (recurrent_cluster_lanes.cu.j2: the
# partial sums meeting by shuffles, every lane of a K group running the cell and pushing
# its h to its peers by st.async, one mbarrier wait a step, the projection loaded ahead),
# fitted by benchmarks/fit_cluster_model.py (non-negative least squares, relative error)
# to the 80 float32 tiles of benchmarks/results/cluster-tile-sweep-lanes-push-h100-2026-11-24.txt
# (8 cases, H 64–256, B 1–64, clusters of 1–8): median error 7%; the pick runs within
# 1.00–1.05× of the fastest tile at each of the 8 cases (at GRU H=256 B=64 1.24× while
# cluster_seconds counted waves by SMs, which read a tile of 16 clusters of 8 as one wave;
# fitted so, see CLUSTER_* above). The push replaced a __syncthreads and the block's slice
# sent in rounds (the exchange measured alone then, cluster_exchange_seconds, taken off
# first; results/cluster-tile-sweep-lanes-exchange-h100-2026-11-24.txt): at the fastest
# tile GRU H=100 B=1 0.78 → 0.66 µs a step, GRU H=100 B=20 0.88 → 0.73, LSTM H=64 B=1
# 0.64 → 0.63; the K padded to the split instead of 32 came with it. A (row, unit) cell
# is the largest term: a thread with two runs 0.3–0.5 µs a step slower than one with one.
# LANES_FMA_SECONDS (W in shared memory, which the planner no longer offers in this form)
# keeps its fit to the first sweep, results/cluster-tile-sweep-lanes-h100-2026-11-23.txt.
LANES_FMA_SECONDS = 0.0197e-6            # a multiply-add of one thread's chain, W in shared memory
LANES_FMA_REGISTERS_SECONDS = 0.0        # the same with W in registers: hidden behind the loads (fitted 0)
LANES_LOAD_SECONDS = 0.0060e-6           # a shared load of h
LANES_SHUFFLE_SECONDS = 0.0209e-6        # a shuffle round of one partial sum
LANES_PUSH_SECONDS = 0.0674e-6           # the cell of one (row, unit), its stores and sends of h
LANES_STEP_SECONDS = 0.0                 # the fixed work of a step (fitted 0)
LANES_WARP_SECONDS = 0.0159e-6           # a warp of the block (the wait, or __syncthreads in a cluster of 1)
LANES_PEER_SECONDS = 0.0620e-6           # a lane's st.async of one cell's h to a peer (0 in the H100 fit)
LANES_REMOTE_SECONDS = 0.0211e-6         # a peer block: the wait for the slowest of more blocks' h
# The constants above by name: lanes_terms counts each step's work under these names.
LANES_PRICES = {name: value for name, value in dict(globals()).items()
                if name.startswith("LANES_") and name.endswith("_SECONDS")}


def fma_cluster_terms(hidden: int, gates: int, tile: ClusterTile) -> tuple[dict[str, float], dict[str, float]]:
    """(counts by constant name, prices by constant name) of one step of the FMA cluster
    kernel in the form of ``tile``: the lanes form's (lanes_terms, LANES_*) or the
    shared-memory form's (cluster_shared_terms, CLUSTER_*)."""
    if tile.k_lanes:
        return lanes_terms(hidden, gates, tile), LANES_PRICES
    return cluster_shared_terms(hidden, gates, tile), CLUSTER_PRICES


# The terms of either form that are not its product: the fixed work of a step, the block
# barrier by warps and the sends of the exchange (see cluster_sync_seconds).
SYNC_TERMS = ("_STEP_SECONDS", "_WARP_SECONDS", "_SEND_SECONDS", "_PEER_SECONDS", "_REMOTE_SECONDS")


def measured_exchange_seconds(tile: ClusterTile) -> float:
    """The exchange as measured alone that an FMA cluster step adds to its fitted terms:
    the shared-memory form's slice exchange (cluster_exchange_seconds); none for the lanes
    form, whose pushed h is priced by its own terms (LANES_PEER_SECONDS, LANES_REMOTE_SECONDS)."""
    return 0.0 if tile.k_lanes else cluster_exchange_seconds(tile.cluster)


def cluster_sync_seconds(hidden: int, tile: ClusterTile) -> float:
    """An FMA cluster step's synchronisation, either form: its fixed work, barrier and
    sends (fitted, above) and the exchange as measured alone where the form has one."""
    counts, prices = fma_cluster_terms(hidden, 1, tile)
    return sum(count * prices[name] for name, count in counts.items() if name.endswith(SYNC_TERMS)) + \
        measured_exchange_seconds(tile)


# A step's h exchange by st.async and mbarrier, measured alone for one cluster of each size
# (benchmarks/cluster_exchange.py, results/cluster-exchange-16-h100-2026-11-23.txt): µs a
# step by blocks. From 8 to 16 blocks it grows faster than from 2 to 8.
EXCHANGE_MEASURED_US = {1: 0.0, 2: 0.173, 4: 0.245, 8: 0.363, 16: 0.694}


def cluster_exchange_seconds(cluster: int) -> float:
    """A cluster kernel's h exchange by st.async and mbarrier (measured, above; linear
    between the measured sizes); none in a cluster of 1."""
    sizes = sorted(EXCHANGE_MEASURED_US)
    lo = max(c for c in sizes if c <= cluster)
    hi = min((c for c in sizes if c >= cluster), default=lo)
    a, b = EXCHANGE_MEASURED_US[lo], EXCHANGE_MEASURED_US[hi]
    return (a if hi == lo else a + (b - a) * (cluster - lo) / (hi - lo)) * 1e-6


def _thread_chain(hidden: int, gates: int, tile: ClusterTile) -> tuple[int, int, int]:
    """(k a thread multiplies, products a k, shared loads a k) of a cluster tile's thread."""
    k_per_thread = math.ceil(math.ceil(hidden / tile.k_tile) * tile.k_tile / tile.k_split)
    loads = tile.batch_per_thread + (0 if tile.weights_in_registers else tile.units_per_thread * gates)
    return k_per_thread, tile.cells * gates, loads


def lanes_terms(hidden: int, gates: int, tile: ClusterTile) -> dict[str, float]:
    """The counts of one step of the lanes form of the FMA cluster kernel that the LANES_*
    constants price, by constant name (the features benchmarks/fit_cluster_model.py fits)."""
    k_per_thread, products, loads = _thread_chain(hidden, gates, tile)
    fma = "LANES_FMA_REGISTERS_SECONDS" if tile.weights_in_registers else "LANES_FMA_SECONDS"
    return {fma: products * k_per_thread,
            "LANES_LOAD_SECONDS": k_per_thread * loads,
            "LANES_SHUFFLE_SECONDS": products * int(math.log2(tile.k_split)),
            "LANES_PUSH_SECONDS": tile.cells,
            "LANES_STEP_SECONDS": 1.0,
            "LANES_WARP_SECONDS": math.ceil(tile.threads / 32),
            # Each lane of a K group sends its cells' h to every KSPLIT-th peer.
            "LANES_PEER_SECONDS": math.ceil((tile.cluster - 1) / tile.k_split) * tile.cells,
            "LANES_REMOTE_SECONDS": tile.cluster - 1}


# The FMA cluster models above were fitted to float32 sweeps, whose kernels take their gates
# from the library's tanhf; fp16/bf16 layers' kernels use tanh.approx (since ce1d2a1). At 9
# half cases (GRU, LSTM, RNN; H 33–256; B 1–20) they ran 0.72–0.99×, median 0.81×, of the
# float32 model's price (benchmarks/results/half-tensor-or-fma-h100-2026-11-25.txt); priced
# at float32's, they lost to tensor-core tiles that ran 1.06–2.0× slower than they did.
# Against the H200 refit of the float32 prices (2026-11-29), the 160 float16 FMA cluster steps
# of results/fma-forms-sweep-h200-2026-11-29-large-half.jsonl (32 cases, H 100-384) fit 0.97
# (least squares of the relative error, ±30%). But at 0.97 rnn_tanh H=100 goes to the
# tensor-core cluster kernel, whose model reads its step 1.6-2.0× fast there (0.43 µs priced,
# 0.69-0.87 timed): the picks among every form timed run 1.04× the fastest at any factor
# from 0.75 to 0.95 and 1.11× at 1.0 (benchmarks/fit_fma_forms.py prints the scan). So 0.85,
# the middle of that range, a ranking constant more than a price.
HALF_FMA_CLUSTER_FACTOR = 0.85


def cluster_seconds(batch: int, hidden: int, gates: int, tile: ClusterTile, target: Target,
                    itemsize: int) -> float:
    """One step of the FMA cluster-persistent kernel (fitted, see CLUSTER_* and LANES_*),
    in waves of the clusters the GPU holds at once. The shared-memory form: the terms of
    cluster_shared_terms (one thread's chain of multiply-adds and shared loads, the K
    split's partial sums, the rounds of sending the block's slice of h by st.async) and
    the exchange as measured alone (measured_exchange_seconds); the lanes form: the terms
    of lanes_terms. Fitted on float32; half types convert each weight on load and are
    ranked by the same terms, times HALF_FMA_CLUSTER_FACTOR."""
    # Waves of the clusters the GPU holds at once (Target.clusters_at_once, the driver's
    # count at one block an SM), as the tensor-core cluster kernel's: a tile's step nearly
    # doubles from the first cluster past that count (results/cluster-waves-h200-2026-11-29.txt:
    # GRU fp32 H=256, clusters of 4, 2.76 µs a step at 30 clusters, 4.92 at 31; LSTM,
    # clusters of 8, 3.57 at 15, 6.09 at 16). Counted by SMs before (132 ÷ 4 = 33 clusters
    # of 4 a wave), such tiles were priced at half their step; the 50 one-layer plans of
    # benchmarks/persistence_census.py's grid that this count moves ran a median 0.81× as
    # long, at worst 1.03× (results/persistence-moves-h200-2026-11-29.txt).
    waves = math.ceil(math.ceil(batch / tile.batch_per_block) / clusters_at_once(target, tile.cluster))
    counts, prices = fma_cluster_terms(hidden, gates, tile)
    step = sum(count * prices[name] for name, count in counts.items()) + measured_exchange_seconds(tile)
    return waves * step * (HALF_FMA_CLUSTER_FACTOR if itemsize == 2 else 1.0)


def cluster_tiles(hidden: int, gates: int, batch: int, target: Target) -> list[ClusterTile]:
    out = []
    for c in cluster_sizes(target):
        for tu in (1, 2, 4):
            units = math.ceil(math.ceil(hidden / c) / tu) * tu
            if not every_block_owns_a_unit(c, units, hidden):
                continue
            for bpb in (1, 2, 4, 8, 16, 32):
                for tmb in (1, 2, 4):
                    for ks in (1, 2, 4, 8, 16):
                        if bpb % tmb:
                            continue
                        t = ClusterTile(c, units, bpb, tmb, ks, tu)
                        if not 32 <= t.threads <= 512:
                            continue
                        out.append(t)
                        if t.registers_fit(hidden, gates):
                            out.append(replace(t, weights_in_registers=True))
                        # The lanes form only with W in registers: with W in shared memory
                        # it measured 1.05–1.8× slower than the shared-memory form on the
                        # same tiles (58 tiles of both sweeps), with W in registers 0.76–1.07×.
                        lanes = replace(t, k_lanes=True, weights_in_registers=True, k_tile=lanes_k_tile(ks))
                        if lanes.registers_fit(hidden, gates):
                            out.append(lanes)
    return out


# Tensor-core persistent steps (mma.sync, fp32 accumulation). One m16n8k16 (fp16/bf16)
# or m16n8k8 (TF32) is 2048 or 1024 multiply-adds; an SM retires about 1024 fp16 or 512
# TF32 multiply-adds a clock through mma.sync (about 60% of Hopper's wgmma peak), i.e.
# 2 clocks per instruction either way. A warp's chain of mma (fragment loads and mma that
# barely overlap) is fitted per kernel family below, not derived from the mma latency.
MMA_SM_CLOCKS = 2.0
# The cluster kernel's step on tensor cores, both forms and wgmma, fitted by
# benchmarks/fit_cluster_model.py --tensor (non-negative least squares, relative error) to
# benchmarks/results/cluster-tile-sweep-tensor-h100-2026-11-25.txt, at ce1d2a1's kernels:
# 238 tiles of 12 cases (LSTM, GRU and RNN; fp16, bf16 and TF32; H 64–650; B 1–64;
# clusters of 1–16 blocks, powers of two or not; the registers form by mma.sync and by
# wgmma). A step is the exchange measured alone (cluster_exchange_seconds, not fitted) plus
# the terms of tensor_cluster_terms priced below, in waves of as many clusters as the GPU
# holds at once (Target.clusters_at_once). Median error 11%, at most 64%; at each case the
# pick runs within 1.00–1.15× of the fastest tile (1.00× at 7 of 12).
# Refitted because the registers form's step got cheaper: a unit's 4 gates meet in one
# lane by one exchange (they took a 4 × 4 transpose across 4 lanes), B is loaded two
# pairs of k-steps ahead, fp16/bf16 slices go to the peers by one bulk copy each, and
# half layers' gates use tanh.approx. Its batch tile's price went from 0.378 to 0.124 µs,
# and the planner now takes it at LSTM/GRU fp16 H=256 B=8 (0.92 and 0.88 µs a step
# against 1.29 and 1.34 for the shared-memory form's best in that sweep).
# History: fitted at c4ef2f9 to clusters of 1–8 (a fixed 0.475 µs and 0.0728 µs a k-step);
# at e3b402b to cluster-tile-sweep-tensor-wide-h100-2026-11-23.txt (189 tiles, no wgmma;
# REGISTERS_TILE 0.378, CLUSTER_M_TILE 0.0641), where a term for the 16-row tiles of a
# block took the worst pick from 1.20× to 1.13× and one share of busy SMs for both forms
# (fitted per form, the registers form's came out near 0 and it was picked at B=64, where
# it ran 10–27% slower) to 1.07×; wgmma's two terms were then fitted apart to the pairs of
# cluster-tile-sweep-tensor-wgmma-h100-2026-11-24.txt (0.295 and 0.147 µs).
CLUSTER_STEP_SECONDS = 0.0           # fixed (most of it is in the terms below)
CLUSTER_K_STEP_SECONDS = 0.0453e-6   # a k-step and batch tile of 8 of a warp's mma chain
CLUSTER_WARP_SECONDS = 0.0120e-6     # a warp of the block (barriers, the K split's sums)
CLUSTER_M_TILE_SECONDS = 0.0341e-6   # 16 rows of the block's W_hh: their cells in the epilogue
CLUSTER_BUSY_SECONDS = 0.4763e-6     # all the GPU's SMs busy (× the share the clusters fill), both forms
TENSOR_REGISTERS_STEP_SECONDS = 0.0172e-6
TENSOR_REGISTERS_K_STEP_SECONDS = 0.0131e-6
TENSOR_REGISTERS_TILE_SECONDS = 0.1236e-6   # a batch tile of 8: a warp runs the cell of all its elements
TENSOR_REGISTERS_WARP_SECONDS = 0.0
TENSOR_REGISTERS_M_TILE_SECONDS = 0.0270e-6
# The registers form with its product by wgmma (TensorTile.wgmma) in place of mma.sync: a
# fixed cost a step (the fences, the commit and the wait) and one per batch tile of 8 in
# place of TENSOR_REGISTERS_TILE_SECONDS. In the sweep above mma.sync is faster at one
# batch tile (LSTM fp16 H=256 B=8, cluster of 8: 0.92 against 0.96 µs a step) and wgmma at
# two. (The registers form's prices are TENSOR_REGISTERS_*, apart from the FMA grid
# kernel's registers form, REGISTERS_*.)
WGMMA_STEP_SECONDS = 0.0996e-6
WGMMA_TILE_SECONDS = 0.0387e-6
# The hybrid registers form (TensorTile.register_steps in a cluster): a warp's k-step of A
# read from shared memory, 512 bytes at the SM's 128 bytes a clock, ~4 clocks at 1.98 GHz,
# where the block's warps share the SM's shared-memory bandwidth (modelled, not fitted).
TENSOR_REGISTERS_SHARED_K_STEP_SECONDS = 2.0e-9
TENSOR_CLUSTER_PRICES = {name: globals()[name] for name in (
    "CLUSTER_STEP_SECONDS", "CLUSTER_K_STEP_SECONDS", "CLUSTER_WARP_SECONDS", "CLUSTER_M_TILE_SECONDS",
    "CLUSTER_BUSY_SECONDS", "TENSOR_REGISTERS_STEP_SECONDS", "TENSOR_REGISTERS_K_STEP_SECONDS", "TENSOR_REGISTERS_TILE_SECONDS",
    "TENSOR_REGISTERS_WARP_SECONDS", "TENSOR_REGISTERS_M_TILE_SECONDS", "WGMMA_STEP_SECONDS", "WGMMA_TILE_SECONDS",
    "TENSOR_REGISTERS_SHARED_K_STEP_SECONDS")}


def tensor_cluster_terms(batch: int, hidden: int, gates: int, tile: TensorTile, target: Target,
                         itemsize: int) -> dict[str, float]:
    """The counts of one wave of steps of the tensor-core cluster kernel that the CLUSTER_*
    (shared-memory form) or TENSOR_REGISTERS_* constants price, by constant name (the features
    benchmarks/fit_cluster_model.py --tensor fits)."""
    form = "TENSOR_REGISTERS" if tile.weights_in_registers else "CLUSTER"
    n_tiles = tile.batch_per_block // MMA_N
    busy = min(1.0, math.ceil(batch / tile.batch_per_block) * tile.cluster / target.sm_count)
    terms = {f"{form}_STEP_SECONDS": 1.0,
             f"{form}_K_STEP_SECONDS": tile.k_steps(hidden, itemsize) * n_tiles,
             f"{form}_WARP_SECONDS": tile.m_tiles * tile.k_split,
             f"{form}_M_TILE_SECONDS": tile.m_tiles,
             # Both forms alike: the clusters' share of the SMs (the projection's loads
             # meet in L2); fitted per form, the registers form's fitted to nearly 0 from
             # its few many-cluster tiles and picked it at B=64, where it ran 10-27% slower.
             "CLUSTER_BUSY_SECONDS": busy}
    if tile.wgmma:
        terms["WGMMA_STEP_SECONDS"] = 1.0
        terms["WGMMA_TILE_SECONDS"] = n_tiles
    elif tile.weights_in_registers:
        terms["TENSOR_REGISTERS_TILE_SECONDS"] = n_tiles
        if tile.register_steps:  # every warp's k-steps past its registers, from shared memory
            terms["TENSOR_REGISTERS_SHARED_K_STEP_SECONDS"] = tile.m_tiles * tile.shared_steps(hidden, itemsize)
    return terms


def tensor_cluster_waves(batch: int, tile: TensorTile, target: Target) -> int:
    """Waves of the clusters a batch needs, as many at a time as the GPU holds."""
    return math.ceil(math.ceil(batch / tile.batch_per_block) / clusters_at_once(target, tile.cluster))


# The grid kernel's step on tensor cores, fitted (least squares) to every tile the model
# considered at 92 points whose rows load as 16-byte vectors: LSTM fp16 H ∈ {512, 640,
# 1024} at B ∈ {8, 20, 64}, TF32 H=1024 B=64, 8–64 batch rows, K split 1–8
# (benchmarks/results/grid-tile-sweep-h100-2026-11-23.txt, at dd5c8bf; mean error 15%):
# 1.36 µs a step (the grid barrier and the launch's share), 2.51 µs per batch tile a block
# runs (staging h, two block barriers, the epilogue) and 0.0324 µs per k-step and 8 batch
# columns of a warp's mma chain. It picks the measured fastest tile (or one within 1%) at
# all 8 cases; the analytic model before it (an mma chain of 32 clocks a k-step,
# whatever the batch columns) picked K split 2 with wide batch tiles that ran up to 1.9×
# the fastest (GRU fp16 H=650 B=20: 17.9 µs against 9.4 for K split 8).
# The fixed cost was fitted with the counter-and-generation barrier; the barrier whose top
# bit flips took 0.54 µs less a step (results/step-split-h100-2026-11-24.txt at 45d6ab9),
# subtracted here (1.36 fitted). The acquire poll's 0.34 µs is not (see GRID_FMA_STEP_SECONDS).
# Not refitted since a block keeps several batch tiles in registers (it looped over them
# from memory): 5% less a step at LSTM fp16 H=1024 B=64 (step-split file above). The
# wider tiles (twice the fewest units, the batch split over blocks) are predicted 1.5-2x
# too fast, but ranked as measured: the pick within 1.00-1.03x of the fastest at 6 cases
# (results/grid-tile-sweep-wide-h100-2026-11-24.txt).
GRID_STEP_SECONDS = 0.82e-6
GRID_TILE_SECONDS = 2.51e-6
GRID_K_STEP_SECONDS = 0.0324e-6
# A grid tile with W_hh resident in registers (TensorTile.with_weights_resident) saves the
# step its shared-memory reads of W_hh's fragments, priced at this rate: 77% of an SM's 128
# bytes a clock. Fitted to the 9 tiles of ≤ 256 threads measured with W_hh in shared memory
# and resident (results/register-tiles-h200-2026-11-28.txt, at 4495d65: LSTM fp16 H=1024
# B=8/16/32, GRU B=16): 0.30-0.58 µs a step faster, 166-227 GB/s of the bytes no longer read
# (median 192). The hybrid tiles (a few k-steps in registers because W_hh does not fit
# shared memory) keep their price: measured at 0.86 of it, as the tiles beside them.
GRID_RESIDENT_W_BYTES_PER_SECOND = 1.92e11
# The product by wgmma (TensorTile.wgmma: W_hh and h in shared memory under the 128-byte
# swizzle, a warpgroup a 64-row tile): a warpgroup's chain costs a price a k-step whatever
# its batch columns (m64nNk16 for N ≤ 64 is latency, not N/8 mma.sync in turn), and the K
# split's partial sums a price per warpgroup along K and batch tile of 8, which is where
# wgmma loses at K split 4-8 and small batches (its chain is short there, the partials are
# not). Fitted by grid search, the mma.sync terms above unchanged, to the 17 cases of
# benchmarks/results/grid-wgmma-swizzled-h100-2026-11-25.txt (at 59d4e45) and
# grid-wgmma-check-h100-2026-11-25.txt (the same kernels at shapes the first left out:
# B 16-128, H 650-1536), every block shape near the pick by both products, 232 tiles.
# The pick runs within 1.00-1.066× of the fastest tile (mean 1.014; 1.00× at 9 of 17)
# where mma.sync alone picked within 1.00-1.122× (mean 1.031); the chosen point is the
# middle of a plateau (0.026-0.032 µs a k-step, 0.03-0.04 µs for the partials, nothing per
# batch tile: all 1.066× at worst). An N term fitted to the first file alone (0.006 µs)
# picked 1.06-1.10× at the second's B=20-32.
GRID_WGMMA_K_STEP_SECONDS = 0.030e-6   # a k-step of a warpgroup's chain
GRID_WGMMA_SPLIT_SECONDS = 0.04e-6     # a warpgroup along K and batch tile of 8: partial sums
# The wgmma product waits for all of the batch tile's h, staged into the swizzled layout by
# the block's threads in 16-byte loads (tensor_core.cuh.j2 stage_h, 4 in flight a thread);
# past GRID_WGMMA_STAGED_FREE loads a thread, each costs GRID_WGMMA_STAGE_SECONDS that the
# terms above do not. Where it came from: 2 × GRU bf16 H=768 B=64 S=100's graph plan put
# each layer on 64 blocks of 12 units, all 64 rows a block and one warpgroup (48 loads a
# thread): priced 5.2 µs a step, it ran 13.5, alone or beside the other
# (results/graph-kernel-times-h100-2026-11-28-at-786400f.json), the call 1.91 ms against
# 0.98 for one layer after another. Fitted (least squares, the other prices as they are, an intercept per
# case) to the 72 wgmma tiles the chain prices in results/grid-tile-sweep-b64- and
# grid-tile-sweep-parts-h100-2026-11-28.txt (every grid tile at GRU bf16 H=768 B=64 and
# LSTM fp16 H=1024 B=64, and every tile of 1/2 and 1/4 of the SMs there and at LSTM fp16
# H=1024 B=8; `benchmarks/fit_cluster_model.py --wgmma-staging`). The threshold is the
# largest of 0-16 whose picks run as near the fastest as any (1.035× on average over 7
# (case, SM budget), against 1.168× without the term; at 2 parts for the GRU 1.00× against
# 1.86×), so that the full-GPU picks (≤ 16 loads) keep their prices: the GRU's, 12 loads,
# ran 4.39 µs a step in the call above, priced 4.42 without the term.
GRID_WGMMA_STAGE_SECONDS = 0.545e-6
GRID_WGMMA_STAGED_FREE = 16


def staged_loads_per_thread(batch: int, hidden: int, tile: TensorTile, itemsize: int) -> int:
    """16-byte loads of h a thread of a grid block issues to stage one batch tile (its rows
    within the batch, H in whole vectors)."""
    vectors = math.ceil(hidden * itemsize / 16)
    return math.ceil(min(tile.batch_per_block, batch) * vectors / tile.threads)


def tensor_seconds(batch: int, hidden: int, gates: int, tile: TensorTile, target: Target,
                   itemsize: int) -> float:
    """One step of a persistent kernel on tensor cores. Grid: per batch tile a block runs,
    the fitted fixed work and the longer of the warps' mma chain (fitted) and the SM's mma
    throughput; then the step's fixed cost (GRID_*). Cluster: the terms of
    tensor_cluster_terms and the exchange, in waves of the clusters the GPU holds at once."""
    if tile.cluster:
        terms = tensor_cluster_terms(batch, hidden, gates, tile, target, itemsize)
        step = sum(count * TENSOR_CLUSTER_PRICES[name] for name, count in terms.items())
        return tensor_cluster_waves(batch, tile, target) * (step + cluster_exchange_seconds(tile.cluster))
    k_steps = tile.k_steps(hidden, itemsize)
    n_tiles = tile.batch_per_block // MMA_N
    warps = tile.m_tiles * tile.k_split
    # Each of the SM's 4 tensor cores serves the warps of its scheduler only.
    throughput = warps * k_steps * n_tiles * MMA_SM_CLOCKS * 4 / min(warps, 4)  # clocks
    # From the batch, not tile.tiles_per_block: tests price tiles built without it.
    tiles_per_block = batch_tiles_per_block(batch, tile.batch_per_block, tile.batch_blocks)
    if tile.wgmma:
        chain = max(k_steps * GRID_WGMMA_K_STEP_SECONDS, throughput / clock_hz(target)) + \
            tile.k_split * n_tiles * GRID_WGMMA_SPLIT_SECONDS + GRID_WGMMA_STAGE_SECONDS * \
            max(0, staged_loads_per_thread(batch, hidden, tile, itemsize) - GRID_WGMMA_STAGED_FREE)
    else:
        chain = max(k_steps * n_tiles * GRID_K_STEP_SECONDS, throughput / clock_hz(target))
    if tile.resident(hidden, itemsize):  # W_hh no longer read from shared memory each batch tile
        chain -= tile.register_w_bytes(itemsize) / GRID_RESIDENT_W_BYTES_PER_SECOND
    return GRID_STEP_SECONDS + tiles_per_block * (GRID_TILE_SECONDS + chain)


# What a step of the grid kernel on tensor cores takes on the H200, for comparing the grid
# tile the model above picks with the other modes (persistence.decide_modes): the step
# alone of 1830 tiles of the planner's whole grid family at 40 cases, less the projection's
# share measured apart (benchmarks/results/grid-tile-steps-h200-2026-11-29*.txt, kernels as at
# 35bf5cc; the nine cases where h's rows are not whole 16-byte vectors swept again on the
# kernels of 22a6110, which zero h's padding once a launch, -unaligned-once.txt; six cases at
# B=48-128, -large-batches.txt; both at 55324e6), fitted by least squares of the relative error
# to the tiles within 1.5× of their case's fastest, the model above's pick of each case ten
# times over (`benchmarks/fit_cluster_model.py --grid-steps`, grid_step_price_fit). The model
# above, fitted on the H100 to older kernels, reads those steps 1.34× high at the median (1.6×
# at B=1, where a batch tile of 8 holds one row) but ranks a case's tiles better than these
# counts do (its pick runs 1.040× the fastest on average, an all-tile fit of these terms'
# 1.049×): it picks, this prices, within 0.89-1.14 of its picks. Without the term for the
# unaligned staging's elements, a price per batch tile alone read the unaligned picks at
# B=128 1.2-1.4× low. The SMs and L2 are one design on the H100 and the H200, so these
# prices serve both.
GRID_STEP_PRICES = {"GRID_STEP_SECONDS": 0.08638e-6, "GRID_TILE_SECONDS": 1.809e-6, "GRID_UNIT_SECONDS": 0.01617e-6,
                    "GRID_ELEMENT_GATE_SECONDS": 0.09242e-6, "GRID_H_BYTE_SECONDS": 2.351e-11,
                    "GRID_K_STEP_SECONDS": 0.01489e-6, "GRID_RESIDENT_W_BYTE_SECONDS": 4.935e-12,
                    "GRID_WGMMA_K_STEP_SECONDS": 0.01855e-6, "GRID_WGMMA_STAGE_SECONDS": 0.1648e-6,
                    "GRID_UNALIGNED_SECONDS": 0.0737e-6, "GRID_UNALIGNED_ELEMENT_SECONDS": 0.02068e-6}


def grid_step_terms(batch: int, hidden: int, gates: int, tile: TensorTile, itemsize: int) -> dict[str, float]:
    """The counts GRID_STEP_PRICES price: per batch tile a block runs, its fixed work, its
    units, each gate of the (unit, row) elements a thread computes past its first, and its
    warps' chain (mma.sync: k-steps × batch tiles of 8; wgmma: k-steps, and h's staging past
    GRID_WGMMA_STAGED_FREE loads a thread); the bytes of h the block stages for its real
    rows; W_hh's bytes a resident tile no longer reads from shared memory (negative); where
    h's rows are not whole 16-byte vectors, each batch tile's scattered staging (stage_h) and
    the elements of h a thread stages one by one there (the padding past H and past the batch
    is zeroed once a launch, not a step)."""
    k_steps, n_tiles = tile.k_steps(hidden, itemsize), tile.batch_per_block // MMA_N
    tiles = batch_tiles_per_block(batch, tile.batch_per_block, tile.batch_blocks)
    rows = min(batch, tiles * tile.batch_per_block)
    elements = -(-tile.units_per_block * tile.batch_per_block // tile.threads)
    terms = {"GRID_STEP_SECONDS": 1.0, "GRID_TILE_SECONDS": tiles, "GRID_UNIT_SECONDS": tiles * tile.units_per_block,
             "GRID_ELEMENT_GATE_SECONDS": tiles * (elements - 1) * gates, "GRID_H_BYTE_SECONDS": rows * hidden * itemsize}
    if tile.wgmma:
        staged = staged_loads_per_thread(batch, hidden, tile, itemsize) - GRID_WGMMA_STAGED_FREE
        terms |= {"GRID_WGMMA_K_STEP_SECONDS": tiles * k_steps, "GRID_WGMMA_STAGE_SECONDS": tiles * max(0, staged)}
    else:
        terms["GRID_K_STEP_SECONDS"] = tiles * k_steps * n_tiles
    if tile.resident(hidden, itemsize):
        terms["GRID_RESIDENT_W_BYTE_SECONDS"] = -tiles * tile.register_w_bytes(itemsize)
    if hidden * itemsize % 16:
        terms |= {"GRID_UNALIGNED_SECONDS": tiles, "GRID_UNALIGNED_ELEMENT_SECONDS": rows * hidden / tile.threads}
    return terms


def grid_step_seconds(batch: int, hidden: int, gates: int, tile: TensorTile, itemsize: int) -> float:
    """A step of the grid kernel on tensor cores as measured on the H200 (GRID_STEP_PRICES)."""
    return sum(GRID_STEP_PRICES[name] * count
               for name, count in grid_step_terms(batch, hidden, gates, tile, itemsize).items())


def tensor_tiles(hidden: int, gates: int, batch: int, target: Target,
                 mode: str, itemsize: int, units: int | None = None) -> list[TensorTile]:
    """Candidates for mode "grid" (one block per SM at most, as for FMA) or "cluster";
    ≤ 512 threads, so the registers of one block per SM never limit co-residency. In a
    cluster also the registers form, a warp per 16 rows (up to 1024 threads) where its A
    fragments fit the registers. `units` (grid only): blocks of that many units alone."""
    out = []
    rows = [8, 16, 32, 64] if mode == "grid" else [8, 16, 32]
    if mode == "grid":
        shapes = []
        # Also twice the fewest units, where that leaves blocks for a batch split: each
        # block then stages only its batch rows of h. At B=64 H=1024 every block staging all
        # 64 rows read 16 MiB of L2 a step at ~7 TB/s, 2.4 of the step's 9.1 µs
        # (results/step-split-h100-2026-11-24.txt).
        smallest = grid_units(hidden, target, largest=64)
        wider = [2 * u for u in smallest if 2 * u <= 64 and 2 * math.ceil(hidden / (2 * u)) <= target.sm_count]
        for units in [units] if units else smallest + wider:
            unit_tiles = math.ceil(hidden / units)
            for bpb in rows:
                batch_tiles = math.ceil(batch / bpb)
                for bb in sorted({1, max(1, min(batch_tiles, target.sm_count // unit_tiles))}):
                    shapes.append((units, bpb, 0, bb))
    else:
        # Units in multiples of 8, so that a block's slice of h is whole 16-byte chunks
        # (the peers exchange it with 16-byte st.async).
        shapes = [(units, bpb, c, 1) for c, units in cluster_splits(hidden, target, 8) for bpb in rows]
    for units, bpb, c, bb in shapes:
        m_tiles = math.ceil(units * gates / MMA_M)
        tiles = batch_tiles_per_block(batch, bpb, bb) if mode == "grid" else 1
        for ks in (1, 2, 4, 8):
            t = TensorTile(units, bpb, ks, m_tiles, c, bb, tiles_per_block=tiles)
            if t.threads <= 512:
                out.append(t)
            # Grid blocks also with the product by wgmma (fp16/bf16), in whole warpgroups
            # of 64 rows (GRU's 48 padded); blocks of several batch tiles where their
            # registers fit (WGMMA_GRID_BASE_REGISTERS; no block of one spilled).
            if mode == "grid" and itemsize == 2:
                w = replace(t, m_tiles=math.ceil(units * gates / 64) * 4, wgmma=True)
                if w.threads <= 512 and (tiles == 1 or w.wgmma_registers(gates) <= register_cap(w.threads)):
                    out.append(w)
    if mode == "cluster":
        registers = {TensorTile.registers_form(hidden, gates, c, bpb)
                     for c in range(1, largest_cluster(target) + 1) for bpb in rows}
        # Launched as the blocks that own units (a cluster of any size, as above).
        registers = [replace(t, cluster=math.ceil(hidden / t.units_per_block))
                     for t in sorted(registers, key=lambda t: (t.cluster, t.batch_per_block))]
        registers = [t for t in registers if t.threads <= 1024]
        fitting = [t for t in registers if t.registers_fit(hidden, gates, itemsize) and t not in out]
        for t in fitting:
            out.append(t)
            # The same tile with its product by wgmma, in whole warpgroups (fp16/bf16).
            if itemsize == 2 and t.m_tiles % 4 == 0:
                out.append(replace(t, wgmma=True))
        if not fitting:
            # W_hh past the registers of every cluster: the hybrid registers form, part of
            # each warp's fragments in shared memory (TensorTile.with_shared_steps_for).
            hybrid = (t.with_shared_steps_for(hidden, gates, itemsize, target.shared_memory_per_block_optin)
                      for t in registers)
            out += [t for t in hybrid if t is not None and t not in out]
    return out


TENSOR_PROJECTION_TILES = (TensorProjectionTile(128, 128, 2, 4), TensorProjectionTile(64, 64, 2, 2))


def tensor_projection_k_tile(itemsize: int) -> int:
    """K per shared-memory tile: 32 halves or 16 TF32 floats, so that both operand tiles,
    double-buffered, stay within 48 KiB of static shared memory."""
    return 32 if itemsize == 2 else 16


# The tiled tensor projection's input operand where its rows are not whole 16-byte loads
# (input_projection_tensor.cu.j2 via gemm.cuh.j2: 4-byte pairs of 16-bit elements where K is
# even, else element loads; W_ih is read from its padded copy, 16 bytes a load) costs a time
# a narrow load of a row of a K tile, which the model above does not count: the loads go to
# registers and then to shared memory, so their latency is not hidden by cp.async. Measured
# against the model at 320 × 2600 × 650 (bf16, pairs: 20.9 µs, model 11.1), 512 × 2600 × 650
# (fp16, pairs: 29.6, model 22.2) and 48 × 1332 × 333 (fp16, elements: 15.4, model 5.7),
# CUDA-graph replays (results/graph-kernel-times-h100-2026-11-28.json, at bf33588): the least
# squares through the origin of the three gaps over (K tiles × narrow loads a row of a tile),
# 336, 336 and 352. At K=640 (aligned) the kernel ran 23.9 µs, model 21.7. A merged input
# (several sources summed in the loader) takes element loads at any K: priced the same, not
# measured.
# tests/test_plan.py test_the_unaligned_projection_price_is_its_measurement refits it.
TENSOR_PROJECTION_NARROW_LOAD_SECONDS = 0.0262e-6


def projection_operand_load_bytes(k: int, itemsize: int, sources: int) -> int:
    """Bytes a load of the tiled tensor projection's input operand: 16 where a row of K
    elements is whole 16-byte vectors (one source), 4 for pairs of 16-bit elements at even K,
    else one element (several sources are summed element by element)."""
    if sources == 1 and (k * itemsize) % 16 == 0:
        return 16
    if sources == 1 and (itemsize == 4 or k % 2 == 0):
        return 4
    return itemsize


def tensor_projection_seconds(m: int, n: int, k: int, tile: TensorProjectionTile,
                              target: Target, itemsize: int, load_bytes: int = 16) -> float:
    """C[m,n] = A[m,k]·B[n,k]ᵀ on tensor cores: waves of tiles, each mma costing
    MMA_SM_CLOCKS plus the shared-memory loads of its fragments (one warp-wide 32-bit load
    a clock per SM; a warp loads 4 registers per 16-row tile and 2 per 8-column tile, so
    larger warp tiles load less per mma); or the bytes over HBM bandwidth. Plus, where the
    input operand takes narrow loads (``load_bytes`` < 16), TENSOR_PROJECTION_NARROW_LOAD_SECONDS
    a narrow load of a row of each K tile."""
    tiles = math.ceil(m / tile.bm) * math.ceil(n / tile.bn)
    blocks_per_sm = 2
    waves = math.ceil(tiles / (target.sm_count * blocks_per_sm))
    mi, ni = tile.bm // tile.warps_m // MMA_M, tile.bn // tile.warps_n // MMA_N
    loads_per_mma = (4 * mi + 2 * ni) / (mi * ni)
    mmas = (tile.bm // MMA_M) * (tile.bn // MMA_N) * math.ceil(k / mma_k(itemsize))
    compute = waves * blocks_per_sm * mmas * (MMA_SM_CLOCKS + loads_per_mma) / clock_hz(target)
    memory = gemm_memory_seconds(m, n, k, itemsize, target)
    bk = tensor_projection_k_tile(itemsize)
    narrow = 0 if load_bytes >= 16 else math.ceil(k / bk) * (bk * itemsize // load_bytes)
    return max(compute, memory) * PROJECTION_MEASURED_OVER_MODEL + narrow * TENSOR_PROJECTION_NARROW_LOAD_SECONDS


# ---- GEMMs handed to cuBLASLt -------------------------------------------------------------
# cuBLASLt's Hopper kernels (wgmma, TMA) ran a 16384×8192×2048 fp16 GEMM at 629 TFLOPS where
# rnncc's mma.sync projection ran at 132, and 256×8192×2048 in 16–21 µs a call through torch
# (benchmarks/results/gemm-probe-h100-2026-11-23.txt). Modelled as waves of LIBRARY_TILE²
# output tiles at LIBRARY_EFFICIENCY of the dense peak, K split (as the library does) when
# there are fewer tiles than SMs. A call also costs host time: a step of mode none with the
# product in cuBLASLt took 22–47 µs of host time (same file); the model takes
# STEP_LAUNCH_SECONDS for the cell kernel's launch plus LIBRARY_CALL_SECONDS for the call.
LIBRARY_TILE = 128
LIBRARY_MIN_K_SPLIT = 256  # the shortest K slice worth a split
LIBRARY_EFFICIENCY = 0.8
LIBRARY_CALL_SECONDS = 16e-6


def library_call_seconds(graphed: bool) -> float:
    """The host's time a cuBLASLt call costs beyond its GPU time: LIBRARY_CALL_SECONDS for
    calls the host queues, nothing for calls replayed from a CUDA graph."""
    return 0.0 if graphed else LIBRARY_CALL_SECONDS


def library_flops(itemsize: int, precision: str, target: Target) -> float:
    """Dense FLOP/s of the units a library GEMM runs on: fp16/bf16 or TF32 tensor cores, or
    FFMA for exact float32."""
    if precision == "exact" and itemsize == 4:
        return target.fp32_flops
    return target.tensor_flops / (2 if itemsize == 4 else 1)


# Where K (both operands' contiguous dimension) is not whole 16-byte vectors of 16-bit
# operands, cuBLASLt runs CUTLASS's Ampere align2 kernels, not its Hopper ones: four
# projections at K=650 (LSTM and GRU fp16, bf16; 128-384 rows) took 9.5-17.2 µs where
# 128 × 2560 × 640 took 4.2 (results/graph-kernel-times-h100-2026-11-28-at-db7bdc7.json).
# Fitted (least squares) as a fixed 7.47 µs and the FLOPs at 124.7 TFLOP/s (within 8% of the
# four). The next run (graph-kernel-times-h100-2026-11-28.json, at bf33588) read the line
# within 6% at 128, 320, 384 and 512 rows; at K=333 (48 × 1332, odd K) the library ran an
# align1 kernel in 5.0 µs, priced 7.8. Exact float32 at K % 4 ≠ 0 is not measured and keeps
# the aligned price.
# Refitted on the H200 (benchmarks/results/projection-moves-h200-2026-11-29.jsonl, at ad44617:
# 108 profiled cuBLASLt projections at K % 8 ≠ 0 or G·H % 8 ≠ 0, 35-65536 rows), best fit
# on the log of the ratio: a fixed 10 µs and 165 TFLOP/s (rms log error 0.23; the H100 fit
# above reads 0.29 there, 1.4-1.6× long at 16384-65536 rows and short under 300 rows).
# A/B of 58 of the 172 one-layer projections it moves (170 from rnncc's tile to cuBLASLt),
# forced both ways: graphed calls a median 0.847× (0.676-0.977), eager 0.896× (one 1.032,
# LSTM H=777 B=8 S=35) (results/projection-moves-h200-2026-11-29-unaligned-refit.jsonl).
# Of the three stacks it re-plans (results/unaligned-refit-stacks-ab-h200-2026-11-29.jsonl),
# 4 × GRU bf16 H=650 B=64 ran 0.79×, 2 × LSTM bf16 H=333 B=64 0.965×, 4 × GRU bf16 H=777 B=5
# 1.045× (chunks of 32 in 3 partitions, polling, for 16 in 4).
LIBRARY_UNALIGNED_FIXED_SECONDS = 10.0e-6
LIBRARY_UNALIGNED_FLOPS = 165e12


def library_gemm_seconds(m: int, n: int, k: int, itemsize: int, precision: str,
                         target: Target) -> float:
    """GPU time of C[m,n] (float32) = A[m,k]·B[k,n] in cuBLASLt, operands of `itemsize`
    bytes, K contiguous in both (the host's time per call is LIBRARY_CALL_SECONDS)."""
    tiles = math.ceil(m / LIBRARY_TILE) * math.ceil(n / LIBRARY_TILE)
    splits = max(1, min(target.sm_count // tiles, k // LIBRARY_MIN_K_SPLIT))
    waves = math.ceil(tiles * splits / target.sm_count)
    per_sm = library_flops(itemsize, precision, target) / target.sm_count * LIBRARY_EFFICIENCY
    compute = waves * 2.0 * LIBRARY_TILE * LIBRARY_TILE * math.ceil(k / splits) / per_sm
    memory = gemm_memory_seconds(m, n, k, itemsize, target)
    if library_unaligned(k, itemsize):
        compute = max(compute, LIBRARY_UNALIGNED_FIXED_SECONDS + 2.0 * m * n * k / LIBRARY_UNALIGNED_FLOPS)
    return max(compute, memory)


# The merge kernel's shortest run: 1.6 µs (35 rows × 336 features) and 2.2-2.6 µs for the
# others of ≤ 280 rows, profiled on the H200 in benchmarks/results/projection-moves-h200-2026-11-29.jsonl
# (at ad44617). Bytes alone priced the padded copy of LSTM fp16 H=650 B=5 S=1's graphed call at
# ~0, so its padded cuBLASLt projection (1.8 µs) beat rnncc's rows kernel (2.9) and the call ran
# 11.2 µs against 8.6 (graph-plans-h200-2026-11-29.json, at f2030f6).
MERGE_MIN_SECONDS = 1.6e-6


def merge_seconds(rows: int, size: int, sources: int, itemsize: int, target: Target,
                  graphed: bool = False) -> float:
    """An element-wise merge kernel over `rows` rows of `size` features: every source read
    once and the result written once at HBM bandwidth, no shorter than MERGE_MIN_SECONDS,
    plus its launch (launch_seconds)."""
    return launch_seconds(graphed) + max(MERGE_MIN_SECONDS,
                                         (sources + 1) * rows * size * itemsize / target.memory_bandwidth)


# A step of mode none as cuBLASLt's product and rnncc's cell kernel, in CUDA-graph replays
# (a step's GPU time with the gap between its two kernels): a fixed 3.6 µs, W_hh's bytes at
# 6.2 TB/s and 10.4 ps an output (B·G·H), fitted by least squares to the 16 aligned 16-bit
# points of benchmarks/results/step-forms-h100-2026-11-27.json (at 8706db6, the "small" cases,
# B ≤ 32) and step-forms-h200-2026-11-28.json (at dd06e38, the "wide" cases, B = 16-64): every
# point within 0.7 µs (0.47 at LSTM fp16 H=1024 B=1). In a replay W_hh comes from L2, where it
# fits, at the same rate on both GPUs (their SMs and L2 are one design), so the weights are no
# longer priced at the target's HBM bandwidth: at the H200's 4.8 TB/s that priced 2 × GRU bf16
# H=768 B=64's cuBLASLt step at 4.3 µs against 5.6 measured, and its plan for graphed calls ran
# 1.33× slower than the grid kernel's (graph-plans-h200-2026-11-28-at-dd06e38.json). The old
# fit (3.3 µs, HBM rate, the cell's bytes) read 1.1-3.2 µs low at B = 64 on the H200.
# For exact float32, the multiply-adds where longer, at a share of the FMA peak that grows
# with the batch: 8% at B ≤ 8 (LSTM fp32 H=1024 B=8, 15.2 µs a step; B=1 ran 8.8, its bytes),
# 42% at B=64 (8.50 ms a call in graphs, bench-h100-2026-11-27-at-8706db6.json, less the
# projection's 137 GFLOP at ~50 TFLOP/s leaves ~22.5 µs a step). library_gemm_seconds, made for
# the projection's large GEMMs, read 1.4-2.6 µs for the fp16 steps at H ≤ 1024 and 21 µs for
# the float32 ones; eager calls hid that behind the host's 25 µs a step, graphed calls do not.
LIBRARY_STEP_FIXED_SECONDS = 3.6e-6
LIBRARY_STEP_WEIGHT_BYTES_PER_SECOND = 6.2e12
LIBRARY_STEP_SECONDS_PER_OUTPUT = 1.04e-11
# ... but a GEMM of few output rows (G·H) does not reach that rate: each row's K-long dot
# product streams its bytes at a bounded rate, so W_hh takes at least K·itemsize × 0.62 ns
# (the same bound as ~1.6 GB/s a row). The one-gate steps of tanh RNN fp16 H=1024-2048
# B=32-64 ran 5.5-7.3 µs, 1.18-1.41× the price without it
# (results/step-forms-h200-2026-11-29-losses.json, at 35bf5cc), and plans for graphed calls
# went to cuBLASLt steps that ran 1.34-1.42× slower than the grid kernel
# (persistence-moves-h200-2026-11-29-grid-price.txt). 0.62 ns is the least-squares value of
# the relative error over the aligned 16-bit points of the three step-forms runs (exact
# float32's SIMT GEMM is priced by its multiply-adds and floor below, without it)
# (test_the_library_step_in_graphs_is_priced_near_the_measured; RMS 10% → 6%); it binds
# where G·H < ~3800 (all one-gate steps, LSTM H < 960, GRU H < 1280).
LIBRARY_STEP_K_BYTE_SECONDS = 0.62e-9
# Exact float32's GEMM (FMA, no tensor cores) at a few rows has a higher floor: LSTM fp32
# H=512 B=3 ran ~8.3 µs a step in graphs, where its bytes and FMAs take ~1.2, and the plan
# priced with 3.3 µs ran 1.42× slower than the eager plan's grid kernel there, H=1536 B=8
# 1.57× slower than the rows form (benchmarks/results/graph-plans-h100-2026-11-27-before-
# exact-floor.json, the first run of graph plans); H=1024 B=1 8.8 with 5.0 of bytes, GRU H=256
# B=1 4.5. 7 µs keeps the rows form (6.4-7.7 µs at H=1024 B=1) where both were measured.
LIBRARY_STEP_EXACT_FIXED_SECONDS = 7e-6
# ... and where K is not whole 16-byte vectors (library_unaligned), the GRU fp16 H=650 B=5
# step of step-forms-h100-2026-11-27.json, 7.58 µs, less its weights and outputs: 7.2 µs.
LIBRARY_STEP_UNALIGNED_FIXED_SECONDS = 7.2e-6
# There the GEMM's multiply-adds take their own time besides: the align2 kernels run at
# ~81 TFLOP/s (12.35 fs a FLOP), at ~48 where K's rows are not even whole 4-byte words (odd
# K in 16 bits: 8.85 fs more). Fitted by least squares of the relative error to the 22
# unaligned points of results/step-forms-h200-2026-11-29-unaligned.json (at 7424529: LSTM,
# GRU and tanh RNN fp16/bf16, H=650-1300, B=8-256, 7.8-40.7 µs a step), all within 0.84-1.26×
# of the price (RMS 10%; the one-gate steps 1.23-1.26: fewer rows, a lower rate); without
# them those steps ran 0.95-2.5× their price, and plans for graphed
# calls at B=64-128 moved to cuBLASLt steps that ran 1.11-1.40× slower than the grid kernel
# (results/persistence-moves-h200-2026-11-29-unaligned-refit-b.txt).
LIBRARY_STEP_UNALIGNED_FLOP_SECONDS = 12.35e-15
LIBRARY_STEP_ODD_K_FLOP_SECONDS = 8.85e-15
# Where the step's sizes are padded (LayerPlan.library_padding), a call from a given h0
# first copies it into the padded h (a memset and a 2-D copy; the padded W_hhᵀ is among the
# weights): 4.18 µs, the mean of what the calls of S=1 took beyond the step's own gain at the
# 22 unaligned points of results/step-forms-h200-2026-11-29-padded-weights.json against
# -unaligned.json (2.1-5.9 µs; an upper bound: the two aligned controls' calls ran 2.1-2.3 µs
# slower in that process too). A call from zeros copies nothing; a plan does not know which.
LIBRARY_PADDING_CALL_SECONDS = 4.18e-6
# Its steps ran 1.53-2.13× faster than unpadded and 1.11-1.88× the aligned price of the padded
# sizes (results/step-forms-h200-2026-11-29-padded.json, the first form, which copied W_hhᵀ
# each call; -padded-weights.json's steps are within 0.95-1.03× of it): at
# these few output rows the GEMM's multiply-adds count besides W_hhᵀ's bytes, 5.19 fs a FLOP of
# the padded GEMM by least squares of the relative error (0.82-1.33×, RMS 13%).
LIBRARY_STEP_PADDED_FLOP_SECONDS = 5.194e-15
LIBRARY_STEP_FMA_SHARE_AT_8_ROWS = 0.08
# Past a few rows the share grows with the batch as SHARE_MAX · B / (B + HALF_ROWS): 0.29 at
# B=32, 0.43 at 64, 0.56 at 128, 0.66 at 256. Fitted (benchmarks/fit_library_exact_share.py,
# least squares of the relative error) to 56 cuBLASLt steps of exact float32 plans, B=20-256,
# H=333-2048 (results/persistence-moves-h200-2026-11-29-eager-step-{a,b,c}.jsonl: CUDA-graph
# replays, (T(256) − T(35)) / 221 less the projection's priced share): RMS 12% against 26%
# for the share capped at 0.42 (fitted at B=64 on the H100), which priced the B=128-256 steps
# 1.3-1.7× their time, so that the staged grid kernel took them at 1.1-1.5× cuBLASLt's time.
# The A/B of the moves it made (-eager-step-d-*.jsonl) adds 12 steps: over all 68, RMS 15%
# (the worst LSTM H=650-1300 and GRU H=1400 at B=48-128, 1.3-1.7× their price).
LIBRARY_STEP_FMA_SHARE_MAX = 0.81
LIBRARY_STEP_FMA_SHARE_HALF_ROWS = 57.0


# The library's step queued by the host (an eager call not replayed): past the host's time
# the GEMM and the cell kernel run back to back, 3.2 µs a step (median) longer than in
# CUDA-graph replays in the same process: 23 plans too large to replay, GPU steps of
# 31-69 µs, 2.1-4.9 µs longer (results/persistence-moves-h200-2026-11-29-rows-fit-{a,b}-eager.jsonl,
# -fma-forms-{a,c}-eager.jsonl, -unaligned-k.jsonl, -unaligned-refit-b.jsonl). Eager steps
# were priced by library_gemm_seconds before, the H100's GEMM model (GRU fp32 H=2000 B=32:
# 81 µs, against 55 measured), so that the FMA rows kernel took them at 1.6× the time.
EAGER_LIBRARY_STEP_GAP_SECONDS = 3.2e-6


def library_step_seconds(batch: int, hidden: int, gates: int, itemsize: int, precision: str,
                         target: Target, k: int | None = None, graphed: bool = False,
                         padded_sizes: tuple[int, int] | None = None) -> float:
    """One step as h·W_hhᵀ in cuBLASLt (K = ``k``, h's width; default ``hidden``) followed
    by rnncc's cell kernel. Graphed: the GPU's time as measured in graphs
    (LIBRARY_STEP_FIXED_SECONDS and the rates after it; at unaligned K also the GEMM's
    multiply-adds). Eager: that and EAGER_LIBRARY_STEP_GAP_SECONDS, or the host's time (a
    library call and a kernel launch a step), whichever is longer. ``padded_sizes``: (K, M) the GEMM's unaligned sizes are padded to
    (LayerPlan.library_padding; the cell writes h into a padded buffer too), priced as the
    aligned GEMM of those sizes (zero rows count as rows)."""
    k = padded_sizes[0] if padded_sizes else k or hidden
    if graphed:
        w_bytes = gates * hidden * k * itemsize
        # From L2 where W_hh stays there (LIBRARY_STEP_WEIGHT_BYTES_PER_SECOND), else from HBM.
        weights = w_bytes / (LIBRARY_STEP_WEIGHT_BYTES_PER_SECOND if w_bytes <= WEIGHTS_L2_SHARE * target.l2_bytes
                             else target.memory_bandwidth)
        share = max(LIBRARY_STEP_FMA_SHARE_AT_8_ROWS,
                    LIBRARY_STEP_FMA_SHARE_MAX * batch / (batch + LIBRARY_STEP_FMA_SHARE_HALF_ROWS))
        fma = 2.0 * gates * hidden * k * batch / (target.fp32_flops * share) \
            if precision == "exact" and itemsize == 4 else 0.0
        if not fma:  # tensor cores' rows, the bound fitted there
            weights = max(weights, k * itemsize * LIBRARY_STEP_K_BYTE_SECONDS)
        unaligned = not fma and library_unaligned(k, itemsize)
        fixed = LIBRARY_STEP_EXACT_FIXED_SECONDS if fma else \
            LIBRARY_STEP_UNALIGNED_FIXED_SECONDS if unaligned else LIBRARY_STEP_FIXED_SECONDS
        if unaligned:
            flops = 2.0 * gates * hidden * k * batch * (
                LIBRARY_STEP_UNALIGNED_FLOP_SECONDS + (LIBRARY_STEP_ODD_K_FLOP_SECONDS if k * itemsize % 4 else 0.0))
        elif padded_sizes:
            flops = 2.0 * padded_sizes[0] * padded_sizes[1] * batch * LIBRARY_STEP_PADDED_FLOP_SECONDS
        else:
            flops = 0.0
        return fixed + max(weights, fma) + flops + batch * gates * hidden * LIBRARY_STEP_SECONDS_PER_OUTPUT
    gpu = library_step_seconds(batch, hidden, gates, itemsize, precision, target, k, True, padded_sizes)
    return max(gpu + EAGER_LIBRARY_STEP_GAP_SECONDS, STEP_LAUNCH_SECONDS + LIBRARY_CALL_SECONDS)


def h_projection_seconds(batch: int, hidden: int, proj: int, itemsize: int,
                         target: Target, graphed: bool = False) -> float:
    """One step's h = r·W_hrᵀ (r [B, hidden], W_hr [proj, hidden]) in rnncc's kernel
    (templates/recurrent_h_projection.cu.j2), where each block of H_PROJECTION_BLOCK.rows
    batch rows reads its rows of W_hr. Not fitted: those bytes at HBM bandwidth, and the
    launch (host time), which dominates at the sizes of speech models. Measured 3–4 µs of
    GPU time at fp16 H=1024 P=256 and fp32 H=512 P=128, B=8
    (benchmarks/results/kernel-split-h100-2026-11-24.txt, benchmarks/kernel_split.py), which
    a plan for graphed calls pays in place of the launch (H_PROJECTION_GRAPH_SECONDS)."""
    blocks_of_rows = math.ceil(batch / H_PROJECTION_BLOCK.rows)
    reads = blocks_of_rows * proj * hidden * itemsize + batch * hidden * itemsize
    fixed = H_PROJECTION_GRAPH_SECONDS if graphed else STEP_LAUNCH_SECONDS
    return fixed + (reads + batch * proj * itemsize) / target.memory_bandwidth


# The h projection's GPU time a step with its gap, for plans of graphed calls: the 3–4 µs
# measured (h_projection_seconds). Priced at the bytes alone, the per-step form of 2 × LSTMP
# fp16 H=1024 P=256 B=8 was predicted 2.8 µs a step against 3.6 folded, and ran 3.85 ms
# against the folded plan's 1.35 in graphs (bench-h100-2026-11-27-at-fba1f90.json).
H_PROJECTION_GRAPH_SECONDS = 3.5e-6


# ---- the input projection inside the recurrent launch (tiles.FusedProjection) -----------
# Measured in rnncc's kernel on the H100 (benchmarks/fused_projection_*.py,
# results/fused-projection-{rows,parts,waits}-h100-2026-11-27.txt):
# - The first chunk is awaited. Since the registers form loads W_hh as uploaded
#   (weights.fragment_index), its blocks start their first step ~0.8 µs into the launch and
#   wait for chunk 0: 5.0 µs at LSTM fp16 H=512 B=8 (K=512), 3.4 at H=256 (K=256), which is
#   chunk 0's passes plus ~1.8 µs (FUSED_FIRST_WAIT_SECONDS: W_ih's columns arriving;
#   results/fused-producers-h100-2026-11-27.txt, fused_projection_waits). (While the blocks
#   still gathered W_hh, ~6 µs, chunk 0 landed before their first step.)
# - A producer's pass of 32 rows × 32 gate columns over K=512 takes 3.2 µs (producer 0's
#   last of 64 chunks at 205.2 µs, its first at 4.9), since the division by the batch left
#   its loops; 4.9 before (fused-producers), 2.37 in the prototype (fused_projection.cu).
# - The launch runs 21–35 µs longer than the same kernel awaiting no flag (S=256: 64 chunks)
#   though the producers are far ahead: unexplained (fused-producers tried the flag's load a
#   chunk ahead, its line alone, cp.async). Priced by the chunk: 0.33 and 0.40 µs against
#   the producers returning at once at H=512 and 256 (fused-projection-parts); the price
#   takes 0.45, since rows with fewer producers lost more (RNN_TANH H=512 B=8 S=64, 16
#   producers: 10 µs slower in a graph than with its projection before the launch, over 16
#   chunks).
# - Eager, the call saved a median 11.6 µs more than in a CUDA graph over the 11 rows of
#   fused-projection-rows (−2 to 27: the projection's host call, less what of it the GPU's
#   work hid), not the 9–25 µs of host time launch_seconds and library_call_seconds count.
FUSED_CHUNK_SECONDS = 0.45e-6
FUSED_PASS_SECONDS = 3.2e-6    # a producer's pass: 32 x rows × 32 gate columns over K = 512
FUSED_PASS_K = 512
FUSED_FIRST_WAIT_SECONDS = 1.8e-6  # the first step's wait beyond chunk 0's passes
FUSED_EAGER_HOST_SECONDS = 11e-6
# A producer's chunk may take at most the chunk's steps (at LSTM fp16 H=512 B=8 4.9 µs
# beside 4 steps of 1.3, no chunk late; at B=16, two passes a chunk, the launch ran 1.59×
# the one with the projection before it in a graph, and with passes of 3.2 µs still 1.12×:
# 165.8 against 148.0 µs at S=100, fused-producers).
FUSED_AHEAD = 1.0
FUSED_CHUNK = 4                # steps a flag (the prototype: 4 against 8, 1.026× against 1.031×)
# In a CUDA graph a kernel that waits on the one before it in its stream starts about 2 µs
# after it ends: LSTM fp16 H=512 B=8's projection GEMM ran 11.8 µs and cost the call ~14
# (benchmarks/results/eager-trace-h100-2026-11-27.txt, run at 0018e71).
KERNEL_DEPENDENCY_SECONDS = 2e-6


def fused_pass_seconds(k: int) -> float:
    """A producer's pass of FusedProjection.PASS_ROWS rows over K = k (k-steps of 16)."""
    return FUSED_PASS_SECONDS * max(1, math.ceil(k / 16)) * 16 / FUSED_PASS_K


def fused_chunk_seconds(chunk: int, batch: int, k: int, pass_rows: int) -> float:
    """A producer's chunk: its passes of pass_rows rows over chunk × batch x rows."""
    return math.ceil(chunk * batch / pass_rows) * fused_pass_seconds(k)


def fused_projection_seconds(chunk: int, steps: int, first_chunk_seconds: float) -> float:
    """What computing the projection inside the launch adds to it: the first step's wait
    for chunk 0 (its passes, ``first_chunk_seconds``, and FUSED_FIRST_WAIT_SECONDS), then
    FUSED_CHUNK_SECONDS a chunk of the steps."""
    return FUSED_FIRST_WAIT_SECONDS + first_chunk_seconds + math.ceil(steps / chunk) * FUSED_CHUNK_SECONDS


def separate_projection_seconds(projection_seconds: float, graphed: bool) -> float:
    """What a projection launched before the recurrent kernel adds to a call: its GPU time,
    the recurrent kernel's start after it, and for calls the host queues the part of its
    host time the GPU does not hide (FUSED_EAGER_HOST_SECONDS, measured)."""
    return projection_seconds + KERNEL_DEPENDENCY_SECONDS + (0.0 if graphed else FUSED_EAGER_HOST_SECONDS)
