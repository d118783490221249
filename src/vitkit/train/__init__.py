"""Training a ViT end to end: one readable loop, `train(config, out)`, plus small helpers.

The paper's recipe (App. B): Adam(W) with betas 0.9/0.999 and decoupled weight decay (none on norms,
biases, position embeddings and class token) or SGD with momentum for fine-tuning; linear warmup then
cosine or linear decay; global-norm gradient clipping at 1; gradient accumulation so a logical batch
of 4096 runs on a small machine. Checkpoints hold everything an exact resume needs.

Run directory (--out):
    run.yaml                      the resolved run config
    metrics.jsonl                 one JSON object per log line ("kind": "train" | "val")
    checkpoints/step_0000500/     config.json + model.safetensors (a model alone) and
                                  train_state.json (step, data order, ...) + train_state.pt (optimizer, RNG, EMA)
    final/                        the trained model (EMA weights when train.ema is set)
    summary.json, loss.png, accuracy.png, lr.png
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shlex
import shutil
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vitkit.checkpoint import untrained_head
from vitkit.checkpoint.io import read_torch
from vitkit.checkpoint.native import (
    is_native,
    load_native,
    load_state_dict_strict,
    read_native_config,
    write_pretrained,
)
from vitkit.checkpoint.runs import STATE_JSON, resolve, step_checkpoints
from vitkit.data import (
    Batches,
    DataSpec,
    check_compatible,
    eval_batches,
    fits_in_memory,
    load_into_memory,
    mix,
    soft_targets,
    train_transform,
)
from vitkit.data.spec import absolute, trained_on
from vitkit.data.split import described, same_images, where_from
from vitkit.data.summary import copies_of_training_images, copies_warning, data_format
from vitkit.devices import pick_device
from vitkit.errors import CheckpointError, ConfigError, DataError
from vitkit.evaluate.metrics import evaluate
from vitkit.files import (
    LOCK_NAME,
    WriteError,
    abort_replacement,
    atomic_path,
    begin_replacement,
    commit_replacement,
    exclusive,
    read_json,
    refuse_foreign,
    remove_dir,
    staging,
    update_checksums,
    write_json,
)
from vitkit.models import BiTConfig, ModelConfig, VisionTransformer, build_model
from vitkit.train import distributed, faults
from vitkit.train.config import RunConfig, changed_settings, dump_run_config, load_run_config
from vitkit.train.objectives import MaskedPatchPrediction, evaluate_masked_patch

STATE_TENSORS, SHARDED = "train_state.pt", "sharded"


# -- optimizer and schedule -----------------------------------------------------------------
def param_groups(model: VisionTransformer, weight_decay: float) -> list[dict]:
    """Two groups: weight decay on weight matrices only; none on norms, biases, position embedding, class token."""
    skip = model.no_weight_decay()
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if p.ndim <= 1 or name in skip else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: VisionTransformer, t) -> torch.optim.Optimizer:
    groups = param_groups(model, t.weight_decay)
    if t.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=t.lr, momentum=t.momentum)
    # "adam" and "adamw" are the same here: Adam with decoupled weight decay, as in the paper's code
    # one fused kernel for the whole update, on GPUs and CPUs alike (on the demo model's CPU step it
    # takes 0.7 ms where the per-parameter loop takes 6.8 ms; the same update to 2.4e-7)
    fused = next(model.parameters()).device.type in ("cuda", "cpu")
    return torch.optim.AdamW(groups, lr=t.lr, betas=t.betas, fused=fused or None)


def learning_rate(step: int, *, lr: float, warmup: int, total: int, decay: str, end_ratio: float = 0.0) -> float:
    """Linear warmup over `warmup` steps, then cosine or linear decay to lr * end_ratio at `total`."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = min((step - warmup) / max(total - warmup, 1), 1.0)
    end = lr * end_ratio
    if decay == "cosine":
        return end + (lr - end) * 0.5 * (1.0 + math.cos(math.pi * progress))
    if decay == "linear":
        return lr + (end - lr) * progress
    return lr


def soft_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy against soft targets (label smoothing, Mixup/CutMix)."""
    return -(targets * F.log_softmax(logits.float(), dim=-1)).sum(dim=-1).mean()


@torch.no_grad()
def update_ema(ema: dict[str, torch.Tensor], model: nn.Module, decay: float) -> None:
    for name, value in model.state_dict().items():
        if value.is_floating_point():
            ema[name].lerp_(value, 1.0 - decay)
        else:
            ema[name].copy_(value)


# -- device and precision -------------------------------------------------------------------
def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype, or None for plain fp32: bf16 on GPU by default, fp32 on CPU unless asked."""
    if precision == "auto":
        return torch.bfloat16 if device.type == "cuda" else None
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


# -- checkpoints ----------------------------------------------------------------------------
def find_checkpoint(path: str | os.PathLike) -> Path:
    """The vitkit model directory a path names (see checkpoint.runs.resolve)."""
    found = resolve(path)
    if not is_native(found):
        raise CheckpointError(
            f"{path}: neither a vitkit checkpoint (config.json + model.safetensors) nor a run directory with one"
        )
    return found


