"""Persistence: ``none`` (a launch per step), ``grid`` or ``cluster`` (one launch for the
sequence).

``grid`` keeps each block's slice of W_hhᵀ in shared memory for all steps and meets at a
software grid barrier each step; possible when the slices fit one block per SM (so every
block is co-resident). ``cluster`` (sm_90 thread-block clusters, up to 8 blocks) holds all
of W_hhᵀ in one cluster's shared memory and exchanges h through distributed shared
memory with a cluster barrier; clusters serve independent batch tiles. The mode with the
lowest predicted time per step is chosen.
"""

from dataclasses import asdict, replace

from ..dtypes import DTYPES
from ..errors import PlanError
from ..plan import Decision
from .cost import (StepTile, cluster_seconds, cluster_sync_seconds, cluster_tiles,
                   persistent_seconds, persistent_tiles, step_seconds)


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
        candidates = {"none": (per_step, {"mode": "none"}, "one launch per step")}
        fits = [t for t in persistent_tiles(H, G, B, target) if t.shared_bytes(H, G, itemsize) <= budget]
        if fits:
            best = min(fits, key=lambda t: (round(persistent_seconds(B, H, G, t, target, itemsize) * 1e8),
                                            t.threads))
            blocks = -(-H // best.units_per_block) * best.batch_blocks
            value = {"mode": "grid", **asdict(best), "threads": best.threads, "blocks": blocks,
                     "shared_bytes": best.shared_bytes(H, G, itemsize)}
            candidates["grid"] = (persistent_seconds(B, H, G, best, target, itemsize), value,
                                  f"W_hh resident in {blocks} blocks × {value['shared_bytes'] // 1024} KiB, "
                                  "grid barrier")
        fits = [t for t in cluster_tiles(H, G, B, target) if t.shared_bytes(H, G, itemsize) <= budget]
        if fits:
            best = min(fits, key=lambda t: (round(cluster_seconds(B, H, G, t, target, itemsize) * 1e8),
                                            t.cluster, t.threads))
            clusters = -(-B // best.batch_per_block)
            value = {"mode": "cluster", **asdict(best), "threads": best.threads,
                     "shared_bytes": best.shared_bytes(H, G, itemsize)}
            candidates["cluster"] = (cluster_seconds(B, H, G, best, target, itemsize), value,
                                     f"W_hh in a cluster of {best.cluster} × "
                                     f"{value['shared_bytes'] // 1024} KiB, {clusters} cluster(s) at B={B}, "
                                     f"cluster barrier {cluster_sync_seconds(best.cluster) * 1e6:.1f} µs")
        if o.persistence is not None and o.persistence != "none":
            if o.persistence not in candidates:
                raise PlanError(f"layer '{l.name}', option persistence={o.persistence!r}: W_hh "
                                f"{w_mb:.1f} MiB does not fit that mode on {target.name} "
                                f"({budget // 1024} KiB shared memory per block)")
            chosen, source = o.persistence, "user"
        else:
            chosen = min(candidates, key=lambda k: candidates[k][0])
            source = "model"
        seconds, value, what = candidates[chosen]
        others = ", ".join(f"{k} {v[0] * 1e6:.1f}" for k, v in candidates.items() if k != chosen)
        if len(candidates) == 1:
            reason = (f"none: W_hh {w_mb:.1f} MiB fits neither one block per SM nor one cluster "
                      f"({budget // 1024} KiB shared memory per block); one launch per step")
        else:
            reason = (f"{'forced by the user; ' if source == 'user' else ''}{chosen}: {what}; "
                      f"predicted {seconds * 1e6:.1f} µs/step (others, µs: {others})")
        return replace(l, persistence=Decision(value, reason, source))
    return plan.map_layers(decide)
