"""The run config a `vitkit train` request names (`run_config`); a run's recipe fitted to its data: the default model and schedule for a dataset, from a short scan of its images
(`fit_to_data`), where nothing names the model (`fitted_unless_named`); and what `vitkit data` reports of a dataset
as a run config reads it, with the first training batch that recipe would see (`data_report`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vitkit.train.config import RunConfig
    from vitkit.train.requests import DataRequest, TrainRequest


def run_config(request: TrainRequest) -> RunConfig:
    """The run config a `vitkit train` request names: the recipe fitted to its data where nothing names the model,
    the user's overrides over it (they win), then --data and --no-progress; a resumed run's run.yaml under them."""
    from vitkit.train.config import load_run_config
    from vitkit.train.loop import resume_config

    overrides = list(request.overrides)
    named = bool(request.config or request.resume)
    # the fit, typed values under the user's overrides (they win)
    fitted = fitted_unless_named(data_path(request.data, overrides), named, overrides, "train")
    if request.data:
        # a path as given, never parsed
        overrides.append(("data.path", request.data))
    if not request.progress:
        overrides.append("train.progress=false")
    if request.resume:
        return resume_config(request.resume, overrides)
    return load_run_config(request.config, overrides, base=layers(fitted))


def layers(changes: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Typed changes ({"section.key": value}) as the sections of a run config's first layer."""
    sections: dict[str, dict[str, Any]] = {}
    for key, value in changes.items():
        section, name = key.split(".", 1)
        sections.setdefault(section, {})[name] = value
    return sections


def with_changes(config: RunConfig, changes: dict[str, Any]) -> RunConfig:
    """`config` with typed `changes` ({"section.key": value}), by dataclasses.replace; the batches and augmentation
    checked as a loaded run config's are. A new train.steps drops train.epochs (the length is the one set)."""
    from vitkit.data.augment import check_policy
    from vitkit.train import distributed
    from vitkit.train.config import check_batches

    by = layers(changes)
    train = by.get("train", {})
    if "steps" in train:
        train = {**train, "epochs": None}
    config = dataclasses.replace(
        config,
        model=config.model.changed(**by["model"]) if "model" in by else config.model,
        augment=dataclasses.replace(config.augment, **by.get("augment", {})),
        train=dataclasses.replace(config.train, **train),
    )
    check_batches(config.train, distributed.world_size())
    check_policy(config.augment)
    return config


def data_path(given: str | None, overrides: list) -> str | None:
    """The data a run names: `given` (--data), else the last data.path=PATH override (it names the data as --data
    does, so the model is fitted to it too)."""
    return given or next(
        (o.split("=", 1)[1] for o in reversed(overrides) if isinstance(o, str) and o.startswith("data.path=")), None
    )


def fitted_unless_named(path: str | None, named: bool, overrides: list[str], command: str) -> dict[str, Any]:
    """`fit_to_data(path)` where a PATH is given and nothing names the model (`named`: a --config or resumed run, or a
    model.name or model.init override among `overrides`); else no changes; typed ({"section.key": value}). Other model.* overrides change the fitted
    model (they come after it: model.depth=1 is the fitted model one block deep, where it was the built-in default's).
    The fit reads the training split as the data.* overrides cut it (data.train_images, data.val_fraction, ...);
    train.epochs or train.steps and train.batch_size overrides set its length, and its warmup, logging and evaluation
    follow."""
    if not path or named or any(o.startswith(("model.name=", "model.init=")) for o in overrides):
        return {}
    from vitkit.train.config import check_override_keys, data_and_train

    check_override_keys(overrides)  # a misspelt key is one error before the scan, not after its line

    data, train = data_and_train(
        [o for o in overrides if o.startswith(("data.", "train.epochs=", "train.steps=", "train.batch_size="))]
        + [("data.path", path)],
    )
    named_batch, named_steps = (
        any(o.startswith(key) for o in overrides) for key in ("train.batch_size=", "train.steps=")
    )
    fitted = fit_to_data(
        data,
        command,
        epochs=train.epochs,
        batch=train.batch_size if named_batch else None,
        steps=train.steps if named_steps else None,
    )
    # the user's length wins
    return {k: v for k, v in fitted.items() if not (train.epochs is not None and k == "train.steps")}