def _write_dir(target: Path, fill, world: distributed.Dist = distributed.Dist()) -> None:
    """Build a directory under a temporary name, then rename it into place (checkpoint.io's replacement).

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
    whole = _whole_model(model, world)

    def fill(tmp: Path) -> None:
        if world.sharded:
            distributed.save_sharded(trainable or model, optimizer, tmp / SHARDED, ema)
        if world.main:
            write_pretrained(whole, tmp, extra=extra)
            with atomic_path(tmp / STATE_TENSORS) as f:
                torch.save(tensors, f)
            write_json(tmp / STATE_JSON, state)
            update_checksums(tmp)  # faults: sha256 of the weights and state files, written last, checked on --resume

    _write_dir(target, fill, world)
    if world.main:
        for old in step_checkpoints(out)[: -max(keep, 1)]:
            remove_dir(old)
    return target


def _whole_model(model: VisionTransformer, world: distributed.Dist) -> VisionTransformer | None:
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


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# train_state.json: key -> (required, check); what a resume reads from it
TRAIN_STATE = {
    "step": (True, _count),
    "seed": (True, _count),
    "micro_batch": (True, lambda v: _count(v) and v > 0),
    "elapsed_s": (True, _number),
    "best_val_top1": (True, lambda v: v is None or _number(v)),
    "best_step": (True, lambda v: v is None or _count(v)),
    "skipped_steps": (False, _count),
    "nonfinite_in_a_row": (False, _count),
    "window": (False, lambda v: isinstance(v, dict) and _number(v.get("loss", 0.0)) and _count(v.get("steps", 0))),
    "segments": (
        False,
        lambda v: isinstance(v, list) and all(isinstance(s, dict) and _count(s.get("from_step")) for s in v),
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


# -- metrics --------------------------------------------------------------------------------
def read_metrics(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    if not path.is_file():
        return []
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = (
        text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]
    )  # faults: a kill -9 may tear the last line
    rows, damaged = [], 0
    for line in lines:
        if line.strip():
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                row = None
            ok = isinstance(row, dict) and row.get("kind") in ("train", "val") and _count(row.get("step"))
            rows += [row] if ok else []
            damaged += not ok
    if damaged:  # a log, not the run's state: its damaged lines are dropped (and said so), the run goes on
        print(f"vitkit: {path}: {damaged} damaged line(s) ignored", file=sys.stderr, flush=True)
    return rows


def _truncate_metrics(out: Path, step: int) -> None:
    """On resume, drop the log lines written after the checkpoint we continue from."""
    rows = [r for r in read_metrics(out) if r["step"] <= step]
    with atomic_path(out / "metrics.jsonl") as tmp:
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))


# -- the run --------------------------------------------------------------------------------
def train(config: RunConfig, out: str | os.PathLike, *, resume: bool = False, stop_at: int | None = None) -> dict:
    """Train as `config` says, writing the run directory `out`; returns the summary.

    resume=True continues from the newest checkpoint in `out` and ends with the same weights as an
    uninterrupted run. stop_at ends early after that step (as if interrupted), with a checkpoint.
    """
    started = time.perf_counter()
    if config.data.path is not None:  # a relative data.path would mean other data from another directory
        config = dataclasses.replace(config, data=dataclasses.replace(config.data, path=absolute(config.data.path)))
    out = Path(out)
    if (
        not resume and (out / "config.json").is_file() and not (out / "run.yaml").is_file()
    ):  # eval OUT would read that model
        raise ConfigError(
            f"--out {out}: holds a model (config.json), not a run; {_train_from(out)}"
        )  # before its lock file
    data = config.data.path and Path(config.data.path).expanduser()
    if (
        data
        and data.is_dir()
        and Path(os.path.abspath(out)).is_relative_to(os.path.abspath(data))
        and data_format(data).startswith("image folder")
    ):  # its folders are classes (not so beside IDX files or shards)
        raise ConfigError(
            f"--out {out}: is inside the data folder {data}, whose folders are read as classes or splits; "
            "choose an --out outside it"
        )
    threads_before = torch.get_num_threads()
    if config.train.threads:
        torch.set_num_threads(config.train.threads)
    created = not out.exists()
    writer = exclusive(out, advice="wait for it to end, or choose another --out") if _main_process() else nullcontext()
    try:
        with writer, faults.stop_on_signals():  # one writer per run directory; SIGTERM/SIGINT stop at a step boundary
            return _train(config, out, resume, stop_at, started)
    except WriteError as err:  # a full disk: say how to go on
        raise WriteError(err.path, err.reason, then=f"continue with vitkit train --resume {out}") from None
    except BaseException:
        if created and _main_process() and out.is_dir() and {p.name for p in out.iterdir()} <= {LOCK_NAME}:
            shutil.rmtree(out, ignore_errors=True)  # failed before writing anything: leave no empty run directory
        raise
    finally:
        torch.set_num_threads(threads_before)
        distributed.teardown()


@dataclass
class _Setup:
    """Where and how the run executes: device, processes, precision, micro-batches."""

    device: torch.device
    world: distributed.Dist
    amp_dtype: torch.dtype | None
    micro: int  # images per forward/backward pass, across all processes
    accum: int  # micro-batches per optimizer step
    checkpoints: list[Path]  # the run's complete step checkpoints, oldest first


@dataclass
class _Data:
    """The training and validation images, their classes and how they are read."""

    train: Any
    val: Any
    class_names: list[str]
    bad: Any  # unreadable image files, as data.on_error says
    shape: ModelConfig  # the model's input (size, channels, mean, std) decides how images are read
    batches: Any  # the training batches in their reproducible order (a Batches)
    augment: Any  # what the device does to them (an AugmentConfig: no crop where the loader cut it)
    record: dict  # the data spec and exactly which images each split holds (DataSpec.record), kept in the checkpoint
    val_files: frozenset = frozenset()  # the validation split's files, to tell which split an unreadable file is of
    val_copies: dict | None = None  # {"images": n, "example": [...]}: val images byte-identical to training images

    def unreadable(self, train_split: str, val_split: str) -> dict[str, int]:
        """How many unreadable files each split has had skipped so far (data.on_error=skip): its figures count the others."""
        val = sum(1 for path in self.bad.files if path in self.val_files)
        return {train_split: len(self.bad) - val, val_split: val}

    @property
    def channels(self) -> int:
        return self.shape.in_chans


def _images(split: dict, unreadable: int) -> str:
    """A split's images for a figure: "120 images", or "117 of 120 images (3 unreadable skipped)"."""
    return (
        f"{split['n'] - unreadable:,} of {split['n']:,} images ({unreadable:,} unreadable skipped)"
        if unreadable
        else f"{split['n']:,} images"
    )


@dataclass
class _State:
    """Everything the step changes, and what an exact resume restores."""

    model: VisionTransformer
    objective: MaskedPatchPrediction | None  # masked patch prediction wraps the model; None for classification
    trainable: nn.Module  # what the optimizer trains: the model or the objective around it
    module: nn.Module  # what the step calls: `trainable`, DDP around it, or it sharded in place
    forward: Any  # `module`, compiled when train.compile is set
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    ema: dict[str, torch.Tensor] | None
    progress: dict  # step, elapsed_s, best_val_top1, ... (train_state.json)


def _main_process() -> bool:
    """Rank 0 under torchrun (it alone holds the run directory's lock), else the only process."""
    return os.environ.get("RANK", "0") == "0"


