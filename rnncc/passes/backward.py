"""Backward: what training a layer on CUDA keeps and runs (``rnncc/backward.py``).

Two decisions per layer, at the plan's S and B:

- ``backward_gates``: whether the forward saves the gates' pre-activations for the
  backward (each step's epilogue writes the sums it forms anyway) or the backward
  recomputes them from the h sequence the forward keeps (two GEMMs over all steps). Both
  alternatives are costed (time and the memory held from the forward to the backward). A
  training forward (CompileOptions.backward_gates = "auto", what rnncc.nn's training
  twins compile) saves where the stores are predicted to cost its forward less than the
  GEMMs cost the backward (modelled; "save" or "recompute" force either); a plan without
  the option is an inference forward's, and a backward of it would recompute (forced).
- ``backward_tile``: the reverse recurrence's form and block (``tiles.backward_kernel_tile``,
  the function the backward launches with, at the call's B): in clusters with W_hh in
  registers (in part in shared memory where the registers do not hold it), or
  grid-persistent.

A layer the CUDA backward does not cover (LSTMP, or more units a block than a block runs)
gets ``none`` with the reason.
"""

from __future__ import annotations

from dataclasses import replace

from ..dtypes import DTYPES
from ..plan import Decision
from ..tiles import (CLUSTER_BACKWARD_TILES, FmaClusterBackwardTile, KSplitBackwardTile, backward_kernel_tile,
                     grid_shared_max, backward_tile, grid_backward_step_seconds, ksplit_backward_step_seconds,
                     ksplit_backward_tile)
from .cost import clusters_at_once, largest_cluster, library_gemm_seconds

MIB = 2**20

# What saving costs a step beyond its bytes where the forward runs in clusters on tensor
# cores, per buffer written (a GRU writes two). Measured 0.19 and 0.24 µs a step (LSTM fp16
# H=512 and H=256, B=8) and 0.39 (GRU fp16 H=512 B=8, two buffers); ~0.01 in the FMA
# cluster kernels, none measurable in the grid kernels at B=8 (benchmarks/saved_gates.py,
# results/saved-gates-h100-2026-11-27-at-bb32122.jsonl). Nsight Compute finds 4.8% more
# instructions and more long-scoreboard stalls, at 242 registers: G 4-byte stores an element,
# whose source registers the next step's code waits for
# (results/ncu-saved-gates-h100-2026-11-27.txt); not the exchange's barriers.
SAVED_GATES_CLUSTER_TENSOR_STEP_SECONDS = 0.2e-6


def gate_costs(l, seq_len: int, batch: int, itemsize: int, target) -> dict[str, float]:
    """Predicted seconds of each way to have a layer's pre-activations in the backward:
    ``recompute``, its two GEMMs over all S·B rows (x·W_ihᵀ and h_{t−1}·W_hhᵀ, float32
    results); ``save``, the forward's extra writes of them (float32) at HBM bandwidth,
    plus, where the forward runs in clusters on tensor cores, what the stores cost its
    step (SAVED_GATES_CLUSTER_TENSOR_STEP_SECONDS a buffer)."""
    rows, cols = seq_len * batch, l.gates * l.hidden_size
    precision = l.precision.value
    recompute = library_gemm_seconds(rows, cols, l.input_size, itemsize, precision, target) \
        + library_gemm_seconds(rows, cols, l.hidden_size, itemsize, precision, target)
    persistence = l.persistence.value
    stalls = persistence.mode == "cluster" and persistence.math == "tensor"
    save = saved_gate_bytes(l, seq_len, batch) / target.memory_bandwidth \
        + (seq_len * SAVED_GATES_CLUSTER_TENSOR_STEP_SECONDS * saved_gate_buffers(l.cell) if stalls else 0.0)
    return {"recompute": recompute, "save": save}


def saved_gate_buffers(cell: str) -> int:
    """The float32 [S, B, G·H] buffers a layer's saved pre-activations take: two for a GRU
    (its h part apart, which r multiplies), else one."""
    return 2 if cell == "gru" else 1


