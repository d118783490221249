"""Which data a model trained on, and which data a command reads: the one split resolver of every command.

A `DataSpec` is the dataset's absolute path and how its splits are cut (which split trains, which
validates, the held-out `val_fraction` and its seed). Training records it in the checkpoint, with the
exact images of each split; every evaluation command starts from that record (`from_checkpoint`), so
`eval`, `fewshot`, `knn`, `linear-probe` and `finetune` read the images training meant, and `--data`
only replaces the path. `train_images` trains on a nested subset of the training split (paper Fig. 3-4).
`open` refuses a split the data does not have ("test" of a folder with only train/ and val/), naming the
splits it has and the flag that picks one.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vitkit.errors import DataError, first_line
from vitkit.paths import local_path

from .copies import training_twins
from .hub import dataset_folder, is_hub_dataset
from .sources import idx, open_split
from .sources.lists import Labelling
from .sources.synthetic import synthetic
from .split import MissingSplit, Split, described, first_of, same_images


def without_advice(err: Exception) -> str:
    """What `DataSpec.from_checkpoint`'s error says is wrong, without its advice to pass --data: for a caller that was
    given other data already, or that can do without."""
    return re.split(r"; (?:pass|name the data with) ", first_line(err))[0]


def trained_on(meta: dict) -> list[dict]:
    """Every data record a checkpoint's weights were trained on: its own, then those of the checkpoints it was started
    from (`pretrained_on`, which train and finetune keep), so that a fine-tuned model's pre-training images are known."""
    own = [meta["data"]] if isinstance(meta.get("data"), dict) and isinstance(meta["data"].get("splits"), dict) else []
    earlier = meta.get("pretrained_on")
    return own + [r for r in earlier if isinstance(r, dict)] if isinstance(earlier, list) else own


def absolute(path: str | os.PathLike | None) -> str | None:
    """`path` made absolute (~ expanded, `..` folded in), so a checkpoint's record holds wherever it is read from, also
    once the directory it was given from is gone (a kept `cwd/../data` needs `cwd`). Symbolic links are kept as named.
    A dataset hub name (hf://datasets/ORG/NAME) is its Parquet files' folder in huggingface_hub's cache."""
    if is_hub_dataset(path):
        return str(dataset_folder(os.fspath(path)))
    return None if path is None else os.path.abspath(local_path(path, DataError).expanduser())


