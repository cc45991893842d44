"""Shared fixtures: a GPU gate for `-m gpu` tests, and the nvcc gate for compile checks."""

from __future__ import annotations

import os
import shutil

import pytest

# On a machine with several GPUs, RNNCC_TEST_GPUS=N spreads pytest-xdist's workers over the
# first N of them (worker gwK sees GPU K mod N as its device 0; rnncc and the tests use device
# 0), so that `-n` can follow the CPU cores that compile the kernels. Set here, at the
# worker's first import, before any CUDA context exists.
_TEST_GPUS = int(os.environ.get("RNNCC_TEST_GPUS", "1"))
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _TEST_GPUS > 1 and _WORKER.startswith("gw"):
    os.environ["CUDA_VISIBLE_DEVICES"] = str(int(_WORKER[2:]) % _TEST_GPUS)


@pytest.fixture(scope="session")
def gpu():
    """Skips the test without PyCUDA and a GPU; with them, returns the device context."""
    from rnncc.errors import DeviceUnavailable
    from rnncc.driver import device_context

    try:
        return device_context(0)
    except DeviceUnavailable as exc:
        pytest.skip(f"no GPU: {exc}")


@pytest.fixture(autouse=True)
def _poison_outputs(request, monkeypatch):
    # GPU tests: every output and workspace buffer starts as NaN, so unwritten
    # elements fail the comparison instead of passing on leftover zeros.
    if request.node.get_closest_marker("gpu"):
        monkeypatch.setenv("RNNCC_DEBUG_POISON", "1")


@pytest.fixture(scope="session")
def nvcc():
    """The nvcc path; without one the test skips, or fails where RNNCC_REQUIRE_NVCC=1
    (set by .ci/run, so compile checks can never silently vanish in CI)."""
    from rnncc.build import nvcc_path

    path = nvcc_path()
    if path is None:
        if os.environ.get("RNNCC_REQUIRE_NVCC") == "1":
            pytest.fail("nvcc not found and RNNCC_REQUIRE_NVCC=1")
        pytest.skip("nvcc not found")
    return path


@pytest.fixture(scope="session")
def torch():
    return pytest.importorskip("torch")


@pytest.fixture(scope="session")
def rnncc_tagger(torch):
    """make(I, H, H2): a tagger holding rnncc modules (a 2-layer batch-first LSTM of H, a
    GRU of H2 over its sequence, a linear head of 5) whose output uses every final state;
    the torch.compile tests trace it."""
    import rnncc.nn as rnn

    class Tagger(torch.nn.Module):
        def __init__(self, inputs: int, hidden: int, gru_hidden: int):
            super().__init__()
            self.lstm = rnn.LSTM(inputs, hidden, num_layers=2, batch_first=True)
            self.gru = rnn.GRU(hidden, gru_hidden)
            self.out = torch.nn.Linear(gru_hidden, 5)

        def forward(self, x):
            h, (h_n, c_n) = self.lstm(x)
            g, g_n = self.gru(h.transpose(0, 1))
            return self.out(g) + h_n.sum() + c_n.sum() + g_n.sum()
    return Tagger


def has_command(name: str) -> bool:
    return shutil.which(name) is not None


@pytest.fixture(scope="session")
def packed_mismatch(torch):
    """mismatch(theirs, ours, device, dtype) -> the largest relative difference between a
    torch.nn module and its rnncc twin on PackedSequence inputs (sorted and unsorted,
    lengths S, S−1, …, 1 and random, batch-first or not as the modules are, with and
    without hx); also asserts that the packing (batch_sizes, indices) is the input's."""
    from torch.nn.utils.rnn import pack_padded_sequence

    from rnncc.dtypes import max_relative_error

    def rel(a, b) -> float:
        return max_relative_error(a.detach().double().cpu().numpy(), b.detach().double().cpu().numpy())

    def mismatch(theirs, ours, device, dtype) -> float:
        L, H, I = theirs.num_layers * (2 if theirs.bidirectional else 1), theirs.hidden_size, theirs.input_size
        worst = 0.0
        cases = (([7, 3, 7, 1, 2, 5], False), ([9, 9, 4, 2], True), (list(range(8, 0, -1)), True),
                 (torch.randint(1, 12, (9,), generator=torch.Generator().manual_seed(3)).tolist(), False))
        for lengths, enforce_sorted in cases:
            B, S = len(lengths), max(lengths)
            x = torch.randn((B, S, I) if theirs.batch_first else (S, B, I), device=device, dtype=dtype)
            packed = pack_padded_sequence(x, torch.tensor(lengths), batch_first=theirs.batch_first,
                                          enforce_sorted=enforce_sorted)
            P = getattr(theirs, "proj_size", 0) or H  # h's width (an LSTM's c is H wide)
            h0 = torch.randn(L, B, P, device=device, dtype=dtype)
            hx = (h0, torch.randn(L, B, H, device=device, dtype=dtype)) \
                if isinstance(theirs, torch.nn.LSTM) else h0
            for args in ((packed,), (packed, hx)):
                with torch.no_grad():
                    want, got = theirs(*args), ours(*args)
                assert torch.equal(got[0].batch_sizes, want[0].batch_sizes)
                for g, w in ((got[0].sorted_indices, want[0].sorted_indices),
                             (got[0].unsorted_indices, want[0].unsorted_indices)):
                    assert (g is None and w is None) or torch.equal(g, w)
                worst = max(worst, rel(got[0].data, want[0].data))
                states = zip(got[1], want[1]) if isinstance(want[1], tuple) else [(got[1], want[1])]
                worst = max([worst] + [rel(g, w) for g, w in states])
        return worst
    return mismatch