def _train(config: RunConfig, out: Path, resume: bool, stop_at: int | None, started: float) -> dict:
    env = _setup(config, out, resume)
    data = _prepare_data(config, out, resume, env)
    config = config.with_steps_for(len(data.train))  # train.epochs -> train.steps, now that the split's size is known
    t, a = config.train, config.augment
    run = _restore(config, out, env, data) if resume else _build(config, out, env, data)
    extra = {
        "class_names": data.class_names,
        "preprocess": {"crop_pct": a.eval_crop_pct},
        "data": data.record,
    }  # every evaluation command reads the same splits
    if earlier := _pretrained_on(
        config, env
    ):  # the data its starting weights were trained on: their images are not unseen
        extra["pretrained_on"] = earlier
    if t.objective == "masked_patch":  # its classification head never trained: eval and predict say so (untrained_head)
        extra["objective"] = t.objective

    # data order: micro-batch number m is batch (m % per_epoch) of epoch (m // per_epoch), seeded by train.seed
    batches = data.batches
    step, elapsed_before = run.progress["step"], run.progress["elapsed_s"]
    # where each stretch of a resumed run ran (summary.json): its device, processes and threads may differ
    segment = {
        "from_step": step,
        "device": str(env.device),
        "processes": env.world.size,
        "threads": torch.get_num_threads(),
    }
    if step < t.steps:  # a run resumed only to write its figures trains no stretch
        run.progress["segments"] = [*run.progress.get("segments", []), segment]
    stream = batches.iterate(*divmod(step * env.accum, batches.per_epoch))
    last = min(t.steps, stop_at) if stop_at is not None else t.steps
    if env.world.main:
        print(
            _plan(config, run.model, data, env, step, last, resumed_from=env.checkpoints[-1] if resume else None),
            flush=True,
        )
    bar = _progress(t, step, show=env.world.main)
    log = open(out / "metrics.jsonl" if env.world.main else os.devnull, "a")  # rank 0 logs
    window = {"loss": 0.0, "steps": 0, **run.progress.get("window", {}), "images": 0, "time": time.perf_counter()}
    val_metrics: dict[str, Any] = {}

    def checkpoint() -> None:
        elapsed = elapsed_before + time.perf_counter() - started
        _save_step(out, config, env, data, run, batches, step, elapsed, window, extra)

    run.model.train()
    nonfinite = faults.NonFinite(
        run.progress,
        t.max_nonfinite_steps,
        check_grads=not run.scaler.is_enabled(),
        last_good=lambda: faults.last_finite_checkpoint(out),
    )
    try:
        while step < last:
            lr, step_loss, grad_norm = _step(config, env, data, run, stream, step, nonfinite)
            step += 1
            window["loss"] += step_loss.detach().double()  # summed on the device: no wait for the GPU each step
            window["steps"] += 1
            window["images"] += t.batch_size
            if step % t.log_every == 0 or step == t.steps:
                window = _log_train(
                    log, bar, window, step, step * env.accum / batches.per_epoch, lr, grad_norm, t, env.world.main
                )
            if step % t.eval_every == 0 or step == t.steps:
                val_metrics = _validate_and_log(log, bar, env, data, run, config, step)
            if step % t.checkpoint_every == 0 or step == last:
                checkpoint()
            bar.update(1)
            stop = distributed.any_rank(
                faults.stop_requested() is not None, env.world
            )  # every rank stops at the same step
            if stop and step < last:  # faults: SIGTERM/SIGINT -> an ordinary step checkpoint, then stop
                if step % t.checkpoint_every:
                    checkpoint()
                last = step
    finally:
        bar.close()
        log.close()

    if step < t.steps:
        return {"stopped_at": step, "steps": t.steps}
    if not val_metrics:  # resumed a run that had already finished
        val_metrics = _validate(
            run.model, run.ema, partial(_val_data, config, env, data), env.amp_dtype, a.eval_crop_pct, run.objective
        )
    return _finish(config, out, env, data, run, val_metrics, extra)


