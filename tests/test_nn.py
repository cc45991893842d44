"""rnncc.nn on the CPU: torch.nn twins (state_dict, numbers), optimize, Model(spec),
gradients through the reference's float64 backward, what the CUDA path lacks, and the
slow-path warning. The GPU path is in test_gpu.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import rnncc  # noqa: E402
import rnncc.nn as rnn  # noqa: E402
from rnncc.dtypes import max_relative_error  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOL = 1e-5  # float32 CPU path against torch.nn (the reference runs in float64)
pytestmark = pytest.mark.filterwarnings("ignore::rnncc.nn.CpuPathWarning")

TWINS = [(torch.nn.LSTM, rnn.LSTM, {}), (torch.nn.GRU, rnn.GRU, {}),
         (torch.nn.RNN, rnn.RNN, {}), (torch.nn.RNN, rnn.RNN, {"nonlinearity": "relu"}),
         (torch.nn.LSTM, rnn.LSTM, {"proj_size": 3})]  # LSTMP: h = W_hr (o ⊙ tanh c)


def rel(a, b) -> float:
    return max_relative_error(a.detach().double().numpy(), b.detach().double().numpy())


@pytest.mark.parametrize("torch_cls,rnncc_cls,kw", TWINS)
@pytest.mark.parametrize("num_layers,bias,batch_first,bidirectional",
                         [(1, True, False, False), (3, False, True, False), (1, True, True, True),
                          (2, False, False, True)])
def test_twin_matches_torch(torch_cls, rnncc_cls, kw, num_layers, bias, batch_first, bidirectional):
    torch.manual_seed(num_layers)
    args = dict(input_size=11, hidden_size=17, num_layers=num_layers, bias=bias,
                batch_first=batch_first, bidirectional=bidirectional, **kw)
    ours, theirs = rnncc_cls(**args), torch_cls(**args)
    # Same parameter names and shapes: a torch.nn checkpoint loads unchanged, both ways.
    assert {k: v.shape for k, v in ours.state_dict().items()} == \
        {k: v.shape for k, v in theirs.state_dict().items()}
    ours.load_state_dict(theirs.state_dict())
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(4, 9, 11)  # (B, S, I) or (S, B, I)
    B = x.shape[0] if batch_first else x.shape[1]
    LD = num_layers * (2 if bidirectional else 1)
    h0 = torch.randn(LD, B, kw.get("proj_size") or 17)  # h is proj_size wide, c hidden_size
    hx = (h0, torch.randn(LD, B, 17)) if torch_cls is torch.nn.LSTM else h0
    with torch.no_grad():
        for args_ in ((x,), (x, hx), (x[0] if batch_first else x[:, 0],)):  # last: unbatched
            want, got = theirs(*args_), ours(*args_)
            assert got[0].shape == want[0].shape and got[0].dtype == want[0].dtype
            assert rel(got[0], want[0]) <= TOL
            for g, w in zip(*(s if isinstance(s, tuple) else (s,) for s in (got[1], want[1]))):
                assert g.shape == w.shape and rel(g, w) <= TOL


def test_float64_inputs_stay_float64():
    lstm = torch.nn.LSTM(5, 6).double()
    twin, _ = rnn.twin_of(lstm)
    x = torch.randn(3, 2, 5, dtype=torch.float64)
    with torch.no_grad():
        y, (h, c) = twin(x)
        assert y.dtype == h.dtype == torch.float64
        assert rel(y, lstm(x)[0]) <= 1e-12


def test_unsupported_arguments_are_refused():
    with pytest.raises(rnncc.SpecError, match=r"proj_size=4, expected 0 \(none\) or an integer in \[1, hidden_size=4\)"):
        rnn.LSTM(4, 4, proj_size=4)  # torch.nn refuses it too
    with pytest.raises(rnncc.SpecError, match=r"rnncc.nn.GRU: proj_size=2, expected 0 \(torch.nn.LSTM's alone\)"):
        rnn.GRU(4, 4, proj_size=2)
    with pytest.raises(rnncc.SpecError, match="nonlinearity='gelu'"):
        rnn.RNN(4, 4, nonlinearity="gelu")


def twin_and_torch_float64(torch_cls, rnncc_cls, kw, **more):
    torch.manual_seed(7)
    theirs = torch_cls(4, 5, **kw, **more).double()
    ours = rnncc_cls(4, 5, **kw, **more, dtype=torch.float64)
    ours.load_state_dict(theirs.state_dict())
    return theirs, ours


@pytest.mark.parametrize("torch_cls,rnncc_cls,kw", TWINS)
@pytest.mark.parametrize("num_layers,batch_first,bidirectional", [(1, False, False), (2, True, True)])
def test_cpu_twins_give_torch_nn_gradients(torch_cls, rnncc_cls, kw, num_layers, batch_first, bidirectional):
    """On the CPU a twin trains: the reference's float64 backward gives torch.nn's
    gradients of the input, the initial state and every parameter (issue 17, item 3)."""
    theirs, ours = twin_and_torch_float64(torch_cls, rnncc_cls, kw, num_layers=num_layers,
                                          batch_first=batch_first, bidirectional=bidirectional)
    lstm = torch_cls is torch.nn.LSTM
    LD, P = num_layers * (1 + bidirectional), kw.get("proj_size") or 5
    x = torch.randn(3, 6, 4, dtype=torch.float64)
    h0, c0 = torch.randn(LD, 3 if batch_first else 6, P, dtype=torch.float64), \
        torch.randn(LD, 3 if batch_first else 6, 5, dtype=torch.float64)
    grads = []
    for module in (theirs, ours):
        inputs = [t.clone().requires_grad_() for t in (x, h0, c0)]
        y, final = module(inputs[0], tuple(inputs[1:]) if lstm else inputs[1])
        loss = (y * y.detach().sin()).sum() + sum((f * f.detach().cos()).sum()
                                                   for f in (final if lstm else (final,)))
        loss.backward()
        grads.append([t.grad for t in inputs[:3 if lstm else 2]] + [p.grad for p in module.parameters()])
        module.zero_grad()
    assert len(grads[0]) == len(grads[1])
    for want, got in zip(*grads):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-11)


def test_cpu_gradients_pass_gradcheck_through_packed_sequences_and_model_specs():
    theirs, gru = twin_and_torch_float64(torch.nn.GRU, rnn.GRU, {}, num_layers=2)
    x, h0 = torch.randn(4, 3, 4, dtype=torch.float64), torch.randn(2, 3, 5, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda x, h: gru(x, h)[0], (x.requires_grad_(), h0.requires_grad_()))
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, torch.tensor([4, 1, 3]), enforce_sorted=False)
    assert torch.autograd.gradcheck(
        lambda data: gru(torch.nn.utils.rnn.PackedSequence(data, packed.batch_sizes, packed.sorted_indices,
                                                           packed.unsorted_indices))[0].data,
        (packed.data.detach().requires_grad_(),))
    m = rnn.Model(ROOT / "examples/dense_skip.yaml", dtype=torch.float64)  # sums and concats
    for p in m.parameters():  # small weights keep the finite differences well conditioned
        torch.nn.init.uniform_(p, -0.1, 0.1)
    x = torch.randn(2, 1, 128, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: m(x)[0], (x,), eps=1e-6, atol=1e-6)
    y, _ = m(x)
    y.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in m.parameters())


def test_what_the_cuda_kernels_lack_says_so():
    """What the CUDA path lacks raises by name: LSTMP and packed sequences when the forward
    needs gradients; a plain forward with gradients runs (rnncc's CUDA backward); the CPU
    path refuses nothing."""
    lstm, x = rnn.LSTM(4, 5), torch.randn(3, 2, 4)
    assert rnn._needs_grad((x,), lstm.parameters())
    assert not rnn._needs_grad((x,), lstm.requires_grad_(False).parameters())
    with torch.no_grad():
        assert not rnn._needs_grad((x.requires_grad_(),), ())
    rnn._refuse_training("rnncc.nn.LSTM", True, cuda=True)
    for kw, what in (({"proj_size": 3}, "proj_size \\(LSTMP\\)"), ({"packed": True}, "packed sequences")):
        with pytest.raises(RuntimeError, match=f"needs gradients.*CUDA backward does not cover {what}.*"
                                               "torch.no_grad\\(\\).*CPU tensors"):
            rnn._refuse_training("rnncc.nn.LSTM", True, cuda=True, **kw)
        rnn._refuse_training("rnncc.nn.LSTM", False, cuda=True, **kw)
    rnn._refuse_training("rnncc.nn.LSTM", True, cuda=False, proj_size=3, packed=True)


def test_training_spec_makes_every_layer_an_output():
    """The CUDA training forward runs the model with every layer's tensor an output (after
    the model's own, each once; a bidirectional layer's one tensor once)."""
    spec = rnn.Model(ROOT / "examples/dense_skip.yaml")._specs["float32"]
    model, train = rnn._model_of(spec), rnn._model_of(rnn._training_spec(spec))
    assert train.outputs[:len(model.outputs)] == model.outputs
    layer_outputs = {o.name for o in train.outputs if o.is_layer}
    assert layer_outputs == {l.tensor_name for l in model.layers}
    assert len(train.outputs) == len(model.outputs) + len(layer_outputs - {o.name for o in model.outputs})
    bi = rnn.LSTM(4, 5, num_layers=2, bidirectional=True)._specs["float16"]
    assert [o.name for o in rnn._model_of(rnn._training_spec(bi)).outputs] == ["l1", "l0"]
    # ... compiled to save the gates' pre-activations (float32 [S, B, G·H] a layer, two for a
    # GRU), which the op's fake implementation lists after the sequences
    assert rnn._runner_of(rnn._training_spec(spec)).backward_gates == "auto"
    assert rnn._runner_of(spec).backward_gates is None and "backward_gates" not in spec
    gru = rnn.GRU(4, 6, num_layers=2)._specs["float32"]
    assert rnn._gate_shapes(rnn._model_of(gru), 7, 3) == [("l0", (7, 3, 18))] * 2 + [("l1", (7, 3, 18))] * 2
    # the buffers of the layers that save, by layer (a GRU's two in order)
    assert rnn._saved_buffers(rnn._model_of(gru), ["a", "b", "c", "d"], {"l1"}) == {"l1": ("c", "d")}
    lstmp = rnn.LSTM(4, 6, proj_size=2)._specs["float32"]
    assert rnn._gate_shapes(rnn._model_of(lstmp), 7, 3) == []  # no CUDA backward for LSTMP


@pytest.mark.parametrize("bidirectional", [False, True])
def test_cpu_dropout_between_layers_as_torch_applies_it(bidirectional):
    """Training mode on the CPU: each layer past the first reads its input times a mask of
    0 and 1/(1 − p) from torch's generator, as torch.nn.LSTM(dropout=p) does; checked
    against single-layer torch modules composed with the same masks, outputs and every
    gradient, and at p = 1 against torch.nn itself (layer 2 reads zeros either way)."""
    p, L, S, B, H = 0.3, 3, 5, 2, 4
    torch.manual_seed(3)
    ours = rnn.LSTM(3, H, num_layers=L, dropout=p, bidirectional=bidirectional, dtype=torch.float64)
    dirs = 1 + bidirectional
    layers = [torch.nn.LSTM(3 if k == 0 else H * dirs, H, bidirectional=bidirectional).double() for k in range(L)]
    for k, m in enumerate(layers):
        for name, param in m.named_parameters():
            param.data.copy_(getattr(ours, name.replace("_l0", f"_l{k}")))
    x = torch.randn(S, B, 3, dtype=torch.float64)
    torch.manual_seed(11)
    masks = [(torch.rand(S, B, H * dirs, dtype=torch.float64) >= p).double() / (1 - p) for _ in range(L - 1)]
    torch.manual_seed(11)
    xs = [x.clone().requires_grad_() for _ in range(2)]
    y, _ = ours(xs[0])
    out = xs[1]
    for k, m in enumerate(layers):
        out, _ = m(out if k == 0 else out * masks[k - 1])
    torch.testing.assert_close(y, out, rtol=1e-12, atol=1e-12)
    g = torch.randn_like(y)
    (y * g).sum().backward()
    (out * g).sum().backward()
    torch.testing.assert_close(xs[0].grad, xs[1].grad, rtol=1e-9, atol=1e-11)
    for k, m in enumerate(layers):
        for name, param in m.named_parameters():
            torch.testing.assert_close(getattr(ours, name.replace("_l0", f"_l{k}")).grad, param.grad,
                                       rtol=1e-9, atol=1e-11)
    theirs = torch.nn.LSTM(3, H, num_layers=L, dropout=1.0, bidirectional=bidirectional).double()
    ours = rnn.LSTM(3, H, num_layers=L, dropout=1.0, bidirectional=bidirectional, dtype=torch.float64)
    ours.load_state_dict(theirs.state_dict())
    torch.testing.assert_close(ours(x)[0], theirs(x)[0], rtol=1e-12, atol=1e-12)
    ours.eval(), theirs.eval()  # no dropout in eval mode
    torch.testing.assert_close(ours(x)[0], theirs(x)[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_levels_with_dropout_compose_single_layers(bidirectional, composed_with_masks):
    """The CUDA path's dropout (one level at a time, ``_run_levels``), run here on the CPU
    reference: outputs, final states and every gradient equal single-layer torch.nn
    modules composed with the same masks, initial states given."""
    p, L, S, B, H = 0.4, 3, 5, 2, 4
    torch.manual_seed(5)
    ours = rnn.GRU(3, H, num_layers=L, dropout=p, bidirectional=bidirectional, dtype=torch.float64)
    D = 1 + bidirectional
    x = torch.randn(S, B, 3, dtype=torch.float64)
    h0 = torch.randn(L * D, B, H, dtype=torch.float64)
    xs, hs = [x.clone().requires_grad_() for _ in range(2)], [h0.clone().requires_grad_() for _ in range(2)]
    state = {name: hs[0][k] for k, name in enumerate(ours._suffixes)}
    torch.manual_seed(9)
    with pytest.warns(rnn.CpuPathWarning):
        (y,), final = ours._run_levels("float32", xs[0], state, False, None, p)
    h_n = torch.stack([final[name] for name in ours._suffixes])
    torch.manual_seed(9)
    y_ref, h_ref, _ = composed_with_masks(ours, xs[1], hs[1], p)
    torch.testing.assert_close(y, y_ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(h_n, h_ref, rtol=1e-12, atol=1e-12)
    g, gh = torch.randn_like(y), torch.randn_like(h_n)
    ((y * g).sum() + (h_n * gh).sum()).backward()
    ((y_ref * g).sum() + (h_ref * gh).sum()).backward()
    for a, b in ((xs[0], xs[1]), (hs[0], hs[1])):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-9, atol=1e-11)
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in ours.parameters())


class Nested(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(50, 8)
        self.encoder = torch.nn.Sequential(torch.nn.LSTM(8, 16, num_layers=2, batch_first=True))
        self.heads = torch.nn.ModuleDict({"gru": torch.nn.GRU(16, 12, batch_first=True),
                                          "bi": torch.nn.GRU(16, 6, batch_first=True, bidirectional=True),
                                          "lstmp": torch.nn.LSTM(16, 8, batch_first=True, proj_size=4)})
        self.out = torch.nn.Linear(12, 3)

    def forward(self, tokens):
        h, _ = self.encoder[0](self.embed(tokens))
        g, _ = self.heads["gru"](h)
        b, _ = self.heads["bi"](h)
        p, _ = self.heads["lstmp"](h)
        return self.out(g) + self.out(b) + p.sum()


def test_optimize_replaces_what_it_can_and_says_why_not(capsys):
    torch.manual_seed(1)
    model = Nested().eval()
    tokens = torch.randint(0, 50, (3, 7))
    with torch.no_grad():
        want = model(tokens)
    same = rnncc.optimize(model)
    assert same is model
    out = capsys.readouterr().out
    assert "replaced encoder.0: nn.LSTM(8, 16, num_layers=2, float32) → rnncc.nn.LSTM" in out
    assert "replaced heads.gru" in out and "skipped" not in out  # every configuration torch runs
    assert "replaced heads.lstmp: nn.LSTM(16, 8, num_layers=1, proj_size=4, float32)" in out
    assert "replaced heads.bi: nn.GRU(16, 6, num_layers=1, bidirectional=True, float32)" in out
    assert isinstance(model.encoder[0], rnn.LSTM) and isinstance(model.heads["gru"], rnn.GRU)
    assert isinstance(model.heads["bi"], rnn.GRU) and model.heads["bi"].bidirectional
    assert isinstance(model.heads["lstmp"], rnn.LSTM) and model.heads["lstmp"].proj_size == 4
    assert type(model.embed) is torch.nn.Embedding
    with torch.no_grad():
        assert rel(model(tokens), want) <= TOL
    lone = rnncc.optimize(torch.nn.RNN(3, 4), verbose=False)
    assert isinstance(lone, rnn.RNN)


def test_model_of_any_spec_matches_the_reference():
    m = rnn.Model(ROOT / "examples/dense_skip.yaml")
    names = {k for k in m.state_dict()}
    assert "layers.d1.weight_ih" in names and "layers.d3.bias_hh" in names
    x = torch.randn(5, 2, 128)
    with torch.no_grad():
        y, state = m(x)
    weights = {k.removeprefix("layers."): v.numpy() for k, v in m.state_dict().items()}
    want, want_state = rnncc.reference.run(m.spec, weights, x.double().numpy())
    assert y.shape == (5, 2, 512) and max_relative_error(y.double().numpy(), want[0]) <= TOL
    assert set(state) == {"d1", "d2", "d3"}


def test_example_runs_on_the_cpu_and_warns_once():
    code = ("import runpy, torch; torch.cuda.is_available = lambda: False; "
            "runpy.run_path('examples/swap_into_model.py', run_name='__main__')")
    proc = subprocess.run([sys.executable, "-W", "default", "-c", code], cwd=ROOT,
                          capture_output=True, text=True, env={**__import__("os").environ,
                                                               "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert "rnncc.optimize: replaced lstm: nn.LSTM(128, 256, num_layers=2, float32)" in proc.stdout
    assert "max relative difference" in proc.stdout
    warning = [line for line in proc.stderr.splitlines() if "CpuPathWarning" in line]
    assert len(warning) == 1  # 3 forwards, one warning
    assert "swap_into_model.py" in warning[0]  # at the user's line, not inside torch


def test_training_example_learns_the_same_curve_on_the_cpu(tmp_path):
    """examples/train_char_lm.py, one short run without dropout: torch.nn's and the rnncc
    twin's loss curves agree to float32 rounding and fall; its JSON has both."""
    import json
    proc = subprocess.run([sys.executable, "examples/train_char_lm.py", "--epochs", "2", "--dropout", "0",
                           "--hidden", "32", "-o", str(tmp_path / "lm")], cwd=ROOT, capture_output=True,
                          text=True, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "lm.json").read_text())
    ours, theirs = record["loss"]["rnncc"], record["loss"]["torch.nn"]
    assert len(ours) == len(theirs) == 14 and record["largest_gap"] < 1e-3
    assert ours[-1] < ours[0] - 0.5
    assert "rnncc.optimize: replaced lstm" in proc.stdout
    # an epoch's time as the median after the first, which also compiles and captures
    steady = record["median_seconds_per_epoch_after_the_first"]
    assert steady["rnncc"] == record["seconds_per_epoch"]["rnncc"][1] and "after the first" in proc.stdout


