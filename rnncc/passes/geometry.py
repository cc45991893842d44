"""Launch geometry: the tile of each kernel family, from the cost model's candidates.

The input projection may instead go to cuBLASLt (``math="cublas"``), where its predicted
time is lower: a hoisted projection of many rows is a large GEMM, and the library's Hopper
kernels run it at several times the rate of rnncc's mma.sync tiles. Only in layout
``Y = X·Wᵀ``: the library adds the bias per row of its column-major output, which is per
gate column there.

A projection's alternatives are GPU times (what the schedule simulates). The choice also
counts the library's host time per call (``cost.library_call_seconds``): a plan made for
eager calls (the default) pays it, as the call's first projection waits on the host; a plan
for calls replayed from a CUDA graph (``launches="graph"``) does not. Measured on one layer
at S=256 (benchmarks/results/projection-gemm-eager-h100-2026-11-25.jsonl), cuBLASLt's
projection made the call 2–4% faster in a CUDA graph but 6–9% slower eager (31–50 µs),
although its GPU time at 64–256 rows is a quarter of rnncc's kernel's (4.5–7.2 µs against
16–27, benchmarks/results/projection-small-m-h100-2026-11-25.jsonl).
"""

import math
from dataclasses import replace

from ..dtypes import DTYPES
from ..errors import PlanError
from ..plan import Decision
from ..tiles import LibraryProjection, Projection, StepRows, StepRowsTensor, StepTile, projection_padded_k
from .cost import (PROJECTION_TILES, TENSOR_PROJECTION_TILES, library_call_seconds, library_gemm_seconds,
                   merge_seconds, projection_operand_load_bytes, projection_seconds, rows_projection_seconds,
                   rows_projection_tensor_seconds, rows_projection_tensor_tiles, rows_projection_tiles,
                   step_kernel_seconds, step_rows_tensor_tiles, step_rows_tiles, step_tiles, tensor_projection_k_tile,
                   tensor_projection_seconds)


def projection_label(value: Projection) -> str:
    """The name of a projection decision's value among its alternatives."""
    if value.math == "fused":
        return f"fused {value.producers} producers, chunks of {value.chunk}"
    if value.math == "rows":
        return f"rnncc rows×{value.rows}"
    if value.math == "rows_tensor":
        return f"rnncc rows mma {value.m_rows}c×k{value.k_split}×{value.rows}r"
    return "cuBLASLt" if value.math == "cublas" else f"rnncc {value.bm}×{value.bn}"


def plan_projection_tile(model, plan, target):
    itemsize = DTYPES[plan.dtype].itemsize
    return plan.map_layers(lambda l: replace(l, projection_tile=projection_decision(
        l, l.unroll.value * plan.options.batch, plan.options, target, itemsize)))


def projection_seconds_of(d: Decision) -> float:
    """The predicted seconds of a projection decision's chosen value."""
    return d.alternatives[projection_label(d.value)]


