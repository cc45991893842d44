"""Persistence: ``none`` (a launch per step), ``grid`` or ``cluster`` (one launch for the
sequence).

``grid`` keeps each block's slice of W_hhᵀ in shared memory for all steps and meets at a
software grid barrier each step; possible when the slices fit one block per SM (so every
block is co-resident). ``cluster`` (sm_90 thread-block clusters) holds all of W_hhᵀ in one
cluster's shared memory and exchanges h through distributed shared memory by st.async and
mbarriers (FMA: clusters of up to 8 blocks; tensor cores: of any size up to 16 blocks, the
non-portable sizes above 8 opted into); clusters serve
independent batch tiles, as many at once as the GPU holds (Target.clusters_at_once). The mode with the lowest predicted time per step is
chosen. Layers in precision ``tensor`` run both persistent modes on tensor cores
(``TensorTile``, mma.sync).

Mode ``none`` runs each step either as rnncc's step kernel (FMA, the product and the cell
in one launch; ``math="fma"``) or as h·W_hhᵀ in cuBLASLt followed by rnncc's cell kernel
(``math="cublas"``): where W_hh does not fit on chip and the batch makes the step a GEMM
of its own, the library's tensor-core kernels are the fast way through it.

A projected LSTM (proj_size, h = r·W_hrᵀ with r = o ⊙ tanh c) runs in one of two forms,
its ``h_projection`` decision, priced here with the persistence each allows:
- per step: mode none, the step kernel over K = P writing r, then a kernel of its own
  (``recurrent_h_projection``) computing h after each step; the persistent kernels have
  no second product and exchange a step.
- folded: h_{t−1}·W_hhᵀ = r_{t−1}·(W_hh·W_hr)ᵀ, so the recurrence is a plain LSTM of width
  H over r through W_hh·W_hr (weights.py folds it in float64), in any mode; after each chunk
  of steps, h = r·W_hrᵀ is one cuBLASLt GEMM, and h0·W_hhᵀ is added to the first step's
  projection (an h0 need not be W_hr of any r). W_hh·W_hr is G·H·H: where P ≪ H the
  product a step is larger, but one launch replaces two a step.
"""

from dataclasses import replace

from ..dtypes import DTYPES
from ..errors import PlanError
from ..plan import Decision
from ..tiles import (TENSOR_MAP_STAGING, Persistence, Persistent, PerStep, StepRows, StepRowsTensor, StepTile,
                     grid_shared_max)
from .cost import (LIBRARY_PADDING_CALL_SECONDS, REPLAY_BYTES, REPLAY_MIN_OPERATIONS, REPLAYED_CALL_SECONDS,
                   cluster_exchange_seconds, cluster_seconds, cluster_sync_seconds,
                   cluster_tiles, grid_step_seconds, h_projection_seconds, library_call_seconds, library_gemm_seconds,
                   library_step_seconds, persistent_seconds, persistent_start_seconds, persistent_tiles,
                   register_tiles, staged_tiles, step_kernel_seconds, tensor_seconds, tensor_tiles)
from .workspace import call_bytes_before_persistence


def persistence_label(value: Persistence) -> str:
    """The name of a persistence decision's value among its alternatives: the mode, and
    for mode none which of its two variants."""
    if value.mode != "none":
        return value.mode
    return "none (cuBLASLt + cell kernel)" if value.math == "cublas" else "none (FMA step kernel)"


