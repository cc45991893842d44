"""The ``rnncc`` command: compile, explain, run."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from . import __version__

EPILOG = """\
examples:
  rnncc compile examples/gnmt_encoder.yaml --target h100 -o out/   # .cu files + plan.json
  rnncc explain examples/gnmt_encoder.yaml                         # every decision and why
  rnncc run examples/lstm_1024.yaml --batch 64 --seq-len 256       # GPU: check + time

A spec is a YAML file: name, dtype, input_size, layers (name, cell, hidden_size, proj_size, bias,
input) and outputs. See examples/ and the README.
"""


def _add_plan_options(p: argparse.ArgumentParser, target_default: str | None) -> None:
    p.add_argument("spec", help="model spec (YAML file)")
    p.add_argument("--target", default=target_default,
                   help="h100, h200, a100, or 'device' for the GPU present "
                        f"(default: {target_default or 'the GPU present, else h100'})")
    p.add_argument("--seq-len", type=int, default=256, help="sequence length the plan is tuned for (default 256)")
    p.add_argument("--batch", type=int, default=64, help="batch size the plan is tuned for (default 64)")
    p.add_argument("--layout", choices=["xw", "wx"], help="force the input-projection layout")
    p.add_argument("--unroll", type=int, help="force F, time steps per input-projection launch")
    p.add_argument("--persistence", choices=["none", "grid", "cluster"],
                   help="force a launch per step (none) or one launch for the sequence "
                        "(grid: grid barrier; cluster: thread-block clusters)")
    p.add_argument("--precision", choices=["exact", "tensor"],
                   help="products in fp32 FMA (exact) or on tensor cores (tensor; TF32 for "
                        "float32). Default: tensor for fp16/bf16, exact for float32")
    p.add_argument("--autotune", action="store_true",
                   help="time the best candidates of each layer on the GPU present and keep the "
                        "fastest (cached on disk; needs --target device)")
    p.add_argument("--gemm", choices=["rnncc", "cublas"],
                   help="run the input projection and per-step products in rnncc's kernels "
                        "only, or in cuBLASLt wherever it can (default: the faster predicted)")
    p.add_argument("--schedule", choices=["sequential", "pipelined"],
                   help="run the layers one after another, or side by side in chunks, each on "
                        "its own stream (default: the faster predicted)")
    p.add_argument("--step-kernel", choices=["tiles", "rows"],
                   help="where a layer runs a launch a step, rnncc's step kernel in tiles of units "
                        "× batch rows (W_hhᵀ staged in shared memory) or in rows (a warp a unit, "
                        "W_hh read as stored, for a few batch rows; default: the faster predicted)")
    p.add_argument("--launches", choices=["eager", "graph"],
                   help="how the calls will reach the GPU: queued by the host (eager, the default: a "
                        "launch and a cuBLASLt call are priced at the host's time) or replayed from a "
                        "CUDA graph (graph: priced at the GPU's time, as torch.cuda.graph and "
                        "torch.compile(mode='reduce-overhead') run them)")
    p.add_argument("--backward-gates", choices=["auto", "save", "recompute"],
                   help="plan a training forward: its recurrent kernels also write the gates' "
                        "pre-activations for the backward where predicted to pay (auto, what "
                        "rnncc.nn's training twins compile), in every layer (save) or in none "
                        "(recompute); unset: an inference forward")


def _compile(args, seq_len=None, batch=None):
    import rnncc

    return rnncc.compile(args.spec, target=args.target, seq_len=seq_len or args.seq_len,
                         batch=batch or args.batch, layout=args.layout, unroll=args.unroll,
                         persistence=args.persistence, precision=args.precision,
                         gemm=args.gemm, schedule=args.schedule, step_kernel=args.step_kernel,
                         launches=args.launches, backward_gates=args.backward_gates,
                         seed=getattr(args, "seed", 0),
                         autotune=args.autotune,
                         progress=lambda msg: print(f"autotune: {msg}", file=sys.stderr))


def _build_with_progress(m) -> tuple[dict[str, bytes], float, int, int]:
    """(cubins, seconds, built, from the cache) of every kernel; a progress line on stderr
    once the build has taken over a second."""
    from . import build

    start = time.perf_counter()
    shown = []

    def progress(done: int, total: int, name: str) -> None:
        if shown or time.perf_counter() - start > 1.0:
            shown.append(done)
            sys.stderr.write(f"\rnvcc: {done}/{total} kernels ready ({name}){' ' * 20}"
                             + ("\n" if done == total else ""))
            sys.stderr.flush()
    before = build.cache_info()
    cubins = m.build(progress=progress)
    after = build.cache_info()
    seconds = time.perf_counter() - start
    return cubins, seconds, after.misses - before.misses, after.hits - before.hits


def cmd_compile(args) -> int:
    start = time.perf_counter()
    m = _compile(args)
    planned = time.perf_counter() - start
    for path, changed in m.write(args.output):
        print(f"{'wrote' if changed else 'unchanged'} {path}")
    if args.cubin or args.timing:
        cubins, nvcc_s, built, cached = _build_with_progress(m)
        if args.cubin:
            for name, blob in cubins.items():
                path = Path(args.output) / f"{name}.{m.target.arch}.cubin"
                path.write_bytes(blob)
                print(f"wrote {path}")
        print(f"nvcc: {len(cubins)} kernels ({built} built, {cached} from the cache) in {nvcc_s:.2f} s")
        if args.timing:
            layers = len(m.plan.layers)
            print(f"timing: spec → plan → CUDA source {planned:.3f} s ({layers} layers, "
                  f"{len(m.kernels)} distinct kernels), nvcc {nvcc_s:.3f} s "
                  f"({os.cpu_count()} CPUs), total {time.perf_counter() - start:.3f} s")
    return 0


def cmd_explain(args) -> int:
    m = _compile(args)
    if args.resources:
        _build_with_progress(m)
    kernels = m.kernel_report()
    if args.json:
        print(json.dumps({**m.plan.to_dict(), "kernels": kernels}, indent=2, ensure_ascii=False))
        return 0
    print(m.explain(), end="")
    print("kernels:")
    for k in kernels:
        r = k["resources"]
        used = (f"{r['registers']} registers/thread, {r['shared_static'] + k['dynamic_shared_bytes']} B "
                f"shared/block" + (f", spills {r['spill_stores']}/{r['spill_loads']} B" if r['spill_stores']
                                   or r['spill_loads'] else "")
                if r else "registers: not built yet (--resources)")
        users = f"  for {', '.join(k['users'])}" if len(k["users"]) > 1 else ""
        print(f"  {k['name'] + '.cu':<36} block {'×'.join(map(str, k['block']))}, {used}{users}")
    if args.timeline:
        _draw_timeline(m, args)
    return 0


def _draw_timeline(m, args) -> None:
    """The plan's predicted timeline at the hinted S and B, and with --measure the one the
    GPU runs (after two warm-up calls), printed per layer and drawn as a PNG."""
    from . import timeline
    from .passes.schedule import timeline as predicted

    S, B = m.plan.options.seq_len, m.plan.options.batch
    schedule = m.plan.schedule.value
    timelines = {f"planned ({schedule.label})": predicted(m.plan, schedule, S, m.target)}
    if args.measure:
        import numpy as np

        from .dtypes import round_to
        x = round_to(np.random.default_rng(0).uniform(-1, 1, (S, B, m.model.input_size)), m.model.dtype)
        x = x.astype(np.float16 if m.model.dtype == "float16" else np.float32)
        try:  # on the device, so that the timeline holds no copy of the input
            import torch
            x = torch.from_numpy(x).to("cuda", getattr(torch, m.model.dtype))
        except ImportError:
            pass
        for _ in range(2):
            m(x)
        timelines["measured"] = m.timeline(x)
    for name, tasks in timelines.items():
        print(f"timeline {name}:")
        print(timeline.summary(tasks))
    try:
        path = timeline.draw(args.timeline, timelines, f"{m.model.name}, {m.model.dtype}, S={S}, "
                             f"B={B}, target {m.target.name}")
    except ImportError:
        print("matplotlib not installed: no timeline PNG", file=sys.stderr)
        return
    print(f"wrote {path}")


def cmd_run(args) -> int:
    import numpy as np

    from . import reference
    from .dtypes import max_relative_error, round_to, tolerance
    from .timing import time_gpu
    from .weights import to_torch

    m = _compile(args, seq_len=args.seq_len, batch=args.batch)
    S, B, dtype = args.seq_len, args.batch, m.model.dtype
    print(f"rnncc {__version__}: {m.model.name}, {len(m.model.layers)} layers, {dtype}, "
          f"S={S}, B={B}, target {m.target.name}")
    try:
        import torch
    except ImportError:
        torch = None
    rng = np.random.default_rng(args.seed)
    x = round_to(rng.uniform(-1, 1, (S, B, m.model.input_size)), dtype)
    if torch is not None:
        xd = torch.from_numpy(x).to("cuda", getattr(torch, dtype))
    else:
        import pycuda.gpuarray as gpuarray
        from .dtypes import to_storage
        xd = gpuarray.to_gpu(to_storage(x, dtype))
    y, _ = m(xd)
    outs = y if isinstance(y, tuple) else (y,)
    if not args.no_check:
        ref, _ = reference.run(m.model, m.device_weights(), x)
        tol = max(tolerance(dtype, l.precision.value) for l in m.plan.layers)
        for o, got, want in zip(m.model.outputs, outs, ref):
            g = got.float().cpu().numpy() if torch is not None else got.get()
            err = max_relative_error(g, want)
            status = "ok" if err <= tol else "FAIL"
            print(f"check {o.name}: max relative error {err:.2e} vs float64 reference "
                  f"(tolerance {tol:.0e}) {status}")
            if err > tol:
                return 1
    t = time_gpu(lambda: m(xd), args.warmup, args.repeats)
    rows = [("rnncc", t)]
    module = to_torch(m.model, m.state_dict()) if torch is not None and not args.no_torch else None
    if module is not None:
        # cuDNN in the same precision: TF32 exactly when rnncc runs float32 on tensor cores.
        tf32 = dtype == "float32" and any(l.precision.value == "tensor" for l in m.plan.layers)
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        module = module.to("cuda", getattr(torch, dtype))
        with torch.no_grad():
            want = module(xd)[0]
            got = outs[0]
            err = max_relative_error(got.float().cpu().numpy(), want.float().cpu().numpy())
            print(f"check vs torch.nn.{type(module).__name__} (cuDNN {torch.backends.cudnn.version()}, "
                  f"TF32 {'on' if tf32 else 'off'}): max relative error {err:.2e}")
            rows.append((f"torch.nn.{type(module).__name__}", time_gpu(lambda: module(xd), args.warmup,
                                                                       args.repeats)))
    print(f"{'implementation':<20} {'median ms':>10} {'µs/step':>9} {'min..max ms':>16}")
    for name, tm in rows:
        print(f"{name:<20} {tm.median_ms:>10.3f} {tm.per_step_us(S):>9.2f} "
              f"{tm.min_ms:>7.3f}..{tm.max_ms:<7.3f}")
    if len(rows) == 2:
        print(f"rnncc / cuDNN time: {rows[0][1].median_ms / rows[1][1].median_ms:.2f}×")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "model": m.model.name, "spec": args.spec, "dtype": dtype, "seq_len": S, "batch": B,
            "environment": _environment(torch), "plan": m.plan.to_dict(),
            "results": {n: tm.__dict__ for n, tm in rows}}, indent=2, ensure_ascii=False) + "\n")
    return 0


def cmd_bench(args) -> int:
    from . import bench
    from .driver import device_context

    device_context()  # one line and exit 2 where there is no GPU, before anything else
    if args.sweep:
        from . import sweep
        return sweep.main(Path(args.output), args.warmup, args.repeats)
    if args.ablate:
        from . import ablation
        return ablation.main(Path(args.output), quick=args.quick, time_limit_s=args.time_limit)
    return bench.main(args.quick, Path(args.output), tuple(args.cells.split(",")), args.warmup,
                      args.repeats)


def _environment(torch) -> dict:
    """Device, driver and library versions and the commit, for benchmark records."""
    import os
    import subprocess

    import pycuda.driver as cuda

    from .driver import device_context

    commit = os.environ.get("RNNCC_COMMIT")
    if commit is None:
        git = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parent)
        commit = git.stdout.strip() if git.returncode == 0 else "unknown"
    env = {"device": device_context().device.name(), "driver": cuda.get_driver_version(),
           "rnncc": __version__, "commit": commit,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if torch is not None:
        env |= {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version()}
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rnncc", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        description="Compile stacked recurrent networks (LSTM, GRU, RNN; skip connections) "
                    "into CUDA kernels specialised to the network, and run them from Python.")
    parser.add_argument("--version", action="version", version=f"rnncc {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("compile", help="write one .cu per kernel and plan.json (no GPU needed)",
                       description="Render the model's kernels for a target GPU and write them "
                                   "with the plan that shaped them.")
    _add_plan_options(p, "h100")
    p.add_argument("-o", "--output", default="out", help="output directory (default: out/)")
    p.add_argument("--cubin", action="store_true", help="also build cubins with nvcc (no GPU needed)")
    p.add_argument("--timing", action="store_true",
                   help="build the cubins (cached) and print how long planning and nvcc took")
    p.set_defaults(fn=cmd_compile)

    p = sub.add_parser("explain", help="print every plan decision and its reason",
                       description="Print the plan: per layer each decision, its value and why.")
    _add_plan_options(p, "h100")
    p.add_argument("--json", action="store_true",
                   help="print the plan and the kernels as JSON (for tools)")
    p.add_argument("--resources", action="store_true",
                   help="build the kernels (nvcc, cached) to show their registers and shared memory")
    p.add_argument("--timeline", metavar="PNG",
                   help="draw the schedule's predicted timeline (layers against time) as a PNG")
    p.add_argument("--measure", action="store_true",
                   help="with --timeline, on the GPU: also run the model once and draw its "
                        "timeline as measured with events")
    p.set_defaults(fn=cmd_explain)

    p = sub.add_parser("run", help="GPU: run random inputs, check against the reference, time it",
                       description="Run the model on random inputs on the GPU, check it against "
                                   "the float64 reference (and torch.nn, when the model is a plain "
                                   "stack), and print the time per step.")
    _add_plan_options(p, "device")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--no-check", action="store_true", help="skip the reference check")
    p.add_argument("--no-torch", action="store_true", help="do not time torch.nn beside rnncc")
    p.add_argument("--json", help="also write the timings to this JSON file")
    p.set_defaults(fn=cmd_run)

    p = sub.add_parser("bench", help="GPU: rnncc beside torch.nn (cuDNN), table + JSON + PNG",
                       description="Time rnncc and torch.nn.LSTM/GRU (cuDNN) side by side in one "
                                   "process on the rows of the performance targets (S=256, one "
                                   "layer): each configuration is checked against cuDNN, then timed.")
    p.add_argument("--quick", action="store_true", help="a few configurations, about a minute")
    p.add_argument("--cells", default="lstm,gru", help="comma-separated: lstm,gru (default both)")
    p.add_argument("-o", "--output", default="benchmarks/results", help="where the JSON and PNG go")
    p.add_argument("--warmup", type=int, default=3)
    # 30: with 10, the median of a sub-millisecond row moved by up to 10% between runs
    # (twin ÷ rnncc 1.02–1.15 where the two run the same kernels).
    p.add_argument("--repeats", type=int, default=30, help="timed calls a side (median)")
    p.add_argument("--sweep", action="store_true",
                   help="instead: rnncc against cuDNN captured in a CUDA graph over the shapes "
                        "people use (LSTM/GRU, fp32/fp16, 1-2 layers, H, B and S grids); JSON + "
                        "heatmap PNG")
    p.add_argument("--ablate", action="store_true",
                   help="instead: force and time every alternative of layout, persistence and "
                        "gemm over the grid of shapes; JSON + a PNG per decision (resumes)")
    p.add_argument("--time-limit", type=float,
                   help="--ablate: stop starting new points after this many seconds")
    p.set_defaults(fn=cmd_bench)

    args = parser.parse_args(argv)
    from .errors import RnnccError

    try:
        return args.fn(args)
    except RnnccError as exc:
        print(f"rnncc {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
