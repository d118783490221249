"""torch.compile's disk cache is kept apart per CPU vector width (a graph's C++ is written for one width)."""

import torch

from vitkit.devices import compile_cache_by_isa


def test_the_compile_cache_is_tagged_with_the_cpu_capability_and_a_users_tag_is_kept():
    # torch's own patch(): pytest's monkeypatch restores a config entry by deleting it, which hides it for good
    with torch.compiler.config.patch(cache_key_tag=""):
        compile_cache_by_isa()
        assert torch.compiler.config.cache_key_tag == f"vitkit-{torch.backends.cpu.get_cpu_capability()}"
    with torch.compiler.config.patch(cache_key_tag="mine"):
        compile_cache_by_isa()
        assert torch.compiler.config.cache_key_tag == "mine"
    assert torch.compiler.config.cache_key_tag  # still readable by the tests that run after this one


def test_compute_threads_leave_out_cpus_a_quota_or_other_busy_processes_take(monkeypatch):
    """Two threads on a 2-core machine shared with one busy process ran many times slower than one."""
    from vitkit import devices

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.setattr(devices.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(devices.os, "cpu_count", lambda: 4)
    files = {"/sys/fs/cgroup/cpu.max": "150000 100000\n"}  # a quota of 1.5 CPUs
    monkeypatch.setattr(devices, "_read", files.get)
    assert devices.usable_cpus() == 2
    files["/sys/fs/cgroup/cpu.max"] = "max 100000\n"
    assert devices.usable_cpus() == 4
    del files["/sys/fs/cgroup/cpu.max"]  # cgroup v1
    files |= {"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "300000\n", "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n"}
    assert devices.usable_cpus() == 3
    # procs_running counts this process too; a process runnable in one read only is passing, not competing
    reads = iter(["procs_running 3\n", "procs_running 2\n", "procs_running 5\n"])
    monkeypatch.setattr(devices, "_read_stat", lambda: "cpu 1 2 3\n" + next(reads))
    monkeypatch.setattr(devices.time, "sleep", lambda s: None)
    assert devices.busy_elsewhere() == 1
    monkeypatch.setattr(devices, "_read_stat", lambda: "")  # no /proc: nothing known to be busy
    assert devices.busy_elsewhere() == 0
    monkeypatch.setattr(devices, "busy_elsewhere", lambda: 1)
    assert devices.compute_threads() == (2, "3 CPUs usable, 1 busy with other processes at start")
    monkeypatch.setattr(devices, "busy_elsewhere", lambda: 9)
    assert devices.compute_threads()[0] == 1  # never fewer than one
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's count stands
    assert devices.compute_threads() == (torch.get_num_threads(), "OMP_NUM_THREADS=3")


def test_training_commands_make_openmp_threads_sleep_when_idle_on_a_busy_machine_unless_the_user_chose():
    """OMP_WAIT_POLICY is read once, when torch loads its OpenMP runtime: the CLI sets it before importing torch, and
    only where other processes are running (on an idle machine spinning threads are faster)."""
    import os
    import subprocess
    import sys

    probe = (
        "import os, sys\n"
        "import vitkit.devices as devices\n"
        "from vitkit.cli import openmp_for\n"  # what main() calls first
        "policy = lambda: os.environ.get('OMP_WAIT_POLICY', '-')\n"
        "devices.busy_elsewhere = lambda *a, **k: 1\n"  # another process running
        "openmp_for(['models']); seen = [policy()]\n"
        "devices.busy_elsewhere = lambda *a, **k: 0\n"  # an idle machine
        "openmp_for(['train', '--data', 'x']); seen.append(policy())\n"
        "devices.busy_elsewhere = lambda *a, **k: 1\n"
        "openmp_for(['--no-progress', 'train', '--data', 'x']); seen.append(policy())\n"
        "os.environ['OMP_WAIT_POLICY'] = 'ACTIVE'\n"  # a user's choice
        "openmp_for(['finetune']); seen.append(policy())\n"
        "print(*seen, 'torch' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "KMP_BLOCKTIME", "GOMP_SPINCOUNT")}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # not a training command: left alone; idle: left alone; busy: PASSIVE; the user's ACTIVE stands; no torch yet
    assert done.stdout.split() == ["-", "-", "PASSIVE", "ACTIVE", "False"]
