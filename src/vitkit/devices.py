"""Where to compute: one parser for every `--device` / `train.device` value; how many CPU threads to compute with
(`compute_threads`: never more than the CPUs this process can get); OpenMP threads that sleep when idle
(`yielding_openmp`, before torch loads); whether AdamW runs fused there (`fused_optimizer`). Torch is imported
inside the functions that use it, so that the CLI can set OpenMP's environment first."""

from __future__ import annotations

import math
import os
import shutil
import sys
import time
from typing import TYPE_CHECKING

from vitkit.errors import ConfigError

if TYPE_CHECKING:
    import torch

# Environment variables by which a user has chosen OpenMP's waiting or thread count: vitkit then leaves it be.
WAIT_KEYS = ("OMP_WAIT_POLICY", "KMP_BLOCKTIME", "GOMP_SPINCOUNT")
COUNT_KEYS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def yielding_openmp() -> bool:
    """OpenMP threads that sleep when idle instead of spinning (OMP_WAIT_POLICY=PASSIVE), where the user has chosen
    no waiting policy and torch has not yet loaded its OpenMP runtime (it reads the variable once). Spinning threads
    take the CPU from any other busy process, and from each other when they outnumber the free cores: one competing
    process made a two-thread training step many times slower than a one-thread one. Set only where other processes
    are running at start: on an idle machine sleeping threads cost a third of a small model's speed. Whether it was set."""
    if "torch" in sys.modules or any(key in os.environ for key in WAIT_KEYS):
        return False
    if not busy_elsewhere():  # on an idle machine spinning threads are the fastest (they wake at once)
        return False
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity, capped by its cgroup's CPU quota (v2 cpu.max, v1 cfs_quota_us)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    quota = _cgroup_quota()
    return max(1, min(cpus, math.ceil(quota))) if quota else cpus


def _cgroup_quota() -> float | None:
    """The CPUs' worth of time a cgroup lets this process use (None: no quota, or none found)."""
    for path, parse in (
        ("/sys/fs/cgroup/cpu.max", lambda text: text.split()[:2]),
        (
            "/sys/fs/cgroup/cpu/cpu.cfs_quota_us",
            lambda text: [text.strip(), _read("/sys/fs/cgroup/cpu/cpu.cfs_period_us")],
        ),
    ):
        text = _read(path)
        if text is None:
            continue
        try:
            quota, period = parse(text)
            if quota in ("max", "-1") or period is None:
                return None
            return int(quota) / int(period)
        except (ValueError, TypeError):
            return None
    return None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read(256)
    except (OSError, UnicodeDecodeError):
        return None


def busy_elsewhere(samples: int = 3, gap_s: float = 0.01) -> int:
    """Runnable threads of other processes now: /proc/stat's procs_running less this one, the least of `samples`
    reads `gap_s` apart (a steady competitor is runnable in each, a passing one is not); 0 where it cannot be read."""
    counts = []
    for i in range(samples):
        text = _read_stat()
        running = next((line.split()[1] for line in text.splitlines() if line.startswith("procs_running ")), None)
        if running is None or not running.isdigit():
            return 0
        counts.append(int(running) - 1)  # this process, reading
        if i + 1 < samples:
            time.sleep(gap_s)
    return max(0, min(counts))


def _read_stat() -> str:
    try:
        with open("/proc/stat", encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def compute_threads() -> tuple[int, str]:
    """The compute threads for this process: the CPUs it can get (`usable_cpus`) less the other processes running on
    them at start (`busy_elsewhere`, as a share where its CPUs are a share of the machine's), at least one; and a
    note of why. Where OMP_NUM_THREADS or MKL_NUM_THREADS is set, torch's own count (the user chose it)."""
    import torch

    named = next((key for key in COUNT_KEYS if os.environ.get(key)), None)
    if named:
        return torch.get_num_threads(), f"{named}={os.environ[named]}"
    cpus, machine = usable_cpus(), os.cpu_count() or 1
    busy = busy_elsewhere()
    others = round(busy * cpus / machine) if cpus < machine else busy
    threads = max(1, cpus - others)
    note = f"{cpus} CPU{'s' * (cpus > 1)} usable" + (f", {others} busy with other processes at start" if others else "")
    return threads, note


def pick_device(name: str = "auto", *, key: str = "--device") -> torch.device:
    """ "auto" (CUDA when present, else CPU), "cpu", "cuda", "cuda:N", "mps"; a clear error naming `key` otherwise."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise ConfigError(f"{key}: unknown device {name!r}; use auto, cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda", "mps"):  # e.g. meta: tensors without data, nothing to train or evaluate
        raise ConfigError(f"{key}: device {name!r} cannot run a model here; use auto, cpu, cuda or cuda:N")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"{key}: mps was asked for but this machine has no Apple GPU; use cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{key}: cuda was asked for but no CUDA device is available on this machine; use cpu")
    return device


def compile_cache_by_isa() -> None:
    """Tag torch.compile's on-disk cache with the CPU vector width torch runs at (ATEN_CPU_CAPABILITY can lower it).

    The cache keys a compiled graph without the width its C++ was generated for: code written for AVX2's 8-float
    vectors, rebuilt for AVX-512's 16 by a later run, stores past its buffers. A tag the user set is kept."""
    import torch

    config = torch.compiler.config
    if not config.cache_key_tag:
        config.cache_key_tag = f"vitkit-{torch.backends.cpu.get_cpu_capability()}"


def cpu_compiler() -> str | None:
    """The C++ compiler torch.compile builds CPU code with ($CXX, else inductor's candidates); None where none is on
    PATH, and there a compiled CPU graph fails at its first call."""
    from torch._inductor import config as inductor

    names = [os.environ.get("CXX"), *inductor.cpp.cxx]
    return next((name for name in names if name and shutil.which(name)), None)


def fused_optimizer(device: torch.device | str) -> bool | None:
    """AdamW's `fused` argument on `device`: one fused kernel for the whole update on GPUs and CPUs alike, far quicker
    than the per-parameter loop and the same update to rounding; None (torch's choice) elsewhere."""
    import torch

    return True if torch.device(device).type in ("cuda", "cpu") else None
