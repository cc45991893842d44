"""The CUDA backward (issue 17) on the GPU: gradients of the twins and of spec models against
the float64 backward (``reference_grad``), halves against 3× cuDNN's own error, through
torch.compile(fullgraph=True) and a CUDA-graph capture, and the bounded grid barrier.
Outputs are poisoned with NaN first (conftest)."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

import rnncc
from rnncc import reference_grad
from rnncc.dtypes import max_relative_error
from rnncc.ir import CELL_GATES
from rnncc.timing import capture

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parent.parent
CELLS = ("lstm", "gru", "rnn_tanh", "rnn_relu")


def numpy64(t):
    return t.detach().double().cpu().numpy()


def twin(torch, cell: str, *args, **kw):
    import rnncc.nn as rnn

    cls = {"lstm": rnn.LSTM, "gru": rnn.GRU}.get(cell, rnn.RNN)
    extra = {"nonlinearity": cell.removeprefix("rnn_")} if cell.startswith("rnn") else {}
    return cls(*args, **kw, **extra)


def twin_gradients(torch, module, x, hx, seed: int):
    """Run ``module`` forward on x (and hx), backward from random gradients of its output
    and final states. Returns (the gradients drawn, {name: gradient} of x, hx and every
    parameter)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    inputs = {"x": x.detach().clone().requires_grad_()}
    if hx is not None:
        parts = hx if isinstance(hx, tuple) else (hx,)
        inputs |= {f"hx{i}": p.detach().clone().requires_grad_() for i, p in enumerate(parts)}
    for p in module.parameters():
        p.grad = None
    state_in = tuple(v for k, v in inputs.items() if k != "x")
    y, state = module(inputs["x"], (state_in if len(state_in) == 2 else state_in[0]) if state_in else None)
    outs = [y, *(state if isinstance(state, tuple) else (state,))]
    drawn = [torch.randn(o.shape, generator=gen, device="cuda", dtype=torch.float32).to(o.device, o.dtype)
             for o in outs]
    torch.autograd.backward(outs, drawn)
    got = {k: v.grad for k, v in inputs.items()} | {n: p.grad for n, p in module.named_parameters()}
    assert all(g is not None for g in got.values()), [k for k, g in got.items() if g is None]
    return drawn, got


# (cell, H, B, S, layers, bidirectional, batch_first): every cell; H ∈ {1, 33, 256, 1024},
# B ∈ {1, 5, 8, 64}, S ∈ {1, 7, 256}; LSTM H=300 B=40, whose backward takes the K-split form.
TWIN_CASES = [("lstm", 33, 5, 256, 2, False, False), ("gru", 33, 5, 256, 2, True, True),
              ("rnn_tanh", 256, 1, 7, 1, False, False), ("rnn_relu", 1, 64, 7, 2, False, False),
              ("lstm", 1024, 8, 256, 1, False, False), ("gru", 256, 64, 1, 1, True, False),
              ("lstm", 256, 8, 7, 3, True, True), ("lstm", 300, 40, 33, 2, False, True)]


@pytest.mark.parametrize("case", TWIN_CASES, ids=lambda c: "-".join(map(str, c)))
def test_twin_gradients_float32_against_the_float64_backward(gpu, torch, case):
    """Every gradient of an fp32 twin (input, h0, c0, every parameter) is within 1e-4 of
    the float64 backward's, relative to its largest element, with initial states given and
    gradients on h_n (and c_n)."""
    import rnncc.nn as rnn

    cell, H, B, S, layers, bi, batch_first = case
    torch.manual_seed(11)
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    I, D = 24, 2 if bi else 1
    module = twin(torch, cell, I, H, num_layers=layers, bidirectional=bi, batch_first=batch_first).cuda()
    x = torch.randn(*((B, S) if batch_first else (S, B)), I, device="cuda")
    h0 = torch.randn(layers * D, B, H, device="cuda")
    hx = (h0, torch.randn_like(h0)) if cell == "lstm" else h0
    drawn, got = twin_gradients(torch, module, x, hx, seed=12)

    model = rnn._model_of(module._specs["float32"])
    weights = {ours: numpy64(p) for ours, p in module._weights().items()}
    tm = (lambda a: a.transpose(1, 0, 2)) if batch_first else (lambda a: a)
    names = module._suffixes
    parts = [numpy64(p) for p in (hx if isinstance(hx, tuple) else (hx,))]
    grads = [numpy64(g) for g in drawn]
    lstm = cell == "lstm"
    state = {n: (parts[0][k], parts[1][k]) if lstm else parts[0][k] for k, n in enumerate(names)}
    final = {n: (grads[1][k], grads[2][k]) if lstm else grads[1][k] for k, n in enumerate(names)}
    want = reference_grad.grad(model, weights, tm(numpy64(x)), [tm(grads[0])], state, None, final)

    errors = {"x": max_relative_error(tm(numpy64(got["x"])), want.input)}
    for k, n in enumerate(names):
        for i in range(2 if lstm else 1):
            ref = want.state[n][i] if lstm else want.state[n]
            errors[f"hx{i}[{n}]"] = max_relative_error(numpy64(got[f"hx{i}"][k]), ref)
    for ours, theirs in module._weight_names:
        errors[theirs] = max_relative_error(numpy64(got[theirs]), want.weights[ours])
    assert max(errors.values()) <= 1e-4, errors


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_gradients_no_worse_than_three_times_cudnns(gpu, torch, cell, dtype):
    """fp16/bf16 twins, 2 layers, H=96, B=8, S=256: against the same module in float64 (its
    stored weights and input), every gradient is no further off than 3× cuDNN's own."""
    torch.manual_seed(13)
    tdt = getattr(torch, dtype)
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}.get(cell, torch.nn.RNN)
    extra = {"nonlinearity": cell.removeprefix("rnn_")} if cell.startswith("rnn") else {}
    theirs = cls(64, 96, num_layers=2, **extra).to("cuda", tdt)
    assert_gradients_within_three_times_cudnns(torch, theirs, (256, 8, 64), seed=14)


