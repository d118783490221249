"""The Makefile's demo recipe, run by the real make with a stand-in `vitkit` (its install and data prerequisites not
remade): it evaluates a run only when its training finished."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _demo(tmp_path: Path, train: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """`make demo` in `tmp_path` where `vitkit train` runs the shell line `train` (the run is $out); the calls made."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    fake = bin_dir / "vitkit"
    fake.write_text(
        '#!/bin/sh\necho "$*" >> calls.log\nif [ "$1" = train ]; then out=run; mkdir -p $out/checkpoints; '
        + train
        + "; fi\n"
    )
    fake.chmod(0o755)
    done = subprocess.run(
        ["make", "-s", "-f", str(ROOT / "Makefile"), "-o", "install", "-o", "data", "demo", "BIN=bin", "DEMO=run"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    log = tmp_path / "calls.log"
    return done, [line.split()[0] for line in log.read_text().splitlines()] if log.is_file() else []


def test_make_demo_stops_on_ctrl_c_and_never_evaluates_a_run_that_stopped_early(tmp_path):
    """Ctrl-C during `make demo` went on to `vitkit eval` of the partial model."""
    done, calls = _demo(tmp_path / "ctrl-c", "exit 130")  # vitkit train's exit after Ctrl-C
    assert done.returncode != 0 and calls == ["train"]
    # a run stopped before its last step with exit 0 (SIGTERM, a preemption): no final/, so no evaluation either
    done, calls = _demo(tmp_path / "sigterm", "exit 0")
    assert done.returncode != 0 and calls == ["train"] and "make demo resumes it" in done.stderr
    done, calls = _demo(tmp_path / "finished", "mkdir $out/final")  # a run that finished is evaluated
    assert done.returncode == 0 and calls == ["train", "eval"], done.stderr


@pytest.mark.parametrize(
    "flags, caps",
    [
        ("fpu sse avx2 avx512f avx512_bf16 amx_bf16 amx_tile", "AVX512_CORE_BF16:avx512"),  # an AMX Xeon
        ("fpu sse avx2 avx512f avx512_bf16", "AVX2:avx2"),  # an AMD EPYC Zen 4
        ("fpu sse avx2 fma", ""),  # AVX2 is its own path: a cap there repeats the first pass
    ],
)
def test_the_capped_pass_takes_away_what_the_cpu_has_and_is_not_run_where_it_would_change_nothing(
    tmp_path, flags, caps
):
    """`make test`'s second pass caps the instruction set below the CPU's own; on an AVX2-only CPU it repeated the first."""
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    done = subprocess.run(
        ["sh", str(ROOT / "scripts" / "isa-caps.sh")], env={"CPUINFO": str(info)}, capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stdout.split() == caps.split()