def fit_to_data(
    data, command: str = "train", epochs: float | None = None, batch: int | None = None, steps: int | None = None
) -> dict[str, Any]:
    """The default recipe for the training split of a run config's `data` section, from a short scan of its images
    (reported by `command`)."""
    from vitkit.data import DataSpec
    from vitkit.data.scan import scan
    from vitkit.train import distributed

    train = DataSpec.from_config(data).open(
        data.train_split, channels=3, image_size=32, flag="data.train_split", hold_out="data.val_fraction"
    )
    changes, note = fitted_to_data(scan(train), len(train), epochs=epochs, batch=batch, steps=steps)
    # under torchrun every rank fits (the same way); rank 0 says so
    if distributed.is_main():
        print(f"vitkit {command}: {note}", flush=True)
    return changes


def data_report(request: DataRequest, say: Callable[[str], None] = print) -> dict:
    """What `vitkit data` reports of the data at `request.path` as the run config (its config file + overrides) reads
    it: its summary, said line by line; with `to_shards`, its splits written there as tar shards; with `samples`, the
    first images of the run's first training batch written to `out`. The summary, with what was written."""
    from vitkit.data import DataSpec
    from vitkit.data.report import open_splits, refuse_shards_in, summary_lines
    from vitkit.data.summary import describe
    from vitkit.errors import ConfigError
    from vitkit.train.plan import model_of

    r = request
    if r.samples < 0 or r.per_shard < 1:
        raise ConfigError("--samples and --per-shard: expected positive numbers")
    if r.samples and not r.out:
        raise ConfigError("--samples: say where to write samples.png and samples.npy with --out DIR")
    config = _data_config(r.path, r.config, list(r.overrides), fitted=bool(r.samples))
    if r.to_shards:
        # before reading anything
        refuse_shards_in(Path(r.to_shards), config.data.path)
    # the model config, built once: splits, shards and samples read the images at its input size
    d, shape = config.data, model_of(config)
    opened = open_splits(DataSpec.from_config(d), shape)  # as training reads them (data.train_images too)
    summary = describe(opened, r.split or "train", d.path, d.name)
    for line in summary_lines(summary, opened):
        say(line)
    if r.to_shards:
        summary["shards"] = _shards(config, shape, opened, r.split, Path(r.to_shards), r.per_shard, say)
    if r.samples:
        summary["samples"] = _samples(config, shape, r.split or "train", summary, r.samples, Path(r.out), say)
    return summary


def _data_config(path: str | None, config_file: str | None, overrides: list[str], fitted: bool):
    """The run config `vitkit data` reads the data by; with `fitted`, of the model `vitkit train --data PATH` would fit
    (where nothing names one). A PATH that is a KEY=VALUE (no such file) is an override given in its place."""
    from vitkit.train.config import load_run_config

    if path and "=" in path and not Path(path).exists():
        overrides, path = [path, *overrides], None
    named = list(overrides) + ([f"data.path={path}"] if path else [])
    # the pixels of the model `vitkit train --data PATH` would fit
    changes = fitted_unless_named(path, bool(config_file), overrides, "data") if fitted else {}
    return load_run_config(config_file, named, base=layers(changes))


def _shards(config, shape, opened: dict, split: str | None, out: Path, per_shard: int, say) -> dict:
    """`split` as the run config cuts it, or else every split the data has of its own, whole, as tar shards in `out`."""
    from vitkit.data.report import whole_splits, write_shards

    sets = {split: opened[split]} if split else whole_splits(config, shape)
    return write_shards(sets, out, per_shard, config.data.split_seed, config.data.on_error, say=say)


