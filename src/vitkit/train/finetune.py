"""Transfer (paper §3.2, App. B): fine-tune a pre-trained checkpoint, sweeping the learning rate.

    finetune(recipe, "ViT-B_16.npz", "runs/ft", lrs=[0.001, 0.003, 0.01, 0.03], image_size=384)

The starting model is built once: any checkpoint vitkit reads, at the new resolution (position
embeddings 2D-interpolated). Its head is kept where it was trained on the data's classes (by name:
a new resolution for the same task); else, and with `new_head`, a zero-initialised head for the data's
classes and, as in the official fine-tuning code, no pre-logits layer unless `keep_pre_logits`. Each learning rate
is then one ordinary `vitkit.train.train` run from it with the fine-tuning recipe (SGD momentum 0.9,
no weight decay, global-norm clip 1, linear warmup then cosine decay, logical batch 512 through
`train.micro_batch` accumulation); the run with the best final validation top-1 is picked.

Output directory:
    init/                the starting model (vitkit format)
    lr_0.001/ ...        one run directory per learning rate (see vitkit.train)
    final -> lr_X/final  the picked run's model (a relative symlink), so `vitkit eval DIR` works
    finetune.json        what was asked (checkpoint, learning rates, recipe): a rerun continues the sweep
    sweep.json, sweep.md every run's validation accuracy and the pick
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vitkit.checkpoint import load_with_metadata, save_pretrained
from vitkit.checkpoint.native import is_native, load_native, read_native_config
from vitkit.checkpoint.runs import resolve, step_checkpoints
from vitkit.data import DataSpec
from vitkit.data.spec import absolute, trained_on
from vitkit.data.split import described
from vitkit.errors import ConfigError, DataError, key_shown
from vitkit.evaluate.metrics import markdown_table, write_report
from vitkit.files import read_json, write_json
from vitkit.models import BiTConfig, ModelConfig, VisionTransformer, build_model
from vitkit.models.config import size_pair
from vitkit.models.registry import MODELS
from vitkit.train.config import ModelChoice, RunConfig, load_run_config, merge_layer, parse_yaml
from vitkit.train.init import put_head_rows
from vitkit.train.loop import train

# The paper's fine-tuning recipe (App. B; warmup 500 steps and the Inception crop [official]); a
# recipe file (configs/finetune_*.yaml) and KEY=VALUE overrides are applied on top of it. A run shorter than
# 10k steps warms up for a twentieth of its steps (500 of CIFAR's 10k), unless the warmup is given.
FINETUNE_DEFAULTS: dict[str, dict[str, Any]] = {
    "train": {
        "optimizer": "sgd",
        "momentum": 0.9,
        "weight_decay": 0.0,
        "clip_norm": 1.0,
        "lr": 0.01,
        "batch_size": 512,
        "warmup_steps": 500,
        "decay": "cosine",
        "steps": 10_000,
    },
    "augment": {"crop": "rrc", "rrc_scale": [0.05, 1.0], "hflip": 0.5},
    "data": {"val_split": "val"},  # pick on data held out of train, never on test
}
PAPER_LRS = (0.001, 0.003, 0.01, 0.03)
# model fields a fine-tuning recipe may set; the architecture itself comes from the checkpoint
TUNABLE = ("image_size", "dropout", "attn_dropout", "drop_path")


def finetune_recipe(path: str | os.PathLike | None = None, overrides: list[str] = ()) -> RunConfig:
    """FINETUNE_DEFAULTS, then the YAML file at `path`, then `section.key=value` overrides; all validated."""
    explicit: dict[str, Any] = {}
    if path is not None:
        load_run_config(path, [ANY_SIZE])  # says what is wrong with the file, naming it
        explicit = parse_yaml(Path(path).read_text(encoding="utf-8")) or {}
    set_here = set(explicit.get("model") or {}) | {
        str(o).partition("=")[0].strip()[len("model.") :] for o in overrides if str(o).startswith("model.")
    }
    _architecture_from_checkpoint(set_here)
    base = {section: dict(values) for section, values in FINETUNE_DEFAULTS.items()}
    for section, values in explicit.items():
        merge_layer(base, section, values or {}, str(path))
    named = "warmup_steps" in (explicit.get("train") or {}) or any(
        str(o).startswith("train.warmup_steps=") for o in overrides
    )
    return warmed_up(_recipe(base, overrides), named)


def warmed_up(config: RunConfig, named: bool) -> RunConfig:
    """A run shorter than the paper's 10k steps (CIFAR) warms up for the same share of them, a twentieth, unless its
    warmup is `named` (a recipe file or an override sets it)."""
    t = config.train
    if named or t.epochs is not None or t.steps >= 20 * t.warmup_steps:
        return config
    return dataclasses.replace(config, train=dataclasses.replace(t, warmup_steps=t.steps // 20))


# The architecture, its patch size included, comes from the checkpoint. A recipe's model section (image size, dropout)
# is validated as if its patches were one pixel, which divides any image size; the checkpoint's own patch size is
# checked when it is loaded at that size, in `_starting_model` (before, the recipe's placeholder model's patch size of 4
# refused a patch-7 checkpoint at 49 px).
ANY_SIZE = ("model.patch_size", 1)


def _recipe(base: dict, overrides: Iterable) -> RunConfig:
    """`base` with `overrides`, validated as a fine-tuning recipe (`ANY_SIZE`)."""
    recipe = load_run_config(None, [*overrides, ANY_SIZE], base=base)
    # the section drops the placeholder's patch size; its config keeps patches of one pixel, so that a size set on it
    # later (`finetune`'s image_size) is valid for any checkpoint
    m = recipe.model
    kept = tuple((k, v) for k, v in m.overrides if k != "patch_size")
    return dataclasses.replace(recipe, model=dataclasses.replace(m, overrides=kept, known=m.config))


def _architecture_from_checkpoint(keys: Iterable[str]) -> None:
    """Refuses a recipe's model keys other than TUNABLE (a model.name too: the checkpoint names the model)."""
    unknown = sorted(set(keys) - {"init", *TUNABLE}, key=str)
    if unknown:
        raise ConfigError(
            f"model.{key_shown(unknown[0])}: fine-tuning takes the architecture from the checkpoint; "
            f"a recipe may only set model.{', model.'.join(TUNABLE)}"
        )


