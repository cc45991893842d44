"""Weight names, shapes, init, from_torch and the packing the kernels read."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import rnncc
from rnncc import reference, weights
from rnncc.dtypes import from_storage, round_to, to_storage

SPEC = {"name": "w", "input_size": 5,
        "layers": [{"name": "a", "cell": "lstm", "hidden_size": 6},
                   {"name": "b", "cell": "gru", "hidden_size": 7, "bias": False}]}


def test_shapes_and_init_bounds():
    m = rnncc.load(SPEC)
    w = weights.init(m, seed=3)
    assert set(w) == {"a.weight_ih", "a.weight_hh", "a.bias_ih", "a.bias_hh", "b.weight_ih", "b.weight_hh"}
    assert w["a.weight_ih"].shape == (24, 5) and w["b.weight_hh"].shape == (21, 7)
    assert np.abs(w["a.weight_hh"]).max() <= 1 / np.sqrt(6)
    assert not np.array_equal(w["a.weight_ih"], weights.init(m, seed=4)["a.weight_ih"])


def test_check_reports_missing_unexpected_and_shape():
    m = rnncc.load(SPEC)
    w = weights.init(m)
    with pytest.raises(rnncc.SpecError, match=r"missing a.bias_hh; unexpected a.bias_xx"):
        weights.check(m, {**{k: v for k, v in w.items() if k != "a.bias_hh"}, "a.bias_xx": 0})
    with pytest.raises(rnncc.SpecError, match=r"layer 'b', weight 'weight_ih': got shape \(3, 6\), expected \(21, 6\)"):
        weights.check(m, {**w, "b.weight_ih": np.zeros((3, 6))})
    assert set(weights.check(m, {"a.weight_ih": w["a.weight_ih"]}, strict=False)) == {"a.weight_ih"}


@pytest.mark.parametrize("cell,G", [("lstm", 4), ("gru", 3), ("rnn_relu", 1)])
def test_packing_computes_the_same_step(cell, G):
    """The packed matrices, used the way the kernels use them, give the reference step."""
    m = rnncc.load({"name": "p", "input_size": 5, "layers": [{"name": "l", "cell": cell, "hidden_size": 6}]})
    w = weights.init(m, seed=1)
    p = weights.pack(m.layers[0], w)
    rng = np.random.default_rng(0)
    x, h = rng.normal(size=(3, 5)), rng.normal(size=(3, 6))
    xp = (x @ p.w_ih.T.astype(np.float64) + p.bias).reshape(3, 6, G)   # [b, unit, gate]
    hw = (h @ p.w_hh_t.astype(np.float64)).reshape(3, 6, G)
    if cell == "lstm":
        sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
        c = sig(xp[..., 1] + hw[..., 1]) * 0 + sig(xp[..., 0] + hw[..., 0]) * np.tanh(xp[..., 2] + hw[..., 2])
        h_new = sig(xp[..., 3] + hw[..., 3]) * np.tanh(c)
    elif cell == "gru":
        sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
        r, z = sig(xp[..., 0] + hw[..., 0]), sig(xp[..., 1] + hw[..., 1])
        n = np.tanh(xp[..., 2] + r * (hw[..., 2] + p.bias_hn))
        h_new = (1 - z) * n + z * h
    else:
        h_new = np.maximum(xp[..., 0] + hw[..., 0], 0)
    state = {"l": (h, np.zeros((3, 6)))} if cell == "lstm" else {"l": h}
    (want,), _ = reference.run(m, w, x[None], state)
    np.testing.assert_allclose(h_new, want[0], atol=1e-6)


def test_from_torch_names_and_rejections():
    torch = pytest.importorskip("torch")
    model, w = rnncc.from_torch(torch.nn.GRU(4, 8, num_layers=2, bias=False))
    assert [l.name for l in model.layers] == ["l0", "l1"] and model.layers[1].input_size == 8
    assert set(w) == {"l0.weight_ih", "l0.weight_hh", "l1.weight_ih", "l1.weight_hh"}
    model, w = rnncc.from_torch(torch.nn.LSTM(4, 8, num_layers=2, proj_size=2))
    assert [l.proj_size for l in model.layers] == [2, 2] and model.layers[1].input_size == 2
    assert w["l1.weight_hh"].shape == (32, 2) and w["l1.weight_hr"].shape == (2, 8)
    with pytest.raises(rnncc.SpecError, match="expected torch.nn.LSTM"):
        rnncc.from_torch(torch.nn.Linear(4, 8))


@pytest.mark.parametrize("bidirectional,proj_size", [(False, 0), (True, 0), (True, 3)])
def test_to_torch_round_trip(bidirectional, proj_size):
    torch = pytest.importorskip("torch")
    mod = torch.nn.LSTM(4, 8, num_layers=2, bidirectional=bidirectional, proj_size=proj_size)
    model, w = rnncc.from_torch(mod)
    back = weights.to_torch(model, w)
    assert back.bidirectional == bidirectional and back.proj_size == proj_size
    for k, v in mod.state_dict().items():
        assert torch.equal(back.state_dict()[k], v)
    assert weights.to_torch(rnncc.load(SPEC), weights.init(rnncc.load(SPEC))) is None  # mixed cells


def test_bfloat16_storage_rounds_to_nearest_even():
    v = np.array([1.0, 1.00390625, 1.01171875, -3.14159, np.float32(1e-40)], np.float32)
    back = from_storage(to_storage(v, "bfloat16"), "bfloat16")
    assert back[0] == 1.0 and back[1] == 1.0  # halfway: to even
    assert back[2] == 1.015625
    assert abs(back[3] + 3.140625) < 1e-6
    np.testing.assert_array_equal(round_to(v, "float16"), v.astype(np.float16).astype(np.float32))


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn_tanh", "rnn_relu"])
def test_bidirectional_reference_equals_torch(cell):
    """A bidirectional stack from torch.nn: rnncc's layers l0, l0_reverse, l1, l1_reverse
    (torch's weight suffixes), outputs [forward, backward] and final states in torch's
    order, from given initial states, in float64."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    kinds = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}
    kw = dict(num_layers=2, bidirectional=True)
    mod = (kinds[cell](5, 6, **kw) if cell in kinds
           else torch.nn.RNN(5, 6, nonlinearity=cell.removeprefix("rnn_"), **kw))
    model, w = rnncc.from_torch(mod)
    assert [l.name for l in model.layers] == ["l0", "l0_reverse", "l1", "l1_reverse"]
    assert [l.reverse for l in model.layers] == [False, True, False, True]
    assert model.layers[2].input_size == 12 and model.outputs[0].size == 12
    mod = mod.double()
    x = torch.randn(7, 3, 5, dtype=torch.float64)
    h0 = torch.randn(4, 3, 6, dtype=torch.float64)
    c0 = torch.randn(4, 3, 6, dtype=torch.float64)
    hx = (h0, c0) if cell == "lstm" else h0
    state = {l.name: ((h0[i].numpy(), c0[i].numpy()) if cell == "lstm" else h0[i].numpy())
             for i, l in enumerate(model.layers)}
    with torch.no_grad():
        y, st = mod(x, hx)
    (got,), final = reference.run(model, w, x.numpy(), state)
    np.testing.assert_allclose(got, y.numpy(), atol=1e-6)  # w is float32: same values
    h_n = st[0] if cell == "lstm" else st
    for i, l in enumerate(model.layers):
        h = final[l.name][0] if cell == "lstm" else final[l.name]
        np.testing.assert_allclose(h, h_n[i].numpy(), atol=1e-6)


def test_folded_lstmp_recurrence_equals_the_reference():
    """The folded form as the kernels run it, from the packed arrays: the recurrence on r
    from r = 0 through w_fold_t ((W_hh·W_hr)ᵀ, w_hh_t's columns), h0·W_hhᵀ added to the
    first step's projection, then h = r·W_hrᵀ; the reference's LSTMP, h0 and c0 given."""
    m = rnncc.load({"name": "p", "input_size": 5, "layers": [
        {"name": "l", "cell": "lstm", "hidden_size": 6, "proj_size": 4}]})
    w = weights.init(m, seed=2)
    p = weights.pack(m.layers[0], w)
    w_fold_t = weights.fold_projection(m.layers[0], w)
    np.testing.assert_allclose(w_fold_t, p.w_hr.T.astype(np.float64) @ p.w_hh_t, rtol=1e-6, atol=1e-7)
    rng = np.random.default_rng(1)
    S, B, H = 5, 3, 6
    x, h0, c0 = rng.normal(size=(S, B, 5)), rng.normal(size=(B, 4)), rng.normal(size=(B, H))
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    xp = (x @ p.w_ih.T.astype(np.float64) + p.bias).reshape(S, B, H * 4)
    xp[0] += h0 @ p.w_hh_t.astype(np.float64)
    r, c, ys = np.zeros((B, H)), c0, []
    for t in range(S):
        g = (xp[t] + r @ w_fold_t.astype(np.float64)).reshape(B, H, 4)
        c = sig(g[..., 1]) * c + sig(g[..., 0]) * np.tanh(g[..., 2])
        r = sig(g[..., 3]) * np.tanh(c)
        ys.append(r @ p.w_hr.T.astype(np.float64))
    (want,), state = reference.run(m, w, x, {"l": (h0, c0)})
    np.testing.assert_allclose(np.stack(ys), want, atol=1e-5)
    np.testing.assert_allclose(c, state["l"][1], atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_pack_tensors_is_pack_byte_for_byte(dtype):
    """weights.pack_tensors (the device-side packing of refresh_weights) gives, for every
    cell, with and without biases and with proj_size, the bytes the runtime uploads from
    weights.pack: the same arrays, in the same order, weights rounded to the storage dtype
    (ties included, where bfloat16 rounds to nearest even), biases float32. (A NaN stays a
    NaN, of torch's bit pattern.)"""
    torch = pytest.importorskip("torch")
    spec = {"name": "p", "input_size": 5, "dtype": dtype, "layers": [
        {"name": "a", "cell": "lstm", "hidden_size": 6},
        {"name": "b", "cell": "gru", "hidden_size": 7, "bias": False},
        {"name": "c", "cell": "gru", "hidden_size": 3},
        {"name": "d", "cell": "rnn_tanh", "hidden_size": 4},
        {"name": "e", "cell": "lstm", "hidden_size": 8, "proj_size": 3}]}
    m = rnncc.load(spec)
    w = weights.init(m, seed=5)
    w["a.weight_hh"][0, :3] = [1.00390625, 1.01171875, -1.00390625]  # bf16 ties
    tensors = {k: torch.from_numpy(v.copy()).to(getattr(torch, dtype)) if k.endswith("weight_ih") else
               torch.from_numpy(v.copy()) for k, v in w.items()}  # some given in the storage dtype
    host = {k: t.float().numpy() for k, t in tensors.items()}
    for layer in m.layers:
        packed = weights.pack(layer, host)
        got = weights.pack_tensors(layer, tensors, dtype)
        want = [(name, store) for name, store in weights.PACKED_ARRAYS if getattr(packed, name).size]
        assert list(got) == [name for name, _ in want]
        for name, store in want:
            arr = getattr(packed, name)
            expected = to_storage(arr, dtype) if store else np.ascontiguousarray(arr, np.float32)
            t = got[name]
            assert t.is_contiguous() and t.dtype == (getattr(torch, dtype) if store else torch.float32)
            assert t.view(torch.uint8).numpy().tobytes() == expected.tobytes(), (layer.name, name)


@pytest.mark.parametrize("gates,hidden,cluster,itemsize,wgmma", [
    (4, 40, 3, 2, False), (3, 33, 2, 2, False), (1, 50, 4, 2, False), (4, 24, 2, 4, False), (3, 20, 1, 4, False),
    (4, 40, 3, 2, True), (1, 256, 1, 2, True)])
def test_fragments_are_each_warps_rows_in_mma_order(gates, hidden, cluster, itemsize, wgmma):
    """weights.fragment_index (the registers form's W_hh, uploaded in the order its lanes
    load it): read back through the PTX ISA's A-fragment layout (lane l, register i, half
    p: row l / 4 + 8·(i & 1), k (MMA_K / 2)·(i >> 1) + PAIR·(l % 4) + p), each warp's 16
    rows over K are the gates of its units as the template orders them (a unit's gate g
    in row 8·(g / 2) + 2·unit + g % 2), zero past H and past G; and every element of W_hh
    is there exactly once. The same with its product by wgmma, whose A comes from the
    same registers (not the shared-memory wgmma form's swizzled image: afa4f4e took that
    one for it, and the GPU tests of the wgmma registers form failed)."""
    tile = replace(rnncc.tiles.TensorTile.registers_form(hidden, gates, cluster, 8), wgmma=wgmma)
    mk, pair = (16, 2) if itemsize == 2 else (8, 1)
    k_steps = tile.k_steps(hidden, itemsize)
    w_hh = np.random.default_rng(1).standard_normal((gates * hidden, hidden)).astype(np.float32)
    w_hh_t = weights.interleave_gates(w_hh, gates).T  # PackedLayer.w_hh_t
    index = weights.fragment_index(tile, hidden, gates, itemsize)
    assert weights.fragments_name(tile, hidden) == \
        f"w_hh_fragments_registers_u{tile.units_per_block}_m{tile.m_tiles}_k1_b{tile.cluster}"
    frag = weights.fragments(w_hh_t, index).reshape(tile.cluster, tile.m_tiles, k_steps, 32, 4, pair)
    inside = index[index < hidden * gates * hidden]
    assert np.array_equal(np.sort(inside), np.arange(hidden * gates * hidden))
    units = 16 // (4 if gates > 1 else 1)
    for rank in range(tile.cluster):
        for warp in range(tile.m_tiles):
            a = np.full((16, k_steps * mk), np.nan, np.float32)  # the warp's A, read back
            for s, lane, i, p in np.ndindex(k_steps, 32, 4, pair):
                a[lane // 4 + 8 * (i & 1), s * mk + (mk // 2) * (i >> 1) + pair * (lane % 4) + p] = \
                    frag[rank, warp, s, lane, i, p]
            want = np.zeros_like(a)
            for row in range(16):
                g, j = (2 * (row // 8) + row % 2, (row % 8) // 2) if gates > 1 else (0, row)
                u = rank * tile.units_per_block + warp * units + j
                if g < gates and u < hidden:
                    want[row, :hidden] = w_hh[g * hidden + u]  # torch's gate-major rows
            assert np.array_equal(a, want), (rank, warp)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_fragments_tensor_is_fragments_byte_for_byte(dtype):
    """refresh_weights' gather on the device (weights.fragments_tensor on pack_tensors'
    W_hhᵀ) gives the bytes the runtime uploads from the host (weights.fragments, then
    the storage dtype)."""
    torch = pytest.importorskip("torch")
    m = rnncc.load({"name": "f", "input_size": 5, "dtype": dtype,
                    "layers": [{"name": "a", "cell": "gru", "hidden_size": 36}]})
    w = weights.init(m, seed=2)
    layer = m.layers[0]
    itemsize = 4 if dtype == "float32" else 2
    index = weights.fragment_index(rnncc.tiles.TensorTile.registers_form(36, 3, 3, 8), 36, 3, itemsize)
    host = to_storage(weights.fragments(weights.pack(layer, w).w_hh_t, index), dtype)
    packed = weights.pack_tensors(layer, {k: torch.from_numpy(v) for k, v in w.items()}, dtype)["w_hh_t"]
    got = weights.fragments_tensor(packed, torch.from_numpy(index))
    assert got.view(torch.uint8).numpy().tobytes() == host.tobytes()


@pytest.mark.parametrize("gates,hidden,itemsize,tile", [
    (4, 30, 2, rnncc.tiles.TensorTile(10, 8, 2, 3, cluster=3)),               # cluster, K split in 2
    (3, 20, 2, rnncc.tiles.TensorTile(8, 8, 1, 2)),                           # grid: 3 blocks along x
    (4, 20, 4, rnncc.tiles.TensorTile(6, 8, 1, 2, cluster=4)),                # TF32
    (4, 40, 2, rnncc.tiles.TensorTile(16, 8, 1, 4, wgmma=True))])             # wgmma's swizzled A
def test_fragments_are_each_blocks_shared_memory_image(gates, hidden, itemsize, tile):
    """weights.fragment_index for the shared-memory forms: each block's W_BYTES, read back
    as tensor_core.cuh.j2 addresses w_frag (mma.sync: the A fragment of 16-row tile m / 16,
    k-step k / MMA_K; wgmma: swizzled_at(M_PAD, m, k)), are rows u0·G + m of W_hhᵀ's
    columns over K, zero past the block's units, past G·H and past H."""
    mk, pair = (16, 2) if itemsize == 2 else (8, 1)
    w_hh_t = np.random.default_rng(2).standard_normal((hidden, gates * hidden)).astype(np.float32)
    index = weights.fragment_index(tile, hidden, gates, itemsize)
    blocks = weights.fragment_blocks(tile, hidden)
    assert blocks == (tile.cluster or -(-hidden // tile.units_per_block))
    m_pad, k_pad = tile.m_tiles * 16, tile.k_padded(hidden, itemsize)
    k64 = -(-k_pad // 64) * 64
    per_block = m_pad * (k64 if tile.wgmma else k_pad)
    frag = weights.fragments(w_hh_t, index).reshape(blocks, per_block)
    inside = index[index < hidden * gates * hidden]
    assert np.array_equal(np.sort(inside), np.arange(hidden * gates * hidden))
    for b in range(blocks):
        for m in range(m_pad):
            for k in range(k_pad):
                if tile.wgmma:
                    at = k // 64 * m_pad * 64 + m * 64 + ((k % 64 // 8) ^ (m % 8)) * 8 + k % 8
                else:
                    kk = k % mk
                    lane, r = (m % 8) * 4 + (kk % (mk // 2)) // pair, (m % 16) // 8 + 2 * (kk // (mk // 2))
                    at = (((m // 16) * (k_pad // mk) + k // mk) * 32 + lane) * 4 * pair + r * pair + kk % pair
                column = b * tile.units_per_block * gates + m
                want = w_hh_t[k, column] if m < tile.units_per_block * gates and column < gates * hidden \
                    and k < hidden else 0.0
                assert frag[b, at] == want, (b, m, k)
