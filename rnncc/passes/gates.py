"""Gate concatenation: one GEMM over all G·H gate rows, packed unit-major."""

from dataclasses import replace

from ..plan import Decision


def plan_gate_concat(model, plan, target):
    def decide(l):
        names = {4: "i,f,g,o", 3: "r,z,n", 1: "h"}[l.gates]
        if l.gates == 1:
            reason = "one gate: nothing to concatenate"
        else:
            reason = (f"one GEMM of {l.gates}·H={l.gates * l.hidden_size} rows instead of "
                      f"{l.gates}; gates ({names}) of a unit adjacent, so the cell fuses into the step")
        return replace(l, gate_concat=Decision("unit-interleaved", reason))
    return plan.map_layers(decide)
