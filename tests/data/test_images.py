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


def _transparent(kind: str) -> Image.Image:
    """A 4x4 image of `kind` whose left half is fully transparent (its stored colour a dark green, as icons keep any
    colour there) and whose right half is opaque red (gray 200 where the mode has no colour)."""
    rgba = np.zeros((4, 4, 4), dtype=np.uint8)
    rgba[:, :2] = (0, 90, 0, 0)
    rgba[:, 2:] = (200, 0, 0, 255)
    if kind == "RGBA":
        return Image.fromarray(rgba, "RGBA")
    if kind == "LA":
        return Image.fromarray(np.stack([np.where(rgba[..., 3] > 0, 200, 90), rgba[..., 3]], -1).astype(np.uint8), "LA")
    if kind == "P":  # a palette with a transparent entry (GIF/PNG tRNS)
        image = Image.fromarray((rgba[..., 3] > 0).astype(np.uint8), "P")
        image.putpalette([0, 90, 0, 200, 0, 0] + [0] * 762)
        image.info["transparency"] = 0
        return image
    # RGB with one colour marked transparent (a PNG's tRNS chunk)
    image = Image.fromarray(rgba[..., :3], "RGB")
    image.info["transparency"] = (0, 90, 0)
    return image


@pytest.mark.parametrize("kind", ["RGBA", "LA", "P", "RGB-tRNS"])
@pytest.mark.parametrize("background", [None, (0.2, 0.5, 1.0)])
def test_transparent_pixels_are_composited_on_the_model_s_background(tmp_path, kind, background):
    """Transparency is read once, as the model config's background says (white without one): a palette's or one
    colour's transparency too (an RGB PNG's tRNS was ignored: its transparent pixels kept their stored colour)."""
    path = tmp_path / f"{kind}.png"
    _transparent(kind).save(path)
    given = {"background": background} if background else {}
    out = load_image(path, 3, **given)
    want = [51, 128, 255] if background else [255, 255, 255]
    assert (out[:, :, :2] == np.array(want)[:, None, None]).all()  # transparent: the background, exactly
    assert (out[:, :, 2:] == (200 if kind == "LA" else np.array([200, 0, 0])[:, None, None])).all()  # opaque: as stored
    gray = load_image(path, 1, **({"background": (0.2,)} if background else {}))
    assert (gray[0, :, :2] == (51 if background else 255)).all()


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


# -- bad files: every one is a DataError naming the file ---------------------------------------
def _png_header(width, height):
    """A PNG claiming width x height 8-bit grayscale pixels, with a few bytes of pixel data."""
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(bytes(64))) + chunk(b"IEND", b"")


def _good_bytes(tmp_path, suffix):
    path = save(
        tmp_path,
        Image.fromarray(np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8)),
        f"good{suffix}",
    )
    return path.read_bytes()


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("zero.png", lambda tp: b"", "empty file"),
        ("notes.jpg", lambda tp: b"these are my notes, not a photo", "not an image"),
        ("half.png", lambda tp: _good_bytes(tp, ".png")[:400], "truncated or corrupt"),
        ("half.jpg", lambda tp: _good_bytes(tp, ".jpg")[:300], "truncated or corrupt"),
        ("bomb.png", lambda tp: _png_header(100_000, 100_000), "decompression bomb"),  # over Pillow's hard limit
        ("big.png", lambda tp: _png_header(10_000, 9_000), "10000x9000 pixels is over the limit"),  # over vitkit's
    ],
)
def test_bad_files_are_one_data_error_naming_the_file(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content(tmp_path))
    with pytest.raises(DataError, match=message) as caught:
        load_image(path, 3, size=16)
    assert str(caught.value).startswith(str(path)) and "\n" not in str(caught.value)


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_image(tmp_path / "gone.png", 3)
    (tmp_path / "dir.png").mkdir()
    with pytest.raises(DataError, match="is a folder"):
        load_image(tmp_path / "dir.png", 3)


def test_pixel_limit_is_checked_before_decoding(tmp_path):
    path = save(tmp_path, Image.new("L", (64, 64)), "big.png")
    assert load_image(path, 1, max_pixels=64 * 64).shape == (1, 64, 64)
    with pytest.raises(DataError, match=r"64x64 pixels is over the limit of 4,095"):
        load_image(path, 1, max_pixels=64 * 64 - 1)


# -- modes: every one ends as the model's channels, with the right values -----------------------
@pytest.mark.parametrize(
    "mode, value, gray, rgb",
    [
        ("L", 100, 100, (100, 100, 100)),
        ("LA", (100, 0), 255, (255, 255, 255)),  # fully transparent: white
        ("LA", (100, 255), 100, (100, 100, 100)),
        ("RGBA", (200, 10, 20, 255), None, (200, 10, 20)),
        ("CMYK", (0, 255, 255, 0), None, (255, 0, 0)),  # pure red in CMYK
        ("I;16", 257 * 40, 40, (40, 40, 40)),
        ("RGB", (1, 2, 3), None, (1, 2, 3)),
    ],
)
def test_modes(tmp_path, mode, value, gray, rgb):
    suffix = ".tif" if mode == "CMYK" else ".png"
    path = save(tmp_path, Image.new(mode, (6, 5), value), f"m{suffix}")
    out = load_image(path, 3)
    assert out.shape == (3, 5, 6)
    np.testing.assert_array_equal(out[:, 2, 3], rgb)
    if gray is not None:
        assert load_image(path, 1)[0, 2, 3] == gray


