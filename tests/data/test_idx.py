import gzip
import struct

import numpy as np
import pytest

from vitkit.data import idx
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
