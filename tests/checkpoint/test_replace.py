"""Replacing a checkpoint loses nothing: a kill at any point, or a full disk, during `vitkit convert SRC DST`
onto an existing DST leaves DST as the old model or the new one, whole, and every message is true."""

import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from vitkit import files as io
from vitkit.checkpoint import read_checkpoint, save_checkpoint
from vitkit.checkpoint.native import is_native, save_pretrained, write_pretrained
from vitkit.errors import CheckpointError
from vitkit.files import atomic_dir, begin_replacement, exclusive, finish_replacement, read_stable, staging
from vitkit.models import VisionTransformer, get_config

FORMATS = {"vitkit": "dst", "hf": "dst_hf", "npz": "dst.npz", "timm": "dst.safetensors"}


def _model(seed: int) -> VisionTransformer:
    torch.manual_seed(seed)
    return VisionTransformer(get_config("vit_test", depth=1, image_size=8, num_classes=3)).eval()


def _which(path: Path, old: dict, new: dict) -> str:
    """'old' or 'new': the model DST holds, read as a user would (a torn DST fails here)."""
    _, state, _ = read_checkpoint(path)
    for name, want in (("old", old), ("new", new)):
        if state.keys() == want.keys() and all(torch.equal(state[k], want[k]) for k in want):
            return name
    raise AssertionError(f"{path} holds neither the old nor the new model")


def _killed_at(point: int, write) -> bool:
    """Run `write()` in a forked child that SIGKILLs itself at its `point`-th file-system step; True if it was killed."""
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        count = [0]

        def fatal(fn):
            def step(*args, **kwargs):
                count[0] += 1
                if count[0] == point:
                    os.kill(os.getpid(), signal.SIGKILL)
                return fn(*args, **kwargs)

            return step

        for name in ("replace", "rename", "fsync", "unlink", "rmdir", "mkdir", "open", "close"):
            setattr(os, name, fatal(getattr(os, name)))
        try:
            write()
        finally:
            os._exit(0)
    _, status = os.waitpid(child, 0)
    return os.WIFSIGNALED(status)


@pytest.mark.parametrize("format", ["vitkit", "npz"])  # a directory and a file (benchmarks/faults.py runs every format)
def test_a_kill_at_every_step_of_a_replacement_leaves_the_old_or_the_new_model(tmp_path, format):
    old_model, new_model = _model(0), _model(1)
    old, new = old_model.state_dict(), new_model.state_dict()
    dst = tmp_path / FORMATS[format]
    seen, point = set(), 1
    while True:
        if dst.is_dir():
            shutil.rmtree(dst)
        dst.unlink(missing_ok=True)
        save_checkpoint(old_model, dst, format)
        killed = _killed_at(point, lambda: save_checkpoint(new_model, dst, format))
        seen.add(_which(dst, old, new))
        if not killed:
            break
        point += 1
    assert point > 3 and seen == {"old", "new"}  # kills landed before and after the switch
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".") and p.name.endswith(".old")]


def _vitkit(*args) -> list[str]:
    return [str(Path(sys.executable).with_name("vitkit")), *map(str, args)]


