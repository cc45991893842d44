"""Workspace: device memory the runtime allocates besides the caller's arrays.

Layers run one after another, so one projection buffer, one cell-state buffer and one
buffer for a residual layer's h are shared by all layers (sized for the largest); the
sequences of layers that are not model outputs are kept until the end of the call.
"""

from dataclasses import replace

from ..dtypes import DTYPES
from ..plan import Decision


def shared_parts(plan, seq_len: int, batch: int) -> list[tuple[str, int]]:
    """The parts that layers share, one after another: the projection buffer, the LSTM
    cell state, the step product (h·W_hhᵀ of one step, float32, where cuBLASLt computes it
    for the cell kernel), h of a residual layer (whose output sequence holds h + input) and
    a projection chunk's summed input (merge_fusion "summed"), each sized for the largest."""
    itemsize = DTYPES[plan.dtype].itemsize
    chunk = {l.name: min(l.unroll.value, seq_len) for l in plan.layers}
    proj = max(chunk[l.name] * batch * l.gates * l.hidden_size * 4 for l in plan.layers)
    cell = max([batch * l.hidden_size * 4 for l in plan.layers if l.cell == "lstm"], default=0)
    product = max([batch * l.gates * l.hidden_size * 4 for l in plan.layers
                   if l.persistence.value.math == "cublas"], default=0)
    residual_h = max([seq_len * batch * l.hidden_size * itemsize for l in plan.layers
                      if l.residual], default=0)
    summed = max([chunk[l.name] * batch * l.input_size * itemsize for l in plan.layers
                  if l.merge_fusion.value == "summed"], default=0)
    return [("projection", proj), ("cell_state", cell), ("step_product", product),
            ("residual_h", residual_h), ("summed_input", summed)]


def sequence_parts(plan, seq_len: int, batch: int) -> list[tuple[str, int]]:
    """The sequence of each layer that is not a model output, by its name."""
    itemsize = DTYPES[plan.dtype].itemsize
    return [(l.name, seq_len * batch * l.hidden_size * itemsize) for l in plan.layers if not l.is_output]


def workspace_parts(plan, seq_len: int, batch: int) -> list[tuple[str, int]]:
    """The call's workspace as (part, bytes): the shared parts, then the sequences."""
    return shared_parts(plan, seq_len, batch) + sequence_parts(plan, seq_len, batch)


def workspace_bytes(plan, seq_len: int, batch: int) -> dict[str, int]:
    """The shared parts, and the layers' sequences summed."""
    return {**dict(shared_parts(plan, seq_len, batch)),
            "layer_sequences": sum(n for _, n in sequence_parts(plan, seq_len, batch))}


def plan_workspace(model, plan, target):
    o = plan.options
    parts = workspace_bytes(plan, o.seq_len, o.batch)
    total = sum(parts.values())
    listed = ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in parts.items() if v)
    return replace(plan, workspace=Decision(
        {"bytes": total}, f"at S={o.seq_len}, B={o.batch}: {listed}; shared across layers "
                          "where lifetimes allow"))
