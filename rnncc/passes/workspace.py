"""Workspace: device memory the runtime allocates besides the caller's arrays.

Where layers run one after another (schedule sequential), one projection buffer, one
cell-state buffer and one buffer for a residual layer's h are shared by all layers
(sized for the largest); where they run at once (pipelined), each layer has its own,
named ``<part>:<layer>``, with two projection chunks where its projections run ahead. The
sequences of layers that are not model outputs are kept until the end of the call.
"""

from dataclasses import replace

from ..dtypes import DTYPES
from ..plan import Decision


# cuBLASLt's scratch (split-K partials), which a call gives its layers' GEMMs in its workspace
# block: one part for every layer that calls the library where layers run one after another,
# one a layer where they run at once (two GEMMs on two streams must not share it; a chunk's
# GEMMs are small). The runtime lays it out (library_scratch_parts) and cublaslt.py reads it.
LIBRARY_SCRATCH_BYTES = 32 << 20
LAYER_LIBRARY_SCRATCH_BYTES = 4 << 20

PARTS = ("projection", "cell_state", "step_product", "residual_h", "summed_input", "cell_output",
         "tensor_maps", "library_h", "padded_input")

TENSOR_MAP_BYTES = 128  # a CUtensorMap


def projection_chunk_bytes(l, seq_len: int, batch: int) -> int:
    """Bytes of one chunk of layer l's projections (float32 pre-activations of its unroll's
    steps, at most the sequence); a layer whose projections run ahead has two of them."""
    return min(l.unroll.value, seq_len) * batch * l.gates * l.hidden_size * 4


def layer_parts(l, seq_len: int, batch: int, itemsize: int) -> dict[str, int]:
    """Bytes layer l needs of each part: the projection buffer, the LSTM cell state, the
    step product (h·W_hhᵀ of one step, float32, where cuBLASLt computes it for the cell
    kernel), h of a residual layer (whose output sequence holds h + input), a
    projection chunk's summed input (merge_fusion "summed") and a projected LSTM's r = o ⊙
    tanh c (storage dtype, as torch rounds it before h = r·W_hrᵀ): of one step per step,
    of every step folded (the recurrence's own sequence, read back a step later); the map of
    y each block of a staged kernel that copies by tensor maps makes (lane_product.cuh.j2);
    the padded h of a library step whose sizes are padded (LayerPlan.library_padding; its
    W_hhᵀ is among the weights); a chunk's input padded for cuBLASLt's projection
    (LayerPlan.projection_padded_k; a summed input is written padded in its own part)."""
    chunk = min(l.unroll.value, seq_len)
    persistence = l.persistence.value
    padding = l.library_padding(itemsize)
    return {"projection": projection_chunk_bytes(l, seq_len, batch),
            "cell_state": batch * l.hidden_size * 4 if l.cell == "lstm" else 0,
            "step_product": batch * l.library_product_columns(itemsize) * 4 if persistence.math == "cublas" else 0,
            "residual_h": seq_len * batch * l.hidden_size * itemsize if l.residual else 0,
            "summed_input": chunk * batch * (l.projection_padded_k or l.input_size) * itemsize
            if l.merge_fusion.value == "summed" else 0,
            "cell_output": (seq_len if l.folded else 1) * batch * l.hidden_size * itemsize
            if l.proj_size else 0,
            "tensor_maps": TENSOR_MAP_BYTES * persistence.blocks if getattr(persistence, "tensor_maps", False) else 0,
            "library_h": batch * padding[0] * itemsize if padding else 0,
            "padded_input": chunk * batch * l.projection_padded_k * itemsize
            if l.merge_fusion.value != "summed" else 0}


def pipelined(plan) -> bool:
    return plan.schedule is not None and plan.schedule.value.pipelined


def part_name(plan, part: str, layer: str) -> str:
    """The workspace part that layer ``layer`` uses as ``part``."""
    return f"{part}:{layer}" if pipelined(plan) else part


def shared_parts(plan, seq_len: int, batch: int) -> list[tuple[str, int]]:
    """The parts of PARTS: one of each, sized for the largest layer, where layers run one
    after another; one per layer that needs it where they run at once, two projection
    chunks where a layer's projections run ahead of its recurrence (Stage.projection_stream)."""
    itemsize = DTYPES[plan.dtype].itemsize
    needs = {l.name: layer_parts(l, seq_len, batch, itemsize) for l in plan.layers}
    if pipelined(plan):
        for stage in plan.schedule.value.stages:
            if stage.projection_stream is not None:
                needs[stage.layer]["projection"] *= 2
        return [(part_name(plan, part, name), n[part]) for part in PARTS
                for name, n in needs.items() if n[part]]
    return [(part, max(n[part] for n in needs.values())) for part in PARTS]


