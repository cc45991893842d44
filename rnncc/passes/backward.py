"""Backward: what training a layer on CUDA keeps and runs (``rnncc/backward.py``).

Two decisions per layer, at the plan's S and B:

- ``backward_gates``: whether the forward saves the gates' pre-activations for the
  backward or the backward recomputes them from the h sequence the forward keeps anyway
  (two GEMMs over all steps). Both alternatives are costed (time and the memory held from
  the forward to the backward); the forward kernels write no gates yet, so "recompute" is
  forced and the decision says what saving would change.
- ``backward_tile``: the reverse recurrence's block (``tiles.backward_tile``, the function
  the backward launches with, at the call's B).

A layer the CUDA backward does not cover (LSTMP, or more units a block than a block runs)
gets ``none`` with the reason.
"""

from __future__ import annotations

from dataclasses import replace

from ..dtypes import DTYPES
from ..plan import Decision
from ..tiles import backward_shared_max, backward_tile
from .cost import library_gemm_seconds

MIB = 2**20


def gate_costs(l, seq_len: int, batch: int, itemsize: int, target) -> dict[str, float]:
    """Predicted seconds of each way to have a layer's pre-activations in the backward:
    ``recompute``, its two GEMMs over all S·B rows (x·W_ihᵀ and h_{t−1}·W_hhᵀ, float32
    results); ``save``, the forward's extra write of them (float32) at HBM bandwidth."""
    rows, cols = seq_len * batch, l.gates * l.hidden_size
    precision = l.precision.value
    recompute = library_gemm_seconds(rows, cols, l.input_size, itemsize, precision, target) \
        + library_gemm_seconds(rows, cols, l.hidden_size, itemsize, precision, target)
    return {"recompute": recompute, "save": rows * cols * 4 / target.memory_bandwidth}


def backward_bytes(l, seq_len: int, batch: int, itemsize: int) -> int:
    """Device memory a layer's backward allocates while it runs: the float32
    pre-activations (a GRU's h part apart), dG in the layer's type (over the
    pre-activations for float32), h_{t−1} in its type and an LSTM's float32 c sequence."""
    rows, cols = seq_len * batch, l.gates * l.hidden_size
    pre = rows * cols * 4 * (2 if l.cell == "gru" else 1)
    dg = 0 if itemsize == 4 else rows * cols * itemsize * (2 if l.cell == "gru" else 1)
    return pre + dg + rows * l.hidden_size * (itemsize + (4 if l.cell == "lstm" else 0))


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
            tile = backward_tile(l.gates, l.hidden_size, o.batch, target.sm_count,
                                 backward_shared_max(target.shared_memory_per_block_optin))
        except ValueError as exc:  # more units a block than the block runs
            return none(l, str(exc))
        costs = gate_costs(l, o.seq_len, o.batch, itemsize, target)
        saved = o.seq_len * o.batch * l.gates * l.hidden_size * 4
        gates = Decision("recompute", (
            f"the forward keeps h (its output sequence); the backward recomputes the pre-activations "
            f"by two GEMMs (predicted {costs['recompute'] * 1e6:.0f} µs) into "
            f"{backward_bytes(l, o.seq_len, o.batch, itemsize) / MIB:.1f} MiB it frees after the "
            f"layer. Saving them would hold {saved / MIB:.1f} MiB from the forward to the backward "
            f"for {costs['save'] * 1e6:.0f} µs of writes: the forward kernels write no gates yet"),
            "forced", alternatives=costs)
        w = tile.w_bytes(l.gates, l.hidden_size)
        reason = (f"one block an SM: {tile.blocks} blocks of {tile.units} units, {tile.rows} batch "
                  f"rows a pass (of the call's B); W_hh's columns "
                  + (f"in shared memory ({w // 1024} KiB)" if tile.w_in_shared else
                     f"read from L2 every step ({w // 1024} KiB do not fit in shared memory)"))
        return replace(l, backward_gates=gates, backward_tile=Decision(tile, reason))
    return plan.map_layers(decide)
