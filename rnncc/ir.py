"""The intermediate representation: an immutable, validated Model.

A Model is a DAG of nodes: the model input, recurrent layers, and merges (``sum`` for
residual connections, ``concat`` for dense skips). A layer marked ``residual`` outputs
h + its input (PyTorch's and GNMT's residual layer); its h_n is h's. A layer runs
forward in time, in reverse (``direction: reverse``, from the last step to the first),
or both (``direction: bidirectional``): the spec's layer ``l`` is then two layers of the
IR, ``l`` (forward) and ``l_reverse``, whose h fill the two halves of the one tensor
``l`` [S, B, 2H] that later layers and outputs read, as torch.nn's bidirectional layer
does (weights and final states per direction, in torch's order). It is built from
a plain dict (what a YAML file or the Python builder produce) by :meth:`Model.from_dict`,
which is the one place where a spec is validated. Every error names the layer, the
field, the value and what was expected.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any, Mapping

import networkx as nx

from .errors import SpecError

#: Cells with PyTorch's semantics. The value is the number of gates, in PyTorch's order.
CELL_GATES: dict[str, tuple[str, ...]] = {
    "lstm": ("i", "f", "g", "o"),
    "gru": ("r", "z", "n"),
    "rnn_tanh": ("h",),
    "rnn_relu": ("h",),
}
DTYPES = ("float32", "float16", "bfloat16")
MERGE_MODES = ("sum", "concat")
DIRECTIONS = ("forward", "reverse", "bidirectional")
INPUT = "input"  # the reserved name of the model input
REVERSE_SUFFIX = "_reverse"  # the backward half of a bidirectional layer (torch.nn's suffix)

_MODEL_KEYS = ("name", "dtype", "input_size", "layers", "outputs")
_LAYER_KEYS = ("name", "cell", "hidden_size", "proj_size", "bias", "input", "residual", "direction")
_OUTPUT_MERGE_KEYS = ("name", "sum", "concat")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Merge:
    """Element-wise sum or feature concatenation of earlier tensors [S, B, *]."""

    mode: str  # "sum" | "concat"
    sources: tuple[str, ...]  # names of the input or of earlier layers


@dataclass(frozen=True)
class Layer:
    """One recurrence (one direction) with PyTorch's weight layout."""

    name: str
    cell: str
    hidden_size: int
    input_size: int
    bias: bool
    input: Merge  # a single source is a Merge of mode "sum" with one source
    # The layer's output (what later layers and outputs read by its name) is h + its
    # input; its final state and its recurrence use h alone.
    residual: bool = False
    # Steps run from S−1 down to 0 (torch's backward direction): h_t reads h_{t+1}, h_n
    # is h_0.
    reverse: bool = False
    # The tensor its h fills, from feature ``column`` on: a bidirectional layer's two halves
    # fill one tensor, named by the spec's layer ("" = the layer's own name).
    tensor: str = ""
    column: int = 0
    # An LSTM with projections (torch.nn.LSTM's proj_size, LSTMP): h_t = W_hr (o ⊙ tanh c_t)
    # has proj_size features, c keeps hidden_size; 0: none.
    proj_size: int = 0

    @property
    def gates(self) -> int:
        return len(CELL_GATES[self.cell])

    @property
    def out_size(self) -> int:
        """The width of h (what the layer outputs, its recurrence reads and h_n holds):
        proj_size for a projected LSTM, else hidden_size."""
        return self.proj_size or self.hidden_size

    @property
    def tensor_name(self) -> str:
        return self.tensor or self.name


@dataclass(frozen=True)
class Output:
    """A model output: one layer's sequence, or a merge of several."""

    name: str
    merge: Merge
    size: int

    @property
    def is_layer(self) -> bool:
        return len(self.merge.sources) == 1 and self.merge.sources[0] == self.name