def plan_persistence(model, plan, target):
    o = plan.options
    itemsize = DTYPES[plan.dtype].itemsize
    budget = target.shared_memory_per_block_optin

    def decide(l):
        return decide_projected(l) if l.proj_size else decide_modes(l)[1]

    def decide_modes(l):
        """(predicted seconds a step, l with its persistence): the fastest mode, or the
        one forced or measured."""
        B, H, G = o.batch, l.hidden_size, l.gates
        step_tile = l.step_tile.value
        w_mb = G * H * H * itemsize / 2**20
        none, per_step = _per_step(plan, l, target, itemsize, step_tile)
        tuned = o.measured(l.name)
        forced, source = (tuned.persistence, "measured") if tuned else (o.persistence, "user")
        measured = dict(tuned.times) if tuned else None
        if forced == "none":
            how = "measured" if tuned else "forced by the user"
            return none[0], replace(l, persistence=Decision(none[1], f"{how}; {none[2]}", source,
                                                            per_step, measured))
        candidates = {"none": none}
        # A persistent kernel's start on the GPU and its own launch, over the chunk's steps
        # (mode none's price counts a launch each step): in one-step calls a launch per
        # step ran faster at all 12 points of results/short-and-odd-h100-2026-11-27-at-e035f74.json.
        steps = max(1, min(l.unroll.value, o.seq_len))
        start = persistent_start_seconds(steps, o.graphed)

        def fitting(tiles):
            return [t for t in tiles if t.shared_bytes(H, G, itemsize) <= budget]

        # Each mode's kernel families: (tiles that fit, their price, math, product).
        grid_tiles, grid_price, grid_math = grid_family(l, B, target, itemsize)
        grid = [(grid_tiles, grid_price, grid_math, GRID_PRODUCT[grid_math])]
        clusters = []
        if l.precision.value == "tensor":
            clusters.append((fitting(tensor_tiles(H, G, B, target, "cluster", itemsize)), tensor_seconds,
                             "tensor", "mma.sync"))
        if l.precision.value != "tensor" or itemsize == 2:
            # In precision tensor too where the operands are halves: exact in fp32 either
            # way, so the FMA cluster kernel (W_hh converted on load, or into registers
            # once) computes what tensor cores do, in another order of the sums, and at
            # small H its step is the shorter: RNN fp16 H=64 B=1 0.27 µs a step in its
            # registers form against 0.55 for tensor cores
            # (results/half-tensor-or-fma-h100-2026-11-25.txt).
            clusters.append((fitting(cluster_tiles(H, G, B, target)), cluster_seconds, "fma", "FMA"))
        modes = {"grid": grid, "cluster": clusters}
        schedule_prices = {}
        for mode, families in modes.items():
            priced = [(round(seconds(B, H, G, t, target, itemsize) * 1e8), getattr(t, "cluster", 0), t.threads,
                       i, t, seconds, math_, product)
                      for i, (fits, seconds, math_, product) in enumerate(families) for t in fits]
            if not priced:
                continue
            *_, best, seconds, math_, product = min(priced, key=lambda p: p[:4])
            value = Persistent.of(mode, math_, best, H, G, itemsize)
            kib = value.shared_bytes // 1024
            # The registers form's product by wgmma, priced against mma.sync's.
            instruction = "wgmma" if getattr(best, "wgmma", False) else product
            if mode == "grid":
                what = grid_description(value)
            else:
                if math_ == "tensor":
                    # fp16/bf16 in the registers form send a block's slice by one bulk copy a
                    # peer; priced as the st.async exchange, the fit absorbing the difference.
                    how = "bulk copies" if itemsize == 2 and best.weights_in_registers else "st.async"
                    sync, seconds_ = f"h exchange by {how} and mbarrier", cluster_exchange_seconds(best.cluster)
                else:
                    sync = ("K split in lanes, each lane pushing its cells' h to peers by st.async, one "
                            "mbarrier wait; push and wait" if best.k_lanes else
                            "h sent to every block by st.async and mbarrier; barrier and exchange")
                    seconds_ = cluster_sync_seconds(H, best)
                held = f"the registers of {best.m_tiles} warps" if math_ == "tensor" and best.weights_in_registers \
                    else f"{kib} KiB"
                if math_ == "tensor" and best.weights_in_registers and best.register_steps:
                    held += (f" ({best.register_steps} of each warp's {best.k_steps(H, itemsize)} k-steps; the "
                             f"rest in {kib} KiB of shared memory, more than the registers of any cluster hold)")
                what = (f"W_hh in a cluster of {best.cluster} × {held}, {instruction}, "
                        f"{-(-B // best.batch_per_block)} cluster(s) at B={B}, "
                        f"{sync} {seconds_ * 1e6:.1f} µs")
            if math_ == "fma" and l.precision.value == "tensor":
                what += ("; FMA priced below the tensor-core cluster kernel's best tile (half operands "
                         "are exact in fp32 either way)")
            own = seconds(B, H, G, best, target, itemsize)
            # The grid tile on tensor cores that `seconds` ranked first meets the other modes
            # at cost.grid_step_seconds, the step measured on the H200: the ranking model
            # (cost.tensor_seconds, fitted on the H100 to older kernels) reads those steps
            # ~1.3× high. The schedule keeps the ranking model's level (SCHEDULE_PRICE).
            price = grid_step_seconds(B, H, G, best, itemsize) if mode == "grid" and math_ == "tensor" else own
            candidates[mode] = (price, value, what)
            if price != own:
                schedule_prices[mode + SCHEDULE_PRICE] = own
        if forced is not None:
            if forced not in candidates:
                raise PlanError(f"layer '{l.name}', option persistence={forced!r}: W_hh "
                                f"{w_mb:.1f} MiB does not fit that mode on {target.name} "
                                f"({budget // 1024} KiB shared memory per block)")
            chosen = forced
        else:
            chosen = min(candidates, key=lambda k: candidates[k][0] + (start if k != "none" else 0.0))
            source = "model"
        seconds, value, what = candidates[chosen]
        others = ", ".join(f"{k} {v[0] * 1e6:.1f}" for k, v in candidates.items() if k != chosen)
        if steps < SHORT_CHUNK_STEPS and source == "model":
            others += (f"; a persistent kernel's start and launch, "
                       f"{persistent_start_seconds(1, o.graphed) * 1e6:.0f} µs, add "
                       f"{start * 1e6:.1f} µs a step over {steps} step{'s' if steps > 1 else ''}")
        if len(candidates) == 1:
            reason = (f"none: W_hh {w_mb:.1f} MiB fits neither one block per SM nor one cluster "
                      f"({budget // 1024} KiB shared memory per block); {what}")
        else:
            how = {"user": "forced by the user; ", "measured": "measured; "}.get(source, "")
            reason = (f"{how}{chosen}: {what}; "
                      f"predicted {seconds * 1e6:.1f} µs/step (others, µs: {others})")
        alternatives = {**per_step, **{k: v[0] for k, v in candidates.items() if k != "none"}, **schedule_prices}
        return seconds, replace(l, persistence=Decision(value, reason, source, alternatives, measured))

    def decide_projected(l):
        """A projected LSTM, per step or folded (module docstring), whichever is predicted
        faster, or as forced: persistence none is per step; grid or cluster, folded."""
        B, H, P, G = o.batch, l.hidden_size, l.proj_size, l.gates
        none, per_step = _per_step(plan, l, target, itemsize, l.step_tile.value)
        tuned = o.measured(l.name)
        forced, source = (tuned.persistence, "measured") if tuned else (o.persistence, "user")
        measured = dict(tuned.times) if tuned else None

        def per_step_form(why: str, how: str = "model"):
            return replace(l, persistence=Decision(
                none[1], f"{why}; {none[2]}; predicted {none[0] * 1e6:.1f} µs/step", how, per_step,
                measured), h_projection=Decision("per step", why, how))

        if forced == "none":
            return per_step_form(f"per step: persistence none {'measured' if tuned else 'forced'}", source)
        if o.gemm_for(l.name) == "rnncc":
            if forced is not None:
                raise PlanError(f"layer '{l.name}', option persistence={forced!r} with gemm='rnncc': a "
                                f"projected LSTM (proj_size={P}) runs persistent only folded, whose h = "
                                "r·W_hrᵀ of a chunk is a cuBLASLt GEMM; expected persistence='none' or "
                                "gemm other than 'rnncc'")
            return per_step_form("per step: gemm='rnncc', and the folded form's h = r·W_hrᵀ of a chunk "
                                 "is a cuBLASLt GEMM (a rule)")
        seconds, plain = decide_modes(replace(l, proj_size=0))
        d = plain.persistence
        if d.value.mode == "none":
            return per_step_form(f"per step: folded, W_hh·W_hr ({G * H * H * itemsize / 2**20:.1f} MiB) "
                                 "fits no persistent mode")
        chunk = min(l.unroll.value, o.seq_len)
        gemm = max(library_gemm_seconds(P, chunk * B, H, itemsize, l.precision.value, target),
                   library_call_seconds(o.graphed)) / chunk
        folded = seconds + gemm + persistent_start_seconds(chunk, o.graphed)
        forms = {"per step": none[0], "folded": folded}
        if forced is None and none[0] <= folded:
            return per_step_form(f"per step: predicted {none[0] * 1e6:.1f} µs/step, folded "
                                 f"({d.value.mode}) {folded * 1e6:.1f}")
        why = (f"folded: the recurrence runs on r = o ⊙ tanh c (H={H}) through W_hh·W_hr "
               f"[{G}·{H}, {H}] in a plain LSTM's {d.value.mode} kernel, then h = r·W_hrᵀ of each "
               f"chunk in one cuBLASLt GEMM ({gemm * 1e6:.2f} µs/step at {chunk} steps), h0·W_hhᵀ added "
               f"to the first step's projection; predicted {folded * 1e6:.1f} µs/step, per step "
               f"{none[0] * 1e6:.1f}")
        alternatives = {**{k: v + gemm for k, v in d.alternatives.items()
                           if k.removesuffix(SCHEDULE_PRICE) in ("grid", "cluster")},
                        **per_step}
        return replace(l, persistence=replace(d, reason=f"folded (see h_projection); {d.reason}",
                                              alternatives=alternatives),
                       h_projection=Decision("folded", why, d.source, forms))
    return plan.map_layers(decide)


