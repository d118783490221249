"""The run config a `vitkit train` request names (`run_config`); a run's recipe fitted to its data: the default model and schedule for a dataset, from a short scan of its images
(`fit_to_data`), where nothing names the model (`fitted_unless_named`), or a model.init checkpoint's own model with
the schedule fitted to the data (`fit_to_checkpoint`); and what `vitkit data` reports of a dataset
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
    """The first layer of a run config where nothing names the model (`named`: a --config or resumed run, or a
    model.name override among `overrides`): the model of the checkpoint a model.init override names, with the length,
    batch and augmentation fitted to the data at PATH (`fit_to_checkpoint`); else `fit_to_data(path)` where a PATH is
    given; else no changes; typed ({"section.key": value}). Other model.* overrides change the fitted model (they
    come after it: model.depth=1 is the fitted model one block deep, where it was the built-in default's).
    The fit reads the training split as the data.* overrides cut it (data.train_images, data.val_fraction, ...);
    train.epochs or train.steps and train.batch_size overrides set its length, and its warmup, logging and evaluation
    follow."""
    if named or any(o.startswith("model.name=") for o in overrides):
        return {}
    init = _init_named(overrides)
    if init is not None:
        return fit_to_checkpoint(init, path, overrides, command)
    if not path:
        return {}
    from vitkit.train.config import check_override_keys

    check_override_keys(overrides)  # a misspelt key is one error before the scan, not after its line

    data, epochs, batch, steps = _data_and_length(path, overrides)
    # model.backbone=null asks for the plain ViT: its patches, depth and head, not the hybrid's less its stem
    plain = _last_value(overrides, "model", "backbone", unset=...) is None
    # a run that learns labels stops on data of one class before the recipe is said; `vitkit data` shows any data
    labelled = command == "train" and _last_value(overrides, "train", "objective") != "masked_patch"
    fitted = fit_to_data(data, command, epochs=epochs, batch=batch, steps=steps, plain=plain, labelled=labelled)
    # the user's length wins
    return {k: v for k, v in fitted.items() if not (epochs is not None and k == "train.steps")}


def _init_named(overrides: list[str]) -> str | None:
    """The checkpoint the last model.init= override names (None: none, or model.init=null)."""
    return _last_value(overrides, "model", "init")


def _last_value(overrides: list, section: str, name: str, unset: Any = None) -> Any:
    """The typed value of the last SECTION.NAME= override among `overrides` (`unset` where none sets it)."""
    from vitkit.train.config import override_value

    key = f"{section}.{name}="
    given = [o.split("=", 1)[1] for o in overrides if isinstance(o, str) and o.startswith(key)]
    return override_value(section, name, given[-1]) if given else unset


def _data_and_length(path: str, overrides: list[str]) -> tuple[Any, float | None, int | None, int | None]:
    """The data section a fit reads (the data.* overrides, at `path`), and the length and batch the overrides give:
    (data, train.epochs, train.batch_size, train.steps), each None where not given."""
    from vitkit.train.config import data_and_train

    data, train = data_and_train(
        [o for o in overrides if o.startswith(("data.", "train.epochs=", "train.steps=", "train.batch_size="))]
        + [("data.path", path)],
    )
    named_batch, named_steps = (
        any(o.startswith(key) for o in overrides) for key in ("train.batch_size=", "train.steps=")
    )
    return data, train.epochs, train.batch_size if named_batch else None, train.steps if named_steps else None


def fit_to_data(
    data,
    command: str = "train",
    epochs: float | None = None,
    batch: int | None = None,
    steps: int | None = None,
    plain: bool = False,
    labelled: bool = False,
) -> dict[str, Any]:
    """The default recipe for the training split of a run config's `data` section, from a short scan of its images
    (reported by `command`); with `plain`, a plain ViT's. `labelled`: the run learns the labels, so training data of
    one class is its error before the recipe is said."""
    from vitkit.train import distributed

    found, n, mirror, shift = _scanned(data, labelled)
    changes, note = fitted_to_data(
        found, n, epochs=epochs, batch=batch, steps=steps, mirror=mirror, shift=shift, plain=plain
    )
    # under torchrun every rank fits (the same way); rank 0 says so
    if distributed.is_main():
        print(f"vitkit {command}: {note}", flush=True)
    return changes


def _scanned(data, labelled: bool = False):
    """(a short scan of the training split of a run config's `data` section, the images it holds, and how well a
    pixel model of them knows them mirrored and shifted by a pixel: `pixel_skills`, each None where not told); with
    `labelled`, one class is an error."""
    from vitkit.data import DataSpec
    from vitkit.data.scan import scan, small_pixels
    from vitkit.evaluate.baseline import pixel_skills
    from vitkit.train.inputs import one_class

    train = DataSpec.from_config(data).open(
        data.train_split, channels=3, image_size=32, flag="data.train_split", hold_out="data.val_fraction"
    )
    if labelled and len(train.class_names) < 2:
        raise one_class(train)
    found = scan(train)
    # the images as the fitted model reads them: transparent ones on its background
    background = fitted_background(found)[0].get("model.background")
    on = None if background is None else (background,)
    skills = (
        None
        if train.multi_label or not found.scanned
        else pixel_skills(*small_pixels(train, background=on), len(train.class_names))
    )
    return found, len(train), *((None, None) if skills is None else skills)


# A checkpoint's input size this many times the images' shorter side (or a this-many-th of it) is far from them: the
# run resizes every image by that factor, and the line says so.
FAR_SIZE = 2


def fit_to_checkpoint(init: str, path: str | None, overrides: list[str], command: str) -> dict[str, Any]:
    """The run of `vitkit train model.init=CKPT` where nothing else names the model: the checkpoint's architecture
    as saved (width, depth, heads, patch, channels, image size, classifier, backbone, normalisation; every field but
    its classes, which the data sets), under the user's model.* overrides; with data at `path`, the length, batch,
    warmup and augmentation of `fitted_to_data` for its images (its crop for the run's size, its learning rate left
    at the run's default: these weights are trained already). One line says so, with each key of the checkpoint that
    does not fit the images (their channels, a size FAR_SIZE times theirs or more) and what becomes of it, where the
    overrides do not set that key. Typed ({"section.key": value})."""
    from vitkit.checkpoint import read_checkpoint
    from vitkit.train import distributed
    from vitkit.train.config import check_override_keys, override_layer

    config = read_checkpoint(init)[0]
    # a misspelt key is one error before the scan; the model keys are those of the checkpoint's family
    check_override_keys(overrides, type(config))
    changes = checkpoint_model(config)
    (h, w), c = config.image_size, config.in_chans
    said = [f"the model of model.init={init} as saved ({h}x{w} px, {c} channel{'s' * (c > 1)})"]
    if path:
        mine = override_layer([o for o in overrides if o.startswith("model.")]).get("model", {})
        changes.update(_fitted_around(config, mine, path, overrides, said))
    if distributed.is_main():
        print(f"vitkit {command}: {'; '.join(said)}; KEY=VALUE overrides change any of it", flush=True)
    return changes


def _fitted_around(config, mine: dict, path: str, overrides: list[str], said: list[str]) -> dict[str, Any]:
    """The train.* and augment.* changes of `fitted_to_data` for the images at `path`, but its learning rate, with
    the crop for the size the run trains at (the model.* overrides `mine`, else the checkpoint's `config`); what was
    chosen, and the keys of `config` that do not fit the images, appended to `said`."""
    from vitkit.models.config import size_pair

    data, epochs, batch, steps = _data_and_length(path, overrides)
    found, n, mirror, _ = _scanned(data)  # the crop is fine-tuning's (`_finetune_augment`), below
    recipe, _ = fitted_to_data(found, n, epochs=epochs, batch=batch, steps=steps, mirror=mirror)
    size = min(size_pair(mine.get("image_size", config.image_size), "model.image_size"))
    side = min(found.height, found.width) or 32
    crop = _finetune_augment(found, n, min(size, side), size, mirror)
    recipe.update({key: _typed(text) for key, text in crop.items()})
    planned = recipe.get("train.steps", 0)
    length = f"{epochs:g} epochs" if epochs is not None else f"{planned} step{'s' * (planned != 1)}"
    said.append(f"{length} of {recipe['train.batch_size']} images fitted to the data ({found})")
    said += [line for key, line in _misfits(config, found) if key not in mine]
    return {k: v for k, v in recipe.items() if k.startswith(("train.", "augment.")) and k != "train.lr"}


def checkpoint_model(config) -> dict[str, Any]:
    """A checkpoint's model config as a run config's model section: a registered name of its family (a label) and
    every field but num_classes (the data's), typed ({"model.key": value})."""
    from vitkit.train.finetune import registered_name

    fields = {k: v for k, v in config.to_dict().items() if k not in ("num_classes", "arch")}
    return {"model.name": registered_name(config), **{f"model.{k}": v for k, v in fields.items()}}


def _misfits(config, found) -> list[tuple[str, str]]:
    """(key, what becomes of it) for each key of a checkpoint's model that does not fit the scanned images."""
    said = []
    if found.scanned and found.channels != config.in_chans:
        kind = "colour" if found.channels == 3 else "grayscale"
        said.append(
            (
                "in_chans",
                f"model.in_chans={config.in_chans} (its patch embedding's): the {kind} images are read with "
                f"{config.in_chans} channel{'s' * (config.in_chans > 1)}",
            )
        )
    side, size = min(found.height, found.width), min(config.image_size)
    if side and not 1 / FAR_SIZE < size / side < FAR_SIZE:
        said.append(
            (
                "image_size",
                f"model.image_size={size} is {size / side:.2g}x the images' {side} px, so each is resized by that "
                "much; model.image_size=N sets another (position embeddings resampled; a multiple of the patch)",
            )
        )
    return said


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
    spec = DataSpec.from_config(d)  # its path absolute: a dataset hub name is its folder in the cache
    opened = open_splits(spec, shape)  # as training reads them (data.train_images too)
    summary = describe(opened, r.split or "train", d.path and spec.path, d.name)
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
# A fine-tune of fewer training images than this, where no learning rate is given, tries three (`finetune_lrs`) and
# picks on val. A candidate there is short (5 epochs of under 5,000 images), so the three read no more images than one
# fine-tune of a 15,000-image set; and few images are where one rate transfers worst (the paper sweeps it for every
# transfer set, App. B; on a user's small set the recipe's 0.01 left the model worse than it started). Above it one
# rate: each candidate costs more, and the val split (10% held out) is large enough that --lr sweeps are a choice.
SWEEP_BELOW = 5_000


def finetune_lrs(n: int, lr: float) -> tuple[float, ...]:
    """The learning rates a fine-tune of `n` training images tries where none is given: the recipe's `lr`, and under
    SWEEP_BELOW images also its neighbours on the paper's grid of 1 and 3 times a power of ten (0.003, 0.01, 0.03
    for 0.01; 0.003, 0.005, 0.01 for 0.005)."""
    if n >= SWEEP_BELOW or lr <= 0:
        return (lr,)
    k = math.floor(math.log10(lr))
    grid = [float(f"{m}e{e}") for e in (k - 1, k, k + 1) for m in (1, 3)]
    return (max(g for g in grid if g < lr * 0.99), lr, min(g for g in grid if g > lr * 1.01))


def fit_finetune(
    data, size: int | None, named: set[str], epochs: float | None, batch: int, steps: int, lr: float | None = None
) -> tuple[dict[str, Any], str, tuple[float, ...] | None]:
    """The fine-tuning recipe fitted to the training split of a run config's `data` section at `size` px (None: the
    checkpoint's), for each key not in `named`: its length (`epochs`, else FINETUNE_EPOCHS), batch, logging and
    evaluation from the split's size (`batch` and `steps`: the recipe's, used where `named` holds them), a crop
    and flip that suit the images (those of `vitkit train --data` for small images), and the learning rates to try
    around the recipe's `lr` (`finetune_lrs`; None: the command gives them). Returns (the typed changes
    {"section.key": value}, a line saying so, the learning rates or None)."""
    from vitkit.limits import MAX_INT
    from vitkit.train.config import steps_for

    found, held, mirror, _ = _scanned(data)
    n = max(held - found.unreadable, 1)
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
    crop = _finetune_augment(found, n, min(size or side, side), size or side, mirror)
    chosen.update({key: _typed(text) for key, text in crop.items()})
    changes = {key: value for key, value in chosen.items() if key not in named}
    kept = [key for key in chosen if key in named]
    length = "as given" if "train.steps" in named else f"{epochs or FINETUNE_EPOCHS:g} epochs"
    augment = [f"{key.split('.', 1)[1]}={text}" for key, text in crop.items() if key not in named]
    lrs = None if lr is None else finetune_lrs(n, lr)
    tries = (
        f"; tries lr {', '.join(f'{r:g}' for r in lrs)}; picks on val (under {SWEEP_BELOW:,} training images; --lr sets them)"
        if lrs and len(lrs) > 1
        else ""
    )
    note = (
        f"fitted to {n:,} training images ({found}): {steps} steps of {batch} ({length})"
        + (f", {', '.join(augment)}" if augment else "")
        + (f"; as given: {', '.join(kept)}" if kept else "")
        + tries
    )
    return changes, note, lrs


def _typed(text: Any) -> Any:
    """A value of `_finetune_augment` as its field holds it: "[a,b]" a pair of floats, "0" a float, else as it is."""
    if isinstance(text, str) and text.startswith("["):
        return tuple(float(v) for v in text[1:-1].split(","))
    return float(text) if isinstance(text, str) and text.replace(".", "", 1).isdigit() else text


def _finetune_augment(found, n: int, side: int, size: int, mirror: float | None = None) -> dict:
    """Crop and flip for fine-tuning on images of `side` px (their own, or the resolution where smaller) at `size`
    px: the flip of `vitkit train --data`'s recipe (`fitted_hflip`); its padded random crop for small images, else
    an Inception crop that keeps at least a 48-px box of them (the paper's 5% only for 224 px and up)."""
    flip = f"{fitted_hflip(mirror):g}"
    if side <= CROP_FROM_SIDE:
        return {"augment.crop": "pad", "augment.pad": max(size // 16, 1), "augment.hflip": flip}
    low = min(max(0.05, round((48 / side) ** 2, 2)), 0.5)
    return {"augment.crop": "rrc", "augment.rrc_scale": f"[{low:g},1.0]", "augment.hflip": flip}


# The fitted recipes flip (with probability 0.5) where a pixel model of the training images knows their mirror images
# at least this well (`evaluate.baseline.pixel_skills`: its skill above chance on mirrored images, as a share of its
# skill on them as they are). Clothes and icons, whose classes do not hinge on left and right, score well above it;
# digits, glyphs and scenes told apart by where things stand, well below (benchmarks/families.py, `mirror`).
# Not told (too few images, several labels an image): no flips, which is never wrong, only weaker.
MIRROR_FLIPS_FROM = 0.5


# The fitted recipe shifts its training images (a padded random crop, a 16th of the size each way) where a pixel model
# of them keeps at least this share of its skill when they move by one pixel (`evaluate.baseline.pixel_skills`):
# clothes, digits, glyphs and scenes keep well above it and keep their shifts. Icons drawn on a pixel grid, where
# single pixels in place tell the classes apart, keep well below it and train better unshifted
# (benchmarks/results/families.csv, rows of icons and icons16). Not told: shifts, as for most images.
SHIFT_CROPS_FROM = 0.6


def fitted_crop(shift: float | None, size: int) -> dict[str, Any]:
    """The fitted recipe's crop at `size` px for images whose `pixel_skills` shift is `shift`."""
    if shift is not None and shift < SHIFT_CROPS_FROM:
        return {"augment.crop": "none"}
    return {"augment.crop": "pad", "augment.pad": max(size // 16, 1)}


def _crop_words(shift: float | None) -> str:
    """How the plan words the fitted crop."""
    if shift is None:
        return "shifted by a padded random crop"
    if shift >= SHIFT_CROPS_FROM:
        return (
            f"shifted by a padded random crop (a pixel model of the images keeps {shift:.2f} of its skill when they "
            "move by a pixel; augment.crop=none for none)"
        )
    return (
        f"not shifted (a pixel model of the images keeps {shift:.2f} of its skill when they move by a pixel, under "
        f"{SHIFT_CROPS_FROM}: single pixels in place tell the classes apart, as in icons; augment.crop=pad shifts)"
    )


def fitted_hflip(mirror: float | None) -> float:
    """The fitted recipes' flip probability for images whose `pixel_skills` mirror is `mirror`."""
    return 0.5 if mirror is not None and mirror >= MIRROR_FLIPS_FROM else 0.0


def _flip_words(mirror: float | None) -> str:
    """How the plan words the fitted flip."""
    if mirror is None:
        return "no flips (not told: too few images a class or several labels an image; augment.hflip=0.5 flips)"
    if mirror >= MIRROR_FLIPS_FROM:
        return (
            f"flips (a pixel model of the images knows their mirror images at {mirror:.2f} of its skill: left and "
            "right do not decide the class; augment.hflip=0 for none)"
        )
    return (
        f"no flips (a pixel model of the images knows their mirror images at {mirror:.2f} of its skill, under "
        f"{MIRROR_FLIPS_FROM}: left and right matter, as in digits and text; augment.hflip=0.5 flips)"
    )


# The fitted recipe's family by the size of the training split: below this many images the conv-stem hybrid, from
# it the plain ViT. Without large pre-training a plain ViT overfits small data where a convolutional stem does not
# (paper §4.2, Fig. 3-4: hybrids win at small compute); benchmarks/families.py measures the two, beside pixel
# baselines, on each kind of data. The hybrid won at every size measured, up to all 60,000 of Fashion-MNIST's
# training images (the demos' rows); the plain ViT is the choice only beyond that, where the paper has it gain most.
FITTED_HYBRID_BELOW = 100_000
# The rows of that benchmark (benchmarks/results/families.csv, ids less the machine's suffix) each fitted family rests
# on: the kinds of data where it beat the ViT family it replaces (the plain ViT; the 6-block hybrid) at matched CPU
# time.
FAMILY_ROWS = {
    "hybrid": (
        "families-icons", "families-icons16", "families-fashion500", "families-fashion2000",
        "families-fashion10000", "families-glyphs",
    ),
    "conv": (
        "families-icons", "families-fashion500", "families-digits", "families-glyphs",
    ),
    "plain": (),
}  # fmt: skip


def fitted_family(size: int, n_train: int, plain: bool = False) -> tuple[dict[str, Any], str]:
    """The fitted model's family for `n_train` training images of `size` px: under FITTED_HYBRID_BELOW images a
    conv-stem hybrid (`family_model`): a conv net (the deep stem, no block) under CONV_NET_BELOW images or at
    CONV_NET_UPTO px and under, read at CONV_NET_SIZE px at most, else the 6-block hybrid; from FITTED_HYBRID_BELOW
    (or with `plain`: the user's model.backbone=null) a plain ViT. Returns its changes ({"model.key": value}) and how
    the plan words them."""
    if plain:
        return family_model("plain", size), f"patch {size // 4} (a 4x4 grid; model.backbone=null: a plain ViT)"
    if n_train >= FITTED_HYBRID_BELOW:
        return (
            family_model("plain", size),
            f"patch {size // 4} (a 4x4 grid; from {FITTED_HYBRID_BELOW:,} training images, beyond the sizes "
            "benchmarks/results/families.csv measures, a plain ViT gains most from more data: paper Fig. 3-4)",
        )
    export = "not exportable to Hugging Face: model.backbone=null for a plain ViT)"
    if size <= CONV_NET_UPTO or n_train < CONV_NET_BELOW:
        smaller = ""
        if size > CONV_NET_SIZE:
            smaller = f" at {CONV_NET_SIZE} px, not {size}, where its first convolution reads every pixel"
            size = CONV_NET_SIZE
        conv = {"model.image_size": size, **family_model("conv", size)}
        strides = conv["model.backbone"]["strides"]
        grid = size >> strides.count(2)
        return (
            conv,
            f"a conv net{smaller}: a deep conv stem (6 convolutions, {strides.count(2)} of stride 2: a {grid}x{grid} "
            f"map) average-pooled into the head, no transformer block (under {CONV_NET_BELOW:,} training images or at "
            f"{CONV_NET_UPTO} px and under a CNN learns more than a ViT from few images, paper §4.2: it beats the "
            f"stem with 1 block and the 6-block hybrid: {_rows('conv')}; {export}",
        )
    hybrid = family_model("hybrid", size)
    convs = hybrid["model.backbone"]["convs"]
    grid = size >> len(convs)
    return (
        hybrid,
        f"a conv stem ({len(convs)} stride-2 convolutions: a {grid}x{grid} grid; under {FITTED_HYBRID_BELOW:,} "
        f"training images it beats a plain ViT, which overfits small data: {_rows('hybrid')}; {export}",
    )


# Images this small (the fitted size, px), and training splits this small, get a conv net: the deep stem's
# convolutions, average-pooled, with no transformer block. Without pre-training a CNN learns more from few images
# than a ViT (paper §4.2, Fig. 3-4); even one block over the stem's map overfits them.
CONV_NET_UPTO = 16
CONV_NET_BELOW = 1_000
# The conv net reads images at this size at most: from 33 px its first convolution strides (`family_model`), and
# thin strokes of larger icons read at their own size were lost to it (benchmarks/results/families.csv, rows of icons).
CONV_NET_SIZE = 32
# LayerScale's initial value on the block of the "deep" family (the deep stem with one block, a benchmark column): the
# block starts near the identity, so the model starts as the stem's average-pooled features
DEEP_LAYER_SCALE = 1e-4


def family_model(family: str, size: int) -> dict[str, Any]:
    """The model keys ({"model.key": value}) of a fitted family at `size` px, width 96 each: "plain", a ViT of 6 blocks
    on a 4x4 grid of patches; "hybrid", 6 blocks on 1x1 patches of a conv stem of 2 stride-2 convolutions (up to 24
    px, else 3); "conv", a conv net: a deep stem (6 3x3 convolutions in pairs of 32, 64 and 128 channels, the first of
    the second and third pairs of stride 2, and over 32 px the first convolution too: a map of size / 4, over 32 px
    size / 8) average-pooled into the head, depth 0; "deep", that stem with 1 block with LayerScale (DEEP_LAYER_SCALE)
    on its map (its first convolution strides from 32 px), average-pooled. The ViTs of 6 blocks read a class
    token (every format, Hugging Face's included, holds it). Each family sets every key another one sets."""
    if family in ("conv", "deep"):
        strides_from = 33 if family == "conv" else 32  # from this size the first convolution strides too: size / 8
        first = 2 if size >= strides_from else 1
        stem = {"convs": [32, 32, 64, 64, 128, 128], "strides": [first, 1, 2, 1, 2, 1]}
        depth, scale = (0, None) if family == "conv" else (1, DEEP_LAYER_SCALE)
        return {
            "model.patch_size": 1,
            "model.backbone": stem,
            "model.depth": depth,
            "model.classifier": "gap",
            "model.layer_scale": scale,
        }
    body = {"model.depth": 6, "model.classifier": "token", "model.layer_scale": None}
    if family == "plain":
        return {"model.patch_size": size // 4, "model.backbone": None, **body}
    return {"model.patch_size": 1, "model.backbone": {"convs": [32, 64, 128][: 2 if size <= 24 else 3]}, **body}


def _rows(family: str) -> str:
    """How the plan names the benchmark rows a fitted family rests on."""
    kinds = ", ".join(row.removeprefix("families-") for row in FAMILY_ROWS[family])
    return f"benchmarks/results/families.csv, rows of {kinds}"


# Partly transparent images are composited on the background: where this many of the images looked at are, and what
# they show is within INK_NEAR of the border colour, that colour would hide them and the fit takes the other.
CLEAR_SHARE, INK_NEAR = 0.1, 0.25


def fitted_background(scan) -> tuple[dict[str, float], str]:
    """The fitted model.background (black or white: padding continues the images' borders, and transparent images
    are composited on it, so it is the other where the border colour would hide what they show), and how the plan
    words it. ({}, "") where the scan did not look at the borders."""
    if scan.border is None:
        return {}, ""
    white = scan.border >= 0.5
    words = f"padded with {'white' if white else 'black'} like the images' borders"
    hidden = scan.ink is not None and scan.clear >= CLEAR_SHARE * scan.scanned and abs(scan.ink - white) < INK_NEAR
    if hidden:
        words = (
            f"composited on {'black' if white else 'white'} and padded with it: {scan.clear} of {scan.scanned} "
            f"images looked at are transparent and show {'light' if white else 'dark'} shapes that "
            f"{'white' if white else 'black'} (their borders) would hide"
        )
        white = not white
    return {"model.background": float(white)}, words


def fitted_size(scan) -> int:
    """The image size `fitted_to_data` trains at: the images' median shorter side, to a multiple of 8 in 16..64 px."""
    side = min(scan.height, scan.width) or 32
    return int(min(max(round(side / 8) * 8, 16), 64))


def fitted_to_data(
    scan,
    n_train: int,
    epochs: float | None = None,
    batch: int | None = None,
    steps: int | None = None,
    mirror: float | None = None,
    shift: float | None = None,
    plain: bool = False,
) -> tuple[list[str], str]:
    """The default recipe for a dataset of one's own (`vitkit train --data FOLDER` with no model given), as typed changes.

    The image size follows the images (median shorter side, to a multiple of 8 in 16..64 px) and so do the
    channels; the family follows their size and number (`fitted_family`), each of width 96 on a small grid to keep a
    step cheap, and ~100 epochs (750..5000 steps of up to 64 images) end in minutes on a laptop CPU; `epochs` or
    `steps` (the user's train.epochs or train.steps) set the length instead, and warmup, logging and evaluation
    follow it, as they follow `batch` (the user's train.batch_size) where given; `mirror` sets the flip
    (`fitted_hflip`), `shift` the crop (`fitted_crop`); `plain` (model.backbone=null) fits a plain ViT at any size.
    Returns (the typed changes {"section.key": value}, what was chosen and why: a line for each choice)."""
    from vitkit.train.config import steps_for

    family, why = fitted_family(size := fitted_size(scan), n_train, plain)
    background, padding = fitted_background(scan)
    size = family.get("model.image_size", size)  # the conv net's may be smaller
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
        **family,
        "model.in_chans": scan.channels,
        "model.width": 96,
        "model.mlp_dim": 192,
        "model.num_heads": 4,
        "train.batch_size": batch,
        **({"train.epochs": epochs} if epochs is not None else {"train.steps": steps}),
        "train.warmup_steps": steps // 10,
        "train.lr": 3e-3,
        "train.log_every": max(steps // 20, 1),
        # four evaluations, the last one the final step
        "train.eval_every": max(-(-steps // 4), 1),
        **fitted_crop(shift, size),
        **background,
        "augment.hflip": fitted_hflip(mirror),
        "augment.label_smoothing": 0.1,
        # a pixel baseline beside the val figure: a model that does not beat it is said to
        "train.baseline": True,
    }
    said = [f"{why}, width 96, depth {family['model.depth']}", padding, _crop_words(shift), _flip_words(mirror)]
    return changes, _fit_note(scan, size, [*said, f"{length}{steps} step{'s' * (steps != 1)} of {batch} images"])


def _fit_note(scan, size: int, said: list[str]) -> str:
    """The fitted recipe in words: what the scan found, then a line for each choice of `said` (family, background,
    shifts, flips, length), with why; a choice not made ("") has no line."""
    head = (
        f"no model given, so fitted to the data: {scan} -> {size}x{size} px, {scan.channels} channel"
        f"{'s' * (scan.channels > 1)}; KEY=VALUE overrides change any of it, model.name, model.init or --config "
        "replace it"
    )
    keys = ("family", "background", "shifts", "flips", "length")
    return "\n".join([head, *(f"  {key:<10} {words}" for key, words in zip(keys, said) if words)])
