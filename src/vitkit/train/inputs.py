"""The run's images: the training and validation splits opened and checked, the training batches in their
reproducible order, and the generator of every device-side augmentation draw."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import torch

from vitkit.data import Batches, DataSpec, check_compatible, fits_in_memory, load_into_memory
from vitkit.data.scan import blank_on
from vitkit.data.sources.folder import classes_in_names
from vitkit.data.summary import copies_labelled_otherwise, copies_of_training_images
from vitkit.errors import ConfigError, DataError
from vitkit.files import atomic_path
from vitkit.limits import check_batch_room
from vitkit.train import distributed, faults
from vitkit.train.config import RunConfig
from vitkit.train.objectives import OBJECTIVES, objective_for
from vitkit.train.state import Data, Setup


def prepare_data(config: RunConfig, out: Path, resume: bool, env: Setup) -> Data:
    """Open the splits and check them; small ones are loaded onto the device whole."""
    a, d = config.augment, config.data
    # the model's input size and channels decide how images are read; the data decides the classes
    shape = env.model
    _check_batch_room(shape, env.micro, config)  # before any image is read or generated
    spec = DataSpec.from_config(d)  # the split resolver; its record in the checkpoint names exactly these images
    train_split = _open(spec, shape, d.train_split, "data.train_split")
    val_split = _open(spec, shape, d.val_split, "data.val_split")
    check_compatible(train_split, val_split)  # faults: the same classes, labels in range, before any work
    # said in the plan
    val_copies = (copies_of_training_images({"train": train_split, "val": val_split}) or {}).get("val")
    relabelled = copies_labelled_otherwise({"train": train_split, "val": val_split})
    held = held_out_list(out, d, val_split)
    blank = blank_on(train_split, shape.background, shape.in_chans)  # before reading into memory composites them
    record = spec.record({d.train_split: train_split, d.val_split: val_split})
    val_files = frozenset(str(path) for path in val_split.paths) if val_split.paths is not None else frozenset()
    bad = faults.bad_files(
        out,
        d.on_error,
        resume,
        writer=env.world.main,  # faults: unreadable image files, as data.on_error says
        split_of=lambda path: d.val_split if path in val_files else d.train_split,
    )
    if fits_in_memory(val_split, shape.in_chans, shape.image_size, d.memory_mb):  # read as vitkit eval reads it
        val_split = load_into_memory(
            val_split,
            shape.in_chans,
            shape.image_size,
            a.eval_crop_pct,
            workers=d.workers,
            bad=bad,
            background=shape.background,
        )
    _check_classes(config, train_split, env.micro)
    batches, augment = training_batches(config, shape, train_split, env.micro, env.device, bad, env.world)
    names = train_split.class_names
    said = (val_copies, relabelled, held, blank)  # the plan's lines on them
    return Data(batches.split, val_split, names, bad, shape, batches, augment, record, val_files, *said)


def held_out_list(out: Path, d, val_split) -> tuple[Path, list[str] | None]:
    """The file that lists the validation split where vitkit held it out of the training images, RUN/splits/VAL.txt,
    and its lines: each image (a file or a shard record) named below the data folder, or, for images in memory (IDX
    files), its row number in the training file, counted from 0; None where vitkit held none out."""
    path = out / "splits" / f"{d.val_split}.txt"
    if not val_split.held_out:
        return path, None
    if val_split.paths is None:
        return path, [str(row) for row in val_split.source_rows()]
    folder = d.path if os.path.isdir(d.path) else os.path.dirname(d.path)
    return path, val_split.names(folder)


def write_held_out(data: Data) -> None:
    """The held-out validation images, one name a line (`held_out_list`); a list a run in this folder left before,
    of other data, is removed where none is held out now."""
    if data.held_out is None:
        return
    path, names = data.held_out
    if names is None:
        path.unlink(missing_ok=True)
        return
    with atomic_path(path) as tmp:
        tmp.write_text("".join(f"{name}\n" for name in names), encoding="utf-8", errors="surrogateescape")


def _check_batch_room(shape, micro: int, config: RunConfig) -> None:
    """Refuse a micro-batch whose forward pass alone cannot fit in the memory this process may use (training
    keeps every block's activations, so this is a lower bound)."""
    flag = "train.micro_batch" if config.train.micro_batch else "train.batch_size"
    tokens = getattr(shape, "num_prefix_tokens", 0) + getattr(shape, "num_patches", 0)
    check_batch_room(
        micro, shape.image_size, shape.in_chans, f"{flag} {micro} at model.image_size {shape.image_size[0]}",
        ConfigError, hint=f"lower {flag} (train.micro_batch splits a batch into smaller passes)",
        tokens=tokens, width=getattr(shape, "width", 0), mlp=getattr(shape, "mlp_dim", 0),
    )  # fmt: skip


def _open(spec: DataSpec, shape, name: str, flag: str):
    """Split `name` of the data, read at the model's input size and channels (`shape`)."""
    return spec.open(
        name, channels=shape.in_chans, image_size=shape.image_size, flag=flag, hold_out="data.val_fraction"
    )


def one_class(train_split) -> DataError:
    """The error for training data of one class (a folder of images without class folders) where labels are learned;
    where the images' names start with their classes, how to make the folders."""
    return DataError(
        f"{train_split.source}: one class ({train_split.class_names[0]!r}); classification needs two or more "
        "(root/<class>/<image>); to pre-train on images without labels use train.objective=masked_patch"
        + (classes_in_names(train_split.paths) if train_split.paths else "")
    )


def _check_classes(config: RunConfig, train_split, micro: int) -> None:
    """The data's classes match model.num_classes, and suit the objective; a batch's worth of training images."""
    class_names = train_split.class_names
    given = dict(config.model.overrides).get("num_classes")
    if given is not None and given != len(class_names):
        raise ConfigError(f"model.num_classes: {given} given but the data has {len(class_names)} classes")
    # masked patch prediction trains on a folder without class folders
    objective = OBJECTIVES[objective_for(config.train.objective, train_split)]
    if len(class_names) < 2 and objective.uses_labels:
        raise one_class(train_split)
    if train_split.multi_label and objective.uses_labels and not objective.several_labels:
        raise ConfigError(
            f"{train_split.source}: gives each image a list of labels; train.objective={objective.name} takes one "
            "label per image: train with train.objective=multi_label"
        )
    if len(train_split) < micro:
        raise DataError(
            f"{train_split.source}: {len(train_split)} training images, fewer than one batch of {micro}; lower train.batch_size"
        )


def training_batches(
    config: RunConfig,
    shape,
    split,
    micro: int,
    device: torch.device,
    bad,
    world: distributed.Dist = distributed.Dist(),
):
    """The run's training batches (a `Batches`) and the augmentation the device applies to them, read at the input
    size and channels of the model config `shape`.

    Image files get the Inception crop from the whole decoded image in the loader (never from a resized
    copy; the device then only flips and RandAugments); other data is held in memory when it fits
    (data.memory_mb) and cropped on the device.
    """
    a, d = config.augment, config.data
    size, channels = shape.image_size[0], shape.in_chans
    load_size = d.load_size or (round(size * 8 / 7) if a.crop == "rrc" else size)
    crop = (a.rrc_scale, a.rrc_ratio) if a.crop == "rrc" and split.images is None else None
    if crop is None and fits_in_memory(split, channels, load_size, d.memory_mb):
        split = load_into_memory(split, channels, load_size, workers=d.workers, bad=bad, background=shape.background)
    batches = Batches(
        split,
        micro,
        config.train.seed,
        device,
        channels=channels,
        size=size if crop else load_size,
        workers=d.workers,
        rank=world.rank,
        world=world.size,
        bad=bad,
        crop=crop,
        repeats=d.repeats,
        background=shape.background,
    )  # faults: bad streamed files, as data.on_error says
    return batches, replace(a, crop="none") if batches.cropped else a


def augment_generator(seed: int, micro_batch: int, rank: int = 0) -> torch.Generator:
    """The generator of every device-side augmentation draw of one micro-batch (number `micro_batch` of the run)."""
    return torch.Generator().manual_seed(seed * 1_000_003 + micro_batch + rank * 7_919)


def first_batch_pixels(config: RunConfig, shape, count: int) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """The first `count` images of the run's first micro-batch as training augments them (crop, flip, RandAugment;
    computed on the CPU) for the model config `shape`, before normalisation, random erasing and Mixup/CutMix:
    ((N, C, H, W) uint8, labels, class names)."""
    from vitkit.data import BadFiles, augment_pixels

    d, t = config.data, config.train
    split = _open(DataSpec.from_config(d), shape, d.train_split, "data.train_split")
    batches, augment = training_batches(
        config, shape, split, t.micro_batch or t.batch_size, torch.device("cpu"), BadFiles(d.on_error)
    )
    images, labels = next(batches.iterate(0, 0))
    # draws depend on the batch
    pixels = augment_pixels(images, shape.image_size, augment, augment_generator(t.seed, 0), shape.background)[:count]
    return (pixels * 255).round().clamp(0, 255).to(torch.uint8), labels[:count], split.class_names
