"""The backward recurrence's two forms timed on the same inputs (issue 17): the grid form
(backward_recurrent.cu.j2, one grid barrier a step) against the cluster form
(backward_cluster.cu.j2, W_hh in registers, dG exchanged inside a cluster: mma for half
layers, FMA for float32), CUDA-graph replays interleaved in one process
(rnncc.timing.time_graphs_interleaved), µs a step, and the form the plan takes
(tiles.backward_kernel_tile). For float32 the FMA form is also timed at smaller clusters
(at most 8 and 4 blocks), to check its rule (the widest). Needs a GPU.

    python3 benchmarks/backward_forms.py [-o DIR] [--dtype float32]
    python3 benchmarks/backward_forms.py --sweep [-o DIR] [--precompile]

--sweep times every FMA cluster tile of the float32 cases whose cluster is 1, 2, 4, 8, 16 or
the largest that applies (tiles.fma_backward_cluster_tiles), beside the grid form, into
backward-fma-tiles-<gpu>.jsonl: the measurements fma_backward_step_seconds is fitted to.
--precompile only builds those kernels (no GPU: into RNNCC_CACHE_DIR, to carry to one).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from rnncc import backward, tiles
from rnncc.ir import Model
from rnncc.passes.cost import largest_cluster
from rnncc.target import get
from rnncc.timing import time_graphs_interleaved

# (cell, dtype, H, B, S)
CASES = [("lstm", "float16", 512, 8, 256), ("gru", "float16", 512, 8, 256), ("lstm", "float16", 256, 8, 256),
         ("lstm", "bfloat16", 512, 8, 256), ("lstm", "float16", 128, 8, 256), ("lstm", "float16", 512, 64, 256),
         ("gru", "float16", 256, 64, 256), ("lstm", "float16", 512, 3, 256), ("rnn_tanh", "float16", 1024, 8, 256),
         ("lstm", "float16", 512, 128, 64),
         ("lstm", "float32", 128, 16, 32), ("gru", "float32", 128, 16, 32), ("lstm", "float32", 128, 16, 256),
         ("lstm", "float32", 256, 8, 256), ("lstm", "float32", 256, 64, 256), ("gru", "float32", 256, 64, 256),
         ("lstm", "float32", 64, 8, 256), ("lstm", "float32", 33, 5, 256), ("rnn_tanh", "float32", 512, 8, 256),
         ("lstm", "float32", 128, 64, 256)]


def recurrence_inputs(cell: str, dtype: str, H: int, B: int, S: int):
    """(a one-layer model's layer, W_hh, pre, pre_h, h_prev, dy): random inputs of the
    backward recurrence (backward.recurrence's, no initial or final states), seeded."""
    layer = Model.from_dict({"name": "m", "input_size": 8, "dtype": dtype, "layers": [
        {"name": "l0", "cell": cell, "hidden_size": H}]}).layers[0]
    G, tdt = layer.gates, getattr(torch, dtype)
    torch.manual_seed(0)
    w_hh = (torch.randn(G * H, H, device="cuda") / H ** 0.5).to(tdt)
    pre = torch.randn(S, B, G * H, device="cuda")
    pre_h = torch.randn(S, B, G * H, device="cuda") if cell == "gru" else None
    h_prev = torch.randn(S, B, H, device="cuda").tanh().to(tdt)
    return layer, w_hh, pre, pre_h, h_prev, torch.randn(S, B, H, device="cuda")


SWEEP_CLUSTERS = (1, 2, 4, 8, 16)


# float32 shapes the fit has not seen (the sweep's second run): its picks checked there
CHECK_CASES = [("gru", "float32", 64, 32, 256), ("lstm", "float32", 200, 24, 128), ("rnn_relu", "float32", 300, 4, 256),
               ("lstm", "float32", 100, 3, 64), ("gru", "float32", 160, 128, 64)]


def sweep_tiles(G: int, H: int, B: int, max_cluster: int, shared_max: int, at_once) -> tuple[list, object]:
    """(the FMA cluster tiles the sweep times: those of SWEEP_CLUSTERS and the largest
    cluster, and the planned one; the planned one, tiles.fma_backward_cluster_tile's pick)."""
    found = tiles.fma_backward_cluster_tiles(G, H, B, max_cluster, shared_max)
    largest = max((t.cluster for t in found), default=0)
    planned = tiles.fma_backward_cluster_tile(G, H, B, max_cluster, shared_max, 132, at_once)
    return [t for t in found if t.cluster in SWEEP_CLUSTERS or t.cluster == largest or t == planned], planned


def time_forms(inputs, forms: dict) -> dict[str, float]:
    """Median ms of backward.recurrence at each tile of ``forms`` on ``inputs``
    (recurrence_inputs'), CUDA-graph replays interleaved; the pre-activations are not
    overwritten (float32's default), since every form reads them."""
    layer, w_hh, pre, pre_h, h_prev, dy = inputs
    return time_graphs_interleaved({
        k: (lambda tile=tile: backward.recurrence(layer, w_hh, pre, pre_h, h_prev, None, dy, None, None,
                                                  tile=tile, overwrite=False)) for k, tile in forms.items()})


def sweep(args, target, shared_max: int) -> None:
    from rnncc import build, codegen
    rows = []
    at_once = target.clusters_at_once if target is not None else get("h100").clusters_at_once
    max_cluster = 16 if target is None else largest_cluster(target)
    for cell, dtype, H, B, S in CASES + CHECK_CASES:
        if dtype != "float32":
            continue
        G = {"lstm": 4, "gru": 3}.get(cell, 1)
        found, planned = sweep_tiles(G, H, B, max_cluster, shared_max, at_once)
        if args.precompile:
            for t in found:
                build.compile_cubin(codegen.render_backward(cell, H, G, dtype, t), "sm_90a")
            print(f"{cell} H={H} B={B}: {len(found)} kernels built", flush=True)
            continue
        forms = {"grid": tiles.backward_tile(G, H, B, target.sm_count, shared_max)} | {str(t): t for t in found}
        times = time_forms(recurrence_inputs(cell, dtype, H, B, S), forms)
        for k, tile in forms.items():
            row = {"cell": cell, "dtype": dtype, "hidden": H, "batch": B, "seq_len": S,
                   "form": "grid" if k == "grid" else "fma cluster", "tile": tile.to_dict(),
                   "planned": tile == planned, "fitted": (cell, dtype, H, B, S) in CASES,
                   "clusters": None if k == "grid" else tile.clusters(B),
                   "us_per_step": times[k] * 1e3 / (S + 1)}
            rows.append(row)
        best = min((k for k in forms if k != "grid"), key=times.get)
        print(f"  planned {planned}: {times[str(planned)] * 1e3 / (S + 1):.2f}", flush=True)
        print(f"{cell} H={H} B={B} S={S}: grid {times['grid'] * 1e3 / (S + 1):.2f}, {len(found)} cluster tiles "
              f"{min(times[k] for k in forms if k != 'grid') * 1e3 / (S + 1):.2f}-"
              f"{max(times[k] for k in forms if k != 'grid') * 1e3 / (S + 1):.2f}, best {best}", flush=True)
    if not args.precompile:
        out = Path(args.output) / f"backward-fma-tiles-{torch.cuda.get_device_name().split()[1].lower()}.jsonl"
        out.write_text("".join(json.dumps(r) + "\n" for r in rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", default=".")
    parser.add_argument("--dtype", help="only the cases of this dtype")
    parser.add_argument("--sweep", action="store_true", help="every FMA cluster tile of the float32 cases")
    parser.add_argument("--precompile", action="store_true", help="with --sweep: build its kernels only")
    args = parser.parse_args()
    if args.sweep and args.precompile:
        return sweep(args, None, tiles.grid_shared_max(227 * 1024))
    target = backward._device()[0]
    optin = target.shared_memory_per_block_optin
    shared_max = tiles.grid_shared_max(optin)
    if args.sweep:
        return sweep(args, target, shared_max)
    lines = [f"{__doc__.splitlines()[0]} On {torch.cuda.get_device_name()}; µs a step (graph replays):"]
    for cell, dtype, H, B, S in CASES:
        if args.dtype and dtype != args.dtype:
            continue
        inputs = recurrence_inputs(cell, dtype, H, B, S)
        G = inputs[0].gates
        forms = {"grid": tiles.backward_tile(G, H, B, target.sm_count, shared_max)}
        if dtype == "float32":  # the planned tile first (as backward._tile picks it), then smaller clusters'
            for most in (largest_cluster(target), 8, 4):
                tile = tiles.fma_backward_cluster_tile(G, H, B, most, shared_max, target.sm_count,
                                                       target.clusters_at_once)
                if tile is not None and tile not in forms.values():
                    forms["cluster" if not forms.keys() - {"grid"} else f"cluster c{tile.cluster}"] = tile
        else:
            forms["cluster"] = tiles.backward_cluster_tile(G, H, B, 2, largest_cluster(target), optin)
        forms = {k: v for k, v in forms.items() if v is not None}
        times = time_forms(inputs, forms)
        planned = backward._tile(cell, H, G, dtype, B)
        line = (f"{cell} {dtype} H={H} B={B} S={S}: " + ", ".join(f"{k} {times[k] * 1e3 / (S + 1):.2f}"
                                                                  for k in forms)
                + f"; planned {'cluster' if isinstance(planned, tiles.CLUSTER_BACKWARD_TILES) else 'grid'}"
                + (f" ({forms['cluster']})" if "cluster" in forms else ""))
        print(line, flush=True)
        lines.append(line)
    out = Path(args.output) / f"backward-forms-{torch.cuda.get_device_name().split()[1].lower()}" \
        f"{'-' + args.dtype if args.dtype else ''}.txt"
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
