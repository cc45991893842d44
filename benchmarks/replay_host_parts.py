"""Where an eager call replayed from a CUDA graph spends what its graph replay does not: issue
15's 4 × LSTM fp32 exact H=512 B=8 row reads 2.044 ms eager against 1.918 in a graph
(bench-h100-2026-11-28-at-ab50e94.json), and 8× nn.LSTM's eager time needs ≤ 2.00.

`rnncc bench` times an eager call between two events with the GPU drained before it. For a
call replayed from a graph (runtime._graph_replayed → call_graphs.CallGraphs._replay), that
span is: the host's work until its first GPU operation (the replay key, the input's copy
into the graph's), the copy, the graph's launch and run, and the outputs' copies out. Here
the same call is timed so, with events and host clocks at the seams (CallGraphs._replay
replaced by a copy of it that records them), 30 times after 3 warm-up calls, beside the
graph's replays back to back (rnncc.timing.time_graph) and the call as rnncc runs it. The
copy copies the inputs in and the outputs out two ways, measured in turn in one process:
``foreach`` (one torch._foreach_copy_ each way, as rnncc copies them), ``copy_into``
(copy_large_apart below: the large tensors a copy each, the rest in one foreach copy) and,
in the A/B, ``driver`` (a cuMemcpyDtoDAsync each through rnncc.driver, no torch dispatch).

    python3 benchmarks/replay_host_parts.py [--case cell,dtype,H,B,S,layers ...] > benchmarks/results/replay-host-parts-<gpu>-<date>.txt
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import rnncc
from rnncc import call_graphs
from rnncc.timing import time_graph, time_interleaved

CASES = ["lstm,float32,512,8,256,4", "lstm,float16,1024,8,256,4", "lstm,float16,512,8,256,8"]
REPEATS = 30


# copy_large_apart: the large tensors a copy each, the small ones in one foreach copy. Written
# here first and measured; rnncc.call_graphs.copy_into is it, landed at 3a64af3.
copy_large_apart = call_graphs.copy_into


def copy_by_driver(targets, sources) -> None:
    """The copies as raw cuMemcpyDtoDAsync calls on the current stream (rnncc.driver), for
    contiguous pairs of one dtype; the rest by one foreach copy (a third way, measured)."""
    from rnncc import driver
    stream = torch.cuda.current_stream().cuda_stream
    rest_targets, rest_sources = [], []
    for target, source in zip(targets, sources, strict=True):
        if target.is_contiguous() and source.is_contiguous() and target.dtype == source.dtype:
            driver.copy_on_device(target.data_ptr(), source.data_ptr(), target.nbytes, stream)
        else:
            rest_targets.append(target)
            rest_sources.append(source)
    if rest_targets:
        torch._foreach_copy_(rest_targets, rest_sources)


COPIES = {"foreach": torch._foreach_copy_, "copy_into": copy_large_apart, "driver": copy_by_driver}


def replay_with(copy):
    """CallGraphs._replay (its ``separate`` branch, the forward's) with its copies made by
    ``copy``, nothing else changed."""
    def replay(captured, inputs):
        present = [t for t in inputs if t is not None]
        with captured.lock:
            copy(captured.inputs, present)
            captured.graph.replay()
            mine = [torch.empty_like(t) for t in captured.statics]
            copy(mine, captured.statics)
        return mine
    return staticmethod(replay)


class Seams:
    """CallGraphs._replay with host clocks and GPU events at its seams (a copy of its
    ``separate`` branch, the forward's), its copies made the ``copies`` way."""

    def __init__(self, copies: str):
        self.copy = COPIES[copies]
        self.host: dict[str, float] = {}
        self.events: dict[str, torch.cuda.Event] = {}

    def _event(self, name: str) -> None:
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        self.events[name] = e

    def replay(self, captured, inputs):
        self.host["enter"] = time.perf_counter()
        present = [t for t in inputs if t is not None]
        with captured.lock:
            self._event("before copy in")
            self.copy(captured.inputs, present)
            self._event("before replay")
            self.host["before replay"] = time.perf_counter()
            captured.graph.replay()
            self.host["after replay"] = time.perf_counter()
            self._event("after replay")
            mine = [torch.empty_like(t) for t in captured.statics]
            self.copy(mine, captured.statics)
            self._event("after copy out")
        self.host["leave"] = time.perf_counter()
        return mine


# Host functions on the replayed call's path, timed (inclusive) in a pass of their own.
HOST_PARTS = [("runtime", "CompiledModel", "_replayed"), ("runtime", "CompiledModel", "check_errors"),
              ("runtime", "CompiledModel", "_replay_key"), ("runtime", "CompiledModel", "_graph_replayed"),
              ("call_graphs", "CallGraphs", "run"), ("call_graphs", None, "signature"),
              ("call_program", "CallProgram", "result_of")]


def wrap_host_parts(log: dict[str, float]) -> list[tuple[object, str, object]]:
    """Wraps each HOST_PARTS function to add its host seconds to log; returns what to restore."""
    import importlib
    restore = []
    for module_name, cls, name in HOST_PARTS:
        module = importlib.import_module(f"rnncc.{module_name}")
        owner = getattr(module, cls) if cls else module
        raw = owner.__dict__[name]
        fn = raw.__func__ if isinstance(raw, staticmethod) else raw
        label = f"{cls + '.' if cls else ''}{name}"

        def wrapper(*args, _fn=fn, _label=label, **kwargs):
            t = time.perf_counter()
            try:
                return _fn(*args, **kwargs)
            finally:
                log[_label] = log.get(_label, 0.0) + time.perf_counter() - t
        setattr(owner, name, staticmethod(wrapper) if isinstance(raw, staticmethod) else wrapper)
        restore.append((owner, name, raw))
    return restore


def host_parts(compiled, x) -> list[str]:
    """Median host µs of each HOST_PARTS function in a replayed call (rnncc's own copies)."""
    log: dict[str, float] = {}
    per_call: list[dict[str, float]] = []
    restore = wrap_host_parts(log)
    try:
        with torch.no_grad():
            for _ in range(3):
                compiled(x)
            for _ in range(REPEATS):
                torch.cuda.synchronize()
                log.clear()
                t0 = time.perf_counter()
                compiled(x)
                log["the whole call"] = time.perf_counter() - t0
                per_call.append(dict(log))
    finally:
        for owner, name, raw in restore:
            setattr(owner, name, raw)
    lines = [f"host parts of the call as rnncc runs it (each wrapped, inclusive), median of {REPEATS} (µs):"]
    for name in per_call[0]:
        lines.append(f"  {name:34s} {statistics.median(c[name] for c in per_call) * 1e6:9.1f}")
    return lines


def ab_copies(compiled, x) -> list[str]:
    """The call as rnncc runs it but for its replay's copies, made each of the COPIES ways,
    interleaved call by call in one process (timing.time_interleaved, as the bench times
    eager calls)."""
    original = call_graphs.CallGraphs.__dict__["_replay"]

    def with_copies(copy):
        replay = replay_with(copy)

        def call():
            call_graphs.CallGraphs._replay = replay
            try:
                return compiled(x)
            finally:
                call_graphs.CallGraphs._replay = original
        return call
    with torch.no_grad():
        timed = time_interleaved({name: with_copies(copy) for name, copy in COPIES.items()},
                                 3, 2 * REPEATS, settle=1)
    return [f"A/B, the call as rnncc runs it, interleaved ({2 * REPEATS} each), median µs: "
            + ", ".join(f"{k} {t.median_ms * 1e3:.1f} ({t.min_ms * 1e3:.1f}-{t.max_ms * 1e3:.1f})"
                        for k, t in timed.items())]


def copy_probe(nbytes: int) -> list[str]:
    """Host and GPU µs of one copy of ``nbytes`` on the device, each of three ways. The GPU's
    copies are queued behind a sleep kernel longer than their queueing, so that the events
    time the copies, not the host."""
    src = torch.empty(nbytes // 4, device="cuda")
    dst = torch.empty_like(src)
    ways = {"copy_": lambda: dst.copy_(src), "foreach": lambda: torch._foreach_copy_([dst], [src]),
            "driver": lambda: copy_by_driver([dst], [src])}
    lines = []
    for name, fn in ways.items():
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(200):
            fn()
        host = (time.perf_counter() - t) / 200 * 1e6
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(50_000_000)  # ~25 ms at 1.98 GHz: longer than queueing 200 copies
        start.record()
        for _ in range(200):
            fn()
        end.record()
        end.synchronize()
        lines.append(f"copy of {nbytes / 2**20:.2f} MiB by {name}: host {host:.1f} µs a call, "
                     f"GPU {start.elapsed_time(end) / 200 * 1e3:.1f} µs a copy back to back")
    return lines


def measure(case: str) -> list[str]:
    cell, dtype, H, B, S, L = case.split(",")
    H, B, S, L = int(H), int(B), int(S), int(L)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    module = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cell](H, H, num_layers=L).to(
        "cuda", getattr(torch, dtype)).eval()
    model, weights = rnncc.from_torch(module)
    compiled = rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=S)
    x = torch.randn(S, B, H, device="cuda", dtype=getattr(torch, dtype))
    lines = [f"== {L} x {cell} {dtype} H={H} B={B} S={S}: {compiled.plan.schedule.value.label}"]
    with torch.no_grad():
        plain = time_interleaved({"rnncc": lambda: compiled(x)}, 3, REPEATS, settle=1)["rnncc"].median_ms
        graph = time_graph(lambda: compiled(x), 3, REPEATS).median_ms
    lines.append(f"eager call {plain * 1e3:.1f} µs (as rnncc runs it, median of {REPEATS}); its graph replayed "
                 f"back to back {graph * 1e3:.1f} µs; difference {(plain - graph) * 1e3:.1f} µs")
    original = call_graphs.CallGraphs.__dict__["_replay"]
    for copies in ("foreach", "copy_into"):
        seams = Seams(copies)
        call_graphs.CallGraphs._replay = staticmethod(seams.replay)
        rows: list[dict[str, float]] = []
        try:
            with torch.no_grad():
                for _ in range(3):
                    compiled(x)
                for _ in range(REPEATS):
                    compiled(x)  # settle, as the bench does
                    torch.cuda.synchronize()
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    t0 = time.perf_counter()
                    compiled(x)
                    t1 = time.perf_counter()
                    end.record()
                    end.synchronize()
                    if "enter" not in seams.host:
                        raise RuntimeError("the call was not replayed from a graph")
                    ev, h = seams.events, seams.host
                    rows.append({
                        "call": start.elapsed_time(end) * 1e3,
                        "gpu: start to copy in": start.elapsed_time(ev["before copy in"]) * 1e3,
                        "gpu: copy in": ev["before copy in"].elapsed_time(ev["before replay"]) * 1e3,
                        "gpu: the graph": ev["before replay"].elapsed_time(ev["after replay"]) * 1e3,
                        "gpu: copies out": ev["after replay"].elapsed_time(ev["after copy out"]) * 1e3,
                        "gpu: after the copies": ev["after copy out"].elapsed_time(end) * 1e3,
                        "host: to _replay": (h["enter"] - t0) * 1e6,
                        "host: to the replay": (h["before replay"] - t0) * 1e6,
                        "host: graph.replay()": (h["after replay"] - h["before replay"]) * 1e6,
                        "host: the whole call": (t1 - t0) * 1e6,
                    })
                    seams.host.clear()
        finally:
            call_graphs.CallGraphs._replay = original
        lines.append(f"copies by {copies}, the wrapped call, median of {REPEATS} (µs):")
        for name in rows[0]:
            vals = [r[name] for r in rows]
            lines.append(f"  {name:26s} {statistics.median(vals):9.1f}   ({min(vals):.1f}-{max(vals):.1f})")
    return lines + host_parts(compiled, x) + ab_copies(compiled, x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", help="cell,dtype,H,B,S,layers")
    args = parser.parse_args()
    print(f"# benchmarks/replay_host_parts.py, {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for n in (1 << 16, 1 << 20, 4 << 20):
        print("\n".join(copy_probe(n)), flush=True)
    # The first case once more at the end: the first in a process runs on a colder host.
    cases = args.case or CASES
    for case in cases + cases[:1]:
        print("\n".join(measure(case)), flush=True)


if __name__ == "__main__":
    main()
