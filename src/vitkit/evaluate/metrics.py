"""Classification metrics (top-1, top-5, per-class accuracy, confusion matrix) and the evaluations of
frozen features (paper §4.1): few-shot linear regression, linear probe and k-NN.

    features, labels = split_features(model, split)               # pre-logits, batched, inference mode
    lsr_accuracy(train_x, train_y, test_x, test_y, l2_reg=2**10)  # the official few-shot evaluator
    fewshot_eval(model, train_split, test_split, shots=(1, 5, 10, 25), seeds=3)
    linear_probe_eval(model, train_split, val_split, test_split);  knn_eval(model, train_split, test_split)
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from vitkit.data import BadFiles, Split, eval_batches
from vitkit.data.augment import eval_transform
from vitkit.data.split import described
from vitkit.errors import DataError
from vitkit.files import atomic_path, write_json
from vitkit.limits import limits


def topk_correct(logits: torch.Tensor, labels: torch.Tensor, k: int) -> torch.Tensor:
    """(B,) bool: whether the label is among the k highest logits."""
    k = min(k, logits.shape[-1])
    return (logits.topk(k, dim=-1).indices == labels[:, None]).any(dim=-1)


def confusion_matrix(pred: torch.Tensor, labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """(K, K) int64 counts; row = true class, column = predicted class."""
    return torch.bincount(labels * num_classes + pred, minlength=num_classes * num_classes).reshape(
        num_classes, num_classes
    )


@torch.no_grad()
def evaluate(
    model: nn.Module,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    *,
    crop_pct: float = 1.0,
    autocast_dtype: torch.dtype | None = None,
    runner: Callable[[torch.Tensor], torch.Tensor] | None = None,
    reference: Callable[[torch.Tensor], torch.Tensor] | None = None,
    keep_size: bool = False,
) -> dict:
    """Run `model` over (uint8 images, labels) batches; top1/top5 in [0, 1], mean loss, per-class accuracy, confusion.
    keep_size: each batch at its own size (a `dynamic_img_size` model), not resized to the model's.
    runner: what computes the logits instead of `model` itself (a vitkit.inference.precision.Runner: bf16, int8, compiled).
    reference: a second one (fp32) to measure the runner's accuracy cost on the same images: adds its top-1
    ("reference_top1"), the difference ("top1_delta", runner minus reference) and the share of images on which
    both predict the same class ("agreement").
    """
    was_training = model.training
    model.eval()
    c = model.config
    K = c.num_classes
    cm = torch.zeros(K, K, dtype=torch.long)
    top5, loss_sum, ref_correct, agree = 0, 0.0, 0, 0
    for images, labels in batches:
        x = eval_transform(images, tuple(images.shape[-2:]) if keep_size else c.image_size, crop_pct, c.mean, c.std)
        with torch.autocast(x.device.type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
            logits = (runner or model)(x).float()
        loss_sum += float(nn.functional.cross_entropy(logits, labels, reduction="sum"))
        top5 += int(topk_correct(logits, labels, 5).sum())
        cm += confusion_matrix(logits.argmax(-1), labels, K).cpu()
        if reference is not None:
            ref_pred = reference(x).argmax(-1)
            ref_correct += int((ref_pred == labels).sum())
            agree += int((ref_pred == logits.argmax(-1)).sum())
    model.train(was_training)
    n = int(cm.sum())
    if n == 0:
        return {
            "n": 0,
            "top1": float("nan"),
            "top5": float("nan"),
            "loss": float("nan"),
            "per_class": [],
            "confusion": cm.tolist(),
        }
    # None: no image
    per_class = [None if count == 0 else hit / count for hit, count in zip(cm.diag().tolist(), cm.sum(1).tolist())]
    result = {
        "n": n,
        "top1": float(cm.diag().sum()) / n,
        "top5": top5 / n,
        "loss": loss_sum / n,
        "per_class": per_class,
        "confusion": cm.tolist(),
    }
    if reference is not None:
        result.update(reference_top1=ref_correct / n, top1_delta=result["top1"] - ref_correct / n, agreement=agree / n)
    return result


IMBALANCED = 2.0  # classes differing this much in size (largest / smallest scored) make top-1 lean to the large ones


def class_balance(confusion: list[list[int]], class_names: list[str]) -> dict | None:
    """Where the scored images' classes differ at least IMBALANCED-fold in size: the balanced top-1 (the mean of each
    class's top-1, ISIC's "balanced multiclass accuracy"), how many times the largest class outnumbers the smallest,
    and the share of the most common class (what always answering it scores); None otherwise."""
    counts = [sum(row) for row in confusion]
    scored = [(row[k] / n, n, k) for k, (row, n) in enumerate(zip(confusion, counts)) if n]
    if len(scored) < 2 or max(n for _, n, _ in scored) < IMBALANCED * min(n for _, n, _ in scored):
        return None
    largest = max(range(len(counts)), key=counts.__getitem__)
    return {
        "balanced_top1": sum(recall for recall, _, _ in scored) / len(scored),
        "classes": len(scored),
        "spread": max(n for _, n, _ in scored) / min(n for _, n, _ in scored),
        "majority_class": class_names[largest],
        "majority_share": counts[largest] / sum(counts),
    }


def balance_lines(balance: dict | None, top1: float) -> list[str]:
    """`class_balance` in words, for a line under the `top1` it qualifies, and a warning where `top1` is no better
    than always answering the most common class; [] where the classes are alike in size (`balance` None)."""
    if balance is None:
        return []
    common, share = balance["majority_class"], balance["majority_share"]
    line = (
        f"balanced top-1 {balance['balanced_top1']:.4f} (the mean of the {balance['classes']} classes' top-1: they "
        f"differ up to {balance['spread']:.0f}x in size); always answering {common!r}, the most common, scores {share:.4f}"
    )
    if top1 > share:
        return [line]
    return [
        line,
        f"warning    top-1 {top1:.4f} is no better than always answering {common!r} ({share:.4f}): the model has "
        "learned little of the other classes; see the balanced top-1, and train longer or on more of them",
    ]


# -- multi-label: a set of classes per image, scored by ranking and by a threshold ---------------
THRESHOLD = 0.5  # a label is predicted where its sigmoid probability is at least this
# what --threshold may be, for every command that takes one (a request's field metadata)
THRESHOLD_LIMIT = limits("(0, 1]", says="a probability in (0, 1]", flag="--threshold")


def average_precision(scores: torch.Tensor, truth: torch.Tensor) -> float | None:
    """AP of one class: the precision at each distinct score, weighted by the recall it adds (tied scores are one
    step, as scikit-learn's average_precision_score counts them); None where no image has the class."""
    positives = int(truth.sum())
    if positives == 0:
        return None
    order = scores.double().argsort(descending=True)
    scores, hits = scores.double()[order], truth[order].double().cumsum(0)
    last = torch.cat([scores[1:] != scores[:-1], torch.tensor([True])])  # the last image of each run of equal scores
    hits, seen = hits[last], (torch.arange(len(scores), dtype=torch.float64) + 1)[last]
    recall_step = torch.diff(hits, prepend=torch.zeros(1, dtype=torch.float64)) / positives
    return float((recall_step * hits / seen).sum())


def multilabel_scores(probs: torch.Tensor, truth: torch.Tensor, threshold: float = THRESHOLD) -> dict:
    """mAP (over the classes some image has), per-class AP, and precision, recall and F1 at `threshold` summed over
    every (image, class) pair (micro); `probs` and `truth` (N, K)."""
    truth = truth.bool()
    per_class = [average_precision(probs[:, k], truth[:, k]) for k in range(truth.shape[1])]
    present = [ap for ap in per_class if ap is not None]
    predicted = probs >= threshold
    tp, fp, fn = (int((a & b).sum()) for a, b in ((predicted, truth), (predicted, ~truth), (~predicted, truth)))
    precision, recall = tp / max(tp + fp, 1), tp / max(tp + fn, 1)
    return {
        "map": sum(present) / len(present) if present else float("nan"),
        "per_class_ap": per_class,
        "per_class_n": truth.sum(0).tolist(),
        "threshold": threshold,
        "precision": precision,
        "recall": recall,
        "f1": 2 * tp / max(2 * tp + fp + fn, 1),
    }


@torch.no_grad()
def evaluate_multilabel(
    model: nn.Module,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    *,
    crop_pct: float = 1.0,
    autocast_dtype: torch.dtype | None = None,
    runner: Callable[[torch.Tensor], torch.Tensor] | None = None,
    threshold: float = THRESHOLD,
    keep_size: bool = False,
) -> dict:
    """Run `model` over (uint8 images, multi-hot labels) batches, each class a sigmoid: `multilabel_scores`, the mean
    binary cross-entropy, and top1/top5: the share of images whose 1 (any of 5) highest-scored classes hold one of
    theirs (an image without labels counts as a miss), as single-label top-k reads. keep_size as in `evaluate`."""
    was_training = model.training
    model.eval()
    c = model.config
    probs, truth, loss_sum = [], [], 0.0
    for images, labels in batches:
        x = eval_transform(images, tuple(images.shape[-2:]) if keep_size else c.image_size, crop_pct, c.mean, c.std)
        with torch.autocast(x.device.type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
            logits = (runner or model)(x).float()
        hot = labels if labels.ndim == 2 else nn.functional.one_hot(labels, logits.shape[-1])
        loss_sum += float(nn.functional.binary_cross_entropy_with_logits(logits, hot.float(), reduction="sum"))
        probs.append(logits.sigmoid().cpu())
        truth.append(hot.bool().cpu())
    model.train(was_training)
    if not probs:
        nan = float("nan")
        return {"n": 0, "top1": nan, "top5": nan, "loss": nan, "map": nan, "f1": nan, "precision": nan, "recall": nan}
    probs, truth = torch.cat(probs), torch.cat(truth)
    n, K = truth.shape
    hit = {k: truth.gather(1, probs.topk(min(k, K), dim=-1).indices).any(-1) for k in (1, 5)}
    return {
        "n": n,
        "top1": float(hit[1].float().mean()),
        "top5": float(hit[5].float().mean()),
        "loss": loss_sum / (n * K),  # per label, as the training loss
        **multilabel_scores(probs, truth, threshold),
    }


# -- frozen features: few-shot linear, linear probe, k-NN (paper §4.1) ----------------------------
# the constant bias feature of the official few-shot evaluator: large, so the bias is barely regularised
BIAS_FEATURE = 100.0


def extract_features(
    model: nn.Module,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    *,
    crop_pct: float = 1.0,
    autocast_dtype: torch.dtype | None = None,
    runner: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pre-logits features (N, D) float32 and labels (N,) of every (uint8 images, labels) batch, on the CPU.

    runner: what computes the features instead of `model(x, pre_logits=True)` (a vitkit.inference.precision.Runner
    built with pre_logits=True: bf16, int8, compiled)."""
    was_training = model.training
    model.eval()
    c = model.config
    features, labels = [], []
    with torch.inference_mode():
        for images, y in batches:
            x = eval_transform(images, c.image_size, crop_pct, c.mean, c.std)
            with torch.autocast(
                x.device.type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None
            ):
                f = runner(x) if runner is not None else model(x, pre_logits=True)  # (B, D): pooled, after pre_logits
            features.append(f.float().cpu())
            labels.append(y.cpu())
    model.train(was_training)
    if not features:
        return torch.empty(0, 0), torch.empty(0, dtype=torch.long)
    # outside inference mode: ordinary tensors (a probe can train on them)
    return torch.cat(features), torch.cat(labels)


def lsr_weights(
    x: torch.Tensor, y: torch.Tensor, num_classes: int, *, l2_reg: float = 2**10
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mean, std, W) of the few-shot regularised least squares, in float64.

    x (N, D) is standardised with its own mean and population std + 1e-5, a constant feature of 100
    is appended, the targets are 2 * onehot - 1, and W (D + 1, K) is the ridge solution
    (X^T X + l2 I)^-1 X^T Y when N >= D + 1 (primal), X^T (X X^T + l2 I)^-1 Y otherwise (dual).
    """
    x = x.double()
    mean = x.mean(0, keepdim=True)
    std = x.std(0, unbiased=False, keepdim=True) + 1e-5
    X = _with_bias((x - mean) / std)  # (N, D + 1)
    Y = 2.0 * nn.functional.one_hot(y.long(), num_classes).double() - 1.0  # (N, K) in {-1, 1}
    N, D = X.shape
    if N >= D:
        W = torch.linalg.solve(X.T @ X + l2_reg * torch.eye(D, dtype=X.dtype), X.T @ Y)
    else:
        W = X.T @ torch.linalg.solve(X @ X.T + l2_reg * torch.eye(N, dtype=X.dtype), Y)
    return mean, std, W


def _with_bias(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([x, torch.full_like(x[:, :1], BIAS_FEATURE)], dim=1)


def lsr_accuracy(
    train_x: torch.Tensor,
    train_y: torch.Tensor,
    test_x: torch.Tensor,
    test_y: torch.Tensor,
    *,
    l2_reg: float = 2**10,
    num_classes: int | None = None,
) -> float:
    """Few-shot linear accuracy (paper §4.1, the official evaluator): ridge regression to {-1, 1}^K, then argmax.

    Features (N, D) and integer labels in, the share of `test_x` classified correctly out.
    """
    K = num_classes or int(max(train_y.max(), test_y.max())) + 1
    mean, std, W = lsr_weights(train_x, train_y, K, l2_reg=l2_reg)
    pred = (_with_bias((test_x.double() - mean) / std) @ W).argmax(1)
    return float((pred == test_y.to(pred.device)).double().mean())


def fewshot_indices(labels: torch.Tensor, shots: int, seed: int) -> torch.Tensor:
    """`shots` images per class (sorted indices into `labels`), drawn with `seed`.

    The draw for a seed is one permutation per class, cut at `shots`: a seed's 5-shot set contains its 1-shot set.
    """
    labels = torch.as_tensor(labels)
    g = torch.Generator().manual_seed(seed)
    picked = []
    for k in range(int(labels.max()) + 1):
        members = (labels == k).nonzero().flatten()
        if len(members) < shots:
            raise ValueError(f"class {k} has {len(members)} training images, fewer than {shots} shots")
        picked.append(members[torch.randperm(len(members), generator=g)[:shots]])
    return torch.cat(picked).sort().values


def linear_probe(
    train_x: torch.Tensor,
    train_y: torch.Tensor,
    *,
    l2: float = 1e-4,
    max_iter: int = 500,
    num_classes: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Multinomial logistic regression on frozen features: (mean, std, W) with W (D + 1, K), bias in the last row.

    Features are standardised with the training mean and std; the loss is the mean cross-entropy
    plus l2/2 ||W||^2 (bias excluded), minimised with full-batch L-BFGS from zero (a convex problem).
    """
    K = num_classes or int(train_y.max()) + 1
    x = train_x.float()
    mean, std = x.mean(0, keepdim=True), x.std(0, unbiased=False, keepdim=True) + 1e-5
    X = torch.cat([(x - mean) / std, torch.ones_like(x[:, :1])], dim=1)
    W = torch.zeros(X.shape[1], K, requires_grad=True)
    optimizer = torch.optim.LBFGS(
        [W],
        lr=1.0,
        max_iter=max_iter,
        tolerance_grad=1e-7,
        tolerance_change=1e-10,
        history_size=20,
        line_search_fn="strong_wolfe",
    )

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(X @ W, train_y) + 0.5 * l2 * W[:-1].square().sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        optimizer.step(closure)
    return mean, std, W.detach()


def linear_probe_predict(probe: tuple[torch.Tensor, torch.Tensor, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    mean, std, W = probe
    z = (x.float() - mean) / std
    return (z @ W[:-1] + W[-1]).argmax(1)


@torch.no_grad()
def knn_predict(
    train_x: torch.Tensor,
    train_y: torch.Tensor,
    test_x: torch.Tensor,
    *,
    k: int = 20,
    temperature: float | None = 0.07,
    chunk: int = 1024,
) -> torch.Tensor:
    """Cosine k-NN: each test feature takes the class with the largest vote among its k most similar training features.

    Votes are exp(similarity / temperature) (Wu et al. 2018, as in DINO); temperature None gives one
    vote per neighbour (ties go to the lower class index).
    """
    K = int(train_y.max()) + 1
    k = min(k, len(train_x))
    bank = nn.functional.normalize(train_x.float(), dim=1)
    preds = []
    for start in range(0, len(test_x), chunk):
        q = nn.functional.normalize(test_x[start : start + chunk].float(), dim=1)
        sim, index = (q @ bank.T).topk(k, dim=1)  # (b, k)
        votes = torch.ones_like(sim) if temperature is None else (sim / temperature).exp()
        scores = torch.zeros(len(q), K).scatter_add_(1, train_y[index], votes)
        preds.append(scores.argmax(1))
    return torch.cat(preds) if preds else torch.empty(0, dtype=torch.long)


# -- whole evaluations on dataset splits -------------------------------------------------------
def split_features(
    model: nn.Module,
    split: Split,
    *,
    batch_size: int = 256,
    device: torch.device | str = "cpu",
    crop_pct: float = 1.0,
    autocast_dtype: torch.dtype | None = None,
    runner: Callable[[torch.Tensor], torch.Tensor] | None = None,
    bad: BadFiles | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pre-logits features and labels of every image of `split` (read at the model's size, centre-cropped); of every
    readable one where `bad` skips unreadable files (`readable` says which they are)."""
    c = model.config
    model.to(device)
    batches = eval_batches(
        split,
        batch_size,
        torch.device(device),
        channels=c.in_chans,
        size=c.image_size,
        crop_pct=crop_pct,
        bad=bad,
        background=c.background,
    )
    return extract_features(model, batches, crop_pct=crop_pct, autocast_dtype=autocast_dtype, runner=runner)


def readable(split: Split, bad: BadFiles | None) -> torch.Tensor:
    """(N,) bool: which images of `split` gave features, where `bad` skipped the files it lists."""
    if bad is None or not len(bad) or split.paths is None:
        return torch.ones(len(split), dtype=torch.bool)
    return torch.tensor([str(p) not in bad.files for p in split.paths], dtype=torch.bool)


def with_feature_runner(model: nn.Module, splits: list[Split], features: dict[str, Any]) -> dict[str, Any]:
    """split_features options for extracting the features of all `splits` at features["precision"] (default fp32):
    one runner for them all, compiled when their batch count pays for it, int8 calibrated on features["calibration"]
    (default 256) images of the first split."""
    from vitkit.inference import precision
    from vitkit.inference.predict import calibration_images

    features = dict(features)
    chosen = features.pop("precision", "fp32")
    count = features.pop("calibration", precision.CALIBRATION_IMAGES)
    batch_size, device = features.get("batch_size", 256), features.get("device", "cpu")
    crop_pct = features.get("crop_pct", 1.0)
    batches = sum(math.ceil(len(s) / batch_size) for s in splits)
    calibration = None
    if chosen == "int8":
        calibration = calibration_images(splits[0], model, n=count, crop_pct=crop_pct, batch_size=batch_size)
    features["runner"] = precision.prepare(
        model, chosen, device=device, pre_logits=True, batches=batches, calibration=calibration
    )
    return features


def _mean_std(values: list[float]) -> dict[str, Any]:
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    return {"mean": mean, "std": std, "per_seed": values}


def fewshot_eval(
    model: nn.Module,
    train_split: Split,
    test_split: Split,
    *,
    shots: Iterable[int] = (1, 5, 10, 25),
    seeds: int = 3,
    l2_reg: float = 2**10,
    **features: Any,
) -> dict:
    """Few-shot linear accuracy on `test_split`: for each shot count and seed 0..seeds-1, `shots` training
    images per class, `lsr_accuracy`; mean and sample std over seeds. Features are extracted once, only for
    the training images some draw uses. `features`: split_features options (batch_size, device, ...)."""
    shots = list(shots)
    labels = train_split.labels.clone()  # an unreadable image's label becomes -1: no draw takes it again

    def draw() -> dict[tuple[int, int], torch.Tensor]:
        counts = torch.bincount(labels[labels >= 0], minlength=len(train_split.class_names))
        short = int(counts.argmin())
        if int(counts[short]) < max(shots):  # unreadable images left a class short
            raise DataError(
                f"{train_split.source}: class {train_split.class_names[short]!r} has {int(counts[short])} readable training "
                f"images, fewer than {max(shots)} shots; ask for fewer --shots"
            )
        return {(n, s): fewshot_indices(labels, n, s) for n in shots for s in range(seeds)}

    draws = draw()
    features = with_feature_runner(
        model, [train_split.subset(torch.unique(torch.cat(list(draws.values()))).numpy()), test_split], features
    )
    found: dict[int, torch.Tensor] = {}  # a drawn image's features
    while new := [i for i in torch.unique(torch.cat(list(draws.values()))).tolist() if i not in found]:
        x, _ = split_features(model, part := train_split.subset(np.array(new)), **features)
        kept = readable(part, features.get("bad"))
        found.update(zip([i for i, ok in zip(new, kept.tolist()) if ok], x))
        if kept.all():
            break
        labels[torch.tensor(new)[~kept]] = -1  # drawn again without them: every draw has its full shots
        draws = draw()
    test_x, test_y = split_features(model, test_split, **features)
    table = _shot_table(draws, found, labels, test_x, test_y, l2_reg=l2_reg, num_classes=len(train_split.class_names))
    return {
        "evaluation": "fewshot_lsr",
        "precision": features["runner"].description,
        "shots": table,
        "seeds": seeds,
        "l2_reg": l2_reg,
        "n_test": len(test_y),
        "feature_dim": test_x.shape[1],
        "n_train_features": len(found),
        "shots_from": train_split.describe(),
    }


def _shot_table(draws: dict, found: dict, labels, test_x, test_y, *, l2_reg: float, num_classes: int) -> dict:
    """{shots: mean and std over seeds} of `lsr_accuracy` for each draw (shots, seed) of `draws`, in their order."""
    accs: dict[int, list[float]] = {}
    for (n, _), drawn in draws.items():
        drawn = drawn.tolist()
        accs.setdefault(n, []).append(
            lsr_accuracy(
                torch.stack([found[i] for i in drawn]),
                labels[drawn],
                test_x,
                test_y,
                l2_reg=l2_reg,
                num_classes=num_classes,
            )
        )
    return {str(n): _mean_std(values) for n, values in accs.items()}


def linear_probe_eval(
    model: nn.Module,
    train_split: Split,
    val_split: Split,
    test_split: Split,
    *,
    l2s: Iterable[float] = (1e-6, 1e-4, 1e-2, 1.0),
    max_iter: int = 500,
    **features: Any,
) -> dict:
    """Logistic regression on frozen features: fitted on `train_split` for each l2, the one with the best
    accuracy on `val_split` scored on `test_split`."""
    features = with_feature_runner(model, [train_split, val_split, test_split], features)
    train_x, train_y = split_features(model, train_split, **features)
    val_x, val_y = split_features(model, val_split, **features)
    test_x, test_y = split_features(model, test_split, **features)
    K = len(train_split.class_names)
    runs, probes = [], []
    for l2 in l2s:
        probe = linear_probe(train_x, train_y, l2=l2, max_iter=max_iter, num_classes=K)
        probes.append(probe)
        # "picking", not "val": with --test-split val the picking images are a share of train, and val is scored
        runs.append({"l2": l2, "picking_top1": float((linear_probe_predict(probe, val_x) == val_y).float().mean())})
    best = max(range(len(runs)), key=lambda i: runs[i]["picking_top1"])
    test_top1 = float((linear_probe_predict(probes[best], test_x) == test_y).float().mean())
    return {
        "evaluation": "linear_probe",
        "precision": features["runner"].description,
        "runs": runs,
        "best_l2": runs[best]["l2"],
        "picking_top1": runs[best]["picking_top1"],
        "test_top1": test_top1,
        "n_train": len(train_y),
        "n_val": len(val_y),
        "n_test": len(test_y),
        "feature_dim": train_x.shape[1],
        "fitted_on": train_split.describe(),
        "picked_on": val_split.describe(),
    }


def knn_eval(
    model: nn.Module,
    train_split: Split,
    test_split: Split,
    *,
    ks: Iterable[int] = (10, 20),
    temperature: float | None = 0.07,
    **features: Any,
) -> dict:
    """Cosine k-NN accuracy on `test_split` with `train_split` as the memory bank, for each k."""
    features = with_feature_runner(model, [train_split, test_split], features)
    train_x, train_y = split_features(model, train_split, **features)
    test_x, test_y = split_features(model, test_split, **features)
    top1 = {
        str(k): float((knn_predict(train_x, train_y, test_x, k=k, temperature=temperature) == test_y).float().mean())
        for k in ks
    }
    return {
        "evaluation": "knn",
        "precision": features["runner"].description,
        "top1": top1,
        "temperature": temperature,
        "n_train": len(train_y),
        "n_test": len(test_y),
        "feature_dim": train_x.shape[1],
        "memory_bank": train_split.describe(),
    }


# -- reports ---------------------------------------------------------------------------------
def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        return f"{v:.4f}" if isinstance(v, float) else "-" if v is None else str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def report_markdown(result: dict, title: str) -> str:
    """A Markdown table of a fewshot_eval / linear_probe_eval / knn_eval result under `title`."""
    kind = result["evaluation"]
    if kind == "fewshot_lsr":
        rows = [
            [n, r["mean"], r["std"], " ".join(f"{a:.4f}" for a in r["per_seed"])] for n, r in result["shots"].items()
        ]
        table = markdown_table(["shots per class", "mean top-1", "std (seeds)", "per seed"], rows)
        note = (
            f"Regularised least squares (l2 {result['l2_reg']:g}) on {result['feature_dim']}-d pre-logits features of the shots, drawn "
            f"per seed from {_images(result, 'shots_from')}; {result['n_test']} test images."
        )
        if left_out := result.get("shots_left_out"):
            note += (
                f" {', '.join(map(str, left_out))} shots left out: the smallest class has {result['fewest_per_class']} training "
                "images."
            )
    elif kind == "linear_probe":
        rows = [
            [f"{r['l2']:g}", r["picking_top1"], result["test_top1"] if r["l2"] == result["best_l2"] else None]
            for r in result["runs"]
        ]
        table = markdown_table(["l2", "top-1 (picking)", f"top-1 ({result.get('test_split', 'test')})"], rows)
        fit, pick = (
            _images(result, key, read=result.get(n)) for key, n in (("fitted_on", "n_train"), ("picked_on", "n_val"))
        )
        note = f"Logistic regression on {result['feature_dim']}-d features, fitted on {fit}; l2 {result['best_l2']:g} picked on {pick}."
    else:
        t, n = result["temperature"], result["n_train"]
        table = markdown_table(
            ["k", "top-1"], [[k if int(k) <= n else f"{k} (all {n})", v] for k, v in result["top1"].items()]
        )
        note = (
            f"Cosine k-NN, {'uniform votes' if t is None else f'votes exp(sim / {t:g})'}, against the features of "
            f"{_images(result, 'memory_bank', f'{n} training images', read=n)}."
        )
    return f"{title}\n\n{note}\n\n{table}"


def _images(result: dict, key: str, otherwise: str = "val", read: int | None = None) -> str:
    """The images a result's `key` record describes (`read` of them where unreadable files were left out); `otherwise`
    for an older result without it."""
    if not result.get(key):
        return otherwise
    record = result[key]
    return described(record) if read is None or read == record["n"] else f"the {read:,} readable of {described(record)}"


def write_report(out: str | os.PathLike, name: str, result: dict, markdown: str) -> tuple[Path, Path]:
    """out/name.json and out/name.md, each written atomically."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / f"{name}.json", result)
    with atomic_path(out / f"{name}.md") as tmp:
        tmp.write_text(markdown)
    return out / f"{name}.json", out / f"{name}.md"
