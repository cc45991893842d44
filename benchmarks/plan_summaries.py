"""The plans of graph_plans.py's points (short_and_odd's and the bench's torch.nn rows), eager
and for graphed calls, as the planner makes them for a preset (no GPU): each point's layers'
mode/math and projection and the schedule (graph_plans.summary), and the predicted µs of the
chosen schedule. Two checkouts' dumps compared tell which points a change of the cost model
moves.

    python3 benchmarks/plan_summaries.py PRESET OUT.json   (from the repository root)
"""
import json
import sys

import rnncc
from bench_plans import model_of
from graph_plans import configs, label, precision_of, summary


def plans(preset: str) -> dict:
    out = {}
    for c in configs():
        model = model_of(c)
        row = {}
        for launches in ("eager", "graph"):
            p = rnncc.compile(model, target=preset, batch=c.batch, seq_len=c.seq_len, precision=precision_of(c),
                              launches=launches).plan
            s = p.schedule
            row[launches] = summary(p)
            row[f"{launches}_predicted_us"] = round(s.alternatives[s.value.label] * 1e6, 1) if s.alternatives else None
        out[label(c)] = row
    return out


if __name__ == "__main__":
    found = plans(sys.argv[1])
    with open(sys.argv[2], "w") as f:
        json.dump(found, f, indent=1)
    print(f"{len(found)} points")
