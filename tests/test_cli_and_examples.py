"""The rnncc command, the examples, and generated/ kept in step with the templates."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import rnncc
from rnncc.cli import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def test_compile_writes_cuda_and_plan(tmp_path, capsys):
    assert main(["compile", str(ROOT / "examples/gnmt_encoder.yaml"), "--target", "h100",
                 "-o", str(tmp_path)]) == 0
    files = sorted(p.name for p in tmp_path.iterdir())
    assert "plan.json" in files and any(f.startswith("recurrent_persistent_staged_lstm_h1024_f32_") for f in files)
    # The 8 layers are LSTMs of one size: one recurrent kernel serves l1 and l2, another
    # (which also writes h + input) the residual layers l3–l8. The projections are
    # cuBLASLt calls, and there is no merge: each layer reads one tensor.
    compiled = rnncc.compile(ROOT / "examples/gnmt_encoder.yaml", target="h100")
    kernels = compiled.kernels
    assert sorted(files) == sorted(["plan.json"] + [k.filename for k in kernels])
    assert [k.users for k in kernels] == [("l1", "l2"), ("l3", "l4", "l5", "l6", "l7", "l8")]
    assert all(l.projection_tile.value.math == "cublas" for l in compiled.plan.layers)
    recurrent = next(f for f in files if f.startswith("recurrent_persistent_staged_lstm_h1024_residual"))
    header = (tmp_path / recurrent).read_text().split("\n", 3)[:3]
    assert "model gnmt_encoder: layers l3, l4, l5, l6, l7, l8" in "".join(header)
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["layers"][0]["unroll"]["reason"]
    assert "wrote" in capsys.readouterr().out


def test_compile_cubin(tmp_path, nvcc):
    assert main(["compile", str(ROOT / "examples/lstm_1024.yaml"), "-o", str(tmp_path), "--cubin",
                 "--gemm", "rnncc"]) == 0
    assert len(list(tmp_path.glob("*.sm_90a.cubin"))) == 2  # projection and step kernels


def test_explain_text_and_json(capsys):
    assert main(["explain", str(ROOT / "examples/dense_skip.yaml")]) == 0
    out = capsys.readouterr().out
    assert "merge_fusion" in out and "fused" in out and "kernels:" in out
    assert main(["explain", str(ROOT / "examples/dense_skip.yaml"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "dense_skip"


def test_cli_reports_spec_errors(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: m\ninput_size: 4\nlayers: [{name: a, cell: lstn, hidden_size: 4}]\n")
    assert main(["explain", str(bad)]) == 2
    assert "layer 'a', field 'cell': got 'lstn'" in capsys.readouterr().err


def test_help_names_the_commands(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for word in ("compile", "explain", "run", "examples:"):
        assert word in out


@pytest.mark.parametrize("spec", EXAMPLES, ids=lambda p: p.stem)
def test_generated_is_up_to_date(spec):
    """generated/<example>/ holds exactly what `rnncc compile` writes today."""
    m = rnncc.compile(spec, target="h100")
    directory = ROOT / "generated" / spec.stem
    expected = {k.filename: k.header + k.source for k in m.kernels} | {"plan.json": m.plan.to_json()}
    actual = {p.name: p.read_text() for p in directory.glob("*")} if directory.exists() else {}
    fix = (f"regenerate with: rnncc compile examples/{spec.name} --target h100 "
           f"-o generated/{spec.stem}")
    assert set(actual) == set(expected), fix
    for name, text in expected.items():
        assert actual[name] == text, f"generated/{spec.stem}/{name} is stale; {fix}"


def test_runtime_checks_happen_before_any_device_work():
    m = rnncc.compile(ROOT / "examples/gru_residual.yaml", target="h100")
    with pytest.raises(rnncc.RuntimeCheckError, match=r"input: shape \(4, 2, 3\), expected \[S, B, I\] with I=512"):
        m(np.zeros((4, 2, 3), np.float16))
    with pytest.raises(rnncc.RuntimeCheckError, match=r"expected \[B, S, I\]"):
        m(np.zeros((4, 2, 3), np.float16), batch_first=True)
    with pytest.raises(rnncc.RuntimeCheckError, match="NumPy dtype float32, expected float16"):
        m(np.zeros((4, 2, 512), np.float32))
    with pytest.raises(rnncc.RuntimeCheckError, match="state: unknown layer 'g9'"):
        m(np.zeros((4, 2, 512), np.float16), {"g9": np.zeros((2, 512))})
    with pytest.raises(rnncc.RuntimeCheckError, match=r"expected S ≥ 1 and B ≥ 1"):
        m(np.zeros((0, 2, 512), np.float16))
    stack = rnncc.compile({"name": "mixed", "input_size": 8, "layers": [
        {"name": "a", "cell": "lstm", "hidden_size": 8}, {"name": "b", "cell": "gru", "hidden_size": 8}]},
        target="h100")
    with pytest.raises(rnncc.RuntimeCheckError,
                       match=r"stacked_state: the layers differ in cell, hidden size or proj_size \(a lstm H=8, b gru H=8\)"):
        stack(np.zeros((4, 2, 8), np.float32), stacked_state=True)


def test_without_pycuda_running_says_how_to_get_it():
    try:
        import pycuda.driver  # noqa: F401
        pytest.skip("PyCUDA is installed here")
    except ImportError:
        pass
    m = rnncc.compile(ROOT / "examples/lstm_1024.yaml", target="h100")
    with pytest.raises(rnncc.DeviceUnavailable, match=r"pip install 'rnncc\[cuda\]'"):
        m(np.zeros((2, 1, 1024), np.float32))


def test_compile_and_explain_import_no_pycuda():
    import subprocess
    import sys
    code = ("import sys, rnncc; m = rnncc.compile('examples/gnmt_encoder.yaml', target='h100'); "
            "m.explain(); assert len(m.kernels) == 2; "
            "assert not [k for k in sys.modules if k.startswith('pycuda')], 'pycuda imported'")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_readme_performance_table_is_generated():
    import importlib.util
    spec = importlib.util.spec_from_file_location("readme_table", ROOT / "benchmarks/readme_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index(mod.BEGIN) + len(mod.BEGIN):readme.index(mod.END)]
    assert block.strip() == mod.table().strip(), "run: python3 benchmarks/readme_table.py --update"
    block = readme[readme.index(mod.BENCH_BEGIN) + len(mod.BENCH_BEGIN):readme.index(mod.BENCH_END)]
    assert block.strip() == mod.bench_table().strip(), "run: python3 benchmarks/readme_table.py --update"
    block = readme[readme.index(mod.ABLATION_BEGIN) + len(mod.ABLATION_BEGIN):readme.index(mod.ABLATION_END)]
    assert block.strip() == mod.ablation_table().strip(), "run: python3 benchmarks/readme_table.py --update"
    block = readme[readme.index(mod.SWEEP_BEGIN) + len(mod.SWEEP_BEGIN):readme.index(mod.SWEEP_END)]
    assert block.strip() == mod.sweep_table().strip(), "run: python3 benchmarks/readme_table.py --update"


def test_compile_timing_cold_then_warm_and_kernel_resources(nvcc, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RNNCC_CACHE_DIR", str(tmp_path / "cache"))
    gnmt = str(ROOT / "examples/gnmt_encoder.yaml")
    assert main(["compile", gnmt, "-o", str(tmp_path / "out"), "--timing"]) == 0
    cold = capsys.readouterr().out
    assert "nvcc: 2 kernels (2 built, 0 from the cache)" in cold and "timing: spec → plan" in cold
    assert main(["compile", gnmt, "-o", str(tmp_path / "out"), "--timing"]) == 0
    warm = capsys.readouterr().out
    assert "nvcc: 2 kernels (0 built, 2 from the cache)" in warm
    # ptxas's report is kept beside each cubin: explain shows registers and shared memory.
    assert main(["explain", gnmt, "--json"]) == 0
    kernels = json.loads(capsys.readouterr().out)["kernels"]
    assert len(kernels) == 2 and all(k["resources"]["registers"] > 0 for k in kernels)
    assert [k["users"] for k in kernels] == [["l1", "l2"], [f"l{i}" for i in range(3, 9)]]
    # float32 at B=64: the FMA grid kernel with h staged by chunks, 256 threads a block
    assert all(k["family"] == "recurrent_persistent" and k["block"] == [256, 1, 1] for k in kernels)
    assert main(["explain", gnmt]) == 0
    assert "registers/thread" in capsys.readouterr().out


def test_ptxas_report_parsed():
    from rnncc.build import _parse_ptxas
    r = _parse_ptxas("ptxas info    : Function properties for k\n"
                     "    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
                     "ptxas info    : Used 40 registers, used 1 barriers, 1024 bytes smem\n")
    assert (r.registers, r.shared_static, r.spill_stores, r.spill_loads, r.stack_frame) == \
        (40, 1024, 4, 12, 8)


def test_explain_timeline(tmp_path):
    """--timeline prints the predicted timeline per layer and draws it (where matplotlib
    is installed)."""
    import subprocess
    import sys

    png = tmp_path / "t.png"
    out = subprocess.run([sys.executable, "-m", "rnncc.cli", "explain", "examples/gru_residual.yaml",
                          "--batch", "64", "--timeline", str(png)], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parent.parent, check=True)
    assert "timeline planned (pipelined C=" in out.stdout
    assert all(f"  {n}  " in out.stdout for n in ("g1", "g2", "g3"))
    assert png.exists() or "matplotlib not installed" in out.stderr


def test_step_kernel_is_forced_from_the_command_line(capsys):
    """--step-kernel picks the step kernel's form where a layer runs a launch a step; the
    plan says which it runs and why."""
    spec = str(ROOT / "examples/dense_skip.yaml")
    for form, says in (("rows", "a warp a unit"), ("tiles", "accumulators/thread")):
        assert main(["explain", spec, "--persistence", "none", "--batch", "3", "--seq-len", "1",
                     "--step-kernel", form, "--json"]) == 0
        plan = json.loads(capsys.readouterr().out)
        decisions = [l["step_tile"] for l in plan["layers"]]
        assert decisions and all(says in d["reason"] and d["source"] == "user" for d in decisions), decisions