def assert_gradients_within_three_times_cudnns(torch, theirs, x_shape: tuple[int, ...], seed: int) -> None:
    """``theirs`` (a torch.nn module on the GPU in a half type) and its rnncc twin, run on one
    random input of ``x_shape`` (drawn after the twin is made) with gradients drawn from
    ``seed``: every gradient of the twin is no further off the module's float64 copy (on
    the CPU) than 3× cuDNN's own."""
    import rnncc.nn as rnn

    exact = copy.deepcopy(theirs).to("cpu", torch.float64)
    ours, _ = rnn.twin_of(theirs)
    x = torch.randn(*x_shape, device="cuda", dtype=next(theirs.parameters()).dtype)
    _, want = twin_gradients(torch, exact, x.cpu().double(), None, seed=seed)
    _, cudnn = twin_gradients(torch, theirs, x, None, seed=seed)
    _, got = twin_gradients(torch, ours, x, None, seed=seed)
    for name, w in want.items():
        w = w.numpy()
        ours_error = max_relative_error(got[name].float().cpu().numpy(), w)
        cudnn_error = max_relative_error(cudnn[name].float().cpu().numpy(), w)
        assert ours_error <= 3 * cudnn_error, (name, ours_error, cudnn_error)


@pytest.mark.parametrize("cell,dtype", [("lstm", "float16"), ("gru", "bfloat16")])
def test_hybrid_backward_gradients_no_worse_than_three_times_cudnns(gpu, torch, cell, dtype):
    """PTB's medium model's shape (2 layers, I=H=650, B=20, S=35), whose backward runs the
    hybrid cluster form (part of W_hh's share in shared memory): every gradient no further
    off float64 than 3× cuDNN's own."""
    from rnncc import backward

    G = {"lstm": 4, "gru": 3}[cell]
    assert backward._tile(cell, 650, G, dtype, 20).register_steps > 0  # the form under test
    torch.manual_seed(17)
    tdt = getattr(torch, dtype)
    theirs = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cell](650, 650, num_layers=2).to("cuda", tdt)
    assert_gradients_within_three_times_cudnns(torch, theirs, (35, 20, 650), seed=18)


# (cell, bidirectional, batch_first, dtype, tolerance against cuDNN composed)
DROPOUT_CASES = [("lstm", False, False, "float32", 1e-4), ("gru", True, True, "float32", 1e-4),
                 ("rnn_relu", False, False, "float32", 1e-4), ("lstm", True, False, "float16", 2e-2)]


@pytest.mark.parametrize("case", DROPOUT_CASES, ids=lambda c: "-".join(map(str, c[:4])))
def test_dropout_between_layers_in_training_mode(gpu, torch, composed_with_masks, monkeypatch, case):
    """A 3-layer twin in training mode with dropout 0.3, S=64, B=5, H=33, initial states
    given: outputs, final states and every gradient equal single-layer torch.nn (cuDNN)
    modules of its parameters composed with the masks it draws (the same seed); under
    torch.no_grad the same forward; in eval mode no dropout."""
    cell, bi, batch_first, dtype, tol = case
    torch.manual_seed(17)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)  # cuDNN's fp32 RNNs exact
    tdt = getattr(torch, dtype)
    S, B, I, H, L, D = 64, 5, 24, 33, 3, 1 + bi
    ours = twin(torch, cell, I, H, num_layers=L, dropout=0.3, bidirectional=bi,
                batch_first=batch_first).to("cuda", tdt)
    x = torch.randn(*((B, S) if batch_first else (S, B)), I, device="cuda", dtype=tdt)
    lstm = cell == "lstm"
    hx = tuple(torch.randn(L * D, B, H, device="cuda", dtype=tdt) for _ in range(2 if lstm else 1))
    flat = lambda y, state: [y, *(state if isinstance(state, tuple) else (state,))]  # noqa: E731
    runs = {}
    for name in ("rnncc", "cuDNN"):
        xs, hs = x.clone().requires_grad_(), tuple(h.clone().requires_grad_() for h in hx)
        torch.manual_seed(23)
        if name == "rnncc":
            outs, params = flat(*ours(xs, hs if lstm else hs[0])), [p for _, p in ours.named_parameters()]
        else:
            y, state, levels = composed_with_masks(ours, xs, hs if lstm else hs[0], 0.3, batch_first)
            outs = flat(y, state)
            theirs = {n.replace("_l0", f"_l{k}"): p for k, m in enumerate(levels) for n, p in m.named_parameters()}
            params = [theirs[n] for n, _ in ours.named_parameters()]
        gen = torch.Generator(device="cuda").manual_seed(29)
        drawn = [torch.randn(o.shape, generator=gen, device="cuda").to(tdt) for o in outs]
        grads = torch.autograd.grad(outs, [xs, *hs, *params], drawn)
        runs[name] = [o.detach() for o in outs] + list(grads)
    errors = [max_relative_error(numpy64(a), numpy64(b)) for a, b in zip(runs["rnncc"], runs["cuDNN"])]
    assert max(errors) <= tol, errors
    with torch.no_grad():
        torch.manual_seed(23)
        y = ours(x, hx if lstm else hx[0])[0]
        assert max_relative_error(numpy64(y), numpy64(runs["rnncc"][0])) <= tol
        torch.manual_seed(31)  # no initial state: the twin's fast path must not skip dropout
        y = ours(x)[0]
        torch.manual_seed(31)
        y_ref = composed_with_masks(ours, x, None, 0.3, batch_first)[0]
        assert max_relative_error(numpy64(y), numpy64(y_ref)) <= tol
    ours.eval()
    with torch.no_grad():
        y = ours(x, hx if lstm else hx[0])[0]
        y_ref = composed_with_masks(ours, x, hx if lstm else hx[0], 0.0, batch_first)[0]
    assert max_relative_error(numpy64(y), numpy64(y_ref)) <= tol


def residual_stack(dtype: str) -> dict:
    """GNMT's shape, small: a bidirectional first layer, then residual layers of mixed cells."""
    return {"name": "residual_stack", "dtype": dtype, "input_size": 20,
            "layers": [{"name": "l1", "cell": "lstm", "hidden_size": 16, "direction": "bidirectional"},
                       {"name": "l2", "cell": "gru", "hidden_size": 32, "input": "l1"},
                       {"name": "l3", "cell": "lstm", "hidden_size": 32, "input": "l2", "residual": True},
                       {"name": "l4", "cell": "rnn_tanh", "hidden_size": 32, "input": "l3", "residual": True,
                        "bias": False}],
            "outputs": ["l4", {"name": "both", "concat": ["l2", "l4"]}]}


