"""Self-supervised pre-training by masked patch prediction (paper §4.6, App. B.1.2).

Half of the patch embeddings x_p^i E of every image are corrupted before the class token and E_pos
join them: 80% of the chosen ones become a learnable [mask] embedding, 10% the embedding of a random
other patch of the batch, 10% stay as they are. A linear head predicts, from the output token of
every corrupted patch, its 3-bit mean colour: each channel's mean quantised to 8 levels, the channels
read as the digits of one class (8^3 = 512 classes for RGB, 8 for grayscale). The loss is the
cross-entropy over the corrupted patches only; labels are never looked at.

`MaskedPatchPrediction(vit)` holds the [mask] embedding and the colour head beside the ViT; the ViT
itself is unchanged (the corruption runs through its `forward_features(x, corrupt=...)` hook), so it
is saved and loaded like any other vitkit model, without the prediction head.

The training loop sees every objective through one seam, picked once from train.objective
(`pick_objective`): `Classification`, `MultiLabel` (a sigmoid per class) or `MaskedPatch`, each with the
module the optimizer trains, the targets and (logits, targets) of a batch, its loss, its validation and the
tensors an exact resume needs.

    objective = MaskedPatchPrediction(vit)
    logits, targets = objective(x, generator)   # (M, K) colour logits, (M, K) one-hot targets
    loss = -(targets * logits.log_softmax(-1)).sum(-1).mean()
    vitkit.save_pretrained(objective.vit, "pretrained/")
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from vitkit.data.augment import eval_transform, soft_targets
from vitkit.errors import CheckpointError, ConfigError
from vitkit.evaluate.metrics import evaluate, evaluate_multilabel
from vitkit.models import VisionTransformer
from vitkit.train import distributed
from vitkit.train.optim import soft_cross_entropy

COLOUR_BITS = 3  # bits per channel of the predicted mean colour
CORRUPT_RATIO = 0.5  # share of the patches corrupted in every image
MASK_SHARE, RANDOM_SHARE = 0.8, 0.1  # of the corrupted ones: [mask], a random other patch; the rest kept


def colour_classes(in_chans: int, bits: int = COLOUR_BITS) -> int:
    """Number of mean-colour classes: 2^(bits * channels), 512 for RGB and 8 for grayscale at 3 bits."""
    return 2 ** (bits * in_chans)


def mean_colour_targets(pixels: torch.Tensor, patch_size: tuple[int, int], bits: int = COLOUR_BITS) -> torch.Tensor:
    """(B, C, H, W) pixels in [0, 1] -> (B, N) class of every patch's quantised mean colour.

    Each channel's mean over the patch falls into one of 2^bits equal bins of [0, 1]; the bins of the
    channels are the digits of the class, first channel most significant (RGB: r * 64 + g * 8 + b).
    """
    levels = 2**bits
    means = F.avg_pool2d(pixels.float(), kernel_size=patch_size, stride=patch_size)  # (B, C, gh, gw)
    digits = (means * levels).floor().clamp(0, levels - 1).long()
    C = digits.shape[1]
    weights = levels ** torch.arange(C - 1, -1, -1, device=digits.device)  # (C,)
    return (digits * weights[None, :, None, None]).sum(dim=1).flatten(1)  # (B, N), row-major like the tokens


@dataclass
class Corruption:
    """Which patches of a (B, N) batch are corrupted and how."""

    chosen: torch.Tensor  # (B, N) bool: corrupted (predicted) patches
    masked: torch.Tensor  # (B, N) bool: replaced by the [mask] embedding
    swapped: torch.Tensor  # (B, N) bool: replaced by the embedding of patch `source`
    source: torch.Tensor  # (B, N) int64: flat index in B * N of the replacing patch (never the patch itself)

    def to(self, device: torch.device) -> Corruption:
        return Corruption(*(t.to(device) for t in (self.chosen, self.masked, self.swapped, self.source)))


def draw_corruption(
    B: int,
    N: int,
    generator: torch.Generator | None = None,
    *,
    ratio: float = CORRUPT_RATIO,
    mask_share: float = MASK_SHARE,
    random_share: float = RANDOM_SHARE,
) -> Corruption:
    """Choose round(ratio * N) patches of every image; of those, mask_share become [mask], random_share another patch.

    Drawn on the CPU from `generator`, so a run's corruptions are a function of its seed and step.
    """
    k = min(max(round(ratio * N), 1), N)
    rank = torch.rand(B, N, generator=generator).argsort(dim=1).argsort(dim=1)
    chosen = rank < k  # exactly k per image, uniformly at random
    u = torch.rand(B, N, generator=generator)
    masked = chosen & (u < mask_share)
    swapped = chosen & (u >= mask_share) & (u < mask_share + random_share)
    total = B * N
    offset = torch.randint(1, max(total, 2), (B, N), generator=generator)  # any other patch of the batch
    source = (torch.arange(total).view(B, N) + offset) % total
    return Corruption(chosen, masked, swapped & (total > 1), source)


class MaskedPatchPrediction(nn.Module):
    """A ViT with the [mask] embedding and the linear mean-colour head of masked patch prediction."""

    def __init__(self, vit: VisionTransformer, *, bits: int = COLOUR_BITS):
        super().__init__()
        c = vit.config
        self.vit = vit
        self.bits = bits
        self.mask_token = nn.Parameter(torch.randn(1, 1, c.width) * 0.02)  # the learnable [mask] embedding
        self.head = nn.Linear(c.width, colour_classes(c.in_chans, bits))
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        self.to(vit.norm.weight.device)

    def corrupt(self, x: torch.Tensor, corruption: Corruption) -> torch.Tensor:
        """(B, N, D) patch embeddings -> the corrupted ones (replacements taken from the clean embeddings)."""
        B, N, D = x.shape
        other = x.reshape(B * N, D)[corruption.source.flatten()].view(B, N, D)
        x = torch.where(corruption.swapped[..., None], other, x)
        return torch.where(corruption.masked[..., None], self.mask_token.to(x.dtype).expand(B, N, D), x)

    def targets(self, x: torch.Tensor) -> torch.Tensor:
        """(B, N) colour classes of the model's normalised input x (undone with the config's mean and std)."""
        c = self.vit.config
        mean = torch.as_tensor(c.mean, dtype=x.dtype, device=x.device)[None, :, None, None]
        std = torch.as_tensor(c.std, dtype=x.dtype, device=x.device)[None, :, None, None]
        return mean_colour_targets(x * std + mean, c.total_patch_size, self.bits)

    def forward(self, x: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalised images (B, C, H, W) -> colour logits (M, K) and one-hot targets (M, K) of the M corrupted patches."""
        c = self.vit.config
        corruption = draw_corruption(x.shape[0], c.num_patches, generator).to(x.device)
        tokens = self.vit.forward_features(x, corrupt=lambda e: self.corrupt(e, corruption))  # (B, prefix + N, D)
        out = tokens[:, c.num_prefix_tokens :][corruption.chosen]  # (M, D)
        logits = self.head(out)
        targets = F.one_hot(self.targets(x)[corruption.chosen], logits.shape[-1]).to(logits.dtype)
        return logits, targets

    def no_weight_decay(self) -> set[str]:
        return {f"vit.{name}" for name in self.vit.no_weight_decay()} | {"mask_token"}

    def objective_state(self) -> dict[str, torch.Tensor]:
        """The weights that are not the ViT's ([mask] embedding, colour head), for exact resume."""
        return {k: v for k, v in self.state_dict().items() if not k.startswith("vit.")}

    def load_objective_state(self, state: dict[str, torch.Tensor]) -> None:
        own = self.objective_state()
        if set(state) != set(own):
            raise CheckpointError(f"masked patch state: expected keys {sorted(own)}, found {sorted(state)}")
        self.load_state_dict({**self.vit.state_dict(prefix="vit."), **state})