def _samples(config, shape, split: str, summary: dict, count: int, out: Path, say) -> dict:
    """The first `count` images of the first training batch of `split`, as training augments them, written to `out`
    (a split holding fewer images than a batch: one batch of all of it)."""
    from vitkit.data.report import write_samples
    from vitkit.data.split import label_text
    from vitkit.train import first_batch_pixels

    d, t = config.data, config.train
    preview = dataclasses.replace(config, data=dataclasses.replace(d, train_split=split))
    held, smaller = summary["splits"][split].get("images"), ""
    if held is not None and held < (t.micro_batch or t.batch_size):  # a small (val) split: one batch of all of it
        preview = dataclasses.replace(preview, train=dataclasses.replace(t, batch_size=held, micro_batch=None))
        smaller = f", a batch of all {held} (the split holds fewer than train.batch_size={t.batch_size})"
    pixels, labels, names = first_batch_pixels(preview, shape, count)
    which = (
        f"the first {len(pixels)} images of the first training batch of {summary['splits'][split]['source']} "
        f"(seed {t.seed}{smaller}), as training augments them before normalisation"
    )
    written = {**write_samples(out, pixels, [label_text(y, names) for y in labels], which), "seed": t.seed}
    say(f"samples: {out / 'samples.png'} and {out / 'samples.npy'} {tuple(pixels.shape)} uint8: {which}")
    return written


# Passes over the training images a fine-tune plans where nothing sets its length: a pre-trained model needs a few,
# not the paper's 10k steps of 512 (sized for ImageNet-scale transfer sets); capped at those 10k steps.
FINETUNE_EPOCHS = 5
FINETUNE_MAX_STEPS = 10_000
# The shortest side, in the images' own pixels, below which a fine-tune shifts (padded random crop) instead of
# cropping (Inception crop): a crop of a small image keeps too few of its pixels to show the object.
CROP_FROM_SIDE = 64


