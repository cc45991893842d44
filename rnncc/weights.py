"""Weights: names and shapes (PyTorch's, per layer), random init, loading, packing.

A layer ``L`` has ``L.weight_ih`` [G·H, I], ``L.weight_hh`` [G·H, H] and, with bias,
``L.bias_ih`` and ``L.bias_hh`` [G·H], rows in PyTorch's gate order (LSTM i,f,g,o;
GRU r,z,n). An LSTM with ``proj_size`` P has ``L.weight_hh`` [4H, P] and
``L.weight_hr`` [P, H] (h = W_hr (o ⊙ tanh c)). ``torch.nn.LSTM``'s ``weight_ih_l0`` is rnncc's ``l0.weight_ih``.

Packing (what the kernels read) interleaves the gates of each hidden unit, row
``u·G + g`` holding gate ``g`` of unit ``u``, so one tile of the gate-concatenated GEMM
holds all gates of its units and the cell math fuses into the recurrent step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from .errors import SpecError
from .ir import Layer, Model
from .tiles import TensorTile, mma_k


def shapes(layer: Layer) -> dict[str, tuple[int, ...]]:
    """Each parameter's shape, in torch.nn's order (weight_hr last, as torch registers it)."""
    G, H, I = layer.gates, layer.hidden_size, layer.input_size
    out: dict[str, tuple[int, ...]] = {"weight_ih": (G * H, I), "weight_hh": (G * H, layer.out_size)}
    if layer.bias:
        out.update(bias_ih=(G * H,), bias_hh=(G * H,))
    if layer.proj_size:
        out["weight_hr"] = (layer.proj_size, H)
    return out


def expected_keys(model: Model) -> dict[str, tuple[int, ...]]:
    return {f"{l.name}.{k}": s for l in model.layers for k, s in shapes(l).items()}


def init(model: Model, seed: int = 0) -> dict[str, np.ndarray]:
    """PyTorch's default init: U(−1/√H, 1/√H) for every weight and bias (float32)."""
    rng = np.random.default_rng(seed)
    out = {}
    for layer in model.layers:
        bound = 1.0 / np.sqrt(layer.hidden_size)
        for k, shape in shapes(layer).items():
            out[f"{layer.name}.{k}"] = rng.uniform(-bound, bound, shape).astype(np.float32)
    return out


def _to_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor, possibly on the GPU or in bf16
        value = value.detach().float().cpu().numpy()
    elif hasattr(value, "get") and hasattr(value, "__cuda_array_interface__"):
        value = value.get()  # CuPy array / PyCUDA GPUArray
    return np.asarray(value, dtype=np.float32)


def check(model: Model, state_dict: Mapping[str, Any], strict: bool = True) -> dict[str, np.ndarray]:
    """Validate names and shapes; return float32 NumPy arrays keyed like :func:`expected_keys`."""
    expected = expected_keys(model)
    missing = [k for k in expected if k not in state_dict]
    unexpected = [k for k in state_dict if k not in expected]
    if strict and (missing or unexpected):
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing)}")
        if unexpected:
            parts.append(f"unexpected {', '.join(unexpected)}")
        raise SpecError(f"model '{model.name}' weights: {'; '.join(parts)}; expected keys "
                        f"like '{next(iter(expected))}' (layer.weight_ih/weight_hh/bias_ih/bias_hh"
                        f"{'/weight_hr' if any(l.proj_size for l in model.layers) else ''})")
    out = {}
    for key, shape in expected.items():
        if key not in state_dict:
            continue
        arr = _to_numpy(state_dict[key])
        if arr.shape != shape:
            layer, name = key.split(".", 1)
            raise SpecError(f"layer '{layer}', weight '{name}': got shape {arr.shape}, "
                            f"expected {shape}")
        out[key] = arr
    return out


