"""The CUDA backward of a compiled model, on PyTorch tensors (issue 17).

What the forward kept: every layer's output sequence (the training forward runs a variant
of the model whose outputs include every layer's tensor), the input and the initial
states. From those, a layer's backward:

1. takes its gates' pre-activations (float32) as the training forward's kernels wrote
   them (the plan's ``backward_gates`` "save"), or else recomputes them by GEMMs over all
   steps (x·W_ihᵀ + b_ih, and h_{t−1}·W_hhᵀ + b_hh, h_{t−1} being the saved sequence
   shifted by one step);
2. runs the recurrence in reverse time in one persistent kernel, which writes dG in the
   layer's type: in clusters with W_hh in registers (``templates/backward_cluster.cu.j2``,
   mma for half layers, FMA for float32) where W_hh fits their registers, else grid-persistent
   (``templates/backward_recurrent.cu.j2``; for large float32 layers with K split across
   clusters, ``templates/backward_ksplit.cu.j2``); ``tiles.backward_kernel_tile`` chooses;
3. takes dW_ih = dGᵀ·x, dW_hh = dGᵀ·h_{t−1}, the biases' column sums and dx = dG·W_ih as
   GEMMs over all steps. Only dx is on the path to the next layer's backward: the weights'
   gradients run on two side streams (``side_streams``), beside dx and each other, joined to
   the caller's stream once the model's backward is queued. (Not beside the layer below: its
   cluster or cooperative launch waits until they leave its SMs.)

Every GEMM takes its operands in the layer's type and returns float32: fp16/bf16 run on
tensor cores with float32 accumulation, as cuDNN's backward does (float32 operands: torch's
matmul, so cuBLAS under torch's TF32 setting). The model's graph (merges, residual
layers, bidirectional halves) is walked by ``reference_grad.backpropagate``, the same walk
the float64 oracle does.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Mapping, Sequence

import torch

from . import build, codegen, driver, launch
from . import target as target_mod
from .dtypes import DTYPES
from .errors import DeviceTimeout
from .ir import INPUT, Layer, Model
from .passes.cost import largest_cluster
from .passes.workspace import TENSOR_MAP_BYTES
from .reference_grad import backpropagate
from .runtime import DEFAULT_SPIN_TIMEOUT_MS
from .tiles import (CLUSTER_BACKWARD_TILES, BackwardKernelTile, KSplitBackwardTile, backward_kernel_tile,
                    backward_tile, cluster_backward_exchange_bytes, grid_shared_max)


def _dynamic_shared_max(target: target_mod.Target) -> int:
    return grid_shared_max(target.shared_memory_per_block_optin)


@lru_cache(maxsize=1)
def _device():
    """(the device's target, the status word every backward kernel reports a timeout in)."""
    driver.device_context(0).make_current()
    return target_mod.from_device(0), driver.HostWords(1)


@lru_cache(maxsize=None)
def _kernel(cell: str, hidden: int, gates: int, dtype: str, tile: BackwardKernelTile):
    """(the rendered kernel, its loaded function), built once per process and code."""
    target, _ = _device()
    k = codegen.render_backward(cell, hidden, gates, dtype, tile)
    fn = driver.load(k.name, build.compile_cubin(k, target.arch), k.entry, tuple(p.kind for p in k.params),
                     k.dynamic_shared or _dynamic_shared_max(target), k.cluster)
    return k, fn


@lru_cache(maxsize=None)
def _tile(cell: str, hidden: int, gates: int, dtype: str, batch: int) -> BackwardKernelTile:
    """The tile a backward launch takes (``tiles.backward_kernel_tile``, as the plan says);
    the grid form where the driver cannot hold even one of the cluster form's clusters, or
    all of the K-split form's at once (its grid barrier waits for every one)."""
    target, _ = _device()
    tile = backward_kernel_tile(gates, hidden, batch, DTYPES[dtype].itemsize, target.sm_count,
                                largest_cluster(target), target.shared_memory_per_block_optin,
                                target.clusters_at_once)
    if isinstance(tile, CLUSTER_BACKWARD_TILES):
        k, fn = _kernel(cell, hidden, gates, dtype, tile)
        if fn.max_active_clusters(tile.cluster, k.block, k.dynamic_shared) < 1:
            return backward_tile(gates, hidden, batch, target.sm_count, _dynamic_shared_max(target))
    elif isinstance(tile, KSplitBackwardTile):  # its grid barrier needs every cluster resident
        k, fn = _kernel(cell, hidden, gates, dtype, tile)
        resident = fn.max_active_clusters(tile.cluster, k.block, tile.shared_bytes(gates, hidden, batch))
        if resident < tile.clusters(hidden):
            return backward_tile(gates, hidden, batch, target.sm_count, _dynamic_shared_max(target))
    return tile


def _check_status(status: driver.HostWords) -> None:
    code = status.words[0]
    if code:
        status.words[0] = 0
        bound = os.environ.get("RNNCC_SPIN_TIMEOUT_MS", str(DEFAULT_SPIN_TIMEOUT_MS))
        what = {1: "grid barrier", 2: "cluster exchange"}.get(code, "spin-wait")
        raise DeviceTimeout(
            f"backward: a spin-wait of the backward recurrence's {what} passed its bound "
            f"(RNNCC_SPIN_TIMEOUT_MS={bound}) and the kernel gave up, so an earlier backward's "
            "gradients are invalid")


def check_status() -> None:
    """Raise DeviceTimeout where an earlier backward's spin-wait gave up (a replayed
    backward checks here, since its launches skip ``recurrence``'s own check)."""
    _check_status(_device()[1])


def launch_settings() -> tuple:
    """What chooses a backward's kernels and launches besides its operands: rnncc's debug
    knobs (NaN poison, the spin-wait bound) and torch's matmul precision settings."""
    matmul = torch.backends.cuda.matmul
    return (os.environ.get("RNNCC_DEBUG_POISON") == "1", os.environ.get("RNNCC_SPIN_TIMEOUT_MS"),
            torch.get_float32_matmul_precision(), matmul.allow_tf32,
            matmul.allow_fp16_reduced_precision_reduction, matmul.allow_bf16_reduced_precision_reduction)


# A replayed backward (rnncc.call_graphs) keeps its temporaries for as long as its graph
# lives: the float32 pre-activations, dG and dx of its largest layer, about three times the
# first. Up to 32 MiB of them (LSTM H=1024 B=8 S=256, the bench's bf16 row) a graph keeps
# ~100 MiB, and there the eager step is host-bound: ~1 ms of host for the backward against
# 0.7-1.6 ms of GPU (results/backward-profile-h100-2026-11-25.txt). Past it the
# pre-activations grow with S·B, and so does the GPU time that hides the host's (LSTM fp32
# H=1024 B=64: 256 MiB of them, 24 ms of backward).
GRAPH_PRE_ACTIVATION_BYTES = 32 << 20


def graph_worthy(model: Model, seq_len: int, batch: int) -> bool:
    """Whether a training backward of ``model`` at [seq_len, batch] is replayed from a CUDA
    graph once seen twice (``GRAPH_PRE_ACTIVATION_BYTES``: what it keeps against what it
    saves)."""
    largest = max(l.gates * l.hidden_size for l in model.layers)
    return seq_len * batch * largest * 4 <= GRAPH_PRE_ACTIVATION_BYTES


_DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def recurrence(layer: Layer, w_hh: torch.Tensor, pre: torch.Tensor, pre_h: torch.Tensor | None,
               h_prev: torch.Tensor, c0: torch.Tensor | None, dy: torch.Tensor,
               dh_n: torch.Tensor | None, dc_n: torch.Tensor | None,
               tile: BackwardKernelTile | None = None, kernel=None,
               overwrite: bool = True):
    """Launch the backward recurrence of ``layer`` over contiguous [S, B, ·] tensors in the
    order the layer ran its steps: W_hh and h_prev in the layer's type, the rest float32.
    Returns (dG, dG through W_hh for a GRU or None, dh0, dc0 or None), dG in the layer's
    type (float32: written over ``pre`` and ``pre_h`` where ``overwrite``, as recomputed
    ones may be; a forward's saved ones are not, since a second backward of the same graph,
    retain_graph=True, reads them again). ``tile``: a form forced (tests), else the planned
    one; ``kernel``: a (KernelSource, loaded function) pair of the tile's code to run in
    its place (benchmarks' variants of it)."""
    target, status = _device()
    _check_status(status)
    S, B, _ = dy.shape
    H, G = layer.hidden_size, layer.gates
    dtype = w_hh.dtype
    tile = tile or _tile(layer.cell, H, G, _DTYPE_NAMES[dtype], B)
    k, fn = kernel or _kernel(layer.cell, H, G, _DTYPE_NAMES[dtype], tile)
    device = dy.device
    # What the kernel writes starts as NaN under RNNCC_DEBUG_POISON (the GPU tests' knob).
    poison = os.environ.get("RNNCC_DEBUG_POISON") == "1"

    def empty(shape, dtype=torch.float32):
        return torch.full(shape, float("nan"), dtype=dtype, device=device) if poison \
            else torch.empty(shape, dtype=dtype, device=device)

    lstm = layer.cell == "lstm"
    if dtype == torch.float32 and overwrite:
        dg, dg_h = pre, pre_h
    else:
        dg = empty(pre.shape, dtype)
        dg_h = None if pre_h is None else empty(pre_h.shape, dtype)
    dh0 = empty((B, H))
    dc0 = empty((B, H)) if lstm else None
    c_seq = empty((S, B, H)) if lstm else None
    clusters = isinstance(tile, CLUSTER_BACKWARD_TILES)  # clusters along y share nothing: no barrier
    barrier = None if clusters else torch.zeros(launch.BARRIER_WORDS, dtype=torch.int32, device=device)
    # the cluster form's global copies of its dG slices, where it multicasts them (every slot
    # is written before it is sent)
    exchange = torch.empty(cluster_backward_exchange_bytes(tile, G, w_hh.element_size(), B), dtype=torch.uint8,
                           device=device) if any(p.name == "exchange" for p in k.params) else None
    spin_ms = float(os.environ.get("RNNCC_SPIN_TIMEOUT_MS", DEFAULT_SPIN_TIMEOUT_MS))
    ptr = lambda t: 0 if t is None else t.data_ptr()  # noqa: E731
    values = {"pre": ptr(pre), "dg": ptr(dg), "pre_h": ptr(pre_h), "dg_h": ptr(dg_h),
              "h_prev": ptr(h_prev), "c_seq": ptr(c_seq), "c0": ptr(c0), "w_hh": ptr(w_hh),
              "dy": ptr(dy), "dh_n": ptr(dh_n), "dc_n": ptr(dc_n), "dh0": ptr(dh0),
              "dc0": ptr(dc0), "seq_len": S, "batch": B, "barrier": ptr(barrier), "exchange": ptr(exchange),
              "status": status.address(0), "spin_timeout_ns": int(spin_ms * 1e6)}
    if isinstance(tile, KSplitBackwardTile):
        # each block's map of dG (lane_product.cuh.j2, tensor_map_staging): its template's
        # box rows, and a slot a block (the caching allocator's blocks are 512-byte aligned)
        slots = torch.empty(tile.blocks(H) * TENSOR_MAP_BYTES, dtype=torch.uint8, device=device)
        values |= {"tensor_map_template": tile.rows_per_pass, "tensor_map_slots": slots.data_ptr()}
    stream = torch.cuda.current_stream(device).cuda_stream
    if clusters:  # nor co-residency
        fn.launch((tile.cluster, tile.clusters(B)), k.block, launch.arguments(k, values),
                  k.dynamic_shared, stream)
    elif isinstance(tile, KSplitBackwardTile):  # clusters compiled in, all resident
        fn.launch((tile.blocks(H), 1), k.block, launch.arguments(k, values),
                  tile.shared_bytes(G, H, B), stream, cooperative=True)
    else:
        fn.launch((tile.blocks, 1), k.block, launch.arguments(k, values),
                  tile.shared_bytes(G, H, B), stream, cooperative=True)
    return dg, dg_h, dh0, dc0


@lru_cache(maxsize=64)  # bounded: a pair a caller's stream
def side_streams(device: int, stream: int) -> tuple[torch.cuda.Stream, torch.cuda.Stream]:
    """Two streams of the device for the weights' gradients of a backward queued on the
    raw ``stream`` (a pair per caller's stream, so that backwards on two streams never wait
    on each other's). At LSTM fp16 H=512 B=8 S=256 dW_ih, dW_hh and dx each hold 32 of the
    132 SMs for 10-28 µs (results/backward-profile-h100-2026-11-27-training-rows.txt): one
    after another they idle the rest. Side by side, PTB medium's training step took 0.718 ms
    in graphs against 0.821 (results/ab-backward-side-streams-h200-2026-11-30.txt)."""
    return torch.cuda.Stream(device), torch.cuda.Stream(device)


@lru_cache(maxsize=64)  # bounded: as side_streams
def lane_streams(device: int, stream: int, count: int) -> tuple[torch.cuda.Stream, ...]:
    """``count`` streams of the device beside the raw ``stream``, for the layers of a
    backward queued there that run beside its own: the halves of a bidirectional layer,
    each a cluster launch that holds a fraction of the SMs at small batches."""
    return tuple(torch.cuda.Stream(device) for _ in range(count))


def _f32(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.to(torch.float32).contiguous()


def _gemm(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """bias + a·b in float32 (bias: float32, broadcast over rows, or None). Half operands
    run on tensor cores with float32 accumulation and a float32 result, so neither the
    operands are widened first nor the result rounded to half."""
    if a.dtype == torch.float32:
        return a @ b if bias is None else torch.addmm(bias, a, b)
    if bias is None:
        return torch.mm(a, b, out_dtype=torch.float32)
    return torch.addmm(bias, a, b, out_dtype=torch.float32)


def layer_backward(layer: Layer, w: Mapping[str, torch.Tensor], x: torch.Tensor,
                   h: torch.Tensor, h0: torch.Tensor | None, c0: torch.Tensor | None,
                   dy: torch.Tensor, dh_n: torch.Tensor | None = None,
                   dc_n: torch.Tensor | None = None, saved: tuple[torch.Tensor, ...] | None = None,
                   sides: tuple[torch.cuda.Stream, torch.cuda.Stream] | None = None):
    """One layer's backward on CUDA: its merged input x [S, B, I], its h sequence
    [S, B, H], initial states (None: zeros), dy [S, B, H] and the final states' gradients;
    ``saved``: the pre-activations the training forward wrote (float32 [S, B, G·H] in the
    order the layer ran its steps; a GRU's x and h parts), else None (recomputed here).
    The products take the layer's weights' type; the results are float32. Returns (dx,
    the parameters' gradients by torch's names less the layer prefix, dh0, dc0 or None),
    as ``reference_grad.layer_backward`` does. ``sides``: two streams (``side_streams``)
    that the weights' gradients are queued on, forked from the current stream after the
    recurrence; the caller joins them before it reads those gradients. None: all on the
    current stream."""
    if layer.proj_size:
        raise NotImplementedError(f"backward: layer '{layer.name}' has proj_size="
                                  f"{layer.proj_size}; the CUDA backward has no LSTMP cell yet")
    S, B, I = x.shape
    H = layer.hidden_size
    W_ih, W_hh = w["weight_ih"].contiguous(), w["weight_hh"].contiguous()
    dtype = W_hh.dtype
    if layer.reverse:  # its steps ran from S−1 down: walk its sequences that way
        x, h, dy = x.flip(0), h.flip(0), dy.flip(0)
    x2 = x.reshape(S * B, I).to(dtype)
    h_prev = torch.empty(S, B, H, dtype=dtype, device=x.device)
    h_prev[0] = 0.0 if h0 is None else h0
    h_prev[1:] = h[:-1]
    h_prev2 = h_prev.view(S * B, H)
    if saved is not None:
        parts = [t.view(S * B, -1) for t in saved]
        pre, pre_h = parts[0], (parts[1] if len(parts) > 1 else None)
    else:
        b_ih, b_hh = _f32(w.get("bias_ih")), _f32(w.get("bias_hh"))
        if layer.cell == "gru":  # the h part apart: r multiplies it
            pre, pre_h = _gemm(x2, W_ih.T, b_ih), _gemm(h_prev2, W_hh.T, b_hh)
        else:
            bias = b_ih if b_hh is None else b_ih + b_hh
            pre, pre_h = _gemm(h_prev2, W_hh.T, _gemm(x2, W_ih.T, bias)), None
    dg_x, dg_h, dh0, dc0 = recurrence(layer, W_hh, pre, pre_h, h_prev, _f32(c0), _f32(dy),
                                      _f32(dh_n), _f32(dc_n), overwrite=saved is None)
    dg_h = dg_x if dg_h is None else dg_h
    dw = _weight_gradients(layer.bias, dg_x, dg_h, x2, h_prev2, sides)
    dx = _gemm(dg_x, W_ih).view(S, B, I)
    return (dx.flip(0) if layer.reverse else dx), dw, dh0, dc0


def _weight_gradients(bias: bool, dg_x: torch.Tensor, dg_h: torch.Tensor, x2: torch.Tensor,
                      h_prev2: torch.Tensor, sides) -> dict[str, torch.Tensor]:
    """dW_ih, dW_hh and the biases' gradients of a layer from its dG (the x and h parts,
    one tensor but for a GRU) and its [S·B, ·] operands: on the current stream where
    ``sides`` is None, else dW_ih on the first side stream and the rest on the second, each
    waiting for the current stream's work so far."""
    def biases(dw: dict) -> dict:
        if not bias:
            return dw
        # Outside a GRU both biases add to the same sums: one pass over dG (at LSTM fp32 H=1024
        # B=64 S=256 a pass reads 256 MiB, ~100 µs), and a copy so that no two gradients share storage.
        db = dg_x.sum(0, dtype=torch.float32)
        return dw | {"bias_ih": db, "bias_hh": dg_h.sum(0, dtype=torch.float32) if dg_h is not dg_x else db.clone()}

    if sides is None:
        return biases({"weight_ih": _gemm(dg_x.T, x2), "weight_hh": _gemm(dg_h.T, h_prev2)})
    main = torch.cuda.current_stream(dg_x.device)
    for side in sides:
        side.wait_stream(main)
    # Read on a side stream, freed by the caller's: the allocator must not hand their
    # memory out again before the side stream is done with it.
    for t in {id(t): t for t in (dg_x, dg_h, x2, h_prev2)}.values():
        t.record_stream(sides[0])
        t.record_stream(sides[1])
    with torch.cuda.stream(sides[0]):
        dw = {"weight_ih": _gemm(dg_x.T, x2)}
    with torch.cuda.stream(sides[1]):
        dw = biases(dw | {"weight_hh": _gemm(dg_h.T, h_prev2)})
    for t in dw.values():  # made on a side stream, read and freed after the join on the caller's
        t.record_stream(main)
    return dw


def merged(sources: Sequence[str], mode: str, tensors: Mapping[str, torch.Tensor]) -> torch.Tensor:
    parts = [tensors[s] for s in sources]
    if mode == "concat":
        return torch.cat(parts, dim=-1)
    out = parts[0]
    for p in parts[1:]:
        out = out + p
    return out


def model_backward(model: Model, weights: Mapping[str, torch.Tensor], x: torch.Tensor,
                   tensors: Mapping[str, torch.Tensor], state: Mapping, grad_outputs: Sequence,
                   grad_final: Mapping, saved: Mapping[str, tuple[torch.Tensor, ...]] | None = None):
    """The gradients of a CUDA forward of ``model`` at time-major x, whose every layer's
    tensor is in ``tensors`` (by tensor name), from the outputs' gradients (model order)
    and the final states' (by layer: h_n's, or (h_n's, c_n's)). ``state``: the initial
    states given, by layer; ``saved``: the pre-activations the forward saved, by layer
    (layer_backward's; the others are recomputed). Returns (dx, the weights' gradients by
    key, the initial states' by layer), float32."""
    S, B, _ = x.shape
    every = {INPUT: x, **tensors}

    main = torch.cuda.current_stream(x.device)
    sides = side_streams(x.device.index, main.cuda_stream)

    def backward_of(layer: Layer, dy: torch.Tensor):
        x_layer = merged(layer.input.sources, layer.input.mode, every)
        h = every[layer.tensor_name][..., layer.column:layer.column + layer.hidden_size]
        if layer.residual:  # its tensor is h + x
            h = h.float() - x_layer.float()
        given = state.get(layer.name)
        h0, c0 = (given if layer.cell == "lstm" else (given, None)) if given is not None else (None, None)
        final = grad_final.get(layer.name)
        dh_n, dc_n = (final if layer.cell == "lstm" else (final, None)) if final is not None else (None, None)
        w = {k.partition(".")[2]: v for k, v in weights.items() if k.partition(".")[0] == layer.name}
        return layer_backward(layer, w, x_layer, h, h0, c0, dy, dh_n, dc_n, (saved or {}).get(layer.name),
                              sides)

    def together(layers: Sequence[Layer], dys: Sequence[torch.Tensor]) -> list:
        # The first layer on the caller's stream, each other on a lane forked before any of
        # them is queued, so that their recurrences run at once; their results are read
        # (and freed) on the caller's stream after the join.
        lanes = lane_streams(x.device.index, main.cuda_stream, len(layers) - 1)
        for lane in lanes:
            lane.wait_stream(main)
        results = [backward_of(layers[0], dys[0])]
        for layer, dy, lane in zip(layers[1:], dys[1:], lanes):
            dy.record_stream(lane)  # the caller's, read on the lane
            with torch.cuda.stream(lane):
                dx, dw, dh0, dc0 = backward_of(layer, dy)
            for t in (dx, dh0, dc0, *dw.values()):
                if t is not None:
                    t.record_stream(main)
            results.append((dx, dw, dh0, dc0))
        for lane in lanes:
            main.wait_stream(lane)
        return results

    zeros = lambda width: x.new_zeros(S, B, width, dtype=torch.float32)  # noqa: E731
    try:
        return backpropagate(model, [None if g is None else g.float() for g in grad_outputs],
                             backward_of, zeros, together=together)
    finally:
        for side in sides:  # every layer's weight gradients, before the caller reads them
            main.wait_stream(side)
