"""The float64 backward (rnncc.reference_grad) against torch's autograd in float64 on the
CPU: every cell, stacks, bidirectional and projected layers, initial and final states,
lengths, sum/concat skips and residual layers composed by hand (issue 17, item 2)."""

from __future__ import annotations

import numpy as np
import pytest

import rnncc
from conftest import residual_lstm_stack, skip_connections_by_hand
from rnncc import reference_grad

torch = pytest.importorskip("torch")

RTOL, ATOL = 1e-9, 1e-11


def close(got, want) -> None:
    np.testing.assert_allclose(got, want.detach().numpy() if hasattr(want, "detach") else want,
                               rtol=RTOL, atol=ATOL)


def module(cell, I, H, **kw):
    if cell == "lstm":
        return torch.nn.LSTM(I, H, **kw)
    if cell == "gru":
        return torch.nn.GRU(I, H, **kw)
    return torch.nn.RNN(I, H, nonlinearity=cell.removeprefix("rnn_"), **kw)


def float64_weights(model, mod) -> dict[str, np.ndarray]:
    """The float64 module's parameters under rnncc's keys (from_torch's names)."""
    params = dict(mod.named_parameters())
    return {f"{l.name}.{k}": params[f"{k}_{l.name}"].detach().numpy()
            for l in model.layers for k in rnncc.weights.shapes(l)}


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn_tanh", "rnn_relu"])
@pytest.mark.parametrize("layers,bias,bidirectional,proj", [(1, True, False, 0), (3, True, False, 0),
                                                            (2, False, True, 0), (2, True, True, 5)])
def test_grad_matches_torch_autograd(cell, layers, bias, bidirectional, proj):
    if proj and cell != "lstm":
        pytest.skip("proj_size is LSTM's")
    torch.manual_seed(layers + 2 * bidirectional + proj)
    S, B, I, H = 6, 3, 4, 7
    kw = {"num_layers": layers, "bias": bias, "bidirectional": bidirectional} | ({"proj_size": proj} if proj else {})
    mod = module(cell, I, H, **kw).double()
    model, _ = rnncc.from_torch(module(cell, I, H, **kw))
    weights = float64_weights(model, mod)
    dirs, P = 1 + bidirectional, proj or H
    x = torch.randn(S, B, I, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(layers * dirs, B, P, dtype=torch.float64, requires_grad=True)
    c0 = torch.randn(layers * dirs, B, H, dtype=torch.float64, requires_grad=True)
    out, final = mod(x, (h0, c0) if cell == "lstm" else h0)
    g_out = torch.randn_like(out)
    g_h = torch.randn(layers * dirs, B, P, dtype=torch.float64)
    g_c = torch.randn(layers * dirs, B, H, dtype=torch.float64)
    loss = (out * g_out).sum() + ((final[0] * g_h).sum() + (final[1] * g_c).sum() if cell == "lstm"
                                  else (final * g_h).sum())
    loss.backward()

    def per_layer(h, c):  # torch's [layers·dirs, ...] state as rnncc's by layer name
        index = {l.name: i for i, l in enumerate(model.layers)}
        return {name: (h[i].detach().numpy(), c[i].detach().numpy()) if cell == "lstm" else h[i].detach().numpy()
                for name, i in index.items()}
    got = reference_grad.grad(model, weights, x.detach().numpy(), [g_out.numpy()],
                              per_layer(h0, c0), grad_final=per_layer(g_h, g_c))
    close(got.input, x.grad)
    params = dict(mod.named_parameters())
    assert set(got.weights) == set(weights)
    for key, value in got.weights.items():
        layer, name = key.split(".")
        close(value, params[f"{name}_{layer}"].grad)
    for i, l in enumerate(model.layers):
        if cell == "lstm":
            close(got.state[l.name][0], h0.grad[i])
            close(got.state[l.name][1], c0.grad[i])
        else:
            close(got.state[l.name], h0.grad[i])


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_grad_with_lengths_matches_torch_packed(cell):
    """Rows of different lengths (torch's PackedSequence, unsorted): outputs past a row's
    length are padding, its final state is its last step's."""
    torch.manual_seed(5)
    S, B, I, H = 7, 4, 3, 5
    mod = module(cell, I, H, num_layers=2, bidirectional=True).double()
    model, _ = rnncc.from_torch(module(cell, I, H, num_layers=2, bidirectional=True))
    weights = float64_weights(model, mod)
    lengths = np.array([7, 2, 5, 1])
    x = torch.randn(S, B, I, dtype=torch.float64, requires_grad=True)
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, torch.as_tensor(lengths), enforce_sorted=False)
    out, final = mod(packed)
    out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, total_length=S)
    g_out = torch.randn_like(out)
    h_n = final[0] if cell == "lstm" else final
    g_h = torch.randn_like(h_n)
    ((out * g_out).sum() + (h_n * g_h).sum()).backward()
    grad_final = {l.name: (g_h[i].numpy(), np.zeros((B, H))) if cell == "lstm" else g_h[i].numpy()
                  for i, l in enumerate(model.layers)}
    got = reference_grad.grad(model, weights, x.detach().numpy(), [g_out.numpy()], lengths=lengths,
                              grad_final=grad_final)
    close(got.input, x.grad)
    params = dict(mod.named_parameters())
    for key, value in got.weights.items():
        layer, name = key.split(".")
        close(value, params[f"{name}_{layer}"].grad)


