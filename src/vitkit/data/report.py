"""What `vitkit data` reports of a dataset and writes from it: every split opened as training reads it
(`open_splits`), the summary's lines (`summary_lines`), the data as tar shards (`write_shards`) and a preview of
images as a labelled grid and an array (`write_samples`)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from vitkit.data.sources import SPLITS
from vitkit.errors import DataError


def open_splits(spec, shape) -> dict:
    """Every split of `spec` by name, opened for a model of `shape`; a split the data lacks: the reason, a string."""
    opened = {}
    for split in SPLITS:
        try:
            opened[split] = spec.open(split, channels=shape.in_chans, image_size=shape.image_size, flag=None)
        except DataError as err:
            opened[split] = str(err)
    return opened


def whole_splits(config, shape) -> dict:
    """The splits the data holds of its own, each whole (nothing held out of train), by name; data without splits of
    its own: all of its images, under None."""
    from vitkit.data.sources import is_flat
    from vitkit.data.spec import DataSpec

    spec = DataSpec.from_config(dataclasses.replace(config.data, val_fraction=0.0))
    opened = open_splits(spec, shape)
    whole = {split: images for split, images in opened.items() if not isinstance(images, str)}
    return {None: whole["train"]} if config.data.path and is_flat(spec.path) else whole


def summary_lines(s: dict, opened: dict) -> list[str]:
    """The summary `describe` made of the splits `opened`, as `vitkit data` prints it: the data, its splits, the
    sizes and channels of its images, and any copies of training images in the other splits."""
    lines = [
        f"data     {s['path'] or '(default: Fashion-MNIST)'}",
        f"format   {s['format']}",
        f"classes  {s['classes']}: {', '.join(s['class_names'][:12])}{' ...' if len(s['class_names']) > 12 else ''}"
        + (
            f" (several labels per image{', ' + s['labels_read'] if 'labels_read' in s else ''}: vitkit train picks "
            "train.objective=multi_label)"
            if s.get("multi_label")
            else ""
        ),
        *_named_hint(opened),
        *(_split_line(split, row) for split, row in s["splits"].items()),
        *(f"read     {note}" for note in s.get("read_as", [])),
        *_size_lines(s["sizes"]),
    ]
    return lines + _copies_lines(s, opened)


def _named_hint(opened: dict) -> list[str]:
    """Images without class folders (one class, "unlabeled") whose names start with their classes: the note that says
    so, with the data.name_pattern that reads them."""
    from vitkit.data.sources.folder import classes_in_names

    train = opened.get("train")
    if isinstance(train, str) or train is None or train.class_names != ["unlabeled"] or not train.paths:
        return []
    hint = classes_in_names(train.paths)
    return [f"note     one class ('unlabeled': images without class folders): {hint[2:]}"] if hint else []


def _split_line(split: str, row: dict) -> str:
    if "missing" in row:
        return f"{split:<8} none ({row['missing']})"
    counts = list(row["per_class"].values())
    spread = (
        ""
        if not counts
        else f"{min(counts)} per class"
        if min(counts) == max(counts)
        else f"{min(counts)}-{max(counts)} per class"
    )
    part = "" if row.get("selection", "all") == "all" else f", {row['selection']}"
    return f"{split:<8} {row['images']:,} image{'s' * (row['images'] != 1)}, {spread} ({row['source']}{part})"


def _size_lines(z: dict) -> list[str]:
    looked = z["images"] + z.get("unreadable", 0)
    sample = f"all {looked:,} images" if looked == z["of"] else f"{looked:,} of {z['of']:,} images (a seeded sample)"
    if z.get("unreadable"):  # the figures are of the readable ones
        sample = f"the {z['images']:,} readable of {sample}"
    unread = (
        f"; {z['unreadable']:,} unreadable from their header (first {z['first_unreadable']}; a file damaged past its header "
        "is found when training reads it)"
        if z.get("unreadable")
        else ""
    )
    modes = ", ".join(f"{mode} {n}" for mode, n in sorted(z["modes"].items(), key=lambda kv: -kv[1]))
    return [
        f"sizes    {z['split']} split, {sample}: width {z['width'][0]}/{z['width'][1]:g}/{z['width'][2]}, "
        f"height {z['height'][0]}/{z['height'][1]:g}/{z['height'][2]} (min/median/max){unread}",
        f"channels {modes} (PIL modes of those images)",
    ]


def _copies_lines(s: dict, opened: dict) -> list[str]:
    """Copies of training images in the other splits (kept apart by folder: a copy counts as unseen), or why they
    were not looked for; then copies of one image under different labels, in any split."""
    from vitkit.data.summary import copies_warning, relabelled_warning

    lines = []
    if s["copies_of_training_images"] is None and sum(not isinstance(v, str) for v in opened.values()) > 1:
        why = (
            "Parquet rows: their bytes are not compared"
            if s["format"].startswith("Parquet")
            else "over 200,000 training images"
        )
        lines.append(f"copies   of training images in the other splits: not checked ({why})")
    for name, copies in (s["copies_of_training_images"] or {}).items():
        lines.append(f"warning  {copies_warning(name, copies)}")
    if s.get("copies_labelled_otherwise"):
        lines.append(f"warning  {relabelled_warning(s['copies_labelled_otherwise'])}")
    return lines


def refuse_shards_in(out: Path, source: str | os.PathLike | None = None) -> None:
    """A DataError where `out` cannot take the shards: the shards replace the folder whole (`write_shards`), so it must
    be new, empty or what a stopped `--to-shards` left there, and neither inside the data `source` nor holding it.
    Checked before reading anything, and again by `write_shards` under the folder's lock."""
    from vitkit.data.sources import written_by_shards

    if out.exists() and not out.is_dir():
        raise DataError(f"--to-shards {out}: is a file; name a new or empty folder to write the shards into")
    if not out.is_dir():
        return _refuse_around(out, source)
    left = sorted(set(os.listdir(out)) - written_by_shards(out))
    if held := [name for name in left if Path(name).suffix in (".tar", ".parquet")]:
        raise DataError(
            f"--to-shards {out}: the folder already holds shards ({', '.join(held[:3])}{', ...' * (len(held) > 3)}); "
            "write to an empty or new folder"
        )
    if "classes.txt" in left:  # someone's own list of names, which the shards' would replace
        raise DataError(
            f"--to-shards {out}: the folder already holds classes.txt, which the shards' class names would "
            "replace; write to an empty or new folder"
        )
    if left:
        more = f" and {len(left) - 1} more" if len(left) > 1 else ""
        raise DataError(
            f"--to-shards {out}: the folder holds {left[0]}{more}, and the shards replace the folder whole; "
            "write to an empty or new folder (nothing was changed)"
        )
    _refuse_around(out, source)


