"""The checkpoint resolver: what model a path names, whatever the user points at.

A run directory (run.yaml, final/, checkpoints/step_N/) names its final/ model, else its newest
complete step checkpoint; final/ and a step checkpoint are vitkit directories themselves; a weights
file inside a vitkit or Hugging Face directory names its directory; any other file or directory is
itself (its format is detected by the reader). Only paths and layouts are looked at, never the model.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from vitkit.errors import CheckpointError
from vitkit.files import Snapshot, held_pin, pin, snapshot_json

from . import hf, hub, native, timm

STATE_JSON = "train_state.json"  # written last into a step checkpoint: its presence marks it complete
_STEP_DIR = re.compile(r"step_(\d+)")


def step_checkpoints(out: str | os.PathLike) -> list[Path]:
    """The complete step checkpoints of a run directory, oldest first."""
    folder = Path(out) / "checkpoints"
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if _STEP_DIR.fullmatch(p.name) and (p / STATE_JSON).is_file()]
    return sorted(found, key=lambda p: int(_STEP_DIR.fullmatch(p.name).group(1)))


def is_run_dir(path: str | os.PathLike) -> bool:
    path = Path(path)
    return (
        path.is_dir()
        and any((path / name).exists() for name in ("run.yaml", "final", "checkpoints"))
        and not native.is_native(path)  # looked at last: it reads config.json, which a model directory has
    )


def resolve(path: str | os.PathLike) -> Path:
    """The checkpoint `path` names: a run directory -> its final/ (else newest step); a weights file -> its directory."""
    return locate(path)[0]


def locate(path: str | os.PathLike) -> tuple[Path, Snapshot | None]:
    """`resolve`, with the config.json of the directory it names where telling it read that (to be read only once)."""
    path = hub.where(path)
    if is_run_dir(path):
        held = held_pin(path.absolute())  # a command reading a live run again: the checkpoint it read
        if held is not None:
            return held, None
        final = snapshot_json(path / "final", native.CONFIG_NAME)  # waits out a replacement of final/ in flight
        if native.says_native(final.data):
            return path / "final", final
        newest = _pinned_step(path)
        if newest is not None:
            return newest, None
        raise CheckpointError(
            f"{path}: a run directory without a model yet (no final/ and no complete checkpoints/step_N/); "
            f"finish it with vitkit train --resume {path}"
        )
    if _STEP_DIR.fullmatch(path.name) and path.parent.name == "checkpoints" and is_run_dir(path.parent.parent):
        pin(path.absolute(), path)  # named itself: pinned as it is, while it is there
        return path, None
    if path.is_file() and path.name in (native.WEIGHTS_NAME, *hf.WEIGHTS_NAMES):
        folder = snapshot_json(path.parent, native.CONFIG_NAME)
        if native.says_native(folder.data) or hf.says_hf(folder.data) or timm.is_timm_dir(path.parent, folder.data):
            return path.parent, folder
    return path, None


# -- a live run's step checkpoints, pinned while read ----------------------------------------------------------------
# A run in training deletes its older step checkpoints (train.keep_checkpoints). A reader pins the newest one it
# resolves (files.pin: a shared flock that the rotation honours), so the checkpoint it read config.json from is still
# there when it reads the weights. One pin per run directory: resolving the run again pins its newest checkpoint then
# and lets the earlier one go; inside files.holding_pins (a command) a run names the one it named first.
PIN_TRIES = 100  # newest checkpoints rotated away before they were pinned, in a row, before giving up


def _pinned_step(run: Path) -> Path | None:
    """The newest complete step checkpoint of `run`, pinned (see above); None where it has none."""
    for _ in range(PIN_TRIES):
        steps = step_checkpoints(run)
        if not steps:
            return None
        if pin(run.absolute(), steps[-1]):  # else rotated away since it was listed: the next newest
            return steps[-1]
    raise CheckpointError(
        f"{run}: its newest checkpoint was removed {PIN_TRIES} times before it could be read; run the command again"
    )


def run_dir(checkpoint: str | os.PathLike) -> Path | None:
    """The run directory a resolved checkpoint belongs to (final/ or checkpoints/step_N/ of a run), else None."""
    checkpoint = Path(checkpoint)
    if checkpoint.name == "final" and is_run_dir(checkpoint.parent):
        return checkpoint.parent
    if _STEP_DIR.fullmatch(checkpoint.name) and checkpoint.parent.name == "checkpoints":
        return checkpoint.parent.parent
    return None


# the figures a run's summary.json keeps for its final model, and how a model card names them
SUMMARY_FIGURES = {
    "final_val_top1": "top-1 accuracy",
    "final_val_top5": "top-5 accuracy",
    "final_val_map": "mean average precision",
}


def run_metrics(checkpoint: str | os.PathLike) -> list[dict]:
    """The figures the run measured on the model in its final/ (`checkpoint`, resolved), each with the split and the
    number of images it was measured on, from the run's summary.json; [] for any other checkpoint."""
    from vitkit.files import read_json

    checkpoint = Path(checkpoint)
    run = run_dir(checkpoint)
    if run is None or checkpoint.name != "final" or not (run / "summary.json").is_file():
        return []
    summary = read_json(run / "summary.json")
    if not isinstance(summary, dict):
        return []
    images = summary.get("val_images") if isinstance(summary.get("val_images"), dict) else {}
    return [
        {
            "metric": name,
            "value": float(summary[key]),
            "split": str(summary.get("val_split", "val")),
            "images": images.get("n"),
        }
        for key, name in SUMMARY_FIGURES.items()
        if isinstance(summary.get(key), (int, float)) and not isinstance(summary.get(key), bool)
    ]


