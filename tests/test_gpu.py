"""Every kernel family on the GPU against the float64 reference (run: pytest -m gpu).

Inputs, weights and states are fresh random values each run; outputs and workspace are
poisoned with NaN first (conftest); tolerances come from rnncc.dtypes, once per dtype and
precision.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import rnncc
from rnncc import reference
from rnncc.dtypes import max_relative_error, round_to, tolerance
from rnncc.ir import CELL_GATES
from rnncc.tiles import LibraryProjection, Persistent, PerStep, StagedPersistentTile, TensorTile
from rnncc.timing import capture

pytestmark = pytest.mark.gpu

CELLS = ("lstm", "gru", "rnn_tanh", "rnn_relu")
# (H, B, S): together they take every value of H ∈ {1, 33, 256, 1024},
# B ∈ {1, 5, 8, 64}, S ∈ {1, 7, 256}.
SIZES = [(1, 64, 7), (33, 5, 256), (256, 1, 1), (1024, 8, 256), (1024, 64, 7)]


def single(cell: str, hidden: int, input_size: int, dtype: str = "float32", bias: bool = True):
    return {"name": f"{cell}_{hidden}", "dtype": dtype, "input_size": input_size,
            "layers": [{"name": "l0", "cell": cell, "hidden_size": hidden, "bias": bias}]}


def random_state(model, B, rng, dtype):
    state = {}
    for layer in model.layers:
        h = round_to(rng.uniform(-1, 1, (B, layer.out_size)), dtype)  # proj_size wide if projected
        if layer.cell == "lstm":
            state[layer.name] = (h, round_to(rng.uniform(-1, 1, (B, layer.hidden_size)), dtype))
        else:
            state[layer.name] = h
    return state


def random_device_state(torch, model, B, rng):
    """random_state's arrays as CUDA tensors of the model's dtype ((h, c) tuples for LSTMs)."""
    tdt = getattr(torch, model.dtype)
    given = random_state(model, B, rng, model.dtype)
    return {k: tuple(torch.from_numpy(p).to("cuda", tdt) for p in v) if isinstance(v, tuple)
            else torch.from_numpy(v).to("cuda", tdt) for k, v in given.items()}


def run_and_compare(spec, S, B, *, seed, with_state=False, batch_first=False, force=None,
                    lengths=None, **options):
    """Run on torch CUDA tensors, compare every output and final state with the reference.
    ``force``: a function of the compiled model returning the one to run (a forced tile);
    ``lengths``: each row's steps (outputs past them must be exactly zero)."""
    import torch

    rng = np.random.default_rng(seed)
    m = rnncc.compile(spec, target="device", seed=seed, **options)
    if force is not None:
        m = force(m)
    dtype = m.model.dtype
    tdt = getattr(torch, dtype)
    x = round_to(rng.uniform(-1, 1, (S, B, m.model.input_size)), dtype)
    state = random_state(m.model, B, rng, dtype) if with_state else None

    def to_dev(a):
        return torch.from_numpy(np.ascontiguousarray(a)).to("cuda", tdt)

    def state_to_dev(st):
        return st and {k: tuple(to_dev(p) for p in v) if isinstance(v, tuple) else to_dev(v)
                       for k, v in st.items()}

    xd = to_dev(x.transpose(1, 0, 2) if batch_first else x)
    sd = state_to_dev(state)
    if lengths is None:
        # A first call of the same signature on other numbers, its results kept alive: the
        # call compared below then replays it (runtime.CompiledModel._run), with its own
        # input, states, outputs and workspace.
        other = rng.uniform(-1, 1, xd.shape)
        other_state = random_state(m.model, B, rng, dtype) if with_state else None
        first = m(to_dev(other), state_to_dev(other_state), batch_first=batch_first)  # noqa: F841
    y, final = m(xd, sd, batch_first=batch_first, lengths=lengths)
    torch.cuda.synchronize()
    outs = y if isinstance(y, tuple) else (y,)
    ref_outs, ref_final = reference.run(m.model, m.device_weights(), x, state, lengths)
    if lengths is not None:
        past = torch.arange(S)[:, None] >= torch.as_tensor(lengths)[None, :]  # [S, B]
        for got in outs:
            padded = (got.transpose(0, 1) if batch_first else got)[past.to(got.device)]
            assert torch.equal(padded, torch.zeros_like(padded)), "outputs past a length are not zero"
    tol = tolerance(dtype, m.plan.layers[0].precision.value)
    errors = {}
    for o, got, want in zip(m.model.outputs, outs, ref_outs):
        assert isinstance(got, torch.Tensor) and got.dtype == tdt and got.is_cuda
        g = got.float().cpu().numpy()
        errors[o.name] = max_relative_error(g.transpose(1, 0, 2) if batch_first else g, want)
    for name, want in ref_final.items():
        got = final[name]
        pairs = zip(got, want) if isinstance(want, tuple) else [(got, want)]
        for i, (g, w) in enumerate(pairs):
            errors[f"{name}.{'hc'[i]}_n"] = max_relative_error(g.float().cpu().numpy(), w)
    bad = {k: v for k, v in errors.items() if not v <= tol}
    assert not bad, f"errors over {tol} ({dtype}): {bad}"
    return m, outs, errors


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("hidden,batch,seq", SIZES)
@pytest.mark.parametrize("persistence", ["none", "grid"])
def test_single_layer_float32(gpu, cell, hidden, batch, seq, persistence):
    m, _, _ = run_and_compare(single(cell, hidden, input_size=hidden + 3), seq, batch,
                              seed=hidden + batch, with_state=(batch % 2 == 1), persistence=persistence,
                              gemm="rnncc")
    assert m.plan.layers[0].persistence.value.mode == persistence