def residuals_as_sums(model):
    """The same network with every residual layer written out as growing sums (the form
    specs had before `residual`): a layer that reads a residual layer reads the sum of h's
    it stands for. For tests that the two forms compute the same; sums and single inputs
    only."""
    import rnncc

    model = rnncc.spec.load(model)
    terms: dict[str, list[str]] = {"input": ["input"]}

    def merged(sources):
        names = [t for s in sources for t in terms[s]]
        return names[0] if len(names) == 1 else {"sum": names}

    layers = []
    for l in model.layers:
        assert l.input.mode == "sum", "residuals_as_sums: concat inputs are not handled"
        layers.append({"name": l.name, "cell": l.cell, "hidden_size": l.hidden_size, "bias": l.bias,
                       "input": merged(l.input.sources)})
        terms[l.name] = [l.name] + ([t for s in l.input.sources for t in terms[s]] if l.residual else [])
    outputs = []  # a residual layer's output becomes a merged output, "<layer>_out"
    for o in model.outputs:
        m = merged(o.merge.sources)
        outputs.append(m if isinstance(m, str) else
                       {"name": o.name + "_out" if o.is_layer else o.name, **m})
    return rnncc.ir.Model.from_dict({"name": model.name + "_sums", "dtype": model.dtype,
                                     "input_size": model.input_size, "layers": layers,
                                     "outputs": outputs})


def residual_lstm_stack(H: int, L: int, name: str = "residual"):
    """GNMT's encoder form for the reference tests: L float64 ``torch.nn.LSTM(H, H)``
    modules, the rnncc spec of them with h + input from the third layer on, and the
    modules' weights under rnncc's keys. (modules, model, weights)."""
    import torch

    import rnncc

    mods = [torch.nn.LSTM(H, H).double() for _ in range(L)]
    model = rnncc.load({"name": name, "input_size": H, "layers": [
        {"name": f"l{i}", "cell": "lstm", "hidden_size": H, **({"residual": True} if i >= 2 else {})}
        for i in range(L)]})
    return mods, model, single_layer_weights({f"l{i}": m for i, m in enumerate(mods)})


def single_layer_weights(modules) -> dict:
    """The weights of one-layer torch.nn modules by name, under rnncc's keys
    (``<name>.weight_ih`` …)."""
    return {f"{name}.{k}": getattr(m, f"{k}_l0").detach().numpy()
            for name, m in modules.items() for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}


def skip_connections_by_hand():
    """Three one-layer float64 torch.nn modules and the rnncc spec that composes them: a
    sum of a layer with itself (b reads a + a), a concat with the input (c reads b and the
    input), two outputs (c, and the sum of a, b and c). ({name: module}, model, weights)."""
    import torch

    import rnncc

    modules = {"a": torch.nn.LSTM(6, 10).double(), "b": torch.nn.GRU(10, 10).double(),
               "c": torch.nn.RNN(16, 10).double()}
    model = rnncc.load({
        "name": "skips", "input_size": 6,
        "layers": [{"name": "a", "cell": "lstm", "hidden_size": 10},
                   {"name": "b", "cell": "gru", "hidden_size": 10, "input": {"sum": ["a", "a"]}},
                   {"name": "c", "cell": "rnn_tanh", "hidden_size": 10, "input": {"concat": ["b", "input"]}}],
        "outputs": ["c", {"name": "res", "sum": ["a", "b", "c"]}]})
    return modules, model, single_layer_weights(modules)


def _composed_with_masks(ours, x, state, p: float, batch_first: bool = False):
    """``ours`` (a twin in training mode, dropout p) as single-layer torch.nn modules of
    its parameters, level after level, each past the first reading the one before times
    the mask the CUDA path draws (torch.rand of the level's input shape, float32, on its
    device): (outputs, h_n (or (h_n, c_n)), the modules by level). Draw in the order
    ``ours`` does, after the same seed."""
    import torch

    import rnncc.nn as rnn

    lstm, D = isinstance(ours, rnn.LSTM), 1 + ours.bidirectional
    kind = type(ours).__name__
    kw = {"bias": ours.bias, "batch_first": batch_first, "bidirectional": ours.bidirectional,
          "device": x.device, "dtype": x.dtype} | ({"nonlinearity": ours.nonlinearity} if kind == "RNN" else {})
    with torch.random.fork_rng(devices=[x.device] if x.is_cuda else []):  # their init draws
        levels = [getattr(torch.nn, kind)(x.shape[-1] if k == 0 else D * ours.hidden_size, ours.hidden_size, **kw)
                  for k in range(ours.num_layers)]
    out, finals = x, []
    for k, m in enumerate(levels):
        for name, param in m.named_parameters():
            param.data.copy_(getattr(ours, name.replace("_l0", f"_l{k}")))
        if k:
            out = out * rnn._dropout_mask(torch.rand(out.shape, device=out.device), p).to(out.dtype)
        level = None if state is None else \
            tuple(t[k * D:(k + 1) * D] for t in state) if lstm else state[k * D:(k + 1) * D]
        out, final = m(out, level)
        finals.append(final)
    if lstm:
        return out, (torch.cat([h for h, _ in finals]), torch.cat([c for _, c in finals])), levels
    return out, torch.cat(finals), levels


@pytest.fixture(scope="session")
def composed_with_masks():
    """The reference for dropout between layers on CUDA: ``_composed_with_masks``."""
    return _composed_with_masks