def from_torch(module: Any) -> tuple[Model, dict[str, np.ndarray]]:
    """Spec and weights of a ``torch.nn.LSTM``, ``GRU`` or ``RNN`` (any ``num_layers``).

    Layers are named ``l0``, ``l1``… like PyTorch's ``_l0`` suffixes (a bidirectional
    module's backward halves ``l0_reverse``…, like ``_l0_reverse``). Dropout between
    layers is a training feature and is ignored (rnncc runs inference).
    """
    import torch

    kinds = {torch.nn.LSTM: "lstm", torch.nn.GRU: "gru"}
    cell = kinds.get(type(module))
    if cell is None and isinstance(module, torch.nn.RNN):
        cell = "rnn_tanh" if module.nonlinearity == "tanh" else "rnn_relu"
    if cell is None:
        raise SpecError(f"from_torch: got {type(module).__name__}, expected torch.nn.LSTM, "
                        "torch.nn.GRU or torch.nn.RNN")
    dtype = {torch.float32: "float32", torch.float16: "float16",
             torch.bfloat16: "bfloat16"}.get(module.weight_ih_l0.dtype)
    if dtype is None:
        raise SpecError(f"from_torch: parameters are {module.weight_ih_l0.dtype}, expected "
                        "float32, float16 or bfloat16")
    direction = {"direction": "bidirectional"} if module.bidirectional else {}
    proj = {"proj_size": module.proj_size} if getattr(module, "proj_size", 0) else {}
    layers = [{"name": f"l{i}", "cell": cell, "hidden_size": module.hidden_size,
               "bias": bool(module.bias)} | proj | direction for i in range(module.num_layers)]
    model = Model.from_dict({"name": f"torch_{cell}", "dtype": dtype,
                             "input_size": module.input_size, "layers": layers})
    params = dict(module.named_parameters())
    # rnncc's l0 and l0_reverse are torch's _l0 and _l0_reverse suffixes.
    state = {f"{l.name}.{k}": params[f"{k}_{l.name}"] for l in model.layers for k in shapes(l)}
    return model, check(model, state)


# ---- packing for the kernels ------------------------------------------------------------

@dataclass(frozen=True)
class PackedLayer:
    """One layer's weights as the kernels read them (float32 values; the runtime casts
    the matrices to the storage dtype)."""

    w_ih: np.ndarray        # [H·G, I]   row u·G+g = gate g of unit u (K-contiguous)
    w_hh_t: np.ndarray      # [P, H·G]   W_hhᵀ with the same interleaved columns (P: h's width)
    bias: np.ndarray        # [H·G]      float32, added in the input projection
    bias_hn: np.ndarray     # [H]        GRU only: b_hn, inside r ⊙ (W_hn h + b_hn); else empty
    w_hr: np.ndarray        # [P, H]     proj_size only: W_hr as torch's (h = r W_hrᵀ, K contiguous); else empty


def interleave_gates(rows: np.ndarray, gates: int) -> np.ndarray:
    """[G·H, …] in PyTorch's gate-major order → [H·G, …] unit-major (row u·G+g)."""
    gh = rows.shape[0]
    h = gh // gates
    return rows.reshape(gates, h, *rows.shape[1:]).swapaxes(0, 1).reshape(gh, *rows.shape[1:])


def pack(layer: Layer, weights: Mapping[str, np.ndarray]) -> PackedLayer:
    G, H = layer.gates, layer.hidden_size
    w_ih = np.asarray(weights[f"{layer.name}.weight_ih"], np.float32)
    w_hh = np.asarray(weights[f"{layer.name}.weight_hh"], np.float32)
    if layer.bias:
        b_ih = np.asarray(weights[f"{layer.name}.bias_ih"], np.float32)
        b_hh = np.asarray(weights[f"{layer.name}.bias_hh"], np.float32).copy()
    else:
        b_ih = np.zeros(G * H, np.float32)
        b_hh = np.zeros(G * H, np.float32)
    bias_hn = np.zeros(0, np.float32)
    if layer.cell == "gru":
        # b_hn is multiplied by r, so it cannot be folded into the projection bias.
        bias_hn = b_hh[2 * H:].copy()
        b_hh[2 * H:] = 0.0
    bias = (b_ih.astype(np.float64) + b_hh).astype(np.float32)
    return PackedLayer(
        w_ih=np.ascontiguousarray(interleave_gates(w_ih, G)),
        w_hh_t=np.ascontiguousarray(interleave_gates(w_hh, G).T),
        bias=np.ascontiguousarray(interleave_gates(bias, G)),
        bias_hn=bias_hn,
        w_hr=np.ascontiguousarray(np.asarray(weights[f"{layer.name}.weight_hr"], np.float32))
        if layer.proj_size else np.zeros((0, 0), np.float32),
    )


# The arrays of a PackedLayer the device holds, with whether each is stored in the model's
# dtype (else float32); the runtime uploads them in this order.
PACKED_ARRAYS = (("w_ih", True), ("w_hh_t", True), ("bias", False), ("bias_hn", False), ("w_hr", True))


