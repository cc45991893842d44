"""Persistence: ``none`` (a launch per step), ``grid`` or ``cluster`` (one launch for the
sequence).

``grid`` keeps each block's slice of W_hhᵀ in shared memory for all steps and meets at a
software grid barrier each step; possible when the slices fit one block per SM (so every
block is co-resident). ``cluster`` (sm_90 thread-block clusters, up to 8 blocks) holds all
of W_hhᵀ in one cluster's shared memory and exchanges h through distributed shared
memory with a cluster barrier; clusters serve independent batch tiles. The mode with the
lowest predicted time per step is chosen. Layers in precision ``tensor`` run both
persistent modes on tensor cores (``TensorTile``, mma.sync); the per-step kernel of mode
``none`` computes with FMA in either precision.
"""

from dataclasses import asdict, replace

from ..dtypes import DTYPES
from ..errors import PlanError
from ..plan import Decision
from .cost import (StepTile, cluster_seconds, cluster_sync_seconds, cluster_tiles,
                   persistent_seconds, persistent_tiles, step_seconds, tensor_seconds,
                   tensor_tiles)


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
        if l.precision.value == "tensor":
            modes = {m: ([t for t in tensor_tiles(H, G, B, target, m)
                          if t.shared_bytes(H, G, itemsize) <= budget], tensor_seconds)
                     for m in ("grid", "cluster")}
            math_, product = "tensor", "mma.sync"
        else:
            modes = {"grid": ([t for t in persistent_tiles(H, G, B, target)
                               if t.shared_bytes(H, G, itemsize) <= budget], persistent_seconds),
                     "cluster": ([t for t in cluster_tiles(H, G, B, target)
                                  if t.shared_bytes(H, G, itemsize) <= budget], cluster_seconds)}
            math_, product = "fma", "FMA"
        for mode, (fits, seconds) in modes.items():
            if not fits:
                continue
            best = min(fits, key=lambda t: (round(seconds(B, H, G, t, target, itemsize) * 1e8),
                                            getattr(t, "cluster", 0), t.threads))
            value = {"mode": mode, "math": math_, **asdict(best), "threads": best.threads,
                     "shared_bytes": best.shared_bytes(H, G, itemsize)}
            kib = value["shared_bytes"] // 1024
            if mode == "grid":
                value["blocks"] = -(-H // best.units_per_block) * best.batch_blocks
                what = f"W_hh resident in {value['blocks']} blocks × {kib} KiB, {product}, grid barrier"
            else:
                what = (f"W_hh in a cluster of {best.cluster} × {kib} KiB, {product}, "
                        f"{-(-B // best.batch_per_block)} cluster(s) at B={B}, "
                        f"cluster barrier {cluster_sync_seconds(best.cluster) * 1e6:.1f} µs")
            candidates[mode] = (seconds(B, H, G, best, target, itemsize), value, what)
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