# -- the phases of a run ----------------------------------------------------------------------
def _setup(config: RunConfig, out: Path, resume: bool) -> _Setup:
    """The device and processes, the micro-batch split, and whether `out` may be started or resumed."""
    t = config.train
    device = pick_device(t.device, key="train.device")
    world, device = distributed.setup(t.strategy, device)  # under torchrun: DDP or FSDP across processes
    micro = t.micro_batch or t.batch_size
    if t.batch_size % micro:
        raise ConfigError(f"train.micro_batch: {micro} does not divide train.batch_size {t.batch_size}")
    if micro % world.size:
        raise ConfigError(
            f"train.micro_batch: {micro} images per micro-batch do not split evenly across {world.size} processes"
        )
    checkpoints = step_checkpoints(out)
    if resume and not checkpoints:
        raise CheckpointError(f"{out}: no checkpoint to resume from (expected {out}/checkpoints/step_*/)")
    if not resume and (checkpoints or (out / "final").exists()):
        raise ConfigError(f"--out {out}: already holds a run; continue it with --resume {out} or choose another --out")
    if (
        resume
    ):  # its end replaces final/ as a whole: a user's file there (an export, notes) is refused now, not lost then
        refuse_foreign(out / "final", f"move it out of {out / 'final'}, then resume")
    theirs = [name for name in RUN_FILES if (out / name).exists()]
    if not resume and theirs and not (out / "run.yaml").is_file():  # not a run stopped before its first checkpoint
        raise ConfigError(
            f"--out {out}: holds {theirs[0]}, which a run writes, and is not a vitkit run; choose a new or "
            "empty --out (nothing was changed)"
        )
    return _Setup(device, world, autocast_dtype(t.precision, device), micro, t.batch_size // micro, checkpoints)


def _prepare_data(config: RunConfig, out: Path, resume: bool, env: _Setup) -> _Data:
    """Open the splits and check them; small ones are loaded onto the device whole."""
    t, a, d = config.train, config.augment, config.data
    # the model's input size and channels decide how images are read; the data decides the classes
    shape = config.model_config()
    size, channels = shape.image_size[0], shape.in_chans
    spec = DataSpec.from_config(d)  # the split resolver; its record in the checkpoint names exactly these images
    train_split = spec.open(
        d.train_split, channels=channels, image_size=size, flag="data.train_split", hold_out="data.val_fraction"
    )
    val_split = spec.open(
        d.val_split, channels=channels, image_size=size, flag="data.val_split", hold_out="data.val_fraction"
    )
    check_compatible(train_split, val_split)  # faults: the same classes, labels in range, before any work
    val_copies = (copies_of_training_images({"train": train_split, "val": val_split}) or {}).get(
        "val"
    )  # said in the plan
    record = spec.record({d.train_split: train_split, d.val_split: val_split})
    val_files = frozenset(str(path) for path in val_split.paths) if val_split.paths is not None else frozenset()
    bad = faults.bad_files(
        out,
        d.on_error,
        resume,
        writer=env.world.main,  # faults: unreadable image files, as data.on_error says
        split_of=lambda path: d.val_split if path in val_files else d.train_split,
    )
    if fits_in_memory(val_split, channels, shape.image_size, d.memory_mb):  # read as vitkit eval reads it: at (H, W)
        val_split = load_into_memory(val_split, channels, shape.image_size, a.eval_crop_pct, workers=d.workers, bad=bad)
    class_names = train_split.class_names
    if "num_classes" in config.model and config.model["num_classes"] != len(class_names):
        raise ConfigError(
            f"model.num_classes: {config.model['num_classes']} given but the data has {len(class_names)} classes"
        )
    if (
        len(class_names) < 2 and t.objective == "classification"
    ):  # masked patch prediction trains on a folder without class folders
        raise DataError(
            f"{train_split.source}: one class ({class_names[0]!r}); classification needs two or more "
            "(root/<class>/<image>); to pre-train on images without labels use train.objective=masked_patch"
        )
    if len(train_split) < env.micro:
        raise DataError(
            f"{train_split.source}: {len(train_split)} training images, fewer than one batch of {env.micro}; lower train.batch_size"
        )
    batches, augment = training_batches(config, train_split, env.micro, env.device, bad, env.world)
    return _Data(batches.split, val_split, class_names, bad, shape, batches, augment, record, val_files, val_copies)


def _build(config: RunConfig, out: Path, env: _Setup, data: _Data) -> _State:
    """A new run: the initial weights (seeded, or from model.init), and the run directory."""
    torch.manual_seed(config.train.seed)  # the initial weights, then dropout / stochastic depth draws
    model = build_model(config.model_config(num_classes=len(data.class_names)))  # a ViT or a BiT ResNet
    if config.model.get("init"):
        note = _init_from(model, Path(config.model["init"]), data.class_names)
        if env.world.main:
            print(f"model.init: {note}", flush=True)
    run = _assemble(config, env, model, {"step": 0, "elapsed_s": 0.0, "best_val_top1": None, "best_step": None}, None)
    if env.world.main:
        out.mkdir(parents=True, exist_ok=True)
        with atomic_path(out / "run.yaml") as tmp:
            tmp.write_text(dump_run_config(config))
        (out / "metrics.jsonl").unlink(missing_ok=True)
    distributed.barrier(env.world)
    return run


# what a run writes into --out besides run.yaml, checkpoints/ and final/: a folder holding any without a run.yaml is
# someone else's, whose files the run would replace
RUN_FILES = ("summary.json", "metrics.jsonl", "bad_files.json", "accuracy.png", "loss.png", "lr.png", "eval")


def _check_same_images(saved: dict | None, now: dict, newest: Path) -> None:
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


def _restore(config: RunConfig, out: Path, env: _Setup, data: _Data) -> _State:
    """A resumed run: the model, optimizer, scaler, EMA and RNG state of the newest complete checkpoint."""
    t, world, newest = config.train, env.world, env.checkpoints[-1]
    if world.main:
        faults.remove_partial_checkpoints(out, STATE_JSON)
    distributed.barrier(world)
    model, progress, tensors = load_checkpoint(newest)
    _refuse_another_model(model.config, config.model_config(num_classes=len(data.class_names)), newest)
    if progress["step"] >= t.steps:
        _refuse_changes_with_nothing_to_train(config, out, progress["step"])
    _check_same_images(read_native_config(newest)[1].get("data"), data.record, newest)
    batch = (
        "train.micro_batch" if t.micro_batch else "train.batch_size"
    )  # the key the user set: a micro-batch is the batch unless split
    for key, saved, now in (("train.seed", progress["seed"], t.seed), (batch, progress["micro_batch"], env.micro)):
        if saved != now:
            raise ConfigError(
                f"{key}: the run was checkpointed with {saved}, not {now}; an exact resume needs the same data "
                f"order: put it back (in run.yaml too), or start a new run from it (model.init={newest})"
            )
    run = _assemble(config, env, model, progress, tensors)
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
    if world.main:
        _truncate_metrics(out, progress["step"])
        with atomic_path(out / "run.yaml") as tmp:  # overrides on --resume (train.steps=N) hold for every later resume
            tmp.write_text(dump_run_config(config))
    distributed.barrier(world)
    return run


def _refuse_another_model(saved, now, newest: Path) -> None:
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


def _refuse_changes_with_nothing_to_train(config: RunConfig, out: Path, step: int) -> None:
    """--resume of a finished run with overrides that change it: no step would train, yet run.yaml would keep them for
    a later resume (train.lr=1e-4 now, train.steps=N later trained at 1e-4). Display settings do not count."""
    changed = changed_settings(load_run_config(out / "run.yaml"), config)
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


def _assemble(config: RunConfig, env: _Setup, model: VisionTransformer, progress: dict, tensors: dict | None) -> _State:
    """Around the model: the objective, the distributed wrapper, optimizer, scaler and EMA (not yet restored)."""
    t = config.train
    model.to(env.device)
    model.set_grad_checkpointing(t.grad_checkpointing)
    # masked patch prediction: its [mask] embedding and colour head train beside the ViT; the saved model is the ViT
    objective = _masked_patch_objective(model, t.objective, tensors)
    trainable = model if objective is None else objective
    module = distributed.wrap(trainable, env.world, env.device, model.blocks)
    optimizer = make_optimizer(trainable, t)
    scaler = torch.amp.GradScaler(env.device.type, enabled=env.amp_dtype == torch.float16)
    # EMA weights: shaped as the model's state dict, so sharded like it under FSDP (updated without communication)
    ema = {k: v.detach().clone() for k, v in model.state_dict().items()} if t.ema else None
    forward = torch.compile(module) if t.compile and objective is None else module
    return _State(model, objective, trainable, module, forward, optimizer, scaler, ema, progress)


def _step(config: RunConfig, env: _Setup, data: _Data, run: _State, stream, step: int, nonfinite) -> tuple:
    """One optimizer step over `accum` micro-batches: (learning rate, the global batch's loss, gradient norm)."""
    t, a, world, accum = config.train, config.augment, env.world, env.accum
    shape = data.shape
    lr = learning_rate(step, lr=t.lr, warmup=t.warmup_steps, total=t.steps, decay=t.decay, end_ratio=t.end_lr_ratio)
    for group in run.optimizer.param_groups:
        group["lr"] = lr
    loss_sum = torch.zeros((), device=env.device)
    for k in range(accum):
        images, labels = next(stream)
        g = augment_generator(t.seed, step * accum + k, world.rank)
        x = train_transform(images, shape.image_size, data.augment, shape.mean, shape.std, g)
        x, targets = mix(x, soft_targets(labels, len(data.class_names), a.label_smoothing), a, g)
        with distributed.grad_sync(run.module, world, sync=k == accum - 1):  # reduce across ranks once per step
            with torch.autocast(
                env.device.type, dtype=env.amp_dtype or torch.float32, enabled=env.amp_dtype is not None
            ):
                # masked patch prediction reads no labels: the objective makes its own targets
                logits, targets = (run.forward(x), targets) if run.objective is None else run.forward(x, g)
            loss = soft_cross_entropy(logits, targets)
            run.scaler.scale(loss / accum).backward()
        loss_sum += loss.detach() / accum
    run.scaler.unscale_(run.optimizer)
    grad_norm = nn.utils.clip_grad_norm_(run.trainable.parameters(), t.clip_norm or float("inf"))
    step_loss = distributed.mean(loss_sum, world)  # the global batch's loss, the same on every rank
    # faults: a non-finite step is skipped (no gradients, so the optimizer changes nothing); every rank
    # decides alike: the loss is averaged over ranks and the gradient norm already is
    if nonfinite.skip(step, step_loss, grad_norm):
        run.optimizer.zero_grad(set_to_none=True)
    run.scaler.step(run.optimizer)
    run.scaler.update()
    run.optimizer.zero_grad(set_to_none=True)
    if run.ema is not None:
        update_ema(run.ema, run.model, t.ema)
    return lr, step_loss, grad_norm


# -- periodic events: log lines, validation, checkpoints -----------------------------------------
def _log_train(log, bar, window: dict, step: int, epoch: float, lr: float, grad_norm, t, main: bool) -> dict:
    """A train line in metrics.jsonl (the loss averaged since the last one) and the progress bar (without one,
    train.progress=false, the same figures as a printed line); a new window."""
    now = time.perf_counter()
    row = {
        "kind": "train",
        "step": step,
        "epoch": epoch,
        "loss": float(window["loss"]) / window["steps"],
        "lr": lr,
        "grad_norm": float(grad_norm),
        "img_s": window["images"] / max(now - window["time"], 1e-9),
    }
    log.write(json.dumps(row) + "\n")
    log.flush()
    bar.set_postfix(loss=f"{row['loss']:.4f}", lr=f"{lr:.2e}", img_s=f"{row['img_s']:.0f}")
    if not t.progress and main:
        bar.write(f"step {step}/{t.steps}: loss {row['loss']:.4f}  lr {lr:.2e}  {row['img_s']:.0f} img/s")
    return {"loss": 0.0, "steps": 0, "images": 0, "time": now}


def _val_data(config: RunConfig, env: _Setup, data: _Data):
    return eval_batches(
        data.val,
        config.train.eval_batch_size,
        env.device,
        channels=data.channels,
        size=data.shape.image_size,
        crop_pct=config.augment.eval_crop_pct,
        workers=config.data.workers,
        bad=data.bad,
    )


def _validate_and_log(log, bar, env: _Setup, data: _Data, run: _State, config: RunConfig, step: int) -> dict:
    """Validation (through the EMA weights if kept): a val line in metrics.jsonl, the best so far, a line on screen."""
    val_data = partial(_val_data, config, env, data)
    metrics = _validate(run.model, run.ema, val_data, env.amp_dtype, config.augment.eval_crop_pct, run.objective)
    row = {"kind": "val", "step": step, **{f"val_{k}": metrics[k] for k in ("top1", "top5", "loss")}}
    log.write(json.dumps(row) + "\n")
    log.flush()
    progress = run.progress
    if progress["best_val_top1"] is None or metrics["top1"] > progress["best_val_top1"]:
        progress["best_val_top1"], progress["best_step"] = metrics["top1"], step
    if env.world.main:
        top5 = (
            f"  top-5 {metrics['top5']:.4f}" if run.objective is not None or len(data.class_names) > 5 else ""
        )  # else always 1
        what = (
            " colour-prediction" if run.objective is not None else ""
        )  # masked patch prediction: of the patches' colours
        ema = " (EMA weights)" if run.ema is not None else ""
        bar.write(f"step {step}: val{what} top-1 {metrics['top1']:.4f}{top5}  loss {metrics['loss']:.4f}{ema}")
    return metrics


def _save_step(
    out: Path,
    config: RunConfig,
    env: _Setup,
    data: _Data,
    run: _State,
    batches,
    step: int,
    elapsed: float,
    window: dict,
    extra: dict,
) -> None:
    """checkpoints/step_N: the model and everything an exact resume needs (data order, optimizer, RNG, EMA)."""
    world = env.world
    faults.check_run_directory(out, world)
    faults.check_finite_weights(run.model, step, out, world)  # never a checkpoint of unusable weights
    faults.merge_bad_files(
        data.bad, distributed.gather_objects(data.bad.files, world)
    )  # each rank streams its own files
    epoch, position = divmod(step * env.accum, batches.per_epoch)
    run.progress.update(
        step=step,
        epoch=epoch,
        position=position,
        seed=config.train.seed,
        micro_batch=env.micro,
        elapsed_s=elapsed,
        window={"loss": float(window["loss"]), "steps": window["steps"]},
    )  # the loss averaged until the next log line
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
    if run.objective is not None:  # masked patch prediction; gathered from the shards under FSDP
        tensors["masked_patch"] = distributed.full_tensors(run.objective.objective_state())
    save_checkpoint(
        out,
        run.model,
        extra,
        run.progress,
        tensors,
        config.train.keep_checkpoints,
        world,
        run.optimizer,
        run.ema,
        run.trainable,
    )


def _finish(
    config: RunConfig, out: Path, env: _Setup, data: _Data, run: _State, val_metrics: dict, extra: dict
) -> dict:
    """final/ (the EMA weights when kept), summary.json and the run's plots."""
    t, world, progress = config.train, env.world, run.progress
    faults.steps_done()
    faults.check_run_directory(out, world)
    if run.ema is None:
        export = _whole_model(run.model, world)
    else:  # the average, not the live weights: no need to gather those too
        export = build_model(run.model.config)
        export.load_state_dict(distributed.full_tensors(run.ema))
    skipped = data.unreadable(config.data.train_split, config.data.val_split)
    if any(skipped.values()):  # the record says how many of each split's images the model never saw (vitkit info)
        recorded = {
            name: {**split, **({"unreadable": skipped[name]} if skipped.get(name) else {})}
            for name, split in extra["data"].get("splits", {}).items()
        }
        extra = {**extra, "data": {**extra["data"], "splits": recorded}}
    _write_dir(out / "final", lambda tmp: world.main and write_pretrained(export, tmp, extra=extra), world)
    if not world.main:
        return {"rank": world.rank}
    rows = read_metrics(out)
    train_rows = [r for r in rows if r["kind"] == "train"]
    summary = {
        "final_val_top1": val_metrics.get("top1"),
        "final_val_top5": val_metrics.get("top5"),
        "best_val_top1": progress["best_val_top1"],
        "best_step": progress["best_step"],
        "val_split": config.data.val_split,
        "val_images": data.record.get("splits", {}).get(config.data.val_split),  # which images those figures are on
        "steps": t.steps,
        "images_seen": t.steps * t.batch_size,
        "wall_time_s": progress["elapsed_s"],
        "img_s": _mean_rate(train_rows, t.batch_size),
        "model": _model_name(
            config.model.get("name"), run.model.config
        ),  # the name where the architecture is that model's
        "objective": t.objective,  # masked_patch: the val_* figures are the colour-prediction accuracy and loss
        "ema": t.ema,  # a decay: the val_* figures and final/ are of the EMA weights
        "params": sum(p.numel() for p in run.model.parameters()),
        "device": str(env.device),  # these three: the last stretch of the run; "segments" has every one
        "processes": world.size,
        "threads": torch.get_num_threads(),
        "segments": _segments(progress.get("segments", []), t.steps),
        "checkpoint": str(out / "final"),
        "skipped_steps": progress["skipped_steps"],  # faults: non-finite steps
        "bad_files": len(data.bad),
        "unreadable": (
            skipped := data.unreadable(config.data.train_split, config.data.val_split)
        ),  # of each split: its figures count the rest
    }
    write_json(out / "summary.json", summary)
    from vitkit.plots import plot_run  # matplotlib only when a run ends

    splits = data.record.get("splits", {})
    captions = {
        name: f"{_images(split, skipped.get(name, 0))}, {where_from(split, all_said=False)}"
        for name, split in splits.items()
    }
    a = config.augment
    plot_run(
        rows,
        out,
        train_data=captions.get(config.data.train_split),
        val_data=captions.get(config.data.val_split),
        classes=len(data.class_names),
        objective=t.objective if t.objective != "classification" else None,
        ema=t.ema is not None,
        soft_targets=bool(a.label_smoothing or a.mixup or a.cutmix),
    )
    return summary


def _mean_rate(train_rows: list[dict], batch_size: int) -> float | None:
    """Training images a second over the logged windows: their images over their time (an average of the windows'
    rates weighed a short last window as much as a long one)."""
    images = seconds = 0.0
    previous = 0
    for row in train_rows:
        n = (row["step"] - previous) * batch_size
        previous = row["step"]
        if _number(row.get("img_s")) and row["img_s"] > 0:
            images, seconds = images + n, seconds + n / row["img_s"]
    return images / seconds if seconds else None


def _segments(segments: list[dict], steps: int) -> list[dict]:
    """Each stretch of the run with the steps it trained: [from_step, to_step). A stretch stopped before its first
    checkpoint is not among them (its steps were trained again by the next)."""
    ends = [s["from_step"] for s in segments[1:]] + [steps]
    return [
        {"steps": [s["from_step"], end], **{k: v for k, v in s.items() if k != "from_step"}}
        for s, end in zip(segments, ends)
    ]


def _plan(
    config: RunConfig,
    model: VisionTransformer,
    data: _Data,
    env: _Setup,
    step: int,
    last: int,
    resumed_from: Path | None,
) -> str:
    """The block printed before training: model, its size and cost, the data of each split, the run, an estimated time."""
    from vitkit.models.summary import count_flops

    c, t, record = model.config, config.train, data.record
    params = sum(p.numel() for p in model.parameters())
    names = data.class_names
    shown = ", ".join(names[:10]) + (f", ... ({len(names)} in all)" if len(names) > 10 else "")
    if isinstance(c, BiTConfig):  # a ResNet: stages and widths, no tokens
        shape = f"units {'-'.join(map(str, c.layers))}, width {c.width * c.width_factor}, {c.stem} stem"
    else:
        b = c.backbone
        stem = (
            ""
            if b is None
            else f"ResNet {'stem' if not b.layers else 'units ' + '-'.join(map(str, b.layers))} (width {b.width}), "
        )
        shape = f"{stem}patch {c.patch_size[0]} ({c.num_patches} tokens), width {c.width}, depth {c.depth}"
    lines = [
        f"model      {_model_name(config.model.get('name'), c)} at {c.image_size[0]}x{c.image_size[1]}, "
        f"{c.in_chans} channel{'s' * (c.in_chans > 1)}, {shape}: {params:,} parameters, {count_flops(c) / 1e9:.3g} GFLOPs/image",
        f"data       {record['name'] if record['name'] == 'synthetic' else record['path']}: {len(names)} class{'es' * (len(names) != 1)} ({shown})",
    ]
    skipped = data.unreadable(t_split := config.data.train_split, config.data.val_split)
    for name, split in record["splits"].items():
        lines.append(
            f"  {name:<8} {split['n']:>7,} images  {where_from(split)}"
            + (
                f": {skipped[name]:,} unreadable skipped, {split['n'] - skipped[name]:,} read"
                if skipped.get(name)
                else ""
            )
        )
    if len(
        data.bad
    ):  # found while loading the data into memory, or listed by an earlier segment; a streamed run finds its own as it reads
        lines.append(
            f"  skipped  {len(data.bad):>7,} unreadable (data.on_error=skip, listed in bad_files.json): "
            + ", ".join(f"{k:,} of {name}" for name, k in skipped.items())
            + f"; {(read := len(data.train) - (0 if data.train.images is not None else skipped[t_split])):,} training "
            + ("image is" if read == 1 else "images are")
            + " read"
        )
    images = (last - step) * t.batch_size
    epochs = images / max(len(data.train), 1)
    threads = torch.get_num_threads()
    length = f" (train.epochs={t.epochs:g})" if t.epochs is not None else ""
    if step >= last:  # trained to its end before it stopped: only the final model and figures are left to write
        lines.append(f"training   all {t.steps} steps done; writing the final model and figures")
    else:
        lines.append(
            f"training   steps {step + 1}-{last} of {t.steps}{length}, batch {t.batch_size}, lr {t.lr:g} ({t.optimizer}, {t.decay}): "
            f"{images:,} images ({epochs:.3g} epochs) on {env.device}, "
            + (f"{env.world.size} processes x " if env.world.size > 1 else "")
            + f"{threads} thread{'s' * (threads > 1)}"
        )
    if data.val_copies:
        lines.append(f"warning    {copies_warning('val', data.val_copies)}")
    if t.warmup_steps > t.steps:
        lines.append(
            f"warning    train.warmup_steps={t.warmup_steps} is more than train.steps={t.steps}: the learning rate only warms up "
            f"(to {t.lr * t.steps / t.warmup_steps:.3g} at the last step) and never reaches {t.lr:g}; lower train.warmup_steps"
        )
    if (
        env.world.size == 1 and not env.world.sharded and step < last
    ):  # one process of FSDP: the wrapped objective, not the model, unshards it
        seconds = _time_step(model, env.micro, env.device, env.amp_dtype) * env.accum * (last - step)
        lines.append(
            f"estimated  {_clock(seconds)} (forward + backward timed on this machine; data loading and evaluation come on top)"
        )
    if resumed_from is not None:
        lines.insert(0, f"resuming from step {step} ({resumed_from})")
    return "\n".join(lines)


def _model_name(name: str | None, c) -> str:
    """The run's model name where the architecture is that model's, else its family (e.g. a name kept only as a label)."""
    from vitkit.models import get_config

    family = "BiT ResNet" if isinstance(c, BiTConfig) else "ViT" if c.backbone is None else "hybrid ViT"
    try:
        known = get_config(name)
    except (ConfigError, AttributeError, TypeError):
        return family
    keys = (
        ("layers", "width_factor", "width", "stem")
        if isinstance(c, BiTConfig)
        else ("width", "depth", "mlp_dim", "num_heads")
    )
    same = type(known) is type(c) and all(getattr(known, k) == getattr(c, k) for k in keys)
    return name if same else family


PROBE_FLOPS = (
    2e10  # the timed pass's size on a CPU: large enough for per-batch overheads not to dominate, quick everywhere
)
GPU_PROBE_FLOPS = (
    2e13  # on a GPU: tens of ms of bf16 work, so that kernel launches do not dominate (a 1-image pass did:
)
# ViT-B/16 at batch 256 on an H200 was estimated at 5:55 for 120 steps that took 9 s)


def probe_images(config, micro: int, device: torch.device) -> int:
    """Images in the timed pass: up to 64 (never more than the micro-batch), fewer where that exceeds the device's
    budget of work (forward + backward: about 3x the forward's FLOPs)."""
    from vitkit.models.summary import count_flops

    budget = GPU_PROBE_FLOPS if device.type == "cuda" else PROBE_FLOPS
    return max(1, min(micro, 64, int(budget / (3 * count_flops(config)))))


def _time_step(model: VisionTransformer, micro: int, device: torch.device, amp_dtype: torch.dtype | None) -> float:
    """Seconds of one forward + backward pass of a micro-batch, from a pass of `probe_images` images in the run's
    autocast dtype, scaled to `micro`. A pass of a few images costs more per image than a full batch does, so the
    probe is as large as the budget allows. (Eager: a compiled run's steps are somewhat quicker.)

    Runs on the model itself (no copy: memory stays as it is) with the RNG state restored and the gradients
    cleared afterwards, so the run's weights, data order and random draws are untouched."""
    c = model.config
    probe = probe_images(c, micro, device)
    x = torch.zeros(probe, c.in_chans, *c.image_size, device=device)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        times = []
        for _ in range(3):  # the first pass warms up; the quicker of the other two
            start = time.perf_counter()
            with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
                loss = model(x).float().logsumexp(-1).mean()
            loss.backward()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - start)
    model.zero_grad(set_to_none=True)
    return min(times[1:]) * micro / probe


