"""Where a list's images are: relative to the list, as written, or (Kaggle's layouts) below folders beside it, an id
taking an image suffix, a list written on Windows with its backslashes read as '/'. `find_listed` looks at a few names
spread over the list and says how it found them; the plan prints that."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import numpy as np

from vitkit.errors import DataError

from ..images import IMAGE_SUFFIXES


def find_listed(path: Path, listed: list[str], sample: int = 16) -> tuple[list[Path], str]:
    """The files a list names, and where they were found if not as named: relative to the list's folder, as written,
    or (Kaggle's layouts: train.csv beside train_images/, an id without its suffix, images in part_1/ and part_2/)
    below folders beside the list, an image suffix added to names without one; where at least half of `sample` names
    spread over the list are found so. A list whose images are not found is an error."""
    given = [Path(p) if os.path.isabs(p) else path.parent / p for p in listed]
    looked = [listed[i] for i in np.unique(np.linspace(0, len(listed) - 1, min(sample, len(listed))).astype(int))]
    if any(_is_file(Path(p) if os.path.isabs(p) else path.parent / p) for p in looked):
        return given, ""
    if os.sep == "/" and any("\\" in p for p in looked):  # a list written on Windows: train\cat\1.jpg
        paths, said = find_listed(path, [p.replace("\\", "/") for p in listed], sample)
        return paths, ", ".join(filter(None, ("'\\' in paths read as '/'", said)))
    ways = _ways(path, [p for p in looked if not os.path.isabs(p)])
    found = sum(any(_is_file(folder / (p + end)) for folder, end in ways) for p in looked if not os.path.isabs(p))
    if 2 * found < len(looked):
        some = f"only {found}" if found else "none"
        raise DataError(
            f"{path}: {some} of the {len(looked)} images looked at {'is' if not found else 'are'} found (e.g. "
            f"{given[0]}); paths in a list are relative to its folder ({path.parent}): write them so, or move the list "
            "beside the images"
        )
    paths = [Path(p) if os.path.isabs(p) else _first_file(p, ways) for p in listed]
    folders = list(
        dict.fromkeys(f"{os.path.relpath(folder, path.parent)}/" for folder, _ in ways if folder != path.parent)
    )
    ends = list(dict.fromkeys(repr(end) for _, end in ways if end))
    return paths, ", ".join(
        ([f"images below {' and '.join(folders)}"] if folders else [])
        + ([f"each file the listed name + {' or '.join(ends)}"] if ends else [])
    )


def _ways(path: Path, names: list[str]) -> list[tuple[Path, str]]:
    """(folder, suffix) pairs that find `names` beside the list (`find_listed`), in the order found; a name found in two
    folders (images/ and masks/) is one error."""
    ways: list[tuple[Path, str]] = []
    folders = _folders_beside(path)
    for name in names:
        if any(_is_file(folder / (name + end)) for folder, end in ways):
            continue
        hits = [(folder, end) for folder in folders for end in _ends(name) if _is_file(folder / (name + end))]
        if len({folder for folder, _ in hits}) > 1:
            raise DataError(
                f"{path}: {name} is found both below {hits[0][0].name}/ and below {hits[1][0].name}/; write each path "
                f"from the list's folder ({path.parent})"
            )
        ways += hits[:1]
    return ways


def _first_file(name: str, ways: list[tuple[Path, str]]) -> Path:
    """The first of `ways` that finds the file `name` names (with one way, without looking), else the first's."""
    if len(ways) > 1:
        return next(
            (folder / (name + end) for folder, end in ways if _is_file(folder / (name + end))),
            ways[0][0] / (name + ways[0][1]),
        )
    return ways[0][0] / (name + ways[0][1])


def _folders_beside(path: Path, most: int = 256) -> list[Path]:
    """The list's folder, up to `most` folders in it, then up to `most` folders beside it (Oxford-IIIT Pet's
    annotations/trainval.txt beside images/), not hidden, by name."""
    return [path.parent, *_folders_in(path.parent, most), *_folders_in(path.parent.parent, most, but=path.parent)]


def _folders_in(folder: Path, most: int, but: Path | None = None) -> list[Path]:
    """Up to `most` folders in `folder` (not hidden, not `but`), by name."""
    try:
        found = (d for d in itertools.islice(folder.iterdir(), 4 * most) if not d.name.startswith(".") and d != but)
        return sorted(d for d in found if d.is_dir())[:most]
    except OSError:
        return []


def _ends(name: str) -> tuple[str, ...]:
    """What may follow a listed name to name its file: nothing, or an image suffix where it has none (an id)."""
    if Path(name).suffix.lower() in IMAGE_SUFFIXES:
        return ("",)
    return ("", *IMAGE_SUFFIXES, *(end.upper() for end in IMAGE_SUFFIXES))


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte
        return False