def test_the_cuda_forward_traces_into_one_graph(rnncc_tagger):
    """torch.compile(fullgraph=True) sees the CUDA branch as one custom op (rnncc::forward)
    with a fake implementation. Checked here on CPU tensors: the op gets a CPU kernel (the
    reference executor, this test only) and the branch is called directly."""
    from rnncc import reference

    def cpu_kernel(spec, x, weights, h0, c0, batch_first):
        model = rnn._model_of(spec)
        w = {n: t.double().numpy() for n, t in zip(rnn._weight_names(model), weights)}
        outs, final = reference.run(model, w, (x.transpose(0, 1) if batch_first else x).double().numpy())
        flat = [torch.from_numpy(o.transpose(1, 0, 2) if batch_first else o).float().contiguous()
                for o in outs]
        for l in model.layers:
            flat += [torch.from_numpy(v).float() for v in
                     (final[l.name] if l.cell == "lstm" else (final[l.name],))]
        return flat
    torch.library.register_kernel("rnncc::forward", "cpu", cpu_kernel)

    model = rnncc_tagger(16, 24, 20).requires_grad_(False)
    x = torch.randn(3, 7, 16)
    eager = model(x)  # the CPU path (reference executor)
    import unittest.mock
    cuda_branch = lambda *args, lengths=None, dropout_masks=None: rnn._run_gpu(*args)  # noqa: E731
    with unittest.mock.patch.object(rnn, "_run", cuda_branch):
        got = torch.compile(model, fullgraph=True, backend="eager")(x)
    assert rel(got, eager) <= TOL