def _clock(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}"


def training_batches(
    config: RunConfig, split, micro: int, device: torch.device, bad, world: distributed.Dist = distributed.Dist()
):
    """The run's training batches (a `Batches`) and the augmentation the device applies to them.

    Image files get the Inception crop from the whole decoded image in the loader (never from a resized
    copy; the device then only flips and RandAugments); other data is held in memory when it fits
    (data.memory_mb) and cropped on the device.
    """
    a, d = config.augment, config.data
    shape = config.model_config()
    size, channels = shape.image_size[0], shape.in_chans
    load_size = d.load_size or (round(size * 8 / 7) if a.crop == "rrc" else size)
    crop = (a.rrc_scale, a.rrc_ratio) if a.crop == "rrc" and split.images is None else None
    if crop is None and fits_in_memory(split, channels, load_size, d.memory_mb):
        split = load_into_memory(split, channels, load_size, workers=d.workers, bad=bad)
    batches = Batches(
        split,
        micro,
        config.train.seed,
        device,
        channels=channels,
        size=size if crop else load_size,
        workers=d.workers,
        rank=world.rank,
        world=world.size,
        bad=bad,
        crop=crop,
    )  # faults: bad streamed files, as data.on_error says
    return batches, replace(a, crop="none") if batches.cropped else a


