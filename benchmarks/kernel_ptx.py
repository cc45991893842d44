"""The PTX of a fixed set of rnncc's kernels, to tell whether a change of the templates changed
code or only text. No GPU: nvcc -ptx only.

The set: every kernel of the bench's rows and graph_plans.py's points, planned eager and for
graphed calls (the training rows' forwards saving their gates) for the H200 and (float32
rows, whose staged kernels lack tensor maps there) the A100; and the backward kernels of the
training rows' shapes and of every K-split tile of three float32 layers. A kernel's name is a readable part plus a hash of its source
(codegen._identify), so a change of text alone renames it: `dump` writes each kernel's PTX
under its readable part and where in the set it was found, its entry name replaced by `ENTRY`
(and the length that mangled names of its locals give it); `compare` lists the kernels
whose PTX differs, and those only one side has.

    PYTHONPATH=.:benchmarks python3 benchmarks/kernel_ptx.py dump DIR      (from a checkout)
    python3 benchmarks/kernel_ptx.py compare BEFORE_DIR AFTER_DIR
"""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HASH = re.compile(r"_[0-9a-f]{10}$")
MANGLED_LENGTH = re.compile(r"_ZZ[0-9]+ENTRY")  # a local's mangled name counts the entry's letters


def kernels() -> dict[str, object]:
    """Every kernel of the set, by its readable name and where it was found (a readable name
    does not tell tiles apart)."""
    import rnncc
    from bench_plans import model_of
    from graph_plans import configs
    from rnncc import codegen, tiles
    from rnncc.bench import issue_configs, stack_configs, training_configs
    from rnncc.target import get

    found = {}
    rows = list(dict.fromkeys(configs() + issue_configs() + stack_configs()))
    for row, cfg in enumerate(rows):
        if cfg.packed:
            continue
        training = {"backward_gates": "auto"} if cfg.passes != "forward" else {}
        for preset in ("h200", "a100") if cfg.dtype == "float32" else ("h200",):
            for launches in (None, "graph"):
                m = rnncc.compile(model_of(cfg), target=preset, batch=cfg.batch, seq_len=cfg.seq_len,
                                  precision=cfg.math, launches=launches, **training)
                found |= {f"{HASH.sub('', k.name)}@{row}-{preset}-{launches or 'eager'}-{i}": k
                          for i, k in enumerate(m.kernels)}
    h200 = get("h200")
    at_once, shared_optin = h200.clusters_at_once, h200.shared_memory_per_block_optin
    gates = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
    shapes = {(c.cell, c.dtype, c.hidden, c.batch) for c in training_configs()}
    shapes |= {("lstm", "float32", 1024, 64), ("gru", "float32", 256, 64), ("rnn_tanh", "float32", 512, 32)}
    for cell, dtype, hidden, batch in sorted(shapes):
        g, itemsize = gates[cell], 2 if dtype != "float32" else 4
        chosen = [tiles.backward_kernel_tile(g, hidden, batch, itemsize, h200.sm_count, 16, shared_optin, at_once)]
        if dtype == "float32":
            chosen += tiles.ksplit_backward_tiles(g, hidden, batch, at_once, tiles.grid_shared_max(shared_optin))
        for i, tile in enumerate(chosen):
            k = codegen.render_backward(cell, hidden, g, dtype, tile)
            found[f"{HASH.sub('', k.name)}@{cell}-{dtype}-{hidden}-{batch}-{i}"] = k
    return found


def ptx(kernel) -> str:
    """The kernel's PTX as rnncc builds it (build.nvcc_flags, -ptx for -cubin)."""
    from rnncc.build import fixed_addresses, nvcc_flags, nvcc_path
    flags = ["-ptx" if f == "-cubin" else f for f in nvcc_flags("sm_90a")]
    with tempfile.TemporaryDirectory(prefix="rnncc-ptx-") as tmp:
        (Path(tmp) / kernel.filename).write_text(kernel.source)
        subprocess.run([*fixed_addresses(), nvcc_path(), *flags, kernel.filename, "-o", "k.ptx"],
                       cwd=tmp, check=True, capture_output=True)
        return (Path(tmp) / "k.ptx").read_text()


def dump(out: Path) -> None:
    found = kernels()
    distinct = list({k.source: k for k in found.values()}.values())
    out.mkdir(parents=True, exist_ok=True)
    print(f"{len(found)} kernels, {len(distinct)} distinct", file=sys.stderr, flush=True)
    with ThreadPoolExecutor() as pool:
        texts = dict(zip((k.source for k in distinct), pool.map(ptx, distinct)))
    for key, k in found.items():
        (out / f"{key}.ptx").write_text(MANGLED_LENGTH.sub("_ZZ_ENTRY", texts[k.source].replace(k.entry, "ENTRY")))


def compare(before: Path, after: Path) -> int:
    a = {p.name: p.read_text() for p in before.glob("*.ptx")}
    b = {p.name: p.read_text() for p in after.glob("*.ptx")}
    differ = sorted(n for n in a.keys() & b.keys() if a[n] != b[n])
    for n in differ:
        print(f"differs: {n}")
    for n in sorted(a.keys() - b.keys()):
        print(f"only before: {n}")
    for n in sorted(b.keys() - a.keys()):
        print(f"only after: {n}")
    print(f"{len(a.keys() & b.keys())} kernels on both sides, {len(differ)} differ; "
          f"{len(a.keys() - b.keys())} only before, {len(b.keys() - a.keys())} only after")
    return 1 if differ or a.keys() != b.keys() else 0


if __name__ == "__main__":
    if sys.argv[1] == "dump":
        dump(Path(sys.argv[2]))
    elif sys.argv[1] == "compare":
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__)
