"""What a run keeps to resume exactly: its step checkpoints, the train-state schema, the metrics log, and the checks
that refuse a resume which could not continue the same run.

A step checkpoint (checkpoints/step_N/) holds config.json + model.safetensors (a model alone), train_state.json
(step, data order, ...; checked against TRAIN_STATE) and train_state.pt (optimizer, RNG, EMA); under FSDP also
sharded/, every rank's shards (DCP).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vitkit.checkpoint.io import read_torch
from vitkit.checkpoint.native import is_multi_label, is_native, load_native, read_native_config, write_pretrained
from vitkit.checkpoint.runs import STATE_JSON, resolve, step_checkpoints
from vitkit.data.split import described, same_images
from vitkit.errors import CheckpointError, ConfigError, DataError
from vitkit.files import (
    abort_replacement,
    atomic_path,
    begin_replacement,
    commit_replacement,
    read_json,
    remove_unpinned,
    staging,
    update_checksums,
    write_json,
)
from vitkit.models import ModelConfig, VisionTransformer, build_model
from vitkit.train import distributed
from vitkit.train.config import RunConfig, changed_settings, load_run_yaml

STATE_TENSORS, SHARDED = "train_state.pt", "sharded"


# -- the run's parts ------------------------------------------------------------------------
@dataclass(frozen=True)
class Setup:
    """Where and how the run executes: device, processes, precision, micro-batches."""

    device: torch.device
    world: distributed.Dist
    amp_dtype: torch.dtype | None
    micro: int  # images per forward/backward pass, across all processes
    accum: int  # micro-batches per optimizer step
    checkpoints: list[Path]  # the run's complete step checkpoints, oldest first
    # the model config, built once from the run config (plan.model_of); the model's input (size, channels, mean,
    # std, background) decides how images are read, the data's classes are set on it with replace
    model: ModelConfig | None = None
    precision: str = ""  # which precision runs and why (train.precision; the plan's line)
    objective: str = ""  # what the model learns: train.objective, "auto" made what the data's labels call for
    teacher: Any = None  # train.teacher loaded and checked (a vitkit.train.teacher.Teacher), None without one
    # train.compile where it can run: on the CPU torch.compile needs a C++ compiler, and without one the run trains
    # eager and the plan says so; masked patch prediction trains eager (set once the objective is known)
    compiles: bool = False


@dataclass
class Data:
    """The training and validation images, their classes and how they are read."""

    train: Any
    val: Any
    class_names: list[str]
    bad: Any  # unreadable image files, as data.on_error says
    # the model's input (size, channels, mean, std, background) decides how images are read
    shape: ModelConfig
    batches: Any  # the training batches in their reproducible order (a Batches)
    augment: Any  # what the device does to them (an AugmentConfig: no crop where the loader cut it)
    record: dict  # the data spec and exactly which images each split holds (DataSpec.record), kept in the checkpoint
    val_files: frozenset = frozenset()  # the validation split's files, to tell which split an unreadable file is of
    val_copies: dict | None = None  # {"images": n, "example": [...]}: val images byte-identical to training images
    relabelled: dict | None = None  # copies of one image under different labels, in either split (summary's)
    # RUN/splits/VAL.txt, and its lines where vitkit held val out of the training images (each image below the data,
    # or its row in the training file for images in memory)
    held_out: tuple[Path, list[str] | None] | None = None
    # (blank, partly transparent) of the training images looked at: transparent ones one flat colour on the background
    blank: tuple[int, int] = (0, 0)

    def unreadable(self, train_split: str, val_split: str) -> dict[str, int]:
        """How many unreadable files each split has had skipped so far (data.on_error=skip): its figures count the others."""
        val = sum(1 for path in self.bad.files if path in self.val_files)
        return {train_split: len(self.bad) - val, val_split: val}

    @property
    def channels(self) -> int:
        return self.shape.in_chans


@dataclass
class RunState:
    """Everything the step changes, and what an exact resume restores."""

    model: VisionTransformer
    objective: Any  # what the model learns (an objectives.Objective): classification or masked patch prediction
    trainable: nn.Module  # what the optimizer trains: the model or the objective's module around it
    module: nn.Module  # what the step calls: `trainable`, DDP around it, or it sharded in place
    forward: Any  # `module`, compiled when train.compile is set
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    ema: dict[str, torch.Tensor] | None
    progress: dict  # step, elapsed_s, best_val_top1, ... (train_state.json)


# -- checkpoints ----------------------------------------------------------------------------
def find_checkpoint(path) -> Path:
    """The vitkit model directory a path names (see checkpoint.runs.resolve)."""
    found = resolve(path)
    if not is_native(found):
        raise CheckpointError(
            f"{path}: neither a vitkit checkpoint (config.json + model.safetensors) nor a run directory with one"
        )
    return found


def write_dir(target: Path, fill, world: distributed.Dist = distributed.Dist()) -> None:
    """Build a directory under a temporary name, then rename it into place (the file layer's replacement).

    Under torch.distributed every rank calls this: all may write into the temporary directory (FSDP
    shards), rank 0 creates and renames it.
    """
    tmp, _ = staging(target)
    if world.main:
        tmp, lock = begin_replacement(target)
    distributed.barrier(world)
    try:
        fill(tmp)
    except BaseException:
        if world.main:
            abort_replacement(tmp, lock)
        raise
    distributed.barrier(world)
    if world.main:
        commit_replacement(target, tmp, lock)
    distributed.barrier(world)


def save_checkpoint(
    out: Path,
    model: nn.Module,
    extra: dict,
    state: dict,
    tensors: dict,
    keep: int,
    world: distributed.Dist = distributed.Dist(),
    optimizer: torch.optim.Optimizer | None = None,
    ema: dict[str, torch.Tensor] | None = None,
    trainable: nn.Module | None = None,
) -> Path:
    """checkpoints/step_N: the model (vitkit format) plus the training state; keeps the `keep` newest.

    Under FSDP every rank also writes its shards of `trainable` (what the optimizer trains: the model, or
    the masked-patch objective around it), optimizer and EMA weights to step_N/sharded/ (DCP).
    """
    target = out / "checkpoints" / f"step_{state['step']:07d}"
    whole = whole_model(model, world)

    def fill(tmp: Path) -> None:
        if world.sharded:
            distributed.save_sharded(trainable or model, optimizer, tmp / SHARDED, ema)
        if world.main:
            write_pretrained(whole, tmp, extra=extra)
            with atomic_path(tmp / STATE_TENSORS) as f:
                torch.save(tensors, f)
            write_json(tmp / STATE_JSON, state)
            update_checksums(tmp)  # faults: sha256 of the weights and state files, written last, checked on --resume

    write_dir(target, fill, world)
    if world.main:
        for old in step_checkpoints(out)[: -max(keep, 1)]:
            remove_unpinned(old)  # one a reader has pinned (checkpoint.runs) stays until a later save
    return target


def whole_model(model: VisionTransformer, world: distributed.Dist) -> VisionTransformer | None:
    """The model with all its weights on rank 0 (gathered from the shards under FSDP; every rank must call)."""
    if not world.sharded:
        return model
    weights = distributed.full_state_dict(model, world)
    if not world.main:
        return None
    whole = build_model(model.config)
    whole.load_state_dict(weights)
    return whole


def load_checkpoint(folder: Path) -> tuple[VisionTransformer, dict, dict]:
    model, _ = load_native(folder)
    state = read_json(folder / STATE_JSON, damaged=DAMAGED)  # truncated or damaged: an older checkpoint can take over
    return model, check_train_state(state, folder / STATE_JSON), read_torch(folder / STATE_TENSORS)


def train_tensors(run: RunState, env: Setup) -> dict:
    """train_state.pt: scaler, RNG of every rank, EMA, the optimizer (unless sharded), the objective's own weights."""
    world = env.world
    tensors = {
        "scaler": run.scaler.state_dict(),
        "rng_cpu": torch.get_rng_state(),
        "ema": {} if world.sharded else run.ema or {},
        "rng_cpu_ranks": distributed.gather_objects(torch.get_rng_state(), world),
    }
    if not world.sharded:  # under FSDP the optimizer is sharded: step_N/sharded/
        tensors["optimizer"] = run.optimizer.state_dict()
    if env.device.type == "cuda":
        tensors["rng_cuda"] = torch.cuda.get_rng_state(env.device)
    tensors.update(run.objective.checkpoint_tensors())  # gathered from the shards under FSDP
    return tensors


def restore_tensors(run: RunState, tensors: dict, newest: Path, env: Setup) -> None:
    """Optimizer (or its shards), scaler, EMA and RNG state of checkpoint `newest` into an assembled run."""
    world = env.world
    if world.sharded:
        if not (newest / SHARDED).is_dir():
            raise CheckpointError(
                f"{newest}: written without train.strategy=fsdp; resume it with the strategy it was trained with"
            )
        distributed.load_sharded(run.trainable, run.optimizer, newest / SHARDED, run.ema)
    elif "optimizer" not in tensors:
        raise CheckpointError(
            f"{newest}: written with train.strategy=fsdp; resume it with torchrun and train.strategy=fsdp"
        )
    else:
        run.optimizer.load_state_dict(tensors["optimizer"])
    run.scaler.load_state_dict(tensors["scaler"])
    if run.ema is not None and tensors.get("ema"):
        run.ema = {k: v.to(env.device) for k, v in tensors["ema"].items()}
    ranks = tensors.get("rng_cpu_ranks")
    torch.set_rng_state(ranks[world.rank] if ranks is not None and len(ranks) == world.size else tensors["rng_cpu"])
    if env.device.type == "cuda" and "rng_cuda" in tensors:
        torch.cuda.set_rng_state(tensors["rng_cuda"], env.device)


# -- the train-state schema -----------------------------------------------------------------
def is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# train_state.json: key -> (required, check); what a resume reads from it
TRAIN_STATE = {
    "step": (True, is_count),
    "seed": (True, is_count),
    "micro_batch": (True, lambda v: is_count(v) and v > 0),
    "elapsed_s": (True, is_number),
    "best_val_top1": (True, lambda v: v is None or is_number(v)),
    "best_step": (True, lambda v: v is None or is_count(v)),
    "skipped_steps": (False, is_count),
    "precision": (False, lambda v: v in ("fp32", "bf16", "fp16")),  # what train.precision=auto chose
    "nonfinite_in_a_row": (False, is_count),
    "window": (
        False,
        lambda v: isinstance(v, dict) and is_number(v.get("loss", 0.0)) and is_count(v.get("steps", 0)),
    ),
    "baseline": (False, lambda v: isinstance(v, dict)),  # train.baseline: the pixel baseline fitted at the start
    "segments": (
        False,
        lambda v: isinstance(v, list) and all(isinstance(s, dict) and is_count(s.get("from_step")) for s in v),
    ),
}


DAMAGED = "the checkpoint is damaged; remove its directory to resume from an older one"


def check_train_state(state, path: Path) -> dict:
    """train_state.json as a resume needs it, or a CheckpointError naming the file and the key."""
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: expected a JSON object of the run's state; {DAMAGED}")
    for key, (required, ok) in TRAIN_STATE.items():
        if key not in state and required or key in state and not ok(state[key]):
            raise CheckpointError(
                f"{path}: {key!r} is {'missing' if key not in state else repr(state[key])[:40]}; {DAMAGED}"
            )
    return state


# -- the metrics log ------------------------------------------------------------------------
def read_metrics(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    if not path.is_file():
        return []
    text = path.read_text(encoding="utf-8", errors="replace")
    # faults: a kill -9 may tear the last line
    lines = text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]
    rows, damaged = [], 0
    for line in lines:
        if line.strip():
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                row = None
            ok = isinstance(row, dict) and row.get("kind") in ("train", "val") and is_count(row.get("step"))
            rows += [row] if ok else []
            damaged += not ok
    if damaged:  # a log, not the run's state: its damaged lines are dropped (and said so), the run goes on
        print(f"vitkit: {path}: {damaged} damaged line(s) ignored", file=sys.stderr, flush=True)
    return rows


def truncate_metrics(out: Path, step: int) -> None:
    """On resume, drop the log lines written after the checkpoint we continue from."""
    rows = [r for r in read_metrics(out) if r["step"] <= step]
    with atomic_path(out / "metrics.jsonl") as tmp:
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))


