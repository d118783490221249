"""What a dataset holds, for `vitkit data`: its format, classes, images per class and split, image sizes and
channels (`describe`), and a labelled grid of images (`sample_grid`)."""

from __future__ import annotations

import io
import textwrap
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw, UnidentifiedImageError

from vitkit.errors import DataError, first_line

from .copies import pixel_twins, relabelled, relabelled_pixels, training_twins
from .images import BOMB_ADVICE, MAX_PIXELS, ORIENTATION, Record
from .sources import data_root, idx, shards
from .sources.folder import metadata_list
from .sources.lists import split_lists
from .split import SPLITS, Split, split_folders

SIZE_SAMPLE = 1000  # image headers read for the size and channel figures (a seeded choice beyond that)


def data_format(path, name: str = "auto") -> str:
    if name == "synthetic":
        return "synthetic"
    if path is None:
        return "IDX (Fashion-MNIST)"
    if shards.is_sharded(path):
        files = shards.shard_files(path)
        kind = "Parquet" if files and files[0].suffix.lower() == ".parquet" else "tar shards"
        return f"{kind} ({len(files)} file{'s' * (len(files) != 1)})"
    p = data_root(path)
    if p.is_file():
        return f"{p.suffix.lstrip('.').upper()} list" + (
            f" ({p.name}, the one list in the folder)" if p != Path(path) else ""
        )
    if idx.is_idx_dir(p):
        return "IDX"
    if lists := split_lists(p):
        return "lists by split (" + ", ".join(f.name for f in lists.values()) + ")"
    labelled = {m.name for d in (p, *split_folders(p).values()) if (m := metadata_list(d))}
    return "image folder" + (f" (labels in {', '.join(sorted(labelled))})" if labelled else "")


def _header(item) -> tuple[int, int, str]:
    """(width, height, PIL mode) from an image's header, without decoding its pixels; upright, as it is decoded (an EXIF
    orientation of 5-8 stores the image on its side)."""
    try:
        with warnings.catch_warnings():
            # the limit below is vitkit's, as training's
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(item.read()) if isinstance(item, Record) else item)
    except Image.DecompressionBombError:
        raise DataError(f"more pixels than the limit of {MAX_PIXELS:,} ({BOMB_ADVICE})") from None
    with image:
        if image.width * image.height > MAX_PIXELS:
            raise DataError(f"{image.width}x{image.height} pixels is over the limit of {MAX_PIXELS:,} ({BOMB_ADVICE})")
        turned = image.getexif().get(ORIENTATION, 1) in (5, 6, 7, 8)
        return (image.height, image.width, image.mode) if turned else (image.width, image.height, image.mode)


def image_sizes(split: Split, sample: int = SIZE_SAMPLE) -> dict:
    """min/median/max width and height and the PIL modes of (a seeded sample of) a split's images."""
    if split.images is not None:
        n, c, h, w = split.images.shape
        return {"images": n, "of": n, "width": [w, w, w], "height": [h, h, h], "modes": {("L" if c == 1 else "RGB"): n}}
    chosen = np.sort(np.random.default_rng(0).permutation(len(split))[:sample])
    sizes, modes, unreadable, first = [], Counter(), 0, None
    for i in chosen:
        try:
            w, h, mode = _header(split.paths[i])
        # an unreadable file: counted and the first named, training's data.on_error deals with it
        except Exception as err:
            unreadable += 1
            # not its BytesIO
            why = "not an image Pillow reads" if isinstance(err, UnidentifiedImageError) else first_line(err)
            # a record names itself
            first = first or (why if why.startswith(f"{split.paths[i]}:") else f"{split.paths[i]}: {why}")
            continue
        sizes.append((w, h))
        modes[mode] += 1
    if not sizes:
        raise DataError(f"{split.source}: none of the {len(chosen)} images looked at could be read ({first})")
    w, h = np.array(sizes).T
    stats = lambda v: [int(v.min()), float(np.median(v)), int(v.max())]
    return {
        "images": len(sizes),
        "of": len(split),
        "width": stats(w),
        "height": stats(h),
        "modes": dict(modes),
        "unreadable": unreadable,
        **({"first_unreadable": first} if first else {}),
    }


