"""Unroll factor F: time steps covered by one input-projection launch (1 ≤ F ≤ S).

Larger F gives the projection GEMM more rows (better use of the GPU) and hoists it out
of the recurrence; F is capped by the workspace budget for the F·B·G·H float32 buffer.
"""

from dataclasses import replace

from ..plan import Decision


def plan_unroll(model, plan, target):
    o = plan.options

    def decide(l):
        per_step = o.batch * l.gates * l.hidden_size * 4
        fits = max(1, o.workspace_budget // per_step)
        if o.unroll is not None:
            f = max(1, min(o.unroll, o.seq_len))
            return replace(l, unroll=Decision(f, f"forced by the user (unroll={o.unroll})", "user"))
        if fits >= o.seq_len:
            f = o.seq_len
            reason = (f"F=S: projection hoisted out of the recurrence, one GEMM of "
                      f"{f * o.batch}×{l.gates * l.hidden_size}×{l.input_size}; "
                      f"buffer {_mb(f * per_step)} ≤ budget {_mb(o.workspace_budget)}")
        else:
            f = int(fits)
            reason = (f"F={f} of S={o.seq_len}: buffer for all steps {_mb(o.seq_len * per_step)} "
                      f"> budget {_mb(o.workspace_budget)}")
        return replace(l, unroll=Decision(f, reason))
    return plan.map_layers(decide)


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"
