"""The compile pipeline's pure pieces: a model, a target and options to a plan and its
CUDA source. Needs no GPU and imports nothing above codegen; the runtime asks it for the
plan of each new shape class, and autotuning for its candidates.
"""

from __future__ import annotations

from . import codegen
from .ir import Model
from .passes import build_plan
from .plan import CompileOptions, Plan
from .target import Target


def plan_and_render(model: Model, target: Target, options: CompileOptions
                    ) -> tuple[Plan, tuple[codegen.KernelSource, ...]]:
    """The plan (every decision, with its reason) and its kernels' source."""
    plan = build_plan(model, target, options)
    return plan, codegen.render(plan)
