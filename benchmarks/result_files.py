"""Where a measuring script here writes its rows: OUT_DIR/<name>-<gpu>-<date>.json, the rows
beside the environment they ran in (rnncc.cli._environment: GPU, versions, commit). <gpu> is
the GPU that ran them (h100 until 2026-11-27; the device tool lends an H200 since 2026-11-28),
named as `rnncc bench` names its records."""
import json
import time
from pathlib import Path


def gpu_tag() -> str:
    """'h100', 'h200', … for the GPU present, as rnncc.bench names its files."""
    import torch

    name = torch.cuda.get_device_name(0)
    return "h100" if "H100" in name else name.split()[-1].lower()


def result_path(out: "Path | str", name: str, suffix: str = "json") -> Path:
    """OUT/<name>-<gpu>-<today, UTC>.<suffix>."""
    return Path(out) / f"{name}-{gpu_tag()}-{time.strftime('%Y-%m-%d', time.gmtime())}.{suffix}"


def write_results(out: Path, name: str, rows: list) -> Path:
    """Writes ``rows`` as OUT/<name>-<gpu>-<today>.json, prints and returns the path."""
    import torch

    from rnncc.cli import _environment

    path = result_path(out, name)
    path.write_text(json.dumps({"environment": _environment(torch), "results": rows}, indent=1, ensure_ascii=False))
    print(f"wrote {path}")
    return path
