"""``rnncc bench``: rnncc beside torch.nn (cuDNN) in one process, same weights, dtype and
inputs. Each configuration is first checked for agreement with cuDNN, then both are
timed with CUDA events after warm-up (median of repeats, inputs rotated among three
sets). Results: a table on the terminal, a JSON record and a PNG plot.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .dtypes import max_relative_error, tolerance
from .tiles import CLUSTER_BACKWARD_TILES, KSplitBackwardTile
from .timing import time_interleaved

S = 256


@dataclass(frozen=True)
class Config:
    cell: str
    dtype: str
    hidden: int
    batch: int
    seq_len: int = S
    # "exact" or "tensor" (None: rnncc's default for the dtype). cuDNN runs with TF32 on
    # exactly when float32 runs on tensor cores.
    precision: str | None = None
    layers: int = 1
    # A named network instead of a plain stack: "gnmt" is GNMT's encoder (LSTM layers,
    # residual from the third on), against a torch loop of one-layer nn.LSTM calls with
    # the residual adds (what a user writes; each call may take cuDNN's persistent path).
    model: str | None = None
    # Each layer both ways (nn.LSTM(bidirectional=True)): output [forward, backward].
    bidirectional: bool = False
    # A PackedSequence of B sequences, lengths uniform in [1, seq_len] (seed 0), through
    # the rnncc.nn twin against nn.LSTM on the same PackedSequence.
    packed: bool = False
    # An LSTM's proj_size (LSTMP, speech models' layer): h = W_hr (o ⊙ tanh c), P wide.
    proj: int = 0
    # "forward", or "forward+backward": a training step's forward and the gradients of the
    # input and every parameter (torch.autograd.grad), the twin against torch.nn's module.
    passes: str = "forward"

    @property
    def math(self) -> str:
        return self.precision or ("exact" if self.dtype == "float32" else "tensor")

    @property
    def kind(self) -> str:
        """The dtype, or "float32 tf32" for float32 on tensor cores."""
        return self.dtype + (" tf32" if self.dtype == "float32" and self.math == "tensor" else "")

    @property
    def label(self) -> str:
        return f"{network(asdict(self))} {self.kind} H={self.hidden} B={self.batch}" + \
            (f" S={self.seq_len}" if self.seq_len != S else "")


def training_configs() -> list[Config]:
    """Issue 17's rows: forward and backward of one layer against cuDNN's; two float32
    shapes no issue names, whose backward runs in the FMA cluster form: a layer of the
    character LM example (examples/train_char_lm.py) and a GRU at B=64; and a bidirectional
    stack (a tagger's or speech encoder's), whose halves backpropagate at once."""
    step = {"passes": "forward+backward"}
    return [Config("lstm", "float16", 512, 8, **step), Config("lstm", "float32", 1024, 64, precision="exact", **step),
            Config("lstm", "bfloat16", 1024, 8, **step), Config("gru", "float16", 512, 8, **step),
            Config("lstm", "float32", 128, 16, seq_len=32, precision="exact", **step),
            Config("gru", "float32", 256, 64, precision="exact", **step),
            Config("lstm", "float16", 512, 8, layers=2, bidirectional=True, **step)]


# Issue 17's forward+backward targets, by (cell, dtype, H, B).
TRAINING_TARGETS = {("lstm", "float16", 512, 8): 1.5, ("lstm", "float32", 1024, 64): 1.5,
                    ("lstm", "bfloat16", 1024, 8): 3.0, ("gru", "float16", 512, 8): 2.0}


def issue_configs(cells=("lstm", "gru")) -> list[Config]:
    """The rows of the performance targets: one layer, input size = H, S=256 but for the
    GNMT-shaped LSTM row (S=128)."""
    out = []
    for cell in cells:
        out += [Config(cell, "float16", H, 8) for H in (256, 512, 1024)]
        out += [Config(cell, "float32", H, B, precision=p) for p in ("exact", "tensor")
                for H in (256, 1024) for B in (1, 8, 64)]
        out += [Config(cell, "bfloat16", H, B) for H in (256, 1024) for B in (8, 64)]
        out += [Config(cell, "float16", 512, 5), Config(cell, "float16", 2048, 256)]
        # Batches of 16 and 32, where cuDNN's persistent LSTM kernel steps faster than rnncc's
        # grid kernel (results/cudnn-steps-h200-2026-11-28.txt): no target in the issues, kept
        # visible (at least cuDNN's time).
        out += [Config(cell, "float16", 1024, 16), Config(cell, "float16", 1024, 32)]
    if "lstm" in cells:  # one layer of a GNMT-style encoder at its batch and sequence length
        out.append(Config("lstm", "float16", 1024, 64, seq_len=128))
        out += stack_configs()
        out.append(Config("lstm", "float16", 512, 8, layers=2, bidirectional=True))
        out.append(Config("lstm", "float16", 512, 64, packed=True))
        # An ASR encoder's LSTMP layers (no target in the issues; at least cuDNN's time).
        out.append(Config("lstm", "float16", 1024, 8, layers=2, proj=256))
    return out + [c for c in training_configs() if c.cell in cells]


def stack_configs() -> list[Config]:
    """Stacks against nn.LSTM(num_layers=L), and GNMT's encoder (8 layers, fp16, S=128)
    against the torch loop with residual adds."""
    return [Config("lstm", "float16", 1024, 8, layers=4), Config("lstm", "float16", 512, 8, layers=8),
            Config("lstm", "float32", 512, 8, precision="exact", layers=4),
            Config("lstm", "float16", 1024, 64, seq_len=128, layers=8, model="gnmt"),
            Config("lstm", "float16", 1024, 8, seq_len=128, layers=8, model="gnmt")]


def gnmt_spec(dtype: str, hidden: int, layers: int) -> dict:
    """GNMT's encoder as examples/gnmt_encoder.yaml writes it (input size = H)."""
    return {"name": f"gnmt_encoder_{dtype}", "dtype": dtype, "input_size": hidden,
            "layers": [{"name": f"l{i}", "cell": "lstm", "hidden_size": hidden, "residual": i >= 3}
                       for i in range(1, layers + 1)]}