def describe(splits: dict[str, Split | str], sizes_of: str, path=None, name: str = "auto") -> dict:
    """The summary of a dataset from its opened splits (a split that cannot be opened: the reason, a string)."""
    opened = {s: v for s, v in splits.items() if isinstance(v, Split)}
    if sizes_of not in opened:
        # why it cannot be opened names the data; the splits it has are the choice
        other = f"; choose one with --split {next(iter(opened))}" if opened else ""
        raise DataError(splits.get(sizes_of, f"the {sizes_of} split: not opened") + other)
    names = opened[sizes_of].class_names
    rows = {}
    for s in SPLITS:
        if s not in splits:
            continue
        if isinstance(splits[s], str):
            rows[s] = {"missing": splits[s]}
            continue
        counts = splits[s].class_counts()
        rows[s] = {
            "images": len(splits[s]),
            "source": splits[s].source,
            "selection": splits[s].selection,
            "per_class": {n: int(c) for n, c in zip(splits[s].class_names, counts)},
        }
    return {
        "path": None if path is None else str(path),
        "format": data_format(path, name),
        "classes": len(names),
        "class_names": names,
        "multi_label": opened[sizes_of].multi_label,  # each image a list of labels: images per class count each once
        **({"labels_read": opened[sizes_of].labels_read} if opened[sizes_of].labels_read else {}),
        "read_as": list(dict.fromkeys(v.read_as for v in opened.values() if v.read_as)),
        "splits": rows,
        "sizes": {"split": sizes_of, **image_sizes(opened[sizes_of])},
        "copies_of_training_images": copies_of_training_images(opened),
        "copies_labelled_otherwise": copies_labelled_otherwise(opened),
    }


def copies_of_training_images(splits: dict[str, Split]) -> dict[str, dict] | None:
    """{split: {"images": n, "example": [its image, the training image]}} for val and test images byte-identical to a
    training image: splits are kept apart by folder, list, shard or file, so such a copy is scored as unseen. Files
    and tar shard members by their bytes (`copies.training_twins`), images in memory (IDX) by their pixels
    (`copies.pixel_twins`). None: not checked (Parquet rows, whose bytes are not compared; too many training images)."""
    train = splits.get("train")
    held = {name: split for name in ("val", "test") if isinstance(split := splits.get(name), Split) and len(split)}
    if not held or not isinstance(train, Split):  # nothing to compare: no training image is looked at
        return {}
    found = {}
    for name, split in held.items():
        twins = held_out_twins(train, split, name)
        if twins is None:
            return None
        if copies := [pair for pair in twins if pair is not None]:
            found[name] = {"images": len(copies), "example": list(copies[0])}
    return found


def copies_labelled_otherwise(splits: dict[str, Split]) -> dict | None:
    """Byte-identical images under different labels, in any of `splits` (one image filed under two classes, or given
    two sets of classes): {"images": n, "groups": g, "example": [[image, its label], [its copy, that label]]}, {} where
    there are none. None: not checked (Parquet rows, too many images). Files and shard members by their bytes,
    images in memory by their pixels."""
    opened = {name: split for name, split in splits.items() if isinstance(split, Split) and len(split)}
    if not opened:
        return {}
    parts = list(opened.values())
    labels = [label for split in parts for label in _label_texts(split)]
    if all(split.images is not None for split in parts):
        names = [f"{name} image {i}" for name, split in opened.items() for i in range(len(split))]
        groups = relabelled_pixels(torch.cat([split.images for split in parts]), labels)
    elif all(split.paths is not None for split in parts):
        names = [str(path) for split in parts for path in split.paths]
        groups = relabelled([path for split in parts for path in split.paths], labels)
    else:  # arrays beside files
        return None
    if groups is None:
        return None
    if not groups:
        return {}
    first = groups[0]
    other = next(i for i in first if labels[i] != labels[first[0]])
    return {
        "images": sum(map(len, groups)),
        "groups": len(groups),
        "example": [[names[first[0]], labels[first[0]]], [names[other], labels[other]]],
    }


