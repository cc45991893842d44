"""A/B of `rnncc bench` rows between two checkouts of rnncc: run once per checkout (its
directory first on PYTHONPATH), alternately, on one machine; each run prints one JSON line
per row with rnncc's and cuDNN's median ms from the same process, eager and in CUDA graphs.

    PYTHONPATH=old:$PYTHONPATH python3 benchmarks/ab_rows.py old
    PYTHONPATH=.:$PYTHONPATH python3 benchmarks/ab_rows.py new [ROWS]
    PYTHONPATH=old python3 benchmarks/ab_rows.py --build-only [ROWS]   (no GPU: fill the
        cubin cache with the rows' kernels, eager and graph plans, for the preset named by
        RNNCC_BUILD_TARGET, default h200, the GPU lent since 2026-11-28;
        ROWS "bench": the bench's forward rows and graph_plans.py's points)

ROWS names a set of rows (default: "small", the small-batch rows; "b64": the rows where a
grid block runs several batch tiles a step; "fma": the rows and sweep points planned on the
FMA grid kernel; "training": the bench's forward+backward rows; "training_half": its float16 ones; "training_stacks": training steps of stacks; "training_bidirectional": of bidirectional ones; "training_float32": its float32 ones; "staged": the float32 layers on the staged FMA grid kernel and the float32 training row; "stacks": its stacks; "pairs": the rows stage-h-pairs.patch is about; "clusters": the registers form's rows with several clusters at once; "short": short calls on persistent kernels; "one_step": calls of one step; "barrier_moves":
the shapes whose plan moves if the grid models subtract the acquire poll's saving;
"stage_groups": the tensor grid kernel's rows; "schedule_moves": stacks whose pipelined plan
moved with the schedule's prices of 2026-11-27; "hybrid_moves": single layers and stacks
planned on grid tiles with W_hh partly in registers; "replay_moves": stacks whose eager plan
moves when a pipelined eager call is priced as the CUDA graph the runtime replays it from;
"refit_moves": float32 layers whose plan moves with the staged and K-split models refitted;
"unaligned": the tensor grid kernel where h's rows are not whole 16-byte vectors;
"registers_pairs": LSTM and GRU layers on the registers-form cluster kernel, W_hh all or
partly in registers; "unaligned_refit": stacks the unaligned library refit moves).
"""

from __future__ import annotations

import json
import os
import sys

import rnncc
from rnncc.bench import Config, run_config, stack_configs, training_configs

ROWS = [Config("lstm", "float16", 256, 8), Config("lstm", "float16", 512, 8),
        Config("lstm", "float16", 1024, 8), Config("gru", "float16", 256, 8),
        Config("lstm", "float32", 256, 8), Config("lstm", "bfloat16", 1024, 8),
        Config("gru", "float32", 1024, 64)]
