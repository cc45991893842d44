"""A/B of a variant of rnncc kept as a patch (benchmarks/variants/<name>.patch) against the
checkout it applies to, prepared on the machine without a GPU and timed in one device call.

A change to `rnncc/` or `templates/` lands only with a full GPU run, and a branch does not
outlive its session's checkout; a patch under benchmarks/ does. So a variant is written and
compiled here, committed as a patch (its first lines say what it changes and its base), and
measured when device time allows:

    python3 benchmarks/ab_variant.py prepare NAME [ROWS]     (no GPU: two trees and their kernels)
    python3 benchmarks/ab_variant.py run NAME [ROWS] [ROUNDS] (on the device, carrying
        .ab-NAME and .cubins-ab-NAME, as printed by prepare)
    python3 benchmarks/ab_variant.py test NAME [PYTEST ARGS]  (on the device: the new tree's
        GPU tests, e.g. -n 16 -k "tensor_grid or spin", before timing a kernel that could hang)

`prepare` writes .ab-NAME/old and .ab-NAME/new (`git archive HEAD` of rnncc, templates,
tests, examples and pyproject.toml, the new one with the patch applied) and builds both
trees' kernels for ab_rows.py's ROWS (the preset RNNCC_BUILD_TARGET, default h200, eager and graph plans) into
.cubins-ab-NAME, so the device compiles only the twins' own. `run` alternates `ab_rows.py old ROWS` and `ab_rows.py new ROWS` ROUNDS times
(default 2), each in a process of its own with its tree first on PYTHONPATH, and prints
their JSON lines; ROWS is one of ab_rows.ROW_SETS (default "small").
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"


def trees(name: str) -> Path:
    return ROOT / f".ab-{name}"


def cubins(name: str) -> Path:
    return ROOT / f".cubins-ab-{name}"


def env_for(tree: Path, cache: Path) -> dict:
    """The environment that makes ``tree``'s rnncc the one imported, with its own cache."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(BENCHMARKS), env.get("PYTHONPATH", "")])
    env["RNNCC_CACHE_DIR"] = str(cache)
    return env


def prepare(name: str, rows: str) -> None:
    patch = BENCHMARKS / "variants" / f"{name}.patch"
    if not patch.exists():
        sys.exit(f"ab_variant: no patch {patch.relative_to(ROOT)}")
    base = trees(name)
    shutil.rmtree(base, ignore_errors=True)
    archive = subprocess.run(["git", "archive", "HEAD", "rnncc", "templates", "tests", "examples",
                              "pyproject.toml"], cwd=ROOT, capture_output=True, check=True).stdout
    for side in ("old", "new"):
        (base / side).mkdir(parents=True)
        subprocess.run(["tar", "-x", "-C", str(base / side)], input=archive, check=True)
    # From the repository's root, the patch's paths moved under the new tree (git apply run
    # inside the checkout takes paths from its top and skips those outside the directory).
    subprocess.run(["git", "apply", f"--directory={(base / 'new').relative_to(ROOT)}", str(patch)],
                   cwd=ROOT, check=True)
    changed = subprocess.run(["diff", "-rq", str(base / "old"), str(base / "new")], capture_output=True, text=True)
    if not changed.stdout:
        sys.exit(f"ab_variant: {patch.name} changed nothing in the new tree")
    for side in ("old", "new"):
        subprocess.run([sys.executable, str(BENCHMARKS / "ab_rows.py"), "--build-only", rows],
                       env=env_for(base / side, cubins(name)), check=True)
    print(f"carry: .whl, .ab-{name}, .cubins-ab-{name}; "
          f"run: python3 benchmarks/ab_variant.py run {name} {rows}")


def run(name: str, rows: str, rounds: int) -> None:
    base = trees(name)
    for _ in range(rounds):
        for side in ("old", "new"):
            subprocess.run([sys.executable, str(BENCHMARKS / "ab_rows.py"), side, rows],
                           env=env_for(base / side, cubins(name)), check=True)


def test(name: str, pytest_args: list[str]) -> None:
    """The GPU tests of the new tree, run from inside it so that its rnncc is the one imported."""
    new = trees(name) / "new"
    sys.exit(subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider", *pytest_args],
                            cwd=new, env=env_for(new, cubins(name))).returncode)


def main() -> None:
    args = sys.argv[1:]
    if len(args) < 2 or args[0] not in ("prepare", "run", "test"):
        sys.exit(__doc__)
    if args[0] == "test":
        test(args[1], args[2:])
    name, rows = args[1], args[2] if len(args) > 2 else "small"
    if args[0] == "prepare":
        prepare(name, rows)
    else:
        run(name, rows, int(args[3]) if len(args) > 3 else 2)


if __name__ == "__main__":
    main()