def augment_generator(seed: int, micro_batch: int, rank: int = 0) -> torch.Generator:
    """The generator of every device-side augmentation draw of one micro-batch (number `micro_batch` of the run)."""
    return torch.Generator().manual_seed(seed * 1_000_003 + micro_batch + rank * 7_919)


def first_batch_pixels(config: RunConfig, count: int) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """The first `count` images of the run's first micro-batch as training augments them (crop, flip, RandAugment;
    computed on the CPU), before normalisation, random erasing and Mixup/CutMix: ((N, C, H, W) uint8, labels, class names)."""
    from vitkit.data import BadFiles, augment_pixels

    shape, d, t = config.model_config(), config.data, config.train
    split = DataSpec.from_config(d).open(
        d.train_split,
        channels=shape.in_chans,
        image_size=shape.image_size[0],
        flag="data.train_split",
        hold_out="data.val_fraction",
    )
    batches, augment = training_batches(
        config, split, t.micro_batch or t.batch_size, torch.device("cpu"), BadFiles(d.on_error)
    )
    images, labels = next(batches.iterate(0, 0))
    pixels = augment_pixels(images, shape.image_size, augment, augment_generator(t.seed, 0))[
        :count
    ]  # draws depend on the batch
    return (pixels * 255).round().clamp(0, 255).to(torch.uint8), labels[:count], split.class_names