def target_speedup(cfg: Config) -> float:
    """cuDNN time ÷ rnncc time asked for by the performance targets."""
    if cfg.passes != "forward":  # issue 17's rows are one layer one way
        one_layer = cfg.layers == 1 and not cfg.bidirectional
        return TRAINING_TARGETS.get((cfg.cell, cfg.dtype, cfg.hidden, cfg.batch), 1.0) if one_layer else 1.0
    if cfg.model == "gnmt":
        return 2.0
    if cfg.proj:
        return 1.0
    if cfg.bidirectional:
        return 3.0
    if cfg.packed:
        return 2.0
    if cfg.layers > 1:
        return 8.0
    if cfg.dtype == "float16" and cfg.batch == 8:  # issue 14: LSTM 1.5×, GRU 5×
        return 5.0 if cfg.cell == "gru" else 1.5
    if cfg.dtype == "float16" and cfg.batch == 64 and cfg.seq_len == 128:
        return 1.2
    if cfg.dtype == "float16" and (cfg.hidden == 2048 or cfg.batch in (16, 32)):
        return 1.0
    return 5.0


def quick_configs(cells=("lstm", "gru")) -> list[Config]:
    return [Config(cell, dtype, H, B) for cell in cells
            for dtype, H, B in (("float32", 1024, 8), ("float16", 512, 5), ("float32", 256, 64))] + \
        [Config(cell, "float32", 1024, 8, precision="tensor") for cell in cells]


def _progress(i: int, n: int, label: str) -> None:
    width = 30
    done = int(width * i / n)
    sys.stderr.write(f"\r[{'#' * done}{'.' * (width - done)}] {i}/{n} {label:<40}")
    sys.stderr.flush()
    if i == n:
        sys.stderr.write("\n")


