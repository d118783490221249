"""The teacher of DeiT's hard-label distillation (Touvron et al. 2021, §5.2), `train.teacher=CHECKPOINT`.

Any checkpoint vitkit reads (a run, a hub name, a Hugging Face or timm folder or file) is loaded once, frozen and kept
in eval mode. At every step it sees the student's own (augmented, mixed) images: the student's normalisation undone,
resized to the teacher's input size where that differs (bilinear, antialiased), normalised with the teacher's mean and
std; it runs without gradients and its argmax is the label the student's distillation head learns. Its outputs are
put in the data's class order by class name where it names its classes; a teacher that names none must score as
many classes as the data has.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from vitkit.errors import ConfigError
from vitkit.models import ModelConfig


@dataclass(frozen=True)
class Teacher:
    """A frozen teacher, and how a student's input becomes its input."""

    given: str  # train.teacher as given
    model: nn.Module = field(repr=False)
    student: ModelConfig = field(repr=False)
    rows: list[int] | None = None  # its output row for each of the data's classes (None: the same order)
    named: bool = True  # it names its classes (else its outputs are read in the data's order)

    @torch.no_grad()
    def labels(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) images normalised for the student -> (B,) the teacher's argmax class, in the data's order."""
        s, t = self.student, self.model.config
        if (s.image_size, s.mean, s.std) != (t.image_size, t.mean, t.std):
            pixels = x.float() * _channels(s.std, x) + _channels(s.mean, x)  # [0, 1] again
            if s.image_size != t.image_size:
                pixels = F.interpolate(pixels, size=t.image_size, mode="bilinear", antialias=True, align_corners=False)
            x = (pixels - _channels(t.mean, x)) / _channels(t.std, x)
        logits = self.model(x.to(self.model_dtype()))
        if self.rows is not None:
            logits = logits[:, self.rows]
        return logits.argmax(dim=-1)

    def model_dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    def line(self) -> str:
        """The plan's line: which teacher, the loss, and what its input is made of."""
        s, t = self.student, self.model.config
        steps = []
        if s.image_size != t.image_size:
            steps.append(f"resized {_size(s)} -> {_size(t)} (bilinear)")
        if (s.mean, s.std) != (t.mean, t.std):
            steps.append("renormalised to its mean and std")
        seen = "the student's images " + (", ".join(steps) if steps else "as they are (same size and normalisation)")
        order = "" if self.named else "; it names no classes: its outputs are read in the data's class order"
        return (
            f"teacher    {self.given} ({type(self.model).__name__} at {_size(t)}, frozen): DeiT hard-label distillation, "
            f"loss = 0.5 CE(class head, labels) + 0.5 CE(distillation head, teacher's argmax); it sees {seen}{order}"
        )


def _channels(values, x: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(values, dtype=torch.float32, device=x.device)[None, :, None, None]


def _size(config: ModelConfig) -> str:
    return f"{config.image_size[0]}x{config.image_size[1]}"


def load_teacher(given: str, student: ModelConfig, class_names: list[str], objective: str, device) -> Teacher:
    """train.teacher, loaded and checked against the student (one ConfigError line for what does not fit): the student
    has DeiT's distillation token, the objective is single-label classification, the input channels agree and the
    teacher scores the data's classes."""
    from vitkit.checkpoint import load_with_metadata, refuse_untrained_head

    if not getattr(student, "distilled", False):
        raise ConfigError(
            "train.teacher: the student has no distillation token; add model.distilled=true (DeiT's second token "
            "and head, which learn the teacher's labels)"
        )
    if objective != "classification":
        raise ConfigError(
            f"train.teacher: DeiT's hard-label distillation takes one label per image; train.objective is {objective}"
        )
    model, metadata = load_with_metadata(given)
    refuse_untrained_head(metadata, given, model)
    t = model.config
    if t.in_chans != student.in_chans:
        raise ConfigError(
            f"train.teacher: {given} reads {t.in_chans}-channel images, the student {student.in_chans}; distil from a "
            "teacher of the same input"
        )
    rows, named = _rows(given, metadata.get("class_names"), t.num_classes, class_names)
    model.requires_grad_(False)
    return Teacher(given, model.to(device).eval(), student, rows, named)


def _rows(given: str, theirs: list[str] | None, count: int, ours: list[str]) -> tuple[list[int] | None, bool]:
    """(the teacher's row of each of the data's classes, None where in the same order; whether it names them)."""
    if theirs is not None and len(theirs) == count:
        missing = [name for name in ours if name not in theirs]
        if missing:
            raise ConfigError(
                f"train.teacher: {given} does not score the data's class {missing[0]!r} ({len(missing)} missing); "
                "distil from a teacher trained on these classes"
            )
        rows = [theirs.index(name) for name in ours]
        return (None if rows == list(range(count)) else rows), True
    if count != len(ours):
        raise ConfigError(
            f"train.teacher: {given} scores {count} classes and names none, the data has {len(ours)}; distil from a "
            "teacher trained on these classes"
        )
    return None, False