@pytest.mark.parametrize("spec", [ROOT / "examples/dense_skip.yaml", "residual"], ids=["sum-concat", "residual"])
@pytest.mark.parametrize("S,B", [(7, 5), (256, 3)])
def test_model_gradients_against_the_float64_backward(gpu, torch, spec, S, B):
    """rnncc.nn.Model of a spec graph in fp32 (sum and concat skips; or a bidirectional layer,
    mixed cells, residual layers and two outputs): every gradient within 1e-4 of the
    float64 backward's, with initial states on two layers."""
    import rnncc.nn as rnn

    torch.manual_seed(15)
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    m = rnn.Model(residual_stack("float32") if spec == "residual" else spec).cuda()
    for p in m.parameters():
        torch.nn.init.uniform_(p, -0.2, 0.2)
    model = m.spec
    first, last = model.layers[0], model.layers[-1]
    state = {}
    for layer in (first, last):
        h = torch.randn(B, layer.out_size, device="cuda", requires_grad=True)
        state[layer.name] = (h, torch.randn(B, layer.hidden_size, device="cuda", requires_grad=True)) \
            if layer.cell == "lstm" else h
    x = torch.randn(S, B, model.input_size, device="cuda", requires_grad=True)
    y, final = m(x, state)
    outs = list(y) if isinstance(y, tuple) else [y]
    finals = [t for v in final.values() for t in (v if isinstance(v, tuple) else (v,))]
    drawn = [torch.randn_like(o) for o in outs + finals]
    torch.autograd.backward(outs + finals, drawn)

    weights = {f"{n}.{k}": numpy64(p) for n, layer in m.layers.items() for k, p in layer.named_parameters()}
    s64 = {k: tuple(numpy64(p) for p in v) if isinstance(v, tuple) else numpy64(v) for k, v in state.items()}
    g_final, i = {}, len(outs)
    for name, v in final.items():
        g_final[name] = (numpy64(drawn[i]), numpy64(drawn[i + 1])) if isinstance(v, tuple) else numpy64(drawn[i])
        i += 2 if isinstance(v, tuple) else 1
    want = reference_grad.grad(model, weights, numpy64(x), [numpy64(d) for d in drawn[:len(outs)]], s64,
                               None, g_final)
    errors = {"x": max_relative_error(numpy64(x.grad), want.input)}
    for n, layer in m.layers.items():
        for k, p in layer.named_parameters():
            errors[f"{n}.{k}"] = max_relative_error(numpy64(p.grad), want.weights[f"{n}.{k}"])
    for name, v in state.items():
        for j, t in enumerate(v if isinstance(v, tuple) else (v,)):
            ref = want.state[name][j] if isinstance(v, tuple) else want.state[name]
            errors[f"state {name}[{j}]"] = max_relative_error(numpy64(t.grad), ref)
    assert max(errors.values()) <= 1e-4, errors


def test_torch_compile_fullgraph_with_backward(gpu, torch, rnncc_tagger):
    """The training forward is the custom op rnncc::forward_train with a registered autograd
    formula (the op rnncc::backward): compiled with fullgraph=True, a model of rnncc modules
    gives eager's loss and gradients."""
    torch.manual_seed(16)
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    model = rnncc_tagger(32, 48, 40).cuda()
    x = torch.randn(6, 11, 32, device="cuda")

    def grads(fn):
        model.zero_grad()
        loss = fn(x).square().mean()
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}
    eager_loss, eager = grads(model)
    compiled_loss, compiled = grads(torch.compile(model, fullgraph=True))
    assert torch.allclose(compiled_loss, eager_loss, rtol=1e-5)
    for n, g in eager.items():
        assert torch.allclose(compiled[n], g, rtol=1e-4, atol=1e-6), n


def test_torch_compile_fullgraph_with_dropout(gpu, torch):
    """A twin with dropout between layers compiles with fullgraph=True (its levels' specs
    are made at construction): in training mode the loss and every gradient are finite and
    the output differs from eval mode's (masks drawn by the compiled graph's generator, so
    not eager's); in eval mode the compiled output equals eager's."""
    import rnncc.nn as rnn

    torch.manual_seed(19)
    model = rnn.GRU(16, 24, num_layers=3, dropout=0.5, bidirectional=True).cuda()
    x = torch.randn(9, 4, 16, device="cuda")
    compiled = torch.compile(model, fullgraph=True)
    y, _ = compiled(x)
    y.square().mean().backward()
    assert torch.isfinite(y).all()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    model.eval()
    with torch.no_grad():
        eager = model(x)[0]
        assert not torch.allclose(y.detach(), eager)
        assert torch.allclose(compiled(x)[0], eager, rtol=1e-5, atol=1e-6)


