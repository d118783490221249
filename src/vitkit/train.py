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

import json
import math
import os
import re
import shutil
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vitkit.checkpoint import save_pretrained
from vitkit.checkpoint.io import atomic_path, read_json, read_torch, write_json
from vitkit.checkpoint.native import is_native, load_native
from vitkit.data import Batches, eval_batches, fits_in_memory, load_into_memory, mix, open_dataset, soft_targets, train_transform
from vitkit.errors import CheckpointError, ConfigError, DataError
from vitkit.evaluation import evaluate
from vitkit.models import VisionTransformer
from vitkit.run_config import RunConfig, dump_run_config, load_run_config

STATE_JSON, STATE_TENSORS = "train_state.json", "train_state.pt"
_STEP_DIR = re.compile(r"step_(\d+)")


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
    return torch.optim.AdamW(groups, lr=t.lr, betas=t.betas)


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
def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"train.device: unknown device {name!r}; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device: cuda was asked for but no CUDA device is available; use train.device=cpu")
    return device


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype, or None for plain fp32: bf16 on GPU by default, fp32 on CPU unless asked."""
    if precision == "auto":
        return torch.bfloat16 if device.type == "cuda" else None
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


# -- checkpoints ----------------------------------------------------------------------------
def step_checkpoints(out: Path) -> list[Path]:
    """The complete step checkpoints of a run, oldest first."""
    folder = out / "checkpoints"
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if _STEP_DIR.fullmatch(p.name) and (p / STATE_JSON).is_file()]
    return sorted(found, key=lambda p: int(_STEP_DIR.fullmatch(p.name).group(1)))


def find_checkpoint(path: str | os.PathLike) -> Path:
    """A model directory from a checkpoint directory or a run directory (its final/, else its latest step)."""
    path = Path(path)
    if is_native(path):
        return path
    if is_native(path / "final"):
        return path / "final"
    steps = step_checkpoints(path)
    if steps:
        return steps[-1]
    raise CheckpointError(f"{path}: neither a vitkit checkpoint (config.json + model.safetensors) nor a run directory with one")


def _write_dir(target: Path, fill) -> None:
    """Build a directory under a temporary name, then rename it into place (replacing an older one)."""
    tmp = target.parent / f".{target.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    fill(tmp)
    if target.exists():
        old = target.parent / f".{target.name}.old"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, target)


def save_checkpoint(out: Path, model: nn.Module, extra: dict, state: dict, tensors: dict, keep: int) -> Path:
    """checkpoints/step_N: the model (vitkit format) plus the training state; keeps the `keep` newest."""
    target = out / "checkpoints" / f"step_{state['step']:07d}"

    def fill(tmp: Path) -> None:
        save_pretrained(model, tmp, extra=extra)
        with atomic_path(tmp / STATE_TENSORS) as f:
            torch.save(tensors, f)
        write_json(tmp / STATE_JSON, state)

    _write_dir(target, fill)
    for old in step_checkpoints(out)[: -max(keep, 1)]:
        shutil.rmtree(old, ignore_errors=True)
    return target


def load_checkpoint(folder: Path) -> tuple[VisionTransformer, dict, dict]:
    model, _ = load_native(folder)
    return model, read_json(folder / STATE_JSON), read_torch(folder / STATE_TENSORS)


# -- metrics --------------------------------------------------------------------------------
def read_metrics(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


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
    threads_before = torch.get_num_threads()
    if config.train.threads:
        torch.set_num_threads(config.train.threads)
    try:
        return _train(config, Path(out), resume, stop_at, started)
    finally:
        torch.set_num_threads(threads_before)


def _train(config: RunConfig, out: Path, resume: bool, stop_at: int | None, started: float) -> dict:
    t, a, d = config.train, config.augment, config.data
    device = pick_device(t.device)
    amp_dtype = autocast_dtype(t.precision, device)
    micro = t.micro_batch or t.batch_size
    if t.batch_size % micro:
        raise ConfigError(f"train.micro_batch: {micro} does not divide train.batch_size {t.batch_size}")
    accum = t.batch_size // micro
    checkpoints = step_checkpoints(out)
    if resume and not checkpoints:
        raise CheckpointError(f"{out}: no checkpoint to resume from (expected {out}/checkpoints/step_*/)")
    if not resume and checkpoints:
        raise ConfigError(f"--out {out}: already holds a run; continue it with --resume {out} or choose another --out")

    # data: the model's input size and channels decide how images are read; the data decides the classes
    shape = config.model_config()
    size, channels = shape.image_size[0], shape.in_chans
    load_size = d.load_size or (round(size * 8 / 7) if a.crop == "rrc" else size)
    common = dict(channels=channels, image_size=size, val_fraction=d.val_fraction, seed=d.split_seed,
                  synthetic_size=d.synthetic_size, synthetic_classes=d.synthetic_classes)
    train_split = open_dataset(d.name, d.path, d.train_split, **common)
    val_split = open_dataset(d.name, d.path, d.val_split, **common)
    if fits_in_memory(train_split, channels, load_size, d.memory_mb):
        train_split = load_into_memory(train_split, channels, load_size, workers=d.workers)
    if fits_in_memory(val_split, channels, size, d.memory_mb):
        val_split = load_into_memory(val_split, channels, size, a.eval_crop_pct, workers=d.workers)
    class_names = train_split.class_names
    if len(train_split) < micro:
        raise DataError(f"{train_split.source}: {len(train_split)} training images, fewer than one batch of {micro}; lower train.batch_size")
    if "num_classes" in config.model and config.model["num_classes"] != len(class_names):
        raise ConfigError(f"model.num_classes: {config.model['num_classes']} given but the data has {len(class_names)} classes")

    # model, optimizer, state
    if resume:
        model, state, tensors = load_checkpoint(checkpoints[-1])
        for key, saved, now in (("train.seed", state["seed"], t.seed), ("train.micro_batch", state["micro_batch"], micro)):
            if saved != now:
                raise ConfigError(f"{key}: the run was checkpointed with {saved}, not {now}; an exact resume needs the same data order")
    else:
        torch.manual_seed(t.seed)  # the initial weights, then dropout / stochastic depth draws
        model = VisionTransformer(config.model_config(num_classes=len(class_names)))
        if config.model.get("init"):
            _init_from(model, Path(config.model["init"]))
        state, tensors = {"step": 0, "elapsed_s": 0.0, "best_val_top1": None, "best_step": None}, {}
    model.to(device)
    optimizer = make_optimizer(model, t)
    scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype == torch.float16)
    ema = {k: v.detach().clone() for k, v in model.state_dict().items()} if t.ema else None
    if resume:
        optimizer.load_state_dict(tensors["optimizer"])
        scaler.load_state_dict(tensors["scaler"])
        if ema is not None and tensors.get("ema"):
            ema = {k: v.to(device) for k, v in tensors["ema"].items()}
        torch.set_rng_state(tensors["rng_cpu"])
        if device.type == "cuda" and "rng_cuda" in tensors:
            torch.cuda.set_rng_state(tensors["rng_cuda"], device)
        _truncate_metrics(out, state["step"])
    else:
        out.mkdir(parents=True, exist_ok=True)
        with atomic_path(out / "run.yaml") as tmp:
            tmp.write_text(dump_run_config(config))
        (out / "metrics.jsonl").unlink(missing_ok=True)
    forward = torch.compile(model) if t.compile else model
    extra = {"class_names": class_names, "preprocess": {"crop_pct": a.eval_crop_pct},
             "data": {"path": d.path, "val_fraction": d.val_fraction, "split_seed": d.split_seed}}  # eval finds the same held-out split

    # data order: micro-batch number m is batch (m % per_epoch) of epoch (m // per_epoch), seeded by train.seed
    batches = Batches(train_split, micro, t.seed, device, channels=channels, size=load_size, workers=d.workers)
    step, elapsed_before = state["step"], state["elapsed_s"]
    epoch, position = divmod(step * accum, batches.per_epoch)
    stream = batches.iterate(epoch, position)

    def val_data():
        return eval_batches(val_split, t.eval_batch_size, device, channels=channels, size=size, crop_pct=a.eval_crop_pct, workers=d.workers)

    K = len(class_names)
    last = min(t.steps, stop_at) if stop_at is not None else t.steps
    bar = _progress(t, step)
    log = open(out / "metrics.jsonl", "a")
    window = {"loss": 0.0, "steps": 0, **state.get("window", {}), "images": 0, "time": time.perf_counter()}
    val_metrics: dict[str, Any] = {}

    def checkpoint() -> None:
        epoch, position = divmod(step * accum, batches.per_epoch)
        state.update(step=step, epoch=epoch, position=position, seed=t.seed, micro_batch=micro,
                     elapsed_s=elapsed_before + time.perf_counter() - started,
                     window={"loss": window["loss"], "steps": window["steps"]})  # the loss averaged until the next log line
        tensors = {"optimizer": optimizer.state_dict(), "scaler": scaler.state_dict(), "rng_cpu": torch.get_rng_state(), "ema": ema or {}}
        if device.type == "cuda":
            tensors["rng_cuda"] = torch.cuda.get_rng_state(device)
        save_checkpoint(out, model, extra, state, tensors, t.keep_checkpoints)

    model.train()
    try:
        while step < last:
            lr = learning_rate(step, lr=t.lr, warmup=t.warmup_steps, total=t.steps, decay=t.decay, end_ratio=t.end_lr_ratio)
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss_sum = torch.zeros((), device=device)
            for k in range(accum):
                images, labels = next(stream)
                g = torch.Generator().manual_seed(t.seed * 1_000_003 + step * accum + k)  # augmentation draws
                x = train_transform(images, shape.image_size, a, shape.mean, shape.std, g)
                x, targets = mix(x, soft_targets(labels, K, a.label_smoothing), a, g)
                with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
                    logits = forward(x)
                loss = soft_cross_entropy(logits, targets)
                scaler.scale(loss / accum).backward()
                loss_sum += loss.detach() / accum
            scaler.unscale_(optimizer)
            grad_norm = nn.utils.clip_grad_norm_(model.parameters(), t.clip_norm or float("inf"))
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            if ema is not None:
                update_ema(ema, model, t.ema)
            step += 1

            window["loss"] += float(loss_sum)
            window["steps"] += 1
            window["images"] += t.batch_size
            if step % t.log_every == 0 or step == t.steps:
                now = time.perf_counter()
                row = {"kind": "train", "step": step, "epoch": step * accum / batches.per_epoch, "loss": window["loss"] / window["steps"],
                       "lr": lr, "grad_norm": float(grad_norm), "img_s": window["images"] / max(now - window["time"], 1e-9)}
                log.write(json.dumps(row) + "\n")
                log.flush()
                bar.set_postfix(loss=f"{row['loss']:.4f}", lr=f"{lr:.2e}", img_s=f"{row['img_s']:.0f}")
                window = {"loss": 0.0, "steps": 0, "images": 0, "time": now}
            if step % t.eval_every == 0 or step == t.steps:
                val_metrics = _validate(model, ema, val_data, amp_dtype, a.eval_crop_pct)
                row = {"kind": "val", "step": step, **{f"val_{k}": val_metrics[k] for k in ("top1", "top5", "loss")}}
                log.write(json.dumps(row) + "\n")
                log.flush()
                if state["best_val_top1"] is None or val_metrics["top1"] > state["best_val_top1"]:
                    state["best_val_top1"], state["best_step"] = val_metrics["top1"], step
                bar.write(f"step {step}: val top-1 {val_metrics['top1']:.4f}  top-5 {val_metrics['top5']:.4f}  loss {val_metrics['loss']:.4f}")
            if step % t.checkpoint_every == 0 or step == last:
                checkpoint()
            bar.update(1)
    finally:
        bar.close()
        log.close()

    if step < t.steps:
        return {"stopped_at": step, "steps": t.steps}
    if not val_metrics:  # resumed a run that had already finished
        val_metrics = _validate(model, ema, val_data, amp_dtype, a.eval_crop_pct)
    export = model
    if ema is not None:
        export = VisionTransformer(model.config)
        export.load_state_dict({k: v.cpu() for k, v in ema.items()})
    _write_dir(out / "final", lambda tmp: save_pretrained(export, tmp, extra=extra))
    rows = read_metrics(out)
    train_rows = [r for r in rows if r["kind"] == "train"]
    summary = {
        "final_val_top1": val_metrics.get("top1"),
        "final_val_top5": val_metrics.get("top5"),
        "best_val_top1": state["best_val_top1"],
        "best_step": state["best_step"],
        "val_split": d.val_split,
        "steps": t.steps,
        "images_seen": t.steps * t.batch_size,
        "wall_time_s": state["elapsed_s"],
        "img_s": sum(r["img_s"] for r in train_rows) / max(len(train_rows), 1),
        "model": config.model.get("name"),
        "params": sum(p.numel() for p in model.parameters()),
        "device": str(device),
        "threads": torch.get_num_threads(),
        "checkpoint": str(out / "final"),
    }
    write_json(out / "summary.json", summary)
    from vitkit.plots import plot_run  # matplotlib only when a run ends

    plot_run(rows, out)
    return summary


def _validate(model, ema, batches, amp_dtype, crop_pct) -> dict:
    if ema is None:
        return evaluate(model, batches(), crop_pct=crop_pct, autocast_dtype=amp_dtype)
    live = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(ema)
    try:
        return evaluate(model, batches(), crop_pct=crop_pct, autocast_dtype=amp_dtype)
    finally:
        model.load_state_dict(live)


def _init_from(model: VisionTransformer, path: Path) -> None:
    """Start from a checkpoint (fine-tuning): every weight but a head of another shape; position embeddings resampled."""
    from vitkit.checkpoint import load_pretrained

    source = load_pretrained(find_checkpoint(path), image_size=model.config.image_size, num_classes=model.config.num_classes)
    model.load_state_dict(source.state_dict())


def _progress(t, step: int):
    from tqdm.auto import tqdm

    return tqdm(total=t.steps, initial=step, unit="step", disable=not t.progress, dynamic_ncols=True, leave=True)


def resume_config(out: str | os.PathLike, overrides: list[str] = ()) -> RunConfig:
    """The run config of an existing run directory, with `overrides` (e.g. train.steps=... to extend it)."""
    path = Path(out) / "run.yaml"
    if not path.is_file():
        raise CheckpointError(f"{out}: not a vitkit run directory (no run.yaml); start it with vitkit train --out {out}")
    return load_run_config(path, overrides)
