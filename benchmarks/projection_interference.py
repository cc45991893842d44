"""Would producers of the input projection, running beside a recurrent cluster kernel in the
same launch, slow its step? (docs/design-notes.md, "Next for issue 14's H=512 row".) A
proxy, before any kernel is written: rnncc's LSTM fp16 H=512 B=8 S=256 call (its cluster
kernel on 16 SMs), replayed from a CUDA graph, timed alone and while another stream runs
GEMMs of one projection chunk's shape (16 steps × B rows of x against W_ihᵀ, 128 × 2048 × 512,
float32 out) back to back on the SMs the cluster leaves. Also each GEMM's own time: the rate a
producer would have to beat. Needs a GPU.

    python3 benchmarks/projection_interference.py > results/projection-interference-<gpu>-<date>.txt
"""

from __future__ import annotations

import statistics

import torch

import rnncc

H, B, S, CHUNK = 512, 8, 256, 16
ROUNDS = 7


def timed(fn, stream) -> float:
    """ms of fn's work on ``stream``, between two events there."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(stream)
    with torch.cuda.stream(stream):
        fn()
    end.record(stream)
    end.synchronize()
    return start.elapsed_time(end)


def main() -> None:
    torch.manual_seed(0)
    module = torch.nn.LSTM(H, H).to("cuda", torch.float16).eval()
    model, weights = rnncc.from_torch(module)
    compiled = rnncc.compile(model, target="device", weights=weights, batch=B, seq_len=S, launches="graph")
    x = torch.randn(S, B, H, device="cuda", dtype=torch.float16)
    for _ in range(3):
        compiled(x)
    torch.cuda.synchronize()
    recurrent = torch.cuda.CUDAGraph()
    with torch.cuda.graph(recurrent):
        compiled(x)

    w_ih = module.weight_ih_l0.detach()  # [4H, H]
    rows = torch.randn(CHUNK * B, H, device="cuda", dtype=torch.float16)
    side = torch.cuda.Stream()
    gemms_per_graph, calls = 1200, 10  # the GEMMs outlast 10 calls back to back
    with torch.cuda.stream(side):
        for _ in range(3):
            torch.mm(rows, w_ih.t(), out_dtype=torch.float32)
    torch.cuda.synchronize()
    chunks = torch.cuda.CUDAGraph()
    with torch.cuda.graph(chunks, stream=side):
        for _ in range(gemms_per_graph):
            torch.mm(rows, w_ih.t(), out_dtype=torch.float32)

    # The GEMM's kernel and grid: how many SMs a chunk's GEMM occupies at once.
    import json
    import tempfile
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.mm(rows, w_ih.t(), out_dtype=torch.float32)
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        kernels = [(e["name"][:70], e.get("args", {}).get("grid")) for e in json.load(open(f.name))["traceEvents"]
                   if e.get("cat") == "kernel"]
    main_stream = torch.cuda.current_stream()
    alone, beside, gemm_us = [], [], []
    for _ in range(ROUNDS):
        torch.cuda.synchronize()
        alone.append(timed(lambda: [recurrent.replay() for _ in range(calls)], main_stream) / calls)
        torch.cuda.synchronize()
        gemm_us.append(timed(chunks.replay, side) * 1e3 / gemms_per_graph)
        torch.cuda.synchronize()
        # The GEMMs first, on the side stream; the recurrent calls while they run (the GEMMs
        # outlast them: checked below by the side stream's own time).
        with torch.cuda.stream(side):
            chunks.replay()
        beside.append(timed(lambda: [recurrent.replay() for _ in range(calls)], main_stream) / calls)
        torch.cuda.synchronize()
    a, b, g = statistics.median(alone), statistics.median(beside), statistics.median(gemm_us)
    print(f"LSTM fp16 H={H} B={B} S={S}, rnncc's plan {[l.persistence.value.mode for l in compiled.plan.layers]}, "
          f"CUDA-graph replays, median of {ROUNDS}:")
    print(f"  the recurrent call ({calls} back to back) alone: {a:.4f} ms; beside back-to-back projection GEMMs: {b:.4f} ms "
          f"({b / a:.3f}×)")
    print(f"  one GEMM of a chunk ({CHUNK * B} × {4 * H} × {H}): {g:.2f} µs alone, "
          f"{gemms_per_graph} of them {g * gemms_per_graph / 1e3:.2f} ms (outlasting the calls: "
          f"{g * gemms_per_graph / 1e3 > b * calls}); the call's {S // CHUNK} chunks need one every "
          f"{a * 1e3 / (S // CHUNK):.1f} µs")
    print("  the GEMM's kernels (name, grid):", kernels)
    print("  (every round:", [round(v, 4) for v in alone], [round(v, 4) for v in beside], ")")


if __name__ == "__main__":
    main()