# Chunks shorter than this say in their reason what a persistent kernel's start adds a step.
SHORT_CHUNK_STEPS = 32

# The grid kernels' product, by math.
GRID_PRODUCT = {"tensor": "mma.sync", "fma": "FMA"}


def grid_family(l, batch: int, target, itemsize: int,
                units: int | None = None) -> tuple[list, object, str]:
    """Layer l's grid-persistent tiles that fit a block's shared memory beside the grid
    barrier's own __shared__ bytes (GRID_BARRIER_STATIC_SHARED; of `units` units a block
    alone, where given), their price (seconds a step) and math: tensor cores in precision
    tensor, else FMA."""
    H, G = l.hidden_size, l.gates
    if l.precision.value == "tensor":
        tiles, price, math_ = tensor_tiles(H, G, batch, target, "grid", itemsize, units), tensor_seconds, "tensor"
    else:
        # float32: the FMA grid kernel staging all of h of its batch tile, or by chunks, or
        # with W_hhᵀ in registers.
        forms = staged_tiles(H, G, batch, target, units) + register_tiles(H, G, batch, target, units) \
            if itemsize == 4 else []
        tiles, price, math_ = persistent_tiles(H, G, batch, target, units) + forms, persistent_seconds, "fma"
    budget = grid_shared_max(target.shared_memory_per_block_optin)
    fitting = [t for t in tiles if t.shared_bytes(H, G, itemsize) <= budget]
    if math_ == "tensor":  # W_hh past shared memory: part of it in registers (16-bit operands)
        hybrid = (t.with_weights_in_registers_for(H, G, itemsize, budget) for t in tiles
                  if t.shared_bytes(H, G, itemsize) > budget)
        # A whole-GPU layer's tiles also with W_hh resident in registers (not an SM
        # partition's: not measured there).
        resident = (t.with_weights_resident(H, G, itemsize) for t in fitting) if units is None else ()
        fitting += [t for t in (*hybrid, *resident) if t is not None]
        if units is not None:
            # An SM partition's kernel waits for h by polling y, not at a grid barrier a step,
            # where its threads stage ≤ 2 vectors of h a step: 4 × LSTM fp16 H=1024 B=8 and
            # GNMT B=8 (2 a thread) ran 8-10% faster so. A thread polls its vectors one L2 trip
            # after another, and with more of them whole-GPU tiles ran 6-97% slower polled
            # (4 a thread at LSTM fp16 H=1024 B=8, 16 at B=64; results/polled-exchange-ab-h200-2026-11-28.txt);
            # partitions with more were not measured, and two of them spilled polled (2 × LSTM
            # fp16 H=1024 B=16's wgmma tile 44 bytes, 4 × GRU fp16 H=1536 B=8's 20): barrier.
            fitting = [replace(t, polled_exchange=True) if t.exchange_vectors(H, itemsize) <= 2 else t
                       for t in fitting]
    return fitting, price, math_


