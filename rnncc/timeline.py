"""Timelines of a call: which layer runs its chunks when, as a PNG (layers against time).

The planned timeline is the schedule pass's simulation (passes/schedule.py); the measured
one comes from timing events around every chunk on the GPU
(:meth:`rnncc.CompiledModel.timeline`). Drawn one above the other on a shared time axis,
they show whether the layers overlap as planned and where a chunk takes longer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .passes.schedule import Task


def summary(tasks: Sequence[Task]) -> str:
    """One line per layer: its first start, last end and busy time, in µs."""
    layers = list(dict.fromkeys(t.layer for t in tasks))
    lines = []
    for name in layers:
        mine = [t for t in tasks if t.layer == name]
        start, end = min(t.start for t in mine), max(t.end for t in mine)
        busy = sum(t.end - t.start for t in mine)
        lines.append(f"  {name:<16} {len(mine)} chunk(s), {start * 1e6:8.0f} → {end * 1e6:8.0f} µs, "
                     f"busy {busy * 1e6:.0f} µs")
    end = max((t.end for t in tasks), default=0.0)
    return "\n".join(lines + [f"  {'end':<16} {end * 1e6:.0f} µs"])


def draw(path: str | Path, timelines: dict[str, Sequence[Task]], title: str) -> Path:
    """A PNG of each timeline (name → tasks), one panel each, layers top to bottom in
    the order they first appear, chunks as bars (alternating shades by chunk)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = list(dict.fromkeys(t.layer for tasks in timelines.values() for t in tasks))
    end = max((t.end for tasks in timelines.values() for t in tasks), default=0.0) * 1e3
    fig, axes = plt.subplots(len(timelines), 1, sharex=True, squeeze=False,
                             figsize=(10, 0.9 + 0.32 * len(layers) * len(timelines)))
    for ax, (name, tasks) in zip(axes[:, 0], timelines.items()):
        for t in tasks:
            row = layers.index(t.layer)
            ax.barh(row, (t.end - t.start) * 1e3, left=t.start * 1e3, height=0.7,
                    color=("#3b75af", "#7fa8d1")[t.chunk % 2], edgecolor="none")
        ax.set_yticks(range(len(layers)), layers)
        ax.invert_yaxis()
        done = max((t.end for t in tasks), default=0.0) * 1e3
        ax.set_title(f"{name}: {done:.3f} ms", fontsize=10, loc="left")
        ax.set_xlim(0, end * 1.02)
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("ms from the call's start (a bar: one chunk's projection and steps)")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