def projection_decision(l, rows: int, o, target, itemsize: int, host_bound: bool = False,
                        host_apart: bool = False) -> Decision:
    """Layer l's projection of ``rows`` rows (steps × batch of one launch): rnncc's best
    tile or cuBLASLt, by predicted time, unless an option or autotuning says.
    ``host_bound``: the call waits on the host, where a library call costs more than a
    launch, so rnncc's kernel unless an option or autotuning says cuBLASLt.
    ``host_apart``: the call's host time is priced elsewhere (a pipelined chunk's, by the
    schedule), so the projection is chosen by its GPU time, as for a graphed call."""
    gpu_only = o.graphed or host_apart
    # Autotuning times a layer with one source: a merged input's projection (a fused
    # loader here, a merge kernel or a call per source in cuBLASLt) was not measured,
    # so it stays the cost model's (or the user's) choice.
    tuned = o.measured(l.name) is not None and len(l.sources) == 1
    gemm = o.gemm_for(l.name) if tuned else o.gemm
    chooser = "measured" if tuned else "user"
    cols = l.gates * l.hidden_size
    m, n = (rows, cols) if l.layout.value == "xw" else (cols, rows)
    tensor = l.precision.value == "tensor"
    if tensor:
        load_bytes = projection_operand_load_bytes(l.input_size, itemsize, len(l.sources))
        costs = {t: tensor_projection_seconds(m, n, l.input_size, t, target, itemsize, load_bytes)
                 for t in TENSOR_PROJECTION_TILES}
    else:
        costs = {t: projection_seconds(m, n, l.input_size, t, target, itemsize)
                 for t in PROJECTION_TILES}
    # A few rows: matrix-vector passes over W_ih, many blocks, no K loop waiting on memory.
    costs |= {t: rows_projection_seconds(rows, cols, l.input_size, t, target, itemsize)
              for t in rows_projection_tiles(rows, l.input_size, itemsize, target)}
    if tensor and itemsize == 2:  # the same on tensor cores: W_ih's rows the mma's A operand
        costs |= {t: rows_projection_tensor_seconds(rows, cols, t, itemsize)
                  for t in rows_projection_tensor_tiles(rows, l.input_size, itemsize, target)}
    best = min(costs, key=lambda t: (round(costs[t] * 1e9), -getattr(t, "bm", 0)))
    if best.math == "rows_tensor":
        value = best
        reason = (f"{rows} rows × {cols} on tensor cores as W_ih's rows against a few rows: "
                  f"{math.ceil(cols / best.m_rows)}×{math.ceil(rows / best.rows)} blocks of {best.threads} "
                  f"threads ({best.m_rows} gate columns, K split {best.k_split}×, {best.rows} rows a block), "
                  f"predicted {costs[best] * 1e6:.1f} µs")
    elif best.math == "rows":
        value = best
        reason = (f"{rows} rows × {cols} as matrix-vector passes of {best.rows} rows over W_ih, "
                  f"{math.ceil(cols / (best.warps * best.cols))}×{math.ceil(rows / best.rows)} blocks of "
                  f"{best.threads} threads (a warp {best.cols} gate columns, products exact in float32), "
                  f"predicted {costs[best] * 1e6:.1f} µs")
    else:
        blocks = math.ceil(m / best.bm) * math.ceil(n / best.bn)
        # W_ih from a copy with padded rows where K is not whole 16-byte loads, so that its
        # operand loads 16 bytes at a time (element loads there ran 320 × 2600 × 650 in
        # 55 µs, results/graph-kernel-times-h100-2026-11-28-at-db7bdc7.json).
        padded = StepRows.row_stride(l.input_size, itemsize)
        value = replace(best, bk=tensor_projection_k_tile(itemsize),
                        row_stride=padded if padded != l.input_size else 0) if tensor else best
        reason = (f"{m}×{n} in {best.bm}×{best.bn} tiles{', mma.sync' if tensor else ''}: "
                  f"{blocks} blocks of {best.threads} threads, predicted {costs[best] * 1e6:.1f} µs")
    alternatives = {projection_label(t): c for t, c in costs.items()}
    if gemm == "rnncc":
        return Decision(value, reason, alternatives=alternatives)
    if host_bound and gemm is None:
        return Decision(value, reason + "; rnncc's kernel, as the call is host-bound and a cuBLASLt "
                        "call costs the host more than a launch", alternatives=alternatives)
    # A concat: one library call per source, each covering its slice of K. A sum of
    # several sources: summed once by a merge kernel, then one call over all of K
    # (a call per source would repeat the whole GEMM for each).
    summed = l.merge == "sum" and len(l.sources) > 1
    library = sum(library_gemm_seconds(cols, rows, s.size, itemsize, l.precision.value, target)
                  for s in (l.sources[:1] if summed else l.sources))
    if summed:
        library += merge_seconds(rows, l.input_size, len(l.sources), itemsize, target, gpu_only)
    if l.layout.value != "xw":
        if gemm == "cublas":
            reason = "gemm='cublas' asked, but cuBLASLt's bias needs layout Y = X·Wᵀ; " + reason
        return Decision(value, reason, alternatives=alternatives)
    # One operand (a single source, or a sum summed first) whose K is not whole 16-byte
    # vectors may be padded with zeros, W_ih once among the weights and the input by the
    # merge kernel (a copy, or the sum itself) each chunk, so that the library runs its
    # aligned kernels (LibraryProjection.padded_k; its align2 ones ran at
    # LIBRARY_UNALIGNED_FLOPS): taken where that prices below the GEMM at K as stored (the
    # copy's kernel can cost more than it saves on a few rows, MERGE_MIN_SECONDS).
    padded_k = projection_padded_k(l.input_size, cols, itemsize) if summed or len(l.sources) == 1 else 0
    if padded_k:
        padded = (library_gemm_seconds(cols, rows, padded_k, itemsize, l.precision.value, target)
                  + merge_seconds(rows, padded_k, len(l.sources), itemsize, target, gpu_only))
        if padded < library:
            alternatives["cuBLASLt, K as stored"], library = library, padded
        else:
            alternatives[f"cuBLASLt, K padded to {padded_k}"], padded_k = padded, 0
    alternatives[projection_label(LibraryProjection())] = library
    host = library_call_seconds(gpu_only) * (1 if summed else len(l.sources))
    host_note = ("its host time priced apart by the schedule: per chunk, or as the call's graph replay"
                 if host_apart and not o.graphed else f"{host * 1e6:.0f} µs of the host's")
    if gemm == "cublas" or library + host < costs[best]:
        why = (f"{'measured' if chooser == 'measured' else 'forced by the user'} (gemm='cublas')"
               if gemm == "cublas" else
               f"{rows}×{cols}×{l.input_size} GEMM"
               f"{f' in {len(l.sources)} calls' if len(l.sources) > 1 and not summed else ''}"
               f"{f' after a merge kernel sums its {len(l.sources)} sources' if summed else ''} "
               f"predicted {library * 1e6:.1f} µs in cuBLASLt (and {host_note}) "
               f"vs {costs[best] * 1e6:.1f} µs in rnncc's best kernel ({projection_label(best)})")
        padding = (f"; K padded with zeros to {padded_k} (W_ih's rows, and the input by the merge kernel), "
                   "so that the library runs its aligned kernels" if padded_k else "")
        return Decision(LibraryProjection(padded_k), why + padding + "; bias in the library's epilogue",
                        chooser if gemm == "cublas" else "model", alternatives)
    reason += f" (cuBLASLt predicted {library * 1e6:.1f} µs and {host_note})"
    return Decision(value, reason, alternatives=alternatives)