def run_config(cfg: Config, warmup: int, repeats: int) -> dict:
    import torch

    import rnncc

    if cfg.packed:
        return run_packed_config(cfg, warmup, repeats)
    if cfg.passes != "forward":
        return run_training_config(cfg, warmup, repeats)

    torch.manual_seed(0)
    tf32 = cfg.kind == "float32 tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    tdt = getattr(torch, cfg.dtype)
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cfg.cell]
    if cfg.model == "gnmt":
        module = gnmt_loop(cfg.hidden, cfg.layers).to("cuda", tdt).eval()
        model = gnmt_spec(cfg.dtype, cfg.hidden, cfg.layers)
        weights = {f"l{i + 1}.{k}": getattr(m, f"{k}_l0").detach().float().cpu().numpy()
                   for i, m in enumerate(module.lstms)
                   for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
    else:
        module = cls(cfg.hidden, cfg.hidden, num_layers=cfg.layers, bidirectional=cfg.bidirectional,
                     **({"proj_size": cfg.proj} if cfg.proj else {})).to("cuda", tdt).eval()
        model, weights = rnncc.from_torch(module)
    start = time.perf_counter()
    compiled = rnncc.compile(model, target="device", weights=weights, batch=cfg.batch,
                             seq_len=cfg.seq_len, precision=cfg.math)
    inputs = [torch.randn(cfg.seq_len, cfg.batch, cfg.hidden, device="cuda", dtype=tdt)
              for _ in range(3)]
    with torch.no_grad():
        ours = compiled(inputs[0])[0]
        compile_s = time.perf_counter() - start
        theirs = module(inputs[0])[0]
        error = max_relative_error(ours.float().cpu().numpy(), theirs.float().cpu().numpy())
        # Both sides approximate the exact function in this dtype: allow twice the tolerance.
        agree = error <= 2 * tolerance(cfg.dtype, cfg.math)
        # The rnncc.nn twin of the same module, as a drop-in user runs it: compiled with
        # default hints, planned for the call's shape class on its first call.
        import rnncc.nn
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
        subjects = {"rnncc": lambda: compiled(inputs[next(turn) % 3]),
                    "cudnn": lambda: module(inputs[next(turn) % 3])}
        if cfg.model is None:  # a twin exists for torch.nn's own modules
            twin, _ = rnncc.nn.twin_of(module)
            twin.requires_grad_(False)
            subjects["twin"] = lambda: twin(inputs[next(turn) % 3])
        turn = iter(range(10**9))
        # Interleaved: the three see the same clocks and load (see timing.time_interleaved);
        # each timed call after an untimed one of its own, as in a loop of that call (right
        # after cuDNN's, the twin measured up to 9% slower than after itself:
        # benchmarks/results/twin-order-h100-2026-11-23.txt).
        timed = time_interleaved(subjects, warmup, repeats, settle=1)
        t_ours, t_theirs, t_twin = timed["rnncc"], timed["cudnn"], timed.get("twin")
        graphs = graph_baselines(module, compiled, inputs[0], warmup, repeats)
        graphs |= graph_planned(model, weights, cfg, compiled, inputs[0], graphs, warmup, repeats)
    plan = compiled.plan.layers[0]
    schedule = compiled.plan.schedule.value
    twin_fields = {} if t_twin is None else {
        "twin_ms": t_twin.median_ms, "twin_over_rnncc": t_twin.median_ms / t_ours.median_ms}
    return {**asdict(cfg), "precision": cfg.math, "kind": cfg.kind, "agree": agree, "max_relative_error_vs_cudnn": error,
            "rnncc_ms": t_ours.median_ms, "rnncc_spread_ms": [t_ours.min_ms, t_ours.max_ms],
            "cudnn_ms": t_theirs.median_ms, "cudnn_spread_ms": [t_theirs.min_ms, t_theirs.max_ms],
            "speedup": t_theirs.median_ms / t_ours.median_ms, **twin_fields,
            **graphs,
            "rnncc_us_per_step": t_ours.per_step_us(cfg.seq_len),
            "cudnn_us_per_step": t_theirs.per_step_us(cfg.seq_len),
            "target_speedup": target_speedup(cfg),
            "persistence": plan.persistence.value.mode, "layout": plan.layout.value,
            "math": plan.persistence.value.math, "tf32": tf32,
            "schedule": schedule.label,
            "compile_s": compile_s}


def run_packed_config(cfg: Config, warmup: int, repeats: int) -> dict:
    """A PackedSequence through nn.LSTM (cuDNN's packed path) and through its rnncc.nn twin,
    which pads the packed data and makes one call of the compiled model with each row's
    length. ``rnncc_ms`` is the compiled model on the padded batch with the lengths on the
    device (what the twin runs, without the padding and the packing; it captures in a CUDA
    graph), ``twin_ms`` the twin on the PackedSequence (its packed path copies index lists
    from the host and is not captured). Per-step fields divide by the longest sequence."""
    import torch
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    import rnncc.nn

    torch.manual_seed(0)
    tdt = getattr(torch, cfg.dtype)
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cfg.cell]
    module = cls(cfg.hidden, cfg.hidden, num_layers=cfg.layers,
                 bidirectional=cfg.bidirectional).to("cuda", tdt).eval()
    lengths = torch.randint(1, cfg.seq_len + 1, (cfg.batch,), generator=torch.Generator().manual_seed(0))
    padded = [torch.randn(int(lengths.max()), cfg.batch, cfg.hidden, device="cuda", dtype=tdt)
              for _ in range(3)]
    inputs = [pack_padded_sequence(x, lengths, enforce_sorted=False) for x in padded]
    on_device = lengths.to("cuda", torch.int32)
    start = time.perf_counter()
    twin, _ = rnncc.nn.twin_of(module)
    twin.requires_grad_(False)
    with torch.no_grad():
        ours = pad_packed_sequence(twin(inputs[0])[0])[0]
        compile_s = time.perf_counter() - start
        theirs = pad_packed_sequence(module(inputs[0])[0])[0]
        error = max_relative_error(ours.float().cpu().numpy(), theirs.float().cpu().numpy())
        agree = error <= 2 * tolerance(cfg.dtype, cfg.math)
        compiled = next(iter(rnncc.nn._runner_of(twin._specs[cfg.dtype]).compiled.values()))[0]
        turn = iter(range(10**9))
        timed = time_interleaved({"rnncc": lambda: compiled(padded[next(turn) % 3], lengths=on_device),
                                  "twin": lambda: twin(inputs[next(turn) % 3]),
                                  "cudnn": lambda: module(inputs[next(turn) % 3])},
                                 warmup, repeats, settle=1)
        graphs = graph_baselines(module, lambda x: compiled(x, lengths=on_device), inputs[0], warmup,
                                 repeats, ours_input=padded[0])
    t_ours, t_twin, t_theirs = timed["rnncc"], timed["twin"], timed["cudnn"]
    steps = int(lengths.max())
    plan = compiled.variant(steps, cfg.batch, lengths=True).plan
    return {**asdict(cfg), "precision": cfg.math, "kind": cfg.kind, "agree": agree,
            "max_relative_error_vs_cudnn": error, "lengths": lengths.tolist(),
            "rnncc_ms": t_ours.median_ms, "rnncc_spread_ms": [t_ours.min_ms, t_ours.max_ms],
            "cudnn_ms": t_theirs.median_ms, "cudnn_spread_ms": [t_theirs.min_ms, t_theirs.max_ms],
            "speedup": t_theirs.median_ms / t_ours.median_ms,
            "twin_ms": t_twin.median_ms, "twin_over_rnncc": t_twin.median_ms / t_ours.median_ms,
            "twin_speedup": t_theirs.median_ms / t_twin.median_ms, **graphs,
            "rnncc_us_per_step": t_ours.per_step_us(steps), "cudnn_us_per_step": t_theirs.per_step_us(steps),
            "target_speedup": target_speedup(cfg),
            "persistence": ", ".join(sorted({l.persistence.value.mode for l in plan.layers})),
            "layout": plan.layers[0].layout.value, "math": cfg.math, "tf32": False,
            "schedule": f"one call with lengths, {plan.schedule.value.kind}", "compile_s": compile_s}


