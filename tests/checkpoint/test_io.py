"""Checksums and atomic directories: damage is detected and named, a failed write replaces nothing."""

import json

import pytest
import torch

import vitkit
from vitkit.checkpoint.io import atomic_dir, read_torch, verify_checksums, write_safetensors
from vitkit.errors import CheckpointError


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
    with pytest.raises(CheckpointError, match=rf"model\.safetensors: {size // 2} bytes, {size} when written: the file is truncated"):
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


def test_atomic_dir_lists_every_binary_file_and_replaces_whole(tmp_path):
    target = tmp_path / "step"
    with atomic_dir(target) as tmp:
        write_safetensors(tmp / "a.safetensors", {"x": torch.ones(3)})
        torch.save({"y": torch.zeros(2)}, tmp / "state.pt")
    assert set(json.loads((target / "checksums.json").read_text())["files"]) == {"a.safetensors", "state.pt"}
    verify_checksums(target)
    _flip_one_byte(target / "state.pt", at=-30)
    with pytest.raises(CheckpointError, match=r"state\.pt: corrupt"):
        verify_checksums(target)
    with atomic_dir(target) as tmp:  # replaces the old directory as a whole
        write_safetensors(tmp / "b.safetensors", {"x": torch.ones(3)})
    assert sorted(p.name for p in target.iterdir()) == ["b.safetensors", "checksums.json"]


@pytest.mark.parametrize("failure", [OSError(28, "No space left on device"), RuntimeError("PytorchStreamWriter failed writing file")])
def test_a_failed_directory_write_replaces_nothing(tmp_path, failure):
    target = tmp_path / "step"
    with atomic_dir(target) as tmp:
        torch.save({"y": torch.zeros(2)}, tmp / "state.pt")
    before = (target / "state.pt").read_bytes()
    with pytest.raises(CheckpointError, match=r"step: cannot be written \(.*is the disk full\?\); nothing was replaced"):
        with atomic_dir(target) as tmp:
            (tmp / "state.pt").write_bytes(b"partial")
            raise failure
    assert (target / "state.pt").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step"]  # no temporary directory left behind
    assert torch.equal(read_torch(target / "state.pt")["y"], torch.zeros(2))