def prepare_for_finetuning(
    model: VisionTransformer,
    num_classes: int,
    *,
    keep_pre_logits: bool = False,
    head_rows: list[int] | None = None,
    **tunable,
) -> VisionTransformer:
    """The paper's head rule for a new task (§3.2): a zero-initialised head for `num_classes` and, as in the
    official code, no pre-logits layer unless `keep_pre_logits`. `head_rows` (the same classes, `kept_head_rows`):
    the trained head and the layers under it kept instead, its rows put in that order.
    `tunable`: dropout rates and stochastic depth (modules without weights) for the fine-tuning runs."""
    if head_rows is None:
        model.reset_head(num_classes, keep_pre_logits=keep_pre_logits)
    else:
        put_head_rows(model, head_rows)
    if tunable:
        rebuilt = build_model(model.config.replace(**tunable))
        rebuilt.load_state_dict(model.state_dict())
        model = rebuilt
    return model


def registered_name(config: ModelConfig) -> str:
    """A registry name for run summaries (the run config gives every field explicitly, so it only labels the run):
    the model with the same architecture, else one of the same family with the same patches (or stem) and input channels."""
    if isinstance(config, BiTConfig):
        keys_tried, fallback = (
            (("layers", "width_factor", "width", "stem", "in_chans"), ("stem", "in_chans")),
            "bit_r50x1",
        )
    else:
        keys_tried, fallback = (
            (
                ("depth", "width", "mlp_dim", "num_heads", "patch_size", "backbone", "in_chans"),
                ("patch_size", "backbone", "in_chans"),
            ),
            "vit_b16",
        )
    for keys in keys_tried:
        for name, known in MODELS.items():
            if type(known) is type(config) and all(getattr(known, k) == getattr(config, k) for k in keys):
                return name
    return fallback


def run_name(lr: float) -> str:
    return f"lr_{lr:g}"


