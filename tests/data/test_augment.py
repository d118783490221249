import pytest
import torch

from vitkit.data.augment import (
    AugmentConfig,
    eval_transform,
    hflip,
    mix,
    padded_random_crop,
    randaugment,
    random_erase,
    random_resized_crop,
    soft_targets,
    train_transform,
)


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_full_crop_is_identity():
    x = torch.rand(3, 1, 8, 8)
    out = random_resized_crop(x, (8, 8), (1.0, 1.0), (1.0, 1.0), gen())
    torch.testing.assert_close(out, x, atol=1e-5, rtol=0)


def test_an_upsampled_crop_takes_the_edge_pixel_never_a_black_fill():
    """The Inception crop's box lies inside the image, but an upsampled box's outermost samples reach past the pixel
    centres at its edge: they blended with zeros, a dark rim a resize of the cropped box never has."""
    x = torch.full((2, 3, 4, 4), 0.8)
    out = random_resized_crop(x, (16, 16), (1.0, 1.0), (1.0, 1.0), gen())
    torch.testing.assert_close(out, torch.full((2, 3, 16, 16), 0.8))


def test_rrc_output_size_and_determinism():
    x = torch.rand(4, 3, 20, 16)
    a = random_resized_crop(x, (8, 8), (0.08, 1.0), (0.75, 1.33), gen(1))
    b = random_resized_crop(x, (8, 8), (0.08, 1.0), (0.75, 1.33), gen(1))
    assert a.shape == (4, 3, 8, 8) and torch.equal(a, b)


def test_padded_crop_is_a_shift_of_the_image():
    x = torch.arange(36.0).reshape(1, 1, 6, 6).repeat(5, 1, 1, 1)
    out = padded_random_crop(x, 2, gen(3))
    for img in out[:, 0]:
        nz = img[img > 0]
        # every kept pixel is an original pixel, and the window keeps the raster order
        assert set(nz.tolist()) <= set(range(36))
        assert torch.all(nz.diff() > 0)


def test_hflip_probability_one_and_zero():
    x = torch.rand(2, 1, 3, 4)
    assert torch.equal(hflip(x, 1.0, gen()), x.flip(-1))
    assert torch.equal(hflip(x, 0.0, gen()), x)


def test_randaugment_keeps_range_and_shape():
    x = torch.rand(16, 3, 12, 12)
    out = randaugment(x, 2, 9, gen(4))
    assert out.shape == x.shape and out.min() >= 0 and out.max() <= 1
    assert not torch.equal(out, x)


def test_eval_transform_normalises_to_minus_one_one():
    x = torch.tensor([0, 255], dtype=torch.uint8).reshape(1, 1, 1, 2).expand(1, 1, 2, 2)
    out = eval_transform(x, (2, 2), 1.0, (0.5,), (0.5,))
    assert out.min() == -1 and out.max() == 1


def test_eval_transform_resizes_and_crops_centre():
    x = torch.zeros(1, 1, 8, 16, dtype=torch.uint8)
    x[..., 4:12] = 255
    out = eval_transform(x, (4, 4), 1.0, (0.0,), (1.0,))
    assert out.shape == (1, 1, 4, 4)
    # the white centre band fills the crop (antialiasing softens only its outer columns)
    torch.testing.assert_close(out[..., 1:3], torch.ones(1, 1, 4, 2))
    assert out.min() > 0.5


def test_random_erase_replaces_one_rectangle_per_chosen_image():
    x = torch.full((64, 2, 12, 16), 5.0)  # noise is N(0, 1): it never equals 5
    out = random_erase(x, 1.0, (0.1, 0.3), (0.5, 2.0), gen(3))
    erased = out != 5.0
    assert torch.equal(erased[:, 0], erased[:, 1])  # the same rectangle in every channel
    for mask in erased[:, 0]:
        rows, cols = mask.any(1).nonzero().flatten(), mask.any(0).nonzero().flatten()
        h, w = len(rows), len(cols)
        assert rows.diff().eq(1).all() and cols.diff().eq(1).all()  # contiguous
        assert int(mask.sum()) == h * w  # a full rectangle
        assert 0.1 * 192 - 16 <= h * w <= 0.3 * 192 + 16  # the area asked for, up to rounding of h and w
    assert torch.equal(random_erase(x, 0.0, (0.1, 0.3), (0.5, 2.0), gen(3)), x)
    some = random_erase(x, 0.5, (0.1, 0.3), (0.5, 2.0), gen(4))
    touched = (some != 5.0).flatten(1).any(1).float().mean()
    assert 0.3 < touched < 0.7
    assert torch.equal(some, random_erase(x, 0.5, (0.1, 0.3), (0.5, 2.0), gen(4)))  # a pure function of the seed


