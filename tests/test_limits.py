"""Memory is bounded by what an input can legitimately need: small files that declare huge sizes (a zip or gzip
bomb, a lying header, an extreme aspect ratio, a config promising 20M classes) are refused from their declared
sizes, before anything is allocated. Each loader runs under RLIMIT_AS: 256 MiB more than the process has."""

import gzip
import io
import struct
import zipfile

import numpy as np
import pytest
from PIL import Image

from vitkit.checkpoint.io import read_npz
from vitkit.data.images import load_image
from vitkit.data.sources.idx import load_idx_split, read_idx


def _refused(result, *words):
    kind, message = result
    assert kind == "error", result  # a documented error, not a MemoryError or a killed process
    assert all(w in message for w in words), message


def test_a_thin_image_under_the_pixel_limit(tmp_path, under_memory_limit):
    Image.new("L", (1, 5_000_000)).save(tmp_path / "thin.png")  # 10 KB on disk; 8 GB once resized to a 224 crop
    _refused(
        under_memory_limit(lambda: load_image(tmp_path / "thin.png", 3, 224)), "DataError", "thin.png", "1x5000000"
    )
    assert under_memory_limit(lambda: load_image(tmp_path / "thin.png", 1, 1))[0] == "ok"  # 1x1 needs nothing


def _npz_bomb(path, declared: int, *, lie: bool = False) -> None:
    """An .npz of one deflated all-zero array of `declared` bytes (or, with `lie`, a header promising that much)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        with archive.open("w.npy", "w", force_zip64=True) as f:
            header = io.BytesIO()
            np.lib.format.write_array_header_1_0(
                header, {"descr": "<f4", "fortran_order": False, "shape": (declared // 4,)}
            )
            f.write(header.getvalue())
            chunk = bytes(1 << 22)
            for _ in range((1 << 22 if lie else declared) // len(chunk)):
                f.write(chunk)


def test_an_npz_zip_bomb(tmp_path, under_memory_limit):
    _npz_bomb(tmp_path / "bomb.npz", 320 << 20)  # 320 MiB of zeros in ~320 KB
    _refused(under_memory_limit(lambda: read_npz(tmp_path / "bomb.npz")), "CheckpointError", "decompression bomb")


def test_an_npz_header_promising_more_than_its_member(tmp_path, under_memory_limit):
    _npz_bomb(tmp_path / "lie.npz", 8 << 30, lie=True)  # says 8 GiB, holds 4 MiB
    _refused(under_memory_limit(lambda: read_npz(tmp_path / "lie.npz")), "CheckpointError", "w.npy says shape")


def _idx(path, dims, body=b"", compress=False, kind=8):
    data = bytes([0, 0, kind, len(dims)]) + struct.pack(f">{len(dims)}I", *dims) + body
    (gzip.open if compress else open)(path, "wb").write(data)


def test_idx_headers_that_promise_more_than_the_file(tmp_path, under_memory_limit):
    _idx(tmp_path / "labels", [50_000_000], bytes(10))  # raw: 50M labels claimed, 10 bytes held
    _refused(under_memory_limit(lambda: read_idx(tmp_path / "labels")), "DataError", "50,000,000 bytes")
    _idx(tmp_path / "overflow", [2**32 - 1] * 4, bytes(16))  # the product overflows 64 bits
    _refused(under_memory_limit(lambda: read_idx(tmp_path / "overflow")), "DataError", "but the file holds 16")


def test_an_idx_gzip_bomb(tmp_path, under_memory_limit):
    with gzip.open(tmp_path / "bomb.gz", "wb", compresslevel=1) as f:
        f.write(bytes([0, 0, 8, 1]) + struct.pack(">I", 300 << 20))
        chunk = bytes(1 << 22)
        for _ in range((300 << 20) // len(chunk)):
            f.write(chunk)
    _refused(under_memory_limit(lambda: read_idx(tmp_path / "bomb.gz")), "DataError", "decompression bomb")


def test_idx_with_zero_images(tmp_path):
    _idx(tmp_path / "train-images-idx3-ubyte", [0, 28, 28])
    _idx(tmp_path / "train-labels-idx1-ubyte", [0])
    with pytest.raises(Exception, match="holds no images"):
        load_idx_split(tmp_path, "train")


@pytest.mark.parametrize("short_of", ["disk", "memory"])
def test_convert_refuses_a_head_the_machine_has_no_room_for_before_building_it(tmp_path, monkeypatch, capsys, short_of):
    import shutil

    from vitkit import limits
    from vitkit.checkpoint import save_checkpoint
    from vitkit.cli import main
    from vitkit.models import create_model

    save_checkpoint(create_model("vit_test"), tmp_path / "src")
    mib = 2**20
    if short_of == "disk":  # 10,000,000 classes x 33 x 4 bytes: about 1.2 GiB, where 64 MiB are free
        real = shutil.disk_usage
        monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=64 * mib))
    else:
        monkeypatch.setattr(limits, "memory_available", lambda: 64 * mib)
    assert main(["convert", str(tmp_path / "src"), str(tmp_path / "dst"), "--num-classes", "10000000"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "10,000,000 classes needs about 1.2 GiB" in err and short_of in err
    assert not (tmp_path / "dst").exists()
    assert (
        main(["convert", str(tmp_path / "src"), str(tmp_path / "dst"), "--num-classes", "100"]) == 0
    )  # a head that fits


def test_a_config_with_billions_of_input_channels_is_refused_before_sizing_anything(under_memory_limit):
    from vitkit.train.config import load_run_config

    for value in ("22337203685", str(2**63)):  # found by the run-config fuzzer: per-channel means sized by it
        status, detail = under_memory_limit(
            lambda: load_run_config(None, [f"model.in_chans={value}"]).model_config(), mb=256
        )
        assert status == "error" and "ConfigError" in detail and "in_chans" in detail, (status, detail)


def test_a_checkpoint_config_of_absurd_depth_or_width_is_refused_before_building_the_model(
    tmp_path, under_memory_limit
):
    """A 30-byte edit of config.json ("depth": 10000000) built ten million blocks (2.4 GB, 90 s, then a MemoryError
    traceback); "width": 10**9 overflowed torch's storage size."""
    import json

    import vitkit
    from vitkit.checkpoint import load_with_metadata

    path = vitkit.save_pretrained(vitkit.create_model("vit_test"), tmp_path / "ckpt")
    stored = json.loads((path / "config.json").read_text())
    for key, value, words in (
        ("depth", 10_000_000, ("depth", "over the limit of 1,000")),
        ("width", 10**9, ("width", "weights, over the limit")),
    ):
        edited = tmp_path / key
        edited.mkdir()
        (edited / "model.safetensors").write_bytes((path / "model.safetensors").read_bytes())
        (edited / "config.json").write_text(
            json.dumps(
                {**stored, "model": {**stored["model"], key: value}} if "model" in stored else {**stored, key: value}
            )
        )
        _refused(under_memory_limit(lambda: load_with_metadata(edited), mb=512), *words)