# The key, after a mode's, of the price the schedule reads for it (schedule.step_seconds_of)
# where the mode was chosen at another: the grid kernel on tensor cores is chosen against
# the other modes at the H200's measured level (cost.grid_step_seconds), while the schedule's
# constants (a chunk's launch, partitions beside each other, the pipelining margin) were
# fitted with cost.tensor_seconds' level. Pricing its stacks at the H200 level moved 59 of
# 1006 census stacks, 36 of them to schedules that ran slower by more than 3% (median
# 1.08×, pipelined → sequential at 2 × LSTM fp16 H=1024 B=1-20 1.09-1.29×;
# results/schedule-moves-h200-2026-11-29-h200-level.jsonl).
SCHEDULE_PRICE = ", as the schedule prices it"


def grid_description(value: Persistent) -> str:
    product = "wgmma" if getattr(value.tile, "wgmma", False) else GRID_PRODUCT[value.math]
    if value.registers:
        return (f"W_hh resident in the registers of {value.blocks} blocks ({value.shared_bytes // 1024} KiB of shared "
                f"memory for h and the sums), {product} ({value.tile.threads} threads, {value.tile.k_phases} "
                f"phases of K), grid barrier")
    form = (f", h staged by chunks of {value.tile.k_chunk}"
            + (f" copied by tensor maps ({TENSOR_MAP_STAGING})" if value.tensor_maps else "")) if value.staged else ""
    tile = value.tile
    if getattr(tile, "register_steps", 0):
        where = (f"W_hh resident in {value.blocks} blocks, {tile.register_steps} k-steps of each warp's "
                 f"share in registers, the rest in {value.shared_bytes // 1024} KiB of shared memory with h")
    else:
        where = f"W_hh resident in {value.blocks} blocks × {value.shared_bytes // 1024} KiB"
    wait = "h polled in y after the first step" if getattr(tile, "polled_exchange", False) else "grid barrier"
    return f"{where}, {product}{form}, {wait}"


