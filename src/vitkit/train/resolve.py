"""The resolve step of a run (STYLE.md 15): a run config and the run directory it names become the run's plan
(`Setup`): the model config, built once here; the device, rank and world (train.distributed); the micro-batches, as
the run config checked them (config.check_batches); the checkpoints to resume from. Everything below reads the plan;
a change of it (the precision chosen, the data's classes) is dataclasses.replace."""

from __future__ import annotations

from pathlib import Path

from vitkit.checkpoint.runs import step_checkpoints
from vitkit.devices import pick_device
from vitkit.errors import CheckpointError, ConfigError
from vitkit.files import refuse_foreign
from vitkit.models import ModelConfig
from vitkit.train import distributed
from vitkit.train.config import RunConfig
from vitkit.train.optim import autocast_dtype
from vitkit.train.state import RUN_FILES, Setup


def model_of(config: RunConfig) -> ModelConfig:
    """The model config of a run config's model section (num_classes as the section says; the data's classes are set
    on it with `replace` once the data is read). The one place a command builds it: it is built once and handed down."""
    return config.model_config()


def resolve(config: RunConfig, out: Path, resume: bool) -> Setup:
    """The run's plan: its model config, device and processes, the micro-batch split, and whether `out` may be
    started or resumed."""
    t = config.train
    device = pick_device(t.device, key="train.device")
    # under torchrun: DDP or FSDP across processes
    world, device = distributed.setup(t.strategy, device)
    # split as the run config checked it (config.check_batches)
    micro = t.micro_batch or t.batch_size
    checkpoints = step_checkpoints(out)
    _check_out(out, resume, checkpoints)
    return Setup(
        device,
        world,
        autocast_dtype(t.precision, device),
        micro,
        t.batch_size // micro,
        checkpoints,
        model=model_of(config),
    )


def _check_out(out: Path, resume: bool, checkpoints: list[Path]) -> None:
    """`out` holds a run to resume, or none to start."""
    if resume and not checkpoints:
        raise CheckpointError(f"{out}: no checkpoint to resume from (expected {out}/checkpoints/step_*/)")
    if not resume and (checkpoints or (out / "final").exists()):
        raise ConfigError(f"--out {out}: already holds a run; continue it with --resume {out} or choose another --out")
    if resume:
        # its end replaces final/ as a whole: a user's file there (an export, notes) is refused now, not lost then
        refuse_foreign(out / "final", f"move it out of {out / 'final'}, then resume")
    theirs = [name for name in RUN_FILES if (out / name).exists()]
    # not a run stopped before its first checkpoint
    if not resume and theirs and not (out / "run.yaml").is_file():
        raise ConfigError(
            f"--out {out}: holds {theirs[0]}, which a run writes, and is not a vitkit run; choose a new or "
            "empty --out (nothing was changed)"
        )