ROW_SETS = {"small": ROWS,
            "b64": [Config("lstm", "float16", 1024, 64, seq_len=128),
                    Config("lstm", "bfloat16", 1024, 64), Config("gru", "bfloat16", 1024, 64),
                    Config("lstm", "float32", 1024, 64, precision="tensor"),
                    Config("gru", "float16", 1024, 64, seq_len=35),
                    Config("lstm", "float16", 1024, 64, seq_len=35)],
            "fma": [Config("lstm", "float32", 1024, 8), Config("gru", "float32", 1024, 8),
                    Config("lstm", "float32", 1024, 1), Config("gru", "float32", 1024, 1),
                    Config("gru", "float32", 512, 4, seq_len=2200),
                    Config("lstm", "float32", 650, 1, seq_len=35),
                    Config("lstm", "float32", 1024, 4), Config("gru", "float32", 650, 1, seq_len=2200)],
            # stage-h-pairs.patch: the tensor grid rows where a block stages h for 64 rows,
            # GNMT's encoder at B=64 (its layers on that kernel) and at B=8 (not to lose there).
            "pairs": [Config("lstm", "float16", 1024, 64, seq_len=128),
                      Config("lstm", "bfloat16", 1024, 64), Config("gru", "bfloat16", 1024, 64),
                      Config("lstm", "float32", 1024, 64, precision="tensor"),
                      Config("lstm", "float16", 1024, 8),
                      Config("lstm", "float16", 1024, 64, seq_len=128, layers=8, model="gnmt"),
                      Config("lstm", "float16", 1024, 8, seq_len=128, layers=8, model="gnmt")],
            "training": training_configs(),
            # The half training rows, whose backward is replayed from a CUDA graph with its
            # inputs copied in (call_graphs.copy_into, 3a64af3).
            "training_half": [c for c in training_configs() if c.dtype == "float16"],
            # Training steps of stacks (train_short_and_odd.py's shapes without dropout): PTB
            # medium and small, a 4-layer LSTM at B=32, a GRU at an odd batch. Their layers'
            # weight gradients run beside each other and dx (backward.side_streams).
            "training_stacks": [Config(c, d, h, b, seq_len=s, layers=n, passes="forward+backward")
                                for c, d, h, b, s, n in (("lstm", "float16", 650, 20, 35, 2),
                                                         ("lstm", "float32", 200, 20, 35, 2),
                                                         ("lstm", "float16", 512, 32, 64, 4),
                                                         ("gru", "float16", 256, 13, 50, 2))],
            # Training steps of bidirectional stacks, whose halves backpropagate at once
            # (backward.lane_streams): cluster forms at small batches, the K-split at fp32 B=64.
            "training_bidirectional": [Config(c, d, h, b, seq_len=s, layers=n, bidirectional=True,
                                              passes="forward+backward", **({"precision": "exact"} if d == "float32" else {}))
                                       for c, d, h, b, s, n in (("lstm", "float16", 512, 8, 256, 2),
                                                                ("gru", "float16", 256, 13, 50, 2),
                                                                ("lstm", "float32", 200, 20, 35, 1),
                                                                ("lstm", "bfloat16", 1024, 8, 64, 1),
                                                                ("lstm", "float32", 1024, 64, 32, 1))],
            # The float32 training row (issue 17): the staged forward and the K-split backward.
            "training_float32": [c for c in training_configs() if c.dtype == "float32"],
            # Layers the staged FMA grid kernel runs (float32 exact, B >= 16), odd shapes among
            # them, and the float32 training row (its forward staged, its backward the K-split).
            "staged": [Config("lstm", "float32", 1024, 64, precision="exact"),
                       Config("gru", "float32", 1024, 64, precision="exact"),
                       Config("lstm", "float32", 1024, 32, precision="exact"),
                       Config("lstm", "float32", 650, 20, seq_len=128, precision="exact"),
                       Config("gru", "float32", 768, 48, seq_len=128, precision="exact"),
                       Config("lstm", "float32", 1024, 64, precision="exact", passes="forward+backward")],
            "stacks": stack_configs(),
            # The issue-17 cluster row alone, for a short device call (stage_h's change at e0ef1a8).
            "cluster_one": [Config("lstm", "float16", 512, 8)],
            # The rows that read slower at 48d1525: the registers form, several clusters at once.
            "clusters": [Config("lstm", "bfloat16", 256, 64), Config("gru", "bfloat16", 256, 64),
                         Config("gru", "float32", 256, 64, precision="tensor"),
                         Config("lstm", "float32", 256, 64, precision="tensor"),
                         Config("lstm", "float16", 512, 8, layers=2, bidirectional=True),
                         Config("lstm", "float16", 512, 8)],
            # Short calls on persistent kernels, where the h_n copy after the launch was a node
            # of its own in a graph (~2 µs).
            "short": [Config("lstm", "float16", 333, 3, seq_len=16), Config("lstm", "float16", 512, 8, seq_len=16),
                      Config("gru", "float16", 777, 5, seq_len=16), Config("lstm", "float32", 512, 3, seq_len=4),
                      Config("gru", "bfloat16", 256, 3, seq_len=12),
                      Config("lstm", "float16", 512, 7, seq_len=8, layers=2),
                      Config("gru", "float32", 1000, 13, seq_len=16)],
            # One-step calls whose graph-plan times moved between runs at 48d1525 and 522ceb4.
            "one_step": [Config("lstm", "float16", 650, 5, seq_len=1), Config("gru", "float32", 256, 1, seq_len=1),
                         Config("lstm", "float32", 650, 5, seq_len=1), Config("lstm", "float16", 1024, 1, seq_len=1)],
            # The shapes whose plan moves to a grid kernel when the grid forms' prices fall by
            # the acquire poll's saving (16 of 1500 shapes of a CPU census), and the bench's
            # grid rows at H=1024 B=8.
            "barrier_moves": [Config("lstm", "float16", 512, 128), Config("gru", "float16", 512, 128),
                              Config("lstm", "bfloat16", 512, 128, seq_len=16),
                              Config("gru", "float32", 256, 128), Config("gru", "float32", 333, 1),
                              Config("gru", "float16", 2048, 20, seq_len=4),
                              Config("lstm", "float16", 1024, 8), Config("gru", "float16", 1024, 8),
                              Config("lstm", "float32", 1024, 8)],
            # The tensor grid kernel's rows, a stack of them, and a control whose H is not
            # whole 16-byte vectors (h staged by K range was tried on these: docs/design-notes.md).
            "stage_groups": [Config("lstm", "float16", 1024, 8), Config("gru", "float16", 1024, 8),
                             Config("lstm", "bfloat16", 1024, 8), Config("lstm", "float32", 1024, 8, precision="tensor"),
                             Config("lstm", "float16", 1024, 13, seq_len=4), Config("lstm", "float16", 1024, 8, layers=4),
                             Config("gru", "float16", 777, 5, seq_len=16)],
            # Stacks whose pipelined plan moves when a chunk's projection is chosen by its GPU
            # time and tensor-core partitions beside 2 or 3 others start as beside 1 (a
            # CPU census of 1006 stacks: 105 moved): bench rows, chunks and partitions, plans
            # that were sequential, and projections alone.
            "schedule_moves": [Config("lstm", "float16", 1024, 8, layers=4),
                               Config("lstm", "float16", 1024, 8, seq_len=128, layers=8, model="gnmt"),
                               Config("lstm", "float16", 1024, 8, seq_len=100, layers=3),
                               Config("gru", "bfloat16", 1024, 8, seq_len=128, layers=3),
                               Config("lstm", "float16", 333, 64, seq_len=35, layers=2),
                               Config("lstm", "float32", 256, 20, seq_len=35, layers=4),
                               Config("lstm", "float16", 512, 20, seq_len=35, layers=8),
                               Config("gru", "float32", 512, 8, seq_len=16, layers=2),
                               Config("lstm", "float16", 1024, 1, layers=2),
                               Config("gru", "float16", 512, 3, layers=2),
                               Config("lstm", "bfloat16", 650, 1, seq_len=128, layers=4)],
            # Shapes whose plan moves to a grid tile with W_hh partly in registers
            # (TensorTile.register_steps): single layers of H=1536/2048 from a launch a step
            # or a smaller grid tile, stacks of H=1536 from sequential to pipelined, fp16
            # H=1024 stacks from 3 to 4 partitions (CPU census of 2026-11-28).
            "hybrid_moves": [Config("lstm", "float16", 1536, 20), Config("lstm", "bfloat16", 1536, 64),
                             Config("gru", "float16", 1536, 20), Config("gru", "bfloat16", 1536, 64),
                             Config("lstm", "float16", 2048, 8), Config("lstm", "bfloat16", 2048, 20),
                             Config("gru", "float16", 2048, 1), Config("gru", "float16", 2048, 64),
                             Config("lstm", "float16", 1024, 8, layers=4),
                             Config("lstm", "float16", 1024, 8, seq_len=128, layers=8, model="gnmt"),
                             Config("lstm", "float16", 1024, 3, seq_len=100, layers=4),
                             Config("lstm", "float16", 1536, 8, seq_len=128, layers=8),
                             Config("gru", "bfloat16", 1536, 1, layers=8),
                             Config("lstm", "bfloat16", 1536, 1, seq_len=128, layers=3),
                             Config("gru", "float16", 1536, 8, seq_len=35, layers=8)],
            # The staged forward's and the K-split backward's step models refitted to their
            # tensor-map kernels (2026-11-29): float32 layers whose plan moves, by the CPU census
            # of 672 shapes × eager/graph: 77 forward plans to the staged kernel (from the
            # cluster form, the registers form, cuBLASLt steps), 136 backward tiles.
            "refit_moves": [Config("lstm", "float32", 256, 64, precision="exact"),
                            Config("gru", "float32", 300, 20, seq_len=35, precision="exact"),
                            Config("lstm", "float32", 300, 32, precision="exact"),
                            Config("lstm", "float32", 1024, 16, precision="exact"),
                            Config("gru", "float32", 512, 16, precision="exact"),
                            Config("lstm", "float32", 768, 128, precision="exact"),
                            Config("lstm", "float32", 512, 64, precision="exact", passes="forward+backward"),
                            Config("gru", "float32", 1024, 48, precision="exact", passes="forward+backward"),
                            Config("lstm", "float32", 650, 64, seq_len=128, precision="exact",
                                   passes="forward+backward"),
                            Config("gru", "float32", 768, 32, precision="exact", passes="forward+backward")],
            # polled-exchange.patch: every row on the tensor grid kernel (its exchange polls y
            # instead of a grid barrier a step): small and large batches, a stack, GNMT at
            # both batches, TF32, and shapes whose h rows are not whole 16-byte vectors.
            "polled": [Config("lstm", "float16", 1024, 8), Config("lstm", "float16", 1024, 16),
                       Config("gru", "float16", 1024, 16), Config("lstm", "float16", 1024, 32),
                       Config("lstm", "bfloat16", 1024, 8), Config("gru", "float16", 1024, 8),
                       Config("lstm", "float16", 1024, 64, seq_len=128),
                       Config("lstm", "float32", 1024, 8, precision="tensor"),
                       Config("lstm", "float16", 1024, 8, layers=4),
                       Config("lstm", "float16", 1024, 8, seq_len=128, layers=8, model="gnmt"),
                       Config("lstm", "float16", 1024, 64, seq_len=128, layers=8, model="gnmt"),
                       Config("lstm", "float16", 1024, 13, seq_len=4), Config("gru", "float16", 777, 5, seq_len=16),
                       Config("lstm", "float16", 650, 20, seq_len=35)],
            # The polled exchange's variants (backoff, polls of one vector, weak loads): rows it
            # won and lost at first (results/polled-exchange-ab-h200-2026-11-28.txt).
            "polled_small": [Config("lstm", "float16", 1024, 8), Config("lstm", "float16", 1024, 16),
                             Config("lstm", "float16", 1024, 64, seq_len=128),
                             Config("gru", "float16", 777, 5, seq_len=16),
                             Config("lstm", "float16", 1024, 8, layers=4),
                             Config("lstm", "float16", 1024, 8, seq_len=128, layers=8, model="gnmt")],
            # Stacks whose SM partitions' threads stage 2 to 10 16-byte vectors of h a step: at
            # 7b771a4 all of them polled y (one L2 trip a vector), since 6b41ccc only those of
            # 2 (the last two rows, measured faster); for an A/B of a polled form at more.
            "polled_partitions": [Config("lstm", "float16", 1024, 16, layers=4),
                                  Config("lstm", "float16", 1024, 16, layers=2),
                                  Config("gru", "float16", 1024, 1, layers=2),
                                  Config("gru", "float16", 1536, 16, layers=2),
                                  Config("gru", "float16", 1536, 8, layers=4),
                                  Config("lstm", "bfloat16", 1536, 1, layers=4),
                                  Config("lstm", "float16", 1024, 8, layers=4),
                                  Config("lstm", "float16", 1024, 8, seq_len=128, layers=8, model="gnmt")],
            # The tensor grid kernel where h's rows are not whole 16-byte vectors (H=777, 1100:
            # stage_h's dense-run path) and batches that leave rows of a tile empty, mma.sync
            # and wgmma tiles, a bidirectional stack (strided h rows), and an aligned control:
            # zeroing h's padding once a launch instead of every step (2026-11-29).
            "unaligned": [Config("lstm", "float16", 777, 1), Config("lstm", "float16", 777, 3),
                          Config("gru", "float16", 777, 5), Config("lstm", "float16", 777, 13),
                          Config("lstm", "float16", 1100, 1), Config("gru", "float16", 1100, 3),
                          Config("lstm", "float16", 1100, 8), Config("lstm", "float16", 1100, 20),
                          Config("lstm", "bfloat16", 1100, 13), Config("gru", "float16", 1100, 33),
                          Config("lstm", "float16", 777, 3, layers=2, bidirectional=True),
                          Config("lstm", "float16", 1024, 8)],
            # The registers-form cluster kernel's pair loop (static-for-pairs.patch): plain
            # (K in registers) and hybrid (W_hh partly in shared memory), fp16 and bf16.
            "registers_pairs": [Config("lstm", "float16", 256, 8), Config("lstm", "float16", 512, 8),
                                Config("gru", "float16", 384, 8), Config("lstm", "float16", 650, 8),
                                Config("gru", "float16", 700, 4), Config("lstm", "bfloat16", 700, 20),
                                Config("gru", "float16", 650, 64)],
            # Stacks whose eager plan moves when a pipelined eager call is priced as the CUDA
            # graph the runtime replays it from (schedule.replayed; CPU census of 2026-11-28):
            # to shorter chunks, cuBLASLt's projections, sequential ↔ pipelined.
            "replay_moves": [Config("lstm", "float16", 1024, 8, layers=4),
                             Config("lstm", "float16", 1024, 8, seq_len=128, layers=8, model="gnmt"),
                             Config("lstm", "float16", 512, 8, layers=8),
                             Config("lstm", "float16", 256, 8, seq_len=100, layers=8),
                             Config("gru", "bfloat16", 333, 3, seq_len=100, layers=8),
                             Config("lstm", "bfloat16", 650, 20, seq_len=16, layers=4),
                             Config("gru", "bfloat16", 768, 64, seq_len=100, layers=2),
                             Config("lstm", "float32", 512, 8, seq_len=100, layers=8),
                             Config("lstm", "float16", 1024, 8, seq_len=100, layers=3),
                             Config("gru", "float16", 650, 20, layers=2),
                             Config("lstm", "float16", 128, 64, layers=4),
                             Config("lstm", "float32", 256, 20, seq_len=35, layers=8),
                             Config("gru", "float16", 256, 1, seq_len=100, layers=3)]}
