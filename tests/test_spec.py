"""Spec parsing and validation: one test per error, each naming layer, field and value."""

from __future__ import annotations

import pytest

import rnncc
from rnncc import Concat, ModelBuilder, SpecError, Sum
from rnncc.ir import Model


def spec(**overrides):
    base = {"name": "m", "dtype": "float32", "input_size": 8,
            "layers": [{"name": "a", "cell": "lstm", "hidden_size": 16},
                       {"name": "b", "cell": "gru", "hidden_size": 16}]}
    base.update(overrides)
    return base


def layers(*extra, first=None):
    out = [first or {"name": "a", "cell": "lstm", "hidden_size": 16}]
    return out + list(extra)


def test_defaults():
    m = rnncc.load(spec())
    assert m.layers[1].input.sources == ("a",) and m.layers[0].input.sources == ("input",)
    assert m.layers[0].bias is True and m.layers[0].input_size == 8
    assert [o.name for o in m.outputs] == ["b"]
    assert Model.from_dict(m.to_dict()) == m


def test_graph_is_a_frozen_dag_with_merge_nodes():
    m = rnncc.load(spec(layers=layers({"name": "b", "cell": "gru", "hidden_size": 16,
                                       "input": {"sum": ["a", "a"]}}),
                        outputs=[{"name": "cat", "concat": ["a", "b", "input"]}]))
    g = m.graph
    assert g.nodes["b.input"]["kind"] == "merge" and g.nodes["cat"]["kind"] == "output"
    assert ("a", "b.input") in g.edges and ("b.input", "b") in g.edges
    with pytest.raises(Exception):
        g.add_node("x")  # frozen
    assert m.outputs[0].size == 16 + 16 + 8


@pytest.mark.parametrize("bad,match", [
    ({"cell": "lstmm"}, r"layer 'a', field 'cell': got 'lstmm', expected one of lstm, gru, rnn_tanh, rnn_relu"),
    ({"hidden_size": 0}, r"layer 'a', field 'hidden_size': got 0, expected a positive integer"),
    ({"hidden_size": -3}, r"layer 'a', field 'hidden_size': got -3"),
    ({"hidden_size": 2.5}, r"layer 'a', field 'hidden_size': got 2.5, expected a positive integer"),
    ({"hidden_size": True}, r"layer 'a', field 'hidden_size': got True"),
    ({"hidden_size": "64"}, r"layer 'a', field 'hidden_size': got '64'"),
    ({"bias": "yes"}, r"layer 'a', field 'bias': got 'yes', expected true or false"),
    ({"hiden_size": 3}, r"layers\[0\]: unknown key 'hiden_size' \(did you mean 'hidden_size'\?\)"),
    ({"input": "nope"}, r"layer 'a', field 'input': unknown layer 'nope'"),
    ({"input": {"add": ["input", "input"]}}, r"layer 'a', field 'input': unknown merge 'add'"),
    ({"input": {"sum": ["input"]}}, r"layer 'a', field 'input': sum of \['input'\], expected a list of at least two"),
    ({"input": ["input", "input"]}, r"layer 'a', field 'input': got \['input', 'input'\], expected a layer name"),
    ({"residual": "yes"}, r"layer 'a', field 'residual': got 'yes', expected true or false"),
    ({"residual": True}, r"layer 'a', field 'residual': the output h \+ input needs the input size "
                         r"\(8\) equal to hidden_size \(16\)"),
    ({"direction": "backward"}, r"layer 'a', field 'direction': got 'backward', expected one of "
                                r"forward, reverse, bidirectional"),
    ({"direction": "bidirectional", "hidden_size": 8, "residual": True},
     r"layer 'a', field 'residual': not supported with direction: bidirectional"),
    ({"proj_size": 16}, r"layer 'a', field 'proj_size': got 16, expected 0 \(no projection\) or an "
                        r"integer in \[1, hidden_size=16\)"),
    ({"proj_size": -1}, r"layer 'a', field 'proj_size': got -1"),
    ({"proj_size": True}, r"layer 'a', field 'proj_size': got True"),
    ({"cell": "gru", "proj_size": 4}, r"layer 'a', field 'proj_size': a projection of h is LSTM's"),
    ({"proj_size": 8, "residual": True}, r"layer 'a', field 'residual': not supported with proj_size"),
])
def test_layer_errors(bad, match):
    first = {"name": "a", "cell": "lstm", "hidden_size": 16} | bad
    if "hiden_size" in bad:
        first.pop("hidden_size")
        first = {"name": "a", "cell": "lstm", "hidden_size": 16, "hiden_size": 3}
    with pytest.raises(SpecError, match=match):
        rnncc.load(spec(layers=[first]))


