import numpy as np
import pytest
from PIL import Image

from vitkit.data.images import load_image
from vitkit.errors import DataError


def save(tmp_path, image, name):
    path = tmp_path / name
    image.save(path)
    return path


def test_grayscale_to_rgb_and_back(tmp_path):
    gray = Image.fromarray(np.arange(64, dtype=np.uint8).reshape(8, 8), "L")
    path = save(tmp_path, gray, "g.png")
    rgb = load_image(path, 3)
    assert rgb.shape == (3, 8, 8) and rgb.dtype == np.uint8
    np.testing.assert_array_equal(rgb[0], rgb[2])
    np.testing.assert_array_equal(load_image(path, 1)[0], np.asarray(gray))


def test_rgba_composited_on_white(tmp_path):
    rgba = np.zeros((4, 4, 4), dtype=np.uint8)
    rgba[..., 0] = 255  # red, fully transparent on the left half
    rgba[:, 2:, 3] = 255
    out = load_image(save(tmp_path, Image.fromarray(rgba, "RGBA"), "a.png"), 3)
    assert (out[:, :, :2] == 255).all()  # transparent: white
    assert (out[0, :, 2:] == 255).all() and (out[1:, :, 2:] == 0).all()  # opaque: red


def test_palette_image(tmp_path):
    image = Image.fromarray(np.array([[0, 1], [1, 0]], dtype=np.uint8), "P")
    image.putpalette([10, 20, 30, 200, 100, 50] + [0] * 762)
    out = load_image(save(tmp_path, image, "p.png"), 3)
    np.testing.assert_array_equal(out[:, 0, 1], [200, 100, 50])
    np.testing.assert_array_equal(out[:, 0, 0], [10, 20, 30])


def test_16bit_scaled_to_8bit(tmp_path):
    array = np.array([[0, 65535], [257 * 128, 257]], dtype=np.uint16)
    out = load_image(save(tmp_path, Image.fromarray(array), "d.png"), 1)
    np.testing.assert_array_equal(out[0], [[0, 255], [128, 1]])


def test_resize_center_crop(tmp_path):
    out = load_image(save(tmp_path, Image.new("RGB", (40, 20), (1, 2, 3)), "w.jpg"), 3, size=16)
    assert out.shape == (3, 16, 16)


def test_not_an_image(tmp_path):
    path = tmp_path / "x.png"
    path.write_text("hello")
    with pytest.raises(DataError, match="x.png"):
        load_image(path, 3)