def finetune(
    recipe: RunConfig,
    checkpoint: str | os.PathLike,
    out: str | os.PathLike,
    *,
    lrs: list[float] | None = None,
    image_size: int | tuple[int, int] | None = None,
    keep_pre_logits: bool = False,
    new_head: bool = False,
) -> dict:
    """Fine-tune `checkpoint` with `recipe` once per learning rate (default: recipe's train.lr) into `out`,
    at `image_size` (default: the recipe's model.image_size, else the checkpoint's). The checkpoint's trained head is
    kept where it scores the data's classes, unless `new_head`.

    Returns {"runs": [{lr, final_val_top1, best_val_top1, ...}], "best": {...}}, or {"stopped": {lr, run, step, ...}}
    where SIGTERM/SIGINT stopped a run (a checkpoint saved; nothing picked, no `out/final`). Running it again on
    the same `out` with the same arguments continues: finished runs are kept, interrupted ones resume.
    """
    out = Path(out)
    if image_size is not None:
        recipe = dataclasses.replace(recipe, model=recipe.model.changed(image_size=_size_record(image_size)))
    lrs = [float(lr) for lr in (lrs or [recipe.train.lr])]
    if len(set(lrs)) != len(lrs):
        raise ConfigError(f"--lr: each learning rate once, got {lrs}")
    _architecture_from_checkpoint(key for key in recipe.model if key != "name")  # the name: the recipe's placeholder
    plan = {"checkpoint": str(checkpoint), "lrs": lrs, "keep_pre_logits": keep_pre_logits, "recipe": recipe.to_dict()}
    if new_head:  # only then: the plan of a sweep started before the option stays the same
        plan["new_head"] = True
    init = out / "init"
    # a checkpoint, size or data that cannot work is refused before --out holds anything a corrected command would refuse
    starting = None if is_native(init) else _starting_model(recipe, checkpoint, keep_pre_logits, new_head)
    fresh, existed = not (out / "finetune.json").is_file(), out.exists()
    _claim(out, plan)
    try:
        return _sweep(recipe, checkpoint, out, starting, lrs)
    except (ConfigError, DataError):
        # refused before any step trained (one class, too few images for a batch, a val split that does not fit): what
        # this command put in --out goes, so that the corrected command is not refused as "other arguments"
        runs = [run for run in out.iterdir() if run.is_dir() and run.name != "init"]
        if fresh and not any(step_checkpoints(run) or (run / "final").exists() for run in runs):
            for made in out.iterdir() if existed else [out]:
                shutil.rmtree(made, ignore_errors=True) if made.is_dir() and not made.is_symlink() else made.unlink()
        raise


def _size_record(size: int | tuple[int, int]) -> int | tuple[int, int]:
    """A fine-tuning size, (H, W) by the one size parser, as the recipe records it: N for a square, as a recipe file
    holds it (and finetune.json of sweeps started before, which a rerun must match), else (H, W)."""
    height, width = size_pair(size, "image_size")
    return height if height == width else (height, width)


def _sweep(recipe: RunConfig, checkpoint, out: Path, starting: tuple | None, lrs: list[float]) -> dict:
    """The runs of `finetune` in a claimed --out: the starting model saved once, a run per learning rate, the best."""
    model_section = _start_model_section(out / "init", starting)
    runs = []
    for i, lr in enumerate(lrs, 1):
        run_dir = out / run_name(lr)
        # the lines below are this run's
        print(f"== learning rate {lr:g} (run {i} of {len(lrs)}): {run_dir}", flush=True)
        config = dataclasses.replace(recipe, model=model_section, train=dataclasses.replace(recipe.train, lr=lr))
        if (run_dir / "summary.json").is_file() and is_native(run_dir / "final"):
            summary = read_json(run_dir / "summary.json")
        else:
            summary = train(config, run_dir, resume=bool(step_checkpoints(run_dir)))
            if "stopped_at" in summary:  # SIGTERM/SIGINT: no pick and no final/ until every learning rate has finished
                return {"stopped": _stopped(lr, run_dir, summary, len(runs), len(lrs))}
        runs.append({"lr": lr, "run": run_dir.name, **{k: summary.get(k) for k in SWEEP_FIGURES}})
    return _pick(recipe, checkpoint, out, runs, tuple(model_section["image_size"]))


# the figures of each run that sweep.json keeps
SWEEP_FIGURES = (
    "final_val_top1",
    "final_val_top5",
    "best_val_top1",
    "best_step",
    "steps",
    "wall_time_s",
    "val_images",
)


def _start_model_section(init: Path, starting: tuple | None) -> ModelChoice:
    """The model section of every run's config: the starting model, saved once to `init` (unless it is there), as read
    back, on the registered config of its name (no model built by name again)."""
    if starting is not None:
        model, record = starting
        save_pretrained(model, init, extra=record)  # once, atomically, in vitkit's format
    start, _ = read_native_config(init)
    fields = start.to_dict()
    fields.pop("num_classes")
    # the name says the family
    fields.pop("arch", None)
    name = registered_name(start)
    return ModelChoice(name, str(init), tuple(fields.items()), known=MODELS[name])


def _stopped(lr: float, run_dir: Path, summary: dict, finished: int, runs: int) -> dict:
    """Where a stopped sweep stands: the run it stopped in, at which step, and how many runs had finished."""
    return {
        "lr": lr,
        "run": run_dir.name,
        "step": summary["stopped_at"],
        "steps": summary["steps"],
        "runs_finished": finished,
        "runs": runs,
    }


