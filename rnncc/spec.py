"""Ways to describe a model: a YAML file, a dict, or the Python builder.

All three end in :meth:`rnncc.ir.Model.from_dict`, the single place a spec is validated.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Union

import yaml

from .errors import SpecError
from .ir import Model

SpecLike = Union[Model, Mapping[str, Any], str, os.PathLike]


def load(spec: SpecLike) -> Model:
    """A Model from a Model (returned as is), a dict, a path to a YAML file, or YAML text."""
    if isinstance(spec, Model):
        return spec
    if isinstance(spec, Mapping):
        return Model.from_dict(spec)
    if isinstance(spec, (str, os.PathLike)):
        text, origin = _read_text(spec)
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(exc, "problem", None) or str(exc)
            raise SpecError(f"{origin}: malformed YAML{at}: {problem}") from None
        if not isinstance(data, Mapping):
            raise SpecError(f"{origin}: expected a YAML mapping with keys name, dtype, "
                            f"input_size, layers, outputs; got {type(data).__name__}")
        return Model.from_dict(data)
    raise SpecError(f"spec: got {type(spec).__name__}, expected a Model, a dict, "
                    "a YAML path or YAML text")


def _read_text(spec: str | os.PathLike) -> tuple[str, str]:
    text = os.fspath(spec)
    if "\n" not in text and (text.endswith((".yaml", ".yml")) or Path(text).exists()):
        path = Path(text)
        if not path.exists():
            raise SpecError(f"{path}: no such spec file")
        return path.read_text(), str(path)
    return text, "<yaml text>"


@dataclass
class ModelBuilder:
    """Build a spec in Python (this example is run by the tests)::

        b = ModelBuilder("tagger", input_size=256)
        b.layer("l1", "lstm", 256)
        b.layer("l2", "lstm", 256, input=Sum("l1", "input"))  # a sum needs equal sizes
        b.layer("l3", "gru", 128, input=Concat("l1", "l2"))   # a concat takes any
        model = b.build()
    """

    name: str
    input_size: int
    dtype: str = "float32"
    _layers: list[dict[str, Any]] = field(default_factory=list)
    _outputs: list[Any] = field(default_factory=list)

    def layer(self, name: str, cell: str, hidden_size: int, *, bias: bool = True,
              input: "str | Sum | Concat | None" = None,
              residual: bool = False, direction: str = "forward",
              proj_size: int = 0) -> "ModelBuilder":
        """A layer; ``residual``: its output is h + its input (equal sizes); ``direction``:
        forward, reverse (last step first) or bidirectional (output [forward, backward]);
        ``proj_size`` (LSTM): h = W_hr (o ⊙ tanh c), proj_size features."""
        entry: dict[str, Any] = {"name": name, "cell": cell, "hidden_size": hidden_size,
                                 "bias": bias}
        if proj_size:
            entry["proj_size"] = proj_size
        if residual:
            entry["residual"] = residual
        if direction != "forward":
            entry["direction"] = direction
        if input is not None:
            entry["input"] = input.to_spec() if isinstance(input, (Sum, Concat)) else input
        self._layers.append(entry)
        return self

    def output(self, source: "str | Sum | Concat", name: str | None = None) -> "ModelBuilder":
        if isinstance(source, (Sum, Concat)):
            entry = dict(source.to_spec())
            if name is not None:
                entry["name"] = name
            self._outputs.append(entry)
        else:
            self._outputs.append(source)
        return self

    def build(self) -> Model:
        spec: dict[str, Any] = {"name": self.name, "dtype": self.dtype,
                                "input_size": self.input_size, "layers": self._layers}
        if self._outputs:
            spec["outputs"] = self._outputs
        return Model.from_dict(spec)


class Sum:
    """Element-wise sum of earlier tensors (a residual connection)."""

    def __init__(self, *sources: str):
        self.sources = list(sources)

    def to_spec(self) -> dict[str, list[str]]:
        return {"sum": self.sources}


class Concat:
    """Concatenation of earlier tensors along features (a dense skip connection)."""

    def __init__(self, *sources: str):
        self.sources = list(sources)

    def to_spec(self) -> dict[str, list[str]]:
        return {"concat": self.sources}
