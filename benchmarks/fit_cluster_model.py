"""Fit a persistent kernel's step model to a tile sweep of it: non-negative least squares of
the measured µs a step over the counts of the model's terms, weighted by 1/measured
(relative error). Prints the constants, the error and, per case, how far the model's pick
is from the fastest tile. No GPU needed.

The lanes form of the FMA cluster kernel (LANES_*, ``cost.lanes_terms``): lines marked
" lanes" are of that form, or every line with --all-lanes (the first sweep, run before the
two forms coexisted); its pushed h is priced by its own terms, nothing taken off. Its K
tile is its split (``cost.cluster_tiles``); --old-lanes reads a sweep from before that
(K tiles of 32, the sweeps of 2026-11-23 and cluster-tile-sweep-lanes-exchange-*).

    python3 benchmarks/fit_cluster_model.py benchmarks/results/cluster-tile-sweep-lanes-push-h100-2026-11-24.txt

The shared-memory form of the FMA cluster kernel (CLUSTER_*, ``cost.cluster_shared_terms``),
with --shared: the lines without " lanes", the exchange measured alone taken off first.

    python3 benchmarks/fit_cluster_model.py benchmarks/results/cluster-tile-sweep-exchange-h100-2026-11-24.txt --shared

Either FMA form with --waves-at-once: each tile's step counted in waves of the clusters the
GPU holds at once (as cost.cluster_seconds prices them) rather than by SMs (as the committed
constants were fitted). The shared-memory form's error falls from a median 9% (at most 56%)
to 6% (27%), but the refit's plans lost at shapes outside the sweep (rnn_tanh H=100 fp16 up
to 1.96×; results/persistence-moves-h200-2026-11-29-refit.txt), so it is not in cost.py.

The tensor-core cluster kernel, both forms (CLUSTER_* and TENSOR_REGISTERS_*,
``cost.tensor_cluster_terms``), with --tensor: the exchange measured alone
(``cost.cluster_exchange_seconds``) is taken off each time first, and each wave of
clusters counted.

    python3 benchmarks/fit_cluster_model.py benchmarks/results/cluster-tile-sweep-tensor-wide-h100-2026-11-23.txt --tensor

The FMA grid kernel (GRID_FMA_*, ``cost.grid_fma_terms``), with --grid: a sweep by
``benchmarks/grid_tile_sweep.py fma``.

    python3 benchmarks/fit_cluster_model.py benchmarks/results/grid-tile-sweep-fma-h100-2026-11-24.txt --grid

The grid kernel on tensor cores (GRID_STEP_, GRID_TILE_, GRID_K_STEP_ and the GRID_WGMMA_*
prices of ``cost.tensor_seconds``), with --tensor-grid: a sweep by
``benchmarks/grid_tile_sweep.py`` (grid, wide or wgmma), by plain least squares as first
fitted (``tensor_grid_fit``). The chain is taken as latency (a k-step's price), not the SM's
mma throughput, which binds at none of the swept tiles; a line whose tile the model prices
otherwise (the throughput bound) is left out and counted.

    python3 benchmarks/fit_cluster_model.py benchmarks/results/grid-tile-sweep-h100-2026-11-23.txt --tensor-grid

The grid kernel on tensor cores on the H200 (--grid-steps): the step alone of every tile of
the planner's grid family at 40 cases (GRID_STEP_SWEEPS, the projection's share measured
apart and taken off), fitted by least squares to the counts of cost.grid_step_terms (as a ranking
model: benchmarks/variants/grid-refit-h200.patch, not landed), beside cost.py's model: the error
of each and, per case, how far each one's pick runs from the fastest tile; then
cost.GRID_STEP_PRICES as fitted (grid_step_price_fit) and its price of each case's pick.

    python3 benchmarks/fit_cluster_model.py --grid-steps [SWEEP ...]

The wgmma product's staging of h (GRID_WGMMA_STAGE_SECONDS past GRID_WGMMA_STAGED_FREE
loads a thread), fitted to the residuals of the sweeps of 2026-11-28 (``wgmma_staging_fit``,
WGMMA_STAGING_SWEEPS) at each threshold of WGMMA_STAGING_THRESHOLDS:

    python3 benchmarks/fit_cluster_model.py --wgmma-staging
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from rnncc.passes import cost
from rnncc.passes.cost import (cluster_exchange_seconds, cluster_shared_terms, grid_fma_terms, lanes_terms,
                               measured_exchange_seconds, tensor_cluster_terms, tensor_cluster_waves)
from rnncc.tiles import ClusterTile, PersistentTile, TensorTile, batch_tiles_per_block, lanes_k_tile
from rnncc.target import PRESETS

LINE = re.compile(r"(\w+) float32 H=(\d+) B=(\d+): cluster=(\d+) units=(\d+) bpb=(\d+) rows/thread=(\d+) "
                  r"ks=(\d+) units/thread=(\d+) threads=(\d+)( registers)?( lanes)?: measured ([\d.]+)")


def points(text: str, all_lanes: bool, shared: bool = False, old_lanes: bool = False, at_once: bool = False):
    """(case, tile, µs a step, waves) of each line of a sweep of the lanes form, or with
    ``shared`` of the shared-memory form (the lines without " lanes"). ``old_lanes``: a
    sweep from before the lanes form's K tile became its split (32 then). Waves by SMs (the
    clusters' blocks over the SMs), as CLUSTER_* and LANES_* were fitted; with ``at_once``
    by the clusters the sweep's GPU holds at once, as cost.cluster_seconds counts them since
    2026-11-29 (a refit so was A/B'd and not landed: docs/design-notes.md, "Clusters past
    what the GPU holds")."""
    for m in LINE.finditer(text):
        cell = m.group(1)
        H, B, c, units, bpb, rpt, ks, upt, threads = map(int, m.groups()[1:10])
        if shared == bool(m.group(12)) or not (shared or all_lanes or m.group(12)):
            continue
        tile = ClusterTile(c, units, bpb, rpt, ks, upt, weights_in_registers=bool(m.group(11)), k_lanes=not shared)
        if tile.k_lanes and not old_lanes:  # the lanes form's K tile, as cost.cluster_tiles makes it
            tile = replace(tile, k_tile=lanes_k_tile(ks))
        assert tile.threads == threads, m.group(0)
        clusters = math.ceil(B / bpb)
        waves = math.ceil(clusters / cost.clusters_at_once(PRESETS["h100"], c)) if at_once else \
            math.ceil(clusters * c / PRESETS["h100"].sm_count)
        yield (cell, H, B), tile, float(m.group(13)), waves


TENSOR_LINE = re.compile(r"(\w+) (\w+) H=(\d+) B=(\d+): cluster=(\d+) units=(\d+) bpb=(\d+) ks=(\d+) "
                         r"m_tiles=(\d+) batch_blocks=1 threads=\d+( registers)?( wgmma)?: measured ([\d.]+)")
GATES = {"lstm": 4, "gru": 3}


def tensor_rows(text: str):
    """(case, tile, µs a step, {term: count × waves}, µs of exchange × waves) of each line of
    a sweep of the tensor-core cluster kernel."""
    target = PRESETS["h100"]
    for m in TENSOR_LINE.finditer(text):
        cell, dtype = m.group(1), m.group(2)
        H, B, c, units, bpb, ks, mt = map(int, m.groups()[2:9])
        tile = TensorTile(units, bpb, ks, mt, c, 1, weights_in_registers=bool(m.group(10)),
                          wgmma=bool(m.group(11)))
        itemsize = 4 if dtype == "float32" else 2
        waves = tensor_cluster_waves(B, tile, target)
        terms = {n: v * waves for n, v in
                 tensor_cluster_terms(B, H, GATES.get(cell, 1), tile, target, itemsize).items()}
        yield (cell, dtype, H, B), tile, float(m.group(12)), terms, waves * cluster_exchange_seconds(c) * 1e6


GRID_LINE = re.compile(r"(\w+) float32 H=(\d+) B=(\d+): units=(\d+) bpb=(\d+) rows/thread=(\d+) ks=(\d+) "
                       r"units/thread=(\d+) batch_blocks=(\d+) threads=(\d+): measured ([\d.]+)")


def grid_rows(text: str):
    """(case, tile, µs a step, {term: count}) of each line of a sweep of the FMA grid kernel."""
    for m in GRID_LINE.finditer(text):
        cell = m.group(1)
        H, B, units, bpb, rpt, ks, upt, blocks, threads = map(int, m.groups()[1:10])
        tile = PersistentTile(units, bpb, rpt, ks, blocks, upt)
        assert tile.threads == threads, m.group(0)
        yield (cell, H, B), tile, float(m.group(11)), grid_fma_terms(B, H, GATES.get(cell, 1), tile)


GRID_STEP_LINE = re.compile(r"(\w+) (\w+) H=(\d+) B=(\d+): units=(\d+) bpb=(\d+) ks=(\d+) m_tiles=(\d+) "
                            r"batch_blocks=(\d+) threads=(\d+)( wgmma)?(?: register_steps=(\d+))?: "
                            r"(?:measured )?([\d.]+) µs/step")


def tensor_grid_terms(B: int, H: int, tile: TensorTile, itemsize: int) -> dict[str, float]:
    """The counts of one step of the grid kernel on tensor cores that cost.tensor_seconds
    prices, its chain taken as latency: per batch tile a block runs, the tile's fixed work
    and its warps' chain (mma.sync: k-steps × batch tiles of 8; wgmma: k-steps, and the K
    split's partial sums per batch tile of 8)."""
    tiles = batch_tiles_per_block(B, tile.batch_per_block, tile.batch_blocks)
    k_steps, n_tiles = tile.k_steps(H, itemsize), tile.batch_per_block // 8
    terms = {"GRID_STEP_SECONDS": 1.0, "GRID_TILE_SECONDS": tiles}
    if tile.wgmma:
        staged = cost.staged_loads_per_thread(B, H, tile, itemsize) - cost.GRID_WGMMA_STAGED_FREE
        terms |= {"GRID_WGMMA_K_STEP_SECONDS": tiles * k_steps,
                  "GRID_WGMMA_SPLIT_SECONDS": tiles * tile.k_split * n_tiles,
                  "GRID_WGMMA_STAGE_SECONDS": tiles * max(0, staged)}
    else:
        terms["GRID_K_STEP_SECONDS"] = tiles * k_steps * n_tiles
    return terms


def grid_step_lines(text: str):
    """(cell, dtype, H, B, tile, µs a step) of each measured line of a grid sweep on tensor
    cores (grid_tile_sweep.py, its --family --steps too, register_tiles.py), W_hh's k-steps
    in registers included."""
    for m in GRID_STEP_LINE.finditer(text):
        cell, dtype = m.group(1), m.group(2)
        H, B, units, bpb, ks, mt, blocks, threads = map(int, m.groups()[2:10])
        tile = TensorTile(units, bpb, ks, mt, 0, blocks, wgmma=bool(m.group(11)),
                          register_steps=int(m.group(12) or 0))
        assert tile.threads == threads, m.group(0)
        yield cell, dtype, H, B, tile, float(m.group(13))


def tensor_grid_rows(text: str):
    """(case, tile, µs a step, {term: count}) of each line of a grid sweep on tensor cores
    whose model price is the latency chain; also how many lines the throughput bound prices."""
    target, rows, bound = PRESETS["h100"], [], 0
    for cell, dtype, H, B, tile, us in grid_step_lines(text):
        itemsize, gates = (4 if dtype == "float32" else 2), GATES.get(cell, 1)
        terms = tensor_grid_terms(B, H, tile, itemsize)
        priced = sum(getattr(cost, n) * c for n, c in terms.items())
        if abs(priced - cost.tensor_seconds(B, H, gates, tile, target, itemsize)) > 1e-12:
            bound += 1  # the model prices this tile by the SM's throughput: not a chain point
            continue
        rows.append(((cell, dtype, H, B), tile, us, terms))
    return rows, bound


def tensor_grid_fit(text: str) -> tuple[list, dict[str, float], np.ndarray, int, int]:
    """cost.tensor_seconds' grid prices by plain least squares over the tiles whose rows load
    as 16-byte vectors (H · itemsize a multiple of 16), as they were first fitted: on
    results/grid-tile-sweep-h100-2026-11-23.txt this gives GRID_STEP 1.362, GRID_TILE 2.512
    and GRID_K_STEP 0.0324 µs, the committed values (GRID_STEP less the barrier's 0.54 since;
    test_plan checks it). Returns the rows fitted, {price: µs}, each row's fitted µs, and
    the lines left out: rows that are not 16-byte vectors, tiles priced by the throughput bound."""
    found, bound = tensor_grid_rows(text)
    rows = [r for r in found if r[0][2] * (4 if r[0][1] == "float32" else 2) % 16 == 0]
    names = sorted({n for *_, t in rows for n in t})
    a = np.array([[t.get(n, 0.0) for n in names] for *_, t in rows])
    coef = np.linalg.lstsq(a, np.array([us for _, _, us, _ in rows]), rcond=None)[0]
    return rows, dict(zip(names, coef)), a @ coef, len(found) - len(rows), bound


WGMMA_STAGING_SWEEPS = ("grid-tile-sweep-b64-h100-2026-11-28.txt", "grid-tile-sweep-parts-h100-2026-11-28.txt")
WGMMA_STAGING_THRESHOLDS = (0, 4, 8, 12, 16)


def wgmma_staging_fit(texts: list[str], free: int) -> tuple[int, float, float, float]:
    """GRID_WGMMA_STAGE_SECONDS at GRID_WGMMA_STAGED_FREE = ``free``, by least squares over
    the wgmma tiles of grid sweeps, every other price of cost.tensor_seconds as it is and an
    intercept per case (a sweep's times carry the case's projection): the residual (measured
    less the price without the term) against the term's count. Returns (tiles, µs a load,
    RMS residual without the term, with it)."""
    rows = [r for text in texts for r in tensor_grid_rows(text)[0] if r[1].wgmma]
    cases = sorted({case for case, *_ in rows})
    a, y = np.zeros((len(rows), len(cases) + 1)), np.zeros(len(rows))
    for i, ((cell, dtype, H, B), tile, us, terms) in enumerate(rows):
        itemsize = 4 if dtype == "float32" else 2
        priced = sum(getattr(cost, n) * c for n, c in terms.items()) * 1e6
        staged = terms["GRID_WGMMA_STAGE_SECONDS"]
        a[i, cases.index((cell, dtype, H, B))] = 1.0
        a[i, -1] = max(0, cost.staged_loads_per_thread(B, H, tile, itemsize) - free) * \
            batch_tiles_per_block(B, tile.batch_per_block, tile.batch_blocks)
        y[i] = us - (priced - cost.GRID_WGMMA_STAGE_SECONDS * 1e6 * staged)
    coef = np.linalg.lstsq(a, y, rcond=None)[0]
    base = np.linalg.lstsq(a[:, :-1], y, rcond=None)[0]
    return len(rows), float(coef[-1]), float(np.sqrt(((y - a[:, :-1] @ base) ** 2).mean())), \
        float(np.sqrt(((y - a @ coef) ** 2).mean()))


def wgmma_staging_picks(texts: list[str], free: int, per_load: float) -> list[float]:
    """Per case and SM budget (all SMs; 1/2 and 1/4 of them, a pipelined stack's partitions),
    the measured µs of the tile cost.tensor_seconds ranks first among the swept tiles that
    fit the budget, its staging priced ``per_load`` µs a load past ``free``, over the
    fastest measured there."""
    target = PRESETS["h100"]
    groups: dict[tuple, list[tuple[float, float]]] = {}
    for text in texts:
        for cell, dtype, H, B, tile, us in grid_step_lines(text):
            itemsize = 4 if dtype == "float32" else 2
            price = cost.tensor_seconds(B, H, GATES.get(cell, 1), tile, target, itemsize) * 1e6
            if tile.wgmma:
                loads = cost.staged_loads_per_thread(B, H, tile, itemsize)
                tiles = batch_tiles_per_block(B, tile.batch_per_block, tile.batch_blocks)
                price += tiles * (per_load * max(0, loads - free) - cost.GRID_WGMMA_STAGE_SECONDS * 1e6 *
                                  max(0, loads - cost.GRID_WGMMA_STAGED_FREE))
            for parts in (1, 2, 4):
                if math.ceil(H / tile.units_per_block) * tile.batch_blocks <= target.sm_count // parts:
                    groups.setdefault((cell, dtype, H, B, parts), []).append((price, us))
    return [min(g)[1] / min(us for _, us in g) for g in groups.values()]


def fit_tensor_grid(path: str, text: str) -> None:
    """Prints tensor_grid_fit's prices beside cost.py's, the fit's error and, per case, the
    measured time of the tile the fit ranks first against the fastest."""
    rows, prices, fit, unaligned, bound = tensor_grid_fit(text)
    print(f"{len(rows)} tiles of {len({r[0] for r in rows})} cases, from {path}; left out: "
          f"{unaligned} whose rows are not 16-byte vectors, {bound} the model prices by the SM's mma throughput")
    for n, v in prices.items():
        print(f"{n} = {v:.4f}e-6   (cost.py: {getattr(cost, n) * 1e6:.4f}e-6)")
    y = np.array([us for _, _, us, _ in rows])
    errors = np.abs(fit - y) / y
    print(f"relative error: median {np.median(errors):.0%}, max {errors.max():.0%}")
    by_case: dict = {}
    for (case, _, us, _), predicted in zip(rows, fit):
        by_case.setdefault(case, []).append((predicted, us))
    for case, rs in by_case.items():
        pick, fastest = min(rs)[1], min(us for _, us in rs)
        print(f"{case}: the pick runs {pick:.2f} µs a step, the fastest {fastest:.2f} ({pick / fastest:.2f}×)")


# The H200's step-only grid sweeps (the step alone, (S=256 − S=129) / 127, of the planner's
# whole grid family, resident and hybrid tiles included; 2026-11-29, kernels as at 35bf5cc)
# and the projection's share of each case's step, measured apart.
GRID_STEP_SWEEPS = ("grid-tile-steps-h200-2026-11-29.txt", "grid-tile-steps-h200-2026-11-29-batches.txt",
                    "grid-tile-steps-h200-2026-11-29-b8-64.txt", "grid-tile-steps-h200-2026-11-29-unaligned.txt",
                    "grid-tile-steps-h200-2026-11-29-losses.txt", "grid-tile-steps-h200-2026-11-29-graph-losses.txt",
                    "grid-tile-steps-h200-2026-11-29-unaligned-once.txt", "grid-tile-steps-h200-2026-11-29-large-batches.txt")
GRID_STEP_PROJECTIONS = "grid-tile-steps-projections-h200-2026-11-29.txt"
PROJECTION_LINE = re.compile(r"(\w+) (\w+) H=(\d+) B=(\d+): projection ([\d.]+) µs/step")


def grid_step_rows(texts: list[str], projections: str) -> list:
    """(case, tile, µs a step less the projection's share, terms) of each line of the
    step-only sweeps: the projection ((S=256 − S=129) rows of the GEMM, one kernel at every
    tile of a case), which the plan prices apart, taken off each case's steps from
    ``projections`` (grid_tile_sweep.py --projection-only lines), else from the projection
    lines of the sweeps themselves (--steps prints one a case). A case swept again in a later text
    replaces its tiles of the earlier ones: its kernels changed in between (the unaligned
    staging of 22a6110, whose cases the first sweeps measured with h's padding zeroed every
    step)."""
    shares = {}
    tiles: dict = {}
    for text in [*texts, projections]:
        shares |= {(m[1], m[2], int(m[3]), int(m[4])): float(m[5]) for m in PROJECTION_LINE.finditer(text)}
    for text in texts:
        swept: dict = {}
        for cell, dtype, H, B, tile, us in grid_step_lines(text):
            swept.setdefault((cell, dtype, H, B), []).append((tile, us))
        tiles |= swept
    return [(case, tile, us - shares[case],
             cost.grid_step_terms(case[3], case[2], GATES.get(case[0], 1), tile, 4 if case[1] == "float32" else 2))
            for case, measured in tiles.items() for tile, us in measured]


def committed_grid_step_rows() -> list:
    """grid_step_rows of the committed sweeps (GRID_STEP_SWEEPS, GRID_STEP_PROJECTIONS)."""
    results = Path(__file__).parent / "results"
    return grid_step_rows([(results / f).read_text() for f in GRID_STEP_SWEEPS],
                          (results / GRID_STEP_PROJECTIONS).read_text())


def ranking_prices(rows: list) -> list[float]:
    """cost.tensor_seconds, the model that ranks the grid family, of each row of
    grid_step_rows on the H200's preset, in µs."""
    target = PRESETS["h200"]
    return [cost.tensor_seconds(B, H, GATES.get(cell, 1), tile, target, 2) * 1e6
            for (cell, _, H, B), tile, _, _ in rows]


def grid_step_fit(rows: list) -> tuple[dict[str, float], np.ndarray]:
    """grid_step_terms' prices by least squares of the relative error over grid_step_rows:
    {price: µs} and each row's fitted µs. (Every price comes out positive at the committed
    sweeps, so this is also their non-negative fit; numpy alone, as the CPU tests have.)"""
    names = sorted({n for *_, t in rows for n in t})
    a = np.array([[t.get(n, 0.0) for n in names] for *_, t in rows])
    y = np.array([us for _, _, us, _ in rows])
    coef = np.linalg.lstsq(a / y[:, None], np.ones(len(y)), rcond=None)[0]
    return dict(zip(names, coef)), a @ coef


# cost.GRID_STEP_PRICES' fit: the tiles within GRID_PRICE_NEAR of their case's fastest (those
# a ranking picks among), the committed model's pick of each case GRID_PRICE_PICK_WEIGHT
# times over: that tile is the one the prices serve (persistence.decide_modes). Unweighted,
# its price read LSTM fp16 H=1400-1536 B=20-32's picks 15-19% low, and the plans for graphed
# calls there ran 1.05-1.10× slower on grid than on cuBLASLt steps
# (results/persistence-moves-h200-2026-11-29-grid-price.txt).
GRID_PRICE_NEAR = 1.5
GRID_PRICE_PICK_WEIGHT = 10.0


def ranked_first(rows: list, ranked) -> dict[tuple, int]:
    """{case: the index in ``rows`` (grid_step_rows) of the tile ``ranked`` (a price a row)
    puts first, the first of tiles priced alike}."""
    firsts: dict = {}
    for i, ((case, *_), price) in enumerate(zip(rows, ranked)):
        if case not in firsts or price < ranked[firsts[case]]:
            firsts[case] = i
    return firsts


def grid_step_price_fit(rows: list, ranked) -> dict[str, float]:
    """cost.GRID_STEP_PRICES ({price: µs}) by least squares of the relative error over the
    rows of grid_step_rows within GRID_PRICE_NEAR of their case's fastest, the tile that
    ``ranked`` (a price a row) puts first in each case weighted GRID_PRICE_PICK_WEIGHT."""
    fastest: dict = {}
    for case, _, us, _ in rows:
        fastest[case] = min(fastest.get(case, us), us)
    picked = set(ranked_first(rows, ranked).values())
    chosen = [i for i, (case, _, us, _) in enumerate(rows) if us <= GRID_PRICE_NEAR * fastest[case] or i in picked]
    names = sorted({n for i in chosen for n in rows[i][3]})
    a = np.array([[rows[i][3].get(n, 0.0) for n in names] for i in chosen])
    y = np.array([rows[i][2] for i in chosen])
    w = np.array([GRID_PRICE_PICK_WEIGHT if i in picked else 1.0 for i in chosen])
    coef = np.linalg.lstsq(a / y[:, None] * w[:, None], w, rcond=None)[0]
    return dict(zip(names, coef))


def grid_step_picks(rows: list, predicted) -> dict[tuple, tuple[float, float]]:
    """{case: (the measured µs of the tile ``predicted`` (a price a row of grid_step_rows)
    ranks first over the fastest measured tile of the case, over its own price)}."""
    by_case: dict = {}
    for (case, _, us, _), price in zip(rows, predicted):
        by_case.setdefault(case, []).append((price, us))
    return {case: (min(rs)[1] / min(us for _, us in rs), min(rs)[1] / min(rs)[0]) for case, rs in by_case.items()}


def fit_grid_steps(paths: list[str]) -> None:
    """Prints grid_step_fit's prices, its error and cost.py's (cost.tensor_seconds) and, per
    case, the measured time of the tile each ranks first against the fastest."""
    rows = grid_step_rows([Path(p).read_text() for p in paths],
                          (Path(__file__).parent / "results" / GRID_STEP_PROJECTIONS).read_text())
    prices, fit = grid_step_fit(rows)
    y = np.array([us for _, _, us, _ in rows])
    committed = np.array(ranking_prices(rows))
    print(f"{len(rows)} tiles of {len({r[0] for r in rows})} cases, from {', '.join(paths)}")
    for n, v in prices.items():
        print(f"{n} = {v * 1e-6:.4g}")
    picks = {}
    for name, f in (("fit", fit), ("cost.py", committed)):
        errors = np.abs(f - y) / y
        firsts = grid_step_picks(rows, f)
        picks[name] = {case: pick for case, (pick, _) in firsts.items()}
        level = [measured_over_price for _, measured_over_price in firsts.values()]
        print(f"{name}: relative error median {np.median(errors):.0%}, max {errors.max():.0%}; measured / "
              f"predicted median {np.median(y / f):.2f}, at the tile it ranks first {min(level):.2f}-{max(level):.2f}; "
              f"that tile runs {np.mean(list(picks[name].values())):.3f}× the fastest on average, "
              f"{max(picks[name].values()):.2f}× at worst")
    for case in picks["fit"]:
        print(f"{case}: the fit's pick {picks['fit'][case]:.2f}× the fastest, "
              f"cost.py's {picks['cost.py'][case]:.2f}×")
    step_prices = grid_step_price_fit(rows, committed)
    print(f"GRID_STEP_PRICES (tiles within {GRID_PRICE_NEAR}× of the fastest, cost.py's picks weighted "
          f"{GRID_PRICE_PICK_WEIGHT:g}):")
    for n, v in step_prices.items():
        print(f"  {n} = {v * 1e-6:.4g}")
    for case, i in ranked_first(rows, committed).items():
        _, _, us, terms = rows[i]
        price = sum(step_prices[n] * c for n, c in terms.items())
        print(f"{case}: cost.py's pick {us:.2f} µs a step, priced {price:.2f} ({us / price:.2f})")


def main(path: str, all_lanes: bool, tensor: bool, shared: bool = False, grid: bool = False,
         old_lanes: bool = False, tensor_grid: bool = False, at_once: bool = False) -> None:
    if path == "--wgmma-staging":
        results = Path(__file__).parent / "results"
        texts = [(results / f).read_text() for f in WGMMA_STAGING_SWEEPS]
        print(f"from the wgmma tiles of {', '.join(WGMMA_STAGING_SWEEPS)} (cost.py: GRID_WGMMA_STAGED_FREE = "
              f"{cost.GRID_WGMMA_STAGED_FREE}, GRID_WGMMA_STAGE_SECONDS = {cost.GRID_WGMMA_STAGE_SECONDS * 1e6:.3f}e-6)")
        for free in WGMMA_STAGING_THRESHOLDS:
            n, c, before, after = wgmma_staging_fit(texts, free)
            picks = wgmma_staging_picks(texts, free, c)
            print(f"  free {free:2d} loads: {c:.3f} µs a load past them, {n} tiles, RMS residual {before:.2f} -> "
                  f"{after:.2f} µs; the picks of {len(picks)} (case, SM budget) run {np.mean(picks):.3f}× the "
                  f"fastest on average, {max(picks):.2f}× at worst")
        picks = wgmma_staging_picks(texts, 0, 0.0)
        print(f"  without the term: the picks run {np.mean(picks):.3f}× the fastest on average, {max(picks):.2f}× at worst")
        return
    if path == "--grid-steps":
        results = Path(__file__).parent / "results"
        fit_grid_steps(sys.argv[2:] or [str(results / f) for f in GRID_STEP_SWEEPS])
        return
    text = Path(path).read_text()
    if tensor_grid:
        fit_tensor_grid(path, text)
        return
    if grid:
        found = list(grid_rows(text))
        rows = [(case, tile, us, 1) for case, tile, us, _ in found]
        terms = [t for *_, t in found]
        fixed = np.zeros(len(rows))
    elif tensor:
        found = list(tensor_rows(text))
        rows = [(case, tile, us, 1) for case, tile, us, _, _ in found]
        terms = [t for _, _, _, t, _ in found]
        fixed = np.array([e for *_, e in found])
    else:
        rows = list(points(text, all_lanes, shared, old_lanes, at_once))
        count = cluster_shared_terms if shared else lanes_terms
        terms = [count(H, GATES.get(cell, 1), tile) for (cell, H, B), tile, _, _ in rows]
        # The exchange measured alone where the form has one (the shared-memory form's slice
        # exchange), taken off as for the tensor kernel; the lanes form's pushed h is in its
        # terms.
        fixed = np.array([w * measured_exchange_seconds(tile) * 1e6 for _, tile, _, w in rows])
    from scipy.optimize import nnls  # the NNLS fits only (fit_tensor_grid needs numpy alone)

    names = sorted({n for t in terms for n in t})
    a = np.array([[t.get(n, 0.0) * w for n in names] for t, (_, _, _, w) in zip(terms, rows)])
    y = np.array([us for _, _, us, _ in rows])
    weight = 1.0 / y
    coef, _ = nnls(a * weight[:, None], (y - fixed) * weight)
    fit = a @ coef + fixed
    print(f"{len(rows)} tiles, {len({r[0] for r in rows})} cases, from {path}")
    for n, v in zip(names, coef):
        print(f"{n} = {v:.4f}e-6")
    errors = np.abs(fit - y) / y
    print(f"relative error: median {np.median(errors):.0%}, max {errors.max():.0%}")
    by_case: dict = {}
    for (case, tile, us, _), predicted in zip(rows, fit):
        by_case.setdefault(case, []).append((round(predicted * 100), getattr(tile, "cluster", 0), tile.threads, us))
    for case, rs in by_case.items():
        pick = min(rs)
        fastest = min(r[3] for r in rs)
        print(f"{case}: the pick runs {pick[3]:.2f} µs a step, the fastest {fastest:.2f} "
              f"({pick[3] / fastest:.2f}×)")


if __name__ == "__main__":
    main(sys.argv[1], "--all-lanes" in sys.argv, "--tensor" in sys.argv, "--shared" in sys.argv,
         "--grid" in sys.argv, "--old-lanes" in sys.argv, "--tensor-grid" in sys.argv, "--waves-at-once" in sys.argv)
