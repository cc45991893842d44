"""NumPy float64 executor of any Model: the oracle every kernel is checked against. ``step``
is the one place a cell's forward is written; ``run_layer``'s tape and ``run``'s record keep
what its backward (``reference_grad``) reads.

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


def layer_weights(layer: Layer, weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A layer's parameters in float64, by torch's names less the layer prefix; zero
    biases where the layer has none."""
    w = {k: np.asarray(weights[f"{layer.name}.{k}"], dtype=np.float64)
         for k in ("weight_ih", "weight_hh") + (("weight_hr",) if layer.proj_size else ())}
    for k in ("bias_ih", "bias_hh"):
        w[k] = (np.asarray(weights[f"{layer.name}.{k}"], np.float64) if layer.bias
                else np.zeros(layer.gates * layer.hidden_size))
    return w


def step(layer: Layer, w: Mapping[str, np.ndarray], x_t: np.ndarray, h: np.ndarray,
         c: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """One step of ``layer`` from (h, c) on x_t [B, I]: (h', c', the step's values that the
    backward reads: its operands, the gates after their activations, and for LSTMP r)."""
    H = layer.hidden_size
    gi = x_t @ w["weight_ih"].T + w["bias_ih"]
    gh = h @ w["weight_hh"].T + w["bias_hh"]
    saved = {"x": x_t, "h": h, "c": c}
    if layer.cell == "lstm":
        pre = gi + gh
        i, f, o = (_sigmoid(pre[:, k * H:(k + 1) * H]) for k in (0, 1, 3))
        g = np.tanh(pre[:, 2 * H:3 * H])
        c = f * c + i * g
        r = o * np.tanh(c)
        h = r @ w["weight_hr"].T if layer.proj_size else r
        saved |= {"i": i, "f": f, "g": g, "o": o, "c_new": c, "r": r}
    elif layer.cell == "gru":
        r = _sigmoid(gi[:, :H] + gh[:, :H])
        z = _sigmoid(gi[:, H:2 * H] + gh[:, H:2 * H])
        n = np.tanh(gi[:, 2 * H:] + r * gh[:, 2 * H:])
        saved |= {"r": r, "z": z, "n": n, "gh_n": gh[:, 2 * H:]}
        h = (1.0 - z) * n + z * h
    elif layer.cell == "rnn_tanh":
        h = np.tanh(gi + gh)
        saved["h_new"] = h
    else:  # rnn_relu
        pre = gi + gh
        h = np.maximum(pre, 0.0)
        saved["pre"] = pre
    return h, c, saved


def run_layer(layer: Layer, weights: Mapping[str, np.ndarray], x: np.ndarray,
              h0: np.ndarray | None = None, c0: np.ndarray | None = None,
              lengths: np.ndarray | None = None, tape: list | None = None):
    """One layer over a whole sequence x [S, B, I]. Returns (y [S, B, P], h_n, c_n), P being
    h's width (layer.out_size; c_n is [B, H]). With
    ``lengths`` [B], a row keeps its h and c at the steps t ≥ lengths[b] (y holds that
    kept h there). ``tape``: a list that gets (t, the step's saved values, the rows running)
    for each step in the order they run (reference_grad's backward reads it)."""
    S, B, _ = x.shape
    H, P = layer.hidden_size, layer.out_size
    w = layer_weights(layer, weights)
    h = np.zeros((B, P)) if h0 is None else np.asarray(h0, dtype=np.float64)
    c = np.zeros((B, H)) if c0 is None else np.asarray(c0, dtype=np.float64)
    y = np.empty((S, B, P))
    ends = None if lengths is None else np.asarray(lengths)
    everyone = np.ones((B, 1), bool)  # the rows running at a step without lengths
    for t in (reversed(range(S)) if layer.reverse else range(S)):
        h_new, c_new, saved = step(layer, w, x[t], h, c)
        running = everyone if ends is None else (t < ends)[:, None]
        if tape is not None:
            tape.append((t, saved, running))
        if ends is None:
            h, c = h_new, c_new
        else:
            h, c = np.where(running, h_new, h), np.where(running, c_new, c)
        y[t] = h
    return y, h, (c if layer.cell == "lstm" else None)


def run(model: Model, weights: Mapping[str, np.ndarray], x: np.ndarray,
        state: State | None = None,
        lengths: np.ndarray | None = None,
        record: dict | None = None,
        dropout_masks: Mapping[str, np.ndarray] | None = None) -> tuple[tuple[np.ndarray, ...], dict]:
    """Run ``model`` on x [S, B, input_size] in float64.

    ``state`` maps a layer name to its initial h [B, H] (GRU/RNN) or (h, c) (LSTM; h
    [B, proj_size] with a projection);
    missing layers start from zeros. ``lengths`` [B] (0 ≤ each ≤ S): each row's steps.
    ``record``: a dict that gets, by layer name, (the layer's merged input, its tape).
    ``dropout_masks``: by layer name, a mask [S, B, its input size] that multiplies the
    layer's merged input (torch's dropout between layers: 0 or 1/(1 − p) each element).
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
        if dropout_masks and layer.name in dropout_masks:
            x_layer = x_layer * dropout_masks[layer.name]
        tape = [] if record is not None else None
        y, h, c = run_layer(layer, weights, x_layer, h0, c0, lengths, tape)
        if record is not None:
            record[layer.name] = (x_layer, tape)
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