def saved_gate_bytes(l, seq_len: int, batch: int) -> int:
    """Device memory a training forward's saved pre-activations of a layer take."""
    return seq_len * batch * l.gates * l.hidden_size * 4 * saved_gate_buffers(l.cell)


def backward_bytes(l, seq_len: int, batch: int, itemsize: int) -> int:
    """Device memory a layer's backward allocates while it runs: the float32
    pre-activations (a GRU's h part apart), dG in the layer's type (over the
    pre-activations for float32), h_{t−1} in its type and an LSTM's float32 c sequence."""
    rows, cols = seq_len * batch, l.gates * l.hidden_size
    pre = rows * cols * 4 * (2 if l.cell == "gru" else 1)
    dg = 0 if itemsize == 4 else rows * cols * itemsize * (2 if l.cell == "gru" else 1)
    return pre + dg + rows * l.hidden_size * (itemsize + (4 if l.cell == "lstm" else 0))


def tile_reason(l, tile, batch: int, itemsize: int, target) -> str:
    """Why the backward recurrence takes ``tile``: what the cluster form keeps where, what
    the K-split grid form does and what it beat, or what the grid form does and why neither
    applies or wins."""
    if isinstance(tile, CLUSTER_BACKWARD_TILES):
        w = l.gates * l.hidden_size * l.hidden_size * itemsize
        clusters, at_once = tile.clusters(batch), clusters_at_once(target, tile.cluster)
        if isinstance(tile, FmaClusterBackwardTile):
            held = (f"{tile.share(l.gates)} values of it in each lane's registers, {tile.k_split} warps along K, "
                    f"exact fp32 products on the FMA units")
            measured = ("the block of least predicted step (tiles.fma_backward_step_seconds); the form's picks "
                        "took 0.13-0.39 of the grid form's time at 10 shapes "
                        "(results/backward-fma-tiles-h100-2026-11-27.jsonl)")
        elif tile.register_steps:
            held = (f"{tile.register_steps} of each warp's {tile.split_steps(l.gates)} k-steps, the other "
                    f"{tile.shared_steps(l.gates)} in shared memory (more than the registers of any cluster hold)")
            measured = ("the hybrid form measured 0.13-0.64 of the grid form's time at 7 shapes, H=520-1400, "
                        "B=8-64 (results/backward-hybrid-h200-2026-11-29.txt)")
        else:
            held = f"{tile.split_steps(l.gates)} k-steps a warp"
            measured = "measured 0.10-0.68 of the grid form's time (results/backward-forms-h100-2026-11-25.txt)"
        return (f"clusters of {tile.cluster} blocks, {tile.units} units a block: W_hh ({w // 1024} KiB) "
                f"in its warps' registers, {held}, dG exchanged inside "
                f"the cluster, no grid barrier; {clusters} cluster{'s' if clusters > 1 else ''} of "
                f"{tile.batch_per_cluster} batch row{'s' if tile.batch_per_cluster > 1 else ''}"
                + (f", in {-(-clusters // at_once)} waves (the GPU holds {at_once} at once)"
                   if clusters > at_once else "")
                + f"; {measured}")
    why = ("the GPU has no thread-block clusters" if not largest_cluster(target) else
           f"W_hh does not fit the registers of a cluster of {largest_cluster(target)}"
           + (" (FMA form: G·H up to 1024, 32 units a block)" if itemsize == 4 else ""))
    G, H = l.gates, l.hidden_size
    shared_max = grid_shared_max(target.shared_memory_per_block_optin)
    grid = backward_tile(G, H, batch, target.sm_count, shared_max) if isinstance(tile, KSplitBackwardTile) else tile
    grid_us = grid_backward_step_seconds(grid, G, H, batch) * 1e6
    fitted = "fitted to results/backward-ksplit-h100-2026-11-27.jsonl"
    if isinstance(tile, KSplitBackwardTile):
        return (f"grid, K split across clusters of {tile.cluster}: {tile.clusters(H)} clusters (all resident, "
                f"one grid barrier a step), {tile.units} units a block, {tile.cluster_units} a cluster; block q keeps "
                f"W_hh's columns of the cluster's units over {tile.k_rows_block(G, H)} rows of K in shared memory and "
                f"reads only those of dG a step (the grid form's blocks read all {G * H}), the partial sums meeting "
                f"over DSMEM; lanes of {tile.lane_rows} rows × {tile.lane_units} units, {tile.rows_per_pass} rows a "
                f"pass, dG staged {tile.k_chunk} rows of K at a time in {tile.stages} buffers. Predicted "
                f"{ksplit_backward_step_seconds(tile, G, H, batch) * 1e6:.1f} µs a step against the grid form's "
                f"{grid_us:.1f} ({fitted}); not in registers: {why}")
    w = tile.w_bytes(G, H)
    ksplit = ksplit_backward_tile(G, H, batch, target.clusters_at_once, shared_max) if itemsize == 4 else None
    return (f"grid: one block an SM, {tile.blocks} blocks of {tile.units} units, {tile.rows} batch "
            f"rows a pass (of the call's B); W_hh's columns "
            + (f"in shared memory ({w // 1024} KiB)" if tile.w_in_shared else
               f"read from L2 every step ({w // 1024} KiB do not fit in shared memory)")
            + f"; not in clusters: {why}"
            + (f"; K split across clusters of {ksplit.cluster} predicted "
               f"{ksplit_backward_step_seconds(ksplit, G, H, batch) * 1e6:.1f} µs a step against {grid_us:.1f} "
               f"({fitted})" if ksplit is not None and tile.w_in_shared else ""))