def _validate(model, ema, batches, amp_dtype, crop_pct, objective=None) -> dict:
    measure = evaluate if objective is None else lambda _, data, **kw: evaluate_masked_patch(objective, data, **kw)
    if ema is None:
        return measure(model, batches(), crop_pct=crop_pct, autocast_dtype=amp_dtype)
    live = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(ema)
    try:
        return measure(model, batches(), crop_pct=crop_pct, autocast_dtype=amp_dtype)
    finally:
        model.load_state_dict(live)


# model fields a model.init checkpoint may differ in: resampled (image_size), a new head (num_classes), or not weights
INIT_FREE = (
    "image_size",
    "num_classes",
    "dropout",
    "attn_dropout",
    "drop_path",
    "layer_norm_eps",
    "mlp_act",
    "mean",
    "std",
)


def _pretrained_on(config: RunConfig, env: _Setup) -> list[dict]:
    """The data records of model.init (`spec.trained_on`); on a resume, as its newest checkpoint kept them."""
    from vitkit.checkpoint import read_metadata

    if env.checkpoints:
        return read_native_config(env.checkpoints[-1])[1].get("pretrained_on") or []
    if not config.model.get("init"):
        return []
    return trained_on(read_metadata(resolve(Path(config.model["init"]))))


def _init_from(model: VisionTransformer, path: Path, class_names: list[str]) -> str:
    """Start from a checkpoint (fine-tuning): every weight, position embeddings resampled, and its head where it holds
    this data's classes, its rows put in the data's order by class name; else a new zero head. A checkpoint of another
    architecture is one error naming the model.* settings that would match it. Returns what became of the head."""
    from vitkit.checkpoint import load_with_metadata

    source, meta = load_with_metadata(resolve(path))  # any format; at its own size until its architecture is checked
    theirs, ours = source.config, model.config
    if type(theirs) is not type(ours):
        raise ConfigError(
            f"model.init={path}: holds a {type(source).__name__}, and this run builds a {type(model).__name__}; "
            f"give this run that kind of model (model.name), or another checkpoint"
        )
    head, note = _head_for(meta.get("class_names"), theirs.num_classes, class_names)
    if (
        head is not None and untrained_head({}, path, source) is not None
    ):  # finetune's start (init/): a head not trained yet
        note = f"its head, all zeros (not trained yet), for the same {len(class_names)} classes"
    if head is None:
        source.reset_head(ours.num_classes, keep_pre_logits=False)
        theirs = source.config
    elif head != list(range(len(head))):
        rows = torch.tensor(head)
        with torch.no_grad():
            source.head.weight.copy_(source.head.weight[rows])
            source.head.bias.copy_(source.head.bias[rows])
    differ = [
        f.name
        for f in dataclasses.fields(ours)
        if f.name not in INIT_FREE and getattr(theirs, f.name) != getattr(ours, f.name)
    ]
    if differ:
        settings = " ".join(f"model.{k}={_as_override(getattr(theirs, k))}" for k in differ)
        raise ConfigError(
            f"model.init={path}: its model differs from this run's in {', '.join(differ)} "
            f"({', '.join(f'{k} {_as_override(getattr(ours, k))}' for k in differ)} here); start it with {settings}, "
            f"or fine-tune with `vitkit finetune --from {path}`, which takes the architecture from the checkpoint"
        )
    if theirs.image_size != ours.image_size:
        source.set_image_size(ours.image_size)  # position embeddings resampled (paper §3.2)
    load_state_dict_strict(model, source.state_dict(), source=path)  # faults: any other mismatch is one clear error
    return f"every weight from {path}; {note}"


