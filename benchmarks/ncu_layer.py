"""One layer's forward as rnncc plans it, called three times, to run under Nsight Compute
(profile the third call's recurrent kernel). Prints the layer's persistence decision and
tile first, so that the counters can be read against what the planner assumed.

    ncu --clock-control none -k regex:rnncc_recurrent --launch-skip 2 --launch-count 1 \\
        --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \\
        --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \\
        python3 benchmarks/ncu_layer.py lstm float16 1024 64 128 > OUT.txt

``--tile=UNITS,BATCH_PER_BLOCK,K_SPLIT,M_TILES,BATCH_BLOCKS,REGISTER_STEPS`` (after the five
positional arguments) forces that mma.sync grid tile in place of the plan's, to read two
tiles' counters side by side.

With ``--section WarpStateStats --section SourceCounters --page source --print-source sass
--csv`` instead, ``python3 benchmarks/ncu_layer.py --summarize OUT.csv`` reads the stall
samples: by stall reason, the instructions with the most, and by opcode (no GPU needed).

Needs a GPU, PyTorch and PyCUDA (but --summarize).
"""

from __future__ import annotations

import collections
import csv
import sys


def summarize(path: str, top: int = 25) -> list[str]:
    """The stall samples of ncu's source page (CSV): by reason, the ``top`` instructions,
    and by opcode (predicates and modifiers dropped)."""
    lines = open(path).read().splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith('"Address"'))
    header, *rows = csv.reader(lines[start:])
    rows = [r for r in rows if len(r) == len(header)]
    col = {h: i for i, h in enumerate(header)}
    samples = col["Warp Stall Sampling (All Samples)"]
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    total = sum(int(r[samples] or 0) for r in rows)
    out = [f"{len(rows)} SASS instructions, {total} stall samples", "by reason:"]
    by_reason = {h: sum(int(r[col[h]] or 0) for r in rows) for h in reasons}
    out += [f"  {h:24s} {v:8d} {100 * v / total:5.1f}%" for h, v in sorted(by_reason.items(), key=lambda x: -x[1])[:10]]
    out.append(f"the {top} instructions with the most samples (and each one's main reason):")
    for r in sorted(rows, key=lambda r: -int(r[samples] or 0))[:top]:
        n, main = int(r[samples]), max(reasons, key=lambda h: int(r[col[h]] or 0))
        out.append(f"  {n:7d} {100 * n / total:5.1f}%  {main:22s} {r[1].strip()[:72]}")
    by_opcode = collections.Counter()
    for r in rows:
        words = r[1].split()
        op = words[1] if words and words[0].startswith("@") and len(words) > 1 else (words[0] if words else "?")
        by_opcode[op.split(".")[0]] += int(r[samples] or 0)
    out.append("by opcode:")
    out += [f"  {op:12s} {v:8d} {100 * v / total:5.1f}%" for op, v in by_opcode.most_common(15)]
    return out


if __name__ == "__main__" and sys.argv[1:2] == ["--summarize"]:
    print("\n".join(summarize(sys.argv[2])))
    sys.exit(0)

import torch  # noqa: E402

import rnncc  # noqa: E402

if __name__ == "__main__":
    cell, dtype, hidden, batch, seq_len = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
    torch.manual_seed(0)
    tdt = getattr(torch, dtype)
    module = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cell](hidden, hidden).to("cuda", tdt).eval()
    model, weights = rnncc.from_torch(module)
    compiled = rnncc.compile(model, target="device", weights=weights, batch=batch, seq_len=seq_len)
    layer = compiled.plan.layers[0]
    forced = [a.removeprefix("--tile=") for a in sys.argv[6:] if a.startswith("--tile=")]
    if forced:
        from rnncc.tiles import Persistent, TensorTile
        u, bpb, ks, mt, bb, rs = map(int, forced[0].split(","))
        tile = TensorTile(u, bpb, ks, mt, batch_blocks=bb, register_steps=rs)
        value = Persistent.of("grid", "tensor", tile, hidden, layer.gates, 2)
        compiled = compiled.with_persistence(layer.name, value, "forced by ncu_layer.py --tile")
        layer = compiled.plan.layers[0]
    print(f"{cell} {dtype} H={hidden} B={batch} S={seq_len}: {layer.persistence.value}\n"
          f"  why: {layer.persistence.reason}", flush=True)
    x = torch.randn(seq_len, batch, hidden, device="cuda", dtype=tdt)
    with torch.no_grad():
        for _ in range(3):
            compiled(x)
    torch.cuda.synchronize()