def per_step_replayed(plan, l, library: bool) -> bool:
    """Whether an eager call in which layer l runs a launch a step is replayed from a CUDA
    graph once seen again (runtime.CompiledModel._graph_worthy, by cost.REPLAY_MIN_OPERATIONS
    and REPLAY_BYTES): the layer's steps alone queue a launch each (two where cuBLASLt
    computes the product, one more for a projected LSTM's h projection) and its projection
    one; the call's bytes as far as they are known before this pass."""
    o = plan.options
    # Exact float32 too, since the rows step's refit (cost.STEP_ROWS_*): before it, its
    # per-step prices for graphs read up to 2× off, and 8 of 11 moves at S=256 ran slower
    # (results/persistence-moves-h200-2026-11-29-replay.jsonl). After it, over the 87
    # one-layer float32 pairs timed in the refit's A/B (results/persistence-moves-h200-2026-11-29-rows-fit-*.jsonl),
    # the side the plan picks ran a geometric mean 1.070× the faster side with eager calls
    # priced as replayed, 1.078× priced as queued by the host, 1.143× before the refit
    # (benchmarks/plan_choice_check.py; of the 84 pairs where it picks one of the two, the
    # slower by > 3% at 26, most where the grid and cluster FMA models read small H 1.3-1.5× slow).
    if o.graphed:
        return False
    operations = o.seq_len * (1 + library + bool(l.proj_size)) + 1
    return (operations >= REPLAY_MIN_OPERATIONS
            and call_bytes_before_persistence(plan, o.seq_len, o.batch, library) <= REPLAY_BYTES)


