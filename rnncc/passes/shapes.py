"""Shapes: which sequence lengths and batches a compiled kernel is specialised to.

None: both are run-time arguments of every kernel. S is the trip count of the step
loop and of the projection's chunks; B sets the grid (batch tiles, or chunks of the
planned batch for the persistent kernels). Buckets of B were not taken: the kernels'
code does not depend on B, so a bucket could only re-choose tiles, at an nvcc run per
new bucket (the start-up cost users complain about in cuDNN). The hints choose tiles
and persistence, which stay as chosen for other shapes.
"""

from dataclasses import replace

from ..plan import Decision


def plan_shapes(model, plan, target):
    o = plan.options
    return replace(plan, shapes=Decision(
        {"seq_len": "run-time", "batch": "run-time"},
        f"every kernel takes S and B as arguments, so a new shape compiles nothing; not "
        f"bucketed by B, since a bucket could only re-choose tiles, at an nvcc run each. "
        f"Tiles and persistence are chosen for the hints S={o.seq_len}, B={o.batch} and kept "
        f"for other shapes: compile with batch=B (or autotune) to re-plan for a far-off B"))
