"""Every template rendered over a matrix of configurations and compiled by nvcc for
sm_90a (cubins cached on disk, so a second run compiles nothing)."""

from __future__ import annotations

import itertools
from dataclasses import replace
import math
import subprocess
from pathlib import Path

import pytest

import rnncc
from rnncc import build, codegen, launch, target, tiles
from rnncc.passes import cost
from rnncc.codegen import environment
from rnncc.dtypes import DTYPES

ROOT = Path(__file__).resolve().parent.parent

CELLS = ("lstm", "gru", "rnn_tanh", "rnn_relu")
LAYOUTS = ("xw", "wx")
SIZES = (1, 33, 1024)


def matrix():
    """Each cell × layout × H, with F cycling through 1, 4, S so each pair meets each F,
    plus storage dtypes, no-bias layers and merged inputs/outputs."""
    unrolls = itertools.cycle((1, 4, None))  # None: F = S
    for cell, layout, H in itertools.product(CELLS, LAYOUTS, SIZES):
        yield dict(cell=cell, layout=layout, H=H, unroll=next(unrolls), dtype="float32", bias=True)
    for cell, dtype in itertools.product(CELLS, ("float16", "bfloat16")):
        yield dict(cell=cell, layout="xw", H=33, unroll=None, dtype=dtype, bias=cell != "gru")
    yield dict(cell="gru", layout="wx", H=33, unroll=4, dtype="float32", bias=False)
    for cell, dtype, H in zip(CELLS, ("float32", "float16", "bfloat16", "float32"), (1024, 33, 256, 1)):
        yield dict(cell=cell, layout="xw", H=H, unroll=None, dtype=dtype, bias=True, persistence="grid")
    for cell, dtype, H in zip(CELLS, ("bfloat16", "float32", "float16", "float32"), (256, 33, 1, 100)):
        yield dict(cell=cell, layout="wx", H=H, unroll=4, dtype=dtype, bias=cell != "lstm",
                   persistence="cluster")
    # The FMA grid kernel on 5 units a block (H=650 on 130 SMs) and one batch tile of 20 rows.
    yield dict(cell="gru", layout="xw", H=650, unroll=None, dtype="float32", bias=True, persistence="grid",
               batch=20)
    # The other precision of each persistent mode: TF32 tensor cores for float32, FMA for
    # fp16/bf16 (the cases above take the defaults, exact and tensor).
    for cell, dtype, H, mode in zip(CELLS, ("float32", "float16", "float32", "bfloat16"),
                                    (1024, 33, 256, 100), ("grid", "cluster", "cluster", "grid")):
        yield dict(cell=cell, layout="xw", H=H, unroll=None, dtype=dtype, bias=True, persistence=mode,
                   precision="exact" if dtype != "float32" else "tensor")
    # The projection of a few rows (a step at B=2: matrix-vector passes over W_ih), every
    # storage dtype, both layouts, merged inputs.
    for dtype, layout in itertools.product(("float32", "float16", "bfloat16"), LAYOUTS):
        yield dict(cell="lstm", layout=layout, H=33, unroll=1, dtype=dtype, bias=True, batch=2)
    # The step kernel's rows form (a warp a unit over a few batch rows of h): every cell and
    # storage dtype, K of whole 16-byte loads (H=1024, 64) and not (33, 1), an odd batch.
    for cell, dtype, H in zip(CELLS, ("float16", "bfloat16", "float32", "float16"), (1024, 33, 64, 1)):
        yield dict(cell=cell, layout="xw", H=H, unroll=4, dtype=dtype, bias=cell != "gru", batch=5,
                   step_kernel="rows")
    # cuBLASLt's products: rnncc renders only the cell kernel of each step (and the merges).
    # Planned for graphed calls, where the padded input's copy costs no launch on the host, so
    # that the 16-bit projections take the padded K (eager, 128 rows of K=17 read as stored).
    for cell, dtype, H in zip(CELLS, ("float16", "bfloat16", "float32", "float16"), (33, 1024, 1, 256)):
        yield dict(cell=cell, layout="xw", H=H, unroll=4, dtype=dtype, bias=cell != "rnn_tanh",
                   gemm="cublas", launches="graph")


def compile_case(case, **options):
    spec = {"name": f"m_{case['cell']}", "dtype": case["dtype"], "input_size": 17,
            "layers": [{"name": "a", "cell": case["cell"], "hidden_size": case["H"], "bias": case["bias"]},
                       {"name": "b", "cell": case["cell"], "hidden_size": case["H"], "bias": case["bias"],
                        "input": {"concat": ["a", "input"]}},
                       {"name": "c", "cell": case["cell"], "hidden_size": case["H"], "bias": case["bias"],
                        "input": {"sum": ["a", "b"]}},
                       # A residual layer: its epilogue writes h + (b + c) beside h.
                       {"name": "d", "cell": case["cell"], "hidden_size": case["H"], "bias": case["bias"],
                        "input": {"sum": ["b", "c"]}, "residual": True}],
            "outputs": ["d", {"name": "res", "sum": ["b", "c"]}, {"name": "cat", "concat": ["input", "c"]}]}
    return rnncc.compile(spec, target="h100", layout=case["layout"], unroll=case["unroll"],
                         seq_len=16, batch=case.get("batch", 8), persistence=case.get("persistence", "none"),
                         precision=case.get("precision"), gemm=case.get("gemm", "rnncc"),
                         step_kernel=case.get("step_kernel"), launches=case.get("launches", "eager"), **options)


CASES = list(matrix())


def test_matrix_covers_the_issue():
    assert {c["cell"] for c in CASES} == set(CELLS)
    assert {c["layout"] for c in CASES} == set(LAYOUTS)
    assert {c["H"] for c in CASES} >= set(SIZES)
    assert {c["unroll"] for c in CASES} == {1, 4, None}