def test_weights_of_an_integer_dtype_are_refused(tmp_path):
    """A head re-saved as int64 (every weight truncated to 0) loaded silently: equal odds for every class, exit 0."""
    from safetensors.torch import load_file, save_file

    import vitkit
    from vitkit.checkpoint import load_with_metadata, timm
    from vitkit.errors import CheckpointError

    path = timm.write(vitkit.create_model("vit_test", num_classes=3), tmp_path / "m.safetensors")
    state = load_file(path)
    load_with_metadata(path)
    save_file({**state, "head.weight": state["head.weight"].long()}, path)
    with pytest.raises(CheckpointError, match="'head.weight' has dtype int64, expected a floating-point tensor"):
        load_with_metadata(path)


def test_an_image_file_larger_than_any_image_needs_is_refused_before_reading(tmp_path, under_memory_limit):
    """A small PNG with 3 GB appended (a sparse file: little on disk) was read whole into memory by predict and train,
    folder and tar shard alike (3.46 GB)."""
    import tarfile

    from vitkit.data.sources.tar import TarMember

    path = tmp_path / "big.png"
    Image.new("RGB", (8, 8)).save(path)
    with open(path, "r+b") as f:
        f.truncate(3 << 30)
    _refused(under_memory_limit(lambda: load_image(path, 3), mb=512), "big.png", "bytes is over the limit of")
    with tarfile.open(tmp_path / "shard.tar", "w") as tar:  # a member whose header says 3 GB (only the header is read)
        info = tarfile.TarInfo("x.png")
        info.size = 3 << 30
        tar.addfile(info)
    member = TarMember(str(tmp_path / "shard.tar"), "x.png", 512, info.size)  # the data follows its 512-byte header
    _refused(under_memory_limit(lambda: member.read(), mb=512), "x.png", "bytes is over the limit of")
