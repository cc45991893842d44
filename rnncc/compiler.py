"""``rnncc.compile``: a spec to a :class:`~rnncc.runtime.CompiledModel`, the one entry point
that ties the pipeline, autotuning and the runtime together (so none of them imports it)."""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any, Mapping

from . import driver, pipeline, spec as spec_mod, target as target_mod
from .errors import SpecError
from .plan import CompileOptions
from .runtime import CompiledModel


class PlannedForPresetWarning(UserWarning):
    """``compile`` found no GPU and planned for the h100 preset."""


def _target(target: str | target_mod.Target | None) -> target_mod.Target:
    if target in (None, "auto") and driver.gpu_count() == 0:
        warnings.warn("rnncc.compile: no GPU here, so the model is planned for the h100 preset; "
                      "pass target='h100' (or another preset) to say so and silence this",
                      PlannedForPresetWarning, stacklevel=3)
        return target_mod.PRESETS["h100"]
    return target_mod.get(target)


def compile(spec: spec_mod.SpecLike, target: str | target_mod.Target | None = None, *,
            weights: Mapping[str, Any] | None = None, options: CompileOptions | None = None,
            seed: int = 0, autotune: bool = False, progress=None, **option_kwargs) -> CompiledModel:
    """Compile a spec (YAML path or text, dict, or Model) for ``target``.

    ``target``: a preset name (``h100``, ``h200``, ``a100``), ``"device"``, or ``None``
    for the GPU present (the h100 preset, with a warning, on a machine without one).
    ``weights``: a dict named like PyTorch's per layer (``l0.weight_ih`` …); by default
    PyTorch-style random weights from ``seed``. Option keywords (``seq_len``, ``batch``,
    ``layout``, ``unroll``, ``persistence``, ``precision``, ``gemm``, ``schedule``,
    ``step_kernel``, ``launches``, ``workspace_budget``; the choices are ``plan.OPTION_CHOICES``) build
    :class:`CompileOptions`; ``seq_len`` and ``batch`` are hints: a call of another
    shape class gets a plan of its own (see ``CompiledModel.variant``).
    Nothing here touches a GPU, unless ``autotune``: then the cost model's best candidates
    of each layer are timed on the GPU present (``target`` must be it) and the fastest
    kept, cached on disk (see :mod:`rnncc.autotune`); ``progress(message)`` hears of each
    timing.
    """
    model = spec_mod.load(spec)
    tgt = _target(target)
    if options is None:
        options = CompileOptions(**option_kwargs)
    elif option_kwargs:
        raise SpecError("compile: pass either options= or option keywords, not both")
    plan, kernels = pipeline.plan_and_render(model, tgt, options)
    if autotune:
        from . import autotune as autotune_mod
        if target not in (None, "auto", "device") and not (
                isinstance(target, target_mod.Target) and target == target_mod.get("device")):
            raise SpecError(f"compile: autotune measures on the GPU present; got target={target!r}, "
                            "expected target='device'")
        options = replace(options, tuned=autotune_mod.tune(model, plan, tgt, progress))
        plan, kernels = pipeline.plan_and_render(model, tgt, options)
    return CompiledModel(model, plan, tgt, kernels, weights, seed)