def test_all_templates_render_and_compile(nvcc):
    kernels = []
    for case in CASES:
        m = compile_case(case)
        families = {k.family for k in m.kernels}
        step = {"grid": "recurrent_persistent", "cluster": "recurrent_cluster"}.get(
            case.get("persistence"), "recurrent_step")
        if case.get("gemm") == "cublas":
            assert families == {step, "merge"}
            assert all("after cuBLASLt" in k.source for k in m.kernels if k.family == step)
            # 16-bit steps at unaligned H: the product [B, M] and h's padded copy (library_padding)
            padded = case["dtype"] != "float32" and case["H"] % 8 != 0
            assert all(("h_library" in [p.name for p in k.params]) == padded for k in m.kernels if k.family == step)
            # 16-bit projections at K of 17 (a's input) and 33 (c's and d's sums) with G·H a
            # multiple of 8: the merge kernel writes the input padded to 24 and 40 (the concat
            # b keeps a GEMM per source, unpadded)
            pads = {l.name: l.projection_padded_k for l in m.plan.layers}
            if case["dtype"] != "float32" and m.plan.layers[0].gates * case["H"] % 8 == 0:
                assert pads["a"] == 24 and pads["b"] == 0
                assert pads["c"] == pads["d"] == (-(-case["H"] // 8) * 8 if case["H"] % 8 else 0)
                assert {k.users[0] for k in m.kernels if "_p24_" in k.name} == {"a"}
            else:
                assert set(pads.values()) == {0}
        else:
            assert families == {"input_projection", step, "merge"}
        if case.get("batch") == 2:  # the merged layers' (K ≥ 33); a's 17 features may take a tile
            rows = {l.name for l in m.plan.layers if l.projection_tile.value.math == "rows"}
            assert rows >= {"b", "c", "d"}
            assert all(("matrix-vector" in k.source) == (k.users[0] in rows)
                       for k in m.kernels if k.family == "input_projection")
        if step == "recurrent_step" and case.get("gemm") != "cublas":
            rows_form = {l.name for l in m.plan.layers if l.step_tile.value.math.startswith("rows")}
            if case.get("step_kernel") == "rows":
                assert rows_form == {"a", "b", "c", "d"}
            assert all(k.name.startswith("recurrent_step_rows_") == (k.users[0] in rows_form)
                       for k in m.kernels if k.family == step)
        if step != "recurrent_step":
            tensor = m.plan.layers[0].precision.value == "tensor"
            # A half layer in precision tensor may take the FMA cluster kernel (exact in fp32
            # either way; persistence.py): rnn_tanh fp16 H=1 does since the H200 refit.
            allowed = {"tensor", "fma"} if tensor and case["dtype"] != "float32" and step == "recurrent_cluster" \
                else {"tensor" if tensor else "fma"}
            assert all(l.persistence.value.math in allowed for l in m.plan.layers)
            on_tensor_cores = {l.name: l.persistence.value.math == "tensor" for l in m.plan.layers}
            assert all(("mma.sync" in k.source) == on_tensor_cores[k.users[0]] for k in m.kernels if k.family == step)
        residual = [k for k in m.kernels if k.family == step and "residual_out" in k.source]
        assert [k.users for k in residual] == [("d",)]
        for k in m.kernels:
            assert k.source.startswith("// Generated by rnncc")
            assert f"model {m.model.name}" in k.header and f"model {m.model.name}" not in k.source
            assert "{{" not in k.source and "{%" not in k.source
        kernels += m.kernels
        # The training forward's (backward_gates="save"): every recurrent kernel also writes
        # the pre-activations, in a variant of its own name; the lengths variant writes none.
        trained = compile_case(case, backward_gates="save")
        saving = [k for k in trained.kernels if k.family == step]
        assert saving and all("_gates_" in k.name and "gates[gate_row" in k.source for k in saving)
        assert all(("gates_h" in [p.name for p in k.params]) == (case["cell"] == "gru") for k in saving)
        assert not {k.name for k in saving} & {k.name for k in m.kernels}
        assert not any("_gates_" in k.name for k in trained.variant(16, case.get("batch", 8), lengths=True).kernels)
        kernels += saving
        # The variant for sequences of different lengths: its recurrent kernels keep an
        # ended row's state, and a mask zeroes the outputs past each length.
        varied = m.variant(16, case.get("batch", 8), lengths=True)
        assert varied.plan is m.plan
        recurrent = [k for k in varied.kernels if k.family == step]
        assert recurrent and all("lengths[b]" in k.source and "_lengths_" in k.name for k in recurrent)
        assert not any("lengths" in k.source for k in m.kernels)
        assert [k.family for k in varied.kernels].count("mask") == 1
        kernels += [k for k in varied.kernels if k.family in (step, "mask")]
    # Unique names per case so the cache key separates them.
    seen = {}
    for k in kernels:
        seen[build.cache_key(k, "sm_90a")] = k
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=4) as pool:
        cubins = list(pool.map(lambda k: build.compile_cubin(k, "sm_90a"), seen.values()))
    assert all(c[:4] == b"\x7fELF" for c in cubins)


def test_second_compile_runs_no_nvcc(nvcc, tmp_path, monkeypatch):
    monkeypatch.setenv("RNNCC_CACHE_DIR", str(tmp_path))
    m = compile_case(CASES[0])
    before = build.cache_info()
    m.build()
    middle = build.cache_info()
    rnncc.compile(m.model, target="h100", layout="xw", unroll=1, seq_len=16, batch=8,
                  persistence="none", gemm="rnncc").build()
    after = build.cache_info()
    assert middle.misses - before.misses == len(m.kernels)
    assert after.misses == middle.misses and after.hits - middle.hits == len(m.kernels)
    assert sorted(p.suffix for p in tmp_path.iterdir() if p.suffix == ".cubin") == [".cubin"] * len(m.kernels)


def test_corrupt_nvcc_output_is_reported(nvcc, monkeypatch, tmp_path):
    monkeypatch.setenv("RNNCC_CACHE_DIR", str(tmp_path))
    m = compile_case(CASES[0])
    broken = m.kernels[0].__class__(**{**m.kernels[0].__dict__, "source": "this is not CUDA"})
    with pytest.raises(rnncc.CompileError, match="nvcc failed on generated kernel"):
        build.compile_cubin(broken, "sm_90a")


def test_one_strict_environment():
    env = environment()
    assert env.undefined.__name__ == "StrictUndefined"
    with pytest.raises(Exception, match="undefined"):
        env.get_template("merge.cu.j2").render()


def test_generated_sources_declare_pointer_shapes():
    m = compile_case(CASES[0])
    step = m.kernel_of("a", "recurrent").source
    assert "W_hhᵀ, column u·G+g" in step and "__launch_bounds__" in step
    proj = m.kernel_of("b", "input_projection")
    assert "source 0: [S, B, " in proj.source and "source 1: [S, B, " in proj.source
    assert "concat of a, input" in proj.header  # concat fused into the loader


def test_nvcc_present_in_ci():
    import os
    if os.environ.get("RNNCC_REQUIRE_NVCC") == "1":
        assert build.nvcc_path() is not None
        out = subprocess.run([build.nvcc_path(), "--version"], capture_output=True, text=True)
        assert out.returncode == 0


def test_compile_cost_and_cache_hits_are_logged(nvcc, tmp_path, monkeypatch, caplog):
    import logging
    monkeypatch.setenv("RNNCC_CACHE_DIR", str(tmp_path))
    m = compile_case(CASES[0])
    with caplog.at_level(logging.DEBUG, logger="rnncc.build"):
        m.build()
        m.build()
    lines = [r.getMessage() for r in caplog.records if "kernels for sm_90a" in r.getMessage()]
    n = len(m.kernels)
    assert lines[0].startswith(f"{n} kernels for sm_90a: {n} built by nvcc")
    assert f": 0 built by nvcc (0.00 s of nvcc), {n} from the cache" in lines[1]


def test_every_spin_wait_is_bounded_in_the_generated_code():
    """The grid barrier and the cluster kernels' mbarrier wait give up after
    spin_timeout_ns and report in status; every persistent kernel takes both arguments."""
    def one(persistence, precision, dtype="float16"):
        spec = {"name": "spin", "dtype": dtype, "input_size": 64,
                "layers": [{"name": "l0", "cell": "lstm", "hidden_size": 64}]}
        m = rnncc.compile(spec, target="h100", batch=8, persistence=persistence, precision=precision)
        return m.kernel_of("l0", "recurrent")
    for persistence, precision, dtype in (("grid", "tensor", "float16"), ("grid", "exact", "float32"),
                                          ("cluster", "tensor", "float16"), ("cluster", "exact", "float32")):
        k = one(persistence, precision, dtype)
        names = [p.name for p in k.params]
        assert "status" in names and "spin_timeout_ns" in names, (persistence, precision)
        if persistence == "grid":
            assert "grid_barrier(barrier, status, spin_timeout_ns)" in k.source
            assert "grid_wait_over(++spins, start, spin_timeout_ns, barrier, status)" in k.source
            assert "spin_expired(spins, start, spin_timeout_ns)" in k.source
            # The poll is the acquire; a fence after a relaxed poll cost 0.32-0.50 µs a step
            # (benchmarks/results/barrier-forms-h100-2026-11-27.txt).
            barrier = k.source[k.source.index("bool grid_barrier("):]
            barrier = barrier[:barrier.index("\n}\n")]
            assert "ld.acquire.gpu.global.u32" in barrier and "fence" not in barrier.split("{", 1)[1]
        elif k.cluster > 1:
            assert "mbarrier.try_wait" in k.source and "report_timeout(status, 2u)" in k.source
        else:  # a cluster of one block waits only at __syncthreads
            assert "try_wait" not in k.source and "cluster.sync" not in k.source


def test_persistent_kernels_write_h_n_themselves():
    """Each persistent kernel takes h_final and stores h there at its last step (the call's
    h_n; launch.persistent_arguments gives it to the launch that ends the call only), so
    that no copy follows the launch: grid on tensor cores and FMA; clusters of lanes, FMA,
    and tensor cores with W_hh in registers. The staged FMA form (W_hhᵀ in shared memory or
    registers) and tensor-core blocks of 512 threads do not (the store made them spill), so
    the runtime copies h_n after them."""
    def one(persistence, precision, dtype, H, B):
        spec = {"name": "hn", "dtype": dtype, "input_size": 64,
                "layers": [{"name": "l0", "cell": "lstm", "hidden_size": H}]}
        m = rnncc.compile(spec, target="h100", batch=B, persistence=persistence, precision=precision)
        return m.kernel_of("l0", "recurrent")
    forms = set()
    for args in (("grid", "tensor", "float16", 64, 8), ("grid", "exact", "float32", 64, 8),
                 ("grid", "exact", "float32", 1024, 64), ("grid", "exact", "float32", 1024, 8),
                 ("cluster", "tensor", "float16", 64, 8), ("cluster", "tensor", "float16", 512, 8),
                 ("cluster", "exact", "float32", 256, 64), ("grid", "tensor", "float32", 1024, 64)):
        k = one(*args)
        forms.add(k.name.rsplit("_", 1)[0])
        copied = "_staged_" in k.name or "_registers_" in k.name or (args[1] == "tensor" and k.block[0] >= 512)
        assert launch.writes_h_n(k) == (not copied), args
        assert ("if (t == steps - 1 && h_final != nullptr) h_final[" in k.source) == (not copied), args
    assert len(forms) == 8, forms


def test_grid_kernels_zero_h_padding_once():
    """The tensor grid kernel zeroes its h buffer once, before its first step, and stages
    only the batch's rows below H each step (22a6110): where h's rows are not whole 16-byte
    vectors the K padding and the rows past the batch were zeroed element by element every
    step (LSTM fp16 H=1100 B=1: 1.03 µs of a step,
    benchmarks/results/stage-h-padding-once-ab-h200-2026-11-29.txt). The cluster kernels,
    which stage h0 once a call, still zero the padding where they stage it."""
    def kernel(persistence, H, B):
        spec = {"name": "pad", "dtype": "float16", "input_size": 64,
                "layers": [{"name": "l0", "cell": "lstm", "hidden_size": H}]}
        m = rnncc.compile(spec, target="h200", batch=B, persistence=persistence, precision="tensor")
        return m.kernel_of("l0", "recurrent")
    per_step_zeros = ("for (int e = rows * KPAD + tid; e < BATCH * KPAD; e += THREADS)",
                      "e < rows * (KPAD - H)")
    for H, B in ((777, 1), (1100, 3), (1100, 13)):
        k = kernel("grid", H, B)
        assert k.family == "recurrent_persistent", k.family
        once = k.source.index("e < H_BYTES / 16; e += THREADS) reinterpret_cast<uint4*>(h_s)[e] = make_uint4(0u, 0u, 0u, 0u);")
        assert once < k.source.index("for (int t = 0; t < steps; ++t)"), (H, B)
        assert not any(z in k.source for z in per_step_zeros), (H, B)
        assert "const int rows = min(BATCH, batch - b_base);" in k.source  # the dense run, its rows only
    k = kernel("cluster", 650, 3)
    assert k.family.startswith("recurrent_cluster") and "e < H_BYTES / 16" not in k.source and any(z in k.source for z in per_step_zeros)


@pytest.mark.parametrize("source,defines", [
    ("cluster_exchange.cu", ["-DCL=4"]),
    ("cross_cluster_exchange.cu", ["-DCL=16", "-DNC=4"]),
    ("cross_cluster_exchange.cu", ["-DCL=8", "-DNC=8"]),
    ("grid_exchange.cu", ["-DBLOCKS=128", "-DVALUES=64"]),
    ("staging_floor.cu", ["-DFORM=0"]),
    ("staging_floor.cu", ["-DFORM=2", "-DROWS=32", "-DBLOCKS_X=64", "-DBLOCKS_Y=2"]),
    ("staging_floor.cu", ["-DFORM=3", "-DROWS=8", "-DBLOCKS_X=128", "-DBLOCKS_Y=1"]),
    ("step_floor.cu", ["-DH=100", "-DKS=8", "-DLANES=8"]),
    ("step_floor.cu", ["-DH=33", "-DKS=16", "-DLANES=16"]),
    ("ksplit_step.cu", ["-DQ=2", "-DCLUSTERS=64"]),
    ("ksplit_step.cu", ["-DQ=4", "-DCLUSTERS=30"]),
    ("ksplit_step.cu", ["-DQ=2", "-DCLUSTERS=64", "-DTMA"]),
    ("forward_step.cu", ["-DKC=128", "-DSTAGES=2"]),
    ("forward_step.cu", ["-DKC=32", "-DSTAGES=6"]),
    ("forward_step.cu", ["-DKC=128", "-DSTAGES=2", "-DMULTICAST"]),
    ("forward_step.cu", ["-DKC=128", "-DSTAGES=2", "-DBULK"]),
    ("forward_step.cu", ["-DKC=128", "-DSTAGES=2", "-DTMA", "-DMULTICAST"]),
    ("forward_step.cu", ["-DKC=128", "-DSTAGES=2", "-DTMA", "-DDEVICE_MAP"]),
    ("forward_ksplit.cu", ["-DH=1024", "-DQ=2", "-DUNITS=8", "-DKC=128", "-DSTAGES=2"]),
    ("forward_ksplit.cu", ["-DH=960", "-DQ=4", "-DUNITS=8", "-DKC=80", "-DSTAGES=2"]),
    ("forward_registers.cu", ["-DH=1024", "-DB=8", "-DNT=256"]),
    ("forward_registers.cu", ["-DH=512", "-DB=16", "-DNT=512", "-DNO_PRODUCT"]),
    ("fused_projection.cu", ["-DCHUNK=8", "-DNC=64", "-DRG=2", "-DKQ=1", "-DAHEAD=0"]),
    ("fused_projection.cu", ["-DI=256", "-DGH=1024", "-DCHUNK=4", "-DNC=32", "-DRG=2", "-DKQ=4", "-DAHEAD=1"]),
    ("resident_chunks.cu", []),
    ("resident_chunks.cu", ["-DELEM=float"]),
    ("resident_chunks.cu", ["-DFUSED"]),
    ("resident_chunks.cu", ["-DFUSED", "-DRING_STAGES=2", "-DW_HH_KIB=188"]),
    ("resident_chunks.cu", ["-DFUSED", "-DRING_STAGES=4", "-DW_HH_KIB=160"]),
    ("wavefront.cu", ["-DH=512", "-DB=8", "-DUNITS=16", "-DFUSED=1"]),
    ("wavefront_f16.cu", []),
    ("wavefront_f16.cu", ["-DP=16", "-DNO_PROJECTION"]),
    ("wavefront_f16.cu", ["-DP=4", "-DSPREAD", "-DPOLLED"]),
    ("wavefront_f16.cu", ["-DP=8", "-DDEPTH=2", "-DREG_KS=7", "-DPOLLED"]),
    ("wavefront_f16.cu", ["-DP=8", "-DDEPTH=1", "-DREG_KS=7", "-DK_HALVES", "-DPOLLED"]),
    ("wavefront_f16.cu", ["-DP=8", "-DXKC=2", "-DREG_KS=7", "-DK_HALVES", "-DX_STAGED", "-DPOLLED"]),
])
def test_benchmark_kernels_compile(nvcc, tmp_path, source, defines):
    """The microbenchmarks' CUDA (benchmarks/*.cu) builds for sm_90a, so that a device
    session can run them first thing instead of finding a compile error."""
    path = Path(__file__).resolve().parent.parent / "benchmarks" / source
    done = subprocess.run([nvcc, "-cubin", "-arch=sm_90a", "-O3", *defines, "-o",
                           str(tmp_path / "k.cubin"), str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("cell,dtype,hidden", [("lstm", "float16", 256), ("lstm", "float32", 256),
                                               ("gru", "float16", 100), ("gru", "bfloat16", 192),
                                               ("rnn_tanh", "float32", 130), ("lstm", "float16", 64),
                                               ("lstm", "float16", 512), ("gru", "bfloat16", 512)])
def test_registers_form_candidates_do_not_spill(nvcc, cell, dtype, hidden):
    """The tensor cluster kernel's registers form keeps W_hh's fragments in registers only
    if ptxas does: the candidate closest to its register cap (by TensorTile.registers_fit's
    estimate) and the model's pick at B=8 (which at small H may be the FMA lanes form, W_hh
    in registers as float) compile with no local memory."""
    from rnncc.passes.cost import tensor_tiles
    from rnncc.tiles import Persistent, TensorTile, register_cap
    spec = {"name": "spill", "dtype": dtype, "input_size": 16,
            "layers": [{"name": "l0", "cell": cell, "hidden_size": hidden}]}
    m = rnncc.compile(spec, target="h100", batch=8, persistence="cluster", precision="tensor")
    gates, itemsize = m.plan.layers[0].gates, 4 if dtype == "float32" else 2
    forms = [t for t in tensor_tiles(hidden, gates, 8, m.target, "cluster", itemsize) if t.weights_in_registers]
    assert forms, "no registers-form candidate"

    def fill(t: TensorTile) -> float:
        return t.weight_registers(hidden, itemsize) / register_cap(t.threads)
    picked = m.plan.layers[0].persistence.value
    for tile in {max(forms, key=fill), picked.tile}:
        if not getattr(tile, "weights_in_registers", False):
            continue
        math = picked.math if tile == picked.tile else "tensor"
        k = m.with_persistence("l0", Persistent.of("cluster", math, tile, hidden, gates, itemsize),
                               "forced by the test").kernel_of("l0", "recurrent")
        build.compile_cubin(k, "sm_90a")
        r = build.resources(k, "sm_90a")
        assert r.spill_stores == r.spill_loads == r.stack_frame == 0, (tile, r)


# Persistent kernels that spilled when their launch bounds named no minimum of blocks (ptxas
# then aimed at two blocks an SM): (cell, dtype, H, B, layers).
SPILLED_WITHOUT_MIN_BLOCKS = [("lstm", "float16", 512, 8, 1), ("gru", "float16", 100, 20, 2)]


@pytest.mark.parametrize("cell,dtype,hidden,batch,layers", SPILLED_WITHOUT_MIN_BLOCKS)
def test_persistent_kernels_do_not_spill(nvcc, cell, dtype, hidden, batch, layers):
    """A persistent kernel runs one block an SM and says so (__launch_bounds__(THREADS, 1)),
    so ptxas may use 64 K / THREADS registers: the planned kernels of the two cases that
    spilled 4 and 8 bytes at 64 and 80 registers compile with no local memory."""
    spec = {"name": "spill", "dtype": dtype, "input_size": hidden,
            "layers": [{"name": f"l{i}", "cell": cell, "hidden_size": hidden} for i in range(layers)]}
    m = rnncc.compile(spec, target="h100", batch=batch, seq_len=256)
    k = m.kernel_of("l0", "recurrent")
    assert m.plan.layers[0].persistence.value.mode in ("grid", "cluster")
    assert "__launch_bounds__(THREADS, 1)" in k.source
    build.compile_cubin(k, "sm_90a")
    r = build.resources(k, "sm_90a")
    assert r.spill_stores == r.spill_loads == r.stack_frame == 0, r


@pytest.mark.parametrize("dtype,gemm", [("float32", "rnncc"), ("float16", "cublas"), ("bfloat16", "rnncc")])
def test_projected_lstm_kernels_render_and_compile(nvcc, dtype, gemm):
    """An LSTM with proj_size (bidirectional, then a second layer reading its 2P features)
    per step runs a step kernel over K = P that writes r, then the h projection; with lengths, the
    cell keeps c only and the projection keeps an ended row's h."""
    spec = {"name": "lstmp", "dtype": dtype, "input_size": 17,
            "layers": [{"name": "a", "cell": "lstm", "hidden_size": 65, "proj_size": 33,
                        "direction": "bidirectional"},
                       {"name": "b", "cell": "lstm", "hidden_size": 40, "proj_size": 7, "bias": False}]}
    m = rnncc.compile(spec, target="h100", seq_len=16, batch=5, gemm=gemm, persistence="none")
    assert [l.persistence.value.mode for l in m.plan.layers] == ["none"] * 3
    assert m.plan.layers[2].input_size == 66
    kernels = list(m.kernels) + [k for k in m.variant(16, 5, lengths=True).kernels
                                 if k.family in ("recurrent_step", "h_projection", "mask")]
    step = [k for k in kernels if k.family == "recurrent_step"]
    projections = [k for k in kernels if k.family == "h_projection"]
    assert len(step) == len(projections) == 4  # a and b, with and without lengths
    assert {k.users for k in projections} == {("a", "a_reverse"), ("b",)}
    for k in step:
        assert "h_old" not in k.source  # h is P wide: the cell never reads it per unit
        if gemm == "rnncc":
            assert "constexpr int K = 33;" in k.source or "constexpr int K = 7;" in k.source
        assert ("running ? c_cell : c_old" in k.source) == ("_lengths_" in k.name)
    for k in projections:
        assert ("h_prev" in k.source) == ("_lengths_" in k.name)
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=4) as pool:
        cubins = list(pool.map(lambda k: build.compile_cubin(k, "sm_90a"), kernels))
    assert all(c[:4] == b"\x7fELF" for c in cubins)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_folded_projected_lstm_kernels_render_and_compile(nvcc, dtype):
    """A folded LSTMP (bidirectional, odd sizes) runs a plain LSTM's persistent kernel of
    width H (with lengths: its keeping variant), no h projection kernel, and the first-step
    kernel that adds h0·W_hhᵀ, shared by both directions."""
    spec = {"name": "lstmp", "dtype": dtype, "input_size": 17,
            "layers": [{"name": "a", "cell": "lstm", "hidden_size": 65, "proj_size": 33,
                        "direction": "bidirectional"}]}
    m = rnncc.compile(spec, target="h100", seq_len=16, batch=5, persistence="cluster")
    assert all(l.folded for l in m.plan.layers)
    kernels = list(m.kernels) + [k for k in m.variant(16, 5, lengths=True).kernels
                                 if k.family.startswith("recurrent")]
    assert not [k for k in kernels if k.family == "h_projection"]
    first = [k for k in kernels if k.family == "folded_first_step"]
    assert len(first) == 1 and first[0].users == ("a", "a_reverse")
    recurrent = [k for k in kernels if k.family == "recurrent_cluster"]
    assert len(recurrent) == 2 and all("_p33" not in k.name for k in recurrent)
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=4) as pool:
        cubins = list(pool.map(lambda k: build.compile_cubin(k, "sm_90a"), first + recurrent))
    assert all(c[:4] == b"\x7fELF" for c in cubins)


@pytest.mark.parametrize("cell,gates", [("lstm", 4), ("gru", 3), ("rnn_tanh", 1), ("rnn_relu", 1)])
def test_backward_kernels_render_and_compile(nvcc, cell, gates):
    """The backward recurrence of every cell, with W_hh's columns resident (H from one unit a
    block to eight) and read from L2 (H=4096), compiles without local memory in each storage
    type; its name and code follow the tile and the dtype (the batch only through its rows a
    pass), dG is stored in the layer's type, and its grid barrier is the bounded one."""
    short = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
    for hidden, dtype in ((33, "float32"), (512, "float16"), (1024, "bfloat16"), (4096, "float16")):
        tile = tiles.backward_tile(gates, hidden, 8, 132, 226 * 1024)
        assert tile == tiles.backward_tile(gates, hidden, 64, 132, 226 * 1024) or not tile.w_in_shared
        k = codegen.render_backward(cell, hidden, gates, dtype, tile)
        assert k.name.startswith(f"backward_{cell}_h{hidden}_{short[dtype]}_u{tile.units}_r{tile.rows}")
        assert ("_wl2" in k.name) == (not tile.w_in_shared) == (hidden == 4096)
        assert "grid_barrier(barrier, status, spin_timeout_ns)" in k.source
        assert "__launch_bounds__(THREADS, 1)" in k.source and "{{" not in k.source
        assert ("c_seq" in k.source) == (cell == "lstm") and ("pre_h" in k.source) == (cell == "gru")
        assert f"typedef {DTYPES[dtype].c_type} T;" in k.source and "T* dg," in k.source
        build.compile_cubin(k, "sm_90a")
        r = build.resources(k, "sm_90a")
        assert r.spill_stores == r.spill_loads == r.stack_frame == 0, (cell, hidden, dtype, r)


@pytest.mark.parametrize("cell,gates", [("lstm", 4), ("gru", 3), ("rnn_tanh", 1), ("rnn_relu", 1)])
def test_backward_cluster_kernels_render_and_compile(nvcc, cell, gates):
    """The cluster form of the backward recurrence, at the tiles its shapes take (clusters of
    1 to 16, batch tiles of 8 and 16 rows, one and two elements a thread), compiles without
    local memory in fp16 and bf16; its name and code follow the tile, and its exchange is
    the bounded one, by a multicast copy from the global copy of each slice it is given."""
    shapes = ((1, 1), (33, 5), (96, 20), (256, 8), (512, 64)) if gates > 1 else ((100, 3), (700, 8), (1024, 8))
    for (hidden, batch), dtype in zip(shapes, itertools.cycle(("float16", "bfloat16"))):
        tile = tiles.backward_cluster_tile(gates, hidden, batch, 2, 16, 227 * 1024)
        k = codegen.render_backward(cell, hidden, gates, dtype, tile)
        short = {"float16": "f16", "bfloat16": "bf16"}[dtype]
        assert k.name.startswith(f"backward_cluster_{cell}_h{hidden}_{short}_c{tile.cluster}_m{tile.m_tiles}")
        assert k.cluster == tile.cluster and k.block == (tile.threads, 1, 1)
        assert k.dynamic_shared == tile.shared_bytes(gates, 2) and "{{" not in k.source
        assert ".multicast::cluster" in k.source and "spin_expired" in k.source
        assert [p.name for p in k.params][-1] == "exchange" and "T* __restrict__ exchange" in k.params[-1].decl
        build.compile_cubin(k, "sm_90a")
        r = build.resources(k, "sm_90a")
        assert r.spill_stores == r.spill_loads == r.stack_frame == 0, (cell, hidden, dtype, r)


def test_cluster_backward_exchange_bytes():
    """The global copies a cluster backward multicasts its dG slices from: two (step
    parity) of every K row × the cluster's batch rows, a cluster along y each."""
    tile = tiles.ClusterBackwardTile(16, 2, 4, 8)  # LSTM fp16 H=512 B=8's
    assert tiles.cluster_backward_exchange_bytes(tile, 4, 2, 8) == 2 * 2048 * 8 * 2
    assert tiles.cluster_backward_exchange_bytes(tile, 4, 2, 20) == 3 * 2 * 2048 * 8 * 2  # clusters of 8, 8, 4 rows
    fma = tiles.FmaClusterBackwardTile(4, 32, 8, 1)  # lanes of 32 units × 1 row: a row a cluster
    assert fma.batch_per_cluster == 1 and tiles.cluster_backward_exchange_bytes(fma, 4, 4, 16) == 16 * 2 * (4 * 4 * 32) * 4


@pytest.mark.parametrize("cell,gates", [("lstm", 4), ("gru", 3), ("rnn_tanh", 1), ("rnn_relu", 1)])
def test_fma_backward_cluster_kernels_render_and_compile(nvcc, cell, gates):
    """The float32 cluster form of the backward recurrence (FMA, W_hh in each lane's
    registers), at the tiles its shapes take (clusters of 1 to 16, 1 to 32 units a block, 1
    to 16 warps along K, lanes of 1 to 8 rows), compiles without local memory; its name and
    code follow the tile; its exchange is the bounded multicast one and its product has no mma."""
    for hidden, batch in ((1, 1), (33, 5), (128, 16), (256, 64), (100, 3)):
        tile = tiles.fma_backward_cluster_tile(gates, hidden, batch, 16, 226 * 1024)
        assert tile is not None, (cell, hidden)
        k = codegen.render_backward(cell, hidden, gates, "float32", tile)
        assert k.name.startswith(f"backward_cluster_{cell}_h{hidden}_f32_fma_c{tile.cluster}_u{tile.units}"
                                 f"_k{tile.k_split}_r{tile.lane_rows}")
        assert k.cluster == tile.cluster and k.block == (tile.threads, 1, 1)
        assert k.dynamic_shared == tile.shared_bytes(gates) and "{{" not in k.source
        assert ".multicast::cluster" in k.source and "spin_expired" in k.source and k.params[-1].name == "exchange"
        assert "mma.sync" not in k.source and "float w_reg[SHARE]" in k.source
        build.compile_cubin(k, "sm_90a")
        r = build.resources(k, "sm_90a")
        assert r.spill_stores == r.spill_loads == r.stack_frame == 0, (cell, hidden, r)
    with pytest.raises(ValueError, match="FMA cluster backward is for float32"):
        codegen.render_backward(cell, 128, gates, "float16", tiles.fma_backward_cluster_tile(gates, 128, 8, 16, 10**6))


@pytest.mark.parametrize("cell,gates", [("lstm", 4), ("gru", 3), ("rnn_tanh", 1)])
def test_ksplit_backward_kernels_render_and_compile(nvcc, cell, gates):
    """The K-split backward (float32 layers past the FMA cluster form): at tiles of clusters
    of 2, 4 and 8, lanes of 1 to 8 rows, chunks of 64 and 128 K rows in 2 to 8 buffers and
    lanes of 2 to 18 units (float4, float2 and scalar loads of W_hh), it compiles without local memory; its
    name follows the tile; it exchanges sums over DSMEM and meets a bounded grid barrier,
    whose verdict its cluster shares before any block leaves."""
    at_once = (132, 66, 39, 30, 22, 17, 15, 15, 9, 7, 7, 7, 7, 7, 7, 7)
    shared_max = tiles.grid_shared_max(227 * 1024)
    for hidden, batch in ((1024, 64), (516, 5)):
        found = tiles.ksplit_backward_tiles(gates, hidden, batch, at_once, shared_max)
        for tile in (found[0], found[-1]):  # the smallest lane tile of clusters of 2, the largest of 8
            k = codegen.render_backward(cell, hidden, gates, "float32", tile)
            assert k.name.startswith(f"backward_ksplit_{cell}_h{hidden}_f32_c{tile.cluster}_u{tile.units}"
                                     f"_r{tile.lane_rows}_k{tile.k_chunk}_s{tile.stages}")
            assert k.cluster == tile.cluster and k.block == (256, 1, 1) and "{{" not in k.source
            assert "map_shared_rank" in k.source and "spin_expired" in k.source and "mma" not in k.source
            # a cluster leaves together: each block's verdict at the grid barrier goes to every peer
            assert "cluster.map_shared_rank(gave_up, tid)[q]" in k.source and "if (stop) return;" in k.source
            build.compile_cubin(k, "sm_90a")
            r = build.resources(k, "sm_90a")
            assert r.spill_stores == r.spill_loads == r.stack_frame == 0, (cell, hidden, tile, r)
    with pytest.raises(ValueError, match="K-split backward is for float32"):
        codegen.render_backward(cell, 1024, gates, "bfloat16", tiles.KSplitBackwardTile(4, 9, 1))


def test_ksplit_backward_tile_candidates():
    """Clusters of 2, 4 and 8, each with the fewest units a block whose clusters the GPU
    holds at once (the grid barrier needs them all resident); lanes of the fewest rows that
    cover the batch in a pass and of half as many, within 80 sums a lane; chunks of 64 and
    128 K rows, each in the most stage buffers (up to 8) that fit shared memory; none where
    G·H is not a multiple of 4 or W_hh's share does not fit an SM."""
    at_once = (132, 66, 39, 30, 22, 17, 15, 15, 9, 7, 7, 7, 7, 7, 7, 7)
    shared_max = tiles.grid_shared_max(227 * 1024)
    found = tiles.ksplit_backward_tiles(4, 1024, 64, at_once, shared_max)
    assert tiles.KSplitBackwardTile(4, 9, 8, 64, 3) in found and tiles.KSplitBackwardTile(2, 8, 8, 128, 2) in found
    assert {(t.cluster, t.units) for t in found} == {(2, 8), (4, 9), (8, 9)}
    assert tiles.ksplit_backward_tiles(1, 1023, 8, at_once, shared_max) == []
    assert tiles.ksplit_backward_tiles(4, 2048, 8, at_once, shared_max) == []  # 32 MiB of W_hh: no SM holds its share
    for gates, hidden, batch in itertools.product((1, 3, 4), (300, 512, 516, 1000, 1024, 2048), (1, 5, 64, 100)):
        found = tiles.ksplit_backward_tiles(gates, hidden, batch, at_once, shared_max)
        covering = min(8, 1 << (-(-batch // 8) - 1).bit_length())
        for t in found:
            assert t.clusters(hidden) <= at_once[t.cluster - 1] and t.cluster_units * t.clusters(hidden) >= hidden
            assert t.lane_rows * t.lane_units <= 80 and t.shared_bytes(gates, hidden, batch) <= shared_max
            assert t.k_rows_block(gates, hidden) * t.cluster >= gates * hidden and t.k_rows_block(gates, hidden) % t.k_chunk == 0
            assert t.lane_rows in (covering, max(1, covering // 2)) and 2 <= t.stages <= 8
            assert t.stages == 8 or replace(t, stages=t.stages + 1).shared_bytes(gates, hidden, batch) > shared_max


def test_fma_backward_cluster_tile_candidates():
    """float32's candidates: every cluster whose blocks each own units below H (at most 32 a
    block); lane rows of 1, 2, 4, 8 up to the first that covers the batch in one cluster,
    more where a block's dG slice would not be whole 16-byte chunks; the fewest warps from 8
    to 16 that split K into shares of at most 64 (K itself below 8); none past G·H = 1024 or
    32 units a block. The chooser takes them for float32 only, the least predicted step."""
    big = 226 * 1024
    at_once = (132, 66, 39, 30, 22, 17, 15, 15, 9, 7, 7, 7, 7, 7, 7, 7)
    fma = tiles.fma_backward_cluster_tile
    assert fma(4, 128, 16, 16, big, 132, at_once) == tiles.FmaClusterBackwardTile(4, 32, 8, 1)
    assert fma(4, 256, 64, 16, big, 132, at_once) == tiles.FmaClusterBackwardTile(8, 32, 16, 8)
    assert fma(3, 160, 128, 16, big, 132, at_once) == tiles.FmaClusterBackwardTile(6, 27, 9, 8)
    assert fma(4, 1, 1, 16, big) == tiles.FmaClusterBackwardTile(1, 1, 4, 1)  # K = 4: a warp a K row
    assert fma(4, 257, 8, 16, big) is None and fma(1, 513, 8, 16, big) is None and fma(4, 64, 8, 0, big) is None
    assert {t.lane_rows for t in tiles.fma_backward_cluster_tiles(1, 18, 1, 1, big)} == {2}  # 18·4 bytes a row
    assert {(t.cluster, t.lane_rows) for t in tiles.fma_backward_cluster_tiles(4, 256, 64, 16, big)} == \
        {(c, r) for c in (16, 8) for r in (1, 2, 4, 8)}
    for gates, hidden, batch in itertools.product((1, 3, 4), (1, 7, 33, 100, 256, 341, 512), (1, 5, 8, 64)):
        found = tiles.fma_backward_cluster_tiles(gates, hidden, batch, 16, big)
        for t in found:
            assert t.cluster * t.units >= hidden > (t.cluster - 1) * t.units and t.units <= 32
            assert t.k_rows(gates) % t.k_split == 0 and t.share(gates) <= 64 and t.threads <= 512
            assert t.k_split >= 8 or t.k_split == t.k_rows(gates)
            assert (gates * t.units * t.batch_per_cluster) % 4 == 0 and t.shared_bytes(gates) <= big
        if found:
            covering = [t for t in found if t.clusters(batch) == 1 or t.lane_rows == 8]
            assert {t.cluster for t in covering} == {t.cluster for t in found}
            assert fma(gates, hidden, batch, 16, big, 132, at_once) in found
        else:  # no cluster's K (padding included) splits into 8-16 shares of 64, or 32 units
            for c in (c for c in range(1, 17) if (c - 1) * -(-hidden // c) < hidden):
                k_rows = gates * c * -(-hidden // c)
                assert -(-hidden // c) > 32 or not any(k_rows % w == 0 and k_rows // w <= 64 for w in range(8, 17))
    optin = 227 * 1024
    assert isinstance(tiles.backward_kernel_tile(4, 128, 16, 4, 132, 16, optin), tiles.FmaClusterBackwardTile)
    assert isinstance(tiles.backward_kernel_tile(4, 128, 16, 2, 132, 16, optin), tiles.ClusterBackwardTile)
    assert isinstance(tiles.backward_kernel_tile(4, 1024, 64, 4, 132, 16, optin), tiles.BackwardTile)


def test_fma_backward_step_model_picks_what_ran_fastest():
    """The FMA cluster backward's step model against the sweeps it was fitted to
    (results/backward-fma-tiles-h100-2026-11-27*.jsonl): at each of their 15 shapes its pick
    among the candidates was timed and is within 2.5% of the fastest tile timed there; the
    prediction's rms log error over the tiles it ranks is below 0.2."""
    import json
    from pathlib import Path

    results = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
    at_once = (132, 66, 39, 30, 22, 17, 15, 15, 9, 7, 7, 7, 7, 7, 7, 7)
    gates = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
    timed: dict[tuple, dict] = {}
    for name in ("backward-fma-tiles-h100-2026-11-27.jsonl", "backward-fma-tiles-h100-2026-11-27-at-f9ef567.jsonl"):
        for line in (results / name).read_text().splitlines():
            row = json.loads(line)
            if row["form"] == "fma cluster":
                t = row["tile"]
                tile = tiles.FmaClusterBackwardTile(t["cluster"], t["units"], t["k_split"], t["lane_rows"])
                timed.setdefault((row["cell"], row["hidden"], row["batch"], row["seq_len"]), {})[tile] = row["us_per_step"]
    assert len(timed) == 15
    errors = []
    for (cell, hidden, batch, _), times in timed.items():
        g = gates[cell]
        pick = tiles.fma_backward_cluster_tile(g, hidden, batch, 16, tiles.grid_shared_max(227 * 1024), 132, at_once)
        assert pick in times and times[pick] <= 1.025 * min(times.values()), (cell, hidden, batch, pick)
        for tile, us in times.items():
            if tile.k_split >= min(8, tile.k_rows(g)):
                predicted = tiles.fma_backward_step_seconds(tile, g, batch, at_once[tile.cluster - 1]) * 1e6
                errors.append(math.log(predicted / us))
    assert math.sqrt(sum(e * e for e in errors) / len(errors)) < 0.2


def test_ksplit_backward_models_pick_what_ran_fastest():
    """The K-split and grid forms' step models against the sweep they were fitted to
    (results/backward-ksplit-h200-2026-11-29.jsonl, 13 float32 shapes, 5 outside the fit,
    chunks by tensor maps): the K-split pick among the candidates was timed and is within
    1.06× of the fastest candidate timed; the form chosen (``backward_kernel_tile``) is
    within 1.035× of the fastest tile timed at every shape, and the fastest at 10."""
    import json
    from pathlib import Path

    results = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
    at_once = (132, 66, 39, 30, 22, 17, 15, 15, 9, 7, 7, 7, 7, 7, 7, 7)
    shared_max = tiles.grid_shared_max(227 * 1024)
    gates = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
    timed: dict[tuple, dict] = {}
    for line in (results / "backward-ksplit-h200-2026-11-29.jsonl").read_text().splitlines():
        row = json.loads(line)
        # lane_units follows from the tile; tensor_map was a field while a K-split tile could
        # stage by cp.async alone (every candidate had it on, as every tile has now)
        t = {k: v for k, v in row["tile"].items() if k not in ("lane_units", "tensor_map")}
        tile = tiles.KSplitBackwardTile(**t) if row["form"] == "ksplit" else tiles.BackwardTile(**t)
        timed.setdefault((row["cell"], row["hidden"], row["batch"]), {})[tile] = row["us_per_step"]
    assert len(timed) == 13
    fastest = 0
    for (cell, hidden, batch), times in timed.items():
        g = gates[cell]
        pick = tiles.ksplit_backward_tile(g, hidden, batch, at_once, shared_max)
        ksplit = {t: times[t] for t in tiles.ksplit_backward_tiles(g, hidden, batch, at_once, shared_max)}
        assert pick in ksplit and ksplit[pick] <= 1.06 * min(ksplit.values()), (cell, hidden, batch, pick)
        chosen = tiles.backward_kernel_tile(g, hidden, batch, 4, 132, 16, 227 * 1024, at_once)
        assert chosen in times, (cell, hidden, batch, chosen)
        assert times[chosen] <= 1.035 * min(times.values()), (cell, hidden, batch, chosen)
        fastest += times[chosen] == min(times.values())
    assert fastest == 10


def test_backward_cluster_tile_geometry():
    """Half layers only; the widest spread: the largest cluster (any size up to the
    largest) whose blocks each own units below H, each block the fewest 16-unit tiles that
    cover H, the most warps along K (8 a block) that split K evenly into at most 32 k-steps
    of W_hh a warp; batch tiles of 8 rows, 16 where 8 would take more waves of clusters;
    shared memory within the opt-in limit. Past 16 blocks' registers (2^20 halves of W_hh),
    none: the grid form."""
    optin = 227 * 1024
    assert tiles.backward_cluster_tile(4, 512, 8, 4, 16, optin) is None  # float32
    assert tiles.backward_cluster_tile(4, 512, 8, 2, 0, optin) is None   # no clusters
    assert tiles.backward_cluster_tile(4, 1024, 8, 2, 16, optin) is None  # 8 MiB of W_hh
    assert tiles.backward_cluster_tile(4, 512, 8, 2, 16, optin) == tiles.ClusterBackwardTile(16, 2, 4, 8)
    assert tiles.backward_cluster_tile(4, 256, 8, 2, 16, optin) == tiles.ClusterBackwardTile(16, 1, 8, 8)
    assert tiles.backward_cluster_tile(4, 64, 20, 2, 16, optin) == tiles.ClusterBackwardTile(4, 1, 8, 8)
    # 16 rows where 8 would take more waves: the H200 holds 7 clusters of 16 (target preset)
    h200 = target.get("h200").clusters_at_once
    assert tiles.backward_cluster_tile(4, 512, 48, 2, 16, optin, 132, h200).batch_per_cluster == 8
    assert tiles.backward_cluster_tile(4, 512, 64, 2, 16, optin, 132, h200).batch_per_cluster == 16
    assert tiles.backward_cluster_tile(1, 700, 8, 2, 16, optin) == tiles.ClusterBackwardTile(11, 4, 2, 8)
    for gates, hidden, batch in itertools.product((1, 3, 4), (1, 33, 100, 256, 300, 512, 700, 1024), (1, 8, 9, 64)):
        t = tiles.backward_cluster_tile(gates, hidden, batch, 2, 16, optin)
        if gates * hidden * hidden > 2**20:  # past the registers: the hybrid form, or none
            assert t is None or t.register_steps > 0
        if t is None:
            continue
        assert t.cluster * t.units >= hidden > (t.cluster - 1) * t.units and t.units == 16 * -(-hidden // (16 * t.cluster))
        if t.register_steps:
            assert 0 < t.register_steps < t.split_steps(gates) and t.register_steps % 2 == 0
            assert t.m_tiles * t.k_split <= 16
            assert t.register_steps == tiles.hybrid_register_steps(replace(t, register_steps=0), gates)
        else:
            assert t.split_steps(gates) <= 32 and t.m_tiles * t.k_split <= 8
        assert t.k_rows(gates) % (16 * t.k_split) == 0
        waves = {rows: -(-(-(-batch // rows)) // (132 // t.cluster)) for rows in (8, 16)}
        assert t.batch_per_cluster == (8 if waves[8] <= waves[16] else 16)
        assert t.clusters(batch) * t.batch_per_cluster >= batch
        assert t.shared_bytes(gates, 2) <= optin
        # no wider cluster had a tile: allowing up to any size from this one changes nothing
        assert all(tiles.backward_cluster_tile(gates, hidden, batch, 2, c, optin) == t for c in range(t.cluster, 17))


def test_hybrid_backward_cluster_tile():
    """Where no cluster's registers hold W_hh (half layers, G·H² past 2^20), the hybrid form:
    the largest cluster whose blocks own units below H, the fewest 16-unit tiles a block, the
    most warps along K up to 16 whose share splits K evenly, as many k-steps of the share in
    registers as a thread's registers hold beside the kernel's (ptxas counts warps in fours),
    the rest in shared memory beside the dG buffers. Tiles that fit the registers do not move."""
    optin = 227 * 1024
    assert [tiles.thread_register_limit(n) for n in (128, 256, 288, 384, 480, 512)] == [248, 248, 168, 168, 128, 128]
    # PTB's medium LSTM (H=650): 14 blocks of 48 units, 12 warps, 20 of 42 k-steps in registers
    pick = tiles.backward_cluster_tile(4, 650, 20, 2, 16, optin)
    assert pick == tiles.ClusterBackwardTile(14, 3, 4, 8, 20)
    assert pick.shared_steps(4) == 22 and pick.threads == 384
    assert pick.shared_bytes(4, 2) == 12 * 22 * 512 + replace(pick, register_steps=0).shared_bytes(4, 2)
    assert tiles.backward_cluster_tile(4, 1024, 8, 2, 16, optin) is None  # 8 MiB: the grid form
    assert tiles.backward_cluster_tile(1, 1400, 8, 2, 16, optin) == tiles.ClusterBackwardTile(15, 6, 2, 8, 16)
    # the all-register tiles stand
    assert tiles.backward_cluster_tile(4, 512, 8, 2, 16, optin) == tiles.ClusterBackwardTile(16, 2, 4, 8)
    assert tiles.backward_cluster_tile(1, 700, 8, 2, 16, optin) == tiles.ClusterBackwardTile(11, 4, 2, 8)
    # 16 rows a cluster leave fewer registers for W_hh: 44 a thread for the sums and B, and
    # 2 elements more a thread (12 each), 68 registers: 16 k-steps fewer, in pairs
    rows16 = tiles.ClusterBackwardTile(12, 3, 2, 16)
    assert (tiles.hybrid_register_steps(rows16, 3), tiles.hybrid_register_steps(replace(rows16, batch_per_cluster=8), 3)) \
        == (20, 36)
    # with too little shared memory for the rest of W_hh, none
    assert tiles.backward_cluster_tile(4, 650, 20, 2, 16, 100 * 1024) is None


@pytest.mark.parametrize("cell,gates,shapes", [
    ("lstm", 4, ((520, 64), (650, 20))), ("gru", 3, ((560, 64), (700, 3))), ("rnn_tanh", 1, ((1400, 8),))])
def test_hybrid_backward_cluster_kernels_render_and_compile(nvcc, cell, gates, shapes):
    """The hybrid form at the tiles its shapes take on the H200 (288 to 480 threads, 8 and
    16 rows a cluster, one and two elements a thread) compiles without local memory: the
    register budget (tiles.hybrid_register_steps) leaves ptxas room for the rest (a bulk copy
    a peer, no global copy of the slice to multicast from); its name says how many k-steps
    stay in registers."""
    h200 = target.get("h200")
    for (hidden, batch), dtype in zip(shapes, itertools.cycle(("float16", "bfloat16"))):
        tile = tiles.backward_cluster_tile(gates, hidden, batch, 2, 16, h200.shared_memory_per_block_optin, 132,
                                           h200.clusters_at_once)
        assert tile.register_steps > 0
        k = codegen.render_backward(cell, hidden, gates, dtype, tile)
        assert k.name.endswith(f"_n{tile.batch_per_cluster}_rs{tile.register_steps}_{k.name.rsplit('_', 1)[1]}")
        assert k.dynamic_shared == tile.shared_bytes(gates, 2) and "w_smem" in k.source and "{{" not in k.source
        assert ".multicast::cluster" not in k.source and "exchange" not in [p.name for p in k.params]
        build.compile_cubin(k, "sm_90a")
        r = build.resources(k, "sm_90a")
        assert r.spill_stores == r.spill_loads == r.stack_frame == 0, (cell, hidden, dtype, r)


def test_hybrid_registers_form_tile():
    """The forward's hybrid registers form: a registers-form tile whose fragments pass a
    thread's registers keeps as many k-steps as they hold beside the rest of the form's
    (in pairs, ptxas' limit in 8s) and the rest in shared memory before the h buffers; a
    candidate only where no registers-form tile of any cluster fits (the tiles that fit do
    not move), batch tiles of ≤ 16 rows."""
    h200 = target.get("h200")
    optin = h200.shared_memory_per_block_optin
    # PTB medium's LSTM (H=650): 14 blocks of 48 units, 12 warps (168 registers a thread):
    # 64 + 12 (B) + 8 (two chains) + 5 (an element) + 16 (A ahead) beside, 14 of 41 k-steps
    form = replace(tiles.TensorTile.registers_form(650, 4, 14, 8), cluster=14)
    assert not form.registers_fit(650, 4, 2) and form.m_tiles == 12
    tile = form.with_shared_steps_for(650, 4, 2, optin)
    assert tile.register_steps == 14 and tile.shared_steps(650, 2) == 27
    assert tile.shared_bytes(650, 4, 2) == 12 * 27 * 512 + form.shared_bytes(650, 4, 2)
    assert form.with_shared_steps_for(650, 4, 2, 100 * 1024) is None  # the rest past shared memory
    assert replace(form, batch_per_block=32).with_shared_steps_for(650, 4, 2, optin) is None
    assert tile.with_shared_steps_for(650, 4, 2, optin) is None and form.shared_steps(650, 2) == 0
    picked = cost.tensor_tiles(650, 4, 20, h200, "cluster", 2)
    assert tile in picked and all(not t.weights_in_registers or t.register_steps for t in picked)
    # H=512 fits the registers of a cluster of 16: no hybrid candidate
    assert not any(t.register_steps for t in cost.tensor_tiles(512, 4, 8, h200, "cluster", 2))
    with pytest.raises(ValueError, match="register_steps"):
        replace(tile, wgmma=True)


@pytest.mark.parametrize("cell,hidden,batch,variant", [("lstm", 650, 20, "gates"), ("lstm", 520, 64, "plain"),
                                                       ("gru", 768, 16, "residual"), ("rnn_tanh", 1400, 16, "plain"),
                                                       ("gru", 560, 64, "gates"), ("rnn_tanh", 1300, 1, "plain"),
                                                       ("rnn_tanh", 1350, 8, "residual")])
def test_hybrid_registers_form_picks_compile_without_spills(nvcc, cell, hidden, batch, variant):
    """The forward's hybrid registers form, the cluster kernel the planner takes on the H200
    where W_hh is past the registers of any cluster (forced: at tanh H=1300 B=1, H=1400 B=16
    and GRU H=768 B=16 the grid kernel is priced faster since 34f3f4b), also saving its gates
    (a training forward) or as a residual layer: part of each warp's fragments in shared
    memory, the shared memory the plan says, and no local memory
    (TensorTile.with_shared_steps_for's register budget; at tanh H=1300 and 1350, 41 and 43
    pairs of k-steps, the pair loop by static_for: NVVM left it rolled under #pragma unroll,
    w_reg in a 592-byte stack frame)."""
    dtype = "bfloat16" if cell == "gru" else "float16"
    spec = {"name": "hybrid", "dtype": dtype, "input_size": hidden,
            "layers": [{"name": "l0", "cell": cell, "hidden_size": hidden, "residual": variant == "residual"}]}
    m = rnncc.compile(spec, target="h200", batch=batch, seq_len=256, persistence="cluster",
                      **({"backward_gates": "save"} if variant == "gates" else {}))
    v = m.plan.layers[0].persistence.value
    assert v.mode == "cluster" and v.tile.weights_in_registers and 0 < v.tile.register_steps < v.tile.k_steps(hidden, 2)
    k = m.kernel_of("l0", "recurrent")
    assert "w_smem" in k.source and k.dynamic_shared == v.shared_bytes and "{{" not in k.source
    build.compile_cubin(k, "sm_90a")
    r = build.resources(k, "sm_90a")
    assert r.spill_stores == r.spill_loads == r.stack_frame == 0, (cell, hidden, r)


def test_backward_tile_geometry():
    """One block an SM at most, as few units a block as that allows, every unit owned once;
    up to 8 batch rows a pass within 64 registers of sums; W_hh's columns (padded to
    16-byte rows) in shared memory while they, the batch's carries and the warps' sums fit,
    else read from L2."""
    for gates, hidden, batch in ((4, 1, 1), (4, 100, 3), (3, 512, 8), (4, 1024, 64), (1, 4096, 256), (4, 4096, 8)):
        t = tiles.backward_tile(gates, hidden, batch, 132, 226 * 1024)
        assert t.blocks <= 132 and t.units * t.blocks >= hidden > t.units * (t.blocks - 1)
        assert t.units == -(-hidden // 132) and t.units_padded % 4 == 0 and t.units_padded >= t.units
        assert 1 <= t.rows <= min(batch, 8) and (t.rows * t.units_padded <= 64 or t.rows == 1)
        rest = 8 * batch * t.units + 4 * 8 * t.rows * t.units
        fits = 4 * gates * hidden * t.units_padded + rest <= 226 * 1024
        assert t.w_in_shared == fits
        assert t.shared_bytes(gates, hidden, batch) == (4 * gates * hidden * t.units_padded if fits else 0) + rest
    assert tiles.backward_tile(4, 1024, 8, 132, 226 * 1024) == tiles.BackwardTile(8, 128, 8, True)
    assert tiles.backward_tile(4, 512, 3, 132, 226 * 1024) == tiles.BackwardTile(4, 128, 3, True)
    assert not tiles.backward_tile(4, 2048, 8, 132, 226 * 1024).w_in_shared  # 16 units: 512 KiB


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("cell,hidden,batch", [("lstm", 300, 13), ("gru", 65, 5), ("rnn_relu", 1, 1)])
def test_rows_kernels_on_tensor_cores_compile_without_spills(nvcc, dtype, cell, hidden, batch):
    """The rows kernels on tensor cores (rows_mma.cuh.j2), every tile a plan may take at the
    layer's batch: the step's (recurrent_step_rows_tensor.cu.j2) and the projection's of a
    few rows in both layouts (input_projection_rows_tensor.cu.j2), with no local memory."""
    from dataclasses import replace

    from rnncc.passes.cost import rows_projection_tensor_tiles, step_rows_tensor_tiles
    from rnncc.plan import Decision
    spec = {"name": "rows", "dtype": dtype, "input_size": 48 if cell == "lstm" else 45,  # 45: rows padded
            "layers": [{"name": "l0", "cell": cell, "hidden_size": hidden}]}
    kernels = []
    for layout in LAYOUTS:
        m = rnncc.compile(spec, target="h100", seq_len=1, batch=batch, persistence="none", layout=layout)
        l = m.plan.layers[0]
        steps = step_rows_tensor_tiles(batch, l.gates, l.out_size, 2, m.target) if layout == "xw" else []
        projections = rows_projection_tensor_tiles(batch, l.input_size, 2, m.target)
        assert projections and (steps or layout == "wx")
        for t in steps:
            forced = m.with_plan(m.plan.map_layers(lambda l: replace(l, step_tile=Decision(t, "test", "user"))))
            kernels.append(forced.kernel_of("l0", "recurrent"))
        for t in projections:
            forced = m.with_plan(m.plan.map_layers(lambda l: replace(l, projection_tile=Decision(t, "test", "user"))))
            kernels.append(forced.kernel_of("l0", "input_projection"))
    assert all("mma.sync" in k.source for k in kernels)
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda k: build.compile_cubin(k, "sm_90a"), kernels))
    for k in kernels:
        r = build.resources(k, "sm_90a")
        assert r.spill_stores == r.spill_loads == r.stack_frame == 0, (k.name, r)


@pytest.mark.parametrize("cell", CELLS)
def test_staged_grid_kernels_render_and_compile(nvcc, cell):
    """The FMA grid kernel with h staged by chunks (float32): forced on the matrix's stack
    (concat, sum and residual inputs) at H=1024 (16-byte copies, float4 or float2 weights)
    and H=33 (h loaded a float at a time, K padded to the chunk), for a training forward
    (the gates stored) and for sequences of different lengths, each of its tiles' extremes
    compiles without local memory, launches 256 threads in x and meets a bounded barrier."""
    for hidden, batch in ((1024, 64), (33, 5)):
        case = dict(cell=cell, layout="xw", H=hidden, unroll=None, dtype="float32", bias=True, batch=batch)
        m = compile_case(case, backward_gates="save")
        G = m.plan.layers[0].gates
        found = cost.staged_tiles(hidden, G, batch, m.target)
        if hidden % 4:  # no candidates (the model does not price loads a float at a time): forced
            assert not found
            found = [tiles.StagedPersistentTile(1, 8, 1), tiles.StagedPersistentTile(2, 64, 1, 64, 3)]
        assert all(t.lane_rows * t.lane_columns(G) <= cost.STAGED_LANE_SUMS for t in found)
        for tile in (found[0], found[-1]):
            value = tiles.Persistent.of("grid", "fma", tile, hidden, G, 4)
            forced = m
            for l in m.plan.layers:
                forced = forced.with_persistence(l.name, value, "forced by the test")
            for variant in (forced, forced.variant(16, batch, lengths=True)):
                ks = [k for k in variant.kernels if k.family == "recurrent_persistent"]
                assert sorted(u for k in ks for u in k.users) == ["a", "b", "c", "d"]
                assert all(k.name.startswith(f"recurrent_persistent_staged_{cell}") for k in ks)
                for k in ks:
                    assert k.block == (256, 1, 1) and k.dynamic_shared == value.shared_bytes
                    assert "cp.async.cg" in k.source and "spin_expired" in k.source and "{{" not in k.source
                    build.compile_cubin(k, "sm_90a")
                    r = build.resources(k, "sm_90a")
                    assert r.spill_stores == r.spill_loads == r.stack_frame == 0, (cell, hidden, tile, r)


def test_register_rule_matches_the_spills_measured():
    """RegisterPersistentTile.registers_fit against what ptxas did at the 256 kernels of
    benchmarks/results/registers-spills-2026-11-27.jsonl (64 tiles of demand 200–232, each as
    a residual layer, with lengths and with the gates stored, built at the rule of 232): the
    rule refuses every spilling tile but the three its docstring names, which spilled 12–36
    bytes in their residual variants. A rule loosened past the data, or data that moves,
    fails here."""
    import json
    from pathlib import Path

    from rnncc.tiles import RegisterPersistentTile

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "registers-spills-2026-11-27.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    gates = {"lstm": 4, "gru": 3, "rnn_tanh": 1}
    admitted_spilling, refused = set(), 0
    for r in rows:
        G = gates[r["cell"]]
        # The file names a tile by its lane's columns, rows, phases and weights; the units a
        # block that give those (batch_blocks does not enter the rule).
        tiles = [t for t in (RegisterPersistentTile(u, r["rows"], 1, 256, r["k_phases"]) for u in range(1, 41))
                 if t.lane_columns(G) == r["lane_columns"] and t.weight_registers(r["H"], G) == r["weights"]]
        verdicts = {t.registers_fit(r["H"], G) for t in tiles}
        assert len(verdicts) == 1, r
        if verdicts.pop():
            if r["spill_stores"]:
                admitted_spilling.add((r["cell"], r["H"], r["rows"], r["k_phases"], r["weights"]))
        else:
            refused += 1
    assert len(rows) == 256 and refused == 120
    assert admitted_spilling == {("gru", 1000, 1, 4, 192), ("gru", 1000, 2, 2, 192), ("rnn_tanh", 1200, 12, 1, 152)}


def test_nvcc_builds_a_source_into_the_same_cubin_every_time(nvcc, tmp_path, monkeypatch):
    """Two builds of one kernel into two empty caches give byte-identical cubins: nvcc runs
    with fixed addresses (build.fixed_addresses). Without, NVVM's PTX of this kernel (the
    float32 GRU H=1024 registers-form kernel that test_register_grid_kernels_render_and_compile
    builds, on a residual stack) varied from run to run, and ptxas spilled in most of them."""
    if not build.fixed_addresses():
        pytest.skip("no setarch here: nvcc runs with the addresses the system gives it")
    case = dict(cell="gru", layout="xw", H=1024, unroll=None, dtype="float32", bias=True, batch=8)
    m = compile_case(case, backward_gates="save")
    tile = tiles.RegisterPersistentTile(units_per_block=16, batch_per_block=4, batch_blocks=2, threads=256, k_phases=2)
    value = tiles.Persistent.of("grid", "fma", tile, 1024, m.plan.layers[0].gates, 4)
    for l in m.plan.layers:
        m = m.with_persistence(l.name, value, "forced by the test")
    kernel = next(k for k in m.variant(16, 8, lengths=True).kernels
                  if k.family == "recurrent_persistent" and "residual" in k.name)
    cubins = []
    for run in ("first", "second"):
        monkeypatch.setenv("RNNCC_CACHE_DIR", str(tmp_path / run))
        cubins.append(build.compile_cubin(kernel, "sm_90a"))
    assert cubins[0] == cubins[1]


@pytest.mark.parametrize("cell", CELLS)
def test_register_grid_kernels_render_and_compile(nvcc, cell):
    """The registers form of the FMA grid kernel (float32, W_hhᵀ in registers): on the
    matrix's stack (concat, sum and residual inputs), at H=1024 B=8 (16-byte copies), H=650
    B=16 and H=33 B=5 (h loaded a float at a time), for a training forward (the gates
    stored) of sequences of different lengths, the candidates that ask the most registers
    and hold the most weights, and the last (4 phases of K, the widest block) compile
    without local memory (registers_fit) and launch
    256 threads in x."""
    kernels = []
    for hidden, batch in ((1024, 8), (650, 16), (33, 5)):
        case = dict(cell=cell, layout="xw", H=hidden, unroll=None, dtype="float32", bias=True, batch=batch)
        m = compile_case(case, backward_gates="save")
        G = m.plan.layers[0].gates
        found = cost.register_tiles(hidden, G, batch, m.target)
        assert found and all(t.batch_per_block <= cost.REGISTERS_MAX_BATCH for t in found)
        demand = lambda t: t.weight_registers(hidden, G) + (t.lane_columns(G) + 4) * t.batch_per_block  # noqa: E731
        weights = lambda t: t.weight_registers(hidden, G)  # noqa: E731
        for tile in dict.fromkeys((max(found, key=demand), max(found, key=weights), found[-1])):
            value = tiles.Persistent.of("grid", "fma", tile, hidden, G, 4)
            forced = m
            for l in m.plan.layers:
                forced = forced.with_persistence(l.name, value, "forced by the test")
            variant = forced.variant(16, batch, lengths=True)
            ks = [k for k in variant.kernels if k.family == "recurrent_persistent"]
            assert ks and all(k.name.startswith(f"recurrent_persistent_registers_{cell}") for k in ks)
            for k in ks:
                assert k.block == (256, 1, 1) and k.dynamic_shared == value.shared_bytes
                assert "spin_expired" in k.source and "{{" not in k.source
                assert ("cp.async.wait_group 0" in k.source) == (hidden % 4 == 0)  # 16-byte copies
            kernels += [(k, tile, hidden) for k in ks]
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda kth: build.compile_cubin(kth[0], "sm_90a"), kernels))
    for k, tile, hidden in kernels:
        r = build.resources(k, "sm_90a")
        assert r.spill_stores == r.spill_loads == r.stack_frame == 0, (cell, hidden, tile, r)


@pytest.mark.parametrize("polled", [False, True])
def test_hybrid_w_grid_tile_compiles_without_spills(nvcc, tmp_path, monkeypatch, polled):
    """The grid kernel on tensor cores with the first k-steps of each warp's share of W_hh
    in registers and the rest in shared memory (TensorTile.register_steps): LSTM fp16
    H=1024 in 32 blocks of 32 units (a quarter of the SMs, 256 KiB of W_hh a block), 12 of
    each warp's 32 k-steps in registers, renders, compiles within the launch's shared
    memory and spills nothing at 512 threads (128 registers), also with h polled in y (the
    tile as an SM partition plans it). With register_steps 0 every kernel's source is what
    it was (a CPU census of 800 plans' kernel names)."""
    from rnncc.tiles import Persistent, TensorTile

    monkeypatch.setenv("RNNCC_CACHE_DIR", str(tmp_path))
    spec = {"name": "l", "dtype": "float16", "input_size": 1024,
            "layers": [{"name": "l0", "cell": "lstm", "hidden_size": 1024}]}
    m = rnncc.compile(spec, target="h100", seq_len=256, batch=8)
    tile = TensorTile(32, 8, 2, 8, register_steps=12, polled_exchange=polled)
    p = Persistent.of("grid", "tensor", tile, 1024, 4, 2)
    assert (p.blocks, tile.threads) == (32, 512)
    assert p.shared_bytes == tile.shared_bytes(1024, 4, 2) <= m.target.shared_memory_per_block_optin
    assert TensorTile(32, 8, 2, 8).shared_bytes(1024, 4, 2) > m.target.shared_memory_per_block_optin
    forced = m.with_persistence("l0", p, "forced: the hybrid tile")
    kernel = next(k for k in forced.kernels if k.family == "recurrent_persistent")
    assert "REG_STEPS = 12" in kernel.source
    assert ("load_exchanged_16" in kernel.source) == polled
    build.compile_cubin(kernel, "sm_90a")
    used = build.resources(kernel, "sm_90a")
    assert used.spill_stores == used.spill_loads == 0 and used.registers <= 128
    with pytest.raises(ValueError, match="register_steps"):
        TensorTile(32, 8, 2, 8, cluster=16, register_steps=12)


@pytest.mark.parametrize("cell,hidden,batch", [("lstm", 2048, 1), ("lstm", 2048, 20), ("gru", 2048, 20),
                                               ("lstm", 1536, 64), ("gru", 1280, 64), ("lstm", 1280, 20)])
def test_planned_hybrid_w_tiles_do_not_spill(nvcc, tmp_path, monkeypatch, cell, hidden, batch):
    """Layers whose W_hh fits the SMs only with part of it in registers plan grid tiles with
    register_steps (persistence.grid_family): the register estimate
    (TensorTile.with_weights_in_registers_for) admits none that ptxas spills. Mode grid is
    forced: at B=64 and 35 steps the library's step, replayed from a CUDA graph, is priced
    below it (persistence.per_step_replayed)."""
    monkeypatch.setenv("RNNCC_CACHE_DIR", str(tmp_path))
    spec = {"name": "l", "dtype": "float16", "input_size": hidden,
            "layers": [{"name": "l0", "cell": cell, "hidden_size": hidden}]}
    m = rnncc.compile(spec, target="h100", seq_len=35, batch=batch, persistence="grid")
    tile = m.plan.layers[0].persistence.value.tile
    assert m.plan.layers[0].persistence.value.mode == "grid" and tile.register_steps > 0
    kernel = m.kernel_of("l0", "recurrent")
    build.compile_cubin(kernel, "sm_90a")
    used = build.resources(kernel, "sm_90a")
    assert used.spill_stores == used.spill_loads == 0, (tile, used)


@pytest.mark.parametrize("cell,dtype,layers,hidden,batch,seq,polls", [
    ("lstm", "float16", 8, 1024, 8, 128, True), ("lstm", "bfloat16", 4, 1024, 1, 256, True),
    ("gru", "float16", 4, 1024, 8, 256, False), ("lstm", "float16", 2, 1024, 16, 256, False),
    ("gru", "float16", 4, 1536, 8, 256, False), ("gru", "bfloat16", 4, 777, 5, 100, True)])
def test_planned_partition_kernels_do_not_spill(nvcc, tmp_path, monkeypatch, cell, dtype, layers, hidden,
                                                batch, seq, polls):
    """Stacks pipelined in SM partitions: their tensor grid kernels wait for h by polling y
    (TensorTile.polled_exchange) where a thread stages ≤ 2 vectors of h a step (LSTM H=1024
    at B=1 and 8: 512 threads, 8 rows), else at the grid barrier. ptxas spills nothing in
    either: polled, 2 × LSTM fp16 H=1024 B=16's wgmma tile (4 vectors a thread) spilled 44
    bytes and 4 × GRU fp16 H=1536 B=8's (7) 20, which is why those wait at the barrier."""
    monkeypatch.setenv("RNNCC_CACHE_DIR", str(tmp_path))
    spec = {"name": "s", "dtype": dtype, "input_size": hidden,
            "layers": [{"name": f"l{i}", "cell": cell, "hidden_size": hidden} for i in range(layers)]}
    m = rnncc.compile(spec, target="h100", seq_len=seq, batch=batch)
    assert m.plan.schedule.value.pipelined, m.plan.schedule.reason
    for l in m.plan.layers:
        tile = l.persistence.value.tile
        assert l.persistence.value.mode == "grid" and tile.polled_exchange == polls, tile
        kernel = m.kernel_of(l.name, "recurrent")
        assert ("load_exchanged_16" in kernel.source) == polls
        build.compile_cubin(kernel, "sm_90a")
        used = build.resources(kernel, "sm_90a")
        assert used.spill_stores == used.spill_loads == 0, (kernel.name, used)


@pytest.mark.parametrize("cell,dtype,hidden,batch", [("lstm", "float16", 1024, 8), ("lstm", "float16", 1024, 16),
                                                     ("gru", "bfloat16", 777, 5), ("rnn_tanh", "bfloat16", 2048, 5),
                                                     ("lstm", "float16", 850, 5), ("gru", "float16", 900, 8)])
def test_planned_resident_w_tiles_do_not_spill(nvcc, tmp_path, monkeypatch, cell, dtype, hidden, batch):
    """Single layers on the tensor grid kernel at one batch tile a block plan tiles with
    all but one k-step of W_hh in registers (TensorTile.with_weights_resident, priced by
    GRID_RESIDENT_W_BYTES_PER_SECOND): the register estimate admits none that ptxas
    spills, at odd sizes and every cell too."""
    monkeypatch.setenv("RNNCC_CACHE_DIR", str(tmp_path))
    spec = {"name": "l", "dtype": dtype, "input_size": hidden,
            "layers": [{"name": "l0", "cell": cell, "hidden_size": hidden}]}
    m = rnncc.compile(spec, target="h100", seq_len=256, batch=batch)
    value = m.plan.layers[0].persistence.value
    itemsize = 2
    assert value.mode == "grid" and value.tile.resident(hidden, itemsize), value.tile
    assert value.tile.threads <= 256 and value.tile.tiles_per_block == 1
    kernel = m.kernel_of("l0", "recurrent")
    build.compile_cubin(kernel, "sm_90a")
    used = build.resources(kernel, "sm_90a")
    assert used.spill_stores == used.spill_loads == 0, (value.tile, used)


@pytest.mark.parametrize("dtype,features,layout", [("float16", 650, "xw"), ("bfloat16", 37, "wx"),
                                                   ("float32", 650, "xw"), ("float16", 650, "wx")])
def test_tiled_projection_reads_padded_weights_at_unaligned_k(nvcc, dtype, features, layout):
    """Where K is not whole 16-byte loads, the tiled projection on tensor cores reads W_ih
    from the copy whose rows are padded with zeros ("w_ih_rows", as the rows kernels do),
    16 bytes a load (W_STRIDE), the input by 4-byte pairs where it can (16-bit operands),
    and compiles, in both layouts; at an aligned K it reads W_ih as stored."""
    itemsize = 4 if dtype == "float32" else 2
    for k, padded in ((features, tiles.StepRows.row_stride(features, itemsize)), (640, 0)):
        spec = {"name": "unaligned", "dtype": dtype, "input_size": k,
                "layers": [{"name": "l0", "cell": "lstm", "hidden_size": 48}]}
        m = rnncc.compile(spec, target="h100", batch=8, seq_len=64, gemm="rnncc", precision="tensor",
                          layout=layout)
        l = m.plan.layers[0]
        tile = l.projection_tile.value
        assert tile.math == "tensor" and tile.row_stride == padded
        assert launch.projection_weights(l) == ("w_ih_rows" if padded else "w_ih")
        source = m.kernel_of("l0", "input_projection")
        assert f"constexpr int W_STRIDE = {padded or k};" in source.source
        assert ("_load_pairs" in source.source) == (itemsize == 2)
        if padded:
            assert padded > k and padded * itemsize % 16 == 0
            build.compile_cubin(source, "sm_90a")


def test_staged_kernels_sum_their_warps_by_vectors(nvcc, tmp_path):
    """The staged kernels' warps' sums lie past buffers that align_shared puts on a 1024-byte
    boundary; its result must read as 16-byte aligned to the compiler, or their float4
    accesses split into 8-way bank-conflicted floats (~2 µs of an 18 µs step at LSTM fp32
    H=1024 B=64). The PTX of the tensor-map forms (staged forward, K-split backward with
    odd and even stage counts, whose mbarriers precede the map's scratch) stores them as
    vectors. (The odd counts' misaligned map once faulted only on the GPU.)"""
    spec = {"name": "l", "dtype": "float32", "input_size": 1024,
            "layers": [{"name": "l0", "cell": "lstm", "hidden_size": 1024}]}
    m = rnncc.compile(spec, target="h100", batch=64, persistence="grid")
    kernels = [m.kernel_of("l0", "recurrent")]
    shared_max = tiles.grid_shared_max(227 * 1024)
    found = tiles.ksplit_backward_tiles(4, 1024, 64, (132, 66, 39, 30), shared_max)
    # lanes of 4 units: a row's sums are whole float4s (odd lane_units cannot vectorise)
    by_stages = {t.stages % 2: t for t in found if t.lane_units % 4 == 0}
    assert set(by_stages) == {0, 1}
    kernels += [codegen.render_backward("lstm", 1024, 4, "float32", t) for t in by_stages.values()]
    for k in kernels:
        assert "align_shared" in k.source
        source = tmp_path / f"{k.name}.cu"
        source.write_text(k.source)
        done = subprocess.run([nvcc, "-ptx", "-arch=sm_90a", "-O3", "-o", str(tmp_path / "k.ptx"), str(source)],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "st.shared.v4.f32" in (tmp_path / "k.ptx").read_text(), k.name


def test_grid_picks_of_several_batch_tiles_at_b256_compile_without_spills(nvcc):
    """At B=256 the grid kernel's wgmma blocks of 4 batch tiles of 32 (16 units, 256 threads)
    took all 255 registers and spilled 4-320 bytes (LSTM and GRU fp16 H=777-1024, rnncc/ at
    2dc3007; LSTM H=900 ran 64.9 µs a step against a price of 19.8): their estimate
    (TensorTile.wgmma_registers) keeps them out of the grid family, and what the planner takes
    instead compiles without local memory."""
    from rnncc.passes.cost import tensor_tiles
    from rnncc.tiles import register_cap

    target = rnncc.target.get("h200")
    for cell, G in (("lstm", 4), ("gru", 3)):
        family = tensor_tiles(900, G, 256, target, "grid", 2)
        assert not any(t.wgmma and t.tiles_per_block == 4 and t.k_split == 2 for t in family), cell
        assert all(t.tiles_per_block == 1 or t.wgmma_registers(G) <= register_cap(t.threads)
                   for t in family if t.wgmma)
    kernels = []
    for cell, H in (("lstm", 900), ("lstm", 1024), ("gru", 1024)):
        spec = {"name": "s", "dtype": "float16", "input_size": H, "layers": [{"name": "l0", "cell": cell, "hidden_size": H}]}
        m = rnncc.compile(spec, target="h200", batch=256, seq_len=256)
        k = m.kernel_of("l0", "recurrent")
        if k is not None and m.plan.layers[0].persistence.value.mode == "grid":
            kernels.append(k)
    assert kernels
    for k in kernels:
        build.compile_cubin(k, "sm_90a")
        r = build.resources(k, "sm_90a")
        assert r.spill_stores == r.spill_loads == r.stack_frame == 0, (k.name, r)
