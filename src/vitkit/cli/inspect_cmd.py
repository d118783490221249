"""`vitkit inspect CKPT --images PATH --out DIR`: the paper's Fig. 7 and attention maps for a checkpoint."""

from __future__ import annotations

import argparse
import os

DESCRIPTION = """\
Look inside a trained ViT (paper §4.5, App. D.7-D.8). Writes to DIR:
  patch_embedding_filters.png  first principal components of the patch embedding (Fig. 7 left)
  pos_embed_similarity.png     cosine similarity of each position embedding to all others (Fig. 7 centre)
  mean_attention_distance.png  attention distance in pixels per head against depth (Fig. 7 right)
  attention_rollout.png        attention rollout from the output token over --show images spread over the class
                               folders, each with its true (folder) and predicted label, "trained on" where
                               it is one of the model's training images, and a colour bar
  last_layer_attention.png     the last layer's raw attention per head over the same images
  inspection.npz, inspection.json  the numbers behind every figure
Without --images, the images are a split of the data the checkpoint records (test where it has one, else val; any
format vitkit reads, also IDX files and shards), taken in turn from each class and read as `vitkit eval` reads
them. Images are resized to the model's resolution (or --image-size) and normalised with its mean and std. The figures,
the printed line and inspection.json say which images, how many, and how many of them the model trained on.
"""

