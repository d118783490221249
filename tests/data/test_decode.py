"""The Inception crop of image files: drawn on the whole decoded image, decoded no larger than needed, reproducible."""

import numpy as np
import pytest
import torch
from PIL import Image

from vitkit.data import Batches
from vitkit.data.decode import crop_draws, inception_box, inception_crop
from vitkit.data.sources import open_split

SCALE, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)
RED, BLUE, GRAY = (230, 20, 20), (20, 20, 230), (128, 128, 128)


def banded(width=300, height=100, band=30) -> Image.Image:
    """A wide gray photo whose left band is red and right band blue: a 256-px centre square would cut both off."""
    pixels = np.full((height, width, 3), GRAY, dtype=np.uint8)
    pixels[:, :band] = RED
    pixels[:, -band:] = BLUE
    return Image.fromarray(pixels)


def colours(crop: np.ndarray) -> set[str]:
    """Which of the band colours a (3, H, W) crop shows (pixels within 40 of the colour)."""
    found = set()
    for name, rgb in (("red", RED), ("blue", BLUE)):
        if (np.abs(crop.astype(int) - np.array(rgb)[:, None, None]).max(axis=0) < 40).any():
            found.add(name)
    return found


def test_the_box_stays_inside_the_image_and_reaches_its_edges():
    lefts, rights = [], []
    for slot in range(400):
        left, top, right, bottom = inception_box(300, 100, crop_draws(0, 0, slot), SCALE, RATIO)
        assert 0 <= left < right <= 300 and 0 <= top < bottom <= 100
        assert 3 / 4 - 1e-9 <= (right - left) / (bottom - top) <= 4 / 3 + 1e-9
        lefts.append(left)
        rights.append(right)
    assert min(lefts) < 5 and max(rights) > 295


@pytest.mark.parametrize("suffix", [".png", ".jpg"])
def test_crops_of_a_wide_photo_show_its_left_and_right_bands(tmp_path, suffix):
    path = tmp_path / f"wide{suffix}"
    banded().save(path, quality=95)
    seen = [colours(inception_crop(path, 3, (16, 16), crop_draws(1, 0, slot), SCALE, RATIO)) for slot in range(60)]
    assert any("red" in s for s in seen) and any("blue" in s for s in seen)
    assert any(not s for s in seen)  # and the gray middle alone in others


def test_a_jpeg_is_decoded_small_only_when_the_crop_allows_and_matches_the_full_decode(tmp_path, monkeypatch):
    from vitkit.data import images

    rng = np.random.default_rng(0)
    smooth = np.asarray(
        Image.fromarray(rng.integers(0, 255, (12, 16, 3), dtype=np.uint8)).resize((640, 480), Image.BICUBIC)
    )
    path = tmp_path / "photo.jpg"
    Image.fromarray(smooth).save(path, quality=95)
    sizes = []
    real_load = images.load_pixels

    def spy(*args, **kwargs):
        pixels = real_load(*args, **kwargs)
        sizes.append(pixels.shape[1::-1])  # (width, height) as decoded
        return pixels

    monkeypatch.setattr("vitkit.data.decode.load_pixels", spy)
    whole = np.array([[0.99, 0.5, 0.5, 0.5]] * 10)  # ~the whole image, aspect 1
    small = inception_crop(path, 3, (32, 32), whole, SCALE, RATIO)
    assert sizes[-1] == (80, 60)  # 1/8 of 640x480: the box still has >= 32 px each way
    big = inception_crop(path, 3, (300, 300), whole, SCALE, RATIO)
    assert sizes[-1] == (640, 480)  # a 300-px output needs the full decode
    full = np.asarray(Image.open(path).convert("RGB"))  # the same crop from the full decode, resized by Pillow
    w, h = 640, 480
    left, top, right, bottom = inception_box(w, h, whole, SCALE, RATIO)
    want = np.asarray(Image.fromarray(full).resize((32, 32), Image.BILINEAR, box=(left, top, right, bottom))).transpose(
        2, 0, 1
    )
    assert (
        np.abs(small.astype(int) - want.astype(int)).mean() < 4
    )  # DCT scaling + torch's resize: close to Pillow's from the full decode
    assert big.shape == (3, 300, 300)


