"""Persistence: ``none`` (a launch per step), ``grid`` or ``cluster``.

This version generates only per-step kernels, so every layer gets ``none``; the field
and its reason are in place for the persistent modes.
"""

from dataclasses import replace

from ..plan import Decision


def plan_persistence(model, plan, target):
    def decide(l):
        w_hh = l.gates * l.hidden_size * l.hidden_size * {"float32": 4}.get(plan.dtype, 2)
        return replace(l, persistence=Decision(
            "none", f"one launch per step (W_hh {w_hh / 2**20:.1f} MiB re-read from L2 each step); "
                    "grid/cluster persistence is not implemented in this version"))
    return plan.map_layers(decide)
