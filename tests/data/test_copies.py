"""Copies of one image under different labels: found by bytes (files) or pixels (arrays), narrowed by size and the
first bytes before a file is read whole."""

import torch

from vitkit.data.copies import HEAD_BYTES, relabelled, relabelled_pixels


def test_files_alike_in_size_and_first_bytes_are_told_apart_by_the_rest(tmp_path):
    head = bytes(range(256)) * (HEAD_BYTES // 256)
    files = {"a": head + b"tail-one", "b": head + b"tail-two", "c": head + b"tail-one", "d": head + b"tail-one"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    paths = [tmp_path / name for name in files]
    # a and c: one image, two labels; b differs past the head; d is a copy under a's own label
    assert relabelled(paths, ["cat", "dog", "dog", "cat"]) == [[0, 2, 3]]
    assert relabelled(paths, ["cat", "dog", "cat", "cat"]) == []
    (tmp_path / "c").unlink()  # a missing file matches nothing
    assert relabelled(paths, ["cat", "dog", "dog", "dog"]) == [[0, 3]]


def test_images_in_memory_are_compared_by_pixels():
    images = torch.zeros(4, 1, 2, 2, dtype=torch.uint8)
    images[1] = images[3] = 7
    assert relabelled_pixels(images, ["0", "0", "1", "1"]) == [[0, 2], [1, 3]]
    assert relabelled_pixels(images, ["0", "1", "0", "1"]) == []
