"""NumPy float64 backward of any Model: the oracle for gradients (issue 17), by hand.

Given the gradients of a loss with respect to the outputs (and optionally the final
states), ``grad`` runs the forward of ``reference`` with a tape of every step and walks it
back: through each layer in reverse time (back-propagation through time, the cell's
derivatives written out below), each layer's merge (a sum passes its gradient to every
source, a concat a slice of it to each), a residual layer's h + x, a bidirectional
layer's two column halves, dropout masks on a layer's input, and lengths (a row past its length kept its state, so its
gradient passes that step untouched; outputs past a length are padding, zero). It returns
the gradients of the input, of every parameter by its weights key, and of the initial
states. Semantics are torch.nn's, so torch's autograd in float64 must agree to rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from .ir import INPUT, Layer, Merge, Model
from .reference import State, layer_weights, run


@dataclass(frozen=True)
class Gradients:
    """Gradients of a loss: ``input`` [S, B, input_size]; ``weights`` by the weights' keys
    (``l0.weight_ih``, ...); ``state`` by layer name, h0's [B, P] (GRU/RNN) or (h0's, c0's)
    (LSTM), for every layer whether or not it was given an initial state."""

    input: np.ndarray
    weights: dict[str, np.ndarray]
    state: dict[str, np.ndarray | tuple[np.ndarray, np.ndarray]]


def _sigmoid_grad(s: np.ndarray) -> np.ndarray:
    return s * (1.0 - s)


def step_backward(layer: Layer, w: Mapping[str, np.ndarray], saved: Mapping[str, np.ndarray],
                  dh: np.ndarray, dc: np.ndarray, dw: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """One step of ``layer`` backwards: from the gradients of its new h and c (dc is zero
    for cells without c), (dx_t, dh of the step before, dc of the step before), the
    parameters' gradients added into ``dw``."""
    H = layer.hidden_size
    x, h, c = saved["x"], saved["h"], saved["c"]
    if layer.cell == "lstm":
        i, f, g, o, c_new, r = (saved[k] for k in ("i", "f", "g", "o", "c_new", "r"))
        if layer.proj_size:  # h = r W_hrᵀ
            dw["weight_hr"] += dh.T @ r
            dr = dh @ w["weight_hr"]
        else:
            dr = dh
        tanh_c = np.tanh(c_new)
        dc = dc + dr * o * (1.0 - tanh_c ** 2)
        dpre = np.concatenate([dc * g * _sigmoid_grad(i), dc * c * _sigmoid_grad(f),
                               dc * i * (1.0 - g ** 2), dr * tanh_c * _sigmoid_grad(o)], axis=1)
        dgi = dgh = dpre
        dh_prev, dc_prev = np.zeros_like(h), dc * f
    elif layer.cell == "gru":
        r, z, n, gh_n = (saved[k] for k in ("r", "z", "n", "gh_n"))
        dpre_n = dh * (1.0 - z) * (1.0 - n ** 2)
        dpre_r = dpre_n * gh_n * _sigmoid_grad(r)
        dpre_z = dh * (h - n) * _sigmoid_grad(z)
        dgi = np.concatenate([dpre_r, dpre_z, dpre_n], axis=1)
        dgh = np.concatenate([dpre_r, dpre_z, dpre_n * r], axis=1)
        dh_prev, dc_prev = dh * z, dc
    elif layer.cell == "rnn_tanh":
        dgi = dgh = dh * (1.0 - saved["h_new"] ** 2)
        dh_prev, dc_prev = np.zeros_like(h), dc
    else:  # rnn_relu: torch's gradient of relu is 0 at 0
        dgi = dgh = dh * (saved["pre"] > 0.0)
        dh_prev, dc_prev = np.zeros_like(h), dc
    dw["weight_ih"] += dgi.T @ x
    dw["weight_hh"] += dgh.T @ h
    dw["bias_ih"] += dgi.sum(axis=0)
    dw["bias_hh"] += dgh.sum(axis=0)
    return dgi @ w["weight_ih"], dh_prev + dgh @ w["weight_hh"], dc_prev


def layer_backward(layer: Layer, weights: Mapping[str, np.ndarray], tape: Sequence,
                   dy: np.ndarray, dh_n: np.ndarray | None = None, dc_n: np.ndarray | None = None):
    """A layer's backward over its tape (``reference.run_layer``'s, in the order the steps
    ran) from dy [S, B, P] and the final state's gradients: (dx [S, B, I], the parameters'
    gradients by torch's names less the layer prefix, dh0, dc0 or None)."""
    w = layer_weights(layer, weights)
    dw = {k: np.zeros_like(v) for k, v in w.items()}
    S, B, _ = dy.shape
    dh = np.zeros((B, layer.out_size)) if dh_n is None else np.array(dh_n, dtype=np.float64)
    dc = np.zeros((B, layer.hidden_size)) if dc_n is None else np.array(dc_n, dtype=np.float64)
    dx = np.zeros((S, B, layer.input_size))
    for t, saved, running in reversed(tape):
        dh = dh + dy[t]
        # A row past its length kept its state: its gradient passes this step untouched.
        dx_t, dh_step, dc_step = step_backward(layer, w, saved, np.where(running, dh, 0.0),
                                               np.where(running, dc, 0.0), dw)
        dx[t] = dx_t
        dh, dc = np.where(running, dh_step, dh), np.where(running, dc_step, dc)
    if not layer.bias:
        del dw["bias_ih"], dw["bias_hh"]
    return dx, dw, dh, (dc if layer.cell == "lstm" else None)


def _add(grads: dict[str, np.ndarray], name: str, value: np.ndarray) -> None:
    grads[name] = grads[name] + value if name in grads else value