@torch.no_grad()
def evaluate_masked_patch(
    objective: MaskedPatchPrediction,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    *,
    crop_pct: float = 1.0,
    autocast_dtype: torch.dtype | None = None,
    seed: int = 0,
) -> dict:
    """Colour-prediction top-1/top-5 accuracy and mean loss over the corrupted patches of (uint8 images, labels) batches.

    The corruptions come from a generator seeded with `seed`, so every validation sees the same ones.
    Keys match `vitkit.evaluate.metrics.evaluate` (top1, top5, loss, n: here n counts patches).
    """
    was_training = objective.training
    objective.eval()
    c = objective.vit.config
    g = torch.Generator().manual_seed(seed)
    n = top1 = top5 = 0
    loss_sum = 0.0
    for images, _ in batches:
        x = eval_transform(images, c.image_size, crop_pct, c.mean, c.std)
        with torch.autocast(x.device.type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
            logits, targets = objective(x, g)
        logits, labels = logits.float(), targets.argmax(-1)
        loss_sum += float(F.cross_entropy(logits, labels, reduction="sum"))
        best = logits.topk(min(5, logits.shape[-1]), dim=-1).indices
        top1 += int((best[:, 0] == labels).sum())
        top5 += int((best == labels[:, None]).any(-1).sum())
        n += len(labels)
    objective.train(was_training)
    if n == 0:
        return {"n": 0, "top1": float("nan"), "top5": float("nan"), "loss": float("nan")}
    return {"n": n, "top1": top1 / n, "top5": top5 / n, "loss": loss_sum / n}


# -- the training loop's seam ---------------------------------------------------------------
class Classification:
    """Supervised: the model's class logits against the data's (smoothed, mixed) soft targets."""

    name = "classification"
    uses_labels = True  # the data needs two or more classes
    trains_head = True  # the saved model's classification head is trained
    compiles = True  # train.compile applies to the step's module
    always_top5 = False  # top-5 is shown only where there are more than 5 classes
    measured = ""  # what the validation accuracy is of, as the log line says it
    several_labels = False  # trains on data that gives an image a set of classes
    record: dict = {}  # what the saved model records of the objective (config.json, and every format's metadata)
    also_logged: tuple[str, ...] = ()  # validation figures beside top1, top5 and loss

    def __init__(self, model: nn.Module, resumed: dict | None = None):
        self.module = model  # what the optimizer trains

    def targets(self, labels: torch.Tensor, num_classes: int, smoothing: float) -> torch.Tensor:
        """(B, K) float targets of a batch's labels, label smoothing applied (Mixup/CutMix mix these)."""
        return soft_targets(labels, num_classes, smoothing)

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of the softmax against soft targets."""
        return each_head(soft_cross_entropy, logits, targets)

    def shown(self, metrics: dict) -> str:
        """The validation figures beside top-1, top-5 and the loss in the log line (none)."""
        return ""

    def outputs(self, forward, x: torch.Tensor, targets: torch.Tensor, generator: torch.Generator):
        """(logits, soft targets) of a batch of normalised images through `forward` (the step's module)."""
        return forward(x), targets

    def evaluate(self, model: nn.Module, batches, **kwargs) -> dict:
        return evaluate(model, batches, **kwargs)

    def checkpoint_tensors(self) -> dict:
        """The objective's own weights for train_state.pt (none: the model is all)."""
        return {}


class MaskedPatch(Classification):
    """Masked patch prediction: the corrupted patches' mean colours against the objective's own targets."""

    name = "masked_patch"
    uses_labels = trains_head = compiles = False
    always_top5 = True
    measured = " colour-prediction"

    def __init__(self, model: nn.Module, resumed: dict | None = None):
        if not isinstance(model, VisionTransformer):
            raise ConfigError(
                f"train.objective: masked_patch corrupts a Vision Transformer's patch embeddings; this model is a "
                f"{type(model).__name__} (use train.objective=classification)"
            )
        # its [mask] embedding and colour head train beside the ViT; the saved model is the ViT
        self.module = MaskedPatchPrediction(model)
        heads = [model.pre_logits, model.head, *([model.head_dist] if model.head_dist is not None else [])]
        for p in (p for head in heads for p in head.parameters()):
            p.requires_grad_(False)  # the classification head plays no part (and DDP must not wait for its gradients)
        if resumed is not None:
            self.module.load_objective_state(resumed["masked_patch"])

    def outputs(self, forward, x: torch.Tensor, targets: torch.Tensor, generator: torch.Generator):
        return forward(x, generator)  # reads no labels: the objective makes its own targets

    def evaluate(self, model: nn.Module, batches, **kwargs) -> dict:
        return evaluate_masked_patch(self.module, batches, **kwargs)  # `model` is the ViT inside it

    def checkpoint_tensors(self) -> dict:
        return {"masked_patch": distributed.full_tensors(self.module.objective_state())}  # gathered under FSDP


class MultiLabel(Classification):
    """Multi-label classification: each class a yes/no question, a sigmoid per class against the binary
    cross-entropy, averaged over classes and images. Label smoothing pulls every target toward 0.5 (a label of
    1 becomes 1 - s/2, a 0 becomes s/2: smoothing of a two-class decision); Mixup and CutMix mix the multi-hot
    targets by the same weight as the images. One label per image (an index) is a multi-hot row with one class."""

    name = "multi_label"
    several_labels = True
    record = {"problem_type": "multi_label_classification"}
    also_logged = ("map", "f1")

    def targets(self, labels: torch.Tensor, num_classes: int, smoothing: float) -> torch.Tensor:
        hot = labels if labels.ndim == 2 else F.one_hot(labels, num_classes)
        return hot.float() * (1.0 - smoothing) + smoothing / 2

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return each_head(lambda y, t: F.binary_cross_entropy_with_logits(y.float(), t), logits, targets)

    def evaluate(self, model: nn.Module, batches, **kwargs) -> dict:
        return evaluate_multilabel(model, batches, **kwargs)

    def shown(self, metrics: dict) -> str:
        return f"  mAP {metrics['map']:.4f}  F1 {metrics['f1']:.4f}"


class Distillation(Classification):
    """DeiT's hard-label distillation (Touvron et al. 2021, §5.2): the class head learns the data's (smoothed, mixed)
    targets, the distillation head the teacher's argmax on the same image, half the loss each. Validation and every
    later use read both heads averaged (the model in eval)."""

    name = "distillation"

    def __init__(self, model: nn.Module, resumed: dict | None = None, teacher=None):
        self.module = model
        self.teacher = teacher  # a vitkit.train.teacher.Teacher

    def outputs(self, forward, x: torch.Tensor, targets: torch.Tensor, generator: torch.Generator):
        return forward(x), (targets, self.teacher.labels(x))  # (class logits, distillation logits) while training

    def loss(self, logits, targets) -> torch.Tensor:
        (y, y_dist), (soft, hard) = logits, targets
        return 0.5 * soft_cross_entropy(y, soft) + 0.5 * F.cross_entropy(y_dist.float(), hard)


def each_head(loss, logits, targets: torch.Tensor) -> torch.Tensor:
    """`loss(logits, targets)`, averaged over the heads where a distilled model in training gives two (without a
    teacher both learn the data's targets)."""
    if isinstance(logits, tuple):
        return sum(loss(y, targets) for y in logits) / len(logits)
    return loss(logits, targets)


OBJECTIVES = {"classification": Classification, "multi_label": MultiLabel, "masked_patch": MaskedPatch}


def objective_for(name: str, split) -> str:
    """train.objective for the training `split`: "auto" is multi_label where the split gives each image a set of
    classes (a list's labels column, shards' label lists), else classification."""
    if name != "auto":
        return name
    return "multi_label" if split.multi_label else "classification"


def pick_objective(name: str, model: nn.Module, resumed: dict | None, teacher=None) -> Classification:
    """train.objective around `model`; on resume (`resumed`: train_state.pt), the objective it was started with; with a
    `teacher` (train.teacher, checked against the objective as it was loaded), distillation."""
    if teacher is not None:
        return Distillation(model, resumed, teacher)
    if resumed is not None and ("masked_patch" in resumed) != (name == "masked_patch"):
        started = "masked_patch" if "masked_patch" in resumed else "classification"
        raise ConfigError(
            f"train.objective: this run was started with {started}; resume it with train.objective={started}"
        )
    return OBJECTIVES[name](model, resumed)