@pytest.mark.parametrize("torch_cls,rnncc_cls,kw", TWINS)
@pytest.mark.parametrize("batch_first,bidirectional", [(False, False), (True, False), (True, True)])
def test_packed_sequences_match_torch(torch_cls, rnncc_cls, kw, batch_first, bidirectional,
                                      packed_mismatch):
    """A PackedSequence (sequences of different lengths) gives torch.nn's outputs and each
    sequence's final state at its own last step (bidirectional: the backward direction
    starts at each sequence's own end)."""
    torch.manual_seed(11)
    theirs = torch_cls(5, 8, num_layers=2, batch_first=batch_first, bidirectional=bidirectional, **kw)
    ours, _ = rnn.twin_of(theirs)
    assert packed_mismatch(theirs, ours, "cpu", torch.float32) <= TOL


@pytest.mark.parametrize("torch_cls,rnncc_cls,kw", TWINS)
@pytest.mark.parametrize("bidirectional", [False, True])
def test_twin_has_torch_nn_helpers(torch_cls, rnncc_cls, kw, bidirectional):
    """What code written for torch.nn calls besides forward: flatten_parameters (often in
    forward), all_weights, proj_size, the repr."""
    theirs = torch_cls(3, 4, num_layers=2, bidirectional=bidirectional, **kw)
    ours, _ = rnn.twin_of(theirs)
    ours.flatten_parameters()
    assert ours.proj_size == theirs.proj_size == kw.get("proj_size", 0)
    assert [[w.shape for w in layer] for layer in ours.all_weights] == \
        [[w.shape for w in layer] for layer in theirs.all_weights]
    assert all(torch.equal(a, b) for la, lb in zip(ours.all_weights, theirs.all_weights)
               for a, b in zip(la, lb))
    assert ("bidirectional=True" in repr(ours)) == ("bidirectional=True" in repr(theirs)) == bidirectional