@dataclass(frozen=True)
class Model:
    name: str
    dtype: str
    input_size: int
    layers: tuple[Layer, ...]  # in topological (spec) order
    outputs: tuple[Output, ...]

    # ---- queries -----------------------------------------------------------------
    def layer(self, name: str) -> Layer:
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise KeyError(name)

    def size_of(self, name: str) -> int:
        """Feature size of the tensor called ``name`` (the input or a layer's output; 2H
        for a bidirectional layer's)."""
        if name == INPUT:
            return self.input_size
        return sum(l.out_size for l in self.writers(name)) or self.layer(name).out_size

    def writers(self, tensor: str) -> tuple[Layer, ...]:
        """The layers whose h fill ``tensor``: one, or a bidirectional layer's two halves."""
        return tuple(l for l in self.layers if l.tensor_name == tensor)

    def direction(self, layer: Layer) -> str:
        """The spec's direction of the layer that ``layer`` is (part of)."""
        if len(self.writers(layer.tensor_name)) == 2:
            return "bidirectional"
        return "reverse" if layer.reverse else "forward"

    @property
    def graph(self) -> nx.DiGraph:
        """The model as a frozen networkx DiGraph. Nodes: ``input``, each layer, one merge
        node per multi-source input (``<layer>.input``) and per merged output. Node
        attribute ``node`` holds the Layer/Merge/Output; edges carry ``size``."""
        g = nx.DiGraph()
        g.add_node(INPUT, kind="input", size=self.input_size)
        for layer in self.layers:
            # Edges to later nodes leave a tensor's name: a bidirectional layer's backward
            # half is a node with inputs only.
            g.add_node(layer.name, kind="layer", node=layer)
            _add_merge_edges(g, self, f"{layer.name}.input", layer.input, layer.name)
        for out in self.outputs:
            if not out.is_layer:
                g.add_node(out.name, kind="output", node=out)
                _add_merge_edges(g, self, f"{out.name}.merge", out.merge, out.name)
        return nx.freeze(g)

    def to_dict(self) -> dict[str, Any]:
        """The spec as a plain dict; ``Model.from_dict(m.to_dict()) == m``."""

        def merge_spec(m: Merge) -> Any:
            return m.sources[0] if len(m.sources) == 1 else {m.mode: list(m.sources)}

        outputs = []
        for out in self.outputs:
            if out.is_layer:
                outputs.append(out.name)
            else:
                outputs.append({"name": out.name, out.merge.mode: list(out.merge.sources)})
        layers = []
        for l in self.layers:
            if l.tensor_name != l.name:
                continue  # a bidirectional layer's backward half: its forward half says it
            direction = self.direction(l)
            layers.append({"name": l.name, "cell": l.cell, "hidden_size": l.hidden_size}
                          | ({"proj_size": l.proj_size} if l.proj_size else {})
                          | {"bias": l.bias, "input": merge_spec(l.input)}
                          | ({"residual": True} if l.residual else {})
                          | ({"direction": direction} if direction != "forward" else {}))
        return {
            "name": self.name,
            "dtype": self.dtype,
            "input_size": self.input_size,
            "layers": layers,
            "outputs": outputs,
        }

    # ---- construction and validation ----------------------------------------------
    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> "Model":
        if not isinstance(spec, Mapping):
            raise SpecError(f"model: expected a mapping with keys {', '.join(_MODEL_KEYS)}, "
                            f"got {type(spec).__name__}")
        _check_keys("model", spec, _MODEL_KEYS)
        for key in ("name", "input_size", "layers"):
            if key not in spec:
                raise SpecError(f"model, field '{key}': missing (required)")
        name = _check_name("model", "name", spec["name"])
        dtype = _normalise_dtype(spec.get("dtype", "float32"))
        input_size = _check_size("model", "input_size", spec["input_size"])
        raw_layers = spec["layers"]
        if not isinstance(raw_layers, list) or not raw_layers:
            raise SpecError(f"model, field 'layers': got {raw_layers!r}, "
                            "expected a non-empty list of layers")

        # First pass: names and per-layer fields, so references can be checked against
        # the whole set of names (to tell 'unknown' from 'defined later' and cycles).
        parsed: list[dict[str, Any]] = []
        seen: set[str] = set()
        for index, raw in enumerate(raw_layers):
            where = f"layers[{index}]"
            if not isinstance(raw, Mapping):
                raise SpecError(f"{where}: expected a mapping, got {raw!r}")
            _check_keys(where, raw, _LAYER_KEYS)
            if "name" not in raw:
                raise SpecError(f"{where}, field 'name': missing (required)")
            lname = _check_name(where, "name", raw["name"])
            where = f"layer '{lname}'"
            if lname == INPUT:
                raise SpecError(f"{where}, field 'name': '{INPUT}' is reserved for the model input")
            if lname in seen:
                raise SpecError(f"{where}, field 'name': duplicate name '{lname}', "
                                "expected every layer name to be unique")
            seen.add(lname)
            for key in ("cell", "hidden_size"):
                if key not in raw:
                    raise SpecError(f"{where}, field '{key}': missing (required)")
            cell = raw["cell"]
            if cell not in CELL_GATES:
                raise SpecError(f"{where}, field 'cell': got {cell!r}, expected one of "
                                f"{', '.join(CELL_GATES)}")
            hidden = _check_size(where, "hidden_size", raw["hidden_size"])
            bias = raw.get("bias", True)
            if not isinstance(bias, bool):
                raise SpecError(f"{where}, field 'bias': got {bias!r}, expected true or false")
            residual = raw.get("residual", False)
            if not isinstance(residual, bool):
                raise SpecError(f"{where}, field 'residual': got {residual!r}, expected true or false")
            direction = raw.get("direction", "forward")
            if direction not in DIRECTIONS:
                raise SpecError(f"{where}, field 'direction': got {direction!r}, expected one of "
                                f"{', '.join(DIRECTIONS)}")
            if direction == "bidirectional" and residual:
                raise SpecError(f"{where}, field 'residual': not supported with direction: "
                                "bidirectional (each half would add half of the input); expected "
                                "residual: false, or a sum merge in the next layer")
            proj = _check_proj_size(where, raw.get("proj_size", 0), cell, hidden, residual)
            previous = parsed[-1]["name"] if parsed else INPUT
            merge = _parse_merge(where, "input", raw.get("input", previous))
            parsed.append(dict(name=lname, cell=cell, hidden=hidden, bias=bias, merge=merge,
                               residual=residual, direction=direction, proj=proj))
        halves = {p["name"] + REVERSE_SUFFIX: p["name"] for p in parsed
                  if p["direction"] == "bidirectional"}
        for p in parsed:
            if p["name"] in halves:
                raise SpecError(f"layer '{p['name']}', field 'name': taken by the backward half of "
                                f"the bidirectional layer '{halves[p['name']]}', expected another name")
            for src in p["merge"].sources:
                if src in halves:
                    raise SpecError(f"layer '{p['name']}', field 'input': '{src}' is the backward half "
                                    f"of '{halves[src]}', not a tensor of its own; expected "
                                    f"'{halves[src]}' (both directions, {halves[src]}[..., H:] the backward)")

        order = {p["name"]: i for i, p in enumerate(parsed)}
        _check_references(parsed, order)

        sizes: dict[str, int] = {INPUT: input_size}
        layers = []
        for p in parsed:
            where = f"layer '{p['name']}'"
            in_size = _merged_size(where, "input", p["merge"], sizes)
            if p["residual"] and in_size != p["hidden"]:
                raise SpecError(f"{where}, field 'residual': the output h + input needs the input "
                                f"size ({in_size}) equal to hidden_size ({p['hidden']}); expected "
                                "equal sizes, or residual: false")
            common = dict(cell=p["cell"], hidden_size=p["hidden"], input_size=in_size,
                          bias=p["bias"], input=p["merge"], residual=p["residual"],
                          proj_size=p["proj"])
            out_size = p["proj"] or p["hidden"]
            if p["direction"] == "bidirectional":
                layers += [Layer(p["name"], **common, tensor=p["name"]),
                           Layer(p["name"] + REVERSE_SUFFIX, **common, reverse=True,
                                 tensor=p["name"], column=out_size)]
                sizes[p["name"]] = 2 * out_size
            else:
                layers.append(Layer(p["name"], **common, reverse=p["direction"] == "reverse"))
                sizes[p["name"]] = out_size

        outputs = _parse_outputs(spec.get("outputs", [parsed[-1]["name"]]), sizes)
        return cls(name, dtype, input_size, tuple(layers), outputs)