@pytest.mark.parametrize("suffix", [".png", ".jpg"])
def test_a_crop_is_resized_and_returned_channels_last(tmp_path, suffix):
    """torch's vectorised uint8 resize runs on a (1, C, h, w) input with channels-last strides in every dimension (the
    batch's too); its output keeps that layout, which the batch's collate then copies as it lies."""
    path = tmp_path / f"wide{suffix}"
    banded().save(path, quality=95)
    crop = inception_crop(path, 3, (16, 20), crop_draws(1, 0, 3), SCALE, RATIO)
    assert crop.shape == (3, 16, 20) and crop.strides == (1, 20 * 3, 3)


def folder(root, n=12, size=(40, 24)):
    rng = np.random.default_rng(0)
    for c in ("a", "b"):
        (root / c).mkdir(parents=True)
        for i in range(n):
            Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(
                root / c / f"{i}.jpg", quality=90
            )


def test_cropped_batches_resume_exactly_with_several_workers(tmp_path):
    folder(tmp_path)
    split = open_split(tmp_path, "train", channels=3, val_fraction=0.25)
    make = lambda workers: Batches(
        split, 4, seed=3, device=torch.device("cpu"), channels=3, size=16, workers=workers, crop=(SCALE, RATIO)
    )
    straight = [x for _, (x, _) in zip(range(9), make(2).iterate(0, 0))]  # 4 batches an epoch: crosses two epochs
    assert all(x.shape == (4, 3, 16, 16) and x.dtype == torch.uint8 for x in straight)
    resumed = [x for _, (x, _) in zip(range(4), make(0).iterate(1, 1))]  # batch 5 on, read in the main process
    for a, b in zip(straight[5:], resumed):
        assert torch.equal(a, b)
    assert not torch.equal(straight[0], straight[4])  # the next epoch draws new crops
    ranks = [
        Batches(
            split,
            4,
            seed=3,
            device=torch.device("cpu"),
            channels=3,
            size=16,
            workers=1,
            rank=r,
            world=2,
            crop=(SCALE, RATIO),
        )
        for r in (0, 1)
    ]
    halves = [[x for _, (x, _) in zip(range(3), b.iterate(0, 0))] for b in ranks]
    for step in range(3):  # two ranks together see what one process sees
        assert torch.equal(torch.cat([halves[0][step], halves[1][step]]), straight[step])


def needs_decoder(name: str) -> None:
    """Skip where `name` cannot run here (simplejpeg not installed, vitkit's libjpeg helper not buildable)."""
    from vitkit.kernels import jpeg_region

    if name == "simplejpeg":
        pytest.importorskip("simplejpeg")
    if name == "libjpeg" and not jpeg_region.load():
        pytest.skip(f"vitkit's libjpeg helper cannot be built here: {jpeg_region.unavailable()}")


@pytest.mark.parametrize("orientation", range(1, 9))
def test_every_decoder_gives_pillows_pixels(tmp_path, monkeypatch, orientation):
    """The faster decoders are a pure speed choice: the same upright pixels, whole, DCT-scaled or cropped, as Pillow's."""
    from vitkit.data.images import jpeg_decoder, open_image

    for decoder in ("simplejpeg", "libjpeg"):
        needs_decoder(decoder)

    rng = np.random.default_rng(orientation)
    image = Image.fromarray(
        np.asarray(Image.fromarray(rng.integers(0, 255, (9, 13, 3), dtype=np.uint8)).resize((260, 180), Image.BICUBIC))
    )
    exif = Image.Exif()
    exif[0x0112] = orientation
    path = tmp_path / "p.jpg"
    image.save(path, quality=90, exif=exif)
    results = {}
    for decoder in ("pillow", "simplejpeg", "libjpeg"):
        monkeypatch.setenv("VITKIT_JPEG_DECODER", decoder)
        assert jpeg_decoder() == decoder
        whole = np.asarray(open_image(path, 3))
        crops = [inception_crop(path, 3, (24, 24), crop_draws(0, 0, slot), SCALE, RATIO) for slot in range(8)]
        gray = inception_crop(path, 1, (24, 24), crop_draws(0, 0, 0), SCALE, RATIO)
        results[decoder] = (whole, crops, gray)
    a, crops_a, gray_a = results["pillow"]
    assert a.shape == ((260, 180, 3) if orientation >= 5 else (180, 260, 3))  # upright
    for decoder in ("simplejpeg", "libjpeg"):
        b, crops_b, gray_b = results[decoder]
        np.testing.assert_array_equal(a, b)
        for x, y in zip(crops_a, crops_b):
            np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(gray_a, gray_b)