def test_grad_through_skips_composed_by_hand():
    """A sum of a layer with itself, a concat with the input, two outputs (one a sum of
    three layers), as torch.nn calls composed by hand."""
    torch.manual_seed(1)
    modules, model, weights = skip_connections_by_hand()
    a, b, c = modules.values()
    x = torch.randn(5, 3, 6, dtype=torch.float64, requires_grad=True)
    ya, _ = a(x)
    yb, _ = b(ya + ya)
    yc, _ = c(torch.cat([yb, x], dim=-1))
    g1, g2 = torch.randn_like(yc), torch.randn_like(yc)
    ((yc * g1).sum() + ((ya + yb + yc) * g2).sum()).backward()
    got = reference_grad.grad(model, weights, x.detach().numpy(), [g1.numpy(), g2.numpy()])
    close(got.input, x.grad)
    for n, m in (("a", a), ("b", b), ("c", c)):
        for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            close(got.weights[f"{n}.{k}"], getattr(m, f"{k}_l0").grad)


def test_grad_of_residual_layers_matches_a_torch_loop_with_residual_adds():
    """GNMT's form: h + input from the third layer on, as a loop of nn.LSTM calls."""
    torch.manual_seed(2)
    H = 6
    mods, model, weights = residual_lstm_stack(H, 4)
    x = torch.randn(5, 2, H, dtype=torch.float64, requires_grad=True)
    out = x
    for i, m in enumerate(mods):
        h, _ = m(out)
        out = h + out if i >= 2 else h
    g = torch.randn_like(out)
    (out * g).sum().backward()
    got = reference_grad.grad(model, weights, x.detach().numpy(), [g.numpy()])
    close(got.input, x.grad)
    for i, m in enumerate(mods):
        for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            close(got.weights[f"l{i}.{k}"], getattr(m, f"{k}_l0").grad)


def test_grad_refuses_a_wrong_number_of_output_gradients():
    model = rnncc.load({"name": "one", "input_size": 3, "layers": [{"name": "l0", "cell": "gru", "hidden_size": 4}]})
    weights = rnncc.weights.init(model, seed=0)
    with pytest.raises(ValueError, match="got 2 output gradients, expected 1"):
        reference_grad.grad(model, weights, np.zeros((2, 1, 3)), [np.zeros((2, 1, 4))] * 2)


def test_a_bidirectional_layers_halves_backpropagate_together():
    """backpropagate hands the two halves of each bidirectional layer to ``together`` at
    once (rnncc.backward runs them on two streams), and the gradients equal those of one
    half after the other; a plain stack's layers come one at a time."""
    model, _ = rnncc.from_torch(torch.nn.GRU(4, 5, num_layers=2, bidirectional=True))
    weights = rnncc.weights.init(model, seed=3)
    rng = np.random.default_rng(4)
    x, g = rng.standard_normal((6, 3, 4)), rng.standard_normal((6, 3, 10))
    record: dict = {}
    rnncc.reference.run(model, weights, x, record=record)

    def backward_of(layer, dy):
        return reference_grad.layer_backward(layer, weights, record[layer.name][1], dy)
    zeros = lambda width: np.zeros((6, 3, width))  # noqa: E731
    groups = []

    def together(layers, dys):
        groups.append(tuple(l.name for l in layers))
        return [backward_of(l, dy) for l, dy in zip(layers, dys)]
    want = reference_grad.backpropagate(model, [g], backward_of, zeros)
    got = reference_grad.backpropagate(model, [g], backward_of, zeros, together=together)
    assert groups == [("l1_reverse", "l1"), ("l0_reverse", "l0")]
    np.testing.assert_array_equal(got[0], want[0])
    assert got[1].keys() == want[1].keys()
    for k in want[1]:
        np.testing.assert_array_equal(got[1][k], want[1][k])
    stack, _ = rnncc.from_torch(torch.nn.LSTM(4, 5, num_layers=3))
    assert reference_grad.tensor_groups(stack.layers) == [(l,) for l in stack.layers]