def _pick(recipe: RunConfig, checkpoint, out: Path, runs: list[dict], size: tuple[int, int]) -> dict:
    """The best run, recorded in its model and linked as out/final; sweep.json and sweep.md; `size`: the (H, W) every
    run trained at."""
    best = pick_best(runs)
    # the model carries its pick, into a converted or copied file too: its figures on these images are optimistic
    if len(runs) > 1:
        _record_pick(
            out / best["run"] / "final",
            {
                "split": recipe.data.val_split,
                "images": best.get("val_images"),
                "among": len(runs),
                "sweep": str((out / "sweep.json").absolute()),
            },
        )
    _link(out / "final", Path(best["run"]) / "final")
    started = starting_top1(recipe, checkpoint)
    result = {
        "checkpoint": str(checkpoint),
        "image_size": list(size),
        "val_split": recipe.data.val_split,
        "val_images": best.get("val_images"),
        "picked_by": "final_val_top1",
        "runs": runs,
        "best": best,
        "started_from": started,
    }
    write_report(out, "sweep", result, sweep_markdown(result))
    return result


def _record_pick(final: Path, pick: dict) -> None:
    """Add `pick` (which images picked the model, among how many runs) to the picked run's model record."""
    model, extra = load_native(final)
    if extra.get("picked") != pick:
        save_pretrained(model, final, extra={**extra, "picked": pick})  # replaced as a whole


def _starting_model(
    recipe: RunConfig, checkpoint: str | os.PathLike, keep_pre_logits: bool, new_head: bool = False
) -> tuple[VisionTransformer, dict]:
    """The starting model of every run (the checkpoint at the recipe's size; its head where it scores the data's
    classes, else a new one) and the record saved with it."""
    source = resolve(checkpoint)
    size = recipe.model.get("image_size")
    try:
        model, meta = load_with_metadata(source, image_size=size)  # position embeddings resampled
    except ConfigError as err:
        if size is None:
            raise
        shown_size = size if isinstance(size, int) else "x".join(map(str, size))
        raise ConfigError(f"fine-tuning {checkpoint} at {shown_size} px: {err}") from None
    d = recipe.data
    classes = (
        DataSpec.from_config(d)
        .open(
            d.train_split,
            channels=model.config.in_chans,
            image_size=model.config.image_size,
            flag="data.train_split",
            hold_out="data.val_fraction",
        )
        .class_names
    )
    tunable = {k: recipe.model[k] for k in TUNABLE if k in recipe.model and k != "image_size"}
    rows = None if new_head else kept_head_rows(meta, checkpoint, model, classes)
    model = prepare_for_finetuning(model, len(classes), keep_pre_logits=keep_pre_logits, head_rows=rows, **tunable)
    return model, {"source": str(source), "class_names": classes, "pretrained_on": trained_on(meta)}


def kept_head_rows(meta: dict, checkpoint, model: VisionTransformer, classes: list[str]) -> list[int] | None:
    """For each of the data's `classes`, the row of the checkpoint's head that scores it, where that head was trained
    on exactly these classes (by name: the same task, at a new resolution); else None, for a new head."""
    from vitkit.checkpoint import untrained_head

    names = meta.get("class_names") or []
    same = len(names) == model.config.num_classes == len(set(classes)) == len(classes) and set(names) == set(classes)
    if not same or untrained_head(meta, checkpoint, model) is not None:
        return None
    return [names.index(name) for name in classes]


def starting_top1(recipe: RunConfig, checkpoint) -> dict | None:
    """The checkpoint's own top-1 on the recipe's validation images, with its own head at its own resolution: what
    fine-tuning set out to improve. None where its head does not classify the data's classes (new classes, or a head
    that never trained)."""
    from vitkit.checkpoint import untrained_head
    from vitkit.data.loader import eval_batches
    from vitkit.devices import pick_device
    from vitkit.evaluate.metrics import evaluate

    model, meta = load_with_metadata(resolve(checkpoint))
    c, d = model.config, recipe.data
    if untrained_head(meta, checkpoint, model) is not None or not meta.get("class_names"):
        return None
    val = DataSpec.from_config(d).open(
        d.val_split,
        channels=c.in_chans,
        image_size=c.image_size,
        flag="data.val_split",
        hold_out="data.val_fraction",
    )
    if list(val.class_names) != list(meta["class_names"]) or getattr(c, "num_classes", 0) != len(val.class_names):
        return None
    crop_pct = (meta.get("preprocess") or {}).get("crop_pct", 1.0)
    device = pick_device(recipe.train.device, key="train.device")
    batches = eval_batches(
        val,
        recipe.train.eval_batch_size,
        device,
        channels=c.in_chans,
        size=c.image_size,
        crop_pct=crop_pct,
        background=c.background,
    )
    metrics = evaluate(model.to(device), batches, crop_pct=crop_pct)
    return {"val_top1": metrics["top1"], "images": metrics["n"], "image_size": list(c.image_size)}