# Pipelined stacks, for an A/B of how a pipelined call runs its chunks (projections ahead of
# the recurrence): the bench's stack rows (GNMT B=64 runs sequential: a control) and the
# stacks above.
ROW_SETS["pipelined"] = list(dict.fromkeys(
    [Config("lstm", "float16", 1024, 8, layers=4), Config("lstm", "float16", 512, 8, layers=8),
     Config("lstm", "float32", 512, 8, precision="exact", layers=4),
     Config("lstm", "float16", 1024, 64, seq_len=128, layers=8, model="gnmt")]
    + ROW_SETS["replay_moves"]))
# Plans that variants/projection-ahead-priced.patch moves (benchmarks/schedule_census.py over
# 200 stacks and the bench's, H100 preset, 2026-11-28: 34 of 408 plans moved, 17 of them from
# sequential to pipelined, 17 to shorter chunks), one of each kind of move, and the issue row
# it moves to chunks of 16 (which lost 1.07x in projection-ahead-ab-h200-2026-11-28.txt).
ROW_SETS["priced_moves"] = [
    Config("gru", "bfloat16", 256, 64, seq_len=35, layers=4), Config("lstm", "float32", 650, 1, seq_len=128, layers=2),
    Config("gru", "float32", 256, 20, seq_len=128, layers=8), Config("lstm", "bfloat16", 333, 20, layers=8),
    Config("lstm", "float32", 768, 8, seq_len=35, layers=2), Config("lstm", "float32", 333, 8, seq_len=128, layers=8),
    Config("lstm", "bfloat16", 333, 64, seq_len=100, layers=2), Config("lstm", "float16", 256, 3, seq_len=128, layers=4),
    Config("gru", "float32", 333, 64, seq_len=35, layers=8), Config("gru", "float32", 768, 1, seq_len=100, layers=4),
    Config("gru", "float16", 333, 64, seq_len=100, layers=2), Config("lstm", "float32", 1024, 3, layers=8),
    Config("lstm", "float32", 512, 8, precision="exact", layers=4)]

