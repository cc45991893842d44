"""Measured autotuning: time the cost model's best candidates on the GPU, keep the fastest.

Per layer, the candidates are the combinations of the three choices that move time the
most: the projection layout (``xw``/``wx``), persistence (``none``/``grid``/``cluster``)
and where the GEMMs run (``rnncc``/``cublas``). The cost model ranks every valid
combination; the best ``top`` are compiled and timed as a forward of the layer alone
(same cell, sizes, dtype, precision, S and B; one source of the layer's input size, so a
merged input is timed as its projection's GEMM). The fastest becomes the layer's choice,
recorded in the Plan with every candidate's time (Decision.source == "measured").

Results are cached on disk (``<cache>/autotune/<key>.json``), keyed by GPU name, SM count,
driver version, rnncc version and the layer's shape, dtype, precision, S and B, so a second
compile measures nothing. An entry is written to a temporary file and renamed into place
under a per-key lock (two processes tuning at once measure once); an entry that does not
parse or does not match its key is ignored and measured again.
"""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import json
import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np

from . import __version__, codegen
from .build import cache_dir
from .errors import PlanError
from .plan import CompileOptions, LayerPlan, Measurement

log = logging.getLogger("rnncc.autotune")

LAYOUTS, PERSISTENCE, GEMMS = ("xw", "wx"), ("none", "grid", "cluster"), ("rnncc", "cublas")
TOP = 4            # candidates timed per layer
WARMUP, REPEATS = 2, 7


def _device_key() -> dict:
    import pycuda.driver as cuda

    from .driver import device_context

    dev = device_context().device
    return {"gpu": dev.name().strip(),
            "sms": dev.get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT),
            "driver": cuda.get_driver_version(), "rnncc": __version__}


def layer_key(l: LayerPlan, dtype: str, options: CompileOptions, device: dict) -> dict:
    """What a layer's measurement depends on (its name does not: equal layers share it)."""
    return {**device, "cell": l.cell, "hidden": l.hidden_size, "proj": l.proj_size,
            "input": l.input_size, "bias": l.bias, "dtype": dtype, "precision": l.precision.value,
            "seq_len": options.seq_len, "batch": options.batch}


def _path(key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return cache_dir() / "autotune" / f"{key['cell']}-h{key['hidden']}-b{key['batch']}-{digest}.json"


def _read(path: Path, key: dict) -> dict | None:
    """A cache entry, or None if it is missing, does not parse or is not for this key."""
    try:
        entry = json.loads(path.read_text())
        ok = (entry["key"] == key and entry["layout"] in LAYOUTS
              and entry["persistence"] in PERSISTENCE and entry["gemm"] in GEMMS
              and all(isinstance(label, str) and float(t) > 0 for label, t in entry["times"]))
        return entry if ok else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _single_layer_spec(l: LayerPlan, dtype: str) -> dict:
    return {"name": f"tune_{l.cell}", "dtype": dtype, "input_size": l.input_size,
            "layers": [{"name": "l0", "cell": l.cell, "hidden_size": l.hidden_size, "bias": l.bias}
                       | ({"proj_size": l.proj_size} if l.proj_size else {})]}


def effective(l: LayerPlan) -> tuple[str, str, str, str]:
    """What a planned layer runs: layout, persistence mode, step math, projection math."""
    return (l.layout.value, l.persistence.value.mode, l.persistence.value.math,
            l.projection_tile.value.math)


def _candidates(l: LayerPlan, dtype: str, options: CompileOptions, target):
    """Valid (layout, persistence, gemm) combinations with the cost model's prediction of a
    forward (projection + S steps), best first; combinations that plan identically
    (cuBLASLt asked where it cannot run) appear once."""
    from .ir import Model
    from .passes import build_plan
    from .passes.geometry import projection_label
    from .passes.persistence import persistence_label

    model = Model.from_dict(_single_layer_spec(l, dtype))
    seen, out = set(), []
    for layout, persistence, gemm in itertools.product(LAYOUTS, PERSISTENCE, GEMMS):
        o = replace(options, layout=layout, persistence=persistence, gemm=gemm, tuned=(),
                    precision=l.precision.value)
        try:
            plan = build_plan(model, target, o)
        except PlanError:
            continue  # W_hh does not fit that mode
        p = plan.layers[0]
        if effective(p) in seen:
            continue
        seen.add(effective(p))
        steps = -(-options.seq_len // p.unroll.value)
        projection = p.projection_tile.alternatives[projection_label(p.projection_tile.value)]
        step = p.persistence.alternatives[persistence_label(p.persistence.value)]
        out.append((steps * projection + options.seq_len * step, (layout, persistence, gemm),
                    model, plan))
    return sorted(out, key=lambda c: c[0])


def _measure(l: LayerPlan, dtype: str, options: CompileOptions, target,
             progress: Callable[[str], None] | None) -> dict:
    import pycuda.gpuarray as gpuarray

    from .dtypes import to_storage
    from .runtime import CompiledModel
    from .timing import time_gpu

    candidates = _candidates(l, dtype, options, target)[:TOP]
    compiled = [(choice, CompiledModel(model, plan, target, codegen.render(plan), None))
                for _, choice, model, plan in candidates]
    for _, c in compiled:  # nvcc before any timing
        c.build()
    rng = np.random.default_rng(0)
    x = gpuarray.to_gpu(to_storage(rng.uniform(-1, 1, (options.seq_len, options.batch,
                                                        l.input_size)), dtype))
    times = []
    for choice, c in compiled:
        label = Measurement.label(*choice)
        if progress:
            progress(f"layer {l.name}: timing {label}")
        t = time_gpu(lambda: c(x), WARMUP, REPEATS).median_ms / 1e3
        times.append((label, t))
    times.sort(key=lambda lt: lt[1])
    best = next(choice for choice, _ in compiled if Measurement.label(*choice) == times[0][0])
    return {"layout": best[0], "persistence": best[1], "gemm": best[2], "times": times}


def tune(model, plan, target, progress: Callable[[str], None] | None = None
         ) -> tuple[Measurement, ...]:
    """A Measurement per layer of ``plan`` (the cost model's plan of ``model``), from the
    disk cache or measured now; needs the GPU."""
    device = _device_key()
    out = []
    for l in plan.layers:
        key = layer_key(l, model.dtype, plan.options, device)
        path = _path(key)
        entry, origin = _read(path, key), f"disk cache {path.name}"
        if entry is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path.with_suffix(".lock"), "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                entry = _read(path, key)  # another process may have measured it meanwhile
                if entry is None:
                    entry = {"key": key, **_measure(l, model.dtype, plan.options, target, progress)}
                    tmp = path.with_suffix(f".tmp{os.getpid()}")
                    tmp.write_text(json.dumps(entry, indent=1))
                    os.replace(tmp, path)
                    origin = f"measured now, cached in {path.name}"
        out.append(Measurement(l.name, entry["layout"], entry["persistence"], entry["gemm"],
                               tuple((label, float(t)) for label, t in entry["times"]), origin))
    return tuple(out)