def _refuse_around(out: Path, source: str | os.PathLike | None) -> None:
    """A DataError where `out` is inside the data folder `source` (the shards would become part of the data) or holds
    it (replacing the folder would remove the data); both by where they are, links followed."""
    if not source or not Path(source).is_dir():
        return
    data, target = Path(source).resolve(), out.resolve()
    if target == data or data in target.parents:
        raise DataError(
            f"--to-shards {out}: is inside the data it is written from ({source}), which it would change; write the "
            "shards to a folder outside it"
        )
    if target in data.parents:
        raise DataError(
            f"--to-shards {out}: holds the data it is written from ({source}), and the shards replace the folder "
            "whole; write them to a new folder outside it"
        )


def write_shards(
    sets: dict, out: Path, per_shard: int, seed: int, on_error: str = "skip", say: Callable[[str], None] = print
) -> dict:
    """Write each set as tar shards into `out` (SPLIT-NNNNNN.tar; a set without a split: shard-NNNNNN.tar) + classes.txt,
    saying a line per set. The folder is written whole: staged beside `out` under its lock (a second writer is refused
    while it is held) and renamed into place when every split is in it, so `out` holds one dataset or none."""
    from vitkit.data.loader import BadFiles
    from vitkit.files import atomic_dir

    names = {tuple(images.class_names) for images in sets.values()}
    if len(names) > 1:
        raise DataError(
            f"--to-shards: the splits name different classes ({'; '.join(', '.join(n) for n in sorted(names))}); "
            "write one with --split"
        )
    bad = BadFiles(on_error, hint="; remove or replace it, or skip such files (data.on_error=skip)")
    with atomic_dir(out) as staged:
        refuse_shards_in(out)  # again, under the lock: a writer that finished meanwhile is not replaced
        with _named_at(staged, out):
            written = _write_sets(sets, staged, out, per_shard, seed, bad, say)
    say(f"wrote {out / 'classes.txt'}: {len(next(iter(names)))} class names")
    return {
        "dir": str(out),
        "files": sum(w["files"] for w in written.values()),
        "images": sum(w["images"] for w in written.values()),
        **({"unreadable": [{"path": p, "error": e} for p, e in bad.files.items()]} if len(bad) else {}),
        "sets": written,
    }


