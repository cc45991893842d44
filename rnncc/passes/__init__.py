"""Passes: pure functions ``(model, plan, target) -> plan`` run in a fixed order.

Each pass fills one kind of decision in every LayerPlan and gives its reason. The
driver :func:`build_plan` is the only place the order is written.
"""

from __future__ import annotations

from ..ir import Model
from ..plan import CompileOptions, LayerPlan, OutputPlan, Plan, Source
from ..target import Target
from .backward import plan_backward
from .fusion import plan_projection_fusion
from .gates import plan_gate_concat
from .geometry import plan_projection_tile, plan_step_tile
from .layout import plan_layout
from .memory import check_memory
from .merges import plan_merges
from .persistence import plan_persistence
from .schedule import plan_schedule
from .precision import plan_precision
from .shapes import plan_shapes
from .unroll import plan_unroll
from .workspace import plan_workspace

PASSES = (plan_precision, plan_gate_concat, plan_unroll, plan_layout, plan_projection_tile, plan_step_tile,
          plan_persistence, plan_merges, plan_schedule, plan_projection_fusion, plan_workspace, plan_shapes, plan_backward)


def initial_plan(model: Model, target: Target, options: CompileOptions) -> Plan:
    """The Plan with the model's facts and no decisions yet."""
    target.check_dtype(model.dtype)
    outputs = {o.name for o in model.outputs}

    def sources(merge) -> tuple[Source, ...]:
        out, offset = [], 0
        for name in merge.sources:
            size = model.size_of(name)
            out.append(Source(name, size, offset if merge.mode == "concat" else 0))
            offset += size
        return tuple(out)

    layers = tuple(
        LayerPlan(name=l.name, cell=l.cell, gates=l.gates, hidden_size=l.hidden_size,
                  input_size=l.input_size, bias=l.bias, merge=l.input.mode,
                  sources=sources(l.input), is_output=l.tensor_name in outputs,
                  residual=l.residual, reverse=l.reverse, tensor=l.tensor, column=l.column,
                  tensor_size=model.size_of(l.tensor_name), proj_size=l.proj_size)
        for l in model.layers)
    outs = tuple(OutputPlan(o.name, o.size, o.merge.mode, sources(o.merge))
                 for o in model.outputs)
    return Plan(model=model.name, dtype=model.dtype, target=target.name, arch=target.arch,
                options=options, layers=layers, outputs=outs)


def build_plan(model: Model, target: Target, options: CompileOptions | None = None) -> Plan:
    options = options or CompileOptions()
    check_memory(model, target, options)
    plan = initial_plan(model, target, options)
    for run_pass in PASSES:
        plan = run_pass(model, plan, target)
    return plan


__all__ = ["build_plan", "initial_plan", "PASSES", "LayerPlan", "OutputPlan"]
