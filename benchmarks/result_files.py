"""Where a measuring script here writes its rows: OUT_DIR/<name>-h100-<date>.json, the rows
beside the environment they ran in (rnncc.cli._environment: GPU, versions, commit)."""
import json
import time
from pathlib import Path


def write_results(out: Path, name: str, rows: list) -> Path:
    """Writes ``rows`` as OUT/<name>-h100-<today>.json, prints and returns the path."""
    import torch

    from rnncc.cli import _environment

    path = Path(out) / f"{name}-h100-{time.strftime('%Y-%m-%d')}.json"
    path.write_text(json.dumps({"environment": _environment(torch), "results": rows}, indent=1, ensure_ascii=False))
    print(f"wrote {path}")
    return path
