"""`train(config, out)`: one run from its start (or its newest checkpoint) to its final model.

The run's phases: setup (device, processes, micro-batches), its data, its state (built, or restored for an
exact resume), then the loop (step, log, validate, save) and its finish (final/, summary.json, figures).
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import sys
import time
import warnings
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vitkit.checkpoint.native import write_pretrained
from vitkit.checkpoint.runs import STATE_JSON
from vitkit.data import eval_batches, mix, train_transform
from vitkit.data.spec import absolute
from vitkit.data.split import where_from
from vitkit.data.summary import data_format
from vitkit.devices import compile_cache_by_isa, compute_threads
from vitkit.errors import CheckpointError, ConfigError
from vitkit.evaluate.baseline import compared, compared_lines, fit_and_score, fitted_line, skipped_because, stem_advice
from vitkit.evaluate.metrics import balance_lines, class_balance
from vitkit.files import LOCK_NAME, WriteError, atomic_path, exclusive, write_json
from vitkit.kernels import float8, short_attention
from vitkit.models import VisionTransformer, build_model
from vitkit.train import distributed, faults, trackers
from vitkit.train.config import RunConfig, dump_run_config, epochs_done, load_run_yaml
from vitkit.train.init import init_from, pretrained_on
from vitkit.train.inputs import augment_generator, prepare_data, write_held_out
from vitkit.train.objectives import OBJECTIVES, objective_for, pick_objective
from vitkit.train.optim import (
    learning_rate,
    make_optimizer,
    set_learning_rate,
    update_ema,
)
from vitkit.train.plan import clock, mean_rate, model_name, plan_block, resolve, running_step_time, segments
from vitkit.train.precision import choose
from vitkit.train.state import (
    Data,
    RunState,
    Setup,
    check_resumable,
    load_checkpoint,
    read_metrics,
    restore_tensors,
    save_checkpoint,
    train_tensors,
    whole_model,
    write_dir,
)
from vitkit.train.teacher import load_teacher
from vitkit.train.trackers import RunLog, check_installed, open_log


def train(config: RunConfig, out: str | os.PathLike, *, resume: bool = False, stop_at: int | None = None) -> dict:
    """Train as `config` says, writing the run directory `out`; returns the summary.

    resume=True continues from the newest checkpoint in `out` and ends with the same weights as an
    uninterrupted run. stop_at ends early after that step (as if interrupted), with a checkpoint.
    """
    started = time.perf_counter()
    if config.data.path is not None:  # a relative data.path would mean other data from another directory
        config = dataclasses.replace(config, data=dataclasses.replace(config.data, path=absolute(config.data.path)))
    out = Path(out)
    _refuse_out(config, out, resume)
    check_installed(config.train.log_to)  # a tracker's missing package: one line before any work
    threads_before = torch.get_num_threads()
    torch.set_num_threads(config.train.threads or compute_threads()[0])  # 0: the CPUs free at start
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


def _refuse_out(config: RunConfig, out: Path, resume: bool) -> None:
    """An --out that holds a model, or lies inside an image folder whose folders are classes (before its lock file)."""
    # eval OUT would read that model
    if not resume and (out / "config.json").is_file() and not (out / "run.yaml").is_file():
        # before its lock file
        raise ConfigError(f"--out {out}: holds a model (config.json), not a run; {_train_from(out)}")
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


def _main_process() -> bool:
    """Rank 0 under torchrun (it alone holds the run directory's lock), else the only process."""
    return distributed.is_main()


def _train(config: RunConfig, out: Path, resume: bool, stop_at: int | None, started: float) -> dict:
    env = resolve(config, out, resume)
    data = prepare_data(config, out, resume, env)
    config = config.with_steps_for(len(data.train))  # train.epochs -> train.steps, now that the split's size is known
    # train.objective=auto: what the labels call for (run.yaml keeps "auto", as for train.precision); a step
    # compiles where the device can and the objective does (masked patch prediction trains eager)
    objective = objective_for(config.train.objective, data.train)
    env = dataclasses.replace(env, objective=objective, compiles=env.compiles and OBJECTIVES[objective].compiles)
    t = config.train
    if t.teacher is not None:  # DeiT's distillation: the teacher loaded once, checked against the student and data
        env = dataclasses.replace(
            env, teacher=load_teacher(t.teacher, env.model, data.class_names, env.objective, env.device)
        )
    run = _restore(config, out, env, data) if resume else _build(config, out, env, data)
    env = _precision(config, env, run, resume)
    step = run.progress["step"]
    if step < t.steps:  # a run resumed only to write its figures trains no stretch
        run.progress["segments"] = [*run.progress.get("segments", []), _segment(env, step)]
    last = min(t.steps, stop_at) if stop_at is not None else t.steps
    if env.world.main:
        resumed_from = env.checkpoints[-1] if resume else None
        print(plan_block(config, run.model, data, env, step, last, resumed_from=resumed_from), flush=True)
    baseline = _baseline(config, env, data, run)  # after the plan: it reads images for a few seconds
    if baseline is not None:
        print(fitted_line(baseline, label="baseline   ") + "; off with train.baseline=false", flush=True)
    extra = _model_record(config, env, data, run)
    log = open_log(config, out, step, env.world.main)  # metrics.jsonl and train.log_to's trackers, on rank 0
    try:
        step, val_metrics = _loop(config, out, env, data, run, extra, last, started, log)
        if step < t.steps:
            signal = faults.stop_requested()  # SIGINT (Ctrl-C): the command exits 130, so `&&` and make stop there
            return {"stopped_at": step, "steps": t.steps, **({"signal": signal} if signal else {})}
        if not val_metrics:  # resumed a run that had already finished
            crop = config.augment.eval_crop_pct
            val_metrics = _validate(run, partial(_val_data, config, env, data), env.amp_dtype, crop)
        return _finish(config, out, env, data, run, val_metrics, extra, log)
    finally:
        log.close(failed=sys.exc_info()[0] is not None)


def _precision(config: RunConfig, env: Setup, run: RunState, resume: bool) -> Setup:
    """train.precision resolved for this run (auto: measured where bf16 may pay), kept in its progress: a resumed run
    trains on in the precision it began in (one resumed from before runs kept it: fp32 on a CPU, as auto was then)."""
    earlier = run.progress.get("precision")
    if resume and earlier is None:
        earlier = "bf16" if env.device.type == "cuda" else "fp32"
    choice = choose(
        config.train.precision,
        run.model,
        env.device,
        env.micro,
        earlier=earlier,
        processes=env.world.size,
        compiled=env.compiles,  # auto: a compiled run on a CPU with native bf16 trains bf16
    )
    run.progress["precision"] = choice.name
    return dataclasses.replace(env, amp_dtype=choice.dtype, precision=choice.reason)


def _model_record(config: RunConfig, env: Setup, data: Data, run: RunState) -> dict:
    """What the saved models record beside their weights: classes, preprocessing, the data, what they started from."""
    extra = {
        "class_names": data.class_names,
        "preprocess": {"crop_pct": config.augment.eval_crop_pct},
        "data": data.record,
    }  # every evaluation command reads the same splits
    # the data its starting weights were trained on: their images are not unseen
    if earlier := pretrained_on(config, env.checkpoints):
        extra["pretrained_on"] = earlier
    if not run.objective.trains_head:  # its classification head never trained: eval and predict say so
        extra["objective"] = run.objective.name
    if "kind" in run.progress.get("baseline", {}):  # eval fits it again on the training split, scores its split
        extra["baseline"] = run.progress["baseline"]
    return {**extra, **run.objective.record}  # multi-label: eval, predict and every format read its problem type


def _baseline(config: RunConfig, env: Setup, data: Data, run: RunState) -> dict | None:
    """train.baseline: the pixel baseline (evaluate.baseline), fitted on rank 0 before the first step on the training
    split and scored on the val split, each read as validation reads it; kept in the run's progress, so a resumed run
    has the one it started with. None where train.baseline is off (or on another rank)."""
    if not config.train.baseline or not env.world.main:
        return None
    if "baseline" not in run.progress:
        why = skipped_because(env.objective)
        d = config.data
        run.progress["baseline"] = (
            {"skipped": why}
            if why
            else fit_and_score(
                data.train,
                data.val,
                partial(_eval_data, config, env, data, device=torch.device("cpu")),
                len(data.class_names),
                names=(d.train_split, d.val_split),
                seed=config.train.seed,
            )
        )
    return run.progress["baseline"]


def _segment(env: Setup, step: int) -> dict:
    """Where this stretch of the run trains (summary.json): a resumed run's device, processes and threads may differ."""
    return {
        "from_step": step,
        "device": str(env.device),
        "processes": env.world.size,
        "threads": torch.get_num_threads(),
    }


def _loop(
    config: RunConfig,
    out: Path,
    env: Setup,
    data: Data,
    run: RunState,
    extra: dict,
    last: int,
    started: float,
    log: RunLog,
) -> tuple[int, dict]:
    """Steps until `last` (or a stop signal): log, validate and save as train.* says; (the step reached, val metrics)."""
    t, batches = config.train, data.batches
    # data order: micro-batch number m is batch (m % per_epoch) of epoch (m // per_epoch), seeded by train.seed
    step, elapsed_before = run.progress["step"], run.progress["elapsed_s"]
    stream = batches.iterate(*divmod(step * env.accum, batches.per_epoch))
    bar = _progress(t, step, show=env.world.main)
    window = {"loss": 0.0, "steps": 0, **run.progress.get("window", {}), "images": 0, "time": time.perf_counter()}
    val_metrics: dict[str, Any] = {}

    def checkpoint() -> None:
        elapsed = elapsed_before + time.perf_counter() - started
        _save_step(out, config, env, data, run, batches, step, elapsed, window, extra)

    run.model.train()
    nonfinite = _nonfinite(t, run, out)
    try:
        while step < last:
            lr, step_loss, grad_norm = _step(config, env, data, run, stream, step, nonfinite)
            step += 1
            window["loss"] += step_loss.detach().double()  # summed on the device: no wait for the GPU each step
            window["steps"] += 1
            window["images"] += t.batch_size
            if step % t.log_every == 0 or step == t.steps:
                epoch = epochs_done(step, t.batch_size, len(data.train))
                window = _log_train(log, bar, window, step, epoch, lr, grad_norm, t, env.world.main)
            if step % t.eval_every == 0 or step == t.steps:
                val_metrics = _validate_and_log(log, bar, env, data, run, config, step)
            if step % t.checkpoint_every == 0 or step == last:
                checkpoint()
            bar.update(1)
            if _stop_requested(env) and step < last:  # faults: SIGTERM/SIGINT -> an ordinary step checkpoint, then stop
                if step % t.checkpoint_every:
                    checkpoint()
                last = step
    finally:
        bar.close()
    return step, val_metrics


def _nonfinite(t, run: RunState, out: Path) -> faults.NonFinite:
    """faults: the watch on non-finite steps, skipped and counted up to train.max_nonfinite_steps in a row."""
    return faults.NonFinite(
        run.progress,
        t.max_nonfinite_steps,
        check_grads=not run.scaler.is_enabled(),
        last_good=lambda: faults.last_finite_checkpoint(out),
    )


def _stop_requested(env: Setup) -> bool:
    """A SIGTERM/SIGINT on any rank: every rank stops at the same step."""
    return distributed.any_rank(faults.stop_requested() is not None, env.world)


# -- the phases of a run ----------------------------------------------------------------------
def _build(config: RunConfig, out: Path, env: Setup, data: Data) -> RunState:
    """A new run: the initial weights (seeded, or from model.init), and the run directory."""
    torch.manual_seed(config.train.seed)  # the initial weights, then dropout / stochastic depth draws
    # a ViT or a BiT ResNet, for the data's classes
    model = build_model(env.model.replace(num_classes=len(data.class_names)))
    if config.model.init:
        note = init_from(model, Path(config.model.init), data.class_names)
        if env.world.main:
            print(f"model.init: {note}", flush=True)
    run = _assemble(config, env, model, {"step": 0, "elapsed_s": 0.0, "best_val_top1": None, "best_step": None}, None)
    if env.world.main:
        out.mkdir(parents=True, exist_ok=True)
        with atomic_path(out / "run.yaml") as tmp:
            tmp.write_text(dump_run_config(config))
        write_held_out(data)
        (out / "metrics.jsonl").unlink(missing_ok=True)
        trackers.forget(out)
    distributed.barrier(env.world)
    return run


def _restore(config: RunConfig, out: Path, env: Setup, data: Data) -> RunState:
    """A resumed run: the model, optimizer, scaler, EMA and RNG state of the newest complete checkpoint."""
    world, newest = env.world, env.checkpoints[-1]
    if world.main:
        faults.remove_partial_checkpoints(out, STATE_JSON)
    distributed.barrier(world)
    model, progress, tensors = load_checkpoint(newest)
    check_resumable(config, out, env, data, (model, progress))
    run = _assemble(config, env, model, progress, tensors)
    restore_tensors(run, tensors, newest, env)
    if world.main:
        trackers.cut_back(out, progress["step"])  # metrics.jsonl to the checkpoint; the trackers' runs past it marked
        with atomic_path(out / "run.yaml") as tmp:  # overrides on --resume (train.steps=N) hold for every later resume
            tmp.write_text(dump_run_config(config))
        # the same images (check_resumable); a run of a vitkit that did not list them gets the list now
        write_held_out(data)
    distributed.barrier(world)
    return run


def _assemble(
    config: RunConfig, env: Setup, model: VisionTransformer, progress: dict, tensors: dict | None
) -> RunState:
    """Around the model: the objective, the distributed wrapper, optimizer, scaler and EMA (not yet restored)."""
    t = config.train
    model.to(env.device)
    model.set_grad_checkpointing(t.grad_checkpointing)
    short_attention.install(model)  # short sequences train faster written out on the CPU
    if t.precision == "fp8":  # before the wrapper and the optimizer see the layers
        float8.convert(model, env.device)
    objective = pick_objective(env.objective, model, tensors, env.teacher)
    trainable = objective.module
    module = distributed.wrap(trainable, env.world, env.device, model.blocks)
    optimizer = make_optimizer(trainable, t)
    scaler = torch.amp.GradScaler(env.device.type, enabled=env.amp_dtype == torch.float16)
    # EMA weights: shaped as the model's state dict, so sharded like it under FSDP (updated without communication)
    ema = {k: v.detach().clone() for k, v in model.state_dict().items()} if t.ema else None
    if env.compiles:
        compile_cache_by_isa()
    forward = torch.compile(module, options=short_attention.compile_options(env.device)) if env.compiles else module
    return RunState(model, objective, trainable, module, forward, optimizer, scaler, ema, progress)


def _step(config: RunConfig, env: Setup, data: Data, run: RunState, stream, step: int, nonfinite) -> tuple:
    """One optimizer step over `accum` micro-batches: (learning rate, the global batch's loss, gradient norm)."""
    t, a, world, accum = config.train, config.augment, env.world, env.accum
    shape = data.shape
    lr = learning_rate(step, lr=t.lr, warmup=t.warmup_steps, total=t.steps, decay=t.decay, end_ratio=t.end_lr_ratio)
    set_learning_rate(run.optimizer, lr)  # times each group's layer-wise scale
    loss_sum = torch.zeros((), device=env.device)
    for k in range(accum):
        images, labels = next(stream)
        g = augment_generator(t.seed, step * accum + k, world.rank)
        x = train_transform(images, shape.image_size, data.augment, shape.mean, shape.std, g, shape.background)
        x, targets = mix(x, run.objective.targets(labels, len(data.class_names), a.label_smoothing), a, g)
        with distributed.grad_sync(run.module, world, sync=k == accum - 1):  # reduce across ranks once per step
            with torch.autocast(
                env.device.type, dtype=env.amp_dtype or torch.float32, enabled=env.amp_dtype is not None
            ):
                logits, targets = run.objective.outputs(run.forward, x, targets, g)
            loss = run.objective.loss(logits, targets)
            run.scaler.scale(loss / accum).backward()
        loss_sum += loss.detach() / accum
    return lr, *_update(config, env, run, loss_sum, step, nonfinite)


def _update(config: RunConfig, env: Setup, run: RunState, loss_sum, step: int, nonfinite) -> tuple:
    """The optimizer's update from the accumulated gradients, clipped; skipped where non-finite: (loss, grad norm)."""
    run.scaler.unscale_(run.optimizer)
    grad_norm = nn.utils.clip_grad_norm_(run.trainable.parameters(), config.train.clip_norm or float("inf"))
    step_loss = distributed.mean(loss_sum, env.world)  # the global batch's loss, the same on every rank
    # faults: a non-finite step is skipped (no gradients, so the optimizer changes nothing); every rank
    # decides alike: the loss is averaged over ranks and the gradient norm already is
    if nonfinite.skip(step, step_loss, grad_norm):
        run.optimizer.zero_grad(set_to_none=True)
    run.scaler.step(run.optimizer)
    run.scaler.update()
    run.optimizer.zero_grad(set_to_none=True)
    if run.ema is not None:
        update_ema(run.ema, run.model, config.train.ema)
    return step_loss, grad_norm


# -- periodic events: log lines, validation, checkpoints -----------------------------------------
def _log_train(log: RunLog, bar, window: dict, step: int, epoch: float, lr: float, grad_norm, t, main: bool) -> dict:
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
    log.write(row)
    bar.set_postfix(loss=f"{row['loss']:.4f}", lr=f"{lr:.2e}", img_s=f"{row['img_s']:.0f}")
    step_s = running_step_time(window.get("step_s"), now - window["time"], window["steps"])
    if not t.progress and main:  # the bar's own ETA follows its running rate; this line's follows step_s
        bar.write(
            f"step {step}/{t.steps}: loss {row['loss']:.4f}  lr {lr:.2e}  {row['img_s']:.0f} img/s"
            + (f"  ETA {clock(step_s * (t.steps - step))}" if step_s is not None else "")
        )
    return {"loss": 0.0, "steps": 0, "images": 0, "time": now, "step_s": step_s}


def _val_data(config: RunConfig, env: Setup, data: Data):
    return _eval_data(config, env, data, data.val)


def _eval_data(config: RunConfig, env: Setup, data: Data, split, device: torch.device | None = None):
    """Every image of `split` once, as validation reads them (on `device`, else the run's)."""
    return eval_batches(
        split,
        config.train.eval_batch_size,
        device or env.device,
        channels=data.channels,
        size=data.shape.image_size,
        crop_pct=config.augment.eval_crop_pct,
        workers=config.data.workers,
        bad=data.bad,
        background=data.shape.background,
    )


def _validate(run: RunState, batches, amp_dtype, crop_pct) -> dict:
    """The objective's validation metrics, through the EMA weights where kept (the live ones put back after)."""
    model, ema, measure = run.model, run.ema, run.objective.evaluate
    if ema is None:
        return measure(model, batches(), crop_pct=crop_pct, autocast_dtype=amp_dtype)
    live = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(ema)
    try:
        return measure(model, batches(), crop_pct=crop_pct, autocast_dtype=amp_dtype)
    finally:
        model.load_state_dict(live)


def _validate_and_log(log: RunLog, bar, env: Setup, data: Data, run: RunState, config: RunConfig, step: int) -> dict:
    """Validation (through the EMA weights if kept): a val line in metrics.jsonl, the best so far, a line on screen."""
    val_data = partial(_val_data, config, env, data)
    metrics = _validate(run, val_data, env.amp_dtype, config.augment.eval_crop_pct)
    logged = ("top1", "top5", "loss", *run.objective.also_logged)  # multi-label: mAP and F1 too
    row = {"kind": "val", "step": step, **{f"val_{k}": metrics[k] for k in logged}}
    log.write(row)
    progress = run.progress
    if progress["best_val_top1"] is None or metrics["top1"] > progress["best_val_top1"]:
        progress["best_val_top1"], progress["best_step"] = metrics["top1"], step
    if env.world.main:
        shows_top5 = run.objective.always_top5 or len(data.class_names) > 5  # else always 1
        top5 = f"  top-5 {metrics['top5']:.4f}" if shows_top5 else ""
        what = run.objective.measured  # masked patch prediction: of the patches' colours
        ema = " (EMA weights)" if run.ema is not None else ""
        more = run.objective.shown(metrics)  # multi-label: mAP and F1
        bar.write(f"step {step}: val{what} top-1 {metrics['top1']:.4f}{top5}{more}  loss {metrics['loss']:.4f}{ema}")
    return metrics


def _save_step(
    out: Path,
    config: RunConfig,
    env: Setup,
    data: Data,
    run: RunState,
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
    # each rank streams its own files
    faults.merge_bad_files(data.bad, distributed.gather_objects(data.bad.files, world))
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
    tensors = train_tensors(run, env)
    keep = config.train.keep_checkpoints
    save_checkpoint(out, run.model, extra, run.progress, tensors, keep, world, run.optimizer, run.ema, run.trainable)


# -- the end of a run ---------------------------------------------------------------------------
def _finish(
    config: RunConfig, out: Path, env: Setup, data: Data, run: RunState, val_metrics: dict, extra: dict, log: RunLog
) -> dict:
    """final/ (the EMA weights when kept), summary.json and the run's plots, which the trackers get too (with the
    final model, where they keep files)."""
    world = env.world
    faults.steps_done()
    faults.check_run_directory(out, world)
    if run.ema is None:
        export = whole_model(run.model, world)
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
    write_dir(out / "final", lambda tmp: world.main and write_pretrained(export, tmp, extra=extra), world)
    if not world.main:
        return {"rank": world.rank}
    rows = read_metrics(out)
    summary = _summary(config, out, env, data, run, val_metrics, rows)
    write_json(out / "summary.json", summary)
    lines = compared_lines(summary["baseline"]) if summary["baseline"] else []
    # under the val top-1 the baseline's line gives, before its warning
    lines[1:1] = balance_lines(summary["final_val_balance"], summary["final_val_top1"])
    for line in lines:
        print(line, flush=True)
    figures = _plot(config, out, data, run, rows, summary["unreadable"], val_metrics) if config.train.figures else []
    log.artifacts(figures, out / "final", config.train.steps)
    return summary


def _summary(
    config: RunConfig, out: Path, env: Setup, data: Data, run: RunState, val_metrics: dict, rows: list[dict]
) -> dict:
    """summary.json: the final and best validation figures, what trained on what, for how long and where."""
    t, progress = config.train, run.progress
    train_rows = [r for r in rows if r["kind"] == "train"]
    return {
        "final_val_top1": val_metrics.get("top1"),
        "final_val_top5": val_metrics.get("top5"),
        **{f"final_val_{k}": val_metrics.get(k) for k in run.objective.also_logged},  # multi-label: map, f1
        # classes of unlike sizes: the balanced top-1 and what the most common class alone scores (None otherwise)
        "final_val_balance": class_balance(val_metrics["confusion"], data.class_names)
        if "confusion" in val_metrics
        else None,
        "best_val_top1": progress["best_val_top1"],
        "best_step": progress["best_step"],
        "val_split": config.data.val_split,
        "val_images": data.record.get("splits", {}).get(config.data.val_split),  # which images those figures are on
        "steps": t.steps,
        "images_seen": t.steps * t.batch_size,
        "wall_time_s": progress["elapsed_s"],
        "img_s": mean_rate(train_rows, t.batch_size),
        # the name where the architecture is that model's
        "model": model_name(config.model, run.model.config),
        "objective": run.objective.name,  # masked_patch: the val_* figures are the colour-prediction accuracy and loss
        "ema": t.ema,  # a decay: the val_* figures and final/ are of the EMA weights
        "params": sum(p.numel() for p in run.model.parameters()),
        "device": str(env.device),  # these three: the last stretch of the run; "segments" has every one
        "processes": env.world.size,
        "threads": torch.get_num_threads(),
        "segments": segments(progress.get("segments", []), t.steps),
        "checkpoint": str(out / "final"),
        "skipped_steps": progress["skipped_steps"],  # faults: non-finite steps
        "bad_files": len(data.bad),
        "unreadable": data.unreadable(
            config.data.train_split, config.data.val_split
        ),  # of each split: its figures count the rest
        # train.baseline: the pixel baseline on the same val images, and a warning where the model does not beat it
        "baseline": (
            compared(progress["baseline"], val_metrics.get("top1"), advice=stem_advice(run.model.config))
            if "baseline" in progress
            else None
        ),
    }


def _plot(
    config: RunConfig, out: Path, data: Data, run: RunState, rows: list[dict], skipped: dict, val_metrics: dict
) -> list[Path]:
    """loss.png, accuracy.png, lr.png and (one label per image) confusion.png of the final validation, each captioned
    with the images it was drawn from; the files written. Where matplotlib is not installed, a warning instead (the
    run is complete without them)."""
    from vitkit.plots import missing, plot_confusion, plot_run  # matplotlib only when a run ends

    if why := missing():
        warnings.warn(f"loss.png, accuracy.png, lr.png and confusion.png not drawn: {why}", stacklevel=1)
        return []

    splits = data.record.get("splits", {})
    captions = {
        name: f"{_images(split, skipped.get(name, 0))}, {where_from(split, all_said=False)}"
        for name, split in splits.items()
    }
    a = config.augment
    written = plot_run(
        rows,
        out,
        train_data=captions.get(config.data.train_split),
        val_data=captions.get(config.data.val_split),
        classes=len(data.class_names),
        objective=None if run.objective.trains_head else run.objective.name,
        ema=config.train.ema is not None,
        soft_targets=bool(a.label_smoothing or a.mixup or a.cutmix),
    )
    if "confusion" in val_metrics and run.objective.trains_head:
        confusion = out / "confusion.png"
        written.append(
            plot_confusion(
                val_metrics["confusion"], data.class_names, confusion, data=captions.get(config.data.val_split)
            )
        )
    return written


def _images(split: dict, unreadable: int) -> str:
    """A split's images for a figure: "120 images", or "117 of 120 images (3 unreadable skipped)"."""
    return (
        f"{split['n'] - unreadable:,} of {split['n']:,} images ({unreadable:,} unreadable skipped)"
        if unreadable
        else f"{split['n']:,} image{'s' * (split['n'] != 1)}"
    )


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
    return load_run_yaml(path, overrides)


def _train_from(model: str | os.PathLike) -> str:
    return f"to train from it, start a run in a new folder: vitkit train --out NEW_DIR model.init={shlex.quote(str(model))}"
