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