def test_cuda_graph_captures_a_training_step(gpu, torch, monkeypatch):
    """Forward and backward of a twin captured in one CUDA graph (static parameters, as
    torch.cuda.graph's training recipe captures them): a replay gives eager's gradients."""
    monkeypatch.delenv("RNNCC_DEBUG_POISON")  # its memsets would run only at capture
    torch.manual_seed(17)
    model = twin(torch, "lstm", 32, 64, num_layers=2).cuda()
    x = torch.randn(50, 8, 32, device="cuda")
    params = list(model.parameters())

    def step():
        y, _ = model(x)
        return torch.autograd.grad(y.square().mean(), params)
    graph, static = capture(step, warm=3)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    for g, e in zip(static, step()):
        assert torch.allclose(g, e, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("cell,dtype,inputs,hidden,extra", [
    ("lstm", "float32", 24, 40, None), ("gru", "float16", 24, 40, None), ("lstm", "bfloat16", 24, 40, None),
    ("lstm", "float16", 24, 1024, None), ("lstm", "float16", 30, 40, "w_ih_rows"),
    ("lstm", "float32", 30, 1536, "w_hh")])
def test_optimizer_steps_reach_the_kernels_by_device_copies(gpu, torch, monkeypatch, cell, dtype, inputs,
                                                            hidden, extra):
    """A twin trained by an optimizer: after each step its next call packs the new
    parameters on the GPU into the memory its kernels read (CompiledModel.refresh_weights;
    the host path, load_state_dict, is never taken), and its outputs then equal, bit for
    bit, those of a fresh twin (same plan) given the trained parameters through the host.
    The half types' layers keep W_hh as mma fragments (H=40: a cluster's registers; H=1024:
    the grid kernel's shared memory), gathered on the device too; ``extra``: a form of the
    weights a plan reads besides, written on the device too: W_ih's rows padded for the
    projection's rows kernel (I=30 in half: 60-byte rows), W_hh's rows for the step
    kernel's rows form (float32 H=1536: no persistent mode holds W_hh)."""
    import rnncc.nn as rnn
    from rnncc import runtime

    torch.manual_seed(21)
    tdt = getattr(torch, dtype)
    model = twin(torch, cell, inputs, hidden, num_layers=2).to("cuda", tdt)
    x = torch.randn(9, 5, inputs, device="cuda", dtype=tdt)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model(x)  # compiled, weights uploaded
    if extra:  # the plan reads that form: the case covers what it says
        compiled = rnn._runner_of(rnn._training_spec(model._specs[dtype])).compiled[(dtype, False)][0]
        assert any(extra in names for names in compiled._device_weights.values())

    def through_the_host(*args, **kw):
        raise AssertionError("load_state_dict: the weights went through the host")
    host_path = runtime.CompiledModel.load_state_dict
    monkeypatch.setattr(runtime.CompiledModel, "load_state_dict", through_the_host)
    for _ in range(3):
        y, _ = model(x)
        y.float().square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    trained, _ = model(x)
    monkeypatch.setattr(runtime.CompiledModel, "load_state_dict", host_path)
    # A fresh twin (its own compiled model: runners are per module), given equal tensors through the host
    fresh = twin(torch, cell, inputs, hidden, num_layers=2).to("cuda", tdt)
    fresh.load_state_dict(model.state_dict())
    again, _ = fresh(x)
    assert torch.equal(trained, again)


@pytest.mark.parametrize("dtype,hidden,batch,what", [("float32", 512, 4, "grid barrier"),
                                                     ("float32", 512, 32, "grid barrier"),
                                                     ("float32", 256, 4, "cluster exchange"),
                                                     ("float16", 256, 4, "cluster exchange")])
def test_backward_spin_bound_raises_then_recovers(gpu, torch, monkeypatch, dtype, hidden, batch, what):
    """RNNCC_SPIN_TIMEOUT_MS=0 makes the backward's first wait give up (float32 H=512: the
    grid form's barrier, at B=32 the K-split grid form's; float32 H=256, the FMA cluster
    form, and fp16: the cluster form's exchange): the kernel ends, the next backward raises
    DeviceTimeout, and the one after is right again."""
    from rnncc import backward, tiles

    torch.manual_seed(18)
    model = twin(torch, "gru", 16, hidden).to("cuda", getattr(torch, dtype))
    x = torch.randn(40, batch, 16, device="cuda", dtype=getattr(torch, dtype))
    tile = backward._tile("gru", hidden, 3, dtype, batch)
    assert isinstance(tile, tiles.KSplitBackwardTile) == (batch == 32)

    def grads(bound_ms: str | None = None):
        model.zero_grad()
        y = model(x)[0]
        if bound_ms is not None:  # the backward's barrier alone: the forward ran unbounded
            monkeypatch.setenv("RNNCC_SPIN_TIMEOUT_MS", bound_ms)
        y.sum().backward()
        torch.cuda.synchronize()
        monkeypatch.delenv("RNNCC_SPIN_TIMEOUT_MS", raising=False)
        return model.weight_hh_l0.grad.clone()
    want = grads()
    grads("0")
    with pytest.raises(rnncc.DeviceTimeout, match=f"backward recurrence's {what}"):
        grads()
    assert torch.equal(grads(), want)


# (cell, dtype, H, B, S): the cluster form's tiles, clusters of 1 to 16 blocks (3, 6, 7 and
# 11 too), 1, 2 and 4 unit tiles a block, 2 to 8 warps along K (6 and 7 too), batch tiles of
# 8 and 16 rows, one cluster and several, units and rows of padding.
CLUSTER_CASES = [("lstm", "float16", 512, 8, 256), ("gru", "float16", 512, 20, 33),
                 ("lstm", "bfloat16", 33, 5, 7), ("rnn_tanh", "float16", 96, 1, 256),
                 ("rnn_relu", "bfloat16", 1, 64, 7), ("lstm", "float16", 256, 3, 1),
                 ("gru", "bfloat16", 100, 8, 64), ("lstm", "float16", 64, 17, 256),
                 ("rnn_tanh", "float16", 700, 8, 64),
                 # batch tiles of 8 rows in several clusters (above: B=17, 20) and of 16 (B=72:
                 # 9 clusters of 8 rows would take two waves of the 8 clusters of 16 held)
                 ("lstm", "float16", 256, 72, 7),
                 # the hybrid form (W_hh past the registers, part of each share in shared memory):
                 # 384, 288 and 480 threads, 10 to 20 k-steps of a share in registers, clusters of 11
                 # to 15, several clusters along the batch, odd batches
                 ("lstm", "float16", 650, 20, 35), ("gru", "bfloat16", 600, 13, 33),
                 ("rnn_tanh", "float16", 1400, 8, 64), ("gru", "float16", 700, 3, 7),
                 ("lstm", "bfloat16", 520, 64, 7), ("gru", "float16", 560, 64, 5),
                 # float32, the FMA form: clusters of 16, 15, 11 and 1, 1 to 32 units a block,
                 # 3 to 16 warps along K, lanes of 1 to 8 rows, one cluster and several.
                 ("lstm", "float32", 128, 16, 33), ("gru", "float32", 256, 64, 7),
                 ("lstm", "float32", 33, 5, 256), ("rnn_relu", "float32", 1, 3, 7),
                 ("lstm", "float32", 256, 9, 64), ("gru", "float32", 100, 20, 1),
                 ("rnn_tanh", "float32", 512, 8, 40)]


@pytest.mark.parametrize("case", CLUSTER_CASES, ids=lambda c: "-".join(map(str, c)))
def test_cluster_backward_recurrence_matches_the_grid_form(gpu, torch, case):
    """The backward recurrence in clusters (W_hh in registers, dG exchanged by bulk copies;
    mma for half layers, FMA for float32) against the grid form on the same inputs: dG (and
    a GRU's dG through W_hh), dh0 and dc0 agree within the dtype's tolerance of their
    largest, outputs poisoned first. Both run float32 arithmetic over dG rounded to the
    layer's type; only the product's order of summation differs."""
    from rnncc import backward, tiles
    from rnncc.dtypes import tolerance
    from rnncc.ir import Model

    cell, dtype, H, B, S = case
    G = len(CELL_GATES[cell])
    tdt = getattr(torch, dtype)
    layer = Model.from_dict({"name": "m", "input_size": 8, "dtype": dtype, "layers": [
        {"name": "l0", "cell": cell, "hidden_size": H}]}).layers[0]
    gen = torch.Generator(device="cuda").manual_seed(19)
    rand = lambda *shape: torch.randn(*shape, generator=gen, device="cuda")  # noqa: E731
    w_hh = (rand(G * H, H) / H ** 0.5).to(tdt)
    pre, pre_h = rand(S, B, G * H), (rand(S, B, G * H) if cell == "gru" else None)
    h_prev = rand(S, B, H).tanh().to(tdt)
    c0 = rand(B, H) if cell == "lstm" else None
    dy, dh_n = rand(S, B, H), rand(B, H)
    dc_n = rand(B, H) if cell == "lstm" else None
    optin = 227 * 1024
    grid = tiles.backward_tile(G, H, B, 132, tiles.grid_shared_max(optin))
    cluster = tiles.backward_kernel_tile(G, H, B, tdt.itemsize, 132, 16, optin)
    assert isinstance(cluster, tiles.FmaClusterBackwardTile if dtype == "float32" else tiles.ClusterBackwardTile)
    # not over the pre-activations (float32's default), which the second call reads
    want = backward.recurrence(layer, w_hh, pre, pre_h, h_prev, c0, dy, dh_n, dc_n, tile=grid, overwrite=False)
    got = backward.recurrence(layer, w_hh, pre, pre_h, h_prev, c0, dy, dh_n, dc_n, tile=cluster, overwrite=False)
    assert got[0].data_ptr() != want[0].data_ptr()
    torch.cuda.synchronize()
    bound = tolerance(dtype)
    for name, g, w in zip(("dG", "dG through W_hh", "dh0", "dc0"), got, want):
        if w is None:
            continue
        assert torch.isfinite(g).all(), name
        error = max_relative_error(g.float().cpu().numpy(), w.float().cpu().numpy())
        assert error <= bound, (name, error)


# (cell, H, B, S): float32 layers past the FMA cluster form (G·H > 1024), where the K-split
# form applies: clusters of 2, 4 and 8, lanes of 1 to 8 rows, chunks of 64 and 128 K rows,
# a last cluster with units of padding or blocks with none (H=516, 1000), two passes of rows
# (B=65), one step and one row.
KSPLIT_CASES = [("lstm", 1024, 64, 7), ("gru", 1000, 65, 33), ("rnn_relu", 1024, 1, 64), ("lstm", 516, 5, 1),
                ("rnn_tanh", 2048, 9, 7), ("gru", 512, 17, 40)]


@pytest.mark.parametrize("case", KSPLIT_CASES, ids=lambda c: "-".join(map(str, c)))
def test_ksplit_backward_recurrence_matches_the_grid_form(gpu, torch, case):
    """Every K-split tile of the case (tiles.ksplit_backward_tiles: K split across a cluster,
    the partial sums exchanged over DSMEM, a grid barrier a step) against the grid form on
    the same inputs, states given: dG (and a GRU's dG through W_hh), dh0 and dc0 within
    float32's tolerance of their largest, outputs poisoned first."""
    from rnncc import backward, tiles
    from rnncc.dtypes import tolerance
    from rnncc.ir import Model

    cell, H, B, S = case
    G = len(CELL_GATES[cell])
    layer = Model.from_dict({"name": "m", "input_size": 8, "dtype": "float32", "layers": [
        {"name": "l0", "cell": cell, "hidden_size": H}]}).layers[0]
    gen = torch.Generator(device="cuda").manual_seed(23)
    rand = lambda *shape: torch.randn(*shape, generator=gen, device="cuda")  # noqa: E731
    w_hh = rand(G * H, H) / H ** 0.5
    pre, pre_h = rand(S, B, G * H), (rand(S, B, G * H) if cell == "gru" else None)
    h_prev = rand(S, B, H).tanh()
    c0 = rand(B, H) if cell == "lstm" else None
    dy, dh_n = rand(S, B, H), rand(B, H)
    dc_n = rand(B, H) if cell == "lstm" else None
    target = backward._device()[0]
    shared_max = tiles.grid_shared_max(target.shared_memory_per_block_optin)
    found = tiles.ksplit_backward_tiles(G, H, B, target.clusters_at_once, shared_max)
    assert {t.cluster for t in found} == {2, 4, 8}
    grid = tiles.backward_tile(G, H, B, target.sm_count, shared_max)
    want = backward.recurrence(layer, w_hh, pre, pre_h, h_prev, c0, dy, dh_n, dc_n, tile=grid, overwrite=False)
    torch.cuda.synchronize()
    for tile in found:
        got = backward.recurrence(layer, w_hh, pre, pre_h, h_prev, c0, dy, dh_n, dc_n, tile=tile, overwrite=False)
        torch.cuda.synchronize()
        for name, g, w in zip(("dG", "dG through W_hh", "dh0", "dc0"), got, want):
            if w is None:
                continue
            assert torch.isfinite(g).all(), (tile, name)
            error = max_relative_error(g.cpu().numpy(), w.cpu().numpy())
            assert error <= tolerance("float32"), (tile, name, error)


# (cell, dtype, H, B, S, layers, bidirectional, batch_first, initial states given, what
# the loss reads): single layers and stacks, both directions, an odd batch, states given
# (their gradients are outputs too), and a loss of h_n alone (the sequence's gradient None).
REPLAYED_BACKWARD_CASES = [("lstm", "float16", 64, 8, 256, 1, False, False, False, "y"),
                           ("gru", "bfloat16", 33, 5, 7, 2, True, True, True, "y and h_n"),
                           ("lstm", "float32", 48, 3, 40, 2, False, False, True, "h_n"),
                           ("rnn_tanh", "float16", 100, 1, 1, 1, False, True, False, "y sum")]


@pytest.mark.parametrize("case", REPLAYED_BACKWARD_CASES, ids=lambda c: "-".join(map(str, c[:8])))
def test_replayed_backward_equals_the_direct_one(gpu, torch, monkeypatch, case):
    """An eager backward seen twice is captured and replayed from a CUDA graph
    (rnncc.call_graphs): five steps on new inputs and output gradients each give
    exactly the gradients of the backward run directly, a graph was captured, and
    gradients handed out by one replay stay as they were after the next."""
    import rnncc.backward as backward
    import rnncc.nn as rnn

    cell, dtype, H, B, S, layers, bi, batch_first, given, reads = case
    tdt = getattr(torch, dtype)
    torch.manual_seed(19)
    module = twin(torch, cell, 24, H, num_layers=layers, bidirectional=bi,
                  batch_first=batch_first).to("cuda", tdt)
    params = list(module.parameters())
    D = 2 if bi else 1

    def step(seed: int):
        gen = torch.Generator(device="cuda").manual_seed(seed)
        draw = lambda *shape: torch.randn(*shape, generator=gen, device="cuda").to(tdt)  # noqa: E731
        x = draw(*((B, S) if batch_first else (S, B)), 24).requires_grad_()
        hx = None
        if given:
            hx = draw(layers * D, B, H).requires_grad_()
            hx = (hx, draw(layers * D, B, H).requires_grad_()) if cell == "lstm" else hx
        y, state = module(x, hx)
        h_n = state[0] if cell == "lstm" else state
        loss = {"y": lambda: (y * draw(*y.shape)).sum(), "h_n": lambda: (h_n * draw(*h_n.shape)).sum(),
                "y and h_n": lambda: (y * draw(*y.shape)).sum() + (h_n * draw(*h_n.shape)).sum(),
                "y sum": lambda: y.float().sum()}[reads]()
        wrt = [x, *(hx if isinstance(hx, tuple) else (hx,) if hx is not None else ()), *params]
        return torch.autograd.grad(loss, wrt)

    captures = rnn._BACKWARD_GRAPHS.captures
    replayed, kept = [], None
    for seed in range(5):
        replayed.append(step(seed))
        if kept is not None:  # the step before's gradients, after this step's replay
            assert all(torch.equal(a, b) for a, b in zip(kept, replayed[-2])), seed
        kept = [g.clone() for g in replayed[-1]]
    assert rnn._BACKWARD_GRAPHS.captures == captures + 1
    monkeypatch.setattr(backward, "graph_worthy", lambda *a: False)
    direct = [step(seed) for seed in range(5)]
    for seed, (ours, want) in enumerate(zip(replayed, direct)):
        for i, (a, b) in enumerate(zip(ours, want)):
            assert torch.isfinite(a).all() and torch.equal(a, b), (seed, i)


def test_replayed_backward_from_two_streams(gpu, torch, monkeypatch):
    """One twin's training steps on two streams, interleaved: each stream replays a graph
    of its own (their copies of the inputs are not shared), and every step's gradients
    equal those of the same step run directly."""
    import rnncc.backward as backward
    import rnncc.nn as rnn

    torch.manual_seed(20)
    module = twin(torch, "lstm", 16, 40).to("cuda", torch.float16)
    params = list(module.parameters())
    xs = [torch.randn(64, 4, 16, device="cuda", dtype=torch.float16) for _ in range(6)]

    def step(x):
        x = x.clone().requires_grad_()
        return torch.autograd.grad(module(x)[0].float().square().sum(), [x, *params])
    with monkeypatch.context() as direct:
        direct.setattr(backward, "graph_worthy", lambda *a: False)
        want = [step(x) for x in xs]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    captures = rnn._BACKWARD_GRAPHS.captures
    got = []
    for _ in range(2):  # the second round replays on both streams
        for i, x in enumerate(xs):
            stream = streams[i % 2]
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                got.append(step(x))
    torch.cuda.synchronize()
    assert rnn._BACKWARD_GRAPHS.captures == captures + 2
    for k, grads in enumerate(got):
        for a, b in zip(grads, want[k % len(xs)]):
            assert torch.equal(a, b), k


def assert_one_stream_gives_the_same(torch, monkeypatch, step, streams: str, one_stream):
    """``step()`` → (gradients, their sums queued at once on the caller's stream), run on a
    caller's stream that is not the default one, equals ``step()`` with
    ``backward.<streams>`` replaced by ``one_stream`` (everything on the current stream),
    bit for bit, sums too: the caller's stream has the gradients when the step returns.
    Returns the one-stream gradients."""
    import rnncc.backward as backward

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        got, got_sums = step()
    with monkeypatch.context() as one:
        one.setattr(backward, streams, one_stream)
        want, want_sums = step()
    torch.cuda.synchronize()
    for k, (a, b) in enumerate(zip(got, want)):
        assert torch.equal(a, b), k
        assert torch.equal(got_sums[k], want_sums[k]), k
    return want


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_weight_gradients_on_side_streams_equal_one_streams(gpu, torch, monkeypatch, cell):
    """The weights' gradients, queued on two side streams beside each other and dx, equal
    those of a backward that queues everything on the caller's stream, bit for bit;
    and the caller's stream (not the default one) has them when the step returns: a sum
    queued there at once reads them complete."""
    import rnncc.backward as backward

    torch.manual_seed(21)
    module = twin(torch, cell, 24, 40, num_layers=3).to("cuda", torch.float16)
    params = list(module.parameters())
    x = torch.randn(33, 5, 24, device="cuda", dtype=torch.float16)
    monkeypatch.setattr(backward, "graph_worthy", lambda *a: False)  # each step direct

    def step():
        xg = x.clone().requires_grad_()
        grads = torch.autograd.grad(module(xg)[0].float().square().sum(), [xg, *params])
        return grads, [g.float().sum() for g in grads]  # queued on the caller's stream at once
    assert_one_stream_gives_the_same(torch, monkeypatch, step, "side_streams",
                                     lambda device, s: (torch.cuda.current_stream(),) * 2)


@pytest.mark.parametrize("cell,dtype", [("lstm", "float16"), ("gru", "float32")])
def test_bidirectional_halves_on_two_streams_equal_one_after_the_other(gpu, torch, monkeypatch, cell, dtype):
    """A bidirectional stack's halves backpropagate at once, one on a lane stream
    (backward.lane_streams): the gradients of x, h0, c0 and every parameter, the final
    states' gradients given, equal those of one half after the other bit for bit, on a
    caller's stream not the default one (a sum queued there at once reads them complete),
    and replayed from rnncc's call graphs (direct, captured, replayed) too."""
    import rnncc.backward as backward
    import rnncc.nn as rnn

    torch.manual_seed(24)
    tdt = getattr(torch, dtype)
    S, B, I, H, L = 29, 5, 24, 40, 2
    module = twin(torch, cell, I, H, num_layers=L, bidirectional=True).to("cuda", tdt)
    params = list(module.parameters())
    x = torch.randn(S, B, I, device="cuda", dtype=tdt)
    d_out = torch.randn(S, B, 2 * H, device="cuda", dtype=tdt)
    d_final = [torch.randn(2 * L, B, H, device="cuda", dtype=tdt) for _ in range(2 if cell == "lstm" else 1)]
    worthy = backward.graph_worthy
    monkeypatch.setattr(backward, "graph_worthy", lambda *a: False)  # each step direct
    queued = []
    real = backward.lane_streams
    monkeypatch.setattr(backward, "lane_streams", lambda *a: queued.append(a[2]) or real(*a))

    def step():
        xg = x.clone().requires_grad_()
        y, state = module(xg)
        finals = list(state) if isinstance(state, tuple) else [state]
        grads = torch.autograd.grad([y, *finals], [xg, *params], [d_out, *d_final])
        return grads, [g.float().sum() for g in grads]  # queued on the caller's stream at once
    want = assert_one_stream_gives_the_same(torch, monkeypatch, step, "lane_streams",
                                            lambda device, s, count: (torch.cuda.current_stream(),) * count)
    assert queued == [1] * L  # a lane a bidirectional layer (the one-stream run replaced lane_streams)
    monkeypatch.setattr(backward, "graph_worthy", worthy)
    assert worthy(rnn._model_of(module._specs[dtype]), S, B)
    for _ in range(3):  # direct, captured by rnncc's call graphs, replayed
        for k, (a, b) in enumerate(zip(step()[0], want)):
            assert torch.equal(a, b), k


def test_backward_graphs_capture_on_the_second_sighting_and_never_recapture(gpu, torch):
    """rnncc.call_graphs's cache on plain torch bodies: direct on the first sighting,
    captured on the second, replayed on new inputs after; a graph dropped for room is not
    captured again (direct from then on); a body that cannot be captured (it reads a value
    back to the host) runs directly, its reason kept; and on a capturing stream the body
    runs as it is, into the caller's graph."""
    from rnncc.call_graphs import CallGraphs

    graphs = CallGraphs(capacity=1)
    double = lambda ins: [ins[0] * 2, ins[0].sum(0)]  # noqa: E731
    xs = [torch.randn(5, 3, device="cuda") for _ in range(4)]
    for k, x in enumerate(xs):
        y, s = graphs.run("double", [x], double)
        assert torch.equal(y, x * 2) and torch.allclose(s, x.sum(0)), k
        assert graphs.captures == (0 if k == 0 else 1)
    graphs.run("other", [xs[0]], double)
    graphs.run("other", [xs[0]], double)  # captured: "double" dropped for room
    assert graphs.captures == 2 and len(graphs) == 1 and len(graphs.dropped) == 1
    y, _ = graphs.run("double", [xs[1]], double)
    y2, _ = graphs.run("double", [xs[2]], double)
    assert graphs.captures == 2 and torch.equal(y, xs[1] * 2) and torch.equal(y2, xs[2] * 2)

    reads_back = lambda ins: [ins[0] * float(ins[0].sum())]  # noqa: E731
    for x in xs[:3]:
        (got,) = graphs.run("reads back", [x], reads_back)
        assert torch.allclose(got, x * float(x.sum()))
    assert graphs.captures == 2 and len(graphs.failed) == 1

    graph = torch.cuda.CUDAGraph()
    static = xs[3].clone()
    with torch.cuda.graph(graph):
        captured_y, _ = graphs.run("inside", [static], double)
    static.copy_(xs[0])
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured_y, xs[0] * 2) and graphs.captures == 2


