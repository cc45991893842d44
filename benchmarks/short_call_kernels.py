"""The kernels of one short call, rnncc beside cuDNN: what each side launches and how long
each kernel runs on the GPU (torch.profiler), rnncc as planned and with persistence none,
without and with an initial state; then both with state captured in a CUDA graph.

    python3 benchmarks/short_call_kernels.py OUT_DIR [CASE ...]   (from the repository root;
        needs a GPU)

A CASE is cell,dtype,H,B[,S] (S defaults to 1), e.g. lstm,float16,1024,16,17; without one,
CASES. Where S > 1 the plan for graphed calls (launches="graph") and persistence "grid" are
shown too. Writes OUT_DIR/short-call-kernels-<gpu>-<date>.txt.
"""
import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

import rnncc
from rnncc.timing import time_graph
from result_files import result_path

CASES = [("lstm", "float16", 1024, 1, 1), ("gru", "float32", 256, 1, 1), ("gru", "float16", 650, 5, 1)]


def case_of(text: str) -> tuple[str, str, int, int, int]:
    """"cell,dtype,H,B[,S]" as a case."""
    cell, dtype, *sizes = text.split(",")
    H, B, S = (int(v) for v in (sizes + ["1"])[:3])
    return cell, dtype, H, B, S


def kernels(fn, calls: int = 5) -> str:
    """Each GPU activity of fn: launches a call × mean µs."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    seen: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type.name == "CUDA":
            seen.setdefault(e.name[:90], []).append(e.device_time)
    return "; ".join(f"{name} {len(v) / calls:.0f}× {sum(v) / len(v):.1f} µs" for name, v in seen.items())


def graph_us(fn) -> float:
    """Median µs of fn captured in a CUDA graph, by replays (rnncc.timing.time_graph; the
    runs kept as -at-356e75d and -at-e035f74 took a mean of 50 replays instead)."""
    return time_graph(fn, 5, 50).median_ms * 1e3


def main(out: str, cases: list[tuple[str, str, int, int, int]]) -> None:
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    commit = os.environ.get("RNNCC_COMMIT", "unknown")
    lines = [f"# benchmarks/short_call_kernels.py at commit {commit}, {torch.cuda.get_device_name()}, "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"]
    for cell, dtype, H, B, S in cases:
        tdt = getattr(torch, dtype)
        torch.manual_seed(0)
        module = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cell](H, H).to("cuda", tdt).eval()
        model, weights = rnncc.from_torch(module)
        x = torch.randn(S, B, H, device="cuda", dtype=tdt)
        h, c = (torch.randn(1, B, H, device="cuda", dtype=tdt) for _ in range(2))
        hx = (h, c) if cell == "lstm" else h
        state = {"l0": (h[0], c[0]) if cell == "lstm" else h[0]}
        with torch.no_grad():
            # (persistence forced, launches): as planned for eager calls, forced to a launch a
            # step; at S > 1 also as planned for graphed calls and forced to the grid kernel.
            forms = [(None, "eager"), ("none", "eager")] + ([(None, "graph"), ("grid", "eager")] if S > 1 else [])
            for mode, launches in forms:
                m = rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=S, launches=launches,
                                  **({"persistence": mode} if mode else {}))
                l = m.plan.layers[0]
                lines.append(f"== {cell} {dtype} H={H} B={B} S={S} persistence={mode or 'planned'}, "
                             f"launches={launches}: {l.persistence.value.mode}, projection "
                             f"{l.projection_tile.value.math}")
                lines.append(f"  rnncc no state: {kernels(lambda: m(x))}")
                lines.append(f"  rnncc state: {kernels(lambda: m(x, state))}")
                lines.append(f"  rnncc graph with state: {graph_us(lambda: m(x, state)):.1f} µs")
            lines.append(f"  cuDNN no state: {kernels(lambda: module(x))}")
            lines.append(f"  cuDNN state: {kernels(lambda: module(x, hx))}")
            lines.append(f"  cuDNN graph with state: {graph_us(lambda: module(x, hx)):.1f} µs")
        print("\n".join(lines[-(3 + 4 * len(forms)):]), flush=True)
    path = result_path(out, "short-call-kernels", "txt")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".", [case_of(a) for a in sys.argv[2:]] or CASES)
