import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

torch.set_num_threads(min(2, os.cpu_count() or 1))
# compiled kernels go to a fresh directory per session (CLI subprocesses inherit it), not to ~/.cache
os.environ["VITKIT_CACHE"] = tempfile.mkdtemp(prefix="vitkit-cache-")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _vitkit_command() -> list[str]:
    """The real console script installed beside this interpreter (fallback: python -m vitkit)."""
    script = Path(sys.executable).with_name("vitkit")
    if script.exists():
        return [str(script)]
    found = shutil.which("vitkit")
    return [found] if found else [sys.executable, "-m", "vitkit"]


@pytest.fixture(scope="session")  # stateless: module-scoped fixtures (a trained run) use it too
def run_cli():
    """Run `vitkit ARGS...` as a user would; returns the CompletedProcess (text, never raises)."""

    def run(*args: str, cwd=None, timeout: float = 300, env=None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*_vitkit_command(), *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=timeout,
            env={**os.environ, **(env or {})},
        )

    return run
