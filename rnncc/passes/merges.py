"""Skip connections: a merge feeding a layer is fused into that layer's input-projection
loader (the sum or concat happens on the way into shared memory, never stored), or, where
cuBLASLt projects a sum, written once by an element-wise kernel and projected by one GEMM;
a merged model output gets its own element-wise kernel. A residual layer's h + input is
written by its recurrent kernel's epilogue."""

from dataclasses import replace

from ..plan import Decision


def summed_for_library(l) -> bool:
    """Whether layer l's input is a sum of several sources that cuBLASLt projects: then the
    sum is written once and projected by one GEMM, not one GEMM per source."""
    return l.merge == "sum" and len(l.sources) > 1 and l.projection_tile.value.math == "cublas"


def plan_merges(model, plan, target):
    def decide(l):
        names = ", ".join(s.name for s in l.sources)
        if l.residual:
            l = replace(l, residual_fusion=Decision(
                "epilogue", "each step's epilogue writes h + input beside h (the recurrence "
                            "reads h): later layers read one tensor, and no pass of its own"))
        if len(l.sources) == 1:
            return replace(l, merge_fusion=Decision("none", "single input, no merge"))
        if summed_for_library(l):
            return replace(l, merge_fusion=Decision(
                "summed", f"sum of {names} written once per projection chunk by an element-wise "
                          "kernel, then one cuBLASLt GEMM (not one per source)"))
        return replace(l, merge_fusion=Decision(
            "fused", f"{l.merge} of {names} computed in the projection's tile loader; "
                     "the merged input is never written to memory"))

    plan = plan.map_layers(decide)
    outputs = []
    for out in plan.outputs:
        if len(out.sources) > 1:
            out = replace(out, kernel=Decision(
                f"merge_{out.merge}", f"a model output is a {out.merge}: one element-wise "
                                      "kernel writes it once into the caller's array"))
        outputs.append(out)
    return replace(plan, outputs=tuple(outputs))
