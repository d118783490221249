"""Faults during a training run, and what `vitkit.train.train` does about them.

- SIGTERM / SIGINT (preemption, Ctrl-C): `stop_on_signals()` (installed only while train() runs,
  the previous handlers restored after) records the signal; the loop saves an ordinary step
  checkpoint at the next step boundary and returns, so `vitkit train --resume RUN` continues
  exactly. A second signal stops at once (KeyboardInterrupt); under torchrun, not the copy torchrun forwards of the
  signal every worker already got.
- A non-finite loss or gradient: `NonFinite.skip()` says the step must not change anything (the
  gradients are dropped, so the optimizer leaves weights and moments alone); skipped steps are
  counted in the train state, and `limit` of them in a row stop the run with a TrainingError.
- kill -9: checkpoints are written under a temporary name and renamed when complete, so `--resume`
  finds the newest complete one; `remove_partial_checkpoints()` deletes what a killed save left.
- Image files that cannot be read: `bad_files()` applies data.on_error (skip: counted, warned,
  listed in RUN/bad_files.json; fail: stop naming the file).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from vitkit.data import BadFiles
from vitkit.errors import CheckpointError, TrainingError
from vitkit.files import read_json, write_json
from vitkit.train import distributed

BAD_FILES_NAME = "bad_files.json"
_caught: list[str] = []  # names of the signals received while train() runs
_finishing: list[bool] = []  # non-empty once the run's steps are done (`steps_done`)
# torchrun forwards the SIGINT or SIGTERM it gets to every worker, which a Ctrl-C (or a scheduler signalling the process
# group) has already reached: under torchrun the same signal again this soon is that copy, not a second request
FORWARDED_WITHIN_S = 5.0


@contextmanager
def stop_on_signals(signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> Iterator[None]:
    """While inside, the first SIGTERM/SIGINT only asks the run to stop (see `stop_requested`)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # handlers can only be installed from the main thread; a run in a thread stops the usual way
        return

    owner = os.getpid()
    torchrun = distributed.under_torchrun()
    first = [0.0]

    def handler(signum, frame):
        if os.getpid() != owner:
            return  # a forked DataLoader worker inherited the handler: the main process decides (Ctrl-C reaches all)
        name = signal.Signals(signum).name
        if _caught and torchrun and name == _caught[0] and time.monotonic() - first[0] < FORWARDED_WITHIN_S:
            return  # torchrun's copy of the signal that already stopped the run
        if _caught:
            raise KeyboardInterrupt  # asked twice: stop now
        _caught.append(name)
        first[0] = time.monotonic()
        # under torchrun every rank stops; rank 0 says so
        if distributed.is_main():
            doing = (
                "the steps are done: writing the final model and figures, then stopping"
                if _finishing
                else "saving a checkpoint after this step, then stopping"
            )
            print(f"vitkit: {name} received: {doing} (send it again to stop at once)", file=sys.stderr, flush=True)

    previous = {s: signal.getsignal(s) for s in signals}
    _caught.clear()
    _finishing.clear()
    try:
        for s in signals:
            signal.signal(s, handler)
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        _caught.clear()
        _finishing.clear()


def steps_done() -> None:
    """The run has trained its last step: a stop signal now lets it write final/ and its figures (said so)."""
    _finishing.append(True)


def stop_requested() -> str | None:
    """The name of the signal that asked the run to stop, or None."""
    return _caught[0] if _caught else None


class NonFinite:
    """Counts steps whose loss or gradient norm is not finite; `limit` in a row is a TrainingError.

    The counts live in the train `state` dict, so they are saved with every checkpoint.
    """

    def __init__(self, state: dict, limit: int, *, check_grads: bool = True, last_good=lambda: "the last checkpoint"):
        self.state, self.limit, self.check_grads, self.last_good = state, limit, check_grads, last_good
        state.setdefault("skipped_steps", 0)
        state.setdefault("nonfinite_in_a_row", 0)

    def skip(self, step: int, loss: torch.Tensor, grad_norm: torch.Tensor) -> bool:
        """True if step `step` (0-based) must be skipped. With an fp16 GradScaler (check_grads=False)
        overflowing gradients are the scaler's business and only the loss is checked."""
        values = (
            torch.stack([loss.detach().float(), grad_norm.detach().float()])
            if self.check_grads
            else loss.detach().float()
        )
        if bool(torch.isfinite(values).all()):
            self.state["nonfinite_in_a_row"] = 0
            return False
        self.state["skipped_steps"] += 1
        self.state["nonfinite_in_a_row"] += 1
        row = self.state["nonfinite_in_a_row"]
        what = f"loss {float(loss):.4g}, gradient norm {float(grad_norm):.4g}"
        print(
            f"vitkit: step {step + 1}: {what} is not finite; step skipped ({row} in a row, the run stops at {self.limit})",
            file=sys.stderr,
            flush=True,
        )
        if row >= self.limit:
            raise TrainingError(
                f"train: the loss or the gradients were not finite for {row} steps in a row (steps {step + 2 - row}-{step + 1}; "
                f"{self.state['skipped_steps']} skipped in all): the run diverged; {self.last_good()}; "
                "lower train.lr, keep train.clip_norm on, or use train.precision=fp32, then --resume or start again"
            )
        return True


