"""The input projection inside the recurrent launch (passes/fusion.py, tiles.FusedProjection):
when the planner picks it, the launch's geometry and arguments, and its kernel's code. The
GPU tests (test_gpu.py, test_projection_in_the_recurrent_launch and after) check its
results against the reference."""

from __future__ import annotations

from dataclasses import replace

import pytest

import rnncc
from rnncc import build, launch
from rnncc.launch import Sequence
from rnncc.passes.cost import FUSED_CHUNK
from rnncc.passes.fusion import fused_tile, why_not_fused
from rnncc.tiles import FusedProjection


def layer(H=512, I=512, dtype="float16", cell="lstm", **layer_keys):
    return {"name": "m", "dtype": dtype, "input_size": I,
            "layers": [{"name": "l0", "cell": cell, "hidden_size": H, **layer_keys}]}


def planned(spec, **options):
    return rnncc.compile(spec, target="h100", **options)


def test_short_eager_calls_compute_their_projection_in_the_launch():
    """LSTM fp16 H=512 B=8: at S=16 an eager call's projection runs in the launch (it
    measured 89.3 against 99.7 µs, results/fused-projection-rows-h100-2026-11-27.txt); at
    S=256 it stays a cuBLASLt call before it (fused measured 4% slower in a CUDA graph, 3%
    faster eager: a coin flip), the fused price recorded among the alternatives; a graphed
    plan fuses at neither: at S=16 its first step now waits ~5 µs for chunk 0 (38.3 against
    35.3 µs measured, results/fused-producers-h100-2026-11-27.txt)."""
    short = planned(layer(), batch=8, seq_len=16).plan.layers[0]
    assert short.projection_fused and short.projection_tile.value == FusedProjection(FUSED_CHUNK, 4, 16)
    assert short.projection_tile.value.producers == 64
    assert "inside the recurrent launch: 64 producer blocks" in short.projection_tile.reason
    assert "its part of the host time included" in short.projection_tile.reason
    long = planned(layer(), batch=8, seq_len=256).plan.layers[0]
    assert not long.projection_fused and long.projection_tile.value.math == "cublas"
    assert "in the recurrent launch predicted to add 33.8 µs" in long.projection_tile.reason
    assert long.projection_tile.alternatives["fused 64 producers, chunks of 4"] == pytest.approx(33.8e-6)
    assert not planned(layer(), batch=8, seq_len=16, launches="graph").plan.layers[0].projection_fused
    assert not planned(layer(), batch=8, seq_len=256, launches="graph").plan.layers[0].projection_fused


def test_projection_fusion_needs_the_registers_cluster_kernel_and_producers_ahead():
    """Not fused: float32, a merged input, K of a partial 16-byte row, a pipelined stack, an
    option that forces the library; nor where a producer's chunk (two passes at B=16) takes
    longer than the chunk's steps (LSTM fp16 H=512 B=16 S=100 measured 1.59× the unfused
    launch in a graph)."""
    assert not planned(layer(dtype="float32"), batch=8, seq_len=16).plan.layers[0].projection_fused
    assert not planned(layer(I=516), batch=8, seq_len=16).plan.layers[0].projection_fused
    assert not planned(layer(), batch=8, seq_len=16, gemm="cublas").plan.layers[0].projection_fused
    assert not planned(layer(), batch=16, seq_len=100).plan.layers[0].projection_fused
    stack = {**layer(), "layers": [{"name": f"l{i}", "cell": "lstm", "hidden_size": 512} for i in range(4)]}
    pipelined = planned(stack, batch=8, seq_len=16, schedule="pipelined").plan
    assert not any(l.projection_fused for l in pipelined.layers)
    m = planned(layer(), batch=8, seq_len=16)
    l = m.plan.layers[0]
    tile = l.projection_tile.value
    assert why_not_fused(l, m.plan, m.target, tile) is None
    assert "merge" not in why_not_fused(replace(l, input_size=516), m.plan, m.target, tile)
    assert "16-byte" in why_not_fused(replace(l, input_size=516), m.plan, m.target, tile)
    assert "clusters" in why_not_fused(l, m.plan, m.target, replace(tile, producer_rows=7))


def test_fused_launch_geometry_and_arguments():
    """The grid's first rows are the producers' clusters; the flags are one word a chunk,
    after the grid barriers, zeroed with them; a reverse layer's producers walk x from its
    last step with a negative stride, as its recurrent blocks walk the projection."""
    m = planned(layer(), batch=8, seq_len=16)
    l = m.plan.layers[0]
    assert launch.persistent_grid(l, 8) == (16, 5) and launch.persistent_grid(l, 13) == (16, 6)
    assert launch.sync_words(m.plan.layers, 16) == ({"l0": 0}, 4)
    assert launch.sync_words(m.plan.layers, 13) == ({"l0": 0}, 4)
    x = Sequence(1 << 20, 2, 8 * 512, 512)
    weights = {"w_hh_t": 16, "w_ih": 32, "bias": 48, "w_hh_fragments_registers_u32_m8_k1_b16": 128}
    args = launch.persistent_arguments(
        l, t0=0, steps=16, S=16, B=8, y=Sequence(1 << 24, 2, 8 * 512, 512), h0=None, c0=0, c_out=0, cell=64,
        xproj=80, xproj_strides=(8 * 2048, 2048, 1), weights=weights, barrier=96, status=112,
        spin_timeout_ns=1, source=x)
    assert (args["proj_x"], args["proj_x_stride_t"], args["proj_x_stride_b"]) == (x.ptr, 8 * 512, 512)
    assert (args["w_ih"], args["bias"], args["projection_flags"]) == (32, 48, 96)
    assert args["w_hh_fragments"] == 128  # the registers form loads W_hh as uploaded for its tile
    kernel = m.kernel_of("l0", "recurrent")
    assert len(launch.arguments(kernel, args)) == len(kernel.params)
    backward = planned(layer(direction="reverse"), batch=8, seq_len=16).plan.layers[0]
    assert backward.reverse and backward.projection_fused
    args = launch.fused_projection_arguments(backward, t0=0, S=16, source=x, weights=weights, flags=96)
    assert args["proj_x"] == x.at(15) and args["proj_x_stride_t"] == -8 * 512