def test_soft_targets_sum_to_one():
    t = soft_targets(torch.tensor([0, 2]), 4, 0.1)
    torch.testing.assert_close(t.sum(-1), torch.ones(2))
    assert t[0, 0] == pytest.approx(0.925) and t[0, 1] == pytest.approx(0.025)


@pytest.mark.parametrize("kind", ["mixup", "cutmix"])
def test_mix_keeps_targets_consistent(kind):
    x = torch.rand(6, 1, 8, 8)
    targets = soft_targets(torch.arange(6) % 3, 3, 0.0)
    cfg = AugmentConfig(**{kind: 1.0})
    mixed, t = mix(x, targets, cfg, gen(2))
    torch.testing.assert_close(t.sum(-1), torch.ones(6))
    assert not torch.equal(mixed, x)
    lam = t[0, int(targets[0].argmax())] if targets[0].argmax() != targets[-1].argmax() else None
    if kind == "mixup" and lam is not None:
        torch.testing.assert_close(mixed[0], lam * x[0] + (1 - lam) * x[-1])


def test_train_transform_is_reproducible():
    images = torch.randint(0, 256, (4, 3, 10, 10), dtype=torch.uint8)
    cfg = AugmentConfig(crop="rrc", randaugment_ops=2)
    a = train_transform(images, (8, 8), cfg, (0.5,) * 3, (0.5,) * 3, gen(7))
    b = train_transform(images, (8, 8), cfg, (0.5,) * 3, (0.5,) * 3, gen(7))
    assert a.shape == (4, 3, 8, 8) and torch.equal(a, b)
    assert a.min() >= -1 and a.max() <= 1


# -- timm RandAugment strings and TrivialAugment ------------------------------------------------
# timm's op lists (data/auto_augment.py _RAND_TRANSFORMS, _RAND_INCREASING_TRANSFORMS) and torchvision's
# TrivialAugmentWide space, written out
TIMM_RAND = (
    "AutoContrast Equalize Invert Rotate Posterize Solarize SolarizeAdd Color Contrast Brightness Sharpness "
    "ShearX ShearY TranslateXRel TranslateYRel"
).split()
TIMM_RAND_INC = (
    "AutoContrast Equalize Invert Rotate PosterizeIncreasing SolarizeIncreasing SolarizeAdd ColorIncreasing "
    "ContrastIncreasing BrightnessIncreasing SharpnessIncreasing ShearX ShearY TranslateXRel TranslateYRel"
).split()
TRIVIAL_WIDE = (
    "Identity ShearX ShearY TranslateX TranslateY Rotate Brightness Color Contrast Sharpness Posterize Solarize "
    "AutoContrast Equalize"
).split()


def test_randaugment_strings_parse_as_timm_reads_them():
    from vitkit.data.augment import parse_policy
    from vitkit.errors import ConfigError

    deit = parse_policy("rand-m9-mstd0.5-inc1")
    assert (deit.magnitude, deit.num_ops, deit.mstd, deit.mmax, deit.prob) == (9, 2, 0.5, 10, 0.5)
    assert list(deit.ops) == TIMM_RAND_INC
    plain = parse_policy("rand-m7-n3-p1")
    assert (plain.magnitude, plain.num_ops, plain.prob, list(plain.ops)) == (7, 3, 1.0, TIMM_RAND)
    assert parse_policy("rand-mstd101").mstd == float("inf") and parse_policy("rand-mstd101").magnitude == 10
    assert parse_policy("rand-m15-mmax15").mmax == 15 and parse_policy("rand-inc0").ops == parse_policy("rand").ops
    trivial = parse_policy("ta_wide")
    assert trivial.trivial and list(trivial.ops) == TRIVIAL_WIDE and trivial.num_ops == 1
    for bad in ("rand-q3", "rand-m9x", "augmix-m3", "rand-p2", "rand-tweights"):
        with pytest.raises(ConfigError, match="augment.auto_augment"):
            parse_policy(bad)


