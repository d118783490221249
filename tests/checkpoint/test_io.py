"""Checksums and atomic directories: damage is detected and named, a failed write replaces nothing."""

import json

import pytest
import torch

import vitkit
from vitkit.checkpoint.io import write_safetensors, write_torch
from vitkit.errors import CheckpointError
from vitkit.files import update_checksums, verify_checksums, write_json


def _flip_one_byte(path, at=-20):
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def test_checksums_name_the_damaged_file(make_model, tmp_path):
    ckpt = vitkit.save_pretrained(make_model(), tmp_path / "ckpt")
    listed = json.loads((ckpt / "checksums.json").read_text())["files"]
    assert set(listed) == {"model.safetensors"} and len(listed["model.safetensors"]["sha256"]) == 64
    vitkit.load_pretrained(ckpt)  # intact: loads
    _flip_one_byte(ckpt / "model.safetensors")  # one flipped bit in a weight: safetensors itself cannot tell
    with pytest.raises(CheckpointError, match=r"ckpt/model\.safetensors: corrupt \(its sha256 differs"):
        vitkit.load_pretrained(ckpt)
    with pytest.raises(CheckpointError, match="model.safetensors: corrupt"):
        vitkit.checkpoint.read_checkpoint(ckpt)  # what vitkit info reads


def test_truncated_and_missing_files_are_named(make_model, tmp_path):
    ckpt = vitkit.save_pretrained(make_model(), tmp_path / "ckpt")
    weights = ckpt / "model.safetensors"
    size = weights.stat().st_size
    weights.write_bytes(weights.read_bytes()[: size // 2])
    with pytest.raises(
        CheckpointError, match=rf"model\.safetensors: {size // 2} bytes, {size} when written: the file is truncated"
    ):
        vitkit.load_pretrained(ckpt)
    weights.unlink()
    with pytest.raises(CheckpointError, match=r"model\.safetensors: missing, but listed in checksums\.json"):
        verify_checksums(ckpt)


def test_edited_config_is_not_damage(make_model, tmp_path):
    ckpt = vitkit.save_pretrained(make_model(), tmp_path / "ckpt", extra={"class_names": ["a"] * 10})
    config = json.loads((ckpt / "config.json").read_text())
    config["class_names"][0] = "renamed"
    (ckpt / "config.json").write_text(json.dumps(config))
    verify_checksums(ckpt)  # JSON files are checked by their readers, not by checksum


def test_update_checksums_lists_every_binary_file(tmp_path):
    write_safetensors(tmp_path / "a.safetensors", {"x": torch.ones(3)})
    torch.save({"y": torch.zeros(2)}, tmp_path / "state.pt")
    (tmp_path / "notes.json").write_text("{}")
    update_checksums(tmp_path)
    assert set(json.loads((tmp_path / "checksums.json").read_text())["files"]) == {"a.safetensors", "state.pt"}
    verify_checksums(tmp_path)
    _flip_one_byte(tmp_path / "state.pt", at=-30)
    with pytest.raises(CheckpointError, match=r"state\.pt: corrupt"):
        verify_checksums(tmp_path)


@pytest.mark.parametrize(
    "writer, patched",
    [
        (write_safetensors, "vitkit.checkpoint.io.save_file"),
        (write_torch, "torch.save"),
        (write_json, "pathlib.Path.write_text"),
    ],
)
@pytest.mark.parametrize(
    "failure", [OSError(28, "No space left on device"), RuntimeError("PytorchStreamWriter failed writing file")]
)
def test_a_failed_write_replaces_nothing(tmp_path, monkeypatch, writer, patched, failure):
    path = tmp_path / "file.bin"
    path.write_bytes(b"the previous version")

    def write_half_then_fail(*args, **kwargs):
        file = args[0] if patched.endswith("write_text") else args[1]  # Path.write_text(self, data); save(obj, file)
        with open(file, "wb") as f:
            f.write(b"half")
        raise failure

    monkeypatch.setattr(patched, write_half_then_fail)
    with pytest.raises(
        CheckpointError, match=r"file\.bin: cannot be written \(.*is the disk full\?\); nothing was replaced"
    ):
        writer(path, {"x": torch.ones(3)} if writer is not write_json else {"x": 1})
    assert path.read_bytes() == b"the previous version"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.bin"]  # no temporary file left behind


KILLED_MID_WRITE = """
import os, signal, sys
from pathlib import Path
from vitkit.files import atomic_path, scratch_folder
target = Path(sys.argv[1])
with scratch_folder(target.with_name("model.onnx")) as scratch:  # an export's scratch folder, half written
    (scratch / "model.onnx.data").write_bytes(b"w" * 1000)
    with atomic_path(target) as tmp:
        tmp.write_bytes(b"x" * 1000)
        os.kill(os.getpid(), signal.SIGKILL)
"""


def test_scratch_left_by_a_process_killed_mid_write_is_swept_by_the_next_write(tmp_path):
    """A kill -9 (or the OOM killer, a preempted job) mid-write left a checkpoint-sized .tmp file, or an export's
    scratch folder, beside the target for good: every killed write added one. The next write sweeps those of dead
    processes of this host, and leaves a live process's alone."""
    import os
    import signal
    import subprocess
    import sys

    from vitkit.files import scratch_folder, scratch_prefix

    folder = tmp_path / "run"
    folder.mkdir()
    target, export = folder / "model.pth", folder / "model.onnx"
    target.write_bytes(b"old")
    killed = subprocess.run([sys.executable, "-c", KILLED_MID_WRITE, str(target)], capture_output=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr

    def listed():  # the dead writer's lock file stays until the next writer of model.pth: released with its process
        return [p for p in folder.iterdir() if p.name != ".model.pth.lock"]

    assert target.read_bytes() == b"old" and len(listed()) == 3  # the file as it was, a .tmp, a scratch folder
    live = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        theirs = folder / (scratch_prefix(target).replace(f"-{os.getpid()}.", f"-{live.pid}.") + "abc.tmp.pth")
        theirs.write_bytes(b"still writing")
        write_json(folder / "other.json", {})  # another file's write sweeps nothing of model.pth's
        assert len(listed()) == 5
        write_torch(target, {"w": torch.zeros(2)})  # sweeps the killed process's .tmp, not the live one's
        assert [p.name for p in folder.glob(".model.pth.*")] == [theirs.name] and len(list(folder.iterdir())) == 4
        with scratch_folder(export):  # an export's scratch: the killed one's folder goes
            pass
        assert sorted(p.name for p in folder.iterdir()) == sorted(["model.pth", "other.json", theirs.name])
    finally:
        live.communicate(b"")