# Stacks that variants/unaligned-library-refit.patch moves (H200 preset, 2026-11-29): GRU bf16
# H=777 B=5 from chunks of 16 in 4 partitions to chunks of 32 in 3 polling y (its grid tile),
# LSTM bf16 H=333 B=64 to chunks of 32, GRU bf16 H=650 B=64's projections to cuBLASLt.
ROW_SETS["unaligned_refit"] = [
    Config("gru", "bfloat16", 777, 5, seq_len=100, layers=4), Config("lstm", "bfloat16", 333, 64, seq_len=100, layers=2),
    Config("gru", "bfloat16", 650, 64, seq_len=128, layers=4)]


def build_target() -> str:
    """The preset that --build-only plans for: the GPU the device tool lends (an H200 since
    2026-11-28; an H100 before), so that the device finds the rows' kernels in the cache."""
    return os.environ.get("RNNCC_BUILD_TARGET", "h200")


def build_only(configs: list) -> None:
    """Plan every row for the preset RNNCC_BUILD_TARGET (default h200), eager and for graphed calls, and build the kernels
    into the cubin cache (the twins' are built on the GPU, at their first call)."""
    from bench_plans import model_of
    from rnncc.build import compile_all

    kernels = {}
    for cfg in configs:
        if cfg.packed or cfg.passes != "forward":
            continue  # other harnesses, built where they run
        model = model_of(cfg)
        for launches in (None, "graph"):
            m = rnncc.compile(model, target=build_target(), batch=cfg.batch, seq_len=cfg.seq_len,
                              precision=cfg.math, launches=launches)
            kernels |= {k.name: k for k in m.kernels}
    compile_all(list(kernels.values()), "sm_90a")