def fit_finetune(
    data, size: int | None, named: set[str], epochs: float | None, batch: int, steps: int
) -> tuple[dict[str, Any], str]:
    """The fine-tuning recipe fitted to the training split of a run config's `data` section at `size` px (None: the
    checkpoint's), for each key not in `named`: its length (`epochs`, else FINETUNE_EPOCHS), batch, logging and
    evaluation from the split's size (`batch` and `steps`: the recipe's, used where `named` holds them), and a crop
    and flip that suit the images (those of `vitkit train --data` for small images). Returns (the typed changes
    {"section.key": value}, a line saying so)."""
    from vitkit.data import DataSpec
    from vitkit.data.scan import scan
    from vitkit.limits import MAX_INT
    from vitkit.train.config import steps_for

    train = DataSpec.from_config(data).open(
        data.train_split, channels=3, image_size=32, flag="data.train_split", hold_out="data.val_fraction"
    )
    found = scan(train)
    n = max(len(train) - found.unreadable, 1)
    if "train.batch_size" not in named:
        batch = min(512, max(min(64, n), 2 ** int(math.log2(max(n // 20, 1)))))  # 20 steps an epoch, up to 512
    if "train.steps" not in named:
        steps = min(steps_for(epochs or FINETUNE_EPOCHS, n, batch), FINETUNE_MAX_STEPS if epochs is None else MAX_INT)
    chosen = {
        "train.batch_size": batch,
        "train.steps": steps,
        "train.log_every": max(steps // 20, 1),
        "train.eval_every": max(-(-steps // 4), 1),  # four evaluations, the last one the final step
    }
    side = min(found.height, found.width) or 32
    crop = _finetune_augment(found, n, min(size or side, side), size or side)
    chosen.update({key: _typed(text) for key, text in crop.items()})
    changes = {key: value for key, value in chosen.items() if key not in named}
    kept = [key for key in chosen if key in named]
    length = "as given" if "train.steps" in named else f"{epochs or FINETUNE_EPOCHS:g} epochs"
    augment = [f"{key.split('.', 1)[1]}={text}" for key, text in crop.items() if key not in named]
    note = (
        f"fitted to {n:,} training images ({found}): {steps} steps of {batch} ({length})"
        + (f", {', '.join(augment)}" if augment else "")
        + (f"; as given: {', '.join(kept)}" if kept else "")
    )
    return changes, note


def _typed(text: Any) -> Any:
    """A value of `_finetune_augment` as its field holds it: "[a,b]" a pair of floats, "0" a float, else as it is."""
    if isinstance(text, str) and text.startswith("["):
        return tuple(float(v) for v in text[1:-1].split(","))
    return float(text) if isinstance(text, str) and text.replace(".", "", 1).isdigit() else text


def _finetune_augment(found, n: int, side: int, size: int) -> dict:
    """Crop and flip for fine-tuning on images of `side` px (their own, or the resolution where smaller) at `size`
    px: the flip of `vitkit train --data`'s recipe; its padded random crop for small images, else an Inception crop
    that keeps at least a 48-px box of them (the paper's 5% only for 224 px and up)."""
    if side <= CROP_FROM_SIDE:
        return {"augment.crop": "pad", "augment.pad": max(size // 16, 1), "augment.hflip": str(FITTED_HFLIP)}
    low = min(max(0.05, round((48 / side) ** 2, 2)), 0.5)
    return {"augment.crop": "rrc", "augment.rrc_scale": f"[{low:g},1.0]", "augment.hflip": str(FITTED_HFLIP)}


# the fitted recipes' flip: wrong for digits, text, signs, charts; within noise of flipping on photos here
FITTED_HFLIP = 0


def fitted_size(scan) -> int:
    """The image size `fitted_to_data` trains at: the images' median shorter side, to a multiple of 8 in 16..64 px."""
    side = min(scan.height, scan.width) or 32
    return int(min(max(round(side / 8) * 8, 16), 64))


def fitted_to_data(
    scan, n_train: int, epochs: float | None = None, batch: int | None = None, steps: int | None = None
) -> tuple[list[str], str]:
    """The default recipe for a dataset of one's own (`vitkit train --data FOLDER` with no model given), as typed changes.

    The image size follows the images (median shorter side, to a multiple of 8 in 16..64 px) and so do the
    channels; a 4x4 grid of patches and the demo's small ViT (width 96, 6 layers, a class token, which every format holds) keep a
    step cheap, and ~100 epochs (750..5000 steps of up to 64 images) end in minutes on a laptop CPU; `epochs` or
    `steps` (the user's train.epochs or train.steps) set the length instead, and warmup, logging and evaluation
    follow it, as they follow `batch` (the user's train.batch_size) where given.
    Returns (the typed changes {"section.key": value}, one line saying what was chosen and why)."""
    from vitkit.train.config import steps_for

    size = fitted_size(scan)
    batch = batch or max(min(64, n_train - scan.unreadable), 1)  # a batch the readable images fill
    if epochs is not None:
        steps, length = steps_for(epochs, n_train, batch), f"{epochs:g} epochs = "
    elif steps is None:
        # the recipe benchmark (benchmarks/recipes.py): a shorter run underfits small sets by 7-30 points
        steps, length = int(min(max(-(-100 * n_train // batch), 750), 5000)), ""
    else:
        length = ""
    changes = {
        "model.name": "vit_mini4_32",
        "model.image_size": size,
        "model.patch_size": size // 4,
        "model.in_chans": scan.channels,
        "model.width": 96,
        "model.mlp_dim": 192,
        "model.num_heads": 4,
        "model.depth": 6,
        # a class token: every format (Hugging Face's included) holds the model
        "model.classifier": "token",
        "train.batch_size": batch,
        **({"train.epochs": epochs} if epochs is not None else {"train.steps": steps}),
        "train.warmup_steps": steps // 10,
        "train.lr": 3e-3,
        "train.log_every": max(steps // 20, 1),
        # four evaluations, the last one the final step
        "train.eval_every": max(-(-steps // 4), 1),
        "augment.crop": "pad",
        "augment.pad": max(size // 16, 1),
        "augment.hflip": float(FITTED_HFLIP),
        "augment.label_smoothing": 0.1,
        # a pixel baseline beside the val figure: a model that does not beat it is said to
        "train.baseline": True,
    }
    note = (
        f"no model given, so fitted to the data: {scan} -> {size}x{size} px, {scan.channels} channel{'s' * (scan.channels > 1)}, "
        f"patch {size // 4} (a 4x4 grid), width 96, depth 6; {length}{steps} steps of {batch} images (KEY=VALUE overrides change any of "
        "it; model.name, model.init or --config replace it)"
    )
    return changes, note
