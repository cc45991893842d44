"""Markdown tables of the `rnncc run --json`, `rnncc bench` and `rnncc bench --ablate`
records in benchmarks/results/, for the README.

    python3 benchmarks/readme_table.py            # print the table
    python3 benchmarks/readme_table.py --update   # replace the table in README.md

tests/test_cli_and_examples.py checks that README.md holds exactly these tables.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from rnncc.bench import network  # noqa: E402 - the checkout's rnncc, as the tests run it
BEGIN, END = "<!-- perf-table:begin -->", "<!-- perf-table:end -->"
BENCH_BEGIN, BENCH_END = "<!-- bench-table:begin -->", "<!-- bench-table:end -->"
ABLATION_BEGIN, ABLATION_END = "<!-- ablation-table:begin -->", "<!-- ablation-table:end -->"
SWEEP_BEGIN, SWEEP_END = "<!-- sweep-table:begin -->", "<!-- sweep-table:end -->"


def table() -> str:
    rows = ["| model | dtype | S | B | rnncc ms (µs/step) | torch.nn / cuDNN ms (µs/step) | rnncc ÷ cuDNN | record |",
            "|---|---|---|---|---|---|---|---|"]
    for path in sorted((ROOT / "benchmarks" / "results").glob("run-*.json")):
        rec = json.loads(path.read_text())
        S = rec["seq_len"]
        results = rec["results"]
        ours = results["rnncc"]["median_ms"]
        theirs = next((v["median_ms"] for k, v in results.items() if k.startswith("torch")), None)
        cudnn = f"{theirs:.2f} ({theirs * 1e3 / S:.1f})" if theirs else "— (not a plain stack)"
        ratio = f"{ours / theirs:.2f}×" if theirs else "—"
        rows.append(f"| {rec['model']} | {rec['dtype']} | {S} | {rec['batch']} | "
                    f"{ours:.2f} ({ours * 1e3 / S:.1f}) | {cudnn} | {ratio} | "
                    f"[{path.name}](benchmarks/results/{path.name}) |")
    env = {}
    for path in sorted((ROOT / "benchmarks" / "results").glob("run-*.json")):
        env = json.loads(path.read_text()).get("environment", env)
    driver = env.get("driver")
    driver = f"{driver // 1000}.{driver % 1000 // 10}" if isinstance(driver, int) else "?"
    note = (f"\n\n{env.get('device', '?')}, CUDA driver API {driver}, torch {env.get('torch', '?')}, "
            f"cuDNN {env.get('cudnn', '?')}, commit {str(env.get('commit', '?'))[:10]}; median of 20 "
            "repeats after 3 warm-ups, CUDA events, same process and same weights; TF32 off.")
    return "\n".join(rows) + note


def record_order(path: Path) -> tuple:
    """Newest last: by the date in bench-<gpu>-<date>[-at-<commit>].json, a day's run kept
    by its commit (-at-) before the one that replaced it, whichever GPU ran it (an H100 until
    2026-11-27, an H200 since)."""
    date = re.search(r"\d{4}-\d{2}-\d{2}", path.stem)
    return (date.group(0) if date else "", "-at-" not in path.stem, path.name)


def bench_table() -> str:
    """The newest full `rnncc bench` record as a table: every target row, met or not."""
    records = sorted((p for p in (ROOT / "benchmarks" / "results").glob("bench-*.json")
                      if not p.stem.endswith("-quick")), key=record_order)
    if not records:
        return "(no `rnncc bench` record yet)"
    path = records[-1]
    rec = json.loads(path.read_text())
    rows = ["| network | dtype | H | B | S | rnncc persistence | rnncc ms (µs/step) | cuDNN ms (µs/step) | "
            "speedup (cuDNN ÷ rnncc) | target | agrees with cuDNN | rnncc.nn twin ms (÷ rnncc) | "
            "in CUDA graphs: rnncc ms (planned for graphs), cuDNN ms, speedup |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    # Records before precision modes (2026-11-23) have neither "kind" nor "math".
    for r in rec["results"]:
        # A packed row's target is the twin's, on the PackedSequence (issue 16): the
        # compiled model's time leaves out the padding and the packing.
        judged = r.get("twin_speedup", r["speedup"]) if r.get("packed") else r["speedup"]
        met = ("met" if judged >= r["target_speedup"] else "**missed**") + \
            (f" (twin {judged:.2f}×)" if judged != r["speedup"] else "")
        math = {"tensor": ", tensor cores"}.get(r.get("math"), "")
        if r.get("schedule", "sequential") != "sequential":  # a stack's layers side by side
            # "pipelined C=64" and a training row's "pipelined, then the backward (…)"
            math += "; " + re.sub(r"^pipelined,? ", "layers pipelined, ", r["schedule"])
        rows.append(f"| {network(r)} | {r.get('kind', r['dtype'])} | {r['hidden']} | {r['batch']} | "
                    f"{r['seq_len']} | {r['persistence']}{math} | "
                    f"{r['rnncc_ms']:.3f} ({r['rnncc_us_per_step']:.1f}) | "
                    f"{r['cudnn_ms']:.3f} ({r['cudnn_us_per_step']:.1f}) | {r['speedup']:.2f}× | "
                    f"≥ {r['target_speedup']:g}× {met} | "
                    f"{'yes' if r['agree'] else 'NO'} ({r['max_relative_error_vs_cudnn']:.1e}) | "
                    + (f"{r['twin_ms']:.3f} ({r['twin_over_rnncc']:.2f}) |" if "twin_ms" in r else "– |")
                    + graph_cell(r))
    env = rec["environment"]
    return ("\n".join(rows) + f"\n\nFrom [{path.name}](benchmarks/results/{path.name}) "
            f"(plot: [{path.stem}.png](benchmarks/results/{path.stem}.png)); {env['device']}, "
            f"torch {env.get('torch')}, cuDNN {env.get('cudnn')}, commit {str(env['commit'])[:10]}; "
            f"{rec['method']}.")


def graph_cell(r: dict) -> str:
    """The CUDA-graph column: rnncc planned for graphed calls (``launches="graph"``), with
    the eager plan's graph time beside it where the two plans differ; records before
    graph plans (2026-11-27) have the eager plan only."""
    if not r.get("speedup_graph"):
        return " – |"
    if r.get("speedup_graph_plan") and r.get("graph_plan_differs"):
        return (f" {r['rnncc_graph_plan_ms']:.3f} (eager plan {r['rnncc_graph_ms']:.3f}), "
                f"{r['cudnn_graph_ms']:.3f}, {r['speedup_graph_plan']:.2f}× |")
    return f" {r['rnncc_graph_ms']:.3f}, {r['cudnn_graph_ms']:.3f}, {r['speedup_graph']:.2f}× |"


def ablation_table() -> str:
    """The newest complete `rnncc bench --ablate` record: the issue's checks."""
    records = [json.loads(p.read_text()) | {"path": p}
               for p in sorted((ROOT / "benchmarks" / "results").glob("ablation-*.json"))]
    records = [r for r in records if r.get("complete") and not r["path"].stem.endswith("-quick")]
    if not records:
        return "(no complete `rnncc bench --ablate` record yet)"
    rec = max(records, key=lambda r: r["environment"]["date"])
    points, path = rec["points"], rec["path"]
    n = len(points)

    def share(key: str, limit: float) -> str:
        k = sum(p[key] <= limit for p in points)
        return f"{k}/{n} ({100 * k / n:.1f}%)"
    wins = rec["summary"]["layout_wins_by_1.2x"]
    by = {lay: sum(w["winner"] == lay for w in wins) for lay in ("xw", "wx")}
    rows = ["| check | target | cost model alone | with autotune |", "|---|---|---|---|",
            f"| pick within 10% of the fastest alternative | ≥ 95% with autotune | "
            f"{share('model_over_best', 1.10)} | {share('autotune_over_best', 1.10)} |",
            f"| pick within 20% of the fastest alternative | ≥ 80% for the cost model | "
            f"{share('model_over_best', 1.20)} | {share('autotune_over_best', 1.20)} |",
            f"| picks the layout that wins by ≥ 1.2× (Y = X·Wᵀ wins at {by['xw']} points, "
            f"Yᵀ = W·Xᵀ at {by['wx']}) | each layout wins somewhere, the winner picked | "
            f"{sum(w['model_picks'] == w['winner'] for w in wins)}/{len(wins)} | "
            f"{sum(w['autotune_picks'] == w['winner'] for w in wins)}/{len(wins)} |"]
    env = rec["environment"]
    pngs = ", ".join(f"[{d}]({'benchmarks/results/' + path.stem}-{d}.png)"
                     for d in ("layout", "persistence", "gemm"))
    return ("\n".join(rows) + f"\n\nFrom [{path.name}](benchmarks/results/{path.name}), {n} points "
            f"(plots per decision: {pngs}); {env['device']}, commit {str(env['commit'])[:10]}; "
            f"{rec['method']}.")


