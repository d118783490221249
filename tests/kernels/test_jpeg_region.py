"""vitkit's libjpeg helper: built once, and where it cannot be built, JPEGs are still read, by simplejpeg or Pillow."""

import numpy as np
import pytest
from PIL import Image

from vitkit.data.images import jpeg_decoder, load_pixels
from vitkit.kernels import jpeg_region


def test_without_a_compiler_the_decoder_falls_back_with_the_same_pixels(monkeypatch, tmp_path):
    if not jpeg_region.load():
        pytest.skip(f"vitkit's libjpeg helper cannot be built here: {jpeg_region.unavailable()}")
    path = tmp_path / "p.jpg"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (50, 70, 3), dtype=np.uint8)).save(path, quality=90)
    box = lambda w, h: (3, 5, 40, 33)
    want = load_pixels(path, 3, crop=box)
    assert jpeg_decoder() == "libjpeg" and want.shape == (28, 37, 3)

    monkeypatch.setattr(jpeg_region, "_lib", None)
    monkeypatch.setattr(jpeg_region, "_failure", None)
    monkeypatch.setenv("VITKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    assert jpeg_region.load() is False and "no C/C++ compiler" in jpeg_region.unavailable()
    assert jpeg_decoder() in ("simplejpeg", "pillow")
    np.testing.assert_array_equal(load_pixels(path, 3, crop=box), want)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.so"))  # nothing half-written


def test_bad_data_is_a_jpeg_error_not_a_crash():
    if not jpeg_region.load():
        pytest.skip(f"vitkit's libjpeg helper cannot be built here: {jpeg_region.unavailable()}")
    with pytest.raises(jpeg_region.JpegError):
        jpeg_region.info(b"\xff\xd8 not a jpeg at all")
    with pytest.raises(jpeg_region.JpegError):
        jpeg_region.decode(b"\xff\xd8\xff\xdb" + bytes(100), (0, 0, 1, 1), width=1)