def packed_dtype(name: str, dtype: str) -> str:
    """The type PACKED_ARRAYS' array ``name`` is stored in: the model's ``dtype`` for a
    weight, float32 for a bias."""
    return dtype if dict(PACKED_ARRAYS)[name] else "float32"


def packed_tensor_shapes(layer: Layer, weights: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """The shapes of :func:`pack_tensors`' arrays (PACKED_ARRAYS that are not empty, in
    that order), from the parameters' own: W_ih [G·H, I], W_hhᵀ [K, G·H] (K = H, or an
    LSTMP's P), the bias [G·H], a GRU's b_hn [H], an LSTMP's W_hr [P, H]."""
    G, H = layer.gates, layer.hidden_size
    shapes = {"w_ih": (G * H, weights[f"{layer.name}.weight_ih"].shape[1]),
              "w_hh_t": (weights[f"{layer.name}.weight_hh"].shape[1], G * H), "bias": (G * H,)}
    if layer.cell == "gru":
        shapes["bias_hn"] = (H,)
    if layer.proj_size:
        shapes["w_hr"] = tuple(weights[f"{layer.name}.weight_hr"].shape)
    return {name: shapes[name] for name, _ in PACKED_ARRAYS if name in shapes}


def pack_tensors(layer: Layer, weights: Mapping[str, Any], dtype: str) -> dict[str, Any]:
    """:func:`pack` on torch tensors, on their device: the PACKED_ARRAYS of the layer that
    are not empty, contiguous, weights in ``dtype`` (rounded to nearest even, as
    ``dtypes.to_storage``) and biases float32, byte for byte what the runtime uploads from
    :func:`pack` (tests/test_weights.py compares them). :func:`pack_tensors_into` new
    tensors."""
    import torch

    device = weights[f"{layer.name}.weight_hh"].device
    out = {name: torch.empty(shape, dtype=getattr(torch, packed_dtype(name, dtype)), device=device)
           for name, shape in packed_tensor_shapes(layer, weights).items()}
    pack_tensors_into(layer, weights, out)
    return out


def pack_tensors_into(layer: Layer, weights: Mapping[str, Any], out: Mapping[str, Any]) -> None:
    """:func:`pack_tensors`' arrays written into ``out`` (contiguous tensors of
    packed_tensor_shapes' shapes, weights in the storage dtype, biases float32; in
    refresh_weights, the memory the kernels read), so that new weights on the GPU (an
    optimizer's step) reach the kernels without a trip through the host. Each weight is
    one copy from a view of its parameter (the gates interleaved and W_hh transposed by the
    view's strides, the rounding to the storage dtype by the copy); the bias is summed in
    float64 and rounded once, as :func:`pack` does. Packed into new tensors and then copied
    by the driver, a layer took ~10 operators and three ctypes copies, ~0.3 ms of host time
    under cProfile at examples/train_char_lm.py's layers on the H200
    (results/train-example-profile-h200-2026-11-29-at-2d93d7d.txt); packed in place, that
    example's training step went from 1.02-1.05× torch.nn's time to 0.94-0.95× (each side
    in one process with torch.nn's, results/refresh-ab-h200-2026-11-29.txt)."""
    G, H = layer.gates, layer.hidden_size

    def param(name: str):
        return weights[f"{layer.name}.{name}"].detach()

    w_ih, w_hh = param("weight_ih"), param("weight_hh")
    # interleave_gates: row u·G + g of the packed matrix is torch's row g·H + u
    out["w_ih"].view(H, G, -1).copy_(w_ih.reshape(G, H, -1).transpose(0, 1))
    out["w_hh_t"].view(-1, H, G).copy_(w_hh.reshape(G, H, -1).permute(2, 1, 0))
    if layer.bias:
        b_hh = param("bias_hh").double()
        if layer.cell == "gru":  # b_hn stays apart, multiplied by r
            out["bias_hn"].copy_(param("bias_hh")[2 * H:])
            b_hh[2 * H:] = 0.0
        out["bias"].view(H, G).copy_((param("bias_ih").double() + b_hh).view(G, H).t())
    else:
        out["bias"].zero_()
        if layer.cell == "gru":
            out["bias_hn"].zero_()
    if layer.proj_size:
        out["w_hr"].copy_(param("weight_hr"))


def fragment_blocks(tile: TensorTile, hidden: int) -> int:
    """Blocks along the units that hold W_hh: a cluster's blocks, or the grid's columns."""
    return tile.cluster or -(-hidden // tile.units_per_block)


def fragments_name(tile: TensorTile, hidden: int, folded: bool = False) -> str:
    """The device weight a tensor-core persistent kernel loads W_hh from
    (:func:`fragment_index`): one per layout, since the order follows the tile, and apart
    for a folded LSTMP's matrix (``weights.fold_projection``)."""
    form = "registers" if tile.weights_in_registers else "wgmma" if tile.wgmma else "shared"
    return (f"{'w_fold' if folded else 'w_hh'}_fragments_{form}_u{tile.units_per_block}_m{tile.m_tiles}"
            f"_k{tile.k_split}_b{fragment_blocks(tile, hidden)}")


def fragment_index(tile: TensorTile, hidden: int, gates: int, itemsize: int) -> np.ndarray:
    """Where each element of a tensor-core persistent kernel's W_hh, as it holds it, comes
    from: indices into W_hhᵀ [H, G·H] flattened row-major, ``H·G·H`` for a zero (padding
    rows and K, units past H, a GRU's fourth row). Block by block (fragment_blocks), each
    block's part in the order the kernel keeps it, so that the kernel copies it whole,
    16 bytes a thread at a time:

    - the registers form (recurrent_cluster_tensor_registers.cu.j2): [warp][k-step][lane]
      [register][half], lane l of warp w loading its 16 bytes of k-step s, the mma A
      fragment, from uint4 ((r·m_tiles + w)·k_steps + s)·32 + l of block r. Register i of a
      lane (grp, quad) = (l / 4, l % 4) holds row grp + 8·(i & 1), k s·MMA_K + PAIR·quad +
      (MMA_K / 2)·(i >> 1) (+1 for a pair's second half); row m is gate row_gate(m) of unit
      row_unit(m) of the warp, as the template defines them;
    - the shared-memory forms' w_frag (tensor_core.cuh.j2, W_BYTES a block): mma.sync's the
      same fragments by 16-row tile of the block's rows, row m column u0·G + m of W_hhᵀ;
      wgmma's A K-major with the 128-byte swizzle (swizzled_at)."""
    mk, pair = mma_k(itemsize), 4 // itemsize
    kh = mk // 2
    blocks = fragment_blocks(tile, hidden)
    if tile.weights_in_registers:
        gs = TensorTile.rows_per_unit(gates)
        rank, warp, step, lane, reg, half = np.ix_(*(np.arange(n) for n in (
            blocks, tile.m_tiles, tile.k_steps(hidden, itemsize), 32, 4, pair)))
        m = lane // 4 + 8 * (reg & 1)
        k = step * mk + pair * (lane % 4) + kh * (reg >> 1) + half
        gate = 2 * (m // 8) + m % 2 if gs == 4 else np.zeros_like(m)
        unit = rank * tile.units_per_block + warp * (16 // gs) + ((m % 8) // 2 if gs == 4 else m)
        inside = (gate < gates) & (unit < hidden) & (k < hidden)
        return np.where(inside, k * gates * hidden + unit * gates + gate, hidden * gates * hidden).reshape(-1)
    m_pad, k_pad = tile.m_tiles * 16, tile.k_padded(hidden, itemsize)
    if tile.wgmma:  # element (m, k) at swizzled_at(M_PAD, m, k), K in blocks of 64
        rank, kb, m, chunk, e = np.ix_(*(np.arange(n) for n in (blocks, -(-k_pad // 64), m_pad, 8, 8)))
        k = kb * 64 + (chunk ^ (m % 8)) * 8 + e
    else:
        rank, tile16, step, lane, reg, half = np.ix_(*(np.arange(n) for n in (
            blocks, tile.m_tiles, k_pad // mk, 32, 4, pair)))
        m = tile16 * 16 + lane // 4 + 8 * (reg & 1)
        k = step * mk + pair * (lane % 4) + kh * (reg >> 1) + half
    column = rank * tile.units_per_block * gates + m
    inside = (m < tile.units_per_block * gates) & (column < gates * hidden) & (k < hidden)
    return np.where(inside, k * gates * hidden + column, hidden * gates * hidden).reshape(-1)


def fragments(w_hh_t: np.ndarray, index: np.ndarray) -> np.ndarray:
    """W_hhᵀ [H, G·H] (float32, PackedLayer.w_hh_t's or weights.fold_projection's) in the
    order of :func:`fragment_index`."""
    return np.append(np.asarray(w_hh_t, np.float32).reshape(-1), np.float32(0))[index]


def fragments_tensor(w_hh_t: Any, index: Any) -> Any:
    """:func:`fragments` on torch tensors, on their device (refresh_weights): ``w_hh_t``
    as pack_tensors gives it, ``index`` :func:`fragment_index`'s as a tensor there."""
    import torch

    return torch.cat([w_hh_t.reshape(-1), w_hh_t.new_zeros(1)])[index]


def padded_rows(matrix: np.ndarray, row_stride: int, rows: int | None = None) -> np.ndarray:
    """[rows, row_stride]: each row's values, then zeros (the rows kernels read whole
    16-byte loads); ``rows`` (default the matrix's) adds rows of zeros below (a library
    step's padded W_hhᵀ, LayerPlan.library_padding)."""
    rows = matrix.shape[0] if rows is None else rows
    if row_stride < matrix.shape[1] or rows < matrix.shape[0]:
        raise ValueError(f"weights: padding to [{rows}, {row_stride}] is below the matrix's "
                         f"{list(matrix.shape)}")
    out = np.zeros((rows, row_stride), np.float32)
    out[:matrix.shape[0], :matrix.shape[1]] = matrix
    return out


def rows_of_w_hh(layer: Layer, weights: Mapping[str, np.ndarray], row_stride: int) -> np.ndarray:
    """W_hh with PackedLayer.w_ih's interleaved rows (u·G+g), [H·G, row_stride]: each row's K
    values, then zeros (the step kernel's rows form reads whole 16-byte loads)."""
    return padded_rows(interleave_gates(np.asarray(weights[f"{layer.name}.weight_hh"], np.float32), layer.gates),
                       row_stride)


def fold_projection(layer: Layer, weights: Mapping[str, np.ndarray]) -> np.ndarray:
    """A projected LSTM's folded recurrent matrix (W_hh·W_hr)ᵀ, [H, H·G] with PackedLayer.w_hh_t's
    columns: h·W_hhᵀ = r·(W_hh·W_hr)ᵀ for h = r·W_hrᵀ (passes/persistence.py). Multiplied in
    float64 and rounded once; made only for a plan that folds (G·H·H·P multiply-adds)."""
    w_hh = np.asarray(weights[f"{layer.name}.weight_hh"], np.float64)
    w_hr = np.asarray(weights[f"{layer.name}.weight_hr"], np.float64)
    return np.ascontiguousarray(interleave_gates((w_hh @ w_hr).astype(np.float32), layer.gates).T)


def to_torch(model: Model, weights: Mapping[str, np.ndarray]):
    """The equivalent ``torch.nn.LSTM/GRU/RNN`` (float32, CPU) when ``model`` is a plain
    stack (one cell type and size, each layer fed by the previous, one output); else None.
    Used to time cuDNN beside rnncc on the same weights."""
    import torch

    first = model.layers[0]
    bidirectional = model.direction(first) == "bidirectional"
    tensors = [l for l in model.layers if l.tensor_name == l.name]  # one per spec layer
    plain = all(l.cell == first.cell and l.hidden_size == first.hidden_size and l.bias == first.bias
                and l.proj_size == first.proj_size
                and not l.residual and model.direction(l) == ("bidirectional" if bidirectional else "forward")
                and l.input.sources == ((tensors[i - 1].name,) if i else ("input",))
                for i, l in enumerate(tensors))
    if not plain or len(model.outputs) != 1 or model.outputs[0].name != tensors[-1].name:
        return None
    kwargs = dict(input_size=model.input_size, hidden_size=first.hidden_size,
                  num_layers=len(tensors), bias=first.bias, bidirectional=bidirectional)
    if first.cell == "lstm":
        module = torch.nn.LSTM(**kwargs, proj_size=first.proj_size)
    elif first.cell == "gru":
        module = torch.nn.GRU(**kwargs)
    else:
        module = torch.nn.RNN(nonlinearity=first.cell.removeprefix("rnn_"), **kwargs)
    with torch.no_grad():
        for layer in model.layers:  # torch's suffix _l{i}[_reverse] of the i-th spec layer
            suffix = f"l{tensors.index(model.layer(layer.tensor_name))}" + \
                ("_reverse" if layer.tensor_name != layer.name else "")
            for k in shapes(layer):
                getattr(module, f"{k}_{suffix}").copy_(torch.from_numpy(
                    np.asarray(weights[f"{layer.name}.{k}"], np.float32)))
    return module
