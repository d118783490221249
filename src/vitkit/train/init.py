"""model.init: a run that starts from a checkpoint's weights (fine-tuning), and the data those weights were
trained on (their images are not unseen by the new model)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch

from vitkit.checkpoint import untrained_head
from vitkit.checkpoint.native import load_state_dict_strict, read_native_config
from vitkit.checkpoint.runs import resolve
from vitkit.data.spec import trained_on
from vitkit.errors import ConfigError
from vitkit.models import VisionTransformer
from vitkit.train.config import RunConfig

# model fields a model.init checkpoint may differ in: resampled (image_size), a new head (num_classes), or not weights
INIT_FREE = (
    "image_size",
    "num_classes",
    "dropout",
    "attn_dropout",
    "drop_path",
    "layer_norm_eps",
    "mlp_act",
    "mean",
    "std",
    "background",
)


def pretrained_on(config: RunConfig, checkpoints: list[Path]) -> list[dict]:
    """The data records of model.init (`spec.trained_on`); on a resume, as its newest checkpoint kept them."""
    from vitkit.checkpoint import read_metadata

    if checkpoints:
        return read_native_config(checkpoints[-1])[1].get("pretrained_on") or []
    if not config.model.init:
        return []
    return trained_on(read_metadata(resolve(Path(config.model.init))))


def init_from(model: VisionTransformer, path: Path, class_names: list[str]) -> str:
    """Start from a checkpoint (fine-tuning): every weight, position embeddings resampled, and its head where it holds
    this data's classes, its rows put in the data's order by class name; else a new zero head. A checkpoint of another
    architecture is one error naming the model.* settings that would match it. Returns what became of the head."""
    from vitkit.checkpoint import load_with_metadata

    source, meta = load_with_metadata(resolve(path))  # any format; at its own size until its architecture is checked
    theirs, ours = source.config, model.config
    if type(theirs) is not type(ours):
        raise ConfigError(
            f"model.init={path}: holds a {type(source).__name__}, and this run builds a {type(model).__name__}; "
            f"give this run that kind of model (model.name), or another checkpoint"
        )
    head, note = _head_for(meta.get("class_names"), theirs.num_classes, class_names)
    # finetune's start (init/): a head not trained yet
    if head is not None and untrained_head({}, path, source) is not None:
        note = f"its head, all zeros (not trained yet), for the same {len(class_names)} classes"
    if head is None:
        source.reset_head(ours.num_classes, keep_pre_logits=False)
        theirs = source.config
    else:
        put_head_rows(source, head)
    _refuse_another_architecture(theirs, ours, path)
    if theirs.image_size != ours.image_size:
        source.set_image_size(ours.image_size)  # position embeddings resampled (paper §3.2)
    load_state_dict_strict(model, source.state_dict(), source=path)  # faults: any other mismatch is one clear error
    return f"every weight from {path}; {note}"


def put_head_rows(model: torch.nn.Module, rows: list[int]) -> None:
    """Reorder the classification head's outputs in place: output i becomes the one that was `rows[i]`."""
    if rows == list(range(len(rows))):
        return
    index = torch.tensor(rows)
    with torch.no_grad():
        for tensor in (model.head.weight, model.head.bias):
            if tensor is not None:
                tensor.copy_(tensor[index])


def _refuse_another_architecture(theirs, ours, path: Path) -> None:
    """One error naming every model.* setting (outside INIT_FREE) in which the checkpoint differs from this run."""
    differ = [
        f.name
        for f in dataclasses.fields(ours)
        if f.name not in INIT_FREE and getattr(theirs, f.name) != getattr(ours, f.name)
    ]
    if differ:
        settings = " ".join(f"model.{k}={_as_override(getattr(theirs, k))}" for k in differ)
        raise ConfigError(
            f"model.init={path}: its model differs from this run's in {', '.join(differ)} "
            f"({', '.join(f'{k} {_as_override(getattr(ours, k))}' for k in differ)} here); start it with {settings}, "
            f"or fine-tune with `vitkit finetune --from {path}`, which takes the architecture from the checkpoint"
        )


def _head_for(theirs: list[str] | None, count: int, ours: list[str]) -> tuple[list[int] | None, str]:
    """(for each of `ours` classes, the row of a checkpoint's head that scores it, or None for a new head; what it says)."""
    shown = ", ".join(ours[:4]) + (", ..." if len(ours) > 4 else "")
    if theirs is not None and len(theirs) == count and sorted(theirs) == sorted(ours) and len(set(ours)) == len(ours):
        moved = theirs != ours
        return [theirs.index(name) for name in ours], f"its head scores the same {len(ours)} classes" + (
            " (rows put in this data's class order)" if moved else ""
        )
    if theirs is None and count == len(ours):
        return list(range(count)), (
            f"its head has no class names, so its {count} outputs are kept in order as this data's classes ({shown})"
        )
    what = (
        f"classes {', '.join(theirs[:4])}{', ...' if len(theirs) > 4 else ''}" if theirs else f"{count} unnamed classes"
    )
    return None, f"its head scores {what}, not this data's ({shown}): a new zero-initialised head"


def _as_override(value: Any) -> str:
    """A model setting as KEY=VALUE text takes it: (4, 4) as 4, other sequences and mappings as JSON, None as null."""
    if isinstance(value, (tuple, list)) and len(set(value)) == 1 and all(isinstance(v, int) for v in value):
        return str(value[0])
    if dataclasses.is_dataclass(value):
        value = dataclasses.asdict(value)
    return (
        json.dumps(value, separators=(",", ":"))
        if isinstance(value, (tuple, list, dict)) or value is None
        else str(value)
    )
