"""What `vitkit finetune` sets up before the sweep: the recipe's overrides from the command's options, and the data
the checkpoint was trained on, cut into train and val as it was, where no data is named."""

from __future__ import annotations

from vitkit.train.requests import FinetuneRequest

CUT_KEYS = (
    "train_split",
    "val_split",
    "val_fraction",
    "split_seed",
    "split_rule",
    "label_column",
    "group_column",
    "name_pattern",
)  # how a checkpoint's data was read and split into train and val
CUTTING = (
    "data.val_fraction",
    "data.split_seed",
    "data.split_rule",
    "data.group_column",
)  # another split of train/ into train and val (not another named)


def finetune_sweep(request: FinetuneRequest) -> dict:
    """Fine-tune `request.checkpoint` into `request.out` as `vitkit finetune` asked; the sweep's result."""
    from vitkit.files import writable_folder
    from vitkit.train.finetune import finetune, finetune_recipe

    # before the data line, not after
    writable_folder(request.out, "the fine-tuning runs", "choose another --out")
    overrides = recipe_overrides(request)
    recipe, lrs = fitted_recipe(request, finetune_recipe(request.config, overrides), overrides)
    return finetune(
        recipe,
        request.checkpoint,
        request.out,
        lrs=list(lrs),
        image_size=request.image_size,
        keep_pre_logits=request.keep_pre_logits,
        new_head=request.new_head,
    )


def fitted_recipe(request: FinetuneRequest, recipe, overrides: list) -> tuple:
    """(the recipe with its length, batch and augmentation fitted to its training images (`fit.fit_finetune`, typed
    changes applied with dataclasses.replace) where neither the recipe file nor the command names them, the learning
    rates the sweep runs: --lr's, else around the recipe's on small data where no train.lr override names one); said
    in one line. A length in epochs (--epochs, a train.epochs override or the recipe file's) becomes the steps that pass
    over the training images that often; a warmup not named follows the fitted length (`finetune.warmed_up`)."""
    from vitkit.errors import ConfigError
    from vitkit.train.finetune import warmed_up
    from vitkit.train.fit import fit_finetune, with_changes

    epochs = request.epochs
    overrides = list(overrides)
    for o in [o for o in overrides if isinstance(o, str) and o.startswith("train.epochs=")]:
        overrides.remove(o)
        epochs = recipe.train.epochs
    given, in_file = named_keys(None, overrides), named_keys(request.config, [])
    if epochs is not None and "train.steps" in given:
        raise ConfigError("--epochs: the run's length is given twice (--steps or train.steps too); give one")
    # the recipe file's length in epochs
    if epochs is None and "train.epochs" in in_file:
        epochs = recipe.train.epochs
    named = (given | in_file) - ({"train.steps", "train.epochs"} if epochs is not None else set())
    size = request.image_size or recipe.model.get("image_size")
    side = min(size) if isinstance(size, (list, tuple)) else size
    t = recipe.train
    # the recipe's rate (its file's, else the paper's) where the command names none
    lr = None if request.lrs is not None or "train.lr" in given else t.lr
    changes, note, lrs = fit_finetune(recipe.data, side, named, epochs, t.batch_size, t.steps, lr)
    print(f"vitkit finetune: {note}", flush=True)
    return warmed_up(with_changes(recipe, changes), "train.warmup_steps" in given | in_file), (
        request.lrs or lrs or (t.lr,)
    )


