"""The images `vitkit inspect` looks through: given files and folders, or a split of the checkpoint's data taken in
turn from each class; read as eval and predict read them, and set against the model's training data."""

from __future__ import annotations

import os
from dataclasses import dataclass

from vitkit.evaluate.requests import InspectRequest

COPIES_NOT_CHECKED = "copies not checked"  # the split is known, not whether it holds copies of training images


@dataclass
class Chosen:
    """The images inspected: pixels in [0, 1] (N, C, H, W), their true class names, which of them the model trained
    on (None: not known), what each is, where they are from, the training data in words, and the (source, error) of
    the unreadable ones left out with --skip-unreadable."""

    pixels: object
    truth: list[str]
    seen: list[bool] | None
    shown: list[str]
    where: str
    training_data: str
    skipped: list[tuple[str, str]]


def given_images(request: InspectRequest, metadata: dict, config) -> Chosen:
    """The files and folders of `request.images` (true class: the folder an image is in, where that names one of the
    model's classes)."""
    from vitkit.data.images import find_images, spread_over_folders

    # the shown images cover the classes
    candidates = spread_over_folders(find_images(request.images))
    kept, pixels, skipped = readable(
        candidates, config, crop_pct(metadata), request.skip_unreadable, request.num_images
    )
    files = [candidates[i] for i in kept]
    names = metadata.get("class_names") or [str(i) for i in range(config.num_classes)]
    truth = [f.parent.name if f.parent.name in names else "?" for f in files]
    seen, training_data = training_images(metadata, request.checkpoint, files, config.in_chans)
    where = ", ".join(str(p) for p in request.images[:3]) + (
        f" and {len(request.images) - 3} more" if len(request.images) > 3 else ""
    )
    return Chosen(pixels, truth, seen, [str(f) for f in files], where, training_data, skipped)


def crop_pct(metadata: dict) -> float:
    return (metadata.get("preprocess") or {}).get("crop_pct", 1.0)


def readable(sources: list, config, crop_pct: float, skip: bool, limit: int):
    """(the indices of the first `limit` of `sources` (files or shard records) that can be read, their pixels in [0, 1]
    read as eval and predict read them (N, C, H, W), (source, error) of those left out on the way with `skip`); without
    it, the first unreadable one is an error naming --skip-unreadable."""
    import torch

    from vitkit.errors import DataError
    from vitkit.evaluate.inspection import image_input

    kept: list[int] = []
    pixels: list = []
    skipped: list[tuple[str, str]] = []
    for i, source in enumerate(sources):
        if len(kept) == limit:
            break
        try:
            pixels.append(image_input(source, config, crop_pct))
        except DataError as err:
            if not skip:
                raise DataError(f"{err}; --skip-unreadable leaves such files out") from None
            skipped.append((str(source), str(err)))
            continue
        kept.append(i)
    if not kept:
        raise DataError(
            f"none of the {len(sources)} images could be read ({skipped[0][1]} ...)"
            if skipped
            else "no images to inspect"
        )
    return kept, torch.stack(pixels), skipped


def training_images(metadata: dict, checkpoint, files, channels: int) -> tuple[list[bool] | None, str]:
    """(which of `files` the checkpoint trained on, its training data in words); None where that cannot be told."""
    from vitkit.data.spec import DataSpec, without_advice
    from vitkit.errors import DataError

    try:
        spec = DataSpec.from_checkpoint(metadata, checkpoint)
        trained = spec.training_images_among(files, channels=channels)
        change = (
            None
            if trained is None
            else spec.changed(spec.train_split, spec.open(spec.train_split, channels=channels, image_size=0))
        )
    except DataError as err:  # no record (not trained by vitkit train), or the data has moved
        return None, f"training data unknown: {without_advice(err)}"
    where = f"training data: {spec.where}, split {spec.train_split}"
    if change is not None:  # a file moved out of the training split since it trained is not told
        return None, f"{where}, {changed_note(change)}"
    if trained is None:
        return None, f"{where}, not image by image"
    for record in metadata.get("pretrained_on") or []:  # and the images of the checkpoints it was fine-tuned from
        try:
            start = DataSpec.from_checkpoint({"data": record}, checkpoint)
            theirs = start.training_images_among(files, channels=channels)
        except DataError:  # moved, or on another machine
            return trained, f"{where}; pre-trained on {record.get('path') or record.get('name')}, not there to check"
        trained = trained if theirs is None else [a or b for a, b in zip(trained, theirs)]
        where += f"; pre-trained on {start.where}, split {start.train_split}"
    return trained, where


def changed_note(change: tuple[dict, dict]) -> str:
    from vitkit.data.split import described

    return f"changed since the checkpoint was trained ({described(change[0])} then, {described(change[1])} now)"