def _merge_backward(m: Merge, sizes: Mapping[str, int], grad: np.ndarray,
                    grads: dict[str, np.ndarray]) -> None:
    """A merge's gradient to its sources: all of it to each of a sum's, its columns to each
    of a concat's."""
    offset = 0
    for source in m.sources:
        if m.mode == "concat":
            _add(grads, source, grad[..., offset:offset + sizes[source]])
            offset += sizes[source]
        else:
            _add(grads, source, grad)


def tensor_sizes(model: Model) -> dict[str, int]:
    """The feature width of every tensor a merge may read: the input and each layer's."""
    sizes = {INPUT: model.input_size}
    for layer in model.layers:
        sizes[layer.tensor_name] = layer.column + layer.out_size
    return sizes


def backpropagate(model: Model, grad_outputs: Sequence, layer_backward: Callable, zeros: Callable,
                  dropout_masks: Mapping | None = None, together: Callable | None = None):
    """The model's backward over its graph, whatever computes a layer's: the outputs'
    gradients go to their sources through the merges, then each layer from the last,
    ``layer_backward(layer, dy)`` → (dx, its parameters' gradients by torch's names less the
    layer prefix, dh0, dc0 or None), its dx through a residual's h + x, the dropout mask and
    its input merge. ``together(layers, dys)``: the results of the layers that fill one
    tensor (a bidirectional layer's two halves, which read nothing of each other's), in
    their order, where they can run side by side; else each runs by ``layer_backward``.
    ``zeros(width)``: a zero gradient [S, B, width] for a tensor nothing read. Arrays are
    NumPy's here and PyTorch's on the GPU (``rnncc.backward``): only slicing, + and * are
    used. Returns (the input's gradient, the weights' by key, the initial states' by
    layer)."""
    sizes = tensor_sizes(model)
    grads: dict = {}
    for output, g in zip(model.outputs, grad_outputs):
        if g is not None:  # None: nothing read the output (autograd's unmaterialised zero)
            _merge_backward(output.merge, sizes, g, grads)
    weight_grads: dict = {}
    state_grads: dict = {}
    for group in tensor_groups(tuple(reversed(model.layers))):
        g_tensor = grads.get(group[0].tensor_name)
        if g_tensor is None:
            g_tensor = zeros(sizes[group[0].tensor_name])
        g_outs = [g_tensor[..., l.column:l.column + l.out_size] for l in group]
        if together is not None and len(group) > 1:
            results = together(group, g_outs)
        else:
            results = [layer_backward(l, g) for l, g in zip(group, g_outs)]
        for layer, g_out, (dx, dw, dh0, dc0) in zip(group, g_outs, results):
            if layer.residual:  # out = h + x
                dx = dx + g_out
            if dropout_masks and layer.name in dropout_masks:  # x = merged input × mask
                dx = dx * dropout_masks[layer.name]
            _merge_backward(layer.input, sizes, dx, grads)
            weight_grads |= {f"{layer.name}.{k}": v for k, v in dw.items()}
            state_grads[layer.name] = (dh0, dc0) if layer.cell == "lstm" else dh0
    d_input = grads.get(INPUT)
    return (zeros(model.input_size) if d_input is None else d_input), weight_grads, state_grads


def tensor_groups(layers: Sequence[Layer]) -> list[tuple[Layer, ...]]:
    """``layers`` in runs of neighbours that fill one tensor (a bidirectional layer's
    halves): none reads another's tensor, and every reader of it comes after the run."""
    groups: list[tuple[Layer, ...]] = []
    for layer in layers:
        if groups and groups[-1][0].tensor_name == layer.tensor_name:
            groups[-1] += (layer,)
        else:
            groups.append((layer,))
    return groups


def grad(model: Model, weights: Mapping[str, np.ndarray], x: np.ndarray,
         grad_outputs: Sequence[np.ndarray], state: State | None = None,
         lengths: np.ndarray | None = None, grad_final: State | None = None,
         dropout_masks: Mapping[str, np.ndarray] | None = None) -> Gradients:
    """Gradients of a loss whose gradients with respect to ``model``'s outputs (in model
    order, each [S, B, size]) are ``grad_outputs`` and, optionally, with respect to the
    final states (``grad_final``, of ``reference.run``'s final-state form), at the input
    x [S, B, input_size], the initial ``state``, ``lengths`` and ``dropout_masks`` of
    ``reference.run``."""
    record: dict = {}
    outputs, _ = run(model, weights, x, state, lengths, record, dropout_masks)
    if len(grad_outputs) != len(outputs):
        raise ValueError(f"reference_grad: got {len(grad_outputs)} output gradients, expected "
                         f"{len(outputs)} (the model's outputs: {[o.name for o in model.outputs]})")
    past = None if lengths is None else \
        np.arange(x.shape[0])[:, None, None] >= np.asarray(lengths)[None, :, None]
    grad_outputs = [np.asarray(g, dtype=np.float64) for g in grad_outputs]
    if past is not None:  # outputs past a row's length are padding
        grad_outputs = [np.where(past, 0.0, g) for g in grad_outputs]
    grad_final = grad_final or {}

    def backward_of(layer: Layer, dy: np.ndarray):
        final = grad_final.get(layer.name)
        dh_n, dc_n = (final if layer.cell == "lstm" else (final, None)) if final is not None else (None, None)
        return layer_backward(layer, weights, record[layer.name][1], dy, dh_n, dc_n)

    d_input, weight_grads, state_grads = backpropagate(
        model, grad_outputs, backward_of, lambda width: np.zeros((x.shape[0], x.shape[1], width)),
        dropout_masks)
    return Gradients(d_input, weight_grads, state_grads)
