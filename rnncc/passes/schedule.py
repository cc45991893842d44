"""Schedule: how the layers of a call run together.

``sequential`` runs the layers one after another on the caller's stream, each over the
whole sequence. ``pipelined`` gives each layer a stream of its own and cuts the sequence
into chunks of C steps: chunk k of a layer (its input projection, then its recurrent
kernel over those steps) starts once chunk k of every layer it reads is done, so layer
l+1 runs a chunk behind layer l, both at once. That pays where a layer's recurrent kernel
holds only part of the GPU (a cluster of 16 SMs for fp16 LSTM H=512 at B=8: 8 layers fit
side by side); where each holds every SM (a grid kernel of 128 blocks) the layers would
only take turns, and each chunk costs a launch and a reload of W_hh. So the grid layers
of a pipelined plan may be re-tiled to hold 1/parts of the SMs each (``partitioned``:
fp16 LSTM H=1024 in 64 blocks of 16 units, each holding 128 KiB of W_hh, where alone it
runs fastest in 128 blocks of 8): each step is slower alone, but `parts` layers run side
by side; the schedule weighs every (chunk, parts) pair. A layer that reads
one running the other way in time (the next layer after a bidirectional one) needs its
last chunk first, so it waits for all of it; with one chunk (C = S), layers that do not
read each other, such as a bidirectional layer's two halves, still run at once.

The cost model is a small simulation, pure and cheap (a task per layer and chunk):
each task takes its time alone (the projection of C·B rows as geometry predicts it, C
steps as persistence predicts them, and for persistent kernels a launch and W_hh read
again), starts when its stream and its inputs allow, and tasks running at once share the
GPU: each advances at 1 / max(1, the sum of their shares). A task's share is the part of
the GPU its recurrent kernel holds at the planned batch: its clusters over the clusters
the GPU holds at once, or its blocks over the SMs (a persistent block is planned to have
an SM; two kernels' blocks on one SM slow each other), or all of it for a launch per
step (blocks of two kernels on one SM are taken not to slow each other: at small batches
a step waits on latency more than on the SM's issue rate). A grid kernel whose block
keeps any other off its SM (more than half its shared memory: the partition tiles on
tensor cores) is a slot instead: it starts only where its share fits beside the others
running, then runs at its own pace, and beside others each chunk starts later
(GRID_LAUNCH_BESIDE_SECONDS). The host's time bounds an
eager call from below: a pipelined chunk measured 50 µs of it when each call queued its
launches. The runtime now replays an eager call seen before from a CUDA graph where it
queues many operations and its buffers are few enough (``replayed``): a pipelined plan
is then priced as a graphed one plus the replay's time. The pipelined plan is taken when
predicted below PIPELINE_MARGIN of the sequential one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..dtypes import DTYPES
from ..errors import PlanError
from ..plan import Decision, Schedule, Stage
from ..tiles import Persistent
from .cost import (LIBRARY_CALL_SECONDS, REPLAY_BYTES, REPLAY_MIN_OPERATIONS, REPLAYED_CALL_SECONDS,
                   STEP_LAUNCH_SECONDS, clusters_at_once, partition_units)
from .geometry import projection_decision, projection_seconds_of
from .persistence import SCHEDULE_PRICE, grid_description, grid_family, persistence_label, plan_persistence
from .workspace import call_bytes, projection_uses_library

CHUNKS = (16, 32, 64, 128)
# SM partitions tried for a pipelined stack's grid-persistent layers: each re-tiled to hold
# 1/parts of the SMs, so that `parts` layers run side by side (fp16 LSTM H=1024: 64 blocks
# of 16 units, 128 KiB of W_hh each, against 128 of 8 that hold every SM alone).
PARTS = (2, 3, 4)
# The label's tail of the pipelines whose grid-persistent layers run on their cluster kernels.
CLUSTERED_VARIANT = ", grid layers in clusters"
# Pipelined only where predicted this much below sequential: the shares are a coarse
# picture of how kernels share SMs, and a pipelined call launches more.
PIPELINE_MARGIN = 0.9
# A persistent launch's start on the GPU, before its first step (block scheduling, the
# cluster launch), beside reading W_hh again at HBM bandwidth. The 8 × LSTM fp16 H=512 B=8
# cluster stack ran 2.03 ms in a graph in chunks of 16 against 2.22 in chunks of 64
# (benchmarks/results/pipeline-h100-2026-11-24.jsonl): a chunk costs little beyond its steps.
PERSISTENT_LAUNCH_SECONDS = 5e-6
# The same for a grid-persistent (cooperative) launch, which starts only once all its
# blocks can be resident, after the chunks it waits for on other streams. Measured as the
# difference of 4 × LSTM fp16 H=1024 B=8 pipelined in chunks of 32 and of 64 on its
# 128-block tiles, which take turns on the SMs: 4.14–4.21 against 3.40–3.45 ms in CUDA
# graphs, 0.75 ms over 16 more chunks, 47 µs a chunk
# (benchmarks/results/pipeline-partitions-h100-2026-11-24*.jsonl). Priced at the cluster's
# 5 µs, chunks of 32 had looked the faster there.
GRID_LAUNCH_SECONDS = 45e-6
# A grid kernel of a pipelined stack in SM partitions starts late beside the others: each
# chunk's fixed part grows. Measured as the intercept of a layer's recurrent chunks of 32
# and of 64 steps (kernel durations in a trace), beside the others and alone; priced here
# per chunk, the launch's host-side start included, for a kernel beside `parts - 1`
# others, in place of GRID_LAUNCH_SECONDS.
# - At d89d6bf (benchmarks/results/partition-profile-cublas-h100-2026-11-25.jsonl, fp16/bf16
#   H=1024 B=8 stacks and 4 × LSTM fp32 H=512): tensor-core tiles 20–34 µs beside 1 other
#   (alone 12–15), 58–72 beside 2 or 3 (alone 22–31); the FMA tiles 18 beside 3 (alone 7).
#   Priced 29 beside 1, 65 and 68 beside 2 and 3.
# - At db065d1 (partition-profile-graph-plans-h100-2026-11-27.jsonl, the same stacks and
#   GNMT's encoder, chunks' projections in cuBLASLt): tensor-core tiles 10.6–19.5 beside 1
#   (median 16), 10.5–17.2 beside 2 (15), 8.8 beside 3 (4 × GRU, the one stack with such
#   tiles); alone 0–5 (partition-profile-h100-2026-11-27.jsonl). W_hh's upload in the
#   kernels' order and the grid barrier's acquire poll shortened a start, and beside 2 or 3
#   now costs what beside 1 does. So the tensor tiles are priced 29 whatever the partition:
#   at 65 beside 2, stacks of H=1024 took chunks of 64 in 2 partitions where chunks of 32 in
#   3 ran 3–8% faster, eager and in graphs (and do since: ab-schedule-moves-h100-2026-11-27.jsonl).
#   Not lowered to today's 15–16: GRID_LAUNCH_SECONDS (45, a launch alone) was not refitted
#   with it (its intercept reads 0–5 today, but lowered to that it moves ~60 of 1006 stacks
#   of a CPU census between sequential and pipelined, unmeasured), and the further partitions
#   are priced below it, the more short calls take them for that difference alone.
# - The FMA tiles read 17 beside 1, 2 beside 2 and 9 beside 3 at db065d1 (4 × LSTM fp32
#   H=512), too scattered to refit; 18 kept, which picks that stack's measured best.
GRID_LAUNCH_BESIDE_SECONDS = {"tensor": {2: 29e-6, 3: 29e-6, 4: 29e-6}, "fma": {2: 18e-6, 3: 18e-6, 4: 18e-6}}
# Host time of one chunk of a pipelined call: its projection's launch, its recurrent
# launch, its events and the Python around them. Measured 49.5 µs (8 × LSTM fp16 H=512,
# B=8, chunks of 32) and 53.7 µs (2 × H=256) a chunk in eager calls, where the launches
# take 12 µs each with 8 streams in flight (benchmarks/results/pipeline-host-h100-2026-11-24.txt).
# So a pipelined call of many short chunks is host-bound when not captured in a graph:
# 8 × H=512 measured 3.23 ms eager at chunks of 32 against 2.69 at 64, while its GPU
# time (captured) is 1.89 against 2.22 (benchmarks/results/pipeline-h100-2026-11-24.jsonl).
PIPELINED_CHUNK_HOST_SECONDS = 50e-6
# What a chunk's projection in cuBLASLt adds to that: 68.9 against 51.5 µs a chunk (8 × LSTM
# fp16 H=512 B=8, chunks of 32; benchmarks/results/pipeline-host-h100-2026-11-25.jsonl).
# So a host-bound pipelined call is also tried with rnncc's projection kernel.
PIPELINED_LIBRARY_CALL_SECONDS = 17e-6
# A plan for calls replayed from a CUDA graph pays no host time a chunk, but a chunk's
# launches and the waits on other layers' streams still cost the GPU a gap. Measured as what
# the model missed: 4 × LSTM fp32 H=512 B=8 in 4 parts, chunks of 16 priced 1% below
# chunks of 32 (2.930 against 2.954 ms) ran 5% slower (2.819 against 2.674 ms in graphs,
# benchmarks/results/graph-plans-h100-2026-11-27-before-exact-floor.json): 0.15 ms and the
# 24 µs predicted the other way over 32 more chunks, ~5 µs a chunk.
PIPELINED_CHUNK_GRAPH_SECONDS = 5e-6


def replayed(plan, schedule: Schedule, seq_len: int) -> bool:
    """Whether an eager call of ``plan`` under ``schedule`` is replayed from a CUDA graph
    once seen again (a call of PyTorch tensors, with initial states or without): at least
    REPLAY_MIN_OPERATIONS operations (counted from below: a projection and a recurrent
    launch a layer and chunk) and its buffers within REPLAY_BYTES."""
    if plan.options.graphed or not plan.layers:
        return False
    operations = sum(2 * -(-seq_len // min(l.unroll.value, seq_len)) for l in plan.layers)
    scheduled = replace(plan, schedule=Decision(schedule, "the candidate being priced"))
    return (operations >= REPLAY_MIN_OPERATIONS
            and call_bytes(scheduled, seq_len, plan.options.batch) <= REPLAY_BYTES)


def graph_priced(plan, schedule: Schedule, seq_len: int) -> bool:
    """Whether a pipelined call's chunks are priced as a CUDA graph's: the plan is for
    graphed calls, or its eager calls are replayed from one."""
    return schedule.pipelined and (plan.options.graphed or replayed(plan, schedule, seq_len))


@dataclass(frozen=True)
class Task:
    """One layer's chunk in a predicted (or measured) timeline, seconds from the call's
    start."""

    layer: str
    chunk: int
    start: float
    end: float


def step_seconds_of(l) -> float:
    """Layer l's predicted seconds per step in its chosen persistence, at the level the
    schedule's constants were fitted with (SCHEDULE_PRICE) where that differs."""
    d = l.persistence
    if not d.alternatives:
        return 0.0
    label = persistence_label(d.value)
    return d.alternatives.get(label + SCHEDULE_PRICE, d.alternatives.get(label, min(d.alternatives.values())))