def test_sigkill_at_random_moments_of_the_real_convert(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    save_checkpoint(_model(1), src)
    save_checkpoint(_model(0), dst)
    old, new = _model(0).state_dict(), _model(1).state_dict()
    rng = random.Random(0)
    for _ in range(1):
        run = subprocess.Popen(_vitkit("convert", src, dst), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            run.wait(timeout=rng.uniform(1.0, 3.0))
        except subprocess.TimeoutExpired:
            run.kill()
            run.wait()
        assert _which(dst, old, new) in ("old", "new")
        save_checkpoint(_model(0), dst)


def _limit_file_size(limit: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return apply


@pytest.mark.parametrize("format", ["vitkit"])  # (every format at 12 limits: benchmarks/faults.py)
def test_a_file_size_limit_during_convert_keeps_the_old_model_and_says_so(tmp_path, format):
    src, dst = tmp_path / "src", tmp_path / FORMATS[format]
    save_checkpoint(_model(1), src)
    save_checkpoint(_model(0), dst, format)
    weights = sum(t.numel() * 4 for t in _model(0).state_dict().values())
    result = subprocess.run(
        _vitkit("convert", src, dst),
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_file_size(weights // 2),
    )
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error:" in line]  # (.npz also warns about GELU)
    assert len(errors) == 1 and "Traceback" not in result.stderr
    assert f"{dst}: cannot be written" in errors[0] and "nothing was replaced" in errors[0]
    assert _which(dst, _model(0).state_dict(), _model(1).state_dict()) == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["src", dst.name])  # no temporary left behind


@pytest.fixture
def small_disk(tmp_path):
    """A real full disk: a 600 KiB tmpfs (root only; skipped elsewhere)."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    yield disk
    subprocess.run(["umount", str(disk)], check=True)


@pytest.mark.parametrize("found", ["before writing", "while writing"])
def test_a_full_disk_during_convert_keeps_the_old_model(tmp_path, small_disk, found, monkeypatch, capsys):
    """The free-space check refuses up front; where it cannot know (other writers, filesystem overhead) the disk
    fills while writing, and the replacement still leaves the old model."""
    big = VisionTransformer(
        get_config("vit_test", depth=10, image_size=16, num_classes=3)
    )  # 351 KB: old + new do not fit
    src, dst = tmp_path / "src", small_disk / "dst"
    save_checkpoint(big, src)
    torch.manual_seed(5)
    old_model = VisionTransformer(big.config)
    save_checkpoint(old_model, dst)
    if found == "before writing":
        result = subprocess.run(_vitkit("convert", src, dst), capture_output=True, text=True, timeout=120)
        assert result.returncode == 2, result.stderr
        assert "needs about" in result.stderr and "KiB free" in result.stderr and len(result.stderr.splitlines()) == 1
    else:
        import vitkit.checkpoint
        from vitkit.cli import main

        monkeypatch.setattr(vitkit.checkpoint, "check_room", lambda *args, **kwargs: None)
        assert main(["convert", str(src), str(dst)]) == 2
        err = capsys.readouterr().err
        assert "No space left on device" in err and "nothing was replaced" in err
    assert _which(dst, old_model.state_dict(), big.state_dict()) == "old"
    assert [p.name for p in small_disk.iterdir()] == ["dst"]


def test_a_file_never_silently_replaces_a_directory_or_back(tmp_path):
    model = _model(0)
    save_checkpoint(model, tmp_path / "dir")
    (tmp_path / "dir").rename(tmp_path / "dir.safetensors")  # a timm file's name (a name without one is its folder)
    with pytest.raises(CheckpointError, match="is a directory"):
        save_checkpoint(model, tmp_path / "dir.safetensors", "timm")
    (tmp_path / "file").write_text("keep me")
    with pytest.raises(CheckpointError, match="is a file"):
        save_checkpoint(model, tmp_path / "file", "vitkit")
    assert (tmp_path / "file").read_text() == "keep me"


def test_a_reader_waits_for_a_live_writer_between_its_renames(tmp_path):
    target = tmp_path / "final"
    target.mkdir()
    tmp, old = staging(target)
    with atomic_dir(target) as building:  # the writer holds the lock on .final.tmp
        (building / "x").write_text("new")
        os.replace(target, old)  # as if between the two renames
        finish_replacement(target, wait_s=0.2)  # a reader: the writer is alive, so it leaves things alone
        assert not target.exists() and tmp.is_dir()
        os.replace(old, target)  # (put it back so the writer's own renames go ahead)
    assert (target / "x").read_text() == "new" and not tmp.exists() and not old.exists()


def test_a_look_between_the_two_renames_waits_for_the_writer_and_sees_the_new_directory(tmp_path, monkeypatch):
    """Asked between a live writer's renames, "is this a vitkit checkpoint?" is answered about the new directory
    (a "no" there made a run directory resolve to an older step checkpoint, or to nothing)."""
    target = tmp_path / "final"
    save_pretrained(_model(0), target)
    waiting, try_lock = threading.Event(), io._try_lock

    def seen_locked(path):
        fd = try_lock(path)
        if fd is None:
            waiting.set()  # the reader found the writer's lock held
        return fd

    tmp, fd = begin_replacement(target)
    write_pretrained(_model(1), tmp)
    os.replace(target, staging(target)[1])  # the writer's first rename
    monkeypatch.setattr(io, "_try_lock", seen_locked)
    answer = []
    reader = threading.Thread(target=lambda: (answer.append(is_native(target)), waiting.set()))
    reader.start()
    waiting.wait(timeout=60)  # the reader waits for the writer (or, wrongly, has answered already)
    os.replace(tmp, target)  # the second rename, then the writer lets go
    os.close(fd)
    reader.join()
    assert answer == [True]


def test_a_read_overtaken_by_a_replacement_is_read_again(tmp_path):
    target = tmp_path / "final"
    with atomic_dir(target) as building:
        (building / "x").write_text("0")
    reads = []

    def read_then_replace(path, replacements):
        reads.append((path / "x").read_text())
        if len(reads) <= replacements:  # another process replaces the directory while this read goes on
            with atomic_dir(target) as building:
                (building / "x").write_text(str(len(reads)))
        return reads[-1]

    assert read_stable(target, lambda p: read_then_replace(p, 2)) == "2" and reads == ["0", "1", "2"]
    reads.clear()
    with pytest.raises(CheckpointError, match="replaced by another process 20 times while being read"):
        read_stable(target, lambda p: read_then_replace(p, 100))
    assert len(reads) == 20


def test_a_file_renamed_away_under_a_read_is_missing_not_damage(tmp_path):
    target = tmp_path / "final"
    with atomic_dir(target) as building:
        (building / "old.txt").write_text("old")
    calls = []

    def read(path):
        calls.append(path)
        name = next(path.iterdir()).name
        if len(calls) == 1:  # another process replaces the directory between the listing and the open
            with atomic_dir(target) as building:
                (building / "new.txt").write_text("new")
        return (path / name).read_text()

    assert read_stable(target, read) == "new" and len(calls) == 2


def test_a_read_that_found_no_directory_while_a_replacement_ended_is_read_again(tmp_path, monkeypatch):
    """The read starts between a writer's two renames (no directory) and fails; the writer's second rename lands
    while the reader looks at what happened. The reader must read the new directory, not report it missing (1 in
    ~20,000 reads of a directory replaced in a loop did, in tests/cli/test_reliability_cli.py's race)."""
    target = tmp_path / "final"
    tmp, old = staging(target)
    tmp.mkdir()
    (tmp / "x").write_text("new")
    old.mkdir()  # the old directory moved aside, the new one not yet in place
    between = io.between_renames

    def second_rename_lands_first(path):
        if tmp.exists():
            os.replace(tmp, target)
            shutil.rmtree(old)
        return between(path)

    monkeypatch.setattr(io, "between_renames", second_rename_lands_first)
    assert read_stable(target, lambda p: (p / "x").read_text()) == "new"


def test_a_directory_whose_inode_number_a_new_one_reuses_still_counts_as_replaced(tmp_path):
    """ext4 gives a new directory the inode number of one just removed: the number alone would take a read spanning
    two replacements for a read of one directory."""
    target = tmp_path / "final"
    target.mkdir()
    before = io.identity(target)
    shutil.rmtree(target)
    target.mkdir()
    assert io.identity(target) != before


def test_one_writer_per_directory(tmp_path):
    with exclusive(tmp_path / "run"):
        with pytest.raises(CheckpointError, match=rf"in use by another vitkit process \(pid {os.getpid()}\)"):
            with exclusive(tmp_path / "run"):
                pass
    with exclusive(tmp_path / "run"):  # released
        pass


@pytest.mark.parametrize("name", ["dst.npz", "dst.pth"])
def test_weights_and_their_sidecar_are_replaced_as_one_pair(tmp_path, name):
    """.npz and .pth keep class names in FILE.json beside the weights: after a kill at any step the pair read back is
    the old model with its names or the new one with its names, and a model without names leaves none behind."""
    from vitkit.checkpoint import read_metadata

    format = "npz" if name.endswith(".npz") else "timm"
    old_model, new_model = _model(0), _model(1)
    old, new = old_model.state_dict(), new_model.state_dict()
    names = {"old": ["a", "b", "c"], "new": ["x", "y", "z"]}
    dst = tmp_path / name
    seen, point = set(), 1
    while True:
        for p in tmp_path.iterdir():  # a kill leaves a writer's scratch folder (the next writer sweeps it)
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        save_checkpoint(old_model, dst, format, metadata={"class_names": names["old"]})
        killed = _killed_at(
            point, lambda: save_checkpoint(new_model, dst, format, metadata={"class_names": names["new"]})
        )
        which = _which(dst, old, new)
        assert read_metadata(dst)["class_names"] == names[which], (point, which)
        seen.add(which)
        if not killed:
            break
        point += 1
    assert point > 3 and seen == {"old", "new"}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, name + ".json"])  # nothing staged is left
    save_checkpoint(new_model, dst, format)  # no metadata: the old names must not stay beside the new weights
    assert "class_names" not in read_metadata(dst)