# -- what may be started or resumed -----------------------------------------------------------
# what a run writes into --out besides run.yaml, checkpoints/ and final/: a folder holding any without a run.yaml is
# someone else's, whose files the run would replace
RUN_FILES = (
    "summary.json",
    "metrics.jsonl",
    "bad_files.json",
    "accuracy.png",
    "loss.png",
    "lr.png",
    "eval",
    "splits",  # splits/val.txt: the images held out as val
    "metrics.csv",  # and what train.log_to adds
    "tensorboard",
    "trackers.json",
    "wandb",
)


def check_resumable(config: RunConfig, out: Path, env: Setup, data: Data, loaded: tuple) -> None:
    """The newest checkpoint's (model, progress) continue this run exactly: same model, images, seed and batch."""
    t, newest = config.train, env.checkpoints[-1]
    model, progress = loaded
    refuse_another_model(model.config, env.model.replace(num_classes=len(data.class_names)), newest)
    if progress["step"] >= t.steps:
        refuse_changes_with_nothing_to_train(config, out, progress["step"])
    saved = read_native_config(newest)[1]
    check_same_images(saved.get("data"), data.record, newest)
    if is_multi_label(saved) != (env.objective == "multi_label"):  # a sigmoid head does not continue as a softmax one
        started = "multi_label" if is_multi_label(saved) else saved.get("objective", "classification")
        raise ConfigError(
            f"train.objective: this run was started with {started}; resume it with train.objective={started}"
        )
    # the key the user set: a micro-batch is the batch unless split
    batch = "train.micro_batch" if t.micro_batch else "train.batch_size"
    for key, saved, now in (("train.seed", progress["seed"], t.seed), (batch, progress["micro_batch"], env.micro)):
        if saved != now:
            raise ConfigError(
                f"{key}: the run was checkpointed with {saved}, not {now}; an exact resume needs the same data "
                f"order: put it back (in run.yaml too), or start a new run from it (model.init={newest})"
            )