def test_unknown_dtype():
    with pytest.raises(SpecError, match=r"model, field 'dtype': got 'float8', expected one of float32, float16, bfloat16"):
        rnncc.load(spec(dtype="float8"))


def test_dtype_aliases():
    assert rnncc.load(spec(dtype="bf16")).dtype == "bfloat16"


def test_input_size_not_positive():
    with pytest.raises(SpecError, match=r"model, field 'input_size': got 0, expected a positive integer"):
        rnncc.load(spec(input_size=0))


def test_unknown_model_key():
    with pytest.raises(SpecError, match=r"model: unknown key 'layer' \(did you mean 'layers'\?\)"):
        rnncc.load(spec(layer=[]))


def test_missing_required_field():
    with pytest.raises(SpecError, match=r"layer 'a', field 'hidden_size': missing"):
        rnncc.load(spec(layers=[{"name": "a", "cell": "lstm"}]))


def test_duplicate_names():
    with pytest.raises(SpecError, match=r"layer 'a', field 'name': duplicate name 'a'"):
        rnncc.load(spec(layers=layers({"name": "a", "cell": "gru", "hidden_size": 4})))


def test_reserved_name():
    with pytest.raises(SpecError, match=r"'input' is reserved"):
        rnncc.load(spec(layers=[{"name": "input", "cell": "gru", "hidden_size": 4}]))


def test_bad_name():
    with pytest.raises(SpecError, match=r"layers\[0\], field 'name': got '2x', expected an identifier"):
        rnncc.load(spec(layers=[{"name": "2x", "cell": "gru", "hidden_size": 4}]))


def test_later_layer_referenced():
    with pytest.raises(SpecError, match=r"layer 'a', field 'input': 'b' is defined later"):
        rnncc.load(spec(layers=[{"name": "a", "cell": "lstm", "hidden_size": 4, "input": "b"},
                                {"name": "b", "cell": "lstm", "hidden_size": 4, "input": "input"}]))


def test_cycle():
    with pytest.raises(SpecError, match=r"the inputs form a cycle \(.*a.*b.*\), expected a DAG"):
        rnncc.load(spec(layers=[{"name": "a", "cell": "lstm", "hidden_size": 4, "input": "b"},
                                {"name": "b", "cell": "lstm", "hidden_size": 4, "input": "a"}]))


def test_self_cycle():
    with pytest.raises(SpecError, match=r"layer 'a', field 'input': the inputs form a cycle \(a -> a\)"):
        rnncc.load(spec(layers=[{"name": "a", "cell": "lstm", "hidden_size": 4, "input": "a"}]))


def test_sum_of_mismatched_sizes():
    with pytest.raises(SpecError, match=r"layer 'b', field 'input': sum of mismatched sizes \(a=16, input=8\)"):
        rnncc.load(spec(layers=layers({"name": "b", "cell": "gru", "hidden_size": 4,
                                       "input": {"sum": ["a", "input"]}})))


def test_concat_sizes_add_up():
    m = rnncc.load(spec(layers=layers({"name": "b", "cell": "gru", "hidden_size": 4,
                                       "input": {"concat": ["a", "input"]}})))
    assert m.layers[1].input_size == 24


@pytest.mark.parametrize("outputs,match", [
    (["zz"], r"outputs\[0\]: unknown layer 'zz'"),
    ([{"name": "o", "sum": ["a", "input"]}], r"outputs\[0\], field 'sum': sum of mismatched sizes"),
    ([{"name": "a", "concat": ["a", "b"]}], r"outputs\[0\], field 'name': 'a' is already a layer"),
    (["b", "b"], r"duplicate output 'b'"),
    ([{"name": "o", "cat": ["a", "b"]}], r"outputs\[0\]: unknown key 'cat'"),
])
def test_output_errors(outputs, match):
    with pytest.raises(SpecError, match=match):
        rnncc.load(spec(outputs=outputs))