def plan_step_tile(model, plan, target):
    """The step kernel's form and tile (used where a layer runs a launch a step): tiles of
    units × batch rows (StepTile) or a warp a unit over a few rows (StepRows), the fastest
    predicted, or the form option ``step_kernel`` forces."""
    o = plan.options
    itemsize = DTYPES[plan.dtype].itemsize

    def decide(l):
        B, H, G, K = o.batch, l.hidden_size, l.gates, l.out_size
        # cp.async copies 4-byte elements: float32 storage only.
        tiles = [t for t in step_tiles(G, async_copy=plan.dtype == "float32")
                 if t.shared_bytes(G, itemsize) <= target.shared_memory_per_block]
        rows = step_rows_tiles(B, K, itemsize, target)
        if itemsize == 2 and l.precision.value == "tensor":
            rows += step_rows_tensor_tiles(B, G, K, itemsize, target)
        fits = {"tiles": tiles, "rows": rows}.get(o.step_kernel, tiles + rows)
        if not fits:
            raise PlanError(f"layer '{l.name}', option step_kernel={o.step_kernel!r}: {B} batch rows of h "
                            f"over K={K} do not fit a block's {target.shared_memory_per_block // 1024} KiB "
                            "of static shared memory in the rows form; expected step_kernel='tiles' or None")

        def seconds(t):
            """The step's GPU time: the tiles are ranked by it (an eager step's price, no lower
            than the host's launch, would tie those below it; cost.eager_step_seconds)."""
            return step_kernel_seconds(B, H, G, t, target, itemsize, K, graphed=True)

        def key(t):
            padded = (math.ceil(H / t.units_per_block) * t.units_per_block *
                      math.ceil(B / t.batch_per_block) * t.batch_per_block)
            return (round(seconds(t) * 1e8), padded, t.threads)
        best = min(fits, key=key)
        blocks = math.ceil(H / best.units_per_block) * math.ceil(B / best.batch_per_block)
        predicted = f"predicted {seconds(best) * 1e6:.1f} µs/step" + (
            "" if o.graphed else
            f" ({step_kernel_seconds(B, H, G, best, target, itemsize, K) * 1e6:.1f} with the host's launch a step)")
        if isinstance(best, StepRows):
            reason = (f"rows: {blocks} blocks of {best.warps} warps on {target.sm_count} SMs, a warp a "
                      f"unit reading its {G} rows of W_hh once for {best.rows} batch rows; {predicted}")
        elif isinstance(best, StepRowsTensor):
            reason = (f"rows on tensor cores: {blocks} blocks of {best.warps} warps on {target.sm_count} SMs, "
                      f"{best.units} units' gate rows of W_hh a block as the mma's A operand straight from "
                      f"memory, K split {best.k_split}× over warps, {best.batch_per_block} batch rows of h; "
                      f"{predicted}")
        else:
            reason = (f"{blocks} blocks of {best.threads} threads on {target.sm_count} SMs, "
                      f"{best.batch_per_thread * best.units_per_thread * G} accumulators/thread, "
                      f"K split {best.k_split}×; {predicted}")
        # The five best tiles and the three best rows, by GPU time.
        ranked = sorted(tiles, key=key)[:5] + sorted(rows, key=key)[:3]
        alternatives = {step_tile_label(t): seconds(t) for t in ranked if t in fits}
        assert len(alternatives) == len([t for t in ranked if t in fits])  # the names tell the tiles apart
        source = "model"
        if o.step_kernel is not None:
            reason, source = f"forced by the user (step_kernel={o.step_kernel!r}); {reason}", "user"
        return replace(l, step_tile=Decision(best, reason, source, alternatives=alternatives))
    return plan.map_layers(decide)


def step_tile_label(t: StepTile | StepRows | StepRowsTensor) -> str:
    """A step tile's name among the alternatives: units/per thread × rows/per thread × K
    split, or rows: warps × rows."""
    if isinstance(t, StepRows):
        return f"rows {t.warps}w×{t.rows}b"
    if isinstance(t, StepRowsTensor):
        return f"rows mma {t.units}u×k{t.k_split}×{t.batch_per_block}b"
    return (f"{t.units_per_block}/{t.units_per_thread}u×{t.batch_per_block}/"
            f"{t.batch_per_thread}b×k{t.k_split}")