def test_exif_orientation_is_applied(tmp_path):
    array = np.zeros((2, 4), dtype=np.uint8)
    array[:, :2] = 255  # stored: white left half, black right half (4 wide, 2 high)
    image = Image.fromarray(array, "L")
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: the camera was turned; show rotated 90 degrees clockwise
    image.save(tmp_path / "photo.png", exif=exif)
    out = load_image(tmp_path / "photo.png", 1)[0]
    assert out.shape == (4, 2)  # upright: 2 wide, 4 high
    np.testing.assert_array_equal(out[:2], 255)  # the left half turned to the top
    np.testing.assert_array_equal(out[2:], 0)


@pytest.mark.parametrize("size", [(3, 2), (1, 1), (40, 5)])
def test_images_smaller_than_the_crop_are_upscaled(tmp_path, size):
    path = save(tmp_path, Image.new("RGB", size, (9, 8, 7)), "small.png")
    out = load_image(path, 3, size=16, crop_pct=0.875)
    assert out.shape == (3, 16, 16)
    np.testing.assert_array_equal(out[:, 8, 8], (9, 8, 7))


def test_a_non_square_input_is_cut_from_the_image_resized_to_cover_it(tmp_path):
    """For a model input of (H, W) = (12, 16), eval and predict read a 12x12 centre square, scaled it up to 16x16 and
    cut rows: the image's sides were lost and the pixels matched no reading of the exported preprocessing."""
    import torch

    import vitkit
    from vitkit.data.augment import resize_center_crop
    from vitkit.data.images import scaled_size

    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (30, 60, 3), dtype=np.uint8)).save(tmp_path / "wide.png")
    Image.fromarray(rng.integers(0, 256, (50, 21, 3), dtype=np.uint8)).save(tmp_path / "tall.png")
    for name, crop_pct in (("wide.png", 1.0), ("tall.png", 0.875)):
        image = Image.open(tmp_path / name).convert("RGB")
        w, h = image.size
        box_h, box_w = int(12 / crop_pct), int(16 / crop_pct)  # the box the image must cover, aspect ratio kept
        scale = max(box_h / h, box_w / w)
        new = scaled_size(w, h, (12, 16), crop_pct)
        assert (
            min(new[0] - box_w, new[1] - box_h) == 0
            and abs(new[0] / new[1] - w / h) < 0.1
            and max(abs(new[0] - w * scale), abs(new[1] - h * scale)) < 1
        )
        resized = image.resize(new, Image.BILINEAR, reducing_gap=None)
        left, top = (new[0] - 16) // 2, (new[1] - 12) // 2
        expected = np.asarray(resized.crop((left, top, left + 16, top + 12))).transpose(2, 0, 1)
        assert np.array_equal(load_image(tmp_path / name, 3, (12, 16), crop_pct), expected)
        model = vitkit.create_model("vit_test", image_size=(12, 16), num_classes=2)
        classifier = vitkit.Classifier(model, ["a", "b"], crop_pct=crop_pct)
        assert np.array_equal(classifier.pixels(tmp_path / name).numpy(), expected)
        full = torch.from_numpy(np.asarray(image).transpose(2, 0, 1).copy())[None].float()
        assert resize_center_crop(full, (12, 16), crop_pct).shape[-2:] == (
            12,
            16,
        )  # the tensor path cuts the same window
    for w, h, side, crop_pct in (
        (60, 30, 16, 1.0),
        (21, 50, 16, 0.875),
        (16, 16, 16, 0.9),
        (100, 7, 8, 0.875),
    ):  # square: unchanged
        assert scaled_size(w, h, side, crop_pct) == scaled_size(w, h, (side, side), crop_pct)
        assert min(scaled_size(w, h, side, crop_pct)) == max(side, int(side / crop_pct))


def test_image_links_that_point_nowhere_are_listed_and_say_so(tmp_path):
    """A symbolic link named as an image whose target is gone (or that loops) was left out without a word: the figures
    counted fewer images than the folder holds; a loop was called "truncated or corrupt"."""
    from vitkit.data.images import image_files

    Image.new("RGB", (8, 8)).save(tmp_path / "real.png")
    (tmp_path / "gone.png").symlink_to(tmp_path / "moved-away.png")
    (tmp_path / "loop.png").symlink_to(tmp_path / "loop.png")
    assert [p.name for p in image_files(tmp_path)] == ["gone.png", "loop.png", "real.png"]
    with pytest.raises(DataError, match=r"gone.png: image file not found \(a symbolic link to a file that is gone\)"):
        load_image(tmp_path / "gone.png", 3)
    with pytest.raises(DataError, match=r"loop.png: a symbolic link that loops"):
        load_image(tmp_path / "loop.png", 3)