@dataclass(frozen=True)
class DataSpec:
    path: str | None = None  # absolute; None: Fashion-MNIST from $VITKIT_DATA or /usr/share/datasets/fashion-mnist
    name: str = "auto"  # "auto" (what `path` holds) or "synthetic"
    train_split: str = "train"
    val_split: str = "val"
    val_fraction: float = 0.1  # share of the training images held out as "val" where the data has no val split
    split_seed: int = 0
    # how val is held out where the data has none (split.SPLIT_RULES): "stratified", or "random" (a record that names
    # no rule was cut at random: vitkit's only rule then)
    split_rule: str = "stratified"
    train_images: int | None = None  # only the first N of a seeded order of the training split (nested across N)
    label_column: str | None = None  # a list's column of the labels, where its header's names do not tell it
    group_column: str | None = None  # a list's column of each image's group: val is held out by whole groups
    name_pattern: str | None = None  # a regular expression whose first group in a loose image's file name is its class
    synthetic_size: int = 512
    synthetic_classes: int = 10
    # (checkpoint, its record of each split's images, its val_fraction) where this is the data it trained on: a
    # held-out split is then checked against the cut training kept apart (`open`)
    trained: tuple[str, dict, float] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_config(cls, data: Any) -> DataSpec:
        """The spec of a run config's `data` section (any object with these fields), its path made absolute."""
        fields = {f.name: getattr(data, f.name) for f in dataclasses.fields(cls) if hasattr(data, f.name)}
        path = fields.get("path")
        if path is None and fields.get("name", "auto") == "auto" and idx.default_dir().is_dir():
            path = idx.default_dir()  # record where Fashion-MNIST was, not "the default"
        return cls(**{**fields, "path": absolute(path)})

    @classmethod
    def from_checkpoint(
        cls,
        extra: dict,
        source: str | os.PathLike,
        *,
        data: str | os.PathLike | None = None,
        val_fraction: float | None = None,
        flag: str = "--data PATH",
    ) -> DataSpec:
        """The data a checkpoint's record (`extra["data"]`) names; `data` replaces its path, `val_fraction` its cut.

        A checkpoint that records no data needs `data`; recorded data that is gone is an error naming
        the path and `flag` (how the caller passes `data`), never a silent switch to another dataset."""
        recorded = extra.get("data")
        if data is None and not isinstance(recorded, dict):
            raise DataError(
                f"{source}: records no training data (not trained by vitkit train); name the data with {flag}"
            )
        # an export's record names its folder, not its path (`checkpoint.card.publishable`): never the default data
        if data is None and "path" not in recorded and recorded.get("name") != "synthetic":
            raise DataError(
                f"{source}: records its training data by the folder's name only ({recorded.get('folder', '?')}: an "
                f"export keeps no local paths); name the data with {flag}"
            )
        known = {f.name for f in dataclasses.fields(cls)} - {"trained"}
        fields = {k: v for k, v in (recorded or {}).items() if k in known}
        if isinstance(recorded, dict) and "split_rule" not in recorded:
            # written before vitkit stratified its hold-out: cut again as it was then, the same images
            fields["split_rule"] = "random"
        if (
            isinstance(recorded, dict)
            and isinstance(recorded.get("splits"), dict)
            and (data is None or absolute(data) == fields.get("path"))
        ):
            fields["trained"] = (str(source), recorded["splits"], fields.get("val_fraction", cls.val_fraction))
        if data is not None:  # the data given wins: what its path holds, whatever kind the record names
            fields["path"], fields["name"] = absolute(data), "auto"
        elif fields.get("path") is not None and not Path(fields["path"]).exists():
            raise DataError(
                f"{fields['path']}: the data {source} was trained on is not there (moved, or another machine); "
                f"pass {flag}"
            )
        if val_fraction is not None:
            fields["val_fraction"] = val_fraction
        return cls(**fields)

    @property
    def where(self) -> str:
        """The path for reports: the dataset's absolute path, "synthetic", or Fashion-MNIST's place."""
        return "synthetic" if self.name == "synthetic" else self.path or str(idx.default_dir().absolute())

    def open(
        self,
        split: str,
        *,
        channels: int,
        image_size: int | tuple[int, int],
        flag: str | None = "--split",
        hold_out: str = "--val-fraction",
    ) -> Split:
        """One split, synthetic images made at `image_size` (H, W), one side: square. A split the data lacks is a DataError naming the splits it has, `flag` (the option that
        picks another; None: the splits it has alone) and `hold_out` (the option that holds part of train out as "val")."""
        opened = self._open(split, channels=channels, image_size=image_size, flag=flag, hold_out=hold_out)
        if opened.held_out and self.trained is not None:
            self._check_held_out(split, opened, hold_out)
        if split == self.train_split and self.train_images is not None:
            return first_of(opened, self.train_images, self.split_seed)
        return opened

    def _open(
        self, split: str, *, channels: int, image_size: int | tuple[int, int], flag: str | None, hold_out: str
    ) -> Split:
        if self.name == "synthetic":
            size = self.synthetic_size if split == "train" else max(self.synthetic_size // 4, self.synthetic_classes)
            return synthetic(self.synthetic_classes, size, channels, image_size, self.split_seed, split)
        try:
            return open_split(
                self.path,
                split,
                channels=channels,
                val_fraction=self.val_fraction,
                seed=self.split_seed,
                rule=self.split_rule,
                labelling=Labelling(self.label_column, self.group_column, self.name_pattern),
            )
        except MissingSplit as err:
            if flag is None:
                raise DataError(str(err)) from None
            if "val" in err.available and split != "val":
                raise DataError(f"{err}; choose one with {flag} val") from None
            raise DataError(
                f"{err}; hold part of train out as 'val' with {hold_out} 0.1"
                + (f" and choose it with {flag} val" if split != "val" else "")
            ) from None

    def _check_held_out(self, name: str, split: Split, hold_out: str) -> None:
        """A split held out of the training images must be the part the checkpoint was trained without: cut again from
        a folder that gained or lost images since, or with another fraction, it holds images the model trained on."""
        checkpoint, splits, fraction = self.trained
        now, before = split.describe(), splits.get(name)
        if before is None or same_images(before, now):
            return
        was = (
            described(before)
            if isinstance(before, dict) and {"n", "source", "selection"} <= before.keys()
            else "not recorded"
        )
        back = "put the data back as it was" + (
            f" and {hold_out} at {fraction:g}" if fraction != self.val_fraction else ""
        )
        raise DataError(
            f"{split.source}: the {name} split is cut from the training images, and this cut is not the one {checkpoint} "
            f"was trained without ({was} then, {described(now)} now), so it holds images the model trained on; "
            f"{back}, or evaluate on images kept apart on disk (--data DIR with val/ or test/)"
        )

    def changed(self, name: str, split: Split) -> tuple[dict, dict] | None:
        """(recorded, now) where the checkpoint this spec is of recorded split `name` of this data as other images than
        `split` holds today (a file moved, added or removed since it trained); None where the same, or not recorded."""
        if self.trained is None:
            return None
        before, now = self.trained[1].get(name), split.describe()
        if not isinstance(before, dict) or before.get("source") != now["source"] or same_images(before, now):
            return None
        return before, now

    def training_images_among(self, files: list, *, channels: int) -> list[bool] | None:
        """Which of `files` (paths, or tar shard members) are images of this spec's training split, or byte-identical
        copies of one (None where the split holds no images one by one: IDX arrays, synthetic; Parquet rows, whose
        bytes are not compared; or it is too large to check)."""
        if self.name == "synthetic":
            return None
        split = self.open(self.train_split, channels=channels, image_size=0)  # image_size: synthetic data's only
        if split.paths is None:  # arrays
            return None
        twins = training_twins(split.paths, files)
        return None if twins is None else [t is not None for t in twins]

    def record(self, splits: dict[str, Split]) -> dict:
        """What a checkpoint stores: this spec and exactly which images each split held."""
        spec = {k: v for k, v in dataclasses.asdict(self).items() if k != "trained"}
        return {**spec, "splits": {name: split.describe() for name, split in splits.items()}}