def _label_texts(split: Split) -> list[str]:
    """Each image's label as words (its class, or its classes joined by '+')."""
    if split.multi_label:
        return [split.label_text(row) for row in split.labels]
    return [split.class_names[k] for k in split.labels.tolist()]


def relabelled_warning(copies: dict) -> str:
    """The warning `vitkit data` and `train` give of images filed under two labels (copies_labelled_otherwise)."""
    n, groups, ((image, label), (copy, other)) = copies["images"], copies["groups"], copies["example"]
    return (
        f"{n:,} files are byte-identical copies of {groups:,} image{'s' * (groups != 1)} under different labels "
        f"(e.g. {image} as {label} = {copy} as {other}): one image, two answers, so training learns noise and a "
        "figure counts one answer wrong; keep each image under its one right label"
    )


def copies_warning(name: str, copies: dict) -> str:
    """The warning `vitkit data` and `train` give of a split's copies of training images (copies_of_training_images)."""
    n, (held, trained) = copies["images"], copies["example"]
    return (
        f"{n:,} {name} image{'s are' if n != 1 else ' is'} byte-identical to training images (e.g. {held} = {trained}): a figure "
        f"on {name} scores {'them' if n != 1 else 'it'} as unseen; remove such copies"
    )


def held_out_twins(train: Split, held: Split, name: str = "held-out") -> list[tuple[str, str] | None] | None:
    """For each image of `held`, (it, the training image it is a copy of), else None; None: not checked (see
    copies_of_training_images)."""
    if train.images is not None and held.images is not None:
        return [
            None if t is None else (f"{name} image {i}", f"train image {t}")
            for i, t in enumerate(pixel_twins(train.images, held.images))
        ]
    if train.paths is None or held.paths is None:
        return None
    twins = training_twins(train.paths, held.paths)
    return None if twins is None else [None if t is None else (str(p), str(t)) for p, t in zip(held.paths, twins)]


def sample_grid(
    pixels: np.ndarray, labels: list[str], columns: int = 8, tile: int = 112, title: str | None = None
) -> Image.Image:
    """(N, C, H, W) uint8 images as one PNG-ready grid, each tile scaled to `tile` px with its label below; `title`
    (which images these are) across the top."""
    n, c, h, w = pixels.shape
    scale = max(1, tile // max(h, w))
    cols = min(columns, n)
    rows = -(-n // cols)
    tw, th, caption = w * scale, h * scale, 14
    header = textwrap.wrap(title, max(20, cols * tw // 6)) if title else []
    top = 14 * len(header) + (4 if header else 0)
    grid = Image.new("RGB", (cols * tw, top + rows * (th + caption)), "white")
    draw = ImageDraw.Draw(grid)
    font = _font()
    for i, line in enumerate(header):
        draw.text((2, 2 + 14 * i), line, fill="black", font=font)
    for i in range(n):
        image = pixels[i].transpose(1, 2, 0)
        image = Image.fromarray(image[..., 0] if c == 1 else image).convert("RGB").resize((tw, th), Image.NEAREST)
        x, y = (i % cols) * tw, top + (i // cols) * (th + caption)
        grid.paste(image, (x, y))
        draw.text((x + 2, y + th + 1), labels[i][: max(4, tw // 7)], fill="black", font=font)
    return grid


def _font():
    """A font with more than ASCII (class names such as "blü café"; Pillow's built-in bitmap font drew "bl? caf?"):
    matplotlib's DejaVu Sans, else Pillow's own scalable one."""
    from PIL import ImageFont

    try:
        from matplotlib import font_manager

        return ImageFont.truetype(font_manager.findfont("DejaVu Sans", fallback_to_default=True), 11)
    except Exception:  # no matplotlib font, no FreeType: Pillow's default
        return ImageFont.load_default()