def test_fused_kernel_renders_and_compiles(nvcc):
    """One kernel, named for its producers; its parameters add the producers' inputs and
    make the projection writable; the launch's shared memory is the larger of the two
    roles'; no spills. GRU bf16 H=130 I=264 on a forced registers tile (clusters of 8, 16
    rows): GH = 390 not whole producers, K not whole k-steps."""
    for spec in (layer(), layer(H=130, I=264, dtype="bfloat16", cell="gru")):
        m = planned(spec, batch=8, seq_len=16)
        l = m.plan.layers[0]
        if not l.projection_fused:  # GRU H=130 runs another kernel as planned: force its registers form
            from rnncc.tiles import Persistent, TensorTile
            tile = TensorTile.registers_form(130, 3, 8, 16)
            m = m.with_persistence("l0", Persistent.of("cluster", "tensor", tile, 130, 3, 2), "forced by the test")
            fused = fused_tile(m.plan.layers[0])
            assert fused == FusedProjection(FUSED_CHUNK, 2, 8)  # 390 gate columns in clusters of 8
            assert why_not_fused(m.plan.layers[0], m.plan, m.target, fused) is None
            from rnncc.plan import Decision
            m = m.with_plan(m.plan.map_layers(lambda l: replace(l, projection_tile=Decision(fused, "test", "user"))))
            l = m.plan.layers[0]
        assert [k.family for k in m.kernels] == ["recurrent_cluster"]
        k = m.kernels[0]
        assert k.name.startswith(f"recurrent_cluster_fused_{spec['layers'][0]['cell']}_h")
        names = [p.name for p in k.params]
        assert names[names.index("xproj_stride_n") + 1:names.index("projection_flags") + 1] == \
            ["proj_x", "proj_x_stride_t", "proj_x_stride_b", "w_ih", "bias", "projection_flags"]
        assert "const" not in next(p.decl for p in k.params if p.name == "xproj_all")
        assert k.dynamic_shared == max(l.persistence.value.shared_bytes,
                                       l.projection_tile.value.shared_bytes(l.input_size, 2))
        assert "report_timeout(status, 3u)" in k.source and "produce_projection(" in k.source
        build.compile_cubin(k, "sm_90a")
        r = build.resources(k, "sm_90a")
        assert r.spill_stores == r.spill_loads == r.stack_frame == 0, r


def test_forcing_persistence_refits_or_drops_the_fusion():
    """CompiledModel.with_persistence: producers follow a new cluster size; a mode that
    cannot carry them gets a projection of its own again."""
    from rnncc.tiles import Persistent, TensorTile
    m = planned(layer(), batch=8, seq_len=16)
    tile = TensorTile.registers_form(512, 4, 8, 8)
    refit = m.with_persistence("l0", Persistent.of("cluster", "tensor", tile, 512, 4, 2), "test")
    fused = refit.plan.layers[0].projection_tile.value
    assert refit.plan.layers[0].projection_fused and fused.cluster == 8 and fused.producers == 64
    grid = planned(layer(), batch=8, seq_len=256, persistence="grid").plan.layers[0].persistence.value
    dropped = m.with_persistence("l0", grid, "test").plan.layers[0]
    assert not dropped.projection_fused
    assert {k.family for k in m.with_persistence("l0", grid, "test").kernels} == \
        {"input_projection", "recurrent_persistent"}


def test_producers_divide_by_the_batch_exactly():
    """The producers' row → (step, batch entry) split (projection_producer.cuh.j2): r / B as
    (r · ⌈2^32 / B⌉) >> 32 wherever CHUNK·B² < 2^32 (else a division), which is exact for every
    row of a chunk, r < CHUNK·B: checked for every row at B ≤ 300 and at rows sampled up to
    the bound's edge, and the kernel's source says the same."""
    import random

    def divide(r, b):
        m = ((1 << 32) + b - 1) // b
        return (r * m) >> 32 if FUSED_CHUNK * b * b < (1 << 32) else r // b
    for b in range(1, 301):
        assert all(divide(r, b) == r // b for r in range(FUSED_CHUNK * b)), b
    rng = random.Random(3)
    edge = int(((1 << 32) / FUSED_CHUNK) ** 0.5)
    for b in (edge - 2, edge - 1, edge, edge + 1, 65535):
        rows = [FUSED_CHUNK * b - 1, 0, b - 1, b] + [rng.randrange(FUSED_CHUNK * b) for _ in range(20000)]
        assert all(divide(r, b) == r // b for r in rows), b
    source = planned(layer(), batch=8, seq_len=16).kernel_of("l0", "recurrent").source
    assert "((1ull << 32) + (unsigned)batch - 1) / (unsigned)batch" in source
    assert "(unsigned long long)P_CHUNK * batch * batch < (1ull << 32)" in source
