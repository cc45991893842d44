"""The float64 reference against torch.nn on the CPU: each cell, stacks, skips by hand."""

from __future__ import annotations

import numpy as np
import pytest

import rnncc
from rnncc import reference

torch = pytest.importorskip("torch")


def torch_module(cell, I, H, layers=1, bias=True):
    kw = dict(input_size=I, hidden_size=H, num_layers=layers, bias=bias)
    if cell == "lstm":
        return torch.nn.LSTM(**kw)
    if cell == "gru":
        return torch.nn.GRU(**kw)
    return torch.nn.RNN(nonlinearity=cell.removeprefix("rnn_"), **kw)


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn_tanh", "rnn_relu"])
@pytest.mark.parametrize("layers,bias", [(1, True), (3, True), (2, False)])
def test_cells_and_stacks_match_torch(cell, layers, bias):
    torch.manual_seed(layers)
    mod = torch_module(cell, 7, 13, layers, bias).double()
    model, weights = rnncc.from_torch(mod.float())
    mod = mod.double()
    x = torch.randn(9, 4, 7, dtype=torch.float64)
    h0 = torch.randn(layers, 4, 13, dtype=torch.float64)
    c0 = torch.randn(layers, 4, 13, dtype=torch.float64)
    with torch.no_grad():
        want, hn = mod(x, (h0, c0) if cell == "lstm" else h0)
    state = {f"l{i}": (h0[i].numpy(), c0[i].numpy()) if cell == "lstm" else h0[i].numpy()
             for i in range(layers)}
    (got,), final = reference.run(model, {k: v.astype(np.float64) for k, v in weights.items()},
                                  x.numpy(), state)
    # Weights went through float32 on the way in: compare at float32 precision.
    np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=1e-5)
    for i in range(layers):
        if cell == "lstm":
            np.testing.assert_allclose(final[f"l{i}"][0], hn[0][i].numpy(), atol=1e-5)
            np.testing.assert_allclose(final[f"l{i}"][1], hn[1][i].numpy(), atol=1e-5)
        else:
            np.testing.assert_allclose(final[f"l{i}"], hn[i].numpy(), atol=1e-5)


def test_skip_connections_composed_by_hand():
    from conftest import skip_connections_by_hand

    torch.manual_seed(1)
    modules, model, weights = skip_connections_by_hand()
    a, b, c = modules.values()
    x = torch.randn(5, 3, 6, dtype=torch.float64)
    with torch.no_grad():
        ya, _ = a(x)
        yb, _ = b(ya + ya)
        yc, _ = c(torch.cat([yb, x], dim=-1))
    (got_c, got_res), _ = reference.run(model, weights, x.numpy())
    np.testing.assert_allclose(got_c, yc.numpy(), atol=1e-12)
    np.testing.assert_allclose(got_res, (ya + yb + yc).numpy(), atol=1e-12)


def test_residual_layers_match_a_torch_loop_with_residual_adds():
    """GNMT's encoder as torch writes it: a loop of nn.LSTM calls, h + input from the third
    layer on; its final states are the LSTMs' own (h, not h + input)."""
    from conftest import residual_lstm_stack

    torch.manual_seed(2)
    H = 12
    mods, model, weights = residual_lstm_stack(H, 5, "gnmt_small")
    x = torch.randn(7, 3, H, dtype=torch.float64)
    with torch.no_grad():
        out, states = x, []
        for i, m in enumerate(mods):
            h, state = m(out)
            out = h + out if i >= 2 else h
            states.append(state)
    (got,), final = reference.run(model, weights, x.numpy())
    np.testing.assert_allclose(got, out.numpy(), atol=1e-12)
    for i, (hn, cn) in enumerate(states):
        np.testing.assert_allclose(final[f"l{i}"][0], hn[0].numpy(), atol=1e-12)
        np.testing.assert_allclose(final[f"l{i}"][1], cn[0].numpy(), atol=1e-12)


def test_residual_form_and_growing_sums_compute_the_same():
    from conftest import residuals_as_sums

    model = rnncc.load({"name": "mixed", "input_size": 8, "layers": [
        {"name": "a", "cell": "gru", "hidden_size": 8, "residual": True},
        {"name": "b", "cell": "lstm", "hidden_size": 8},
        {"name": "c", "cell": "rnn_tanh", "hidden_size": 8, "input": {"sum": ["a", "b"]}, "residual": True},
        {"name": "d", "cell": "lstm", "hidden_size": 8, "residual": True}],
        "outputs": ["d", "c", {"name": "both", "sum": ["a", "d"]}]})
    sums = residuals_as_sums(model)
    assert not any(l.residual for l in sums.layers)
    weights = rnncc.weights.init(model, seed=3)
    x = np.random.default_rng(3).standard_normal((6, 2, 8))
    got, final = reference.run(model, weights, x)
    want, want_final = reference.run(sums, weights, x)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-12)
    for name in final:
        np.testing.assert_allclose(np.asarray(final[name][0] if name in "bd" else final[name]),
                                   np.asarray(want_final[name][0] if name in "bd" else want_final[name]))