def sequence_parts(plan, seq_len: int, batch: int) -> list[tuple[str, int]]:
    """The sequence of each layer that is not a model output, by its tensor's name (a
    bidirectional layer's two halves fill one, [S, B, 2H])."""
    itemsize = DTYPES[plan.dtype].itemsize
    return [(l.tensor_name, seq_len * batch * l.tensor_width * itemsize) for l in plan.layers
            if not l.is_output and l.column == 0]


def workspace_parts(plan, seq_len: int, batch: int) -> list[tuple[str, int]]:
    """The call's workspace as (part, bytes): the shared parts, then the sequences."""
    return shared_parts(plan, seq_len, batch) + sequence_parts(plan, seq_len, batch)


def workspace_bytes(plan, seq_len: int, batch: int) -> dict[str, int]:
    """The parts (per part, over layers), and the layers' sequences summed."""
    parts: dict[str, int] = {}
    for name, n in shared_parts(plan, seq_len, batch):
        part = name.split(":")[0]  # a layer's own "<part>:<layer>" counts under its part
        parts[part] = parts.get(part, 0) + n
    return {**parts,
            "layer_sequences": sum(n for _, n in sequence_parts(plan, seq_len, batch))}


def io_bytes(plan, seq_len: int, batch: int) -> int:
    """The bytes of a call's input, output sequences and final states."""
    itemsize = DTYPES[plan.dtype].itemsize
    outputs = sum(seq_len * batch * l.tensor_width * itemsize for l in plan.layers if l.is_output and l.column == 0)
    states = sum(batch * (l.out_size + (l.hidden_size if l.cell == "lstm" else 0)) * itemsize for l in plan.layers)
    x = seq_len * batch * plan.layers[0].input_size * itemsize if plan.layers else 0
    return outputs + states + x


def projection_uses_library(l) -> bool:
    """Whether layer l's input projection is a cuBLASLt GEMM."""
    return l.projection_tile.value.math == "cublas"


def uses_library(l) -> bool:
    """Whether layer l runs a GEMM in cuBLASLt: its projection, its step's product, or a
    folded LSTMP's h."""
    return projection_uses_library(l) or l.persistence.value.math == "cublas" or l.folded


def library_scratch_bytes(plan) -> int:
    """The bytes of one part of cuBLASLt's scratch in ``plan``'s calls."""
    return LAYER_LIBRARY_SCRATCH_BYTES if pipelined(plan) else LIBRARY_SCRATCH_BYTES


def library_scratch_parts(plan) -> list[tuple[str, int]]:
    """cuBLASLt's scratch as workspace parts (LIBRARY_SCRATCH_BYTES)."""
    return [(name, library_scratch_bytes(plan)) for name in dict.fromkeys(
        part_name(plan, "library", l.name) for l in plan.layers if uses_library(l))]


def call_bytes(plan, seq_len: int, batch: int) -> int:
    """The bytes a call takes and makes besides its weights: the workspace with cuBLASLt's
    scratch, the input and the output sequences and final states (what a CUDA graph
    replaying it keeps)."""
    return (sum(workspace_bytes(plan, seq_len, batch).values()) + sum(n for _, n in library_scratch_parts(plan))
            + io_bytes(plan, seq_len, batch))


def call_bytes_before_persistence(plan, seq_len: int, batch: int, library: bool) -> int:
    """call_bytes as far as it is known before the persistence pass, for layers run one
    after another: the input, outputs, states, the layers' sequences, the largest projection
    chunk, and cuBLASLt's scratch where a projection is the library's or ``library`` says a
    layer's steps will be. Left out are the parts that persistence and the passes after it
    size (layer_parts' step product, summed and padded input, tensor maps, padded h: at most
    a chunk's input and a step's gates)."""
    chunk = max((projection_chunk_bytes(l, seq_len, batch) for l in plan.layers), default=0)
    library = library or any(map(projection_uses_library, plan.layers))
    return (io_bytes(plan, seq_len, batch) + chunk + sum(n for _, n in sequence_parts(plan, seq_len, batch))
            + library * library_scratch_bytes(plan))


def plan_workspace(model, plan, target):
    o = plan.options
    parts = workspace_bytes(plan, o.seq_len, o.batch)
    total = sum(parts.values())
    listed = ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in parts.items() if v)
    return replace(plan, workspace=Decision(
        {"bytes": total}, f"at S={o.seq_len}, B={o.batch}: {listed}; "
        + ("a layer's own where layers run at once" if pipelined(plan)
           else "shared across layers where lifetimes allow")))
