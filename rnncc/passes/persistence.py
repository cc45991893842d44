"""Persistence: ``none`` (a launch per step) or ``grid`` (one launch for the sequence).

``grid`` keeps each block's slice of W_hhᵀ in shared memory for all steps and meets at a
software grid barrier each step. It is possible when the slices fit one block per SM
(so every block is co-resident); it is chosen when the cost model predicts it faster
than per-step launches. ``cluster`` (Hopper thread-block clusters) is not implemented yet.
"""

from dataclasses import asdict, replace

from ..dtypes import DTYPES
from ..plan import Decision
from .cost import persistent_seconds, persistent_tiles, step_seconds, StepTile


def plan_persistence(model, plan, target):
    o = plan.options
    itemsize = DTYPES[plan.dtype].itemsize
    budget = target.shared_memory_per_block_optin

    def decide(l):
        B, H, G = o.batch, l.hidden_size, l.gates
        step_tile = StepTile(**{k: v for k, v in l.step_tile.value.items() if k != "threads"})
        per_step = step_seconds(B, H, G, step_tile, target, itemsize)
        w_mb = G * H * H * itemsize / 2**20
        if o.persistence == "none":
            return replace(l, persistence=Decision({"mode": "none"}, "forced by the user", "user"))
        fits = [t for t in persistent_tiles(H, G, B, target) if t.shared_bytes(H, G, itemsize) <= budget]
        if not fits:
            return replace(l, persistence=Decision({"mode": "none"}, (
                f"none: W_hh {w_mb:.1f} MiB does not fit {target.sm_count} SMs' shared memory "
                f"({budget // 1024} KiB per block); one launch per step")))
        best = min(fits, key=lambda t: (round(persistent_seconds(B, H, G, t, target, itemsize) * 1e8),
                                        t.threads))
        grid = persistent_seconds(B, H, G, best, target, itemsize)
        blocks = -(-H // best.units_per_block) * best.batch_blocks
        value = {"mode": "grid", **asdict(best), "threads": best.threads, "blocks": blocks,
                 "shared_bytes": best.shared_bytes(H, G, itemsize)}
        if o.persistence == "grid" or grid < per_step:
            how = "forced by the user; " if o.persistence == "grid" else ""
            return replace(l, persistence=Decision(value, (
                f"{how}grid: W_hh {w_mb:.1f} MiB resident in {blocks} blocks × "
                f"{value['shared_bytes'] // 1024} KiB shared memory; predicted {grid * 1e6:.1f} µs/step "
                f"vs {per_step * 1e6:.1f} µs with a launch per step"), "user" if how else "model"))
        return replace(l, persistence=Decision({"mode": "none"}, (
            f"none: predicted {per_step * 1e6:.1f} µs/step with a launch per step vs "
            f"{grid * 1e6:.1f} µs persistent (grid barrier {1.5:.1f} µs)")))
    return plan.map_layers(decide)
