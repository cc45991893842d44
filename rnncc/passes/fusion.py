"""Projection fusion: the input projection inside the recurrent launch, or before it.

A layer whose recurrence runs the cluster kernel with W_hh in registers leaves most SMs
idle. Producer blocks in the same launch can compute x·W_ihᵀ + b chunk by chunk while the
recurrent cluster steps (tiles.FusedProjection): the projection's own launch, the part of
its host time the GPU does not hide (~11 µs measured for eager calls) and the recurrent
kernel's start after it leave the call; what it costs is ~0.45 µs a chunk of steps, the
chunks' flags and the producers' traffic, and the first step's wait for the first chunk
(passes/cost.py, fused_projection_seconds). So short eager calls fuse and long ones and
graphed ones do not.
The decision is priced after persistence and the schedule, which it needs: the projection
decided before is what the layer runs where fusion does not pay or cannot run, its reason
and alternatives then saying what fusing was priced at.
"""

from dataclasses import replace

from ..dtypes import DTYPES
from ..plan import Decision
from ..tiles import FusedProjection
from .cost import (FUSED_AHEAD, FUSED_CHUNK, clusters_at_once, fused_chunk_seconds,
                   fused_projection_seconds, separate_projection_seconds)
from .geometry import projection_decision, projection_label, projection_seconds_of
from .persistence import persistence_label


def fused_tile(l, chunk: int = FUSED_CHUNK) -> FusedProjection:
    """The producers layer l's cluster kernel would carry: enough clusters of its size for
    every gate column, a flag every ``chunk`` steps."""
    cluster = l.persistence.value.tile.cluster
    return FusedProjection(chunk, FusedProjection.producer_rows_for(l.gates * l.hidden_size, cluster), cluster)


def why_not_fused(l, plan, target, tile: FusedProjection) -> str | None:
    """Why layer l's projection cannot run inside its recurrent launch (None: it can)."""
    p, o = l.persistence.value, plan.options
    if plan.dtype not in ("float16", "bfloat16"):
        return f"its producers multiply fp16/bf16 on tensor cores; dtype is {plan.dtype}"
    if p.mode != "cluster" or p.math != "tensor" or not p.tile.weights_in_registers:
        return "only the cluster kernel on tensor cores with W_hh in registers carries producers"
    if p.tile.register_steps:
        return ("the hybrid registers form (part of W_hh in shared memory) is not built with producer blocks: "
                "their registers beside its product were not checked against ptxas")
    if plan.schedule.value.pipelined:
        return "layers pipelined: a chunk's projection is a launch of its own"
    if len(l.sources) != 1 or l.proj_size:
        return "one input tensor and no proj_size only"
    if l.input_size % 8:
        return f"input size {l.input_size} is not whole 16-byte rows"
    if l.unroll.value < o.seq_len:
        return f"the layer runs in launches of {l.unroll.value} steps"
    if p.threads < 32 * FusedProjection.WARPS:
        return f"its blocks of {p.threads} threads are fewer than a producer's {32 * FusedProjection.WARPS}"
    itemsize = DTYPES[plan.dtype].itemsize
    if tile.shared_bytes(l.input_size, itemsize) > target.shared_memory_per_block_optin:
        return (f"a producer's {tile.shared_bytes(l.input_size, itemsize) // 1024} KiB of W_ih and x exceed "
                f"{target.shared_memory_per_block_optin // 1024} KiB")
    tiles = -(-o.batch // p.tile.batch_per_block)
    at_once = clusters_at_once(target, p.tile.cluster)
    if tiles + tile.producer_rows > at_once:
        return (f"{tiles} recurrent and {tile.producer_rows} producer clusters of {p.tile.cluster} exceed the "
                f"{at_once} the GPU holds at once")
    return None


def plan_projection_fusion(model, plan, target):
    o = plan.options

    def decide(l):
        p = l.persistence.value
        if p.mode != "cluster":
            return l
        tile = fused_tile(l)
        # Autotuning's measurement or the gemm option decided the projection: left as is.
        if why_not_fused(l, plan, target, tile) or o.measured(l.name) is not None or o.gemm == "cublas":
            return l
        step = l.persistence.alternatives[persistence_label(p)]
        chunk_s = fused_chunk_seconds(tile.chunk, o.batch, l.input_size, tile.PASS_ROWS)
        if chunk_s > FUSED_AHEAD * tile.chunk * step:
            return l  # the producers would not keep ahead of the steps
        fused = fused_projection_seconds(tile.chunk, o.seq_len, chunk_s)
        before = l.projection_tile
        separate = separate_projection_seconds(projection_seconds_of(before), o.graphed)
        if fused >= separate:  # priced and rejected: the decision says so
            return replace(l, projection_tile=replace(
                before, reason=f"{before.reason}; in the recurrent launch predicted to add {fused * 1e6:.1f} µs "
                               f"against {separate * 1e6:.1f} µs before it",
                alternatives={**before.alternatives, projection_label(tile): fused}))
        why = (f"inside the recurrent launch: {tile.producers} producer blocks (clusters of {tile.cluster}) "
               f"of {tile.COLUMNS} gate columns, a flag every {tile.chunk} steps, their chunks of "
               f"{chunk_s * 1e6:.1f} µs ahead of {tile.chunk} steps of {step * 1e6:.2f} µs; predicted to add "
               f"{fused * 1e6:.1f} µs against {separate * 1e6:.1f} µs for {projection_label(before.value)} "
               f"before the launch{'' if o.graphed else ' (its part of the host time included)'} ({before.reason})")
        # What each adds to the call (the separate projection's GPU time is among the
        # reason's alternatives).
        alternatives = {f"{projection_label(before.value)} before the launch": separate,
                        projection_label(tile): fused}
        return replace(l, projection_tile=Decision(tile, why, alternatives=alternatives))
    return plan.map_layers(decide)


def with_persistence_forced(l, plan, target):
    """Layer l after its persistence was forced (runtime.CompiledModel.with_persistence): a
    fused projection follows the new cluster size where it still can run in the launch, else
    the projection is decided again as a launch of its own."""
    if not l.projection_fused:
        return l
    p, o = l.persistence.value, plan.options
    if p.mode == "cluster" and p.math == "tensor":
        tile = fused_tile(l)
        if why_not_fused(l, plan, target, tile) is None:
            return replace(l, projection_tile=replace(
                l.projection_tile, value=tile,
                reason=f"{l.projection_tile.reason}; producers in clusters of {tile.cluster}, as the forced persistence"))
    return replace(l, projection_tile=projection_decision(l, l.unroll.value * o.batch, o, target,
                                                          DTYPES[plan.dtype].itemsize))
