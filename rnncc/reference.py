"""NumPy float64 executor of any Model: the oracle every kernel is checked against.

Semantics are exactly PyTorch's (torch.nn.LSTM / GRU / RNN), written once here:
  LSTM  gates (i, f, g, o) = x W_ihᵀ + b_ih + h W_hhᵀ + b_hh
        c' = σ(f) c + σ(i) tanh(g);  h' = σ(o) tanh(c')
  GRU   r = σ(x W_irᵀ + b_ir + h W_hrᵀ + b_hr);  z = σ(... z rows ...)
        n = tanh(x W_inᵀ + b_in + r ⊙ (h W_hnᵀ + b_hn));  h' = (1 − z) n + z h
  RNN   h' = tanh or relu(x W_ihᵀ + b_ih + h W_hhᵀ + b_hh)
An LSTM with proj_size (LSTMP) outputs h' = (σ(o) tanh(c')) W_hrᵀ, proj_size wide.
A residual layer's output is h + x (its final state is h's). A reverse layer runs its
steps from S−1 down to 0; a bidirectional layer's two halves fill its tensor's columns.
With ``lengths`` (sequences of different lengths, torch's PackedSequence): row b runs
steps 0 … lengths[b]−1 (a reverse layer lengths[b]−1 … 0), its final state is that of
its last step, and outputs past its length are zero. Inside the model a row past its
length keeps its state (the kernels' rule, which this reference shares).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from .ir import INPUT, Layer, Merge, Model

State = Mapping[str, "np.ndarray | tuple[np.ndarray, np.ndarray]"]


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


def merge(m: Merge, tensors: Mapping[str, np.ndarray]) -> np.ndarray:
    parts = [tensors[s] for s in m.sources]
    if m.mode == "concat":
        return np.concatenate(parts, axis=-1)
    out = parts[0]
    for p in parts[1:]:
        out = out + p
    return out


def run_layer(layer: Layer, weights: Mapping[str, np.ndarray], x: np.ndarray,
              h0: np.ndarray | None = None, c0: np.ndarray | None = None,
              lengths: np.ndarray | None = None):
    """One layer over a whole sequence x [S, B, I]. Returns (y [S, B, P], h_n, c_n), P being
    h's width (layer.out_size; c_n is [B, H]). With
    ``lengths`` [B], a row keeps its h and c at the steps t ≥ lengths[b] (y holds that
    kept h there)."""
    S, B, _ = x.shape
    H, P = layer.hidden_size, layer.out_size
    w = {k: np.asarray(weights[f"{layer.name}.{k}"], dtype=np.float64)
         for k in ("weight_ih", "weight_hh") + (("weight_hr",) if layer.proj_size else ())}
    zeros = np.zeros(layer.gates * H)
    b_ih = np.asarray(weights[f"{layer.name}.bias_ih"], np.float64) if layer.bias else zeros
    b_hh = np.asarray(weights[f"{layer.name}.bias_hh"], np.float64) if layer.bias else zeros
    h = np.zeros((B, P)) if h0 is None else np.asarray(h0, dtype=np.float64)
    c = np.zeros((B, H)) if c0 is None else np.asarray(c0, dtype=np.float64)
    y = np.empty((S, B, P))
    for t in (reversed(range(S)) if layer.reverse else range(S)):
        h_was, c_was = h, c
        gi = x[t] @ w["weight_ih"].T + b_ih
        gh = h @ w["weight_hh"].T + b_hh
        if layer.cell == "lstm":
            pre = gi + gh
            i, f, g, o = (pre[:, k * H:(k + 1) * H] for k in range(4))
            c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
            h = _sigmoid(o) * np.tanh(c)
            if layer.proj_size:
                h = h @ w["weight_hr"].T
        elif layer.cell == "gru":
            r = _sigmoid(gi[:, :H] + gh[:, :H])
            z = _sigmoid(gi[:, H:2 * H] + gh[:, H:2 * H])
            n = np.tanh(gi[:, 2 * H:] + r * gh[:, 2 * H:])
            h = (1.0 - z) * n + z * h
        elif layer.cell == "rnn_tanh":
            h = np.tanh(gi + gh)
        else:  # rnn_relu
            h = np.maximum(gi + gh, 0.0)
        if lengths is not None:
            running = (t < np.asarray(lengths))[:, None]
            h, c = np.where(running, h, h_was), np.where(running, c, c_was)
        y[t] = h
    return y, h, (c if layer.cell == "lstm" else None)


def run(model: Model, weights: Mapping[str, np.ndarray], x: np.ndarray,
        state: State | None = None,
        lengths: np.ndarray | None = None) -> tuple[tuple[np.ndarray, ...], dict]:
    """Run ``model`` on x [S, B, input_size] in float64.

    ``state`` maps a layer name to its initial h [B, H] (GRU/RNN) or (h, c) (LSTM; h
    [B, proj_size] with a projection);
    missing layers start from zeros. ``lengths`` [B] (0 ≤ each ≤ S): each row's steps.
    Returns (outputs in model order, final state dict of the same form).
    """
    state = state or {}
    tensors: dict[str, np.ndarray] = {INPUT: np.asarray(x, dtype=np.float64)}
    final: dict[str, object] = {}
    for layer in model.layers:
        h0 = c0 = None
        if layer.name in state:
            if layer.cell == "lstm":
                h0, c0 = state[layer.name]
            else:
                h0 = state[layer.name]
        x_layer = merge(layer.input, tensors)
        y, h, c = run_layer(layer, weights, x_layer, h0, c0, lengths)
        out = y + x_layer if layer.residual else y
        # A bidirectional layer's backward half (column H) follows its forward half.
        tensors[layer.tensor_name] = np.concatenate([tensors[layer.tensor_name], out], -1) \
            if layer.column else out
        final[layer.name] = (h, c) if layer.cell == "lstm" else h
    outputs = tuple(merge(o.merge, tensors) for o in model.outputs)
    if lengths is not None:  # torch's padding: zero past each row's length
        past = np.arange(x.shape[0])[:, None] >= np.asarray(lengths)[None, :]
        outputs = tuple(np.where(past[:, :, None], 0.0, o) for o in outputs)
    return outputs, final