def test_randaugment_magnitude_law_is_timms():
    """Each op's argument against timm's level functions, written out here (_LEVEL_DENOM = 10)."""
    from vitkit.data.augment import draw_magnitudes, op_argument, parse_policy

    m = torch.tensor([0.0, 2.5, 5.0, 9.0, 10.0], dtype=torch.float64)
    s = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0], dtype=torch.float64)
    law = {
        "Rotate": lambda m, s: m / 10 * 30 * s,
        "ShearX": lambda m, s: m / 10 * 0.3 * s,
        "TranslateYRel": lambda m, s: m / 10 * 0.45 * s,
        "Color": lambda m, s: m / 10 * 1.8 + 0.1,
        "SharpnessIncreasing": lambda m, s: max(0.1, 1.0 + s * m / 10 * 0.9),
        "Posterize": lambda m, s: int(m / 10 * 4),
        "PosterizeIncreasing": lambda m, s: 4 - int(m / 10 * 4),
        "Solarize": lambda m, s: int(m / 10 * 256),
        "SolarizeIncreasing": lambda m, s: 256 - int(m / 10 * 256),
        "SolarizeAdd": lambda m, s: int(m / 10 * 110),
    }
    for op, f in law.items():
        want = [f(float(a), float(b)) for a, b in zip(m, s)]
        assert op_argument(op, m, s).tolist() == pytest.approx(want), op
    # the magnitude: fixed and clipped at 10 (mmax lifts the clip), N(m, mstd) clipped, uniform in [0, m] past 100
    assert set(draw_magnitudes(parse_policy("rand-m15"), 50, gen()).tolist()) == {10.0}
    assert set(draw_magnitudes(parse_policy("rand-m15-mmax12"), 50, gen()).tolist()) == {12.0}
    noisy = draw_magnitudes(parse_policy("rand-m5-mstd0.5"), 20_000, gen(1))
    assert noisy.mean().item() == pytest.approx(5, abs=0.02) and noisy.std().item() == pytest.approx(0.5, abs=0.02)
    uniform = draw_magnitudes(parse_policy("rand-m8-mstd200"), 20_000, gen(2))
    assert 0 <= uniform.min() and uniform.max() <= 8 and uniform.mean().item() == pytest.approx(4, abs=0.08)


def test_trivial_augment_wide_bins():
    from vitkit.data.augment import trivial_argument

    bins, plus = torch.arange(31), torch.ones(31, dtype=torch.float64)
    assert trivial_argument("Rotate", bins, plus).tolist() == pytest.approx(torch.linspace(0, 135, 31).tolist())
    assert trivial_argument("TranslateX", bins, -plus).tolist() == pytest.approx((-torch.linspace(0, 32, 31)).tolist())
    assert trivial_argument("Brightness", bins, plus).tolist() == pytest.approx(
        (1 + torch.linspace(0, 0.99, 31)).tolist()
    )
    assert trivial_argument("Solarize", bins, plus).tolist() == pytest.approx(torch.linspace(255, 0, 31).tolist())
    assert trivial_argument("Posterize", bins, plus).tolist() == (8 - (bins / 5).round()).tolist()


def test_level_ops_match_pil_on_8_bit_images():
    """Equalize, posterize and solarize are exact on 8-bit images (PIL's ImageOps); the enhance ops within a level."""
    import numpy as np
    from PIL import Image, ImageEnhance, ImageOps

    from vitkit.data.augment import _apply_op, equalize

    rng = np.random.default_rng(0)
    for a in (
        rng.integers(0, 256, (9, 7, 3), dtype=np.uint8),
        (rng.random((9, 7, 3)) ** 3 * 200 + 20).astype(np.uint8),
    ):
        x = torch.from_numpy(a).permute(2, 0, 1)[None].float() / 255

        def ours(op, arg):
            out = _apply_op(op, x, torch.tensor([float(arg)], dtype=torch.float64), 0.5)
            return (out[0].permute(1, 2, 0) * 255).round().numpy().astype(int)

        pil = Image.fromarray(a)
        assert np.array_equal(
            (equalize(x)[0].permute(1, 2, 0) * 255).round().numpy(), np.asarray(ImageOps.equalize(pil))
        )
        for bits in (1, 3, 7):
            assert np.array_equal(ours("Posterize", bits), np.asarray(ImageOps.posterize(pil, bits)))
        for threshold in (0, 100, 256):
            assert np.array_equal(ours("Solarize", threshold), np.asarray(ImageOps.solarize(pil, threshold)))
        for kind in ("Color", "Contrast", "Brightness", "Sharpness"):
            want = np.asarray(getattr(ImageEnhance, kind)(pil).enhance(1.7)).astype(int)
            assert np.abs(ours(kind, 1.7) - want).max() <= 1, kind


@pytest.mark.parametrize("policy", ["rand-m9-mstd0.5-inc1", "ta_wide"])
def test_policies_are_drawn_from_the_seed(policy):
    """A policy's batch is a function of (pixels, seed): the same seed gives the same pixels, another seed others."""
    from vitkit.data.augment import augment_pixels

    images = torch.randint(0, 256, (16, 3, 12, 12), dtype=torch.uint8)
    cfg = AugmentConfig(crop="none", hflip=0.0, auto_augment=policy)
    a, b, c = (augment_pixels(images, (12, 12), cfg, gen(seed)) for seed in (3, 3, 4))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.min() >= 0 and a.max() <= 1 and not torch.equal(a, images.float() / 255)