def test_modules_of_one_spec_have_compiled_models_of_their_own():
    """Two twins built alike (an encoder and a decoder of one size), a copy of one, and the
    levels of a stack that dropout runs one at a time each hold their own weights, so each
    gets its own runner (and compiled models): shared, every call of one would send its
    weights to the GPU again, and a graph recorded by one would replay with the other's.
    The model each spec names is the same; a collected module's runners go with it."""
    import copy
    import gc

    a, b = rnn.LSTM(6, 5, num_layers=3, dropout=0.2), rnn.LSTM(6, 5, num_layers=3, dropout=0.2)
    c = copy.deepcopy(a)
    for dtype in a._specs:
        texts = [m._specs[dtype] for m in (a, b, c)]
        assert len({rnn._model_of(t) for t in texts}) == 1
        runners = [rnn._runner_of(t) for t in texts] + [rnn._runner_of(rnn._training_spec(t)) for t in texts]
        assert len({id(r) for r in runners}) == 6
        levels = [a._levels[dtype, k][0] for k in range(3)]
        assert len({id(rnn._runner_of(t)) for t in levels}) == 3
        assert rnn._model_of(levels[1]) == rnn._model_of(levels[2])  # inner levels: one model
    assert rnn._runner_of(a._specs["float32"]) is rnn._runner_of(a._specs["float32"])
    gone = [*a._specs.values(), *(t for t, _ in a._levels.values())]
    assert all(t in rnn._RUNNERS for t in gone)
    del a
    gc.collect()
    assert not any(t in rnn._RUNNERS for t in gone)
    assert all(t in rnn._RUNNERS for t in b._specs.values())
    spec = {"name": "m", "input_size": 4, "layers": [{"name": "a", "cell": "gru", "hidden_size": 4}]}
    one, other = rnn.Model(spec), rnn.Model(spec)
    assert rnn._runner_of(one._specs["float32"]) is not rnn._runner_of(other._specs["float32"])
    assert rnn._runner_of(copy.deepcopy(one)._specs["float32"]) is not rnn._runner_of(one._specs["float32"])