def _write_sets(sets: dict, staged: Path, out: Path, per_shard: int, seed: int, bad, say) -> dict:
    """Each set as shards in `staged` (to become `out`), a line said per set; what was written, by shard prefix."""
    from vitkit.data import sources as shards

    written = {}
    for split, images in sets.items():
        prefix, before = split or "shard", len(bad)
        files = shards.write_tar_shards(
            images, staged, per_shard=per_shard, seed=seed, prefix=prefix, finish=False, bad=bad
        )
        written[prefix] = _shard_set(images, len(files), left_out=len(bad) - before)
        say(_shards_line(split, images, written[prefix], out, prefix))
    shards.finish_writing(staged)
    return written


@contextmanager
def _named_at(staged: Path, out: Path):
    """An OSError about a file in `staged` names it where it will be, in `out`: the staging folder is gone after."""
    try:
        yield
    except OSError as err:
        if err.filename and Path(err.filename).parent == staged:
            err.filename = str(out / Path(err.filename).name)
        raise


def _shard_set(images, files: int, left_out: int) -> dict:
    return {
        "files": files,
        "images": len(images) - left_out,
        "source": images.source,
        "selection": images.selection,
        "unreadable_left_out": left_out,
    }


def _shards_line(split: str | None, images, written: dict, out: Path, prefix: str) -> str:
    what = f"of the {split} split ({images.source}, {images.selection})" if split else f"(all of {images.source})"
    left_out = written["unreadable_left_out"]
    unread = f" ({left_out} unreadable left out)" if left_out else ""
    return (
        f"wrote {written['images']:,} images {what}{unread} as {written['files']} tar shard(s): "
        f"{out}/{prefix}-{{000000..{written['files'] - 1:06d}}}.tar"
    )


def write_samples(out: Path, pixels, captions: list[str], which: str) -> dict:
    """`pixels` ((N, C, H, W) uint8) as OUT/samples.npy and a grid captioned `captions` under the title `which`
    (what they are) as OUT/samples.png; what was written, for the summary."""
    import numpy as np

    from vitkit.data.summary import sample_grid
    from vitkit.files import atomic_path

    array = pixels.numpy()
    with atomic_path(out / "samples.npy") as tmp:
        with open(tmp, "wb") as f:
            np.save(f, array)
    with atomic_path(out / "samples.png") as tmp:
        sample_grid(array, captions, title=which[0].upper() + which[1:]).save(tmp, format="PNG")
    return {
        "png": str(out / "samples.png"),
        "npy": str(out / "samples.npy"),
        "images": len(pixels),
        "shape": list(pixels.shape),
    }