def training_module(cfg: Config):
    """torch.nn's module of a forward+backward row (cfg.layers layers, both ways where
    cfg.bidirectional, input size = H) on the GPU in the row's type, seeded, with TF32 where
    the row's kind says; and the width of its output (its gradient's)."""
    import torch

    torch.manual_seed(0)
    tf32 = cfg.kind == "float32 tf32"
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cfg.cell]
    module = cls(cfg.hidden, cfg.hidden, num_layers=cfg.layers, bidirectional=cfg.bidirectional)
    return module.to("cuda", getattr(torch, cfg.dtype)), cfg.hidden * (2 if cfg.bidirectional else 1)


def run_training_config(cfg: Config, warmup: int, repeats: int) -> dict:
    """A training step's passes: the twin of a torch.nn module beside the module (cuDNN),
    same weights and inputs, each timed from the forward to the gradients of the input and
    every parameter (``torch.autograd.grad`` from one output gradient)."""
    import torch

    import rnncc.nn

    module, out_size = training_module(cfg)
    tf32, tdt = cfg.kind == "float32 tf32", getattr(torch, cfg.dtype)
    start = time.perf_counter()
    twin, _ = rnncc.nn.twin_of(module)
    inputs = [torch.randn(cfg.seq_len, cfg.batch, cfg.hidden, device="cuda", dtype=tdt).requires_grad_()
              for _ in range(3)]
    dy = torch.randn(cfg.seq_len, cfg.batch, out_size, device="cuda", dtype=tdt)
    turn = iter(range(10**9))

    def step(m, x=None):
        x = inputs[next(turn) % 3] if x is None else x
        return torch.autograd.grad(m(x)[0], [x, *m.parameters()], dy)
    ours = step(twin, inputs[0])
    compile_s = time.perf_counter() - start
    theirs = step(module, inputs[0])
    error = max(max_relative_error(a.float().cpu().numpy(), b.float().cpu().numpy())
                for a, b in zip(ours, theirs))
    # Gradients go through S steps of both sides' rounding: four times the forward's bound.
    agree = error <= 4 * tolerance(cfg.dtype, cfg.math)
    timed = time_interleaved({"rnncc": lambda: step(twin), "cudnn": lambda: step(module)},
                             warmup, repeats, settle=1)
    t_ours, t_theirs = timed["rnncc"], timed["cudnn"]
    graphs = graph_baselines(lambda x: step(module, x), lambda x: step(twin, x), inputs[0], warmup, repeats)
    spec = twin._specs[cfg.dtype]
    plan = rnncc.nn._runner_of(rnncc.nn._training_spec(spec)).compiled[(cfg.dtype, tf32)][0] \
        .variant(cfg.seq_len, cfg.batch).plan
    return {**asdict(cfg), "pass": cfg.passes, "precision": cfg.math, "kind": cfg.kind, "agree": agree,
            "max_relative_error_vs_cudnn": error,
            "rnncc_ms": t_ours.median_ms, "rnncc_spread_ms": [t_ours.min_ms, t_ours.max_ms],
            "cudnn_ms": t_theirs.median_ms, "cudnn_spread_ms": [t_theirs.min_ms, t_theirs.max_ms],
            "speedup": t_theirs.median_ms / t_ours.median_ms, **graphs,
            "rnncc_us_per_step": t_ours.per_step_us(cfg.seq_len),
            "cudnn_us_per_step": t_theirs.per_step_us(cfg.seq_len),
            "target_speedup": target_speedup(cfg),
            "persistence": plan.layers[0].persistence.value.mode, "layout": plan.layers[0].layout.value,
            "math": plan.layers[0].persistence.value.math, "tf32": tf32,
            "schedule": f"{plan.schedule.value.kind}, then the backward ({backward_form(plan.layers[0])})",
            "compile_s": compile_s}