def recorded_images(request: InspectRequest, metadata: dict, config) -> Chosen:
    """`request.num_images` images of a split of the checkpoint's data (`request.split`, `request.data`), taken in turn from
    each class and read as `vitkit eval` reads them (the checkpoint's crop_pct)."""
    from vitkit.data import DataSpec, copies

    spec = DataSpec.from_checkpoint(metadata, request.checkpoint, data=request.data)
    name, split = _inspected_split(spec, request.split, config)
    pixels, part, order, skipped = _read_in_class_turn(split, request, config, crop_pct(metadata))
    truth = [split.label_text(label) for label in part.labels]
    files = part.paths is not None and all(isinstance(p, (str, os.PathLike)) for p in part.paths)
    comparable = part.paths is not None and all(copies.comparable(p) for p in part.paths)  # files and tar members
    shown = [str(p) for p in part.paths] if files or comparable else [f"{name} image {i}" for i in order]
    where = f"the {name} split of {spec.where}"
    seen, training_data = _seen_in_training(request, metadata, config, spec, name, part, comparable)
    return Chosen(pixels, truth, seen, shown, where, training_data, skipped)


def _inspected_split(spec, split: str | None, config):
    """(name, split): `split`, else test where the data has one, else val (else val's error says what there is)."""
    from vitkit.errors import DataError

    size = config.image_size
    if split is not None:
        return split, spec.open(split, channels=config.in_chans, image_size=size)
    try:
        return "test", spec.open("test", channels=config.in_chans, image_size=size)
    except DataError:  # no test split: val, where the data has one (else its error says what there is)
        return "val", spec.open("val", channels=config.in_chans, image_size=size)


def _read_in_class_turn(split, request: InspectRequest, config, crop_pct: float):
    """(pixels, the subset of `split` read, its indices in `split`, the unreadable left out): up to `request.num_images`
    images taken in turn from each class."""
    import numpy as np
    import torch

    from vitkit.data import eval_batches
    from vitkit.data.augment import resize_center_crop

    labels = split.labels.numpy()
    in_class = (lambda k: labels[:, k]) if split.multi_label else (lambda k: labels == k)  # several: in each of them
    by_class = [np.flatnonzero(in_class(k)) for k in range(len(split.class_names))]
    order = [c[i] for i in range(max(map(len, by_class), default=0)) for c in by_class if i < len(c)]
    order = list(dict.fromkeys(order))  # an image of several classes is shown once
    if split.paths is None:  # arrays in memory: read as eval reads them
        order = order[: request.num_images]
        part = split.subset(np.array(order, dtype=np.int64))
        batches = eval_batches(
            part,
            request.batch_size,
            torch.device("cpu"),
            channels=config.in_chans,
            size=config.image_size,
            crop_pct=crop_pct,
            background=config.background,
        )
        pixels = torch.cat([resize_center_crop(x.float() / 255.0, config.image_size, crop_pct) for x, _ in batches])
        return pixels, part, order, []
    # files and shard records, each read once
    sources = [split.paths[i] for i in order]
    kept, pixels, skipped = readable(sources, config, crop_pct, request.skip_unreadable, request.num_images)
    order = [order[i] for i in kept]
    return pixels, split.subset(np.array(order, dtype=np.int64)), order, skipped


def _seen_in_training(request: InspectRequest, metadata: dict, config, spec, name: str, part, comparable: bool):
    """(which images of `part`, of split `name`, the model trained on, or None; the training data in words)."""
    from vitkit.data import copies

    training = f"training data: {spec.where}, split {spec.train_split}"
    by_split = [name == spec.train_split] * len(part.labels)
    # the checkpoint's own data: its record says which split trained
    if request.data is None:
        train = spec.open(spec.train_split, channels=config.in_chans, image_size=config.image_size)
        if (change := spec.changed(spec.train_split, train)) is not None:  # a file moved out of it since: not told
            return None, f"{training}, {changed_note(change)}"
        if name == spec.train_split:
            return by_split, training
        if part.images is not None and train.images is not None:  # arrays in memory (IDX): compared by pixels
            return [t is not None for t in copies.pixel_twins(train.images, part.images)], training
        if not comparable:  # Parquet rows: kept apart by split, copies not compared
            return by_split, f"{training}, {COPIES_NOT_CHECKED}"
    if not comparable:
        return None, f"{training}, not image by image"
    # the images checked against the training images the checkpoint records, by path and by content (a copy of a
    # training image in test/ was seen in training); for other data (--data), not against that data's own train split
    # (which said of a model's held-out images that it had trained on them)
    seen, described = training_images(metadata, request.checkpoint, part.paths, config.in_chans)
    # too many training files to compare: the split is all that is known
    if seen is None and request.data is None:
        return by_split, f"{training}, {COPIES_NOT_CHECKED}"
    return seen, described
