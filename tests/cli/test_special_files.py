"""Files that are not regular files (a device, a FIFO) given where vitkit reads a file: refused in one line that says
what the path is, before a byte is read, instead of a read without end (/dev/zero) or an open that waits forever (a FIFO).
Each command runs as a subprocess under a time limit (a hang fails) and an address-space limit (a read of gigabytes
fails)."""

import io
import os
import resource
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

import vitkit

MEMORY = 4 << 30  # address space for a vitkit process: torch's import and a tiny model fit many times over
TIMEOUT = 60  # seconds: a command that reads or waits without end is stopped here


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def vitkit_limited(*args) -> subprocess.CompletedProcess:
    """`vitkit ARGS...` in a child process bounded in memory and time."""
    return subprocess.run(
        [sys.executable, "-m", "vitkit", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        preexec_fn=_limited,
    )


def one_clear_line(done: subprocess.CompletedProcess, path, kind: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert str(path) in lines[0] and f"is {kind}" in lines[0], lines[0]


@pytest.fixture
def checkpoint(tmp_path):
    model = vitkit.create_model("vit_test", num_classes=3)
    torch.nn.init.normal_(model.head.weight)
    return vitkit.save_pretrained(model, tmp_path / "ckpt", extra={"class_names": ["ant", "bee", "cat"]})


@pytest.fixture
def fifo(tmp_path):
    def make(name: str):
        path = tmp_path / name
        os.mkfifo(path)
        return path

    return make


def test_predict_on_a_character_device_is_refused_unread(checkpoint):
    one_clear_line(vitkit_limited("predict", checkpoint, "/dev/zero"), "/dev/zero", "a character device")


def test_predict_on_an_image_name_linked_to_a_device_is_refused_unread(checkpoint, tmp_path):
    link = tmp_path / "photo.png"
    link.symlink_to("/dev/zero")
    one_clear_line(vitkit_limited("predict", checkpoint, link), link, "a character device")


def test_predict_on_a_fifo_is_refused_without_waiting(checkpoint, fifo):
    path = fifo("photo.png")
    one_clear_line(vitkit_limited("predict", checkpoint, path), path, "a FIFO")


def test_info_on_a_fifo_says_it_is_one(fifo):
    path = fifo("model.pth")
    one_clear_line(vitkit_limited("info", path), path, "a FIFO")


def test_a_hugging_face_shard_that_is_a_fifo_is_refused_without_waiting(checkpoint, fifo, tmp_path):
    out = tmp_path / "hf"
    from vitkit.checkpoint import save_checkpoint

    save_checkpoint(vitkit.load_pretrained(checkpoint), out, "hf")
    (out / "model.safetensors").unlink()
    (out / "pytorch_model.bin.index.json").write_text('{"weight_map": {"x": "pytorch_model-00001.bin"}}')
    shard = fifo("hf/pytorch_model-00001.bin")
    one_clear_line(vitkit_limited("info", out), shard, "a FIFO")


@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_a_parquet_row_naming_a_device_or_fifo_is_refused_unread(tmp_path, fifo, target):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    target = str(fifo("image.png")) if target == "fifo" else target
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(buffer, "PNG")
    rows = [{"bytes": buffer.getvalue(), "path": None}] * 3 + [{"bytes": None, "path": target}]
    root = tmp_path / "pq"
    root.mkdir()
    pq.write_table(pa.table({"image": rows, "label": [0, 1, 0, 1]}), root / "train-00000-of-00001.parquet")
    kind = "a FIFO" if target != "/dev/zero" else "a character device"
    one_clear_line(vitkit_limited("data", root, "--to-shards", tmp_path / "shards"), target, kind)