def _head_for(theirs: list[str] | None, count: int, ours: list[str]) -> tuple[list[int] | None, str]:
    """(for each of `ours` classes, the row of a checkpoint's head that scores it, or None for a new head; what it says)."""
    shown = ", ".join(ours[:4]) + (", ..." if len(ours) > 4 else "")
    if theirs is not None and len(theirs) == count and sorted(theirs) == sorted(ours) and len(set(ours)) == len(ours):
        moved = theirs != ours
        return [theirs.index(name) for name in ours], f"its head scores the same {len(ours)} classes" + (
            " (rows put in this data's class order)" if moved else ""
        )
    if theirs is None and count == len(ours):
        return list(range(count)), (
            f"its head has no class names, so its {count} outputs are kept in order as this data's classes ({shown})"
        )
    what = (
        f"classes {', '.join(theirs[:4])}{', ...' if len(theirs) > 4 else ''}" if theirs else f"{count} unnamed classes"
    )
    return None, f"its head scores {what}, not this data's ({shown}): a new zero-initialised head"


def _as_override(value: Any) -> str:
    """A model setting as KEY=VALUE text takes it: (4, 4) as 4, other sequences and mappings as JSON, None as null."""
    if isinstance(value, (tuple, list)) and len(set(value)) == 1 and all(isinstance(v, int) for v in value):
        return str(value[0])
    if dataclasses.is_dataclass(value):
        value = dataclasses.asdict(value)
    return (
        json.dumps(value, separators=(",", ":"))
        if isinstance(value, (tuple, list, dict)) or value is None
        else str(value)
    )


# -- masked patch prediction (paper §4.6) ------------------------------------------
def _masked_patch_objective(model: VisionTransformer, name: str, resumed: dict | None) -> MaskedPatchPrediction | None:
    """train.objective=masked_patch: the wrapper around `model` (None for classification); on resume, its saved state."""
    if resumed is not None and ("masked_patch" in resumed) != (name == "masked_patch"):
        started = "masked_patch" if "masked_patch" in resumed else "classification"
        raise ConfigError(
            f"train.objective: this run was started with {started}; resume it with train.objective={started}"
        )
    if name != "masked_patch":
        return None
    if not isinstance(model, VisionTransformer):
        raise ConfigError(
            f"train.objective: masked_patch corrupts a Vision Transformer's patch embeddings; this model is a "
            f"{type(model).__name__} (use train.objective=classification)"
        )
    objective = MaskedPatchPrediction(model)
    for p in [*model.pre_logits.parameters(), *model.head.parameters()]:
        p.requires_grad_(False)  # the classification head plays no part (and DDP must not wait for its gradients)
    if resumed is not None:
        objective.load_objective_state(resumed["masked_patch"])
    return objective


def _progress(t, step: int, show: bool = True):
    from tqdm.auto import tqdm

    return tqdm(
        total=t.steps, initial=step, unit="step", disable=not (t.progress and show), dynamic_ncols=True, leave=True
    )


def resume_config(out: str | os.PathLike, overrides: list[str] = ()) -> RunConfig:
    """The run config of an existing run directory, with `overrides` (e.g. train.steps=... to extend it)."""
    path = Path(out) / "run.yaml"
    if not path.is_file():
        if Path(out).is_file() or (Path(out) / "config.json").is_file():  # a checkpoint: trained from, never into
            raise CheckpointError(f"{out}: a model, not a vitkit run directory (no run.yaml); {_train_from(out)}")
        raise CheckpointError(
            f"{out}: not a vitkit run directory (no run.yaml); start it with vitkit train --out {out}"
        )
    return load_run_config(path, overrides)


def _train_from(model: str | os.PathLike) -> str:
    return f"to train from it, start a run in a new folder: vitkit train --out NEW_DIR model.init={shlex.quote(str(model))}"