def test_malformed_yaml(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: m\nlayers: [\n  {name: a, cell: lstm\n")
    with pytest.raises(SpecError, match=r"bad.yaml: malformed YAML at line \d+, column \d+"):
        rnncc.load(path)


def test_yaml_not_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(SpecError, match=r"expected a YAML mapping"):
        rnncc.load(path)


def test_missing_file():
    with pytest.raises(SpecError, match=r"no such spec file"):
        rnncc.load("does/not/exist.yaml")


def test_yaml_and_builder_agree(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("""
name: m
input_size: 8
layers:
  - {name: a, cell: lstm, hidden_size: 8}
  - {name: b, cell: gru, hidden_size: 8, input: {sum: [a, input]}}
outputs: [b, {name: cat, concat: [a, b]}]
""")
    built = (ModelBuilder("m", input_size=8)
             .layer("a", "lstm", 8).layer("b", "gru", 8, input=Sum("a", "input"))
             .output("b").output(Concat("a", "b"), name="cat").build())
    assert rnncc.load(path) == built == rnncc.load(path.read_text())


def test_model_builder_docstring_example_runs():
    import re

    from rnncc.spec import Concat, ModelBuilder, Sum
    doc = ModelBuilder.__doc__
    code = "\n".join(line[8:] for line in doc.split("::", 1)[1].splitlines() if line.strip())
    scope = {"ModelBuilder": ModelBuilder, "Sum": Sum, "Concat": Concat}
    exec(code, scope)
    assert [l.name for l in scope["model"].layers] == ["l1", "l2", "l3"]
    assert re.search(r"input=Sum", code)


def test_residual_layers_round_trip_and_build():
    m = rnncc.load(spec(input_size=32, layers=[{"name": "a", "cell": "lstm", "hidden_size": 32, "residual": True},
                                {"name": "b", "cell": "gru", "hidden_size": 32}]))
    assert [l.residual for l in m.layers] == [True, False]
    assert m.to_dict()["layers"][0]["residual"] is True and "residual" not in m.to_dict()["layers"][1]
    assert rnncc.ir.Model.from_dict(m.to_dict()) == m
    b = ModelBuilder("m", input_size=32)
    b.layer("a", "lstm", 32, residual=True).layer("b", "gru", 32)
    assert b.build().layers == m.layers


def test_bidirectional_and_reverse_layers():
    """A bidirectional layer is two layers of the IR (l, l_reverse) filling one tensor l of
    2H features, which later layers and outputs read; the spec round-trips."""
    m = rnncc.load(spec(input_size=8, layers=[
        {"name": "a", "cell": "lstm", "hidden_size": 16, "direction": "bidirectional"},
        {"name": "b", "cell": "gru", "hidden_size": 4, "direction": "reverse"},
        {"name": "c", "cell": "gru", "hidden_size": 4, "input": {"concat": ["a", "b"]}}],
        outputs=["a", "c"]))
    assert [(l.name, l.reverse, l.tensor_name, l.column) for l in m.layers] == [
        ("a", False, "a", 0), ("a_reverse", True, "a", 16), ("b", True, "b", 0), ("c", False, "c", 0)]
    assert m.size_of("a") == 32 and m.layers[2].input_size == 32 and m.layers[3].input_size == 36
    assert [o.size for o in m.outputs] == [32, 4] and m.outputs[0].is_layer
    assert m.direction(m.layers[1]) == "bidirectional" and m.direction(m.layers[2]) == "reverse"
    d = m.to_dict()
    assert [l.get("direction") for l in d["layers"]] == ["bidirectional", "reverse", None]
    assert rnncc.ir.Model.from_dict(d) == m
    b = ModelBuilder("m", input_size=8)
    b.layer("a", "lstm", 16, direction="bidirectional").layer("b", "gru", 4, direction="reverse")
    b.layer("c", "gru", 4, input=Concat("a", "b")).output("a").output("c")
    assert b.build() == m
    with pytest.raises(SpecError, match=r"'a_reverse' is the backward half of 'a', not a tensor"):
        rnncc.load(spec(layers=[{"name": "a", "cell": "lstm", "hidden_size": 4, "direction": "bidirectional"},
                                {"name": "b", "cell": "lstm", "hidden_size": 4, "input": "a_reverse"}]))
    with pytest.raises(SpecError, match=r"layer 'a_reverse', field 'name': taken by the backward half"):
        rnncc.load(spec(layers=[{"name": "a", "cell": "lstm", "hidden_size": 4, "direction": "bidirectional"},
                                {"name": "a_reverse", "cell": "lstm", "hidden_size": 4}]))


def test_projected_layers_are_proj_size_wide():
    """An LSTM with proj_size outputs P features (2P bidirectional): the next layer's input,
    the outputs and a concat see h's width, and the spec round-trips."""
    b = rnncc.ModelBuilder("lstmp", input_size=8)
    b.layer("a", "lstm", 32, proj_size=12, direction="bidirectional")
    b.layer("b", "lstm", 16, proj_size=5, input=rnncc.Concat("a", "input"))
    b.output("a").output(rnncc.Concat("a", "b"), name="both")
    m = b.build()
    a, a_rev, b_ = m.layers
    assert (a.out_size, a_rev.column, b_.input_size, b_.out_size) == (12, 12, 24 + 8, 5)
    assert [o.size for o in m.outputs] == [24, 29]
    assert Model.from_dict(m.to_dict()) == m and m.to_dict()["layers"][0]["proj_size"] == 12