def _per_step(plan, l, target, itemsize: int,
              step_tile: StepTile | StepRows | StepRowsTensor) -> tuple[tuple[float, PerStep, str], dict[str, float]]:
    """((seconds per step, value, description), predicted seconds of each variant) of mode
    none: rnncc's FMA step kernel, or cuBLASLt's product and rnncc's cell kernel, whichever
    is predicted faster (or the one option ``gemm`` names); a projected LSTM's steps with
    their h projection. An eager call the runtime replays from a CUDA graph
    (per_step_replayed) is priced as a graphed one, plus REPLAYED_CALL_SECONDS over its steps:
    its host queues a copy and a graph launch, not a launch a step."""
    o = plan.options
    B, H, G = o.batch, l.hidden_size, l.gates
    # A projected LSTM's h comes from its h projection, not the cell: its GEMM is not padded.
    # Where it is, a call from h0 first copies h0 into the padded h (spread over the call's steps).
    sizes = l.library_step_sizes(itemsize)

    def priced(library: bool) -> tuple[float, float, bool]:
        """(seconds a step, of which the h projection's, whether replayed) of the FMA step
        kernel (``library`` False) or the library's product and the cell kernel."""
        replayed = per_step_replayed(plan, l, library)
        graphed = o.graphed or replayed
        projection = h_projection_seconds(B, H, l.proj_size, itemsize, target, graphed) if l.proj_size else 0.0
        if library:
            step = library_step_seconds(B, H, G, itemsize, l.precision.value, target, l.out_size, graphed,
                                        padded_sizes=sizes) \
                + (LIBRARY_PADDING_CALL_SECONDS / max(1, o.seq_len) if sizes else 0.0)
        else:
            step = step_kernel_seconds(B, H, G, step_tile, target, itemsize, l.out_size, graphed)
        replay = REPLAYED_CALL_SECONDS / max(1, o.seq_len) if replayed else 0.0
        return step + projection + replay, projection, replayed

    fma, library = priced(False), priced(True)
    gemm = o.gemm_for(l.name)
    use_library = gemm == "cublas" or (gemm is None and library[0] < fma[0])
    seconds, projection, replayed = library if use_library else fma
    then = (f", then h = r·W_hrᵀ in rnncc's kernel ({projection * 1e6:.1f} µs)" if l.proj_size else "")
    if replayed:
        then += (f"; an eager call replayed from a CUDA graph once seen again (≥ {REPLAY_MIN_OPERATIONS} "
                 f"operations): the steps' GPU time and {REPLAYED_CALL_SECONDS * 1e6:.0f} µs a call over "
                 f"{o.seq_len} steps")
    if use_library:
        padding = (f" (its sizes padded with zeros to K={sizes[0]}, M={sizes[1]}, which the library runs at the "
                   f"aligned rate)" if sizes else "")
        what = (f"h·W_hhᵀ in cuBLASLt{padding} and the cell in rnncc's kernel, a launch per step{then} "
                f"(rnncc's FMA step kernel: {fma[0] * 1e6:.1f} µs/step)")
    else:
        form = {"rows": "rows, FMA", "rows_tensor": "rows, tensor cores"}.get(step_tile.math, "tiles, FMA")
        what = f"rnncc's step kernel ({form}), a launch per step{then}" + (
            "" if gemm == "rnncc" else f" (cuBLASLt and a cell kernel: {library[0] * 1e6:.1f} µs/step)")
    variants = {persistence_label(PerStep("fma")): fma[0]}
    if gemm != "rnncc":
        variants[persistence_label(PerStep("cublas"))] = library[0]
    return (seconds, PerStep("cublas" if use_library else "fma"), what), variants
