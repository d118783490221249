"""The pixel baseline: multinomial logistic (softmax) regression on each image's pixels, downscaled to 16x16 (area
averaging) and standardised per pixel, fitted in seconds on a training split and scored on another. A model that
scores no better learned less from the images than a linear model finds in their pixels.

`vitkit train --data FOLDER` (the recipe fitted to the data) fits one on its training split before the first step and
sets it beside its val figure; `vitkit eval` of such a run fits it again on the checkpoint's training split and scores
the images it evaluates. Deterministic: a seeded draw of at most MAX_TRAIN training images, zero initial weights and
full-batch L-BFGS for at most MAX_ITER iterations, on the CPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

SIDE = 16  # pixels a side the images are averaged down to
MAX_TRAIN = 10_000  # training images it is fitted on at most (a seeded draw of a larger split)
MAX_ITER = 100  # L-BFGS iterations: its time is bounded by the images it reads
KIND = f"softmax regression on {SIDE}x{SIDE} pixels"
# what the warning suggests: a hybrid's conv stem where the model has none (`stem_advice`), more augmentation, a longer
# run
MORE = "more augmentation (augment.randaugment_ops=2, augment.mixup=0.2) or a longer run (train.epochs=N)"


@dataclass(frozen=True)
class SoftmaxRegression:
    """Standardised pixels -> class logits: (x - mean) / std @ weight + bias."""

    mean: torch.Tensor  # (D,) of the training pixels
    std: torch.Tensor  # (D,), 1 where a pixel never varies
    weight: torch.Tensor  # (D, K)
    bias: torch.Tensor  # (K,)

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """(N,) the class of each row of (N, D) pixels."""
        return (((x - self.mean) / self.std) @ self.weight + self.bias).argmax(1)


def skipped_because(objective: str) -> str | None:
    """Why a run of `objective` gets no baseline (None: it gets one)."""
    if objective == "multi_label":
        return (
            "multi-label: a softmax regression predicts one class per image, and this run is scored by mAP and F1 "
            "over several; not fitted"
        )
    if objective == "masked_patch":
        return "masked patch prediction: its val top-1 is of the patches' colours, not of the classes; not fitted"
    return None


def pixels(batches: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """((N, C*SIDE*SIDE) float32 pixels in 0..255, (N,) labels) on the CPU, of (uint8 images, labels) batches of any
    size."""
    xs, ys = [], []
    for images, labels in batches:
        xs.append(F.adaptive_avg_pool2d(images.float(), SIDE).flatten(1).cpu())  # (B, C*SIDE*SIDE)
        ys.append(labels.cpu())
    if not xs:
        return torch.empty(0, 0), torch.empty(0, dtype=torch.long)
    return torch.cat(xs), torch.cat(ys)


def fit(x: torch.Tensor, y: torch.Tensor, classes: int) -> SoftmaxRegression:
    """Softmax regression of labels `y` on pixels `x`, per-pixel standardised, with scikit-learn's default L2 strength
    (C=1: the summed cross-entropy plus |W|^2 / 2), by full-batch L-BFGS from zero weights: deterministic."""
    mean = x.mean(0)
    std = x.std(0, unbiased=False)
    std = torch.where(std > 1e-6, std, torch.ones_like(std))
    z = (x - mean) / std
    weight = torch.zeros(z.shape[1], classes, requires_grad=True)
    bias = torch.zeros(classes, requires_grad=True)
    l2 = 1.0 / len(z)  # on the mean cross-entropy: C=1 on the summed one
    optimizer = torch.optim.LBFGS(
        [weight, bias], lr=1.0, max_iter=MAX_ITER, history_size=10, line_search_fn="strong_wolfe"
    )

    def loss() -> torch.Tensor:
        optimizer.zero_grad()
        value = F.cross_entropy(z @ weight + bias, y) + 0.5 * l2 * weight.square().sum()
        value.backward()
        return value

    with torch.enable_grad():
        optimizer.step(loss)
    return SoftmaxRegression(mean, std, weight.detach(), bias.detach())


def drawn(split, seed: int, most: int | None = None):
    """`split`, or where it holds more than `most` images (MAX_TRAIN) a seeded draw of `most` of them, kept in its
    order."""
    most = MAX_TRAIN if most is None else most
    if len(split) <= most:
        return split
    return split.subset(np.sort(np.random.default_rng([seed, 2]).permutation(len(split))[:most]))


def fit_and_score(train, scored, read: Callable, classes: int, *, names: tuple[str, str], seed: int) -> dict:
    """The baseline fitted on (at most MAX_TRAIN images of) the split `train` and scored on every image of `scored`,
    each read as (uint8 images, labels) batches by `read(split)`; `names`: the two splits' names. The record a run's
    summary.json, its checkpoints and `vitkit eval --json` keep: what it is, its top-1, which images and how many
    (unreadable ones skipped), and the seconds it took."""
    started, part = time.perf_counter(), drawn(train, seed)
    # a DataLoader draws its seed from torch's generator: the run's own draws stay as they were
    with torch.random.fork_rng(devices=[]):
        x, y = pixels(read(part))
        sx, sy = pixels(read(scored)) if len(y) else (None, [])
    if not len(sy):
        return {"skipped": f"not fitted: no readable images in {names[0] if not len(y) else names[1]}"}
    top1 = int((fit(x, y, classes).predict(sx) == sy).sum()) / len(sy)  # exact, as the model's top-1 is
    return {
        "kind": KIND,
        "top1": top1,
        "train_split": names[0],
        "train_data": _where(train),
        "train_images": len(y),  # read: the draw less unreadable files
        "train_drawn": len(part),
        "train_split_images": len(train),
        "scored_split": names[1],
        "scored_data": _where(scored),
        "scored_images": len(sy),
        "seed": seed,
        "seconds": round(time.perf_counter() - started, 2),
    }


def _where(split) -> str:
    """ "SOURCE, SELECTION": where a split's images are from, as eval's lines say it."""
    return f"{split.source or 'the data'}, {split.selection}"


def fitted_line(record: dict, label: str = "pixel baseline: ") -> str:
    """The baseline in words after `label`: what it is, the images it was fitted on, its top-1 and on which images."""
    if "skipped" in record:
        return f"{label}{record['skipped']}"
    n, part, of = record["train_images"], record["train_drawn"], record["train_split_images"]
    which = (f", a seeded draw of {part:,} of {of:,}" if part < of else "") + (
        f", {part - n:,} unreadable skipped" if n < part else ""
    )
    return (
        f"{label}{record['kind']}: {record['scored_split']} top-1 {record['top1']:.4f} on {record['scored_images']:,} "
        f"image{'s' * (record['scored_images'] != 1)} ({record['scored_data']}), fitted on {n:,} {record['train_split']} images ({record['train_data']}"
        f"{which}) in {record['seconds']:.1f} s"
    )


def has_cnn(config) -> bool:
    """Whether a model of `config` has convolutions before its Transformer (a hybrid), or is a CNN (BiT ResNet)."""
    return getattr(config, "backbone", True) is not None  # a BiTConfig has no backbone: it is all CNN


def stem_advice(config) -> str:
    """The warning's suggestion of a conv stem for a model of `config`: the hybrid with 3 stride-2 convolutions where
    they divide its image size, else 2 (28 px: a 7x7 grid); none for a model with a CNN already, or a size neither
    divides."""
    if has_cnn(config):
        return ""
    for convs in ([32, 64, 128], [32, 64]):
        if all(side % 2 ** len(convs) == 0 for side in config.image_size):
            return f'the conv-stem hybrid (model.patch_size=1 "model.backbone={{convs: {convs}}}"), '
    return ""


def compared(record: dict, model_top1: float | None, *, advice: str = "") -> dict:
    """`record` with the model's top-1 on the same images, whether it beats the baseline, and the warning where it
    does not (below it, or level with it short of 1.0; None otherwise). `advice`: the conv stem the warning suggests
    first (`stem_advice` of the model's config; "" for none)."""
    if "skipped" in record or record.get("top1") is None or model_top1 is None:
        return record
    base, split, n = record["top1"], record["scored_split"], record["scored_images"]
    # compared as counts of images right: a float32 mean of one and an exact fraction of the other differ in their
    # last bits where both got the same images right
    right, base_right = round(model_top1 * n), round(base * n)
    warning = (
        f"the model's {split} top-1 {model_top1:.4f} does not beat the pixel baseline's {base:.4f} on the same {n:,} "
        f"images: it learned less from them than a linear model finds in their {SIDE}x{SIDE} pixels; try "
        + advice
        + MORE
        if right < base_right or right == base_right < n
        else None
    )
    return {**record, "model_top1": model_top1, "beaten": right > base_right, "warning": warning}


def compared_lines(record: dict) -> list[str]:
    """The model's top-1 beside the baseline's on the same images, then the warning where it does not beat it."""
    if "model_top1" not in record:
        return [fitted_line(record)]
    split, n = record["scored_split"], record["scored_images"]
    line = (
        f"{split} top-1 {record['model_top1']:.4f} on {n:,} image{'s' * (n != 1)} ({record['scored_data']}); pixel baseline "
        f"{record['top1']:.4f} on the same images ({record['kind']}, fitted on {record['train_images']:,} "
        f"{record['train_split']} images)"
    )
    return [line] + ([f"warning    {record['warning']}"] if record["warning"] else [])


class PixelSkills(NamedTuple):
    """What the pixel baseline knows of the images changed two ways (`pixel_skills`): its skill above chance on them
    mirrored left to right (`mirror`) and shifted by one pixel of SIDE (`shift`), each as a share of its skill above
    chance on them as they are."""

    mirror: float
    shift: float


def _shifted(x: torch.Tensor, dy: int, dx: int) -> torch.Tensor:
    """(N, C, H, W) images moved dy pixels down and dx right, their edge pixels continued into the gap."""
    padded = F.pad(x, (max(dx, 0), max(-dx, 0), max(dy, 0), max(-dy, 0)), mode="replicate")
    h, w = x.shape[-2:]
    return padded[..., max(-dy, 0) : max(-dy, 0) + h, max(-dx, 0) : max(-dx, 0) + w]


def pixel_skills(images: np.ndarray, labels: np.ndarray, classes: int, seed: int = 0) -> PixelSkills | None:
    """How well the pixel baseline knows the (N, C, H, W) `images` changed: fitted on half of them, its top-1 on the
    other half mirrored left to right, and shifted by one pixel (the mean of up, down, left and right), each above
    chance as a share of its top-1 on them as they are, above chance (the halves swapped and the two averaged).
    - mirror: near 1 where the classes do not hinge on left and right (clothes, icons, photos), low or negative
      where a mirror image is another class or none (digits, text, scenes told apart by where things stand).
    - shift: how much of what tells the classes apart survives a one-pixel move: high for shapes (clothes, digits,
      scenes), low where single pixels in place tell them apart (icons drawn on a pixel grid).
    None where there are too few images to tell (under 10 a class) or the baseline knows the images no better than
    chance."""
    if classes < 2 or len(labels) < 10 * classes:
        return None
    order = np.random.default_rng([seed, 3]).permutation(len(labels))
    halves = (order[::2], order[1::2])
    x = torch.from_numpy(np.ascontiguousarray(images)).float()
    y = torch.from_numpy(labels).long()
    moves = ((1, 0), (-1, 0), (0, 1), (0, -1))
    plain = mirrored = shifted = 0.0
    for fit_on, scored in (halves, halves[::-1]):
        model = fit(x[fit_on].flatten(1), y[fit_on], classes)

        def top1(images: torch.Tensor) -> float:
            return float((model.predict(images.flatten(1)) == y[scored]).float().mean()) / 2

        plain += top1(x[scored])
        mirrored += top1(x[scored].flip(-1))
        shifted += sum(top1(_shifted(x[scored], dy, dx)) for dy, dx in moves) / len(moves)
    chance = 1 / classes
    if plain - chance < 0.05:
        return None
    return PixelSkills((mirrored - chance) / (plain - chance), (shifted - chance) / (plain - chance))