def share_of(l, batch: int, target) -> float:
    """The part of the GPU layer l's recurrent kernel holds at ``batch`` rows: its clusters
    over those the GPU holds at once, its blocks over the SMs, or all of it (a launch per
    step spreads each step over every SM). A grid block is taken to hold its SM even where
    two kernels' blocks would fit one: 4 × LSTM fp32 H=512 B=8 on 128-block tiles (two an
    SM) ran 3.65–3.83 ms pipelined, against 2.61–2.68 on 32-block tiles of an SM each
    (benchmarks/results/pipeline-partitions-h100-2026-11-24*.jsonl)."""
    p = l.persistence.value
    if not isinstance(p, Persistent):
        return 1.0
    if p.mode == "cluster":
        clusters = -(-batch // p.tile.batch_per_block)
        return min(1.0, clusters / max(1, clusters_at_once(target, p.tile.cluster)))
    return min(1.0, p.blocks / target.sm_count)


def partitioned(plan, parts: int, target):
    """The plan with each grid-persistent layer whose kernel holds more than 1/``parts`` of
    the GPU re-tiled to the fastest grid tile that holds no more (``partition_units`` units
    a block), so that ``parts`` such layers run side by side; a layer with no such tile, or
    whose tile autotuning measured, keeps its own. The decision keeps what the layer's tile
    alone was predicted as an alternative ("grid, all SMs")."""
    o = plan.options
    itemsize = DTYPES[plan.dtype].itemsize
    limit = 1.0 / parts + 1e-9

    def retile(l):
        d = l.persistence
        value = d.value
        if not (isinstance(value, Persistent) and value.mode == "grid") or d.source == "measured" \
                or share_of(l, o.batch, target) <= limit:
            return l
        tiles, price, math_ = grid_family(l, o.batch, target, itemsize,
                                          partition_units(l.hidden_size, target, parts))
        priced = []
        for t in tiles:
            v = Persistent.of("grid", math_, t, l.hidden_size, l.gates, itemsize)
            if share_of(replace(l, persistence=replace(d, value=v)), o.batch, target) <= limit:
                priced.append((price(o.batch, l.hidden_size, l.gates, t, target, itemsize), t.threads, v))
        if not priced:
            return l
        seconds, _, v = min(priced, key=lambda p: p[:2])
        alone = step_seconds_of(l)
        why = (f"grid: {grid_description(v)}; 1/{parts} of the SMs, so that {parts} layers of the "
               f"pipelined schedule run side by side: predicted {seconds * 1e6:.1f} µs/step against "
               f"{alone * 1e6:.1f} on its own tile ({value.blocks} blocks)")
        alternatives = {**{k: v for k, v in (d.alternatives or {}).items() if k != "grid" + SCHEDULE_PRICE},
                        "grid": seconds, "grid, all SMs": alone}
        return replace(l, persistence=replace(d, value=v, reason=why, alternatives=alternatives))
    return plan.map_layers(retile)


def clustered(model, plan, target):
    """The plan with each layer on a grid kernel whose persistence priced a cluster kernel
    too re-planned on that cluster kernel, for the pipelined schedules: a layer's grid
    kernel holds the GPU and pipelines only in SM partitions, each layer's clusters hold a
    part of it, so that layers pipelined run side by side at their whole speed. A layer
    alone may price its grid kernel lower (GRU fp16 H=768 B ≤ 8, tanh RNN H=1400 B ≤ 20 ran
    0.77-0.93× their hybrid cluster kernel's forward, results/persistence-moves-h200-2026-11-29-two-stage.txt)
    while a stack of them runs faster pipelined in clusters. The plan itself where no layer
    changes or some layer has no cluster kernel."""
    def movable(d) -> bool:  # a grid layer the model chose where a cluster kernel was priced too
        return (isinstance(d.value, Persistent) and d.value.mode == "grid" and d.source == "model"
                and "cluster" in (d.alternatives or {}))

    if not any(movable(l.persistence) for l in plan.layers):
        return plan
    try:
        forced = plan_persistence(model, replace(plan, options=replace(plan.options, persistence="cluster")), target)
    except PlanError:
        return plan
    ours = {l.name: l for l in forced.layers}

    def to_cluster(l):
        d = l.persistence
        if not movable(d):
            return l
        cluster = ours[l.name].persistence
        why = (f"cluster in the pipelined schedule, where layers run side by side: "
               f"{cluster.reason.split('; cluster: ', 1)[-1]}; alone its grid kernel is predicted "
               f"{d.alternatives['grid'] * 1e6:.1f} µs/step")
        return replace(l, persistence=replace(d, value=cluster.value, reason=why))
    return plan.map_layers(to_cluster)


def chunk_seconds(l, steps: int, projection_s: float, itemsize: int, target, parts: int = 1) -> float:
    """GPU time of one chunk of layer l: its projection, its steps and, for a persistent
    kernel, the launch and W_hh read again; a grid kernel in one of ``parts`` > 1 SM
    partitions starts as one beside the others (GRID_LAUNCH_BESIDE_SECONDS)."""
    seconds = projection_s + steps * step_seconds_of(l)
    p = l.persistence.value
    if isinstance(p, Persistent):
        w_hh = l.gates * l.hidden_size * l.recurrence.out_size * itemsize  # folded: W_hh·W_hr
        if p.mode != "grid":
            launch = PERSISTENT_LAUNCH_SECONDS
        elif parts > 1:
            launch = GRID_LAUNCH_BESIDE_SECONDS[p.math][parts]
        else:
            launch = GRID_LAUNCH_SECONDS
        seconds += launch + w_hh / target.memory_bandwidth
    return seconds


def holds_its_sms(l, target) -> bool:
    """Whether layer l's recurrent kernel is a slot of the GPU that another such kernel
    waits for: a grid kernel, whose blocks must all be resident at once (a cooperative
    launch), where a block takes more than half an SM's shared memory, so that no other
    kernel's block shares its SM. A lighter grid kernel shares its SMs (4 × LSTM fp32
    H=512 on 64-block tiles of 95 KiB: the four layers' kernels ran at once, each chunk
    1.46× its time alone), and a cluster kernel's clusters start one by one as SMs free
    (gru_residual, 3 layers of 4 clusters of 16 at B=64: pipelined 2.20 ms against 2.51
    one after another, benchmarks/results/pipeline-h100-2026-11-24.jsonl)."""
    p = l.persistence.value
    return isinstance(p, Persistent) and p.mode == "grid" and 2 * p.shared_bytes > target.shared_memory_per_sm


def host_seconds(l, steps: int) -> float:
    """Host time of one chunk of layer l run one layer after another: the projection's
    call or launch, and the recurrent launch (a launch per step for mode none, two for a
    projected LSTM's per step, whose h projection is a kernel of its own; a folded one's h
    projection is a library call a chunk)."""
    projection = LIBRARY_CALL_SECONDS if projection_uses_library(l) else STEP_LAUNCH_SECONDS
    launches = 1 if isinstance(l.persistence.value, Persistent) else steps * (2 if l.proj_size else 1)
    return projection + launches * STEP_LAUNCH_SECONDS + (LIBRARY_CALL_SECONDS if l.folded else 0.0)


def pipelined_host_seconds(l) -> float:
    """Host time of one chunk of layer l in a pipelined call: PIPELINED_CHUNK_HOST_SECONDS,
    measured with rnncc's projection kernel, plus PIPELINED_LIBRARY_CALL_SECONDS where the
    projection is a cuBLASLt call."""
    return PIPELINED_CHUNK_HOST_SECONDS + projection_uses_library(l) * PIPELINED_LIBRARY_CALL_SECONDS


def simulate(work: dict[tuple[str, int], float], share: dict[str, float],
             after: dict[tuple[str, int], tuple[tuple[str, int], ...]],
             holds: frozenset[str] = frozenset()) -> list[Task]:
    """Start and end of every task (layer, chunk) of ``work`` (its seconds alone): a task
    is ready once every task in ``after[task]`` has ended. A task of a layer in ``holds``
    (a kernel that keeps others off its SMs) starts only where its share fits beside the
    shares of such tasks running, in the order they became ready, and then runs at its
    own pace; the other tasks start when ready and advance at 1 / max(1, the sum of the
    running tasks' shares). Returns the tasks by start."""
    left = dict(work)
    rank = {key: i for i, key in enumerate(work)}
    ready: dict[tuple[str, int], float] = {}
    start: dict[tuple[str, int], float] = {}
    end: dict[tuple[str, int], float] = {}
    now = 0.0
    while left:
        for key in left:
            if key not in ready and all(d in end for d in after[key]):
                ready[key] = now
        held = sum(share[k[0]] for k in left if k in start and k[0] in holds)
        for key in sorted((k for k in ready if k in left and k not in start),
                          key=lambda k: (ready[k], k[1], rank[k])):
            if key[0] not in holds:
                start[key] = now
            elif held == 0 or held + share[key[0]] <= 1.0 + 1e-9:
                start[key] = now
                held += share[key[0]]
            else:  # the block scheduler serves waiting launches in order
                break
        running = [k for k in left if k in start]
        shared = 1.0 / max(1.0, sum(share[k[0]] for k in running))
        rate = {k: 1.0 if k[0] in holds else shared for k in running}
        first = min(running, key=lambda k: left[k] / rate[k])
        step = left[first] / rate[first]
        now += step
        for k in running:
            left[k] -= step * rate[k]
        for k in [k for k in running if left[k] <= 1e-15]:
            end[k] = now
            del left[k]
    return sorted((Task(k[0], k[1], start[k], end[k]) for k in work), key=lambda t: (t.start, t.layer))


def layer_sources(l, layers) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The layers whose sequences layer l reads (the writers of its sources but the model
    input): (those running in its direction of time, those running in the other)."""
    writers = [w for s in l.sources for w in layers if w.tensor_name == s.name]
    return (tuple(w.name for w in writers if w.reverse == l.reverse),
            tuple(w.name for w in writers if w.reverse != l.reverse))


def queue_order(stages, chunks: int) -> list[tuple[str, int]]:
    """The order the host queues the (layer, chunk) tasks of a pipelined call: in rounds
    over the layers, each queueing its next chunk once the chunks it waits for are
    queued (chunk k of every layer before chunk k+1 where all run one way in time)."""
    queued: set[tuple[str, int]] = set()
    order: list[tuple[str, int]] = []
    next_chunk = {s.layer: 0 for s in stages}
    while len(order) < chunks * len(stages):
        before = len(order)
        for s in stages:
            k = next_chunk[s.layer]
            if k < chunks and all(d in queued for d in s.chunk_after(k, chunks)):
                order.append((s.layer, k))
                queued.add((s.layer, k))
                next_chunk[s.layer] = k + 1
        if len(order) == before:
            raise PlanError(f"schedule: no chunk can be queued next ({next_chunk} chunks queued "
                            "per layer): the layers wait for each other in a cycle, a bug in rnncc")
    return order


def timeline(plan, schedule: Schedule, seq_len: int, target, in_graph: bool | None = None) -> list[Task]:
    """The predicted timeline of a call of ``seq_len`` steps at the planned batch: per
    layer and chunk, when it starts and ends. ``in_graph``: graph_priced's answer, where
    the caller has it already."""
    itemsize = DTYPES[plan.dtype].itemsize
    work, after, share = {}, {}, {}
    previous: tuple[str, int] | None = None
    if in_graph is None:
        in_graph = graph_priced(plan, schedule, seq_len)
    for l in plan.layers:
        chunk = min(l.unroll.value, seq_len)  # a pipelined plan's unroll is its chunk
        chunks = -(-seq_len // chunk)
        stage = schedule.stage(l.name)
        share[l.name] = stage.share if schedule.pipelined else 1.0
        projection_s = projection_seconds_of(l.projection_tile)
        # Where a layer's projections run ahead (Stage.projection_stream) beside cluster
        # kernels, a chunk's projection is priced off the layer's path, as a task of its own
        # taking no SMs: of ab_rows.py 'priced_moves', the 6 cluster stacks' plans this moved
        # ran 0.63-1.02× their time before eager (median 0.81), 0.82-1.04× in graphs with the
        # graph plans (results/projection-ahead-priced-ab-h200-2026-11-28.jsonl). Beside grid
        # kernels it stays on the path, as when it ran before the recurrence on the layer's
        # stream: a grid step waits for its slowest block, and of the 6 grid stacks 4 lost
        # 1.02-1.12× (LSTM fp32 H=512-1024), one gained (4 × GRU fp32 H=768 B=1, 0.89×) and one
        # held (0.99×); before, GNMT fp16 B=64's eager call moved to 2 partitions at 1.31× its
        # time (results/projection-ahead-ab-h200-2026-11-28.txt).
        ahead = (schedule.pipelined and stage.projection_stream is not None
                 and isinstance(l.persistence.value, Persistent) and l.persistence.value.mode == "cluster")
        if ahead:
            share[PROJECTION + l.name] = 0.0
        for k, t0 in enumerate(range(0, seq_len, chunk)):
            steps = min(chunk, seq_len - t0)
            key = (l.name, k)
            projection = projection_s * steps / chunk
            work[key] = chunk_seconds(l, steps, 0.0 if ahead else projection, itemsize, target, schedule.parts)
            if in_graph:
                work[key] += PIPELINED_CHUNK_GRAPH_SECONDS
            if ahead:
                projected = (PROJECTION + l.name, k)
                work[projected] = projection
                after[projected] = stage.chunk_after(k, chunks) + ((l.name, k - 2),) * (k > 1)
                after[key] = ((l.name, k - 1),) * (k > 0) + (projected,)
            elif schedule.pipelined:
                after[key] = ((l.name, k - 1),) * (k > 0) + stage.chunk_after(k, chunks)
            else:  # one stream: every task after the one queued before it
                after[key] = (previous,) if previous else ()
            previous = key
    holds = frozenset(l.name for l in plan.layers if holds_its_sms(l, target))
    return [t for t in simulate(work, share, after, holds) if not t.layer.startswith(PROJECTION)]


PROJECTION = "projection of "  # a layer's projections ahead in the simulation (no layer name has a space)


def predicted_seconds(plan, schedule: Schedule, seq_len: int, target) -> float:
    """The call's predicted time: the timeline's end, or the host's time if longer. A plan
    for calls replayed from a CUDA graph (CompileOptions.launches) has no host time a call;
    a pipelined eager call the runtime replays from a graph (``replayed``) the replay's."""
    in_graph = graph_priced(plan, schedule, seq_len)
    end = max(t.end for t in timeline(plan, schedule, seq_len, target, in_graph))
    if plan.options.graphed:
        return end
    if in_graph:
        return end + REPLAYED_CALL_SECONDS
    host = 0.0
    for l in plan.layers:
        chunk = min(l.unroll.value, seq_len)
        chunks = -(-seq_len // chunk)
        host += chunks * (pipelined_host_seconds(l) if schedule.pipelined else host_seconds(l, chunk))
    return max(end, host)


def pipelined_plan(plan, chunk: int, target, parts: int = 1,
                   host_bound: bool = False) -> tuple[object, Schedule]:
    """The plan with every layer in chunks of ``chunk`` steps (its unroll and projection
    decided again for chunk × B rows), and its pipelined schedule; ``parts``: the plan's
    grid layers were re-tiled by ``partitioned(plan, parts)``. A chunk's projection is
    chosen by its GPU time: a pipelined call's host time is priced apart, per chunk
    (pipelined_host_seconds, a cuBLASLt call's included; the host queues chunks ahead of
    the GPU), or as one replay where the runtime replays the call from a CUDA graph
    (``replayed``). Priced with the host's time of a library call added, as a call one layer
    after another is, cuBLASLt lost to rnncc's kernel at 128-256 rows (2.5 + 16 µs against
    17.4) where it runs 4.7-7.2 µs against 17-27 (results/projection-small-m-h100-2026-11-25.jsonl),
    which, with the beside prices before GRID_LAUNCH_BESIDE_SECONDS was refitted (the other
    half of it), made eager plans take chunks of 64 where chunks of 32 with the library's
    projections measured 3-8% faster, eager and in graphs
    (results/partition-profile-graph-plans-h100-2026-11-27.jsonl).
    ``host_bound``: rnncc's kernels instead (see projection_decision), the variant for calls
    the host bounds."""
    o = plan.options
    itemsize = DTYPES[plan.dtype].itemsize

    def rechunk(l):
        why = (f"the schedule's chunk: {chunk} steps a projection and a recurrent launch, "
               "layers pipelined")
        return replace(l, unroll=Decision(chunk, why),
                       projection_tile=projection_decision(l, chunk * o.batch, o, target, itemsize,
                                                           host_bound, host_apart=True))
    chunked = plan.map_layers(rechunk)
    return chunked, Schedule("pipelined", chunk, stages(chunked, target, own_streams=True, parts=parts), parts)


def sequential_schedule(plan, target) -> Schedule:
    return Schedule("sequential", 0, stages(plan, target, own_streams=False))


def projects_ahead(l) -> bool:
    """Whether layer l's projections can run a chunk ahead of its recurrence, on a stream of
    their own: a projection launched apart from the recurrent kernel (not its producers'),
    and a recurrence that makes no library call (cuBLASLt's scratch is the layer's one, so
    its calls stay on one stream: a folded LSTMP's h projection, a step product in cuBLASLt)."""
    return not l.projection_fused and not l.folded and l.persistence.value.math != "cublas"


def stages(plan, target, own_streams: bool, parts: int = 1) -> tuple[Stage, ...]:
    """Each layer's Stage: its stream (its position in the model where each layer has a
    stream of its own, else the caller's), share, time of a chunk of its unroll (its grid
    kernel in one of ``parts`` SM partitions), and inputs. With streams of their own, the
    layers that run more than one chunk and ``projects_ahead`` get a further stream each
    (after the layers'), on which their projections run ahead of their recurrence. In a
    chunk's recurrence on the layer's stream the projection of the next runs beside it,
    where it was on the layer's path between them: GNMT fp16 B=8's layers spent 15-50 µs
    a chunk between recurrent chunks, most of it the projection's GEMM and its launch
    (results/partition-profile-graph-plans-h200-2026-11-28.jsonl)."""
    o = plan.options
    itemsize = DTYPES[plan.dtype].itemsize
    # The projection streams, numbered after the layers' in the model's order.
    ahead = [l.name for l in plan.layers
             if own_streams and min(l.unroll.value, o.seq_len) < o.seq_len and projects_ahead(l)]
    projection_stream = {name: len(plan.layers) + i for i, name in enumerate(ahead)}
    return tuple(Stage(l.name, i if own_streams else 0, share_of(l, o.batch, target),
                       chunk_seconds(l, min(l.unroll.value, o.seq_len),
                                     projection_seconds_of(l.projection_tile), itemsize, target, parts),
                       *layer_sources(l, plan.layers),
                       projection_stream=projection_stream.get(l.name))
                 for i, l in enumerate(plan.layers))


def plan_schedule(model, plan, target):
    o = plan.options
    sequential = sequential_schedule(plan, target)
    predicted = {"sequential": predicted_seconds(plan, sequential, o.seq_len, target)}
    pipelines = {}
    if len(plan.layers) > 1 and o.schedule != "sequential":
        # Chunks shorter than the sequence, and the whole sequence as one chunk: layers
        # that do not read each other (a bidirectional layer's halves) then run at once.
        # A forced unroll is the chunk (steps per projection and recurrent launch).
        chunks = [min(o.unroll, o.seq_len)] if o.unroll else [c for c in CHUNKS if c < o.seq_len] + [o.seq_len]
        # SM partitions only where they re-tile a layer; the layers in clusters where that
        # changes one.
        bases = {(1, ""): plan} | {(p, ""): q for p in PARTS if (q := partitioned(plan, p, target)) != plan}
        if (q := clustered(model, plan, target)) != plan:
            bases[(1, CLUSTERED_VARIANT)] = q
        for (parts, variant), base in bases.items():
            for chunk in chunks:
                chunked, schedule = pipelined_plan(base, chunk, target, parts)
                pipelines[schedule.label + variant] = (chunked, schedule)
                predicted[schedule.label + variant] = predicted_seconds(chunked, schedule, o.seq_len, target)
                if not graph_priced(chunked, schedule, o.seq_len) and \
                        any(map(projection_uses_library, chunked.layers)):
                    # Where the host bounds the call, rnncc's projection kernel costs it less.
                    own, schedule = pipelined_plan(base, chunk, target, parts, host_bound=True)
                    label = f"{schedule.label}{variant}, rnncc projections"
                    pipelines[label] = (own, schedule)
                    predicted[label] = predicted_seconds(own, schedule, o.seq_len, target)
    seq_s = predicted["sequential"]
    if not pipelines:
        why = ("one layer" if len(plan.layers) == 1 else "forced by the user") + \
            f"; predicted {seq_s * 1e6:.0f} µs"
        return replace(plan, schedule=Decision(sequential, why, "user" if o.schedule else "model", predicted))
    best = min(pipelines, key=lambda k: predicted[k])
    chunked, schedule = pipelines[best]
    shares = sum(s.share for s in schedule.stages)
    side_by_side = (f"the {len(schedule.stages)} layers' recurrent kernels hold {shares:.2f} of the GPU "
                    f"together ({', '.join(f'{s.layer} {s.share:.2f}' for s in schedule.stages)})")
    if schedule.parts > 1:
        side_by_side += f", their grid kernels re-tiled to 1/{schedule.parts} of the SMs each"
    if CLUSTERED_VARIANT in best:
        side_by_side += ", the layers priced faster alone on grid kernels here on their cluster kernels"
    if o.schedule == "pipelined" or predicted[best] < PIPELINE_MARGIN * seq_s:
        how = ("the whole sequence at once, layers that do not read each other side by side"
               if schedule.chunk >= o.seq_len else
               f"in chunks of {schedule.chunk} steps, a chunk behind the layers it reads")
        why = (f"{'forced by the user; ' if o.schedule else ''}{side_by_side}; each layer on its own "
               f"stream, {how}: "
               f"predicted {predicted[best] * 1e6:.0f} µs vs {seq_s * 1e6:.0f} µs one after another")
        return replace(chunked, schedule=Decision(schedule, why, "user" if o.schedule else "model", predicted))
    why = (f"{side_by_side}; pipelined in chunks of {schedule.chunk} predicted "
           f"{predicted[best] * 1e6:.0f} µs, not below {PIPELINE_MARGIN:.0%} of "
           f"{seq_s * 1e6:.0f} µs one after another")
    return replace(plan, schedule=Decision(sequential, why, "model", predicted))