def check_same_images(saved: dict | None, now: dict, newest: Path) -> None:
    """An exact resume needs the images the checkpoint was trained on: each split's source, cut and count as recorded
    (DataSpec.record). A checkpoint without a record (written before vitkit kept one) is not checked."""
    if not isinstance(saved, dict) or not isinstance(saved.get("splits"), dict):
        return
    for name, split in now["splits"].items():
        before = saved["splits"].get(name)
        if not same_images(before, split):
            was = (
                described(before)
                if isinstance(before, dict) and {"n", "source", "selection"} <= set(before)
                else "none"
            )
            raise DataError(
                f"{split['source']}: the {name} split changed since {newest} was written ({was} then, {split['n']:,} images "
                f"({split['selection']}) now); an exact resume needs the same images: put them back as they were, or train "
                f"on them in a new run that starts from this checkpoint (model.init={newest})"
            )


def refuse_another_model(saved, now, newest: Path) -> None:
    """--resume with model.* overrides (or a run.yaml edited to another model): the checkpoint's model trains on,
    so run.yaml would record a model the run never had."""
    changed = [f.name for f in dataclasses.fields(saved) if getattr(saved, f.name) != getattr(now, f.name, None)]
    if changed:
        shown = ", ".join(f"model.{k}={getattr(saved, k)!r} (now {getattr(now, k)!r})" for k in changed[:3])
        raise ConfigError(
            f"{shown}{' ...' if len(changed) > 3 else ''}: {newest} was trained with {'that' if len(changed) == 1 else 'those'}, "
            "and a resumed run keeps its model; drop the change (and undo it in run.yaml), or start a new run from it "
            f"(vitkit train model.init={newest} ...)"
        )


def refuse_changes_with_nothing_to_train(config: RunConfig, out: Path, step: int) -> None:
    """--resume of a finished run with overrides that change it: no step would train, yet run.yaml would keep them for
    a later resume (train.lr=1e-4 now, train.steps=N later trained at 1e-4). Display settings do not count."""
    changed = changed_settings(load_run_yaml(out / "run.yaml"), config)
    if changed:
        where = (
            f"already finished at step {step} of {step}"
            if config.train.steps == step
            else f"is at step {step}, past train.steps={config.train.steps}"
        )
        raise ConfigError(
            f"{', '.join(changed)}: {out} {where}, so no step would "
            f"train with {'it' if len(changed) == 1 else 'them'}; to train longer, give train.steps above {step} as well, "
            f"or start a new run from it (model.init={out})"
        )
