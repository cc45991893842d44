"""nvcc → cubin, with an on-disk cache, so a second compile of the same model runs no nvcc.

A cubin's cache name is readable and exact: ``<kernel>-<arch>-<hash>.cubin`` where the
hash covers the rendered source, the nvcc flags, the arch, the rnncc version and how nvcc
ran (relative paths, and fixed addresses where ``fixed_addresses`` has a prefix: NVVM's
output otherwise varies from run to run). One file lock per entry guards build and write
(another process may build the same kernel); files are written to a temporary name and
renamed into place. This runs without a GPU.

Knobs: ``RNNCC_CACHE_DIR`` (default ``~/.cache/rnncc``), ``RNNCC_NVCC`` (the nvcc to
use), ``RNNCC_LINEINFO=1`` (adds ``-lineinfo`` for profilers).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from . import __version__
from .codegen import KernelSource
from .errors import CompileError

log = logging.getLogger("rnncc.build")


def nvcc_path() -> str | None:
    for candidate in (os.environ.get("RNNCC_NVCC"), shutil.which("nvcc"),
                      os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")):
        if candidate and os.path.exists(candidate):
            return candidate
    return None


def cache_dir() -> Path:
    return Path(os.environ.get("RNNCC_CACHE_DIR", Path.home() / ".cache" / "rnncc"))


@functools.cache
def fixed_addresses() -> list[str]:
    """The prefix that runs nvcc with address randomisation off (``setarch <machine> -R``,
    Linux), or none where there is no setarch. NVVM's output depends on where its process's
    memory lies: one source gave PTX differing in ~4900 lines from run to run, and ptxas
    250 registers or 255 with 40 bytes spilled (the float32 GRU H=1024 registers-form
    kernel of test_register_grid_kernels_render_and_compile). With the addresses fixed its
    cubin was byte-identical in 8 of 8 builds, so a kernel's source is its code."""
    setarch = shutil.which("setarch") if sys.platform.startswith("linux") else None
    return [setarch, platform.machine(), "-R"] if setarch else []


def nvcc_flags(arch: str) -> list[str]:
    # -Xptxas -v: ptxas reports registers, shared memory and spills (kept beside the cubin).
    flags = ["-cubin", f"-arch={arch}", "-O3", "-std=c++17", "-Xptxas", "-v"]
    if os.environ.get("RNNCC_LINEINFO") == "1":
        flags.append("-lineinfo")
    return flags


@dataclass
class CacheInfo:
    """What the compile cache did in this process (the only global state of rnncc)."""

    hits: int = 0
    misses: int = 0
    nvcc_seconds: float = 0.0


_info = CacheInfo()
_info_lock = threading.Lock()


def cache_info() -> CacheInfo:
    with _info_lock:
        return CacheInfo(_info.hits, _info.misses, _info.nvcc_seconds)


def cache_key(kernel: KernelSource, arch: str) -> str:
    digest = hashlib.sha256("\0".join(
        [kernel.source, " ".join(nvcc_flags(arch)), __version__,
         "relative paths" + (", fixed addresses" if fixed_addresses() else "")]).encode()).hexdigest()[:16]
    return f"{kernel.name}-{arch}-{digest}"


@dataclass(frozen=True)
class Resources:
    """What ptxas reported for a compiled kernel."""

    registers: int         # per thread
    shared_static: int     # bytes per block, declared in the source (dynamic comes on top)
    spill_stores: int      # bytes
    spill_loads: int
    stack_frame: int


def _parse_ptxas(report: str) -> Resources:
    def number(pattern: str) -> int:
        m = re.search(pattern, report)
        return int(m.group(1)) if m else 0
    return Resources(registers=number(r"Used (\d+) registers"),
                     shared_static=number(r"(\d+) bytes smem"),
                     spill_stores=number(r"(\d+) bytes spill stores"),
                     spill_loads=number(r"(\d+) bytes spill loads"),
                     stack_frame=number(r"(\d+) bytes stack frame"))


