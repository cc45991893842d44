"""Skip connections: a merge feeding a layer is fused into that layer's input-projection
loader (the sum or concat happens on the way into shared memory, never stored); a merged
model output gets its own element-wise kernel."""

from dataclasses import replace

from ..plan import Decision


def plan_merges(model, plan, target):
    def decide(l):
        if len(l.sources) == 1:
            return replace(l, merge_fusion=Decision("none", "single input, no merge"))
        names = ", ".join(s.name for s in l.sources)
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