def sweep_table() -> str:
    """The newest `rnncc bench --sweep` record: every point against cuDNN in a CUDA graph,
    worst first, with the summary."""
    records = sorted((ROOT / "benchmarks" / "results").glob("sweep-*.json"))
    if not records:
        return "(no `rnncc bench --sweep` record yet)"
    path = records[-1]
    rec = json.loads(path.read_text())
    rows = ["| cell | dtype | layers | H | B | S | rnncc modes | rnncc graph ms (µs a layer-step) | "
            "cuDNN graph ms | speedup in graphs | speedup eager |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rec["results"], key=lambda r: r["speedup_graph"] or 0.0):
        graph = (f"{r['rnncc_graph_ms']:.3f} ({r['rnncc_graph_us_per_layer_step']:.1f}) | "
                 f"{r['cudnn_graph_ms']:.3f} | {r['speedup_graph']:.2f}×") if r["speedup_graph"] \
            else "– | – | –"
        rows.append(f"| {r['cell']} | {r['dtype']} | {r['layers']} | {r['hidden']} | {r['batch']} | "
                    f"{r['seq_len']} | {', '.join(r['modes'])} | {graph} | {r['speedup']:.2f}× |")
    s, env = rec["summary"], rec["environment"]
    return ("\n".join(rows) + f"\n\n{s['points']} points: median {s['median_speedup_graph']:.2f}× "
            f"against cuDNN in a CUDA graph, {s['below_1x']} below 1.0×. From "
            f"[{path.name}](benchmarks/results/{path.name}) (heatmap: "
            f"[{path.stem}.png](benchmarks/results/{path.stem}.png)); {env['device']}, commit "
            f"{str(env['commit'])[:10]}; {rec['method']}.")


def update_readme() -> None:
    readme = ROOT / "README.md"
    text = readme.read_text()
    for begin, end_mark, render in ((BEGIN, END, table), (BENCH_BEGIN, BENCH_END, bench_table),
                                    (ABLATION_BEGIN, ABLATION_END, ablation_table),
                                    (SWEEP_BEGIN, SWEEP_END, sweep_table)):
        start, end = text.index(begin) + len(begin), text.index(end_mark)
        text = text[:start] + "\n" + render() + "\n" + text[end:]
    readme.write_text(text)


if __name__ == "__main__":
    if "--update" in sys.argv:
        update_readme()
    else:
        print(table())
        print()
        print(bench_table())
        print()
        print(ablation_table())
        print()
        print(sweep_table())