def resources(kernel: KernelSource, arch: str) -> Resources | None:
    """ptxas's report for ``kernel``, if its cubin is in the cache (else None)."""
    path = cache_dir() / f"{cache_key(kernel, arch)}.ptxas.txt"
    return _parse_ptxas(path.read_text()) if path.exists() else None


def compile_cubin(kernel: KernelSource, arch: str) -> bytes:
    """The cubin of ``kernel`` for ``arch``, from the cache or built by nvcc."""
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    key = cache_key(kernel, arch)
    path = directory / f"{key}.cubin"
    if path.exists():
        with _info_lock:
            _info.hits += 1
        return path.read_bytes()
    with open(directory / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():  # another process built it while we waited
            with _info_lock:
                _info.hits += 1
            return path.read_bytes()
        cubin, report, seconds = _run_nvcc(kernel, arch)
        suffix = f".tmp{os.getpid()}.{threading.get_ident()}"
        for final, data in ((directory / f"{key}.ptxas.txt", report.encode()), (path, cubin)):
            tmp = final.with_suffix(suffix)  # the cubin last: its presence means both are there
            tmp.write_bytes(data)
            os.replace(tmp, final)
    with _info_lock:
        _info.misses += 1
        _info.nvcc_seconds += seconds
    log.debug("nvcc %s: %.2f s", key, seconds)
    return cubin


def _run_nvcc(kernel: KernelSource, arch: str) -> tuple[bytes, str, float]:
    nvcc = nvcc_path()
    if nvcc is None:
        raise CompileError("nvcc not found: install the CUDA toolkit, put nvcc on PATH or set "
                           "RNNCC_NVCC; compiling to CUDA source (rnncc compile) needs no nvcc")
    with tempfile.TemporaryDirectory(prefix="rnncc-") as tmp:
        src = Path(tmp) / kernel.filename
        out = Path(tmp) / f"{kernel.name}.cubin"
        src.write_text(kernel.source)
        start = time.perf_counter()
        # Names relative to the temporary directory: the code nvcc generates depends on its
        # input's path too (the same source in two directories gave two different .text
        # sections, with fixed addresses), so a build names nothing that differs from another's.
        proc = subprocess.run([*fixed_addresses(), nvcc, *nvcc_flags(arch), src.name, "-o", out.name],
                              capture_output=True, text=True, cwd=tmp)
        seconds = time.perf_counter() - start
        if proc.returncode != 0:
            raise CompileError(f"nvcc failed on generated kernel {kernel.name} ({arch}); this is "
                               f"a bug in rnncc, please report it with the source.\n{proc.stderr}")
        return out.read_bytes(), proc.stdout + proc.stderr, seconds


def compile_all(kernels: Iterable[KernelSource], arch: str, jobs: int | None = None,
                progress: Callable[[int, int, str], None] | None = None) -> dict[str, bytes]:
    """Cubins of several kernels, built by nvcc in parallel (one job per CPU); calls
    ``progress(done, total, kernel name)`` as each one is ready."""
    kernels = list(kernels)
    jobs = jobs or min(len(kernels), os.cpu_count() or 1) or 1
    before, start = cache_info(), time.perf_counter()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(compile_cubin, k, arch): k for k in kernels}
        cubins = {}
        for done, future in enumerate(as_completed(futures), 1):
            cubins[futures[future].name] = future.result()
            if progress is not None:
                progress(done, len(kernels), futures[future].name)
    after = cache_info()
    log.debug("%d kernels for %s: %d built by nvcc (%.2f s of nvcc), %d from the cache, in %.2f s",
              len(kernels), arch, after.misses - before.misses,
              after.nvcc_seconds - before.nvcc_seconds, after.hits - before.hits,
              time.perf_counter() - start)
    return {k.name: cubins[k.name] for k in kernels}
