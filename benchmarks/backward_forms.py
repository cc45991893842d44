"""The backward recurrence's two forms timed on the same inputs (issue 17): the grid form
(backward_recurrent.cu.j2, one grid barrier a step) against the cluster form
(backward_cluster.cu.j2, W_hh in registers, dG exchanged inside a cluster), CUDA-graph
replays interleaved in one process (rnncc.timing.time_graphs_interleaved), µs a step, and
the form the plan takes (tiles.backward_kernel_tile). Needs a GPU.

    python3 benchmarks/backward_forms.py [-o DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from rnncc import backward, tiles
from rnncc.ir import Model
from rnncc.passes.cost import largest_cluster
from rnncc.timing import time_graphs_interleaved

# (cell, dtype, H, B, S)
CASES = [("lstm", "float16", 512, 8, 256), ("gru", "float16", 512, 8, 256), ("lstm", "float16", 256, 8, 256),
         ("lstm", "bfloat16", 512, 8, 256), ("lstm", "float16", 128, 8, 256), ("lstm", "float16", 512, 64, 256),
         ("gru", "float16", 256, 64, 256), ("lstm", "float16", 512, 3, 256), ("rnn_tanh", "float16", 1024, 8, 256),
         ("lstm", "float16", 512, 128, 64)]


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", default=".")
    args = parser.parse_args()
    target = backward._device()[0]
    optin = target.shared_memory_per_block_optin
    lines = [f"{__doc__.splitlines()[0]} On {torch.cuda.get_device_name()}; µs a step (graph replays):"]
    for cell, dtype, H, B, S in CASES:
        layer, w_hh, pre, pre_h, h_prev, dy = recurrence_inputs(cell, dtype, H, B, S)
        G = layer.gates
        forms = {"grid": tiles.backward_tile(G, H, B, target.sm_count, tiles.backward_shared_max(optin)),
                 "cluster": tiles.backward_cluster_tile(G, H, B, 2, largest_cluster(target), optin)}
        forms = {k: v for k, v in forms.items() if v is not None}
        fns = {k: (lambda tile=tile: backward.recurrence(layer, w_hh, pre, pre_h, h_prev, None, dy, None, None,
                                                         tile=tile)) for k, tile in forms.items()}
        times = time_graphs_interleaved(fns)
        planned = backward._tile(cell, H, G, dtype, B)
        line = (f"{cell} {dtype} H={H} B={B} S={S}: " + ", ".join(f"{k} {times[k] * 1e3 / (S + 1):.2f}"
                                                                  for k in forms)
                + f"; planned {'cluster' if isinstance(planned, tiles.ClusterBackwardTile) else 'grid'}"
                + (f" ({forms['cluster']})" if "cluster" in forms else ""))
        print(line, flush=True)
        lines.append(line)
    out = Path(args.output) / f"backward-forms-{torch.cuda.get_device_name().split()[1].lower()}.txt"
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
