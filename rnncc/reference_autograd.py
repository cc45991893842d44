"""The CPU path's forward and backward as one ``torch.autograd.Function``: the float64
reference executor forward (``reference.run``), its hand-written backward
(``reference_grad.grad``) when autograd asks. Slow (NumPy, float64), for development and
as what the twins' gradients on the CPU are; on CUDA the backward is rnncc.backward's.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import torch

from . import reference, reference_grad
from .ir import Model


def numpy64(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float64).numpy()


class ReferenceFunction(torch.autograd.Function):
    """apply(model, weight names, states given as ((layer, is LSTM), ...), lengths or None,
    dropout masks by layer name or None, x [S, B, I], *weights in that order, *initial states
    in that order (h, then c for an LSTM)) → (each output [S, B, *], then each layer's h_n,
    and c_n for an LSTM, in model order), all in x's dtype."""

    @staticmethod
    def forward(ctx, model: Model, names: Sequence[str], states: Sequence[tuple[str, bool]],
                lengths: np.ndarray | None, masks: Mapping[str, np.ndarray] | None,
                x: torch.Tensor, *tensors: torch.Tensor):
        weights = {n: numpy64(t) for n, t in zip(names, tensors)}
        given = iter(numpy64(t) for t in tensors[len(names):])
        state = {layer: (next(given), next(given)) if lstm else next(given) for layer, lstm in states}
        xs = numpy64(x)
        outputs, final = reference.run(model, weights, xs, state, lengths, dropout_masks=masks)
        ctx.inputs = (model, names, states, lengths, masks, weights, xs, state)
        ctx.dtypes = [x.dtype] + [t.dtype for t in tensors]
        flat = list(outputs)
        for layer in model.layers:
            flat += list(final[layer.name]) if layer.cell == "lstm" else [final[layer.name]]
        return tuple(torch.from_numpy(np.ascontiguousarray(a)).to(x.dtype) for a in flat)

    @staticmethod
    def backward(ctx, *grads: torch.Tensor):
        model, names, states, lengths, masks, weights, xs, state = ctx.inputs
        given = iter(numpy64(g) for g in grads)
        grad_outputs = [next(given) for _ in model.outputs]
        grad_final = {layer.name: (next(given), next(given)) if layer.cell == "lstm" else next(given)
                      for layer in model.layers}
        g = reference_grad.grad(model, weights, xs, grad_outputs, state, lengths, grad_final, masks)
        flat = [g.input] + [g.weights[n] for n in names]
        for layer, lstm in states:
            flat += list(g.state[layer]) if lstm else [g.state[layer]]
        out = [torch.from_numpy(np.ascontiguousarray(a)).to(dtype) for a, dtype in zip(flat, ctx.dtypes)]
        return (None, None, None, None, None, *out)
