"""Layout of the input projection: Y = X·Wᵀ ("xw") or Yᵀ = W·Xᵀ ("wx").

Both are the same tiled GEMM C = A·Bᵀ with the operands swapped. The GEMM costs are
compared over the tile candidates (they differ when tile quantisation does), and the
read of the projection by the step kernel is added: it reads a unit's G gates, which
are adjacent in Y (a warp's reads coalesce: 4·G bytes per unit) and one row of Yᵀ
apart (a 32-byte sector per value).
"""

from dataclasses import replace

from ..dtypes import DTYPES
from ..plan import Decision
from .cost import PROJECTION_TILES, projection_seconds


def layout_costs(l, plan, target) -> dict[str, float]:
    """Predicted seconds per F-step chunk for each layout."""
    o = plan.options
    f = l.unroll.value
    rows, cols, k = f * o.batch, l.gates * l.hidden_size, l.input_size
    itemsize = DTYPES[plan.dtype].itemsize
    out = {}
    for layout, (m, n) in {"xw": (rows, cols), "wx": (cols, rows)}.items():
        gemm = min(projection_seconds(m, n, k, t, target, itemsize) for t in PROJECTION_TILES)
        bytes_per_value = 4 if layout == "xw" else 32
        read = f * o.batch * l.hidden_size * l.gates * bytes_per_value / target.memory_bandwidth
        out[layout] = gemm + read
    return out


def plan_layout(model, plan, target):
    o = plan.options

    def decide(l):
        if o.layout is not None:
            return replace(l, layout=Decision(o.layout, f"forced by the user (layout={o.layout})",
                                              "user"))
        costs = layout_costs(l, plan, target)
        m = o.measured(l.name)
        if m is not None:
            return replace(l, layout=Decision(
                m.layout, f"measured: {m.times[0][0]} was the fastest of {len(m.times)} candidates "
                          f"(layout/persistence/gemm; {m.origin})", "measured", costs, dict(m.times)))
        best = min(costs, key=lambda k: (costs[k], k != "xw"))
        other = "wx" if best == "xw" else "xw"
        reason = (f"predicted {costs[best] * 1e6:.1f} µs vs {costs[other] * 1e6:.1f} µs per "
                  f"{l.unroll.value}-step chunk; " +
                  ("the step kernel's reads of a unit's gates coalesce" if best == "xw"
                   else "fewer padded tiles"))
        return replace(l, layout=Decision(best, reason, alternatives=costs))
    return plan.map_layers(decide)