def named_keys(config: str | None, overrides: list) -> set[str]:
    """The dotted keys a recipe file (`config`) and the `overrides` set (strings KEY=VALUE or (KEY, VALUE) pairs)."""
    import yaml

    keys = {o[0] if isinstance(o, tuple) else str(o).split("=", 1)[0].strip() for o in overrides}
    if config is not None:
        with open(config, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
        keys |= {f"{section}.{key}" for section, values in data.items() if isinstance(values, dict) for key in values}
    return keys


def recipe_overrides(request: FinetuneRequest) -> list:
    """The dotted overrides of a request: its KEY=VALUE list, the checkpoint's data and cut where nothing names data,
    then the flags that stand for recipe keys."""
    overrides, data = list(request.overrides), request.data
    if (
        data is None
        and not any(o.startswith(("data.path=", "data.name=")) for o in overrides)
        and not names_data(request.config)
    ):
        # the data the checkpoint was trained on, as for every other command, cut as it was: another held-out cut would
        # score the lr sweep on images the checkpoint trained on
        data, cut = checkpoint_data(request.checkpoint, overrides)
        overrides += [
            (key, value) for key, value in cut.items() if not any(str(o).startswith(f"{key}=") for o in overrides)
        ]
    for key, value in (
        ("data.path", data),
        ("train.steps", request.steps),
        ("train.batch_size", request.batch_size),
        ("train.micro_batch", request.micro_batch),
    ):
        if value is not None:
            # typed by the request: never parsed again
            overrides.append((key, value))
    if not request.progress:
        overrides.append("train.progress=false")
    return overrides


def names_data(config: str | None) -> bool:
    """Whether a recipe file sets data.path or data.name itself."""
    import yaml

    from vitkit.errors import ConfigError

    if config is None:
        return False
    try:
        data = (yaml.safe_load(open(config)) or {}).get("data") or {}
    except (OSError, yaml.YAMLError, AttributeError) as err:
        raise ConfigError(f"{config}: cannot read the recipe ({err})") from None
    return "path" in data or "name" in data


def checkpoint_data(checkpoint: str, overrides: list) -> tuple[str | None, dict]:
    """The absolute data path a checkpoint records (announced; None: the recipe's default, Fashion-MNIST) and the
    data.* overrides of its held-out cut ({} where it records none). `overrides` that cut it otherwise are warned of:
    that val holds images the checkpoint trained on."""
    from vitkit.checkpoint import read_metadata
    from vitkit.errors import DataError

    meta = read_metadata(checkpoint)
    record = meta.get("data") if isinstance(meta.get("data"), dict) else {}
    path = record.get("path")
    # pre-trained on images without labels: nothing to fine-tune on
    if path and meta.get("class_names") == ["unlabeled"]:
        raise DataError(
            f"{checkpoint}: pre-trained on {path}, images without the labels fine-tuning needs; give labelled "
            "data with --data PATH"
        )
    if record and "split_rule" not in record:  # written before vitkit stratified its hold-out: val was cut at random
        record = {**record, "split_rule": "random"}
    cut = (
        {f"data.{key}": record[key] for key in CUT_KEYS if record.get(key) is not None}
        if record.get("name", "auto") == "auto"
        else {}
    )
    other = _cut_otherwise(cut, overrides)
    if path or cut:
        val = (record.get("splits") or {}).get("val") or {}
        held_out = val.get("selection", "all") != "all"  # a seeded share of train, not a val split of the data's own
        split = (
            f", held out as it was: val_fraction {cut['data.val_fraction']:g}, split_seed {cut['data.split_seed']}"
            if held_out and {"data.val_fraction", "data.split_seed"} <= set(cut) and not other
            else f", validated on {val['source']} as it was"
            if val.get("source") and not held_out
            else ""
        )
        print(
            f"vitkit finetune: data {path or 'Fashion-MNIST'} (what {checkpoint} was trained on{split}; --data to change)",
            flush=True,
        )
    if other:
        was = ", ".join(f"{key}={cut[key]}" for key in other)
        print(
            f"warning    {', '.join(f'{k}={v}' for k, v in other.items())} cuts the data anew ({checkpoint} was trained with {was}): "
            "its val split holds images the checkpoint trained on, and the learning rate is picked on them",
            flush=True,
        )
    return path, cut


def _cut_otherwise(cut: dict, overrides: list) -> dict:
    """The `overrides` of val_fraction, split_seed and split_rule that differ from the recorded `cut` ({} where nothing is held
    out: no val to overlap)."""
    given = dict(
        str(o).split("=", 1) for o in overrides if str(o).split("=", 1)[0] in CUTTING and str(o).split("=", 1)[0] in cut
    )
    other = {key: value for key, value in given.items() if not same_value(value, cut[key])}
    if same_value(given.get("data.val_fraction", "1"), 0):  # nothing held out: no val to overlap
        return {}
    return other


def same_value(given: str, recorded) -> bool:
    try:
        return float(given) == float(recorded)
    except (TypeError, ValueError):
        return given.strip() == str(recorded)