def test_modules_for_graphed_calls_carry_launches_in_their_specs():
    """launches="graph" (a module whose calls will be captured in CUDA graphs) travels in
    the spec text every op and runner takes: the model it names is the same, its runner
    plans for graphed calls, and the training spec and dropout's level specs keep it. The
    CPU path computes the same numbers."""
    torch.manual_seed(3)
    eager = rnn.LSTM(6, 5, num_layers=2, dropout=0.1)
    graph = rnn.LSTM(6, 5, num_layers=2, dropout=0.1, launches="graph")
    graph.load_state_dict(eager.state_dict())
    assert eager.launches == "eager" and "launches" not in repr(eager)
    assert "launches='graph'" in repr(graph)
    for dtype, text in graph._specs.items():
        assert rnn._model_of(text) == rnn._model_of(eager._specs[dtype])
        assert rnn._runner_of(text).launches == "graph" and rnn._runner_of(eager._specs[dtype]).launches is None
        assert rnn._runner_of(rnn._training_spec(text)).launches == "graph"
    assert all(rnn._runner_of(text).launches == "graph" for text, _ in graph._levels.values())
    x = torch.randn(4, 3, 6)
    with torch.no_grad():
        graph.eval(), eager.eval()
        assert torch.equal(graph(x)[0], eager(x)[0])
    graph.launches = "eager"
    for dtype, text in graph._specs.items():
        assert rnn._model_of(text) == rnn._model_of(eager._specs[dtype]) and rnn._runner_of(text).launches is None
    with pytest.raises(rnncc.SpecError, match="rnncc.nn.GRU option 'launches': got 'captured', expected 'eager'"):
        rnn.GRU(4, 4, launches="captured")
    with pytest.raises(rnncc.SpecError, match="rnncc.optimize option 'launches': got 'cudagraph'"):
        rnncc.optimize(torch.nn.GRU(4, 4), launches="cudagraph")
    model = torch.nn.Sequential(torch.nn.GRU(4, 4))
    rnncc.optimize(model, verbose=False, launches="graph")
    assert isinstance(model[0], rnn.GRU) and model[0].launches == "graph"
    spec = {"name": "m", "input_size": 4, "layers": [{"name": "a", "cell": "gru", "hidden_size": 4}]}
    assert rnn._runner_of(rnn.Model(spec, launches="graph")._specs["float32"]).launches == "graph"