def plan_backward(model, plan, target):
    o = plan.options
    itemsize = DTYPES[plan.dtype].itemsize

    def none(l, why: str):
        d = Decision("none", why, "forced")
        return replace(l, backward_gates=d, backward_tile=d)

    def decide(l):
        if l.proj_size:
            return none(l, "no CUDA backward for LSTMP (proj_size) yet; on CPU tensors the "
                           "float64 reference's")
        try:
            tile = backward_kernel_tile(l.gates, l.hidden_size, o.batch, itemsize, target.sm_count,
                                        largest_cluster(target), target.shared_memory_per_block_optin,
                                        target.clusters_at_once)
        except ValueError as exc:  # more units a block than the block runs
            return none(l, str(exc))
        costs = gate_costs(l, o.seq_len, o.batch, itemsize, target)
        chosen = {"auto": min(costs, key=costs.get)}.get(o.backward_gates, o.backward_gates or "recompute")
        source = {"auto": "model", None: "forced"}.get(o.backward_gates, "user")
        saving = (f"{saved_gate_bytes(l, o.seq_len, o.batch) / MIB:.1f} MiB held from the forward to the "
                  f"backward, predicted {costs['save'] * 1e6:.0f} µs of the forward's time")
        recomputing = (f"two GEMMs (predicted {costs['recompute'] * 1e6:.0f} µs) into "
                       f"{backward_bytes(l, o.seq_len, o.batch, itemsize) / MIB:.1f} MiB freed after the layer")
        if chosen == "save":
            why = (f"a training forward: each step's epilogue writes the pre-activations it sums anyway "
                   f"(float32, torch's gate order), {saving}, where recomputing them takes {recomputing}; "
                   f"cuDNN's reserve space holds them too")
        elif o.backward_gates is not None:
            why = (f"a training forward whose stores would cost more than they save ({saving}; in clusters "
                   f"on tensor cores a step's stores hold registers its next step's code waits for): the "
                   f"backward recomputes the pre-activations by {recomputing}")
        else:
            why = (f"compiled for inference (backward_gates not set): a backward recomputes the "
                   f"pre-activations from h by {recomputing}. A training forward (backward_gates='auto', "
                   f"rnncc.nn's) saves them where that costs less: {saving}")
        gates = Decision(chosen, why, source, alternatives=costs)
        reason = tile_reason(l, tile, o.batch, itemsize, target)
        return replace(l, backward_gates=gates, backward_tile=Decision(tile, reason))
    return plan.map_layers(decide)