def last_finite_checkpoint(out: Path) -> str:
    """Where a diverged run can go on from: the newest step checkpoint whose weights are all finite (read to check)."""
    from vitkit.checkpoint.io import read_safetensors

    for folder in sorted((out / "checkpoints").glob("step_*"), reverse=True):
        try:
            weights = read_safetensors(folder / "model.safetensors")
        except CheckpointError:
            continue
        if all(bool(torch.isfinite(t).all()) for t in weights.values() if t.is_floating_point()):
            return f"the last checkpoint with finite weights is {folder}"
    return "no checkpoint holds finite weights"


def check_finite_weights(model: torch.nn.Module, step: int, out: Path, world) -> None:
    """A TrainingError, before anything is saved, when a weight is NaN or infinite (a step that overflowed them)."""
    from vitkit.train import distributed

    bad = next(
        (
            name
            for name, p in model.named_parameters()
            if not bool(torch.isfinite(p.to_local() if hasattr(p, "to_local") else p).all())
        ),
        None,
    )
    if distributed.any_rank(bad is not None, world):
        raise TrainingError(
            f"train: after step {step} the weights are not finite ({bad or 'on another rank'}); not saved: the run diverged; "
            f"{last_finite_checkpoint(out)}; lower train.lr or keep train.clip_norm on, then --resume or start again"
        )


def check_run_directory(out: Path, world) -> None:
    """A TrainingError, before anything is written, when the run directory was removed or moved while training: the
    checkpoint would make a new folder there without run.yaml, metrics or lock, a run that could not be resumed."""
    from vitkit.train import distributed

    if distributed.any_rank(world.main and not (out / "run.yaml").is_file(), world):
        raise TrainingError(
            f"{out}: the run directory was removed or moved while training (its run.yaml is gone); stopped "
            "without writing into it again. Move it back and --resume it, or start a new run with "
            f"vitkit train --out {out}"
        )


def bad_files(out: Path, policy: str, resume: bool, *, writer: bool = True, split_of=None) -> BadFiles:
    """data.on_error for a run: skipped files are listed in RUN/bad_files.json (kept across --resume), each with the
    split it is of where `split_of(path)` says.

    Under torch.distributed only rank 0 is the `writer`; the other ranks' files reach the list
    through `merge_bad_files` at every checkpoint and at the end.
    """
    path = out / BAD_FILES_NAME
    known = {}
    if resume and path.is_file():
        data = read_json(path)
        rows = data.get("files") if isinstance(data, dict) else None
        if not isinstance(rows, list) or not all(
            isinstance(r, dict) and isinstance(r.get("path"), str) and isinstance(r.get("error"), str) for r in rows
        ):
            raise CheckpointError(
                f'{path}: damaged (expected {{"files": [{{"path": ..., "error": ...}}]}}); delete it: '
                "the unreadable files are found again as the run reads them"
            )
        known = {row["path"]: row["error"] for row in rows}

    def save(files: dict[str, str]) -> None:
        write_json(
            path,
            {
                "count": len(files),
                "files": [
                    {"path": p, **({"split": split_of(p)} if split_of else {}), "error": e} for p, e in files.items()
                ],
            },
        )

    return BadFiles(
        policy,
        save=save if writer else None,
        known=known,
        hint=" (data.on_error=fail; data.on_error=skip trains without such files)",
    )


def merge_bad_files(bad: BadFiles, per_rank: list[dict[str, str]]) -> None:
    """Every rank's skipped files (each streams its own share) into `bad`, saved if the list grew."""
    merged = {path: error for files in per_rank for path, error in files.items()}
    if merged.keys() - bad.files.keys():
        bad.files.update(merged)
        if bad.save is not None:
            bad.save(bad.files)


def remove_partial_checkpoints(out: Path, complete: str) -> None:
    """Delete what a killed run left in checkpoints/: half-written (.step_N.tmp), half-removed (.step_N.old) and
    step_N/ directories without `complete` (their state file) are never resumed from."""
    folder = out / "checkpoints"
    partial = [*folder.glob(".step_*.tmp"), *folder.glob(".step_*.old")]
    partial += [p for p in folder.glob("step_*") if p.is_dir() and not (p / complete).is_file()]
    for path in partial:
        shutil.rmtree(path, ignore_errors=True)
