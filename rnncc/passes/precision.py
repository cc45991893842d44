"""Precision: how a layer's products are computed, ``exact`` (fp32 FMA) or ``tensor``
(tensor cores, ``mma.sync`` with fp32 accumulation).

fp16 and bf16 storage go to tensor cores by default: their products are exact in fp32
either way, so tensor cores lose nothing but the order of the sums. float32 stays exact
by default, as ``torch.nn`` computes it with TF32 off; ``precision="tensor"`` opts into
TF32, whose operands keep a 10-bit mantissa (tolerance in ``rnncc.dtypes``).
Tensor cores serve the persistent step (grid and cluster) and the input projection; the
per-step kernel (persistence ``none``) computes with FMA in either mode.
"""

from dataclasses import replace

from ..dtypes import PRECISIONS
from ..plan import Decision


def plan_precision(model, plan, target):
    forced = plan.options.precision

    def decide(l):
        if forced is not None:
            return replace(l, precision=Decision(forced, f"forced by the user: {PRECISIONS[forced]}",
                                                 "user"))
        if plan.dtype in ("float16", "bfloat16"):
            operands = "fp16" if plan.dtype == "float16" else "bf16"
            reason = (f"{operands} operands as stored, products exact in fp32, fp32 accumulation: "
                      "tensor cores (mma.sync m16n8k16) give FMA's accuracy at several times its rate")
            return replace(l, precision=Decision("tensor", reason))
        reason = ("float32: exact fp32 products (FMA), as torch.nn with TF32 off; "
                  "precision='tensor' selects TF32 tensor cores (tolerance 5e-3)")
        return replace(l, precision=Decision("exact", reason))
    return plan.map_layers(decide)