# (cell, dtype, compile options): each recurrent kernel form a training forward can run,
# every cell, in a model of a bidirectional layer (its reverse half walks down) under a
# residual layer; S and B odd.
SAVED_GATE_CASES = [("lstm", "float32", dict(persistence="none")),
                    ("gru", "float32", dict(persistence="none", step_kernel="rows")),
                    ("rnn_tanh", "float16", dict(persistence="none", gemm="cublas")),
                    ("gru", "float16", dict(persistence="none", step_kernel="rows")),
                    ("lstm", "float32", dict(persistence="grid")),
                    ("gru", "float16", dict(persistence="grid")),
                    ("lstm", "bfloat16", dict(persistence="cluster")),
                    ("gru", "float32", dict(persistence="cluster")),
                    ("rnn_relu", "float32", dict(persistence="cluster")),
                    ("lstm", "float16", dict(schedule="pipelined", unroll=4))]


def reference_pre_activations(cell: str, w: dict, x, h, reverse: bool):
    """float64 pre-activations of one layer as a training forward saves them, from its
    input x and h sequence [S, B, ·] (time order): run order, torch's gate order; a GRU's
    (x part with b_hr and b_hz folded in, h part with b_hn), else one array."""
    if reverse:
        x, h = x[::-1], h[::-1]
    h_prev = np.concatenate([np.zeros_like(h[:1]), h[:-1]])
    b_ih = w.get("bias_ih", np.zeros(w["weight_ih"].shape[0]))
    b_hh = w.get("bias_hh", np.zeros(w["weight_hh"].shape[0]))
    xw, hw = x @ w["weight_ih"].T + b_ih, h_prev @ w["weight_hh"].T + b_hh
    if cell != "gru":
        return (xw + hw,)
    H = h.shape[-1]
    xw[..., :2 * H] += b_hh[:2 * H]
    hw[..., :2 * H] -= b_hh[:2 * H]
    return xw, hw