def backward_form(layer) -> str:
    """"cluster", "grid, K split" or "grid": the form of the layer's planned backward recurrence."""
    tile = layer.backward_tile.value
    return "cluster" if isinstance(tile, CLUSTER_BACKWARD_TILES) else \
        "grid, K split" if isinstance(tile, KSplitBackwardTile) else "grid"


def gnmt_loop(hidden: int, layers: int):
    """GNMT's encoder as a torch user writes it: one-layer nn.LSTM calls, the output of each
    layer from the third on plus its input. Returns (output, None) like nn.LSTM's call."""
    import torch

    class GnmtLoop(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstms = torch.nn.ModuleList(torch.nn.LSTM(hidden, hidden) for _ in range(layers))

        def forward(self, x):
            for i, lstm in enumerate(self.lstms):
                h, _ = lstm(x)
                x = h + x if i >= 2 else h
            return x, None

    return GnmtLoop()


def graph_baselines(module, compiled, x, warmup: int, repeats: int, ours_input=None) -> dict:
    """cuDNN (torch.nn) and rnncc each captured in a CUDA graph, timed by replays in this
    process: ``cudnn_graph_ms``, ``rnncc_graph_ms`` and ``speedup_graph`` (cuDNN graph ÷
    rnncc graph); rnncc runs ``ours_input`` where given (else x). Where a capture fails,
    its time is None and the reason is recorded."""
    from .timing import time_graph

    out: dict = {}
    mine = x if ours_input is None else ours_input
    for key, fn in (("cudnn_graph_ms", lambda: module(x)), ("rnncc_graph_ms", lambda: compiled(mine))):
        try:
            out[key] = time_graph(fn, warmup, repeats).median_ms
        except Exception as exc:  # noqa: BLE001 - recorded in the row, not hidden
            out[key] = None
            out[key.replace("_ms", "_error")] = f"{type(exc).__name__}: {exc}"[:300]
    ours, theirs = out["rnncc_graph_ms"], out["cudnn_graph_ms"]
    out["speedup_graph"] = theirs / ours if ours and theirs else None
    return out


def graph_planned(model, weights, cfg: Config, compiled, x, graphs: dict, warmup: int, repeats: int) -> dict:
    """The same model planned for calls replayed from a CUDA graph (``launches="graph"``),
    as a user who captures it compiles it: its plan (``graph_schedule``, ``graph_modes``),
    and where that plan differs from ``compiled``'s, its time as a CUDA-graph replay
    (``rnncc_graph_plan_ms``, ``speedup_graph_plan`` against cuDNN's graph); where the
    plans are the same, the eager plan's graph time stands for it."""
    import rnncc
    from .timing import time_graph

    planned = rnncc.compile(model, target="device", weights=weights, batch=cfg.batch,
                            seq_len=cfg.seq_len, precision=cfg.math, launches="graph")
    same = plan_key(planned) == plan_key(compiled)
    out = {"graph_plan_differs": not same, "graph_schedule": planned.plan.schedule.value.label,
           "graph_modes": [modes_of(l) for l in planned.plan.layers]}
    if same:
        ms = graphs["rnncc_graph_ms"]
    else:
        try:
            ms = time_graph(lambda: planned(x), warmup, repeats).median_ms
        except Exception as exc:  # noqa: BLE001 - recorded in the row, not hidden
            ms, out["rnncc_graph_plan_error"] = None, f"{type(exc).__name__}: {exc}"[:300]
    theirs = graphs["cudnn_graph_ms"]
    return out | {"rnncc_graph_plan_ms": ms, "speedup_graph_plan": theirs / ms if ms and theirs else None}


def plan_key(compiled) -> tuple:
    """What a call runs: its kernels (named by their code), each layer's modes and chunk,
    and the schedule; decisions' reasons and prices left out."""
    p = compiled.plan
    return (tuple(sorted(k.name for k in compiled.kernels)), p.schedule.value.label,
            tuple((modes_of(l), l.unroll.value) for l in p.layers))


def modes_of(l) -> str:
    """A layer's persistence and the math of its product and projection, e.g.
    "grid/tensor+cublas" (a grid kernel on tensor cores, its projection in cuBLASLt)."""
    return f"{l.persistence.value.mode}/{l.persistence.value.math}+{getattr(l.projection_tile.value, 'math', 'rnncc')}"


def table(results: list[dict]) -> str:
    head = (f"{'config':<39} {'persist':>7} {'rnncc ms':>9} {'µs/step':>8} {'cuDNN ms':>9} "
            f"{'µs/step':>8} {'speedup':>8} {'twin ms':>8} {'graphs':>8} {'agree':>6}")
    rows = [head, "-" * len(head)]
    for r in results:
        label = f"{network(r)} {r['kind']} H={r['hidden']} B={r['batch']}"
        rows.append(f"{label:<39} {r['persistence']:>7} {r['rnncc_ms']:>9.3f} "
                    f"{r['rnncc_us_per_step']:>8.2f} {r['cudnn_ms']:>9.3f} {r['cudnn_us_per_step']:>8.2f} "
                    f"{r['speedup']:>7.2f}× {r.get('twin_ms', float('nan')):>8.3f} "
                    f"{_ratio(r.get('speedup_graph_plan', r.get('speedup_graph'))):>8} "
                    f"{'yes' if r['agree'] else 'NO':>6}")
    return "\n".join(rows)


def network(r: dict) -> str:
    """A row's network in words: the cell, "4×lstm" for a stack, or the named model; an
    LSTMP's proj_size."""
    layers, cell = r.get("layers", 1), ("bi" if r.get("bidirectional") else "") + r["cell"]
    return (r.get("model") or (f"{layers}×{cell}" if layers > 1 else cell)) + \
        (" packed" if r.get("packed") else "") + (f" P={r['proj']}" if r.get("proj") else "") + \
        (" fwd+bwd" if r.get("passes", "forward") != "forward" else "")


def _ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def plot(results: list[dict], path: Path) -> None:
    """µs per step against H, one panel per (cell, dtype or float32 tf32), one colour per
    batch size: rnncc solid, cuDNN dashed; plain one-layer rows only (stacks, bidirectional
    and packed rows are in the table)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = [r for r in results if r.get("layers", 1) == 1 and not r.get("bidirectional")
               and not r.get("packed") and not r.get("proj") and r.get("passes", "forward") == "forward"]

    cells = sorted({r["cell"] for r in results})
    dtypes = [d for d in ("float32", "float32 tf32", "float16", "bfloat16")
              if any(r["kind"] == d for r in results)]
    fig, axes = plt.subplots(len(cells), len(dtypes), figsize=(5 * len(dtypes), 4 * len(cells)),
                             squeeze=False)
    for row, cell in enumerate(cells):
        for col, dtype in enumerate(dtypes):
            ax = axes[row][col]
            batches = sorted({r["batch"] for r in results if r["cell"] == cell and r["kind"] == dtype})
            for batch in batches:
                rs = sorted((r for r in results if (r["cell"], r["kind"], r["batch"]) == (cell, dtype, batch)),
                            key=lambda r: r["hidden"])
                hs = [r["hidden"] for r in rs]
                line, = ax.plot(hs, [r["rnncc_us_per_step"] for r in rs], "o-", label=f"rnncc B={batch}")
                ax.plot(hs, [r["cudnn_us_per_step"] for r in rs], "x--", color=line.get_color(),
                        label=f"cuDNN B={batch}")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("hidden size H (= input size)")
            ax.set_ylabel("µs per step (layer time / 256)")
            ax.set_title(f"{cell.upper()} {dtype}")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle("rnncc (solid) vs cuDNN through torch.nn (dashed), S=256, one layer, same process")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(quick: bool, out_dir: Path, cells: tuple[str, ...], warmup: int, repeats: int) -> int:
    configs = quick_configs(cells) if quick else issue_configs(cells)
    import torch

    from .cli import _environment

    env = _environment(torch)
    results = []
    for i, cfg in enumerate(configs):
        _progress(i, len(configs), cfg.label)
        results.append(run_config(cfg, warmup, repeats))
    _progress(len(configs), len(configs), "done")
    print(table(results))
    day = time.strftime("%Y-%m-%d", time.gmtime())
    device = "h100" if "H100" in env["device"] else env["device"].split()[-1].lower()
    stem = f"bench-{device}-{day}" + ("-quick" if quick else "")
    out_dir.mkdir(parents=True, exist_ok=True)
    record = {"environment": env, "seq_len": S,
              "method": f"CUDA events, {warmup} warm-up calls, median of {repeats}, inputs "
                        "rotated among 3 sets (eager; rnncc, cuDNN and the twin interleaved "
                        "call by call, each timed call after an untimed one of its own, the GPU "
                        "drained before each); graph: the same call captured in a "
                        "CUDA graph and timed by replays on one input set, for cuDNN and "
                        "rnncc alike, rnncc also compiled with launches='graph' (planned for "
                        "graphed calls) and timed so where that plan differs; each config "
                        "checked against cuDNN first; "
                        "cuDNN with TF32 on exactly in the rows where rnncc runs float32 on "
                        "tensor cores (tf32: true)",
              "results": results}
    (out_dir / f"{stem}.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {out_dir / (stem + '.json')}")
    try:
        plot(results, out_dir / f"{stem}.png")
        print(f"wrote {out_dir / (stem + '.png')}")
    except ImportError:
        print("matplotlib not installed: no plot")
    return 0 if all(r["agree"] for r in results) else 1
