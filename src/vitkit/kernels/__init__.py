"""Native code vitkit compiles on the user's machine at first use, with the system compiler, into a cache
directory ($VITKIT_CACHE, else ~/.cache/vitkit): cpu_inference (C++ transformer-block kernels for torch) and
jpeg_region (C, decoding one box of a JPEG with the system's libjpeg-turbo). Also torchao, the optional library of
int8 inference and fp8 training, imported quietly (`import_torchao`)."""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
from pathlib import Path

from vitkit.paths import cache_root


def import_torchao():
    """torchao, without its import-time lines about GPU libraries a CPU build cannot load."""
    import logging

    logs = [logging.getLogger(name) for name in ("torchao", "torch.utils._pytree")]  # the second: a deprecation notice
    levels = [log.level for log in logs]
    for log in logs:
        log.setLevel(logging.ERROR)
    try:
        import torchao

        return torchao
    finally:
        for log, level in zip(logs, levels):
            log.setLevel(level)


def cache_dir() -> Path:
    return cache_root() / "kernels"


def build_library(source: Path, compiler: str, flags: list[str], link: list[str], *, key: list[str] = ()) -> Path:
    """The shared library `compiler flags source -o lib link` in the cache, built once per source, flags and `key`;
    raises RuntimeError (no compiler) or subprocess.SubprocessError (the compiler's first error line)."""
    from vitkit.files import atomic_path

    if shutil.which(compiler) is None:
        raise RuntimeError(f"no C/C++ compiler ({compiler!r} not found; install gcc and g++, or set CC / CXX)")
    digest = hashlib.sha256("\n".join([source.read_text(), compiler, *flags, *link, *key]).encode()).hexdigest()[:16]
    target = cache_dir() / f"{source.stem}-{digest}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # processes that start at once (ranks, parallel commands) build it once: the others wait for it, then load it
    with open(target.with_suffix(".build"), "a") as baton:
        fcntl.flock(baton, fcntl.LOCK_EX)
        if target.exists():
            return target
        with atomic_path(target) as tmp:  # built aside, then renamed: never half a file
            done = subprocess.run(
                [compiler, *flags, str(source), "-o", str(tmp), *link], capture_output=True, text=True
            )
            if done.returncode != 0:
                errors = [line for line in done.stderr.splitlines() if "error" in line]
                raise subprocess.SubprocessError(
                    f"{compiler} failed: {(errors or [f'exit code {done.returncode}'])[0].strip()}"
                )
    return target