@pytest.mark.parametrize("orientation", [1, 3, 6, 7])
@pytest.mark.parametrize("kind", ["4:4:4", "4:2:2", "4:2:0 progressive", "gray"])
def test_libjpeg_decodes_any_box_as_the_whole_image_has_it(tmp_path, monkeypatch, kind, orientation):
    """Boxes anywhere (edges, one pixel, iMCU boundaries), at every DCT scale: exactly the whole decode's pixels there."""
    from vitkit.data.images import load_pixels

    needs_decoder("libjpeg")
    monkeypatch.setenv("VITKIT_JPEG_DECODER", "libjpeg")
    rng = np.random.default_rng(7)
    image = Image.fromarray(rng.integers(0, 255, (12, 17, 3), dtype=np.uint8)).resize((331, 203), Image.BICUBIC)
    image = Image.fromarray(np.clip(np.asarray(image) + rng.normal(0, 12, (203, 331, 3)), 0, 255).astype(np.uint8))
    exif = Image.Exif()
    exif[0x0112] = orientation
    path = tmp_path / "p.jpg"
    sampling = {"4:4:4": 0, "4:2:2": 1}.get(kind, 2)
    (image.convert("L") if kind == "gray" else image).save(
        path, quality=90, subsampling=sampling, progressive="progressive" in kind, exif=exif
    )
    channels = 1 if kind == "gray" else 3
    for need in (None, (160, 100), (80, 50), (40, 25)):  # whole, 1/2, 1/4, 1/8
        draft = None if need is None else (lambda w, h, need=need: need if w > h else need[::-1])
        whole = load_pixels(path, channels, draft=draft)
        h, w = whole.shape[:2]
        boxes = [
            b
            for b in [
                (0, 0, w, h),
                (0, 0, 1, 1),
                (w - 1, h - 1, w, h),
                (16, 8, 33, 9),
                (15, 0, 17, h),
                (1, 3, w - 1, h - 2),
            ]
            if b[2] <= w and b[3] <= h
        ]
        boxes += [
            tuple(int(v) for v in (x0, y0, x0 + rng.integers(1, w - x0 + 1), y0 + rng.integers(1, h - y0 + 1)))
            for x0, y0 in zip(rng.integers(0, w, 12), rng.integers(0, h, 12))
        ]
        for box in boxes:
            got = load_pixels(path, channels, draft=draft, crop=lambda width, height, box=box: box)
            left, top, right, bottom = box
            np.testing.assert_array_equal(got, whole[top:bottom, left:right], err_msg=f"{kind}, need {need}, box {box}")


def test_a_truncated_jpeg_fails_whatever_its_crop(tmp_path, monkeypatch):
    """Decoding only the top of a file must not let a file cut short below it through: every crop is one clear error."""
    from vitkit.data.images import load_pixels
    from vitkit.errors import DataError

    needs_decoder("libjpeg")
    monkeypatch.setenv("VITKIT_JPEG_DECODER", "libjpeg")
    rng = np.random.default_rng(0)
    path = tmp_path / "cut.jpg"
    Image.fromarray(rng.integers(0, 255, (240, 320, 3), dtype=np.uint8)).save(path, quality=90)
    path.write_bytes(path.read_bytes()[: path.stat().st_size * 2 // 3])
    with pytest.raises(DataError, match=r"cut\.jpg: .*truncated"):
        load_pixels(path, 3, crop=lambda w, h: (0, 0, 10, 10))  # the top corner: its rows are all in the file


def test_an_unknown_decoder_is_one_clear_error(tmp_path, monkeypatch):
    from vitkit.data.images import jpeg_decoder
    from vitkit.errors import DataError

    monkeypatch.setenv("VITKIT_JPEG_DECODER", "libjpeg9")
    with pytest.raises(DataError, match=r"VITKIT_JPEG_DECODER: expected one of libjpeg, simplejpeg, pillow"):
        jpeg_decoder()
