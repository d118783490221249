import gzip
import struct

import numpy as np
import pytest

from vitkit.data.sources import idx
from vitkit.errors import DataError


def write_idx(path, array, compress):
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    data = header + array.astype(np.uint8).tobytes()
    if compress:
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)


@pytest.mark.parametrize("compress", [True, False])
def test_idx_round_trip(tmp_path, compress):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (7, 5, 6), dtype=np.uint8)
    labels = rng.integers(0, 3, 7, dtype=np.uint8)
    suffix = ".gz" if compress else ""
    write_idx(tmp_path / f"train-images-idx3-ubyte{suffix}", images, compress)
    write_idx(tmp_path / f"train-labels-idx1-ubyte{suffix}", labels, compress)
    x, y = idx.load_idx_split(tmp_path, "train")
    np.testing.assert_array_equal(x, images)
    np.testing.assert_array_equal(y, labels)
    assert y.dtype == np.int64


def test_truncated_file_names_the_file(tmp_path):
    write_idx(tmp_path / "train-images-idx3-ubyte", np.zeros((4, 3, 3)), False)
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(DataError, match="truncated"):
        idx.read_idx(path)


def test_missing_fashion_mnist_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("VITKIT_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(DataError, match="apt-get install dataset-fashion-mnist"):
        idx.load_idx_split(idx.default_dir(), "train")


def _split(tmp_path, images, labels, split="train", image_dtype=0x08):
    prefix = {"train": "train", "test": "t10k"}[split]
    write_idx(tmp_path / f"{prefix}-images-idx3-ubyte", images, False)
    write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte", labels, False)


def test_image_and_label_counts_must_match(tmp_path):
    _split(tmp_path, np.zeros((5, 3, 3)), np.zeros(4))
    with pytest.raises(
        DataError, match=r"train-images-idx3-ubyte \(5, 3, 3\) and train-labels-idx1-ubyte \(4,\) do not match"
    ):
        idx.load_idx_split(tmp_path, "train")


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\x08\x03\x00\x00" + bytes(20), "bad magic number"),  # a byte-swapped header
        (b"\x00\x00\x42\x03" + bytes(20), "bad magic number"),  # unknown type code
        (b"\x00\x00\x08\x03\x00\x00", "header promises 3 dimensions but the file ends first"),
        (b"", "bad magic number"),
    ],
)
def test_wrong_magic_or_short_header(tmp_path, content, message):
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(content)
    with pytest.raises(DataError, match=message) as caught:
        idx.read_idx(path)
    assert str(caught.value).startswith(str(path))


def test_negative_labels_are_refused(tmp_path):
    _split(tmp_path, np.zeros((3, 2, 2)), np.zeros(3))
    labels = tmp_path / "train-labels-idx1-ubyte"
    labels.write_bytes(bytes([0, 0, 0x09, 1]) + struct.pack(">I", 3) + np.array([0, -1, 2], dtype=np.int8).tobytes())
    with pytest.raises(DataError, match=r"label -1 at index 1"):
        idx.load_idx_split(tmp_path, "train")


def test_the_clothes_idx_set_is_known_by_its_test_labels_in_a_folder_of_any_name(tmp_path, monkeypatch):
    # (the test's name has no "fashion" in it: its tmp_path must not say so either)
    """$VITKIT_DATA or a copy in a folder whose name lacks "fashion" gave classes 0-9, so a model trained there could not
    be scored on the real folder (its class names differed)."""
    import hashlib

    from vitkit.data import DataSpec

    rng = np.random.default_rng(0)
    labels = np.arange(10).repeat(2).astype(np.uint8)
    (tmp_path / "mydata").mkdir()
    for split in ("train", "t10k"):
        write_idx(tmp_path / "mydata" / f"{split}-images-idx3-ubyte", rng.integers(0, 255, (20, 4, 4)), False)
        write_idx(tmp_path / "mydata" / f"{split}-labels-idx1-ubyte", labels, False)
    open_test = lambda: DataSpec(path=str(tmp_path / "mydata")).open("test", channels=1, image_size=4).class_names
    assert open_test()[:2] == ["0", "1"]  # other IDX data: numbered classes
    idx.is_fashion_mnist.cache_clear()
    monkeypatch.setattr(
        idx, "FASHION_MNIST_TEST_LABELS", hashlib.blake2b(labels.astype(np.uint8).tobytes(), digest_size=8).hexdigest()
    )
    assert open_test()[:2] == ["T-shirt/top", "Trouser"]  # these labels are Fashion-MNIST's: its class names
    idx.is_fashion_mnist.cache_clear()