if __name__ == "__main__":
    label = sys.argv[1]
    if label == "--build-only":
        if len(sys.argv) > 2 and sys.argv[2] == "bench":  # the bench's rows and graph_plans.py's points
            from graph_plans import configs
            from rnncc.bench import issue_configs, stack_configs
            build_only(list(dict.fromkeys(configs() + issue_configs() + stack_configs())))
        else:
            build_only(ROW_SETS[sys.argv[2] if len(sys.argv) > 2 else "small"])
        sys.exit(0)
    if label.endswith("-noncooperative"):  # the same code with plain launches, for the A/B
        from rnncc import runtime
        launch_ = runtime.CompiledModel._launch
        runtime.CompiledModel._launch = lambda self, ops, k, grid, args, stream, cooperative=False: \
            launch_(self, ops, k, grid, args, stream, False)
    for cfg in ROW_SETS[sys.argv[2] if len(sys.argv) > 2 else "small"]:
        r = run_config(cfg, warmup=3, repeats=20)
        print(json.dumps({"version": label, "rnncc_from": rnncc.__file__, "row": cfg.label,
                          "persistence": r["persistence"], "agree": r.get("agree"),
                          "rnncc_ms": round(r["rnncc_ms"], 4),
                          "cudnn_ms": round(r["cudnn_ms"], 4),
                          "twin_ms": round(r["twin_ms"], 4) if "twin_ms" in r else None,
                          "rnncc_graph_ms": r.get("rnncc_graph_ms"),
                          "cudnn_graph_ms": r.get("cudnn_graph_ms"),
                          "rnncc_graph_plan_ms": r.get("rnncc_graph_plan_ms")}), flush=True)