# ---- helpers ---------------------------------------------------------------------------

def _check_keys(where: str, raw: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    for key in raw:
        if key not in allowed:
            hint = difflib.get_close_matches(str(key), allowed, n=1)
            did_you_mean = f" (did you mean '{hint[0]}'?)" if hint else ""
            raise SpecError(f"{where}: unknown key '{key}'{did_you_mean}, expected only "
                            f"{', '.join(allowed)}")


def _check_name(where: str, field: str, value: Any) -> str:
    if not isinstance(value, str) or not _NAME_RE.match(value):
        raise SpecError(f"{where}, field '{field}': got {value!r}, expected an identifier "
                        "(letters, digits, '_'; not starting with a digit)")
    return value


def _check_size(where: str, field: str, value: Any) -> int:
    # bool is an int in Python; `hidden_size: true` is a typo, not 1.
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SpecError(f"{where}, field '{field}': got {value!r}, expected a positive integer")
    return value


_DTYPE_ALIASES = {"fp32": "float32", "float": "float32", "fp16": "float16", "half": "float16",
                  "bf16": "bfloat16"}


def _check_proj_size(where: str, value: Any, cell: str, hidden: int, residual: bool) -> int:
    """torch.nn.LSTM's rule: 0 (none) or 0 < proj_size < hidden_size, LSTM only."""
    if value == 0 and not isinstance(value, bool):
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < hidden:
        raise SpecError(f"{where}, field 'proj_size': got {value!r}, expected 0 (no projection) "
                        f"or an integer in [1, hidden_size={hidden}) as torch.nn.LSTM takes")
    if cell != "lstm":
        raise SpecError(f"{where}, field 'proj_size': a projection of h is LSTM's (torch.nn.LSTM's "
                        f"proj_size), got cell {cell!r}; expected cell: lstm, or no proj_size")
    if residual:
        raise SpecError(f"{where}, field 'residual': not supported with proj_size (torch.nn has no "
                        "such layer); expected residual: false, or a sum merge in the next layer")
    return value


def _normalise_dtype(value: Any) -> str:
    dtype = _DTYPE_ALIASES.get(value, value) if isinstance(value, str) else value
    if dtype not in DTYPES:
        raise SpecError(f"model, field 'dtype': got {value!r}, expected one of {', '.join(DTYPES)}")
    return dtype


def _parse_merge(where: str, field: str, value: Any) -> Merge:
    if isinstance(value, str):
        return Merge("sum", (value,))
    if isinstance(value, Mapping) and len(value) == 1:
        (mode, sources), = value.items()
        if mode not in MERGE_MODES:
            raise SpecError(f"{where}, field '{field}': unknown merge {mode!r}, expected "
                            f"{{sum: [...]}} or {{concat: [...]}}")
        if (not isinstance(sources, list) or len(sources) < 2
                or not all(isinstance(s, str) for s in sources)):
            raise SpecError(f"{where}, field '{field}': {mode} of {sources!r}, expected a list "
                            "of at least two layer names (or 'input')")
        return Merge(mode, tuple(sources))
    raise SpecError(f"{where}, field '{field}': got {value!r}, expected a layer name, "
                    f"'{INPUT}', {{sum: [names]}} or {{concat: [names]}}")


def _check_references(parsed: list[dict[str, Any]], order: dict[str, int]) -> None:
    graph = nx.DiGraph()
    for p in parsed:
        for src in p["merge"].sources:
            if src != INPUT and src not in order:
                hint = difflib.get_close_matches(src, [*order, INPUT], n=1)
                did_you_mean = f" (did you mean '{hint[0]}'?)" if hint else ""
                raise SpecError(f"layer '{p['name']}', field 'input': unknown layer "
                                f"'{src}'{did_you_mean}, expected '{INPUT}' or an earlier layer")
            graph.add_edge(src, p["name"])
    try:
        cycle = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        cycle = None
    if cycle:
        path = " -> ".join([a for a, _ in cycle] + [cycle[0][0]])
        raise SpecError(f"layer '{cycle[0][1]}', field 'input': the inputs form a cycle "
                        f"({path}), expected a DAG")
    for p in parsed:
        for src in p["merge"].sources:
            if src != INPUT and order[src] >= order[p["name"]]:
                raise SpecError(f"layer '{p['name']}', field 'input': '{src}' is defined later, "
                                "expected layers listed in order (each input defined above it)")


def _merged_size(where: str, field: str, merge: Merge, sizes: dict[str, int]) -> int:
    src_sizes = [sizes[s] for s in merge.sources]
    if merge.mode == "concat":
        return sum(src_sizes)
    if len(set(src_sizes)) > 1:
        listed = ", ".join(f"{s}={n}" for s, n in zip(merge.sources, src_sizes))
        raise SpecError(f"{where}, field '{field}': sum of mismatched sizes ({listed}), "
                        "expected equal feature sizes (use concat to join different sizes)")
    return src_sizes[0]


def _parse_outputs(raw: Any, sizes: dict[str, int]) -> tuple[Output, ...]:
    if isinstance(raw, (str, Mapping)):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise SpecError(f"model, field 'outputs': got {raw!r}, expected a non-empty list of "
                        "layer names or {name: ..., sum|concat: [...]} entries")
    outputs: list[Output] = []
    for index, item in enumerate(raw):
        where = f"outputs[{index}]"
        if isinstance(item, str):
            if item not in sizes or item == INPUT:
                raise SpecError(f"{where}: unknown layer '{item}', expected a layer name")
            outputs.append(Output(item, Merge("sum", (item,)), sizes[item]))
            continue
        if not isinstance(item, Mapping):
            raise SpecError(f"{where}: got {item!r}, expected a layer name or a merge")
        _check_keys(where, item, _OUTPUT_MERGE_KEYS)
        name = _check_name(where, "name", item.get("name", f"output{index}"))
        modes = {k: v for k, v in item.items() if k != "name"}
        merge = _parse_merge(where, "merge", modes)
        for src in merge.sources:
            if src not in sizes:
                raise SpecError(f"{where}, field '{merge.mode}': unknown layer '{src}', "
                                f"expected '{INPUT}' or a layer name")
        if name in sizes:
            raise SpecError(f"{where}, field 'name': '{name}' is already a layer or the input, "
                            "expected a new name for a merged output")
        outputs.append(Output(name, merge, _merged_size(where, merge.mode, merge, sizes)))
    names = [o.name for o in outputs]
    for name in names:
        if names.count(name) > 1:
            raise SpecError(f"model, field 'outputs': duplicate output '{name}'")
    return tuple(outputs)


def _add_merge_edges(g: nx.DiGraph, model: Model, merge_node: str, merge: Merge,
                     consumer: str) -> None:
    if len(merge.sources) == 1:
        g.add_edge(merge.sources[0], consumer, size=model.size_of(merge.sources[0]))
        return
    g.add_node(merge_node, kind="merge", node=merge)
    for src in merge.sources:
        g.add_edge(src, merge_node, size=model.size_of(src))
    g.add_edge(merge_node, consumer)