# cuBLASLt's products (the projection and each step's h·W_hhᵀ) with rnncc's cell kernel:
# every cell × operand type, row strides of 33 and 36 elements (pointers 2- and 8-byte
# aligned for fp16/bf16) and a GEMM-sized step; at H=33 and 650 the 16-bit step's sizes
# padded to multiples of 8 (LayerPlan.library_padding: a padded W_hhᵀ, h0 copied, h written twice).
@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("kind", ["float16", "bfloat16", "float32", "float32 tf32"])
@pytest.mark.parametrize("hidden,batch,seq", [(33, 5, 64), (1024, 64, 7), (650, 20, 9)])
def test_cublaslt_products(gpu, cell, kind, hidden, batch, seq):
    dtype, _, tf32 = kind.partition(" ")
    precision = "tensor" if tf32 or dtype != "float32" else "exact"
    m, _, _ = run_and_compare(single(cell, hidden, hidden + 3, dtype), seq, batch, seed=hidden + seq,
                              with_state=batch % 2 == 1, persistence="none", gemm="cublas",
                              precision=precision)
    l = m.plan.layers[0]
    assert l.persistence.value == PerStep("cublas")
    assert isinstance(l.projection_tile.value, LibraryProjection)
    assert (l.library_padding(2 if dtype != "float32" else 4) is not None) == (dtype != "float32" and hidden % 8 != 0)
    # The input (hidden + 3 features) padded for cuBLASLt's projection where G·H is a
    # multiple of 8 (tiles.projection_padded_k) and the padded GEMM with its copy prices below
    # the GEMM at K as stored, as it does at every such point here (planned for the default
    # S and B)
    padded = -(-(hidden + 3) // 8) * 8 if dtype != "float32" and (hidden + 3) % 8 and l.gates * hidden % 8 == 0 else 0
    assert l.projection_padded_k == padded
    assert (padded != 0) == ("cuBLASLt, K as stored" in l.projection_tile.alternatives)


def test_refresh_weights_writes_the_padded_library_w_hh(gpu):
    """A library step at padded sizes reads W_hhᵀ from a padded copy among the weights
    (LayerPlan.library_padding), and a library projection at padded K W_ih's padded rows
    (LayerPlan.projection_padded_k): refresh_weights writes new weights given on the GPU
    there too, their padding left zero, so that the next call (from h0, then from zeros)
    equals, bit for bit, that of a model given the same weights through the host."""
    import torch

    spec = single("lstm", 650, 653, "float16")
    options = dict(target="device", seed=3, persistence="none", gemm="cublas")
    m = rnncc.compile(spec, **options)
    l = m.plan.layers[0]
    assert l.library_padding(2) == (656, 2600) and l.projection_padded_k == 656
    x = torch.randn(9, 20, 653, device="cuda", dtype=torch.float16)
    h0 = {"l0": (torch.randn(20, 650, device="cuda", dtype=torch.float16),
                 torch.randn(20, 650, device="cuda", dtype=torch.float16))}
    m(x, h0)  # the weights and the padded W_hhᵀ uploaded
    new = {k: torch.from_numpy(v * -0.5).to("cuda", torch.float16) for k, v in m.state_dict().items()}
    assert m.refresh_weights(new, torch.cuda.current_stream().cuda_stream)
    got = [m(x, h0), m(x)]
    fresh = rnncc.compile(spec, **options)
    fresh.load_state_dict({k: v.float().cpu().numpy() for k, v in new.items()})
    want = [fresh(x, h0), fresh(x)]
    torch.cuda.synchronize()
    for (y, final), (y_want, final_want) in zip(got, want):
        assert torch.equal(y, y_want) and all(torch.equal(a, b) for a, b in zip(final["l0"], final_want["l0"]))


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("persistence", ["none", "grid", "cluster"])
def test_half_precision_on_fma(gpu, cell, dtype, persistence):
    # Per step, gemm="rnncc" keeps the FMA step kernel: the library's step on tensor cores
    # (products of halves exact in float32 too) is priced below it where eager calls are
    # replayed from a CUDA graph (persistence.per_step_replayed).
    m, _, _ = run_and_compare(single(cell, 256, 100, dtype), 64, 5, seed=7, with_state=True,
                              persistence=persistence, precision="exact",
                              **({"gemm": "rnncc"} if persistence == "none" else {}))
    assert m.plan.layers[0].persistence.value.math == "fma"


# Tensor cores: every cell × operand type (fp16, bf16, TF32) × persistent mode, with sizes
# that pad every tile dimension (H=1 and 33: M and K; B=1 and 5: N) and the large shapes.
# Cluster: clusters of 1, 2, 4 and 8; at H=72 and 130 the last block's slice of h is cut
# at the padded K (e.g. TF32 LSTM H=130: 4 × 40 units, K padded to 136), and B=9 runs two
# clusters.
TENSOR_SIZES = {"grid": [(33, 5, 64), (256, 8, 256), (1024, 64, 16)],
                "cluster": [(1, 1, 7), (33, 5, 64), (72, 3, 33), (130, 9, 40), (256, 8, 256)]}


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("persistence,hidden,batch,seq",
                         [(p, *size) for p, sizes in TENSOR_SIZES.items() for size in sizes])
def test_tensor_cores(gpu, cell, dtype, persistence, hidden, batch, seq):
    def on_tensor_cores(m):
        """The plan, or where it took the FMA lanes form (half layers at small H, priced
        below tensor cores there) the tensor-core kernel's best tile, forced."""
        l = m.plan.layers[0]
        if l.persistence.value.math == "tensor":
            return m
        from rnncc.passes.cost import tensor_seconds, tensor_tiles
        itemsize, planned = 4 if dtype == "float32" else 2, m.plan.options.batch
        tiles = [t for t in tensor_tiles(hidden, l.gates, planned, m.target, persistence, itemsize)
                 if t.shared_bytes(hidden, l.gates, itemsize) <= m.target.shared_memory_per_block_optin]
        best = min(tiles, key=lambda t: tensor_seconds(planned, hidden, l.gates, t, m.target, itemsize))
        return m.with_persistence("l0", Persistent.of(persistence, "tensor", best, hidden, l.gates, itemsize),
                                  "forced by the test: tensor cores")
    m, _, errors = run_and_compare(single(cell, hidden, hidden + 3, dtype), seq, batch,
                                   seed=hidden + batch + seq, with_state=batch % 2 == 1,
                                   persistence=persistence, precision="tensor", force=on_tensor_cores)
    v = m.plan.layers[0].persistence.value
    assert (v.mode, v.math) == (persistence, "tensor")
    assert "mma.sync" in next(k.source for k in m.kernels if k.family.startswith("recurrent_"))


# The registers form of the tensor-core cluster kernel, its tile forced: (H, B, S, cluster,
# batch rows of a cluster). Odd H pads the last warp's units and K (H=33 and 130: the last
# block's slice cut at the padded K); B=5, 9 and 20 pad the batch tile or run several
# clusters; S=1 runs no exchange. H=1, 33 and 72 have an odd number of k-steps (the last
# B operands by ldmatrix .x2). H=512 in a cluster of 16 (fp16/bf16: TF32's fragments would
# need twice the registers) holds 128 registers of W_hh a thread.
REGISTERS_SIZES = [(1, 1, 7, 1, 8), (33, 5, 256, 2, 8), (72, 9, 33, 4, 8), (100, 20, 17, 4, 32),
                   (130, 64, 40, 8, 16), (256, 8, 256, 8, 8), (256, 3, 1, 8, 8), (512, 11, 256, 16, 8)]


def run_forced_tile(cell, dtype, hidden, batch, seq, tile, math, mode="cluster"):
    """One layer on the persistent tile ``tile`` of ``mode`` (a TensorTile with math
    "tensor"; with "fma", a ClusterTile or in mode grid a PersistentTile), forced, run and
    compared with the reference; the model."""
    itemsize = 4 if dtype == "float32" else 2
    gates = len(CELL_GATES[cell])
    value = Persistent.of(mode, math, tile, hidden, gates, itemsize)
    m, _, _ = run_and_compare(single(cell, hidden, hidden + 3, dtype), seq, batch,
                              seed=hidden + batch + seq + getattr(tile, "cluster", 0), with_state=batch % 2 == 1,
                              persistence=mode, precision="tensor" if math == "tensor" else "exact",
                              seq_len=seq, batch=batch,
                              force=lambda m: m.with_persistence("l0", value, "forced by the test"))
    return m


def run_registers_form(cell, dtype, hidden, batch, seq, cluster, rows, wgmma):
    """One layer on the registers form's tile for (hidden, cluster, rows), forced, its
    product by wgmma or mma.sync, run and compared with the reference; the model."""
    gates = len(CELL_GATES[cell])
    tile = replace(TensorTile.registers_form(hidden, gates, cluster, rows), wgmma=wgmma)
    return run_forced_tile(cell, dtype, hidden, batch, seq, tile, "tensor")


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("dtype,hidden,batch,seq,cluster,rows",
                         [(d, *size) for d in ("float16", "bfloat16", "float32") for size in REGISTERS_SIZES
                          if not (d == "float32" and size[0] == 512)])
def test_tensor_cluster_registers_form(gpu, cell, dtype, hidden, batch, seq, cluster, rows):
    m = run_registers_form(cell, dtype, hidden, batch, seq, cluster, rows, wgmma=False)
    v = m.plan.layers[0].persistence.value
    assert v.tile.weights_in_registers and v.tile.cluster == cluster
    assert "the registers form" in m.kernel_of("l0", "recurrent").source


# The hybrid registers form (W_hh past the registers of any cluster: TensorTile.register_steps
# k-steps of each warp's rows in registers, the rest in shared memory), its tile forced:
# (cell, dtype, H, B, S, cluster asked, batch rows of a cluster). PTB medium's LSTM (H=650,
# B=20: 3 clusters); H=520's 33 k-steps end on an odd one read from shared memory; B=5, 9
# pad the batch tile, B=64 runs 4 clusters of 16 rows; S=1 runs no exchange; GRU and tanh
# RNN with their widest hybrid tiles (tanh H=1400: 34 of 88 k-steps in registers; H=1300's
# 41 pairs of k-steps, a loop NVVM left rolled before static_for).
HYBRID_REGISTERS_SIZES = [("lstm", "float16", 650, 20, 35, 14, 8), ("lstm", "bfloat16", 520, 5, 33, 13, 8),
                          ("gru", "float16", 700, 9, 17, 16, 16), ("rnn_tanh", "float16", 1100, 3, 1, 14, 8),
                          ("lstm", "float16", 560, 64, 64, 14, 16), ("rnn_tanh", "bfloat16", 1400, 20, 40, 15, 8),
                          ("rnn_tanh", "float16", 1300, 1, 35, 14, 8)]


@pytest.mark.parametrize("cell,dtype,hidden,batch,seq,cluster,rows", HYBRID_REGISTERS_SIZES)
def test_tensor_cluster_hybrid_registers_form(gpu, cell, dtype, hidden, batch, seq, cluster, rows):
    from rnncc.target import get
    gates = len(CELL_GATES[cell])
    form = TensorTile.registers_form(hidden, gates, cluster, rows)
    form = replace(form, cluster=-(-hidden // form.units_per_block))
    assert not form.registers_fit(hidden, gates, 2)
    tile = form.with_shared_steps_for(hidden, gates, 2, get("device").shared_memory_per_block_optin)
    assert tile is not None and 0 < tile.register_steps < tile.k_steps(hidden, 2)
    m = run_forced_tile(cell, dtype, hidden, batch, seq, tile, "tensor")
    assert m.plan.layers[0].persistence.value.tile == tile
    assert "The hybrid form" in m.kernel_of("l0", "recurrent").source


# The registers form with its product by wgmma (whole warpgroups: m_tiles a multiple of 4),
# its tile forced: (H, B, S, cluster, batch rows of a cluster). N = 32 and 16 check the
# descriptor's stride between 8-row groups of the batch; H=100 and 130 pad K and the last
# block's units, H=100 runs 7 k-steps; B=64 runs 4 clusters of 5 blocks; S=1 no exchange.
WGMMA_SIZES = [(100, 20, 17, 4, 32), (130, 64, 40, 5, 16), (256, 8, 256, 8, 8), (256, 3, 1, 8, 8),
               (512, 11, 256, 16, 8), (256, 5, 33, 1, 8)]


def _wgmma_cases():
    for cell in CELLS:
        gates = len(CELL_GATES[cell])
        for dtype in ("float16", "bfloat16"):
            for size in WGMMA_SIZES:
                tile = TensorTile.registers_form(size[0], gates, size[3], size[4])
                if tile.m_tiles % 4 == 0 and tile.threads <= 1024:
                    yield cell, dtype, *size


@pytest.mark.parametrize("cell,dtype,hidden,batch,seq,cluster,rows", list(_wgmma_cases()))
def test_tensor_cluster_registers_form_wgmma(gpu, cell, dtype, hidden, batch, seq, cluster, rows):
    m = run_registers_form(cell, dtype, hidden, batch, seq, cluster, rows, wgmma=True)
    v = m.plan.layers[0].persistence.value
    assert v.tile.wgmma and v.tile.cluster == cluster
    assert "wgmma.mma_async" in m.kernel_of("l0", "recurrent").source


# The FMA cluster kernel, both forms, its tile forced: (H, B, S, cluster, units a block,
# batch rows of a cluster, rows a thread, K split, W in registers, lanes form). Clusters of
# 2–8 exchange h by st.async and mbarriers, a cluster of 1 waits at __syncthreads. H=1,
# 33 and 130 leave the last block units past H (H=33: 4 × 9); B=5 in tiles of 4 runs two
# clusters, the second with 3 rows past the batch (B=9 in tiles of 8: one row); S=1 runs
# no exchange; H=256 B=64 is the sweep's large case (16 or 32 clusters of 8). The last
# has K-split partial sums of 36 bytes a gate (odd words), which the mbarriers once followed.
# The lanes form runs on K tiles of 32 and of its split (as the planner makes it: K padded
# to the split only, H=33 in 8 lanes to 40, in 2 lanes to 34) and pushes h from every lane
# of a K group to the peers (8 peers in 4 lanes: two sends a lane).
FMA_CLUSTER_SIZES = [(1, 1, 7, 1, 1, 1, 1, 4, True, True, 4), (33, 5, 256, 4, 9, 4, 2, 8, True, True, 8),
                     (100, 1, 2200, 4, 25, 1, 1, 8, True, True, 32), (100, 20, 35, 2, 50, 2, 1, 4, False, True, 4),
                     (128, 3, 1, 8, 16, 4, 2, 8, True, True, 8), (256, 64, 33, 8, 32, 2, 1, 8, False, True, 32),
                     (33, 3, 40, 2, 17, 1, 1, 2, True, True, 2), (100, 7, 64, 8, 13, 4, 1, 4, True, True, 4),
                     (1, 1, 7, 1, 1, 1, 1, 1, False, False, 32), (33, 5, 256, 4, 9, 4, 2, 2, False, False, 32),
                     (100, 20, 35, 4, 25, 4, 1, 4, True, False, 32), (130, 9, 40, 2, 65, 8, 4, 4, False, False, 32),
                     (256, 64, 33, 8, 32, 4, 2, 8, False, False, 32), (256, 3, 1, 8, 32, 4, 1, 4, True, False, 32),
                     (33, 3, 40, 4, 9, 1, 1, 2, False, False, 32)]


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("hidden,batch,seq,cluster,units,rows,rows_a_thread,k_split,registers,lanes,k_tile",
                         FMA_CLUSTER_SIZES)
def test_fma_cluster_tiles(gpu, cell, dtype, hidden, batch, seq, cluster, units, rows, rows_a_thread,
                           k_split, registers, lanes, k_tile):
    from rnncc.tiles import ClusterTile
    tile = ClusterTile(cluster, units, rows, rows_a_thread, k_split, 1, k_tile,
                       weights_in_registers=registers, k_lanes=lanes)
    m = run_forced_tile(cell, dtype, hidden, batch, seq, tile, "fma")
    assert m.plan.layers[0].persistence.value.tile == tile
    source = m.kernel_of("l0", "recurrent").source
    assert ("The K split's partial sums by butterfly shuffles" in source) == lanes
    assert ("st.async" in source) == (cluster > 1)
    assert "cluster.sync();\n    }" not in source  # no cluster barrier in the step loop


# The FMA grid kernel's tiles: (H, B, S, units a block, batch tile, rows a thread, K split,
# blocks along y). Units a block that are not powers of two (H=650: 5 a block on 130 SMs),
# batch tiles of the batch rounded up to 4 rows (20, 12), H not a multiple of the units
# (the last block's slice cut), and batches over the planned tile (B=9 on tiles of 4, B=20
# on 3 tiles of 8 shared by 2 blocks along y: the loop over batch tiles).
FMA_GRID_SIZES = [(650, 20, 35, 5, 20, 4, 8, 1), (33, 5, 40, 3, 12, 4, 2, 1), (130, 9, 7, 5, 4, 2, 4, 1),
                  (1, 1, 7, 1, 4, 4, 1, 1), (300, 64, 16, 3, 64, 4, 4, 1), (513, 5, 256, 4, 8, 2, 8, 1),
                  (100, 20, 9, 5, 8, 4, 4, 2)]


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("hidden,batch,seq,units,rows,rows_a_thread,k_split,batch_blocks", FMA_GRID_SIZES)
def test_fma_grid_tiles(gpu, cell, hidden, batch, seq, units, rows, rows_a_thread, k_split, batch_blocks):
    from rnncc.tiles import PersistentTile
    tile = PersistentTile(units, rows, rows_a_thread, k_split, batch_blocks)
    m = run_forced_tile(cell, "float32", hidden, batch, seq, tile, "fma", mode="grid")
    v = m.plan.layers[0].persistence.value
    assert v.tile == tile and v.blocks == -(-hidden // units) * batch_blocks


# The FMA grid kernel with h staged by chunks (float32): (cell, H, B, S, planned batch).
# H=1024 B=64 is the shape it was built for; H=33 and 513 copy h a float at a time (rows
# not whole 16-byte words) and pad K to the chunk; B=37 planned as 37 runs batch tiles
# that do not divide it; planned for 8, B=37 and 64 take the path past the planned batch
# (more batch tiles than blocks along y); S=1 runs no product past h0.
STAGED_SIZES = [("lstm", 1024, 64, 256, 64), ("gru", 1024, 64, 7, 64), ("rnn_tanh", 513, 37, 33, 37),
                ("rnn_relu", 33, 5, 256, 5), ("lstm", 516, 37, 64, 8), ("gru", 256, 64, 1, 8)]


def _forced_fma_grid_form(cell, hidden, batch, seq, planned, found, pick, seed, input_size=None, with_state=None,
                          lengths=None):
    """The FMA grid kernel's staged or registers form, forced onto the tile the model ranks
    first among `found` or onto its first or last (`pick`), run against the reference: input
    size H + 3 and initial states on odd batches unless given, sequences of `lengths`."""
    from rnncc.passes.cost import persistent_seconds
    from rnncc.target import get
    gates = len(CELL_GATES[cell])
    target = get("device")
    tile = {"first": found[0], "last": found[-1],
            "model": min(found, key=lambda t: persistent_seconds(planned, hidden, gates, t, target, 4))}[pick]
    value = Persistent.of("grid", "fma", tile, hidden, gates, 4)
    m, _, _ = run_and_compare(single(cell, hidden, hidden + 3 if input_size is None else input_size), seq, batch,
                              seed=seed, with_state=batch % 2 == 1 if with_state is None else with_state,
                              persistence="grid", precision="exact", gemm="rnncc", seq_len=seq, batch=planned,
                              lengths=lengths, force=lambda m: m.with_persistence("l0", value, "forced by the test"))
    return m


def _lengths(seq, batch):
    return [seq - (7 * b) % seq for b in range(batch)]


@pytest.mark.parametrize("cell,hidden,batch,seq,planned", STAGED_SIZES)
@pytest.mark.parametrize("pick", ["model", "first", "last"])
def test_fma_grid_staged(gpu, cell, hidden, batch, seq, planned, pick):
    """The staged FMA grid kernel on the tile the model ranks first among its candidates,
    and on the first and last candidate (the narrowest and widest blocks, batch tiles and
    chunks), forced, against the reference, with initial states on odd batches."""
    from rnncc.passes.cost import staged_tiles
    from rnncc.target import get
    gates = len(CELL_GATES[cell])
    target = get("device")
    # H % 4 ≠ 0 and B < 16 have no candidates (the model does not price h loaded a float at a
    # time; below 16 rows the whole-h FMA grid kernel wins): tiles forced, one a chunk of 64 in
    # 3 buffers, two of them on fewer batch rows than the call's (the path past the plan)
    found = [t for t in staged_tiles(hidden, gates, planned, target)
             if t.shared_bytes(hidden, gates, 4) <= target.shared_memory_per_block_optin] or \
        [StagedPersistentTile(4, 8, 1), StagedPersistentTile(8, 32, 2, 64, 3), StagedPersistentTile(5, 16, 1)]
    m = _forced_fma_grid_form(cell, hidden, batch, seq, planned, found, pick, seed=hidden + batch + seq)
    assert m.plan.layers[0].persistence.value.staged
    assert any(k.name.startswith("recurrent_persistent_staged_") for k in m.kernels)


@pytest.mark.parametrize("cell", CELLS)
def test_fma_grid_staged_with_lengths(gpu, cell):
    """The staged FMA grid kernel for sequences of different lengths: an ended row keeps its
    state, its outputs are zero past its length."""
    from rnncc.passes.cost import staged_tiles
    from rnncc.target import get
    found = staged_tiles(516, len(CELL_GATES[cell]), 37, get("device"))
    _forced_fma_grid_form(cell, 516, 37, 40, 37, found, "first", seed=11, input_size=20, with_state=True,
                          lengths=_lengths(40, 37))


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_fma_grid_staged_tensor_maps_both_directions(gpu, cell, batch_first):
    """The staged kernel's tensor-map copies of h (sm_90) where y is walked backwards (the
    reverse half of a bidirectional layer: its map starts at the launch's last step), where
    y is batch-first (the batch stride S·2H above the step's 2H) and where the call runs in
    launches of 16 steps (each launch's first step staged by cp.async from the launch
    before's last h, or from h0), at B=37 (the last batch tile's rows past the batch come
    back as zeros), against the reference."""
    from rnncc.passes.cost import staged_tiles
    from rnncc.target import get
    gates = len(CELL_GATES[cell])
    found = staged_tiles(256, gates, 37, get("device"))
    if not found or not found[0].tensor_map:
        pytest.skip("no tensor maps on this GPU")
    value = Persistent.of("grid", "fma", found[0], 256, gates, 4)
    spec = {"name": "bi", "dtype": "float32", "input_size": 24,
            "layers": [{"name": "l0", "cell": cell, "hidden_size": 256, "direction": "bidirectional"}]}

    def force(m):
        for l in m.plan.layers:
            m = m.with_persistence(l.name, value, "forced by the test")
        return m
    m, _, _ = run_and_compare(spec, 40, 37, seed=40 + len(cell), with_state=True, batch_first=batch_first,
                              persistence="grid", precision="exact", gemm="rnncc", unroll=16, batch=37,
                              seq_len=40, force=force)
    assert [l.reverse for l in m.plan.layers] == [False, True]
    assert all(l.persistence.value.tensor_maps and l.unroll.value == 16 for l in m.plan.layers)


# The FMA grid kernel with W_hhᵀ in registers (float32, small batches): (cell, H, B, S,
# planned batch). LSTM H=1024 B=8 is the bench row; H=513, 650 and 33 load h a float at a
# time (rows not whole 16-byte words) and pad K to the warps' float4s of every phase;
# planned for 8, B=13 takes the path past the planned batch; S=1 runs no product past h0;
# H=1 is one unit on one block.
REGISTER_SIZES = [("lstm", 1024, 8, 256, 8), ("gru", 1024, 1, 7, 1), ("rnn_tanh", 513, 5, 33, 5),
                  ("rnn_relu", 33, 3, 256, 3), ("lstm", 650, 13, 64, 8), ("gru", 256, 16, 1, 16), ("lstm", 1, 1, 7, 1)]


@pytest.mark.parametrize("cell,hidden,batch,seq,planned", REGISTER_SIZES)
@pytest.mark.parametrize("pick", ["model", "first", "last"])
def test_fma_grid_registers(gpu, cell, hidden, batch, seq, planned, pick):
    """The registers form of the FMA grid kernel on the tile the model ranks first among
    its candidates, and on the first and last candidate (the narrowest and widest blocks,
    one or two blocks along y, 1 to 4 phases of K), forced, against the reference, with
    initial states on odd batches."""
    from rnncc.passes.cost import register_tiles
    from rnncc.target import get
    found = register_tiles(hidden, len(CELL_GATES[cell]), planned, get("device"))
    m = _forced_fma_grid_form(cell, hidden, batch, seq, planned, found, pick, seed=hidden + batch + seq + 1)
    assert m.plan.layers[0].persistence.value.registers
    assert any(k.name.startswith("recurrent_persistent_registers_") for k in m.kernels)


@pytest.mark.parametrize("cell", CELLS)
def test_fma_grid_registers_with_lengths(gpu, cell):
    """The registers form for sequences of different lengths: an ended row keeps its
    state, its outputs are zero past its length."""
    from rnncc.passes.cost import register_tiles
    from rnncc.target import get
    found = register_tiles(516, len(CELL_GATES[cell]), 13, get("device"))
    _forced_fma_grid_form(cell, 516, 13, 40, 13, found, "last", seed=12, input_size=20, with_state=True,
                          lengths=_lengths(40, 13))


# Tensor-core clusters of 9–16 blocks (the non-portable sizes) and of sizes that are not
# powers of two, both forms, the largest cluster the model considers at each: (form, H, B,
# S). H=130 runs 9 blocks, H=250 16 (B=64: several clusters at once), H=100 13 with S=1
# (no exchange), H=200 13, H=513 (fp16/bf16 only: TF32's W_hh fits no cluster) 13.
WIDE_SIZES = [("shared", 130, 5, 7), ("shared", 250, 64, 33), ("registers", 100, 1, 1),
              ("registers", 200, 3, 256), ("shared", 513, 8, 256)]


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("dtype,form,hidden,batch,seq",
                         [(d, *size) for d in ("float16", "bfloat16", "float32") for size in WIDE_SIZES
                          if not (d == "float32" and size[1] == 513)])
def test_tensor_clusters_of_any_size(gpu, cell, dtype, form, hidden, batch, seq):
    from rnncc.passes.cost import tensor_seconds, tensor_tiles
    itemsize = 4 if dtype == "float32" else 2
    gates = len(CELL_GATES[cell])

    def force(m):
        wide = [t for t in tensor_tiles(hidden, gates, batch, m.target, "cluster", itemsize)
                if t.weights_in_registers == (form == "registers")
                and t.shared_bytes(hidden, gates, itemsize) <= m.target.shared_memory_per_block_optin]
        largest = max(t.cluster for t in wide)
        tile = min((t for t in wide if t.cluster == largest),
                   key=lambda t: tensor_seconds(batch, hidden, gates, t, m.target, itemsize))
        return m.with_persistence("l0", Persistent.of("cluster", "tensor", tile, hidden, gates, itemsize),
                                  "forced by the test")
    m, _, _ = run_and_compare(single(cell, hidden, hidden + 3, dtype), seq, batch,
                              seed=hidden + batch + seq, with_state=batch % 2 == 1,
                              persistence="cluster", precision="tensor", seq_len=seq, batch=batch,
                              force=force)
    tile = m.plan.layers[0].persistence.value.tile
    assert tile.cluster > 8 or tile.cluster & (tile.cluster - 1), tile
    assert m.kernel_of("l0", "recurrent").cluster == tile.cluster


# The grid kernel on tensor cores with several batch tiles a block (2 blocks along y, tiles
# of 8 rows), its tile forced, in launches of 5 steps (the cell state carried between
# them) from a given state. B=41: 6 tiles, the last of one row; planned for 3 a block, the
# tiles stay in registers, planned for 2 the blocks loop over them from memory. B=33: 5
# tiles, so block 1 has one fewer than planned.
@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("batch,tiles", [(41, 3), (33, 3), (41, 2)])
def test_tensor_grid_several_batch_tiles_a_block(gpu, cell, dtype, batch, tiles):
    hidden, itemsize = 100, 4 if dtype == "float32" else 2
    gates = len(CELL_GATES[cell])
    tile = TensorTile(16, 8, 2, gates, 0, 2, tiles_per_block=tiles)

    def force(m):
        return m.with_persistence("l0", Persistent.of("grid", "tensor", tile, hidden, gates, itemsize),
                                  "forced by the test")
    m, _, _ = run_and_compare(single(cell, hidden, 37, dtype), 23, batch, seed=batch + tiles,
                              with_state=True, persistence="grid", precision="tensor", unroll=5,
                              seq_len=23, batch=41, force=force)
    assert m.plan.layers[0].persistence.value.tile == tile
    assert "constexpr int TILES = %d;" % tiles in m.kernel_of("l0", "recurrent").source


# The grid kernel on tensor cores with W_hh held half in registers, half in shared memory
# (TensorTile.register_steps), its tile forced: every cell, fp16 and bf16; H=1024 in 32 blocks
# (the tile that would let 4 layers of a stack run side by side), H=100 with K padded (the
# register part's k-steps past H are zeros), batches of 3, 8 and 13 (a second batch tile
# along y, several tiles a block, and past the planned batch the loop from memory).
@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("hidden,units,k_split,reg_steps,batch,seq",
                         [(1024, 32, 2, 12, 8, 64), (1024, 32, 2, 12, 3, 17), (100, 16, 2, 2, 13, 33)])
def test_tensor_grid_weights_half_in_registers(gpu, cell, dtype, hidden, units, k_split, reg_steps, batch, seq):
    gates = len(CELL_GATES[cell])
    tile = TensorTile(units, 8, k_split, -(-units * gates // 16), 0, 1, register_steps=reg_steps)

    def force(m):
        return m.with_persistence("l0", Persistent.of("grid", "tensor", tile, hidden, gates, 2),
                                  "forced by the test: W_hh half in registers")
    m, _, _ = run_and_compare(single(cell, hidden, hidden, dtype), seq, batch, seed=hidden + batch,
                              with_state=batch % 2 == 1, persistence="grid", precision="tensor",
                              seq_len=seq, batch=8, force=force)
    assert m.plan.layers[0].persistence.value.tile == tile
    assert "constexpr int REG_STEPS = %d;" % reg_steps in m.kernel_of("l0", "recurrent").source


# The grid kernel on tensor cores with all but one k-step of W_hh resident in registers
# (TensorTile.with_weights_resident), as planned: every cell, fp16 and bf16, odd H (K padded
# in the register part) and batches past the planned one (the loop from memory), a batch
# split over two blocks along y at B=13.
@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("hidden,batch,planned,seq", [(777, 5, 5, 33), (650, 13, 13, 17), (1024, 11, 8, 20)])
def test_tensor_grid_weights_resident(gpu, cell, dtype, hidden, batch, planned, seq):
    m, _, _ = run_and_compare(single(cell, hidden, 37, dtype), seq, batch, seed=hidden + batch,
                              with_state=batch % 2 == 1, persistence="grid", precision="tensor",
                              seq_len=256, batch=planned)
    value = m.plan.layers[0].persistence.value
    assert value.mode == "grid" and value.tile.resident(hidden, 2), value.tile
    assert "constexpr int REG_STEPS = %d;" % value.tile.register_steps in m.kernel_of("l0", "recurrent").source


# The grid kernel on tensor cores waiting for h by polling y (TensorTile.polled_exchange,
# planned for SM partitions), forced on the planned tile: every cell; rows of whole 16-byte
# vectors (H=1024, the resident tile of B=8 and, past the planned batch, the loop from
# memory), H=777 (dense rows of odd length: the run of vectors, and rows that start off
# 16 bytes: element polls), H=100 with several batch tiles a block and K padded, one step
# (no wait at all), TF32, wgmma at B=64, lengths (ended rows keep h: every element still
# written each step) and launches of 5 steps (a chunk polls only its own rows).
@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("dtype,hidden,batch,planned,seq,unroll,lengths", [
    ("float16", 1024, 8, 8, 64, None, False), ("bfloat16", 1024, 11, 8, 20, None, False),
    ("float16", 777, 5, 5, 33, None, True), ("bfloat16", 777, 6, 6, 9, 5, False),
    ("float16", 100, 41, 41, 23, 5, True), ("float16", 333, 3, 3, 1, None, False),
    ("float32", 256, 9, 9, 17, None, False), ("float16", 256, 64, 64, 12, None, False)])
def test_tensor_grid_polled_exchange(gpu, cell, dtype, hidden, batch, planned, seq, unroll, lengths):
    from dataclasses import replace

    def force(m):
        value = m.plan.layers[0].persistence.value
        assert value.mode == "grid" and value.math == "tensor", value
        return m.with_persistence("l0", replace(value, tile=replace(value.tile, polled_exchange=True)),
                                  "forced by the test: h polled in y")
    row_lengths = _lengths(seq, batch) if lengths else None
    m, _, _ = run_and_compare(single(cell, hidden, 37, dtype), seq, batch, seed=hidden + batch + seq,
                              with_state=batch % 2 == 1, persistence="grid", precision="tensor",
                              seq_len=max(seq, 16), batch=planned, force=force, lengths=row_lengths,
                              **({"unroll": unroll} if unroll else {}))
    assert m.plan.layers[0].persistence.value.tile.polled_exchange
    assert "load_exchanged_16" in m.kernel_of("l0", "recurrent").source
    m.check_errors()


# The grid kernel on tensor cores with its product by wgmma (W_hh and h in shared memory as
# core matrices), its tile forced: whole warpgroups (GRU's and RNN's rows padded), K split
# 1 and 2 (H=100 padded to 112 or 128), batch tiles of 8 to 32 rows, one and several a
# block, B past the planned batch (the loop from memory).
@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("rows,k_split,batch", [(8, 2, 5), (16, 1, 13), (32, 2, 32), (8, 1, 21)])
def test_tensor_grid_wgmma(gpu, cell, dtype, rows, k_split, batch):
    hidden = 100
    gates = len(CELL_GATES[cell])
    tile = TensorTile(16, rows, k_split, -(-16 * gates // 64) * 4, 0, 1,
                      tiles_per_block=-(-min(batch, 16) // rows), wgmma=True)

    def force(m):
        return m.with_persistence("l0", Persistent.of("grid", "tensor", tile, hidden, gates, 2),
                                  "forced by the test")
    m, _, _ = run_and_compare(single(cell, hidden, 37, dtype), 23, batch, seed=batch + rows,
                              with_state=True, persistence="grid", precision="tensor", unroll=5,
                              seq_len=23, batch=16, force=force)
    assert m.plan.layers[0].persistence.value.tile == tile
    assert "wgmma.mma_async" in m.kernel_of("l0", "recurrent").source


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("hidden,batch,seq", [(1, 64, 7), (33, 5, 256), (256, 1, 1), (256, 8, 256)])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cluster_persistence(gpu, cell, hidden, batch, seq, dtype):
    m, _, _ = run_and_compare(single(cell, hidden, hidden + 3, dtype), seq, batch, seed=hidden * batch,
                              with_state=True, persistence="cluster")
    assert m.plan.layers[0].persistence.value.mode == "cluster"


# Half layers at small H, planned: the FMA cluster kernel's lanes form where the model
# prices it below the tensor-core clusters (GRU fp16 H=100), W_hh converted to float in
# registers; odd H, B past the planned batch, S=1 and the sweep's word-level shape.
@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("hidden,batch,seq,planned", [(100, 1, 256, 1), (100, 20, 35, 20), (33, 5, 1, 5),
                                                      (100, 9, 40, 4)])
def test_half_layers_on_the_fma_lanes_form(gpu, cell, dtype, hidden, batch, seq, planned):
    m, _, _ = run_and_compare(single(cell, hidden, hidden + 3, dtype), seq, batch, seed=hidden + batch,
                              with_state=True, seq_len=max(seq, 35), batch=planned)
    value = m.plan.layers[0].persistence.value
    assert (value.mode, value.math, value.lanes) == ("cluster", "fma", True), value


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("persistence", ["grid", "cluster"])
def test_cluster_in_chunks_with_more_batch_than_planned(gpu, cell, persistence):
    m, _, _ = run_and_compare(single(cell, 100, 40), 23, 37, seed=9, with_state=True,
                              persistence=persistence, unroll=5, batch=4)
    assert m.plan.layers[0].persistence.value.mode == persistence


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_persistent_in_chunks_and_many_batch_tiles(gpu, cell):
    """F < S: one persistent launch per chunk, the cell state carried between them; a batch
    larger than the plan's hint loops over batch tiles inside the same grid."""
    m, _, _ = run_and_compare(single(cell, 100, 40), 23, 37, seed=9, with_state=True,
                              persistence="grid", unroll=5, batch=4)
    assert m.plan.layers[0].unroll.value == 5


@pytest.mark.parametrize("cell", CELLS)
def test_no_bias(gpu, cell):
    run_and_compare(single(cell, 33, 17, bias=False), 7, 5, seed=3)


STACKED = {
    "name": "stacked_skips", "input_size": 19,
    "layers": [
        {"name": "a", "cell": "lstm", "hidden_size": 33},
        {"name": "b", "cell": "gru", "hidden_size": 33},
        {"name": "c", "cell": "rnn_tanh", "hidden_size": 33, "input": {"sum": ["a", "b"]}},
        {"name": "d", "cell": "lstm", "hidden_size": 40, "input": {"concat": ["c", "input", "a"]}},
        {"name": "e", "cell": "rnn_relu", "hidden_size": 40, "input": "d"},
    ],
    "outputs": ["b", "e", {"name": "residual", "sum": ["d", "e"]},
                {"name": "dense", "concat": ["input", "c", "e"]}],
}


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("seq,batch", [(7, 5), (256, 8)])
@pytest.mark.parametrize("persistence", [None, "none"])
def test_stacked_with_sum_and_concat(gpu, seq, batch, batch_first, persistence):
    run_and_compare(STACKED, seq, batch, seed=seq * batch, with_state=True, batch_first=batch_first,
                    persistence=persistence)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_stacked_on_cublaslt(gpu, dtype, batch_first):
    """Merged inputs in cuBLASLt: a concat as one call per source (slices of W_ih at odd
    offsets), a sum written once by a merge kernel and projected by one call; batch-first
    sources as batches of per-step GEMMs."""
    m, _, _ = run_and_compare(dict(STACKED, dtype=dtype), 37, 5, seed=len(dtype), with_state=True,
                              batch_first=batch_first, gemm="cublas", persistence="none")
    assert all(l.projection_tile.value.math == "cublas" for l in m.plan.layers)
    assert not any(k.family == "input_projection" for k in m.kernels)
    assert m.plan.layer("c").merge_fusion.value == "summed"
    assert "c" in m.kernel_of("c", "merge").users


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["xw", "wx"])
@pytest.mark.parametrize("seq,batch", [(1, 1), (1, 5), (2, 3)])  # planned as S·B ≤ 8 (shape classes)
def test_projection_of_a_few_rows(gpu, dtype, layout, seq, batch):
    """The projection of a few rows (a matrix-vector pass, a warp a gate column): merged
    inputs of odd widths (element loads), and one source whose rows are whole 16-byte loads,
    K = 2048 for one row (float32: 16 loads a lane, two groups of 8) and 512 for more (the
    staged rows of one pass fit 48 KiB), in both layouts."""
    m, _, _ = run_and_compare(dict(STACKED, dtype=dtype), seq, batch, seed=seq * 10 + batch, with_state=True,
                              layout=layout)
    ran = m.variant(seq, batch).plan  # the plan of the call's shape class
    assert {l.name for l in ran.layers if l.projection_tile.value.math == "rows"} >= {"b", "c", "d", "e"}
    m, _, _ = run_and_compare(single("gru", 96, 2048 if seq * batch == 1 else 512, dtype), seq, batch,
                              seed=seq + batch, with_state=True, layout=layout)
    # Halves past one row may take the same on tensor cores (K a multiple of 8).
    assert m.variant(seq, batch).plan.layers[0].projection_tile.value.math.startswith("rows")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["xw", "wx"])
@pytest.mark.parametrize("groups,split,n_tiles", [(1, 2, 1), (2, 8, 2), (1, 4, 2)])
@pytest.mark.parametrize("features", [37, 40])
@pytest.mark.parametrize("seq,batch", [(1, 1), (4, 7)])
def test_projection_of_a_few_rows_on_tensor_cores(gpu, dtype, layout, groups, split, n_tiles, features, seq, batch):
    """The projection of a few rows on tensor cores, each tile forced: 16 or 32 gate columns a
    block (GRU H=65: 195 columns, the last block part empty), K split 2–8, one or two tiles of
    8 rows (28 rows: blocks along the rows), merged inputs (a sum of two sources), K whole
    16-byte loads (40) or not (37: W_ih read from a copy with padded rows), both layouts."""
    from dataclasses import replace

    from rnncc.plan import Decision
    from rnncc.tiles import RowsProjectionTensor, StepRows
    tile = RowsProjectionTensor(groups, split, n_tiles, StepRows.row_stride(features, 2))
    spec = {"name": "few", "dtype": dtype, "input_size": features, "layers": [
        {"name": "a", "cell": "lstm", "hidden_size": features},
        {"name": "b", "cell": "gru", "hidden_size": 65, "input": {"sum": ["a", "input"]}}],
        "outputs": ["b", "a"]}

    def force(m):
        return m.with_plan(m.plan.map_layers(lambda l: replace(l, projection_tile=Decision(tile, "forced by the test", "user"))))
    m, _, _ = run_and_compare(spec, seq, batch, seed=seq * 3 + batch, with_state=True, layout=layout, gemm="rnncc",
                              seq_len=seq, batch=batch, force=force)
    assert all(l.projection_tile.value == tile for l in m.plan.layers)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["xw", "wx"])
@pytest.mark.parametrize("features", [37, 650])
def test_tiled_projection_at_unaligned_k(gpu, dtype, layout, features):
    """The tiled projection on tensor cores where K is not whole 16-byte loads: W_ih from
    the copy with padded rows (16-byte loads, W_STRIDE), X by 4-byte pairs (16-bit operands,
    K=650) or by elements (K=37, float32), both layouts, 100 rows (past the rows kernels'
    few); TF32 for float32."""
    from rnncc.tiles import StepRows

    itemsize = 4 if dtype == "float32" else 2
    m, _, _ = run_and_compare(single("lstm", 48, features, dtype), 20, 5, seed=features, with_state=True,
                              layout=layout, gemm="rnncc", precision="tensor")
    tile = m.plan.layers[0].projection_tile.value
    assert tile.math == "tensor" and tile.row_stride == StepRows.row_stride(features, itemsize) > features


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("what,seq,batch", [("stack", 1, 1), ("stack", 1, 5), ("stack", 7, 3), ("stack", 3, 13),
                                            ("wide", 1, 1), ("wide", 5, 8), ("residual", 7, 5),
                                            ("lengths", 9, 6), ("projected", 7, 5)])
def test_step_kernel_rows_form(gpu, dtype, what, seq, batch):
    """The step kernel's rows form (a warp a unit, W_hh as stored with its rows padded to
    whole 16-byte loads, a few rows of h staged): every cell, merged inputs of odd widths
    (K = 33, 40: padded rows), from given states; K of whole loads in several groups (H=520
    LSTM); more rows than a block's (B=13 on tiles of ≤ 8: blocks along y); a residual
    stack, lengths (bidirectional), and projected LSTMs (K = P)."""
    spec, lengths = {
        "stack": (dict(STACKED, dtype=dtype), None),
        "wide": (single("lstm", 520, 24, dtype), None),
        "residual": (dict(RESIDUAL, dtype=dtype), None),
        "lengths": (bidirectional_spec("gru", dtype), random_lengths(seq, batch, 3)),
        "projected": (projected_spec(dtype, 65, 33), None),
    }[what]
    m, _, _ = run_and_compare(spec, seq, batch, seed=seq * 7 + batch, with_state=True, batch_first=what == "residual",
                              persistence="none", gemm="rnncc", step_kernel="rows", lengths=lengths)
    plan = m.variant(seq, batch).plan
    assert all(l.step_tile.value.math.startswith("rows") and l.persistence.value.mode == "none" for l in plan.layers)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("cell,hidden", [("lstm", 33), ("gru", 65), ("rnn_tanh", 520), ("lstm", 300)])
@pytest.mark.parametrize("groups,split,n_tiles", [(1, 2, 1), (3, 4, 2), (2, 8, 1)])
@pytest.mark.parametrize("seq,batch", [(1, 1), (7, 13)])
def test_step_kernel_rows_on_tensor_cores(gpu, dtype, cell, hidden, groups, split, n_tiles, seq, batch):
    """The rows form on tensor cores, each tile forced: 16–48 gate rows a block (GRU's 48
    only: whole units), K split 2–8 over warps, one or two tiles of 8 batch rows; K not a
    multiple of 32 (zeros past it, in W_hh's padded rows and in h), h rows that are not
    whole 16-byte loads (K = 33, 65), units past H in the last block, B=13 over blocks
    along y, given states."""
    from dataclasses import replace

    from rnncc.plan import Decision
    from rnncc.tiles import StepRowsTensor

    gates = {"lstm": 4, "gru": 3, "rnn_tanh": 1}[cell]
    tile = StepRowsTensor.of(gates, 3 if gates == 3 else groups, split, n_tiles)

    def force(m):
        return m.with_plan(m.plan.map_layers(lambda l: replace(l, step_tile=Decision(tile, "forced by the test", "user"))))
    m, _, _ = run_and_compare(single(cell, hidden, 24, dtype), seq, batch, seed=hidden + batch, with_state=True,
                              persistence="none", gemm="rnncc", seq_len=seq, batch=batch, force=force)
    assert m.plan.layers[0].step_tile.value == tile
    assert "mma" in m.kernel_of("l0", "recurrent").source


# Residual layers: h + input written by the step's epilogue, on the model input (its
# batch-first strides), on a sum and on a concat, into the caller's arrays and into the
# workspace; h_n is h's.
RESIDUAL = {
    "name": "residual_stack", "input_size": 33,
    "layers": [
        {"name": "a", "cell": "lstm", "hidden_size": 33, "residual": True},
        {"name": "b", "cell": "gru", "hidden_size": 33, "residual": True},
        {"name": "c", "cell": "rnn_tanh", "hidden_size": 33, "input": {"sum": ["a", "b"]}, "residual": True},
        {"name": "d", "cell": "lstm", "hidden_size": 66, "input": {"concat": ["c", "b"]}, "residual": True},
        {"name": "e", "cell": "rnn_relu", "hidden_size": 66, "residual": True},
    ],
    "outputs": ["e", "c", {"name": "both", "sum": ["a", "c"]}],
}


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("seq,batch", [(7, 5), (256, 8), (1, 64)])
@pytest.mark.parametrize("persistence", ["none", "grid", "cluster"])
def test_residual_layers(gpu, dtype, seq, batch, persistence):
    m, _, _ = run_and_compare(dict(RESIDUAL, dtype=dtype), seq, batch, seed=seq + batch, with_state=True,
                              batch_first=batch == 5, persistence=persistence, gemm="rnncc")
    assert all(l.persistence.value.mode == persistence for l in m.plan.layers)
    assert all("residual_out" in k.source for k in m.kernels if k.family.startswith("recurrent"))


@pytest.mark.parametrize("persistence", ["none", "grid", "cluster"])
def test_packed_arguments_sit_where_the_kernels_read_them(gpu, persistence):
    """A launch packs its arguments into one buffer (driver.param_layout); each kernel
    the call loaded reads them at the offsets the driver reports (cuFuncGetParamInfo)."""
    import ctypes

    from rnncc import driver
    m, _, _ = run_and_compare(dict(RESIDUAL, dtype="float16"), 7, 5, seed=2, with_state=True,
                              persistence=persistence, gemm="rnncc")
    lib, checked = driver._lib(), 0
    for name, fn in m._functions.items():
        for i, (kind, packed_at) in enumerate(zip(fn.kinds, driver.param_offsets(fn.kinds))):
            offset, size = ctypes.c_size_t(), ctypes.c_size_t()
            driver._check(lib.cuFuncGetParamInfo(fn.function, ctypes.c_size_t(i), ctypes.byref(offset),
                                                 ctypes.byref(size)), f"parameter {i} of {name}")
            assert (offset.value, size.value) == (packed_at, 4 if kind == "i32" else 8), \
                f"{name}: parameter {i} ({kind})"
            checked += 1
    assert checked > 20 and len(m._functions) >= 3


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_residual_layers_after_cublaslt(gpu, dtype):
    """The cell kernel that follows cuBLASLt's product writes h + input too."""
    m, _, _ = run_and_compare(dict(RESIDUAL, dtype=dtype), 37, 5, seed=4, with_state=True,
                              gemm="cublas", persistence="none")
    assert all(l.persistence.value.math == "cublas" for l in m.plan.layers)


@pytest.mark.parametrize("name", ["gnmt_encoder", "gnmt_encoder_fp16"])
def test_gnmt_encoder_with_residual_layers(gpu, name):
    """The examples as planned for the call (B not a multiple of 8, a short sequence)."""
    run_and_compare(str(Path(__file__).resolve().parent.parent / "examples" / f"{name}.yaml"), 9, 3,
                    seed=5)


# Bidirectional and reverse layers: a bidirectional layer of each cell, a reverse residual
# layer reading its [S, B, 2H] tensor, and a bidirectional layer on a concat of both; the
# outputs include a bidirectional layer's tensor, written in place by its halves, and a sum.
def bidirectional_spec(cell: str, dtype: str = "float32") -> dict:
    return {"name": f"bi_{cell}", "dtype": dtype, "input_size": 19,
            "layers": [
                {"name": "a", "cell": cell, "hidden_size": 33, "direction": "bidirectional"},
                {"name": "b", "cell": "gru", "hidden_size": 66, "direction": "reverse", "residual": True},
                {"name": "c", "cell": "lstm", "hidden_size": 16, "direction": "bidirectional",
                 "input": {"concat": ["a", "b"]}}],
            "outputs": ["c", "a", {"name": "ab", "sum": ["a", "b"]}]}


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("persistence", [None, "none", "grid", "cluster"])
@pytest.mark.parametrize("schedule", ["sequential", "pipelined"])
def test_bidirectional_and_reverse_layers(gpu, cell, persistence, schedule):
    """Every persistence, one after another or each layer on its stream (the halves at
    once, the next layer after both), from initial states, batch-first."""
    m, _, _ = run_and_compare(bidirectional_spec(cell), 37, 5, seed=len(cell), with_state=True,
                              batch_first=True, persistence=persistence, schedule=schedule)
    assert m.plan.schedule.value.kind == schedule
    assert [l.reverse for l in m.plan.layers] == [False, True, True, False, True]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("seq,batch", [(1, 64), (7, 3), (256, 8)])
def test_bidirectional_as_planned(gpu, dtype, seq, batch):
    """Half precision and float32 as the planner picks for the shape (tensor cores,
    cuBLASLt projections, chunks of the pipelined schedule)."""
    run_and_compare(bidirectional_spec("lstm", dtype), seq, batch, seed=seq + batch, with_state=seq == 7,
                    seq_len=seq, batch=batch)


@pytest.mark.parametrize("gemm", ["cublas", "rnncc"])
@pytest.mark.parametrize("persistence", ["none", "cluster"])
@pytest.mark.parametrize("schedule", ["sequential", "pipelined"])
def test_reverse_layers_in_chunks(gpu, gemm, persistence, schedule):
    """A reverse layer in chunks: each chunk's projection (cuBLASLt's or rnncc's) of its
    steps in time order, read from the chunk's last step; cuBLASLt step products of h read
    downwards. Sequential in chunks of the forced unroll (16, 16, 9), or pipelined."""
    m, _, _ = run_and_compare(bidirectional_spec("gru", "float16"), 41, 6, seed=9, with_state=True,
                              gemm=gemm, persistence=persistence, schedule=schedule, unroll=16,
                              seq_len=41, batch=6)
    chunk = {l.unroll.value for l in m.plan.layers}
    assert len(chunk) == 1 and chunk.pop() < 41


# Sequences of different lengths in one call: lengths from 0 to S, unsorted, repeated.
def random_lengths(S: int, B: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    return [S, 0, *rng.integers(1, S + 1, B - 2)][:B] if B > 1 else [max(1, S // 2)]


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("persistence", [None, "none", "grid", "cluster"])
@pytest.mark.parametrize("schedule", ["sequential", "pipelined"])
def test_lengths_every_persistence(gpu, cell, persistence, schedule):
    """Each row stops at its own length in every kernel family: an ended row keeps its
    state (h_n and c_n at its last step; a reverse layer's row starting at its own end,
    from its h0), the outputs past it are zero; residual, bidirectional, merged outputs."""
    run_and_compare(bidirectional_spec(cell), 37, 6, seed=len(cell) + 1, with_state=True,
                    batch_first=True, persistence=persistence, schedule=schedule,
                    lengths=random_lengths(37, 6, len(cell)))


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("hidden,batch,seq", [(1, 64, 7), (513, 5, 37), (1024, 8, 256)])
def test_lengths_single_layer_as_planned(gpu, cell, dtype, hidden, batch, seq):
    """One layer as the planner picks for the call (grid, cluster, tensor cores, registers,
    cuBLASLt), odd sizes."""
    run_and_compare(single(cell, hidden, hidden + 3, dtype), seq, batch, seed=hidden + batch,
                    with_state=batch % 2 == 1, seq_len=seq, batch=batch,
                    lengths=random_lengths(seq, batch, hidden))


@pytest.mark.parametrize("gemm", ["cublas", "rnncc"])
@pytest.mark.parametrize("persistence", ["none", "cluster"])
def test_lengths_in_chunks(gpu, gemm, persistence):
    """Lengths across chunks (16, 16, 9) of a forward and a reverse layer: each launch's
    first step is its time in the whole sequence."""
    run_and_compare(bidirectional_spec("lstm", "float16"), 41, 7, seed=3, with_state=True, gemm=gemm,
                    persistence=persistence, unroll=16, seq_len=41, batch=7,
                    lengths=[41, 17, 16, 15, 1, 32, 33])


def test_lengths_on_the_device_in_a_cuda_graph(gpu, torch):
    """Lengths as a CUDA int32 tensor: used in place, so the call captures in a CUDA graph;
    a replay on new input and new lengths gives what an eager call with host lengths does."""
    m = rnncc.compile(bidirectional_spec("lstm", "float16"), target="device", seq_len=29, batch=6, seed=4)
    x = torch.randn(29, 6, 19, device="cuda", dtype=torch.float16)
    lengths = torch.tensor([29, 3, 0, 17, 29, 1], dtype=torch.int32, device="cuda")
    graph, (y_static, state_static) = capture(lambda: m(x, lengths=lengths))
    fresh, fresh_lengths = torch.randn_like(x), [5, 29, 28, 1, 0, 11]
    x.copy_(fresh)
    lengths.copy_(torch.tensor(fresh_lengths, dtype=torch.int32))
    graph.replay()
    torch.cuda.synchronize()
    y, state = m(fresh, lengths=fresh_lengths)
    for got, want in zip((*y_static, state_static["a_reverse"][0]), (*y, state["a_reverse"][0])):
        assert torch.equal(got, want)  # the same kernels on the same inputs


def projected_spec(dtype: str, hidden: int, proj: int) -> dict:
    """LSTMs with proj_size: a bidirectional layer (2P features out), a forward one reading
    them and the input, and a reverse one; outputs the last layer and a concat."""
    return {"name": "lstmp", "dtype": dtype, "input_size": 19, "layers": [
        {"name": "a", "cell": "lstm", "hidden_size": hidden, "proj_size": proj, "direction": "bidirectional"},
        {"name": "b", "cell": "lstm", "hidden_size": hidden + 6, "proj_size": max(1, proj // 3),
         "input": {"concat": ["a", "input"]}, "bias": False},
        {"name": "c", "cell": "lstm", "hidden_size": hidden, "proj_size": proj, "direction": "reverse"}],
        "outputs": ["c", {"name": "ab", "concat": ["a", "b"]}]}


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("hidden,proj,batch,seq", [(2, 1, 1, 7), (65, 33, 5, 256), (513, 100, 64, 7),
                                                   (1024, 256, 8, 33)])
@pytest.mark.parametrize("gemm", [None, "cublas", "rnncc"])
def test_projected_lstm(gpu, dtype, hidden, proj, batch, seq, gemm):
    """proj_size (LSTMP): the step kernel (or cuBLASLt's product and the cell kernel) over
    K = P writes r = o ⊙ tanh c, the h projection h = r·W_hrᵀ; odd sizes, bidirectional,
    reverse, initial states (h P wide, c H wide), batch-first."""
    run_and_compare(projected_spec(dtype, hidden, proj), seq, batch, seed=hidden + batch,
                    with_state=batch % 2 == 1, batch_first=seq % 2 == 1, gemm=gemm,
                    seq_len=seq, batch=batch)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("schedule", ["sequential", "pipelined"])
@pytest.mark.parametrize("hidden,proj,batch,seq", [(65, 33, 6, 37), (1024, 256, 64, 41)])
def test_projected_lstm_with_lengths(gpu, dtype, schedule, hidden, proj, batch, seq):
    """Lengths through the h projection: an ended row keeps h (P wide) and c (H wide), a
    reverse layer's row starts at its own end from h0; chunks of 16 steps."""
    run_and_compare(projected_spec(dtype, hidden, proj), seq, batch, seed=proj, with_state=True,
                    schedule=schedule, unroll=16, seq_len=seq, batch=batch,
                    lengths=random_lengths(seq, batch, hidden))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("persistence", ["grid", "cluster"])
@pytest.mark.parametrize("hidden,proj,batch,seq", [(2, 1, 1, 1), (65, 33, 5, 256), (300, 64, 8, 7)])
def test_folded_projected_lstm(gpu, dtype, persistence, hidden, proj, batch, seq):
    """LSTMP folded: the recurrence on r through W_hh·W_hr in a plain LSTM's persistent
    kernel, h0·W_hhᵀ added to the first step's projection, h = r·W_hrᵀ by cuBLASLt;
    bidirectional, reverse, a layer reading 2P + input features, initial states, batch-first."""
    m, _, _ = run_and_compare(projected_spec(dtype, hidden, proj), seq, batch, seed=hidden + 3 * batch,
                              with_state=True, batch_first=seq % 2 == 1, persistence=persistence,
                              seq_len=seq, batch=batch)
    assert all(l.folded and l.persistence.value.mode == persistence for l in m.plan.layers)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("schedule", ["sequential", "pipelined"])
def test_folded_projected_lstm_with_lengths(gpu, dtype, schedule):
    """Lengths through the folded form, in chunks of 16 steps: a reverse layer's row starts
    at its own end, in whichever chunk that is, where h0·W_hhᵀ is added."""
    m, _, _ = run_and_compare(projected_spec(dtype, 65, 33), 37, 6, seed=9, with_state=True,
                              schedule=schedule, unroll=16, persistence="cluster", seq_len=37, batch=6,
                              lengths=random_lengths(37, 6, 65))
    assert all(l.folded for l in m.plan.layers)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("layout", ["xw", "wx"])
def test_stacked_on_tensor_cores(gpu, dtype, layout):
    """Merged inputs (sum, concat) through the tensor-core projection, both layouts, odd
    sizes (K=19, 33·2+19+33) and every persistence the planner picks."""
    m, _, _ = run_and_compare(dict(STACKED, dtype=dtype), 37, 5, seed=len(dtype), with_state=True,
                              precision="tensor", layout=layout, gemm="rnncc")
    assert all(l.projection_tile.value.math == "tensor" for l in m.plan.layers)
    assert all("mma.sync" in k.source for k in m.kernels if k.family == "input_projection")


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_both_layouts_same_numbers(gpu, cell):
    spec = {"name": "layouts", "input_size": 37,
            "layers": [{"name": "a", "cell": cell, "hidden_size": 65},
                       {"name": "b", "cell": cell, "hidden_size": 65,
                        "input": {"concat": ["a", "input"]}}]}
    _, xw, _ = run_and_compare(spec, 7, 5, seed=11, layout="xw", gemm="rnncc")
    _, wx, _ = run_and_compare(spec, 7, 5, seed=11, layout="wx", gemm="rnncc")
    # Same GEMM with the operands swapped: every product and sum in the same order.
    assert all(bool((a == b).all()) for a, b in zip(xw, wx))


def test_autotune_measures_once_then_reads_the_cache(gpu, tmp_path, monkeypatch):
    monkeypatch.setenv("RNNCC_CACHE_DIR", str(tmp_path))
    spec = single("gru", 96, 64, "float16")
    m, _, _ = run_and_compare(spec, 16, 8, seed=1, autotune=True, seq_len=16, batch=8)
    l = m.plan.layers[0]
    assert l.layout.source == l.persistence.source == "measured"
    assert "measured now" in l.layout.reason
    times = l.layout.measured
    assert 2 <= len(times) <= 4 and all(t > 0 for t in times.values())
    fastest = min(times, key=times.get)
    assert fastest.split("/")[:2] == [l.layout.value, l.persistence.value.mode]
    again = rnncc.compile(spec, target="device", autotune=True, seq_len=16, batch=8)
    assert "disk cache" in again.plan.layers[0].layout.reason
    assert again.plan.layers[0].layout.measured == times
    # A corrupt entry is not trusted: measured again and rewritten.
    entry = next((tmp_path / "autotune").glob("*.json"))
    entry.write_text("{garbage")
    third = rnncc.compile(spec, target="device", autotune=True, seq_len=16, batch=8)
    assert "measured now" in third.plan.layers[0].layout.reason
    assert json.loads(entry.read_text())["layout"] == third.plan.layers[0].layout.value


def test_two_processes_tuning_at_once_measure_once(gpu, tmp_path):
    import subprocess
    import sys
    code = ("import rnncc; m = rnncc.compile({'name': 'm', 'dtype': 'float32', 'input_size': 40, "
            "'layers': [{'name': 'l0', 'cell': 'lstm', 'hidden_size': 72}]}, target='device', "
            "autotune=True, seq_len=16, batch=4); print(m.plan.layers[0].layout.reason)")
    env = {**__import__("os").environ, "RNNCC_CACHE_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sorted("measured now" in o for o in outs) == [False, True]  # the other read the cache
    assert len(list((tmp_path / "autotune").glob("*.json"))) == 1


def test_equal_layers_share_kernels(gpu):
    stack = {"name": "stack", "input_size": 48,
             "layers": [{"name": f"l{i}", "cell": "gru", "hidden_size": 48} for i in range(3)]}
    m, _, _ = run_and_compare(stack, 9, 5, seed=6, with_state=True, gemm="rnncc")
    assert [k.users for k in m.kernels] == [("l0", "l1", "l2")] * 2


@pytest.mark.parametrize("unroll", [1, 3, 7])
def test_unroll_factor(gpu, unroll):
    m, _, _ = run_and_compare(single("lstm", 33, 33), 7, 5, seed=5, unroll=unroll)
    assert m.plan.layers[0].unroll.value == unroll


def test_against_torch_lstm_on_gpu(gpu, torch):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(48, 96, num_layers=3, batch_first=True).cuda()
    model, weights = rnncc.from_torch(lstm)
    m = rnncc.compile(model, target="device", weights=weights)
    x = torch.randn(6, 50, 48, device="cuda")
    h0 = torch.randn(3, 6, 96, device="cuda")
    c0 = torch.randn(3, 6, 96, device="cuda")
    with torch.no_grad():
        want, (h_n, c_n) = lstm(x, (h0, c0))
    state = {f"l{i}": (h0[i].contiguous(), c0[i].contiguous()) for i in range(3)}
    y, final = m(x, state, batch_first=True)
    tol = tolerance("float32")
    assert max_relative_error(y.cpu().numpy(), want.cpu().numpy()) <= tol
    for i in range(3):
        assert max_relative_error(final[f"l{i}"][0].cpu().numpy(), h_n[i].cpu().numpy()) <= tol
        assert max_relative_error(final[f"l{i}"][1].cpu().numpy(), c_n[i].cpu().numpy()) <= tol


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("persistence", ["none", "grid", "cluster"])
def test_stacked_state_is_the_per_layer_state(gpu, torch, cell, persistence):
    """stacked_state=True: torch.nn's h_n (c_n) [L, B, H], bitwise the per-layer state, for
    device (torch) and host (NumPy) inputs, poisoned first (conftest)."""
    spec = {"name": "stack3", "input_size": 24,
            "layers": [{"name": f"l{i}", "cell": cell, "hidden_size": 40} for i in range(3)]}
    m = rnncc.compile(spec, target="device", persistence=persistence, seed=3)
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (9, 5, 24)).astype(np.float32)
    state = random_state(m.model, 5, rng, "float32")
    for inputs in (x, torch.from_numpy(x).cuda()):
        dev = not isinstance(inputs, np.ndarray)
        st = {k: tuple(torch.from_numpy(p).cuda() for p in v) if isinstance(v, tuple)
              else torch.from_numpy(v).cuda() for k, v in state.items()} if dev else state
        _, per_layer = m(inputs, st)
        _, stacked = m(inputs, st, stacked_state=True)
        torch.cuda.synchronize()
        parts = stacked if cell == "lstm" else (stacked,)
        for i, part in enumerate(parts):
            got = part.cpu().numpy() if dev else part
            assert got.shape == (3, 5, 40)
            for k in range(3):
                want = per_layer[f"l{k}"][i] if cell == "lstm" else per_layer[f"l{k}"]
                np.testing.assert_array_equal(got[k], want.cpu().numpy() if dev else want)


def test_numpy_cupy_gpuarray_inputs(gpu):
    cupy = pytest.importorskip("cupy")
    import pycuda.gpuarray as gpuarray

    m = rnncc.compile(single("gru", 33, 20), target="device", seed=2)
    x = np.random.default_rng(2).uniform(-1, 1, (7, 5, 20)).astype(np.float32)
    want = reference.run(m.model, m.device_weights(), x)[0][0]
    y_np, _ = m(x)
    y_cp, _ = m(cupy.asarray(x))
    y_ga, _ = m(gpuarray.to_gpu(x))
    assert isinstance(y_np, np.ndarray) and isinstance(y_cp, cupy.ndarray)
    assert isinstance(y_ga, gpuarray.GPUArray)
    for got in (y_np, cupy.asnumpy(y_cp), y_ga.get()):
        assert max_relative_error(got, want) <= tolerance("float32")


def test_wrong_device_dtype_rejected_before_launch(gpu, torch):
    m = rnncc.compile(single("lstm", 8, 4), target="device")
    with pytest.raises(rnncc.RuntimeCheckError, match="dtype float16, expected float32"):
        m(torch.zeros(3, 2, 4, device="cuda", dtype=torch.float16))
    with pytest.raises(rnncc.RuntimeCheckError, match="features are not contiguous"):
        m(torch.zeros(3, 4, 2, device="cuda").transpose(1, 2))


def test_target_read_from_the_device(gpu):
    from rnncc.target import PRESETS, from_device

    t = from_device()
    assert t.sm_count == gpu.device.get_attribute(
        __import__("pycuda.driver", fromlist=["x"]).device_attribute.MULTIPROCESSOR_COUNT)
    assert t.arch.startswith("sm_") and t.shared_memory_per_block_optin > 48 * 1024
    if t.compute_capability == (9, 0):
        assert t.arch == "sm_90a" and t.max_cluster_size == PRESETS["h100"].max_cluster_size


def test_persistent_refused_when_not_co_resident(gpu, monkeypatch):
    """A plan made for a bigger GPU than this one must not launch (it would hang), and
    where one layer of a stack is refused, none of the stack is launched."""
    from rnncc import driver
    from rnncc.target import PRESETS

    # 2048 SMs: one unit per block, 2048 blocks of ≥ 32 KiB shared memory each; an H100
    # holds at most 7 such blocks per SM.
    big = replace(PRESETS["h100"], name="huge", sm_count=2048)
    m = rnncc.compile(single("lstm", 2048, 64), target=big, batch=8, persistence="grid")
    assert m.plan.layers[0].persistence.value.blocks == 2048
    with pytest.raises(rnncc.RuntimeCheckError, match="co-resident blocks but this GPU holds"):
        m(np.zeros((3, 8, 64), np.float32))
    two = {"name": "two", "input_size": 64,
           "layers": [{"name": "l0", "cell": "lstm", "hidden_size": 64},
                      {"name": "l1", "cell": "lstm", "hidden_size": 2048}]}
    m = rnncc.compile(two, target=big, batch=8, persistence="grid", schedule="sequential")
    launches = []
    launch = driver.Kernel.launch
    monkeypatch.setattr(driver.Kernel, "launch", lambda k, *a, **kw: launches.append(k.name) or launch(k, *a, **kw))
    with pytest.raises(rnncc.RuntimeCheckError, match="layer 'l1': the persistent kernel needs 2048"):
        m(np.zeros((3, 8, 64), np.float32))
    assert launches == []


# ---- rnncc.nn on the GPU ---------------------------------------------------------------

@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_nn_twins_against_torch_on_gpu(gpu, torch, cell, dtype, bidirectional):
    import rnncc.nn as rnn

    torch.manual_seed(3)
    tdt = getattr(torch, dtype)
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}.get(cell, torch.nn.RNN)
    kw = {"nonlinearity": cell.removeprefix("rnn_")} if cell.startswith("rnn") else {}
    theirs = cls(40, 48, num_layers=2, batch_first=True, bidirectional=bidirectional,
                 **kw).to("cuda", tdt).eval()
    ours, what = rnn.twin_of(theirs)
    assert ours is not None, what
    x = torch.randn(5, 37, 40, device="cuda", dtype=tdt)
    h0 = torch.randn(4 if bidirectional else 2, 5, 48, device="cuda", dtype=tdt)
    hx = (h0, torch.randn_like(h0)) if cell == "lstm" else h0
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    with torch.inference_mode():
        want, got = theirs(x, hx), ours(x, hx)
    tol = 2 * tolerance(dtype, "tensor" if dtype != "float32" else "exact")  # both approximate
    assert got[0].dtype == tdt and got[0].is_cuda
    assert max_relative_error(got[0].float().cpu().numpy(), want[0].float().cpu().numpy()) <= tol
    states = zip(got[1], want[1]) if cell == "lstm" else [(got[1], want[1])]
    for g, w in states:
        assert max_relative_error(g.float().cpu().numpy(), w.float().cpu().numpy()) <= tol


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_lstmp_twins_against_torch_on_gpu(gpu, torch, dtype, bidirectional):
    """nn.LSTM(proj_size=...) and its twin at S=256: h_n [L·D, B, P], c_n [L·D, B, H]."""
    import rnncc.nn as rnn

    torch.manual_seed(5)
    tdt = getattr(torch, dtype)
    theirs = torch.nn.LSTM(40, 96, num_layers=2, batch_first=True, bidirectional=bidirectional,
                           proj_size=24).to("cuda", tdt).eval()
    ours, what = rnn.twin_of(theirs)
    assert ours is not None and "proj_size=24" in what, what
    D = 2 if bidirectional else 1
    x = torch.randn(5, 256, 40, device="cuda", dtype=tdt)
    hx = (torch.randn(2 * D, 5, 24, device="cuda", dtype=tdt), torch.randn(2 * D, 5, 96, device="cuda", dtype=tdt))
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    tol = 2 * tolerance(dtype, "tensor" if dtype != "float32" else "exact")  # both approximate
    with torch.inference_mode():
        for args in ((x,), (x, hx)):
            want, got = theirs(*args), ours(*args)
            assert got[0].shape == want[0].shape == (5, 256, 24 * D)
            assert max_relative_error(got[0].float().cpu().numpy(), want[0].float().cpu().numpy()) <= tol
            for g, w in zip(got[1], want[1]):
                assert g.shape == w.shape
                assert max_relative_error(g.float().cpu().numpy(), w.float().cpu().numpy()) <= tol


@pytest.mark.parametrize("cell,kw", [("lstm", {}), ("gru", {}), ("rnn_tanh", {}), ("rnn_relu", {}),
                                     ("lstm", {"proj_size": 24})])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_halves_no_worse_than_three_times_cudnns_error(gpu, torch, cell, kw, dtype, bidirectional):
    """Issue 16's bound for fp16/bf16: against the same module in float64 (the stored
    weights and input, on the CPU), the twin's outputs, h_n and c_n at S=256 are no further
    off than 3× cuDNN's own (2 layers, B=8)."""
    import copy

    import rnncc.nn as rnn

    torch.manual_seed(7)
    tdt = getattr(torch, dtype)
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}.get(cell, torch.nn.RNN)
    extra = {"nonlinearity": cell.removeprefix("rnn_")} if cell.startswith("rnn") else kw
    theirs = cls(64, 96, num_layers=2, bidirectional=bidirectional, **extra).to("cuda", tdt).eval()
    exact = copy.deepcopy(theirs).to("cpu", torch.float64)
    ours, _ = rnn.twin_of(theirs)
    x = torch.randn(256, 8, 64, device="cuda", dtype=tdt)
    with torch.inference_mode():
        want, cudnn, got = exact(x.cpu().double()), theirs(x), ours(x)

    def parts(result):
        y, state = result
        return [y, *(state if isinstance(state, tuple) else (state,))]
    for w, c, g in zip(parts(want), parts(cudnn), parts(got)):
        w = w.numpy()
        cudnn_error = max_relative_error(c.float().cpu().numpy(), w)
        assert max_relative_error(g.float().cpu().numpy(), w) <= 3 * cudnn_error


@pytest.mark.parametrize("cell,kw", [("lstm", {}), ("gru", {}), ("lstm", {"proj_size": 13})])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_packed_sequences_on_gpu(gpu, torch, cell, kw, dtype, bidirectional, packed_mismatch):
    """PackedSequence input on the GPU: one call, each row stopping at its own length
    (the backward direction starting at each row's own end); LSTMP too."""
    import rnncc.nn as rnn

    torch.manual_seed(12)
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cell]
    theirs = cls(24, 40, num_layers=2, bidirectional=bidirectional, **kw).to("cuda", getattr(torch, dtype)).eval()
    ours, _ = rnn.twin_of(theirs)
    torch.backends.cudnn.allow_tf32 = False
    tol = 2 * tolerance(dtype, "tensor" if dtype != "float32" else "exact")  # both approximate
    assert packed_mismatch(theirs, ours, "cuda", getattr(torch, dtype)) <= tol


def test_shape_classes_compile_only_new_code(gpu, torch, tmp_path, monkeypatch):
    """A twin plans each shape class on its first call; classes whose kernels equal an
    earlier class's run no nvcc, and a second process with the same cache runs none."""
    import subprocess
    import sys
    import textwrap

    monkeypatch.setenv("RNNCC_CACHE_DIR", str(tmp_path))
    script = textwrap.dedent("""
        import torch, rnncc, rnncc.nn as rnn
        torch.manual_seed(0)
        lstm = rnn.LSTM(32, 64, num_layers=2).to("cuda").requires_grad_(False)
        before = rnncc.cache_info()
        for S in (1, 17, 256, 1000):
            for B in (1, 3, 8, 64, 65, 256):
                y, (h, c) = lstm(torch.randn(S, B, 32, device="cuda"))
                assert y.shape == (S, B, 64) and h.shape == (2, B, 64)
        after = rnncc.cache_info()
        model = rnn._runner_of(lstm._specs["float32"]).compiled[("float32", False)][0]
        print(after.misses - before.misses, len(model.variants),
              len({k.name for v in model.variants for k in v.kernels}))
    """)
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           timeout=600) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    (nvcc_first, classes, distinct), (nvcc_second, _, _) = \
        [tuple(map(int, r.stdout.split()[-3:])) for r in runs]
    assert nvcc_first == distinct and nvcc_second == 0
    print(f"24 (S, B) shapes: {classes} shape classes, {distinct} distinct kernels, "
          f"nvcc runs {nvcc_first} in the first process, {nvcc_second} in the second")


def test_twins_built_alike_keep_their_own_weights(gpu, torch, monkeypatch):
    """An encoder and a decoder of one size (two twins of one spec), called in turn, eager
    and each captured in a CUDA graph, each return what its own torch.nn module returns;
    and a stack trained with dropout, whose levels run one at a time (their specs alike
    past the first where input size = hidden size, as PTB's 2 × LSTM H=650), takes a
    training step after another without its weights going through the host again (each
    level its own compiled model: shared, each call re-sent the other level's weights,
    30× slower than cuDNN), eager and captured in a CUDA graph."""
    import rnncc.nn as rnn
    from rnncc import runtime

    torch.manual_seed(41)
    mods = [torch.nn.LSTM(48, 48).to("cuda", torch.half) for _ in range(2)]
    twins = [rnn.twin_of(m)[0].requires_grad_(False) for m in mods]
    x = torch.randn(11, 5, 48, device="cuda", dtype=torch.half)
    with torch.no_grad():
        want = [m(x)[0] for m in mods]
        for _ in range(2):
            for t, w in zip(twins, want):
                torch.testing.assert_close(t(x)[0], w, rtol=1e-2, atol=1e-3)
        graphs, outs = [], []
        for t in twins:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                outs.append(t(x)[0])
            graphs.append(g)
        for g in graphs:
            g.replay()
        torch.cuda.synchronize()
        for o, w in zip(outs, want):
            torch.testing.assert_close(o, w, rtol=1e-2, atol=1e-3)

    stack = rnn.LSTM(64, 64, num_layers=3, dropout=0.5).to("cuda", torch.half)
    xs = torch.randn(7, 3, 64, device="cuda", dtype=torch.half, requires_grad=True)
    torch.autograd.grad(stack(xs)[0].float().sum(), [xs, *stack.parameters()])  # compiled, weights sent

    def through_the_host(*args, **kw):
        raise AssertionError("load_state_dict: a level's weights were sent again")
    monkeypatch.setattr(runtime.CompiledModel, "load_state_dict", through_the_host)
    monkeypatch.setattr(runtime.CompiledModel, "refresh_weights", lambda *a: through_the_host())
    def step():
        return torch.autograd.grad(stack(xs)[0].float().sum(), [xs, *stack.parameters()])

    for _ in range(3):
        assert all(bool(torch.isfinite(g).all()) for g in step())
    # ... and captured in a CUDA graph (its levels' weights not sent inside the capture),
    # each replay drawing new masks
    graph, static = capture(step, warm=1)
    replays = []
    for _ in range(2):
        graph.replay()
        torch.cuda.synchronize()
        assert all(bool(torch.isfinite(g).all()) for g in static)
        replays.append(static[0].clone())
    assert not torch.equal(*replays)


def test_twins_run_the_plan_of_the_calls_shape(gpu, torch):
    """At B ∈ {1, 8, 64, 256} a twin runs the plan compile(seq_len=S, batch=B) makes."""
    import rnncc.nn as rnn

    twin = rnn.LSTM(512, 512).to("cuda", torch.half).requires_grad_(False)
    for B in (1, 8, 64, 256):
        twin(torch.randn(256, B, 512, device="cuda", dtype=torch.half))
        model = rnn._runner_of(twin._specs["float16"]).compiled[("float16", False)][0]
        alone = rnncc.compile(model.model, target="device", seq_len=256, batch=B)
        assert model.variant(256, B).plan.layers == alone.plan.layers, B


def test_optimize_the_example_model_on_gpu(gpu, torch):
    import runpy
    runpy.run_path("examples/swap_into_model.py", run_name="__main__")  # asserts ≤ 1e-5 itself


# ---- replayed calls (call_program.py) -----------------------------------------------------

REPLAY_CASES = {
    # (spec, S, B, compile options, batch_first, with initial states)
    "grid fp16, cuBLASLt projection": (single("lstm", 256, 64, "float16"), 33, 8,
                                       {"persistence": "grid", "gemm": "cublas"}, False, False),
    "grid fp16 from states": (single("lstm", 256, 64, "float16"), 33, 8, {"persistence": "grid"}, False, True),
    "cluster bf16": (single("gru", 96, 40, "bfloat16"), 40, 5, {"persistence": "cluster"}, False, False),
    "per step, cuBLASLt products, from states": (single("lstm", 65, 19), 9, 3,
                                                 {"persistence": "none", "gemm": "cublas"}, True, True),
    "stacked sum and concat": (STACKED, 7, 5, {}, True, False),
    "stacked from states": (STACKED, 7, 5, {}, False, True),
    "bidirectional, residual, sequential": (bidirectional_spec("lstm", "float16"), 37, 5,
                                            {"schedule": "sequential"}, False, False),
    "projected LSTM": (projected_spec("float16", 65, 33), 17, 6, {"schedule": "sequential"}, False, True),
    # side streams and events
    "stacked, pipelined": (STACKED, 40, 5, {"schedule": "pipelined", "unroll": 16}, False, False),
    "bidirectional, residual, pipelined, from states": (
        bidirectional_spec("lstm", "float16"), 37, 5, {"schedule": "pipelined", "unroll": 16}, True, True),
}


@pytest.mark.parametrize("case", list(REPLAY_CASES))
def test_replayed_calls_equal_the_forward(gpu, torch, case):
    """After a first call of a signature, later calls replay its recorded work with their
    own input, initial states, outputs and workspace: bit for bit what the forward gives
    on each of three inputs (so no replayed pointer is the first call's), the first call's
    outputs kept alive throughout, and poisoned buffers refilled."""
    spec, S, B, options, batch_first, with_state = REPLAY_CASES[case]
    m = rnncc.compile(spec, target="device", seq_len=S, batch=B, seed=3, **options)
    tdt = getattr(torch, m.model.dtype)
    shape = (B, S, m.model.input_size) if batch_first else (S, B, m.model.input_size)
    xs = [torch.rand(shape, device="cuda", dtype=tdt) * 2 - 1 for _ in range(3)]
    rng = np.random.default_rng(7)
    states = [random_device_state(torch, m.model, B, rng) if with_state else None for _ in xs]

    def flat(result):
        y, final = result
        leaves = list(y) if isinstance(y, tuple) else [y]
        for v in final.values():
            leaves += list(v) if isinstance(v, tuple) else [v]
        return [t.clone() for t in leaves]

    m.replay = False
    want = [flat(m(x, st, batch_first=batch_first)) for x, st in zip(xs, states)]
    m.replay = True
    kept = m(xs[0], states[0], batch_first=batch_first)  # records
    # One program; a call without states also keyed from the tensor alone (_replayed).
    assert len(m._programs) == (1 if with_state else 2)
    programs = {id(entry.program): entry.program for entry in m._programs.values()}
    assert len(programs) == 1 and None not in programs.values(), "the call was not recorded as replayable"
    got = [flat(m(x, st, batch_first=batch_first)) for x, st in zip(xs, states)]  # replays
    for i, (g, w) in enumerate(zip(got, want)):
        assert all(torch.equal(a, b) for a, b in zip(g, w)), f"input {i}"
    assert all(torch.equal(a, b) for a, b in zip(flat(kept), want[0]))


def test_replay_from_the_tensor_still_checks(gpu, torch):
    """A call replayed from its tensor's signature alone (shape, strides, dtype, device,
    alignment) skips __call__'s checks: a tensor that differs in any of them goes the
    long way, where a bad one is refused and a good one gets its own program."""
    from rnncc.errors import RuntimeCheckError

    m = rnncc.compile(single("gru", 64, 32, "float16"), target="device", seq_len=12, batch=3, seed=2)
    x = torch.rand(12, 3, 32, device="cuda", dtype=torch.half)
    y0, _ = m(x)
    y1, _ = m(x)  # replayed from the tensor
    assert torch.equal(y0, y1)
    with pytest.raises(RuntimeCheckError, match="dtype"):
        m(x.float())
    with pytest.raises(RuntimeCheckError, match="contiguous"):
        m(torch.rand(12, 3, 64, device="cuda", dtype=torch.half)[:, :, ::2])
    rows = torch.rand(12, 6, 32, device="cuda", dtype=torch.half)[:, ::2]  # other strides
    block = torch.rand(12 * 3 * 32 + 1, device="cuda", dtype=torch.half)
    shifted = block[1:].view(12, 3, 32)  # 2 bytes past an allocation's start
    for other in (rows, shifted, x.cpu()):
        for _ in range(2):  # recorded, then replayed
            got, _ = m(other)
            want, _ = m(other.contiguous().cuda())
            assert max_relative_error(got.float().cpu().numpy(), want.float().cpu().numpy()) \
                <= tolerance("float16")


@pytest.mark.parametrize("proj", [0, 24])
def test_replay_after_new_weights_and_in_a_cuda_graph(gpu, torch, proj):
    """New weights (load_state_dict) drop the recorded calls (a folded LSTMP's W_hh·W_hr is
    made again from them); a replayed call captured in a CUDA graph replays on fresh input
    as an eager call computes it."""
    spec = single("lstm", 128, 32, "float16")
    spec["layers"][0] |= {"proj_size": proj} if proj else {}
    m = rnncc.compile(spec, target="device", seq_len=20, batch=4, seed=1)
    assert m.plan.layers[0].folded == bool(proj)
    x = torch.rand(20, 4, 32, device="cuda", dtype=torch.half)
    m(x), m(x)
    assert m._programs
    m.load_state_dict({k: v * 0.5 for k, v in m.state_dict().items()})
    assert not m._programs
    m(x)  # recorded with the new weights
    y, _ = m(x)  # replayed
    want = reference.run(m.model, m.device_weights(), x.double().cpu().numpy())[0][0]
    assert max_relative_error(y.float().cpu().numpy(), want) <= tolerance("float16")
    replayed, eager, _ = replay_on_fresh_input(torch, m, x)
    assert torch.equal(replayed, eager)


# ---- calls replayed from CUDA graphs (call_graphs.py) -----------------------------------

GRAPH_CASES = {
    # (spec, S, B, compile options, batch_first)
    "cluster fp16": (single("lstm", 96, 40, "float16"), 40, 5, {"persistence": "cluster"}, False),
    "grid fp16, cuBLASLt projection": (single("lstm", 256, 64, "float16"), 33, 8,
                                       {"persistence": "grid", "gemm": "cublas"}, True),
    "per step, bf16 GRU": (single("gru", 65, 19, "bfloat16"), 9, 3, {"persistence": "none"}, False),
    "stacked sum and concat": (STACKED, 7, 5, {}, True),
    "stacked, pipelined": (STACKED, 40, 5, {"schedule": "pipelined", "unroll": 16}, False),
    "bidirectional, residual, pipelined": (bidirectional_spec("lstm", "float16"), 37, 5,
                                           {"schedule": "pipelined", "unroll": 16}, True),
}


def flat_result(result) -> list:
    y, final = result
    leaves = list(y) if isinstance(y, tuple) else [y]
    for v in (final.values() if isinstance(final, dict) else [final]):
        leaves += list(v) if isinstance(v, tuple) else [v]
    return leaves


def graph_case(torch, monkeypatch, case):
    """GRAPH_CASES[case] compiled with every call worth a CUDA graph and without the debug
    knob (which keeps calls off graphs: a replay would not poison), and five inputs:
    (model, inputs, B, batch_first)."""
    from rnncc import runtime

    monkeypatch.delenv("RNNCC_DEBUG_POISON")
    monkeypatch.setattr(runtime, "GRAPH_MIN_OPERATIONS", 0)
    spec, S, B, options, batch_first = GRAPH_CASES[case]
    m = rnncc.compile(spec, target="device", seq_len=S, batch=B, seed=4, **options)
    tdt = getattr(torch, m.model.dtype)
    shape = (B, S, m.model.input_size) if batch_first else (S, B, m.model.input_size)
    return m, [torch.rand(shape, device="cuda", dtype=tdt) * 2 - 1 for _ in range(5)], B, batch_first


@pytest.mark.parametrize("case", list(GRAPH_CASES))
def test_calls_replayed_from_a_cuda_graph(gpu, torch, monkeypatch, case):
    """The third call of a signature captures its program in a CUDA graph, and later calls
    replay it: on five inputs every output equals the forward's bit for bit, outputs handed
    out earlier are not overwritten by later replays, no two outputs share storage (as
    torch.nn's do not), and an input that is not contiguous replays the program instead.
    Without the debug knob, which keeps every call off graphs (a replay would not poison),
    and with every call worth a graph (one-layer calls are not, by default)."""
    m, xs, _, batch_first = graph_case(torch, monkeypatch, case)
    m.replay = False
    want = [[t.clone() for t in flat_result(m(x, batch_first=batch_first))] for x in xs]
    m.replay = True
    got = [flat_result(m(x, batch_first=batch_first)) for x in xs]  # records, replays, captures
    assert m._graphs is not None and m._graphs.captures == 1 and not m._graphs.failed
    for i, (g, w) in enumerate(zip(got, want)):
        assert all(torch.equal(a, b) for a, b in zip(g, w)), f"input {i}"
    storages = {t.untyped_storage().data_ptr() for g in got for t in g}
    assert len(storages) == sum(len(g) for g in got)
    d0, d1, d2 = xs[0].shape
    strided = torch.rand((d0, d1 * 2, d2), device="cuda", dtype=xs[0].dtype)[:, ::2]
    for _ in range(3):
        y = flat_result(m(strided, batch_first=batch_first))
    assert m._graphs.captures == 1
    assert all(torch.equal(a, b) for a, b in zip(y, flat_result(m(strided.contiguous(), batch_first=batch_first))))


@pytest.mark.parametrize("case", ["grid fp16, cuBLASLt projection", "stacked, pipelined",
                                  "bidirectional, residual, pipelined"])
def test_calls_with_states_replayed_from_a_cuda_graph(gpu, torch, monkeypatch, case):
    """A call with initial states is replayed from a CUDA graph too, its states copied into
    the graph's with x (CompiledModel._graph_replayed with states): on five inputs and
    states every output equals the forward's bit for bit, one graph is captured, and a
    caller that feeds each call's final state into the next (a language model's batches)
    gets the forward's numbers throughout."""
    m, xs, B, batch_first = graph_case(torch, monkeypatch, case)
    rng = np.random.default_rng(5)
    states = [random_device_state(torch, m.model, B, rng) for _ in xs]
    m.replay = False
    want = [[t.clone() for t in flat_result(m(x, st, batch_first=batch_first))] for x, st in zip(xs, states)]
    m.replay = True
    got = [flat_result(m(x, st, batch_first=batch_first)) for x, st in zip(xs, states)]
    assert m._graphs is not None and m._graphs.captures == 1 and not m._graphs.failed
    for i, (g, w) in enumerate(zip(got, want)):
        assert all(torch.equal(a, b) for a, b in zip(g, w)), f"input {i}"
    storages = {t.untyped_storage().data_ptr() for g in got for t in g}
    assert len(storages) == sum(len(g) for g in got)

    def carried(replay: bool) -> list:
        m.replay = replay
        state, out = states[0], []
        for x in xs:
            y, state = m(x, state, batch_first=batch_first)
            out += [t.clone() for t in flat_result((y, state))]
        return out
    assert all(torch.equal(a, b) for a, b in zip(carried(True), carried(False)))


def test_a_graph_captured_under_inference_mode_replays_outside_it(gpu, torch, monkeypatch):
    """A forward's graph captured inside torch.inference_mode replays outside it and back:
    its input copy is a normal tensor (an inference tensor refuses in-place copies outside
    inference_mode), and every call equals the forward bit for bit."""
    from rnncc import runtime

    monkeypatch.delenv("RNNCC_DEBUG_POISON")
    monkeypatch.setattr(runtime, "GRAPH_MIN_OPERATIONS", 0)
    m = rnncc.compile(single("gru", 96, 40, "float16"), target="device", seq_len=20, batch=5, seed=2)
    xs = [torch.rand(20, 5, 40, device="cuda", dtype=torch.half) for _ in range(4)]
    m.replay = False
    want = [m(x)[0].clone() for x in xs]
    m.replay = True
    with torch.inference_mode():
        got = [m(x)[0].clone() for x in xs[:3]]  # records, replays, captures
    assert m._graphs.captures == 1
    got.append(m(xs[3])[0])
    with torch.inference_mode():
        got.append(m(xs[0])[0].clone())
    assert all(torch.equal(g, w) for g, w in zip(got, want + want[:1]))


def test_graph_replays_on_two_streams_and_two_threads(gpu, torch, monkeypatch):
    """A graph per stream: one model on two streams from one thread (no synchronisation
    between calls) and from two threads, bit for bit the serial calls; new weights drop
    the graphs, and the next calls compute with the new weights."""
    from rnncc import runtime

    monkeypatch.delenv("RNNCC_DEBUG_POISON")
    monkeypatch.setattr(runtime, "GRAPH_MIN_OPERATIONS", 0)
    m = caller_model(("lstm", "float16", 1024, 8, 1, "grid", None))
    xs = [torch.randn(48, 8, 1024, device="cuda", dtype=torch.half) for _ in range(2)]
    serial = assert_two_streams_equal_serial(torch, m, xs, 20)
    assert m._graphs.captures == 2  # one a stream
    assert not threads_with_a_stream_each(torch, m, xs, serial, 20)
    assert m._graphs.captures == 4 and not m._graphs.failed
    m.load_state_dict({k: v * 0.5 for k, v in m.state_dict().items()})
    assert m._graphs is None
    for _ in range(4):
        y, _ = m(xs[0])
    assert m._graphs.captures == 1
    want = reference.run(m.model, m.device_weights(), xs[0].double().cpu().numpy())[0][0]
    assert max_relative_error(y.float().cpu().numpy(), want) <= tolerance("float16")
    m.check_errors()


# ---- streams and CUDA graphs -----------------------------------------------------------

def test_runs_on_the_callers_stream(gpu, torch):
    """On a side stream, the input is written after slow work; rnncc must wait for it (it
    launches on the current stream), and work queued after it must see its output."""
    import rnncc.nn as rnn

    torch.manual_seed(5)
    lstm = rnn.LSTM(64, 96, num_layers=2).cuda().requires_grad_(False)
    x = torch.full((33, 7, 64), float("nan"), device="cuda")
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        big = torch.randn(4096, 4096, device="cuda")
        for _ in range(30):  # slow work ahead of the input on this stream
            big = torch.tanh(big @ big)
        x.copy_(torch.rand(33, 7, 64, device="cuda") + 0 * big[:33, :1, None].sum())
        y, (h, c) = lstm(x)
        after = y * 2.0
    side.synchronize()
    want = rnncc.reference.run(lstm._spec("float32"), {k: v.cpu().numpy() for k, v in lstm._weights().items()},
                               x.cpu().double().numpy())[0][0]
    assert max_relative_error(after.cpu().numpy() / 2.0, want) <= tolerance("float32")


def test_runs_on_cupys_current_stream(gpu):
    """The same ordering for CuPy input: rnncc launches on CuPy's current stream (a
    non-blocking one here, so nothing orders it with the default stream by accident)."""
    cupy = pytest.importorskip("cupy")

    m = rnncc.compile(single("gru", 96, 64), target="device", seed=5)
    x = cupy.full((33, 7, 64), cupy.nan, dtype=cupy.float32)
    cupy.cuda.Device().synchronize()
    side = cupy.cuda.Stream(non_blocking=True)
    with side:
        big = cupy.random.standard_normal((4096, 4096), dtype=cupy.float32)
        for _ in range(30):  # slow work ahead of the input on this stream
            big = cupy.tanh(big @ big)
        x[...] = cupy.random.uniform(-1, 1, (33, 7, 64), dtype=cupy.float32) + 0 * big[:33, :1, None].sum()
        y, _ = m(x)
        after = y * 2.0
    side.synchronize()
    want = reference.run(m.model, m.device_weights(), cupy.asnumpy(x))[0][0]
    assert max_relative_error(cupy.asnumpy(after) / 2.0, want) <= tolerance("float32")


@pytest.mark.parametrize("persistence,schedule", [("grid", "sequential"), ("cluster", "sequential"),
                                                  ("none", "sequential"), (None, "pipelined")])
def test_every_launch_kind_is_captured(gpu, torch, persistence, schedule):
    """Cooperative (grid), cluster and plain launches, and a pipelined call's side streams,
    captured by torch.cuda.graph: a replay on fresh input equals an eager call."""
    spec = {"name": "two", "dtype": "float16", "input_size": 48,
            "layers": [{"name": "l0", "cell": "lstm", "hidden_size": 64},
                       {"name": "l1", "cell": "gru", "hidden_size": 64}]}
    m = rnncc.compile(spec, target="device", batch=5, seq_len=40, persistence=persistence,
                      schedule=schedule, unroll=16 if schedule == "pipelined" else None)
    assert m.plan.schedule.value.pipelined == (schedule == "pipelined")
    replayed, eager, _ = replay_on_fresh_input(torch, m, torch.randn(40, 5, 48, device="cuda", dtype=torch.half))
    assert torch.equal(replayed, eager)


def replay_on_fresh_input(torch, fn, x, warm: int = 2):
    """(fn(x)'s output captured by torch.cuda.graph, replayed after x is refilled with fresh
    values; fn's output on those values eager; the graph). fn runs ``warm`` times on a side
    stream first (compiles, the workspace), as capture requires."""
    graph, out = capture(lambda: fn(x), warm)
    static = out[0]
    fresh = torch.randn_like(x)
    x.copy_(fresh)
    graph.replay()
    torch.cuda.synchronize()
    return static, fn(fresh)[0], graph


def test_cuda_graph_capture_replays(gpu, torch, monkeypatch):
    """The forward allocates nothing once warm and never synchronises, so torch.cuda.graph
    captures it; replays give eager's numbers. Prints captured vs eager time (H=256, B=8,
    S=64, fp16, where launch overhead matters), timed without the tests' NaN poisoning
    (its memsets would be part of the eager time)."""
    import rnncc.nn as rnn

    torch.manual_seed(6)
    for persistence_case in ("lstm", "gru"):
        monkeypatch.setenv("RNNCC_DEBUG_POISON", "1")
        cls = rnn.LSTM if persistence_case == "lstm" else rnn.GRU
        model = cls(256, 256).cuda().half().requires_grad_(False)
        x = torch.randn(64, 8, 256, device="cuda", dtype=torch.half)
        y_static, eager, graph = replay_on_fresh_input(torch, model, x, warm=3)
        assert torch.equal(y_static, eager)  # the same kernels on the same inputs
        monkeypatch.delenv("RNNCC_DEBUG_POISON")

        def per_call_ms(fn, n=50) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            fn()
            start.record()
            for _ in range(n):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / n
        t_eager, t_graph = per_call_ms(lambda: model(x)), per_call_ms(graph.replay)
        plan = rnn._runner_of(model._specs["float16"]).compiled[("float16", False)][0].variant(64, 8).plan
        print(f"{persistence_case} fp16 H=256 B=8 S=64 ({plan.layers[0].persistence.value.mode}): "
              f"eager {t_eager:.3f} ms, captured {t_graph:.3f} ms a forward")


def test_torch_compile_fullgraph(gpu, torch, rnncc_tagger):
    """The forward is the custom op rnncc::forward with a fake implementation: a model
    with rnncc modules inside compiles with fullgraph=True (no graph break) and gives
    eager's numbers."""
    torch.manual_seed(8)

    model = rnncc_tagger(32, 48, 40).cuda().requires_grad_(False)
    x = torch.randn(6, 11, 32, device="cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    eager = model(x)
    compiled = torch.compile(model, fullgraph=True)
    got = compiled(x)
    assert got.shape == eager.shape and torch.allclose(got, eager, rtol=1e-5, atol=1e-5)
    got2 = compiled(torch.randn(9, 3, 32, device="cuda"))  # other S and B
    assert got2.shape == (3, 9, 5)


# ---- one model, many callers -------------------------------------------------------------

def within(seconds: float, fn, *args):
    """Run fn in a thread; fail (rather than hang the suite) if it has not ended in time."""
    import threading

    box: dict = {}

    def body():
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            box["error"] = exc
    worker = threading.Thread(target=body, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        pytest.fail(f"{getattr(fn, '__name__', fn)} did not finish in {seconds} s (a hang)")
    if "error" in box:
        raise box["error"]
    return box.get("value")


# (cell, dtype, H, B, layers, persistence, precision): every mode on FMA and tensor cores,
# fp32 exact and TF32, fp16 and bf16, cuBLASLt's step path included.
CALLER_CASES = [
    ("lstm", "float32", 256, 8, 2, "none", "exact"),
    ("gru", "float32", 256, 8, 1, "grid", "exact"),
    ("lstm", "float32", 256, 8, 1, "cluster", "exact"),
    ("lstm", "float32", 256, 8, 1, "cluster", "tensor"),
    ("lstm", "float16", 1024, 8, 1, "grid", None),
    ("gru", "float16", 256, 8, 1, "cluster", None),
    ("lstm", "float16", 512, 8, 1, "cluster", None),  # its projection in the launch (eager plan)
    ("gru", "bfloat16", 512, 64, 1, "none", None),
    ("gru", "float32", 1024, 64, 1, None, None),
]


def caller_model(case, gemm=None):
    cell, dtype, H, B, layers, persistence, precision = case
    spec = {"name": f"callers_{cell}_{dtype}_{H}", "dtype": dtype, "input_size": H,
            "layers": [{"name": f"l{i}", "cell": cell, "hidden_size": H} for i in range(layers)]}
    return rnncc.compile(spec, target="device", batch=B, seq_len=48, persistence=persistence,
                         precision=precision, gemm="cublas" if persistence == "none" and dtype == "bfloat16" else gemm)


def assert_two_streams_equal_serial(torch, m, xs, rounds: int) -> list:
    """m called on one stream per input of ``xs`` from one thread, no synchronisation
    between the calls, ``rounds`` times (within 120 s): every output equals that input's
    serial call, bit for bit. Returns the serial calls' outputs."""
    serial = []
    for x in xs:
        serial.append(m(x)[0].clone())
        torch.cuda.synchronize()
    streams = [torch.cuda.Stream() for _ in xs]

    def run():
        got = []
        for _ in range(rounds):
            for s, x in zip(streams, xs):
                with torch.cuda.stream(s):
                    got.append(m(x)[0])
        torch.cuda.synchronize()
        return got
    for i, y in enumerate(within(120, run)):
        assert torch.equal(y, serial[i % len(xs)]), f"round {i // len(xs)}, stream {i % len(xs)}"
    return serial


@pytest.mark.parametrize("case", CALLER_CASES, ids=lambda c: "-".join(map(str, c)))
def test_one_model_two_streams_bitwise_equal_to_serial(gpu, torch, case):
    """One model called on two streams from one thread, no synchronisation between the
    calls, 100 rounds: every output equals the serial call's, bit for bit."""
    m = caller_model(case)
    tdt = getattr(torch, case[1])
    B, H = case[3], case[2]
    xs = [torch.randn(48, B, H, device="cuda", dtype=tdt) for _ in range(2)]
    assert_two_streams_equal_serial(torch, m, xs, 100)
    m.check_errors()


def threads_with_a_stream_each(torch, m, xs, serial, calls: int) -> list:
    """m called ``calls`` times on xs[i] by thread i on a stream of its own (within 120 s);
    returns (thread, call) of each output that differs from serial[i], bit for bit."""
    import threading

    failures = []

    def worker(i):
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            outs = [m(xs[i])[0] for _ in range(calls)]
        s.synchronize()
        failures.extend((i, j) for j, y in enumerate(outs) if not torch.equal(y, serial[i]))

    def all_threads():
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(xs))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    within(120, all_threads)
    return failures


def test_two_threads_each_with_a_stream(gpu, torch):
    m = caller_model(("lstm", "float16", 1024, 8, 1, "grid", None))
    xs = [torch.randn(48, 8, 1024, device="cuda", dtype=torch.half) for _ in range(2)]
    serial = [m(x)[0].clone() for x in xs]
    torch.cuda.synchronize()
    assert not threads_with_a_stream_each(torch, m, xs, serial, 100)


def test_two_grid_models_on_two_streams(gpu, torch):
    """Two different grid-persistent models, each filling much of the GPU, on two streams
    at once: the cooperative launch keeps either from waiting on blocks that are not there."""
    a = caller_model(("lstm", "float16", 1024, 8, 1, "grid", None))
    b = caller_model(("gru", "float16", 1024, 8, 1, "grid", None))
    xa = torch.randn(48, 8, 1024, device="cuda", dtype=torch.half)
    xb = torch.randn(48, 8, 1024, device="cuda", dtype=torch.half)
    want = (a(xa)[0].clone(), b(xb)[0].clone())
    torch.cuda.synchronize()
    sa, sb = torch.cuda.Stream(), torch.cuda.Stream()

    def rounds():
        got = []
        for _ in range(100):
            with torch.cuda.stream(sa):
                got.append((0, a(xa)[0]))
            with torch.cuda.stream(sb):
                got.append((1, b(xb)[0]))
        torch.cuda.synchronize()
        return got
    for which, y in within(120, rounds):
        assert torch.equal(y, want[which])


def test_persistent_model_beside_a_long_kernel(gpu, torch):
    """A grid-persistent model launched while a long kernel holds half the SMs on another
    stream finishes, with the serial call's numbers."""
    cupy = pytest.importorskip("cupy")
    m = caller_model(("lstm", "float16", 1024, 8, 1, "grid", None))
    x = torch.randn(48, 8, 1024, device="cuda", dtype=torch.half)
    want = m(x)[0].clone()
    torch.cuda.synchronize()
    hold = cupy.RawKernel(r"""
    extern "C" __global__ void hold(long long ns) {
        extern __shared__ char s[];
        unsigned long long t0, t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); s[threadIdx.x] = (char)t; }
        while ((long long)(t - t0) < ns);
    }""", "hold")
    smem = 200 * 1024  # one such block per SM
    hold.max_dynamic_shared_size_bytes = smem
    side = cupy.cuda.Stream(non_blocking=True)
    sms = torch.cuda.get_device_properties(0).multi_processor_count

    def run():
        with side:
            hold((sms // 2,), (32,), (300_000_000,), shared_mem=smem)  # 0.3 s
        y = m(x)[0]
        torch.cuda.synchronize()
        side.synchronize()
        return y
    y = within(60, run)
    assert torch.equal(y, want)
    m.check_errors()


@pytest.mark.parametrize("mode,dtype,hidden,math", [("grid", "float16", 1024, "tensor"),
                                                    ("cluster", "float16", 256, "tensor"),
                                                    ("cluster", "float32", 256, "fma"),
                                                    ("cluster", "float16", 100, "fma")])
def test_forced_spin_wait_bound_raises_then_recovers(gpu, torch, monkeypatch, mode, dtype, hidden, math):
    """RNNCC_SPIN_TIMEOUT_MS=0 makes the first wait give up: the kernel ends, the model
    raises DeviceTimeout naming the layer and mode, and the next call is right again. The
    cluster cases: the tensor-core kernel (fp16 H=256), the FMA kernel (fp32 exact) and its
    lanes form, whose lanes push h and wait on one mbarrier (fp16 H=100)."""
    case = ("lstm", dtype, hidden, 8, 1, mode, None)
    m = caller_model(case)
    v = m.plan.layers[0].persistence.value
    assert v.mode == mode and v.math == math and (hidden != 100 or v.lanes)
    assert mode == "grid" or v.tile.cluster > 1
    x = torch.randn(48, 8, case[2], device="cuda", dtype=getattr(torch, dtype))
    want = m(x)[0].clone()
    torch.cuda.synchronize()
    monkeypatch.setenv("RNNCC_SPIN_TIMEOUT_MS", "0")
    within(60, lambda: (m(x), torch.cuda.synchronize()))
    with pytest.raises(rnncc.DeviceTimeout, match=f"layer 'l0' \\(persistence mode {mode}\\)"):
        m.check_errors()
    monkeypatch.delenv("RNNCC_SPIN_TIMEOUT_MS")
    y = within(60, lambda: (m(x)[0], torch.cuda.synchronize())[0])
    assert torch.equal(y, want)


# ---- the input projection computed in the recurrent launch (tiles.FusedProjection) -------

def force_fused(m, chunk: int, registers: tuple[int, int] | None = None):
    """m with layer l0's projection computed by producer blocks in its recurrent launch, in
    chunks of ``chunk`` steps, the layer's cluster kernel with W_hh in registers as planned
    (asserted), as planned for 256 steps where the hints' plan steps otherwise, or the
    registers form's tile of (cluster, batch rows) ``registers``."""
    from rnncc.passes.fusion import fused_tile, why_not_fused
    from rnncc.plan import Decision

    l = m.plan.layers[0]
    if registers is not None:
        tile = TensorTile.registers_form(l.hidden_size, l.gates, *registers)
        m = m.with_persistence("l0", Persistent.of("cluster", "tensor", tile, l.hidden_size, l.gates, 2),
                               "forced by the test")
        l = m.plan.layers[0]
    elif l.persistence.value.mode != "cluster":
        o = m.plan.options
        longer = rnncc.compile(m.model, target="device", batch=o.batch, seq_len=256)
        m = m.with_persistence("l0", longer.plan.layers[0].persistence.value, "forced by the test")
        l = m.plan.layers[0]
    tile = fused_tile(l, chunk)
    assert why_not_fused(l, m.plan, m.target, tile) is None, why_not_fused(l, m.plan, m.target, tile)
    return m.with_plan(m.plan.map_layers(
        lambda l: replace(l, projection_tile=Decision(tile, "forced by the test", "user"))))


# (cell, dtype, H, I, B, S, steps a chunk, a forced registers tile): LSTM fp16 H=512 B=8 S=256,
# issue 14's row (where the planner keeps the projection before the launch); K not whole
# k-steps (I = 264) and S not whole chunks; a chunk a step (a flag every step, both of the
# first two steps awaited before the loop) at an odd batch; 17 rows in 3 clusters, a chunk's
# 51 rows over two passes of a producer; LSTM H=100 on a forced registers tile (clusters of
# 4, 32 rows): GH = 400, the last producer with columns holds 16 of its 32, three hold none;
# one step.
FUSED_CASES = [("lstm", "float16", 512, 512, 8, 256, 4, None), ("gru", "bfloat16", 512, 264, 5, 7, 4, None),
               ("rnn_tanh", "float16", 512, 512, 3, 9, 1, None), ("lstm", "bfloat16", 256, 256, 17, 33, 3, None),
               ("lstm", "float16", 100, 128, 16, 100, 2, (4, 32)), ("lstm", "float16", 256, 136, 1, 1, 4, None)]


@pytest.mark.parametrize("case", FUSED_CASES, ids=lambda c: "-".join(map(str, c)))
@pytest.mark.parametrize("with_state", [False, True])
def test_projection_in_the_recurrent_launch(gpu, case, with_state):
    """The producers' projection against the float64 reference (outputs and workspace
    poisoned), from zero or given states, batch-first with states (x's rows then S·I apart);
    the launch's only kernel is the recurrent one."""
    cell, dtype, H, I, B, S, chunk, registers = case
    m, _, _ = run_and_compare(single(cell, H, I, dtype), S, B, seed=H + B + S + chunk, with_state=with_state,
                              batch_first=with_state, seq_len=S, batch=B,
                              force=lambda m: force_fused(m, chunk, registers))
    l = m.variant(S, B).plan.layers[0]
    assert l.projection_fused and l.projection_tile.value.chunk == chunk
    assert "produce_projection" in m.kernel_of("l0", "recurrent").source
    assert m.kernel_of("l0", "input_projection") is None


@pytest.mark.parametrize("what", ["planned", "reverse", "residual", "lengths"])
def test_projection_in_the_launch_as_planned(gpu, what):
    """Eager plans of short calls on the registers cluster form compute their projection in
    the launch (LSTM fp16 H=512 B=8 S=35: the planner's own pick); a reverse layer's
    producers walk x and the projection backwards (bidirectional), a residual layer's and a
    call with lengths run the same kernels (the lengths variant its own)."""
    lengths = None
    spec = single("lstm", 512, 512, "float16")
    S, B = 35, 8
    if what == "reverse":
        spec = {**single("lstm", 256, 256, "bfloat16"), "layers": [
            {"name": "l0", "cell": "lstm", "hidden_size": 256, "direction": "bidirectional"}]}
        S, B = 40, 5
    elif what == "residual":
        spec = {**single("gru", 512, 512, "float16"), "layers": [
            {"name": "l0", "cell": "gru", "hidden_size": 512, "residual": True}]}
        S, B = 29, 8
    elif what == "lengths":
        S, B = 20, 6
        lengths = random_lengths(S, B, 5)
    m, _, _ = run_and_compare(spec, S, B, seed=S + B, with_state=True, seq_len=S, batch=B, lengths=lengths)
    layers = m.variant(S, B, lengths=lengths is not None).plan.layers
    assert all(l.projection_fused for l in layers), [l.projection_tile.reason for l in layers]
    if what == "reverse":
        assert [l.reverse for l in layers] == [False, True]


# ---- pipelined schedules: layers side by side, a chunk behind their inputs ---------------

@pytest.mark.parametrize("seq,batch", [(37, 5), (256, 8), (1, 64)])
@pytest.mark.parametrize("persistence", [None, "none", "grid", "cluster"])
def test_pipelined_stack_with_sum_and_concat(gpu, seq, batch, persistence):
    """Every layer on its own stream in chunks (37 steps: chunks of 16, 16 and 5), a DAG of
    sums and concats, several outputs, initial states, batch-first at B=5."""
    m, _, _ = run_and_compare(STACKED, seq, batch, seed=seq + batch, with_state=True,
                              batch_first=batch == 5, persistence=persistence, schedule="pipelined")
    plan = m.variant(seq, batch).plan
    ahead = sum(s.projection_stream is not None for s in plan.schedule.value.stages)
    assert plan.schedule.value.pipelined and plan.schedule.value.streams == 5 + ahead
    assert all(l.unroll.value == plan.schedule.value.chunk for l in plan.layers)


@pytest.mark.parametrize("dtype,persistence", [("float16", None), ("float32", "none"), ("bfloat16", "grid")])
def test_pipelined_projections_ahead_both_ways_in_time(gpu, dtype, persistence):
    """Projections a chunk ahead of the recurrence, in two buffers, where layers run both
    ways in time: chunks of 16 over 37 steps (the last of 5), rows with lengths, initial
    states; the next layer reads a reverse half whole."""
    spec = {"name": "ahead", "dtype": dtype, "input_size": 29,
            "layers": [{"name": "l0", "cell": "lstm", "hidden_size": 100, "direction": "bidirectional"},
                       {"name": "l1", "cell": "gru", "hidden_size": 64, "direction": "bidirectional"},
                       {"name": "l2", "cell": "rnn_tanh", "hidden_size": 48}]}
    m, _, _ = run_and_compare(spec, 37, 3, seed=5, with_state=True, schedule="pipelined", unroll=16,
                              lengths=_lengths(37, 3), **({"persistence": persistence} if persistence else {}))
    plan = m.variant(37, 3).plan
    stages = plan.schedule.value.stages
    assert plan.schedule.value.chunk == 16 and all(s.projection_stream is not None for s in stages), stages
    m.check_errors()


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("persistence", ["none", "grid", "cluster"])
def test_pipelined_residual_layers(gpu, dtype, persistence):
    """Each residual layer's h in its own buffer while the layers run at once."""
    m, _, _ = run_and_compare(dict(RESIDUAL, dtype=dtype), 100, 9, seed=7, with_state=True,
                              persistence=persistence, gemm="rnncc", schedule="pipelined")
    assert m.variant(100, 9).plan.schedule.value.pipelined


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_pipelined_on_cublaslt(gpu, dtype):
    """cuBLASLt's projections and per-step products on several streams at once: each layer
    has its own scratch and step product."""
    m, _, _ = run_and_compare(dict(STACKED, dtype=dtype), 70, 5, seed=3, with_state=True,
                              gemm="cublas", persistence="none", schedule="pipelined")
    plan = m.variant(70, 5).plan
    assert plan.schedule.value.pipelined
    assert all(l.projection_tile.value.math == "cublas" for l in plan.layers)


@pytest.mark.parametrize("cell,dtype,hidden,parts", [("lstm", "float16", 1024, 2), ("lstm", "float16", 1024, 3),
                                                      ("gru", "float16", 1024, 3), ("lstm", "float32", 512, 4)])
def test_pipelined_in_sm_partitions(gpu, cell, dtype, hidden, parts):
    """Grid layers re-tiled to 1/parts of the SMs (24 units a block at H=1024 in 3 parts:
    M of 96 or 72 rows) and pipelined in chunks of 64, at an odd batch and a sequence that
    ends mid-chunk, in the plan's shape class (S ≤ 256, B ≤ 8)."""
    from dataclasses import replace

    from rnncc.passes.schedule import partitioned, pipelined_plan
    from rnncc.plan import Decision

    def force(m):
        plan, schedule = pipelined_plan(partitioned(m.plan, parts, m.target), 64, m.target, parts)
        return m.with_plan(replace(plan, schedule=Decision(schedule, "forced by the test", "user")))

    spec = {"name": "parts", "dtype": dtype, "input_size": hidden,
            "layers": [{"name": f"l{i}", "cell": cell, "hidden_size": hidden} for i in (1, 2, 3)]}
    m, _, _ = run_and_compare(spec, 200, 5, seed=parts, with_state=True, force=force, seq_len=256, batch=8,
                              schedule="sequential", precision="exact" if dtype == "float32" else None)
    plan = m.variant(200, 5).plan
    assert plan.schedule.value.parts == parts
    assert all(l.persistence.value.mode == "grid" and l.persistence.value.blocks <= m.target.sm_count // parts
               for l in plan.layers), [l.persistence.value for l in plan.layers]


def test_pipelined_stack_of_eight_runs_its_layers_at_once(gpu):
    """8 × LSTM fp16 H=512 at B=8 is planned pipelined (a cluster of 16 SMs a layer); the
    measured timeline shows the layers overlapping: every layer starts before the layer
    it reads has ended, and each chunk ends after its input's chunk."""
    spec = {"name": "eight", "dtype": "float16", "input_size": 512,
            "layers": [{"name": f"l{i}", "cell": "lstm", "hidden_size": 512} for i in range(1, 9)]}
    m, _, _ = run_and_compare(spec, 256, 8, seed=11, batch=8)
    schedule = m.plan.schedule.value
    assert schedule.pipelined, m.plan.schedule.reason
    x = np.random.default_rng(0).uniform(-1, 1, (256, 8, 512)).astype(np.float16)
    m(x)
    tasks = m.timeline(x)
    chunks = 256 // schedule.chunk
    assert len(tasks) == 8 * chunks
    end = {(t.layer, t.chunk): t.end for t in tasks}
    end_of = {n: max(t.end for t in tasks if t.layer == n) for n in {t.layer for t in tasks}}
    for t in tasks:
        assert t.start < t.end
        if t.layer != "l1":
            before = f"l{int(t.layer[1:]) - 1}"
            assert t.end > end[(before, t.chunk)]
    first = {n: min(t.start for t in tasks if t.layer == n) for n in end_of}
    assert all(first[f"l{i}"] < end_of[f"l{i - 1}"] for i in range(2, 9))


def test_pipelined_model_on_two_streams_and_in_a_graph(gpu, torch):
    """A pipelined model called from two streams at once (its side streams are each
    caller's own), 50 rounds, equals the serial call bit for bit; captured in a CUDA graph
    (side streams forked and joined inside the capture), replays equal eager."""
    spec = {"name": "pipe3", "dtype": "float16", "input_size": 256,
            "layers": [{"name": f"l{i}", "cell": "lstm", "hidden_size": 256} for i in range(3)]}
    m = rnncc.compile(spec, target="device", seq_len=64, batch=8, schedule="pipelined")
    assert m.plan.schedule.value.pipelined
    xs = [torch.randn(64, 8, 256, device="cuda", dtype=torch.half) for _ in range(2)]
    serial = assert_two_streams_equal_serial(torch, m, xs, 50)
    m.check_errors()

    graph, out = capture(lambda: m(xs[0]), warm=1)
    y_static = out[0]
    xs[0].copy_(xs[1])
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y_static, serial[1])


# Shapes whose plan for graphed calls differs from the eager one (graph_plans.py): a launch
# a step with cuBLASLt's projection where the eager plan runs a grid kernel; a GRU's one
# step, projected by cuBLASLt where the eager plan uses rnncc's rows kernel (GRU fp16 H=777
# B=5 S=16 was here until the rows step's staging price planned both its calls on the grid
# kernel); a cluster kernel after cuBLASLt's projection; a two-layer stack pipelined in
# chunks of 16, its projections by cuBLASLt (at S=8 both plans now compute them in the
# recurrent launch); exact float32 and a batch of 3 (H=300: the eager plan's grid kernel in
# its registers form, a launch a step for graphs; at H=512 both plans run the registers
# form since 75f3b67).
GRAPH_PLANS = [("lstm", "float16", 1, 1024, 13, 4), ("gru", "float16", 1, 1024, 1, 1),
               ("lstm", "float16", 1, 333, 3, 16), ("lstm", "float16", 2, 512, 7, 64),
               ("lstm", "float32", 1, 300, 3, 4), ("gru", "bfloat16", 1, 256, 8, 33)]


@pytest.mark.parametrize("cell,dtype,layers,hidden,batch,seq", GRAPH_PLANS)
def test_plans_for_graphed_calls(gpu, torch, cell, dtype, layers, hidden, batch, seq):
    """A model compiled with launches='graph' against the reference (outputs poisoned
    first), then captured by torch.cuda.graph: a replay on fresh input equals its eager
    call. Its plan differs from the eager plan's at these shapes, so the kernels, launches
    and projections the graph plan picks are the ones checked."""
    spec = {"name": "g", "dtype": dtype, "input_size": hidden,
            "layers": [{"name": f"l{i}", "cell": cell, "hidden_size": hidden} for i in range(layers)]}
    m, _, _ = run_and_compare(spec, seq, batch, seed=hidden + seq, with_state=batch % 2 == 1,
                              batch=batch, seq_len=seq, launches="graph")
    eager = rnncc.compile(spec, target="device", batch=batch, seq_len=seq)
    assert m.plan.options.graphed and sorted(k.name for k in m.kernels) != sorted(k.name for k in eager.kernels)
    x = torch.randn(seq, batch, hidden, device="cuda", dtype=getattr(torch, dtype))
    replayed, again, _ = replay_on_fresh_input(torch, m, x)
    assert torch.equal(replayed, again)


def test_twins_for_graphed_calls(gpu, torch):
    """rnncc.optimize(launches="graph"): the twin plans for graphed calls (LSTM fp16 H=1024
    B=13 S=4: the projection in cuBLASLt, whose host call the eager plan avoids), agrees with
    torch.nn, and a capture of it replays its eager call on fresh input."""
    import rnncc.nn as rnn

    torch.manual_seed(8)
    theirs = torch.nn.LSTM(1024, 1024).to("cuda", torch.half).eval()
    ours = rnncc.optimize(theirs, verbose=False, launches="graph").requires_grad_(False)
    assert isinstance(ours, rnn.LSTM) and ours.launches == "graph"
    x = torch.randn(4, 13, 1024, device="cuda", dtype=torch.half)
    with torch.inference_mode():
        want, got = theirs(x), ours(x)
    tol = 2 * tolerance("float16", "tensor")
    assert max_relative_error(got[0].float().cpu().numpy(), want[0].float().cpu().numpy()) <= tol
    for g, w in zip(got[1], want[1]):
        assert max_relative_error(g.float().cpu().numpy(), w.float().cpu().numpy()) <= tol
    compiled = rnn._runner_of(ours._specs["float16"]).compiled[("float16", False)][0]
    plan = compiled.variant(4, 13).plan
    assert plan.options.graphed and plan.layers[0].projection_tile.value.math == "cublas"
    replayed, again, _ = replay_on_fresh_input(torch, ours, x)
    assert torch.equal(replayed, again)
