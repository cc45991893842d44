"""The plans of the bench's rows, as the planner makes them for the H100 preset (no GPU):
each row's schedule and, per layer, its persistence value, projection tile and h projection.
Two commits' dumps compared tell whether a bench JSON measured at one still measures the
plans of the other.

    python3 benchmarks/bench_plans.py OUT.json   (from the repository root)
"""
import dataclasses
import json
import sys

import torch

import rnncc
from rnncc.bench import Config, gnmt_spec, issue_configs


def model_of(cfg: Config):
    """The model a bench config times, without its weights (no GPU): GNMT's spec, or the
    torch.nn module's, in the config's dtype."""
    if cfg.model == "gnmt":
        return gnmt_spec(cfg.dtype, cfg.hidden, cfg.layers)
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cfg.cell]
    mod = cls(cfg.hidden, cfg.hidden, num_layers=cfg.layers, bidirectional=cfg.bidirectional,
              **({"proj_size": cfg.proj} if cfg.proj else {}))
    model, _ = rnncc.from_torch(mod)
    return dataclasses.replace(model, dtype=cfg.dtype)


def plans() -> dict:
    out = {}
    for cfg in issue_configs():
        if cfg.packed:
            continue
        model = model_of(cfg)
        m = rnncc.compile(model, target="h100", batch=cfg.batch, seq_len=cfg.seq_len, precision=cfg.math)
        out[cfg.label] = {"schedule": m.plan.schedule.value.label,
                          "layers": [[json.dumps(l.persistence.value.to_dict(), sort_keys=True),
                                      json.dumps(l.projection_tile.value.to_dict(), sort_keys=True),
                                      str(l.h_projection.value if l.h_projection else None)] for l in m.plan.layers]}
    return out


if __name__ == "__main__":
    found = plans()
    json.dump(found, open(sys.argv[1], "w"), indent=1)
    print(len(found))