def step_of(checkpoint: str | os.PathLike) -> str | None:
    """ "step_N" where `checkpoint` names a run's step checkpoint (directly, or a run directory without final/), else None."""
    resolved = resolve(checkpoint)
    return resolved.name if _STEP_DIR.fullmatch(resolved.name) and run_dir(resolved) is not None else None


def describe(checkpoint: str | os.PathLike, step: str | None) -> str:
    """`checkpoint` as a figure names it: a run directory without final/ also names the step checkpoint standing in
    (`step`, from `step_of`)."""
    return f"{checkpoint} ({step}: no final/ yet)" if step and is_run_dir(checkpoint) else str(checkpoint)


def data_tag(path: str | None, meta: dict) -> str:
    """ "" for the data a checkpoint records it trained on (and where it records none); for other data "_NAME_DIGEST"
    (the folder's name and a digest of its path): a report name with it is never that of the run's own data's report."""
    import hashlib
    import re

    trained = (meta.get("data") or {}).get("path")
    if path is None or trained is None or path == trained:
        return ""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(path).name)[:40] or "data"
    return f"_{name}_{hashlib.blake2b(str(path).encode(), digest_size=3).hexdigest()}"


def report_dir(checkpoint: str | os.PathLike, name: str) -> Path:
    """Where a command's reports about `checkpoint` go by default: RUN/NAME for a run's model, else beside the
    checkpoint (DIR/NAME for a directory, STEM.NAME/ for a file); never inside a model directory."""
    resolved = resolve(checkpoint)
    run = run_dir(resolved)
    if run is not None:
        return run / name
    hub_name = hub.hub_name(checkpoint)
    if hub_name is not None:  # never inside huggingface_hub's cache: here, named after the repository
        return Path(f"{hub_name.repo.replace('/', '--')}.{name}")
    given = Path(checkpoint)
    if given.is_dir() and not native.is_native(given) and not hf.is_hf(given) and not timm.is_timm_dir(given):
        return given / name
    return resolved.with_name(f"{resolved.stem if resolved.is_file() else resolved.name}.{name}")