def compared_with_start(result: dict, checkpoint) -> list[str]:
    """The closing line of a sweep: the picked model's validation top-1 against its starting model's on the same
    images, and a warning where fine-tuning made it worse."""
    best, start = result["best"], result.get("started_from")
    images = result.get("val_images")
    where = f" on {described(images)}" if images else ""
    top1 = best.get("final_val_top1")
    if top1 is None:
        return []
    if not start:
        return [f"val top-1 {top1:.4f}{where} ({checkpoint} classifies other classes: nothing to compare with)"]
    lines = [f"val top-1 {top1:.4f}{where}, was {start['val_top1']:.4f} ({checkpoint} at {start['image_size'][0]} px)"]
    if top1 < start["val_top1"]:
        lines.append(
            f"warning    fine-tuning made it worse: {top1:.4f} against {start['val_top1']:.4f} for {checkpoint} on the "
            "same images; keep that model, or try a lower --lr, fewer --steps or less augmentation (augment.*)"
        )
    return lines


def pick_best(runs: list[dict]) -> dict:
    """The run with the highest final validation top-1 (the earliest of equals)."""
    if not runs:
        raise ConfigError("--lr: no learning rate to run")
    return max(runs, key=lambda r: r["final_val_top1"] if r["final_val_top1"] is not None else float("-inf"))


def _claim(out: Path, plan: dict) -> None:
    """Record the plan in out/finetune.json; an existing directory must hold the same plan (then it continues)."""
    marker = out / "finetune.json"
    plan = _absolute_paths(json.loads(json.dumps(plan)))
    if marker.is_file():
        # a plan of an older vitkit may hold paths as typed
        differ = _differing(_absolute_paths(read_json(marker)), plan)
        if differ:
            raise ConfigError(
                f"--out {out}: holds a fine-tuning run with other arguments ({', '.join(differ[:4])} differ; "
                f"{marker}); run it with those, or choose another --out"
            )
        return
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"--out {out}: exists and is not a fine-tuning directory; choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    write_json(marker, plan)


def _absolute_paths(plan: dict) -> dict:
    """The plan with its checkpoint and data paths absolute, so that the same sweep continues from any directory."""
    plan = dict(plan)
    if plan.get("checkpoint"):
        plan["checkpoint"] = str(absolute(plan["checkpoint"]))
    data = (plan.get("recipe") or {}).get("data")
    if isinstance(data, dict) and data.get("path"):
        plan["recipe"] = {**plan["recipe"], "data": {**data, "path": str(absolute(data["path"]))}}
    return plan


def _differing(a, b, prefix: str = "") -> list[str]:
    """The keys (dotted) whose values differ between two JSON objects."""
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return [] if a == b else [prefix or "the plan"]
    return [
        k
        for key in sorted(a.keys() | b.keys())
        for k in _differing(a.get(key), b.get(key), f"{prefix}{key}" if not prefix else f"{prefix}.{key}")
    ]


def _link(link: Path, target: Path) -> None:
    """Point `link` at `target` (relative), replacing an older link atomically."""
    tmp = link.with_name(f".{link.name}.tmp")
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    os.replace(tmp, link)


def sweep_markdown(result: dict) -> str:
    rows = [
        [
            ("**" + f"{r['lr']:g}" + "**") if r is result["best"] else f"{r['lr']:g}",
            r["final_val_top1"],
            r["best_val_top1"],
            r["best_step"],
            r["steps"],
            f"{r['wall_time_s']:.1f}",  # seconds: tenths are all a reader compares
        ]
        for r in result["runs"]
    ]
    images = result.get("val_images")  # which images, how many (None: runs written before their summaries said)
    picked = len(result["runs"]) > 1  # one learning rate: nothing was picked, so no figure on val is optimistic
    title = (
        f"Fine-tuning {result['checkpoint']} at {result['image_size'][0]}x{result['image_size'][1]}; "
        + (
            f"picked lr {result['best']['lr']:g} by final top-1 on the {result['val_split']} split"
            if picked
            else f"one learning rate ({result['best']['lr']:g}), nothing picked; final top-1 on the {result['val_split']} split"
        )
        + (f": {described(images)}" if images else "")
        + ".\n\n"
    )
    return title + markdown_table(
        ["lr", "final val top-1", "best val top-1", "best step", "steps", "wall time (s)"], rows
    )
