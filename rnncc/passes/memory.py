"""Memory: refuse, before any other pass, a model that cannot fit the target's memory.

What a call needs at the least: the weights (storage dtype, float32 biases), and at the
hinted S and B the model's outputs and final states, the sequences of inner layers and
one step's float32 projection buffer. Anything larger than the target's memory can only
fail later, at an allocation on the GPU, after nvcc has run for nothing.
"""

from __future__ import annotations

from ..dtypes import DTYPES
from ..errors import PlanError


def _size(n: int) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def memory_needed(model, seq_len: int, batch: int) -> dict[str, int]:
    """Bytes of the weights and of the smallest call at (seq_len, batch)."""
    item = DTYPES[model.dtype].itemsize
    weights = sum(l.gates * l.hidden_size * (l.input_size + l.out_size) * item
                  + l.proj_size * l.hidden_size * item
                  + (2 * l.gates * l.hidden_size * 4 if l.bias else 0) for l in model.layers)
    # A residual layer's output (h + input) and, one layer at a time, its h.
    sequences = sum(seq_len * batch * l.out_size * item for l in model.layers) + \
        max([seq_len * batch * l.out_size * item for l in model.layers if l.residual], default=0)
    outputs = sum(seq_len * batch * o.size * item for o in model.outputs)
    states = sum(batch * (l.out_size + (l.hidden_size if l.cell == "lstm" else 0)) * item
                 for l in model.layers)
    projection = max(batch * l.gates * l.hidden_size * 4 for l in model.layers)
    return {"weights": weights, "activations": sequences + outputs + states + projection}


def check_memory(model, target, options) -> None:
    need = memory_needed(model, options.seq_len, options.batch)
    total = sum(need.values())
    if total > target.memory_bytes:
        raise PlanError(
            f"model '{model.name}': needs {_size(total)} (weights {_size(need['weights'])}, "
            f"activations at S={options.seq_len}, B={options.batch} {_size(need['activations'])}) "
            f"but target {target.name} has {_size(target.memory_bytes)} of memory")