COPIES_NOT_CHECKED = "copies not checked"  # the split is known, not whether it holds copies of training images


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "inspect",
        help="draw the paper's Fig. 7 (filters, position embeddings, attention distance) and attention maps",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "checkpoint",
        metavar="CKPT",
        help="run directory, its final/, a step checkpoint, or a checkpoint file of any format",
    )
    p.add_argument(
        "--images",
        nargs="+",
        metavar="PATH",
        help="image files and/or folders (searched recursively, sorted); default: "
        "a split of the data the checkpoint records (--split)",
    )
    p.add_argument(
        "--split",
        choices=("train", "val", "test"),
        default=None,
        help="without --images: the split of the checkpoint's data (default test where the data has one, else val)",
    )
    p.add_argument(
        "--data", metavar="PATH", help="without --images: this data instead of the data the checkpoint records"
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="folder for the figures and numbers (created; files in it are replaced)",
    )
    p.add_argument(
        "--num-images",
        type=int,
        default=128,
        metavar="N",
        help="images averaged for the attention distance (default 128, as in the paper)",
    )
    p.add_argument(
        "--show", type=int, default=8, metavar="N", help="images drawn with their attention maps (default 8)"
    )
    p.add_argument(
        "--components",
        type=int,
        default=28,
        metavar="K",
        help="principal components of the filters to draw (default 28)",
    )
    p.add_argument(
        "--image-size",
        type=int,
        nargs="+",
        default=None,
        metavar="PX",
        help="inspect at this resolution (H [W]); position embeddings are interpolated (paper §3.2)",
    )
    p.add_argument(
        "--batch-size", type=int, default=32, help="images per forward pass; lower it to bound memory (default 32)"
    )
    p.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda (default cpu)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (default: torch's choice)")
    p.add_argument(
        "--skip-unreadable",
        action="store_true",
        help="leave out image files that cannot be read (named in inspection.json, counted in the captions) instead of "
        "stopping at the first",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from vitkit.checkpoint import load_with_metadata, untrained_head
    from vitkit.devices import pick_device
    from vitkit.errors import ConfigError
    from vitkit.evaluate.inspection import inspect_model, normalize
    from vitkit.plots.figures import write_report

    if args.threads:
        torch.set_num_threads(args.threads)
    for name in ("num_images", "show", "components", "batch_size"):
        if getattr(args, name) <= 0:
            raise ConfigError(f"--{name.replace('_', '-')}: expected a positive number, got {getattr(args, name)}")
    image_size = None
    if args.image_size is not None:
        if len(args.image_size) > 2:
            raise ConfigError(f"--image-size: expected H or H W, got {len(args.image_size)} numbers")
        image_size = tuple(args.image_size) if len(args.image_size) == 2 else args.image_size[0]
    model, metadata = load_with_metadata(args.checkpoint, image_size=image_size)
    model = model.to(pick_device(args.device))
    config = model.config
    if not hasattr(model, "forward_features_explicit"):
        raise ConfigError(
            f"{args.checkpoint}: a {type(model).__name__} has no attention or position embeddings to inspect; "
            "vitkit inspect reads Vision Transformers"
        )
    if args.images and (args.split or args.data):
        raise ConfigError("--split and --data choose the images when --images is not given; drop them or --images")
    read = _given_images if args.images else _recorded_images
    pixels, truth, seen, shown, where, training_data, skipped = read(args, metadata, config)
    if skipped:
        where += f" ({len(skipped)} unreadable left out)"
    x = normalize(pixels, config)
    results = inspect_model(model, x, num_show=args.show, num_components=args.components, batch_size=args.batch_size)
    trained = None if seen is None else sum(seen)
    titles = _titles(
        model,
        x[: args.show],
        truth[: args.show],
        metadata.get("class_names"),
        seen,
        untrained_head(metadata, args.checkpoint, model) is None,
    )
    counted = (
        "from its training split" if training_data.endswith(COPIES_NOT_CHECKED) else "in this model's training data"
    )
    caption = f"{len(pixels)} images from {where}; " + (
        f"{trained or 'none'} of them {counted}" if trained is not None else "not checked against its training data"
    )
    info = {
        "checkpoint": str(args.checkpoint),
        "images": [str(p) for p in args.images] if args.images else [where],
        "num_images": len(pixels),
        "in_training_data": trained,  # None: not checked (see training_data)
        "training_data": training_data,
        "image_size": list(config.image_size),
        "grid_size": list(config.grid_size),
        "patch_size_pixels": list(config.total_patch_size),
        "hybrid": config.backbone is not None,
        "shown": [
            {"image": f, "label": t, "in_training_data": None if seen is None else seen[i]}
            for i, (f, t) in enumerate(zip(shown[: args.show], titles or [""] * args.show))
        ],
        **({"unreadable": [{"path": path, "error": error} for path, error in skipped]} if skipped else {}),
    }
    written = write_report(results, pixels, args.out, info=info, titles=titles, caption=caption)
    distance = results["mean_attention_distance"].mean(dim=1)
    print(
        f"inspected {caption} ({training_data}), at {config.image_size[0]}x{config.image_size[1]} "
        f"(a {config.grid_size[0]}x{config.grid_size[1]} grid of {config.total_patch_size[0]}x{config.total_patch_size[1]}-px patches)"
    )
    print("mean attention distance per layer (px): " + " ".join(f"{d:.1f}" for d in distance.tolist()))
    for path in written:
        print(f"wrote {path}")
    return 0


def _given_images(args, metadata: dict, config):
    """As `_recorded_images`, for the files and folders of --images (true class: the folder an image is in, where that
    names one of the model's classes)."""
    from vitkit.data.images import find_images, spread_over_folders

    candidates = spread_over_folders(find_images(args.images))  # the shown images cover the classes
    kept, pixels, skipped = _readable(candidates, config, _crop_pct(metadata), args.skip_unreadable, args.num_images)
    files = [candidates[i] for i in kept]
    names = metadata.get("class_names") or [str(i) for i in range(config.num_classes)]
    truth = [f.parent.name if f.parent.name in names else "?" for f in files]
    seen, training_data = _training_images(metadata, args.checkpoint, files, config.in_chans)
    where = ", ".join(str(p) for p in args.images[:3]) + (
        f" and {len(args.images) - 3} more" if len(args.images) > 3 else ""
    )
    return pixels, truth, seen, [str(f) for f in files], where, training_data, skipped


def _crop_pct(metadata: dict) -> float:
    return (metadata.get("preprocess") or {}).get("crop_pct", 1.0)


def _readable(sources: list, config, crop_pct: float, skip: bool, limit: int):
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


def _training_images(metadata: dict, checkpoint, files, channels: int) -> tuple[list[bool] | None, str]:
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


def _recorded_images(args, metadata: dict, config):
    """(pixels in [0, 1], true class names, which the model trained on, what each is, where they are from, the training
    data in words, the unreadable files left out with --skip-unreadable) for `--num-images` images of a split of the checkpoint's data (`--split`, `--data`), taken in turn
    from each class and read as `vitkit eval` reads them (the checkpoint's crop_pct)."""
    import numpy as np
    import torch

    from vitkit.data import DataSpec, copies, eval_batches
    from vitkit.data.augment import resize_center_crop
    from vitkit.errors import DataError

    spec = DataSpec.from_checkpoint(metadata, args.checkpoint, data=args.data)
    size = config.image_size[0]
    if args.split is None:
        try:
            name, split = "test", spec.open("test", channels=config.in_chans, image_size=size)
        except DataError:  # no test split: val, where the data has one (else its error says what there is)
            name, split = "val", spec.open("val", channels=config.in_chans, image_size=size)
    else:
        name, split = args.split, spec.open(args.split, channels=config.in_chans, image_size=size)
    labels = split.labels.numpy()
    by_class = [np.flatnonzero(labels == k) for k in range(len(split.class_names))]
    order = [c[i] for i in range(max(map(len, by_class), default=0)) for c in by_class if i < len(c)]
    skipped: list[tuple[str, str]] = []
    crop_pct = _crop_pct(metadata)
    if split.paths is None:  # arrays in memory: read as eval reads them
        order = order[: args.num_images]
        part = split.subset(np.array(order, dtype=np.int64))
        batches = eval_batches(
            part, args.batch_size, torch.device("cpu"), channels=config.in_chans, size=size, crop_pct=crop_pct
        )
        pixels = torch.cat([resize_center_crop(x.float() / 255.0, config.image_size, crop_pct) for x, _ in batches])
    else:  # files and shard records, each read once
        kept, pixels, skipped = _readable(
            [split.paths[i] for i in order], config, crop_pct, args.skip_unreadable, args.num_images
        )
        order = [order[i] for i in kept]
        part = split.subset(np.array(order, dtype=np.int64))
    truth = [split.class_names[int(k)] for k in part.labels]
    files = part.paths is not None and all(isinstance(p, (str, os.PathLike)) for p in part.paths)
    comparable = part.paths is not None and all(copies.comparable(p) for p in part.paths)  # files and tar members
    shown = [str(p) for p in part.paths] if files or comparable else [f"{name} image {i}" for i in order]
    where = f"the {name} split of {spec.where}"
    training = f"training data: {spec.where}, split {spec.train_split}"
    by_split = [name == spec.train_split] * len(truth)
    if args.data is None:  # the checkpoint's own data: its record says which split trained
        train = spec.open(spec.train_split, channels=config.in_chans, image_size=size)
        if (change := spec.changed(spec.train_split, train)) is not None:  # a file moved out of it since: not told
            return pixels, truth, None, shown, where, f"{training}, {changed_note(change)}", skipped
        if name == spec.train_split:
            return pixels, truth, by_split, shown, where, training, skipped
        if part.images is not None and train.images is not None:  # arrays in memory (IDX): compared by pixels
            return (
                pixels,
                truth,
                [t is not None for t in copies.pixel_twins(train.images, part.images)],
                shown,
                where,
                training,
                skipped,
            )
        if not comparable:  # Parquet rows: kept apart by split, copies not compared
            return pixels, truth, by_split, shown, where, f"{training}, {COPIES_NOT_CHECKED}", skipped
    if not comparable:
        return pixels, truth, None, shown, where, f"{training}, not image by image", skipped
    # the images checked against the training images the checkpoint records, by path and by content (a copy of a
    # training image in test/ was seen in training); for other data (--data), not against that data's own train split
    # (which said of a model's held-out images that it had trained on them)
    seen, described = _training_images(metadata, args.checkpoint, part.paths, config.in_chans)
    if seen is None and args.data is None:  # too many training files to compare: the split is all that is known
        return pixels, truth, by_split, shown, where, f"{training}, {COPIES_NOT_CHECKED}", skipped
    return pixels, truth, seen, shown, where, described, skipped


def _titles(
    model, x, truth: list[str], class_names: list[str] | None, seen: list[bool] | None, trained_head: bool
) -> list[str] | None:
    """'true: CLASS / pred: CLASS' for each shown image (true: its label, or the class folder it is in, '?' where that
    names no class; no prediction from a head that never trained), with a third line 'trained on' for an image of the
    model's training split (`seen`, where known)."""
    import torch

    if not model.config.num_classes:
        return None
    marks = ["\ntrained on" if seen is not None and seen[i] else "" for i in range(len(truth))]
    if not trained_head:  # masked patch pre-training, a new zero head: its argmax is class 0, not a prediction
        return [f"true: {t}{m}" for t, m in zip(truth, marks)]
    names = class_names or [str(i) for i in range(model.config.num_classes)]
    with torch.no_grad():
        predicted = model(x.to(next(model.parameters()).device)).argmax(dim=1).tolist()
    return [f"true: {t}\npred: {names[p]}{m}" for t, p, m in zip(truth, predicted, marks)]