@pytest.mark.parametrize("case", SAVED_GATE_CASES, ids=lambda c: "-".join([c[0], c[1], *map(str, c[2].values())]))
def test_training_forward_saves_the_pre_activations(gpu, torch, case):
    """A model compiled with backward_gates="save" writes every layer's pre-activations
    into the buffers it is given (poisoned with NaN first), equal to float64 ones rebuilt
    from its weights, input and h sequences; its outputs are unchanged by saving."""
    cell, dtype, options = case
    H, S, B, I = 17, 7, 5, 12
    spec = {"name": "saved_gates", "dtype": dtype, "input_size": I,
            "layers": [{"name": "a", "cell": cell, "hidden_size": H, "direction": "bidirectional"},
                       {"name": "b", "cell": cell, "hidden_size": 2 * H, "input": "a", "residual": True}],
            "outputs": ["a", "b"]}
    precision = "exact" if dtype == "float32" else None
    m = rnncc.compile(spec, target="device", backward_gates="save", seq_len=S, batch=B,
                      precision=precision, **options)
    plain = rnncc.compile(spec, target="device", seq_len=S, batch=B, precision=precision,
                          weights=m.state_dict(), **options)
    assert all(l.backward_gates.value == "save" for l in m.variant(S, B).plan.layers)
    tdt = getattr(torch, dtype)
    torch.manual_seed(3)
    x = torch.randn(S, B, I, device="cuda").to(tdt)
    gates = {}
    for l in m.variant(S, B).plan.layers:
        parts = [torch.full((S, B, l.gates * l.hidden_size), float("nan"), device="cuda")
                 for _ in range(2 if cell == "gru" else 1)]
        gates[l.name] = tuple(parts) if cell == "gru" else parts[0]
    (a, b), _ = m(x, gates=gates)
    (a0, b0), _ = plain(x)
    torch.cuda.synchronize()
    assert torch.equal(a, a0) and torch.equal(b, b0)

    w = {k: v.astype(np.float64) for k, v in m.state_dict().items()}
    weights = lambda name: {k.partition(".")[2]: v for k, v in w.items() if k.partition(".")[0] == name}  # noqa: E731
    x64, a64, b64 = (numpy64(t) for t in (x, a, b))
    inputs = {"a": (x64, a64[..., :H], False), "a_reverse": (x64, a64[..., H:], True),
              "b": (a64, b64 - a64, False)}  # b's tensor is h + its input
    tolerance = 1e-5 if dtype == "float32" else 2e-2
    for name, (x_l, h_l, reverse) in inputs.items():
        want = reference_pre_activations(cell, weights(name), x_l, h_l, reverse)
        got = gates[name] if cell == "gru" else (gates[name],)
        for part, (g, ref) in enumerate(zip(got, want)):
            assert not torch.isnan(g).any(), f"{name}[{part}]: unwritten elements"
            assert max_relative_error(numpy64(g), ref) <= tolerance, (name, part)

    # The call again with new poisoned buffers: a recorded call is replayed from the tensors
    # alone (none of _gate_arrays' checks) and writes the same values; a buffer that differs
    # from the recorded call's goes the long way and is checked.
    from rnncc.errors import RuntimeCheckError

    checked, check = [], m._gate_arrays
    m._gate_arrays = lambda *a, **k: checked.append(1) or check(*a, **k)
    again = {name: tuple(torch.full_like(t, float("nan")) for t in g) if cell == "gru"
             else torch.full_like(g, float("nan")) for name, g in gates.items()}
    (a1, b1), _ = m(x, gates=again)
    torch.cuda.synchronize()
    replayable = any(e.program is not None for e in m._programs.values())
    assert replayable == (not checked), "a recorded call was not replayed from its tensors"
    assert torch.equal(a1, a) and torch.equal(b1, b)
    for name, g in gates.items():
        pairs = zip(g, again[name]) if cell == "gru" else [(g, again[name])]
        assert all(torch.equal(first, second) for first, second in pairs), name
    wrong = dict(again, b=tuple(t.double() for t in again["b"]) if cell == "gru" else again["b"].double())
    with pytest.raises(RuntimeCheckError, match=r"gates\['b'\]"):
        m(x, gates=wrong)


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn_tanh"])
@pytest.mark.parametrize("form", ["staged", "registers"])
def test_staged_grid_forward_saves_the_pre_activations(gpu, torch, cell, form):
    """The FMA grid kernel with h staged by chunks, and its registers form (forced; float32
    plans pick them where they are predicted faster) in a training forward: the
    pre-activations it writes into NaN-poisoned buffers equal float64 ones rebuilt from its
    weights, input and h sequence, at H=516 (K padded to whole chunks, or to the warps'
    float4s) and a batch that is not a multiple of its tile."""
    from rnncc.passes.cost import persistent_seconds, register_tiles, staged_tiles
    from rnncc.tiles import Persistent

    H, S, I = 516, 9, 20
    B = 37 if form == "staged" else 13
    spec = {"name": "staged_gates", "dtype": "float32", "input_size": I,
            "layers": [{"name": "l0", "cell": cell, "hidden_size": H}]}
    m = rnncc.compile(spec, target="device", backward_gates="save", seq_len=S, batch=B, precision="exact",
                      persistence="grid", gemm="rnncc")
    G = m.plan.layers[0].gates
    candidates = {"staged": staged_tiles, "registers": register_tiles}[form](H, G, B, m.target)
    tile = min(candidates, key=lambda t: persistent_seconds(B, H, G, t, m.target, 4))
    m = m.with_persistence("l0", Persistent.of("grid", "fma", tile, H, G, 4), "forced by the test")
    assert getattr(m.plan.layers[0].persistence.value, form)
    torch.manual_seed(5)
    x = torch.randn(S, B, I, device="cuda")
    parts = tuple(torch.full((S, B, G * H), float("nan"), device="cuda") for _ in range(2 if cell == "gru" else 1))
    y, _ = m(x, gates={"l0": parts if cell == "gru" else parts[0]})
    torch.cuda.synchronize()
    w = {k.partition(".")[2]: v.astype(np.float64) for k, v in m.state_dict().items()}
    want = reference_pre_activations(cell, w, numpy64(x), numpy64(y), False)
    for part, (g, ref) in enumerate(zip(parts, want)):
        assert not torch.isnan(g).any(), f"part {part}: unwritten elements"
        assert max_relative_error(numpy64(g), ref) <= 1e-5, part


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_saved_and_recomputed_pre_activations_give_the_same_gradients(gpu, torch, cell):
    """The backward from the forward's saved pre-activations equals the backward that
    recomputes them (the path of a plan that does not save), float32, to rounding."""
    import rnncc.nn as rnn
    from rnncc import backward

    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(4)
    module = twin(torch, cell, 20, 48, num_layers=2).cuda()
    spec = module._specs["float32"]
    model, train = rnn._model_of(spec), rnn._model_of(rnn._training_spec(spec))
    named = module._weights()
    x = torch.randn(9, 3, 20, device="cuda")
    assert rnn._saving_layers(spec, named, x) == {"l0", "l1"}
    out = rnn._forward_train_cuda(spec, x, list(named.values()), [], [])
    *_, sequences, _ = rnn._backward_inputs(*rnn._saved_by_training(spec, x, list(named.values()), [], [], out))
    tensors = {o.name: t for o, t in zip(train.outputs, sequences) if o.is_layer}
    saved: dict = {}
    for (name, _), t in zip(rnn._gate_shapes(model, 9, 3), sequences[len(train.outputs):]):
        saved[name] = (*saved.get(name, ()), t)
    dy = [torch.randn_like(out[0])]
    got = backward.model_backward(model, named, x, tensors, {}, dy, {}, saved)
    want = backward.model_backward(model, named, x, tensors, {}, dy, {}, None)
    assert max_relative_error(numpy64(got[0]), numpy64(want[0])) <= 1e-5
    for k in want[1]:
        assert max_relative_error(numpy64(got[1][k]), numpy64(want[1][k])) <= 1e-5, k
