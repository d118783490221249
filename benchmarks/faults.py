"""The fault campaign behind the table at the top of docs/reliability.md: kills, full disks and fuzzed inputs,
counted. Every number it prints comes from this run.

    .venv/bin/python benchmarks/faults.py [--fuzz-examples 300] [--random-kills 20] [--train-kills 5] [--results]

1. A SIGKILL at every file-system step (each rename, fsync, unlink, mkdir, open, close) of replacing a checkpoint,
   in every format (vitkit, hf, npz, timm): afterwards the checkpoint must read back as the old model or the new
   one, bit for bit. A checkpoint that is neither counts its bytes as lost.
2. SIGKILL of the real `vitkit convert SRC DST` at random moments: the same check.
3. A full disk: a file-size limit (RLIMIT_FSIZE) at 12 sizes from 0 to the model's size during a replacement, and
   a real full tmpfs (root only): the old model must be intact and the error must say nothing was replaced.
4. SIGKILL of `vitkit train` at random moments, then `vitkit train --resume`: the final weights must equal those
   of a run never killed (to 1e-6).
5. The hypothesis fuzzers (tests/test_input_fuzz.py, the image, checkpoint and tar/brace-pattern fuzzers) with many
   examples: every input ends in success or a one-line error with exit code 2.
6. Planted pickles: a pickle that creates a file when loaded, put where a checkpoint's tensors go (a timm .pth, an
   HF pytorch_model.bin, an object array in an .npz, a run's train_state.pt), then read by the real commands
   (info, predict, convert, eval, train --resume): every command must refuse in one line and no file may appear.
   (DCP's pickled .metadata under torchrun is tests/train/test_sharded_trust.py's.)
7. Special files: /dev/zero as an image and as a checkpoint, a FIFO as an image and a checkpoint, each under a
   timeout and an address-space limit: one line, exit 2, never a hang or a runaway read.
8. Bounded domains (`domains`): numbers out of their key's domain in every reader (Hugging Face's config.json and
   preprocessor_config.json, vitkit's config.json, KEY=VALUE overrides), weights whose outputs overflow, safetensors
   of every float8 kind and packed float4, a JSONL label -1, a folder named like an image: each refusal one line with
   exit 2 naming the key and never a Python exception type, each readable input read (float8, 1e-3 in a list).

9. Live runs and trackers (`--groups live-trackers` runs this group alone): predict, convert and info on a run while
   it trains; kill -9 past a checkpoint, then `--resume` with another train.steps, each tracker's values per step
   against metrics.jsonl; broken tracker packages, a setting W&B refuses, an MLflow store that cannot be made; a full
   disk (a small tmpfs in a user namespace where unshare works, and a file-size limit) under csv and tensorboard.

--groups runs some of them (kills, convert-kills, fsize, tmpfs, train-kills, pickles, special, fuzz, domains, live-trackers); the
rows of a group are written only where it ran, the campaign's shared rows only where every group ran.

--results also writes the rows faults-bytes-lost-SLUG, faults-wrong-messages-SLUG, faults-train-kills-SLUG (and
faults-domains-SLUG and faults-live-reads/-trackers/-tracker-lines-SLUG, from groups 8 and 9) of benchmarks/results/reliability.csv through benchmarks/rows.py (SLUG: the machine kind, e.g. epyc); off by default
so a quick run doesn't overwrite published figures. Then run `python benchmarks/render.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "checkpoint"))
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "cli")]
from test_domains_cli import dtype_copy, edited_copy  # noqa: E402  (the tests' edited checkpoints, reused)
from test_replace import FORMATS, _killed_at, _model, _which  # noqa: E402  (the tests' fault injection, reused)

sys.path.insert(0, str(ROOT / "tests" / "cli"))
from test_tracking_cli import TRACKER_ENV, wandb_run  # noqa: E402  (the trackers offline, and W&B's file reader)

from vitkit.checkpoint import save_checkpoint  # noqa: E402
from vitkit.checkpoint.io import read_safetensors  # noqa: E402
from vitkit.errors import CheckpointError  # noqa: E402
from vitkit.train import step_checkpoints  # noqa: E402

VITKIT = str(Path(sys.executable).with_name("vitkit"))
counts = {
    "inputs tried": 0,
    "faults injected": 0,
    "kills survived": 0,
    "bytes lost": 0,
    "wrong messages": 0,
    "pickles executed": 0,
    "hangs": 0,
}


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size


def _check(dst: Path, old: dict, new: dict, old_bytes: int) -> str:
    try:
        return _which(dst, old, new)
    except (AssertionError, CheckpointError) as err:
        print(f"  LOST: {dst}: {err}")
        counts["bytes lost"] += old_bytes
        return "lost"


def kill_every_step(work: Path) -> None:
    old_model, new_model = _model(0), _model(1)
    old, new = old_model.state_dict(), new_model.state_dict()
    for format, name in FORMATS.items():
        dst, point, seen = work / name, 1, []
        while True:
            shutil.rmtree(dst, ignore_errors=True) if dst.is_dir() else dst.unlink(missing_ok=True)
            save_checkpoint(old_model, dst, format)
            killed = _killed_at(point, lambda: save_checkpoint(new_model, dst, format))
            seen.append(_check(dst, old, new, _size(dst) if dst.exists() else 0))
            if not killed:
                break
            counts["faults injected"] += 1
            counts["kills survived"] += seen[-1] != "lost"
            point += 1
        print(
            f"kill at every step, {format}: {point - 1} kills, afterwards old {seen.count('old')}, new {seen.count('new')}, "
            f"lost {seen.count('lost')}"
        )


def random_convert_kills(work: Path, n: int) -> None:
    src, dst = work / "src", work / "dst_random"
    save_checkpoint(_model(1), src)
    old, new = _model(0).state_dict(), _model(1).state_dict()
    rng, seen = random.Random(0), []
    started = time.perf_counter()
    subprocess.run([VITKIT, "convert", str(src), str(work / "timed")], check=True, capture_output=True)
    took = time.perf_counter() - started  # kills fall in the last half of a convert's time, where it writes
    for _ in range(n):
        save_checkpoint(_model(0), dst)
        run = subprocess.Popen(
            [VITKIT, "convert", str(src), str(dst)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        time.sleep(rng.uniform(0.5 * took, 1.05 * took))
        run.kill()
        run.wait()
        counts["faults injected"] += 1
        seen.append(_check(dst, old, new, _size(dst)))
        counts["kills survived"] += seen[-1] != "lost"
    print(
        f"SIGKILL of vitkit convert at random moments: {n}, afterwards old {seen.count('old')}, new {seen.count('new')}, "
        f"lost {seen.count('lost')}"
    )


def file_size_limits(work: Path) -> None:
    old_model, new_model = _model(0), _model(1)
    old, new = old_model.state_dict(), new_model.state_dict()
    for format, name in FORMATS.items():
        dst = work / f"fsize_{name}"
        save_checkpoint(old_model, dst, format)
        full = _size(dst)
        for limit in [int(full * k / 11) for k in range(12)]:
            read, write = os.pipe()
            child = os.fork()
            if child == 0:
                os.close(read)
                resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
                try:
                    save_checkpoint(new_model, dst, format)
                    message = ""
                except CheckpointError as err:
                    message = str(err)
                os.write(write, message.encode())
                os._exit(0)
            os.close(write)
            with os.fdopen(read) as pipe:
                message = pipe.read()
            os.waitpid(child, 0)
            counts["faults injected"] += 1
            holds = _check(dst, old, new, full)
            if message and (holds != "old" or "nothing was replaced" not in message):
                counts["wrong messages"] += 1
            if holds == "new":
                save_checkpoint(old_model, dst, format)
        print(f"file-size limit at 12 sizes, {format}: the old model intact after every failed write")


def tmpfs_full(work: Path) -> None:
    if os.geteuid() != 0:
        print("full tmpfs: skipped (needs root)")
        return
    disk = work / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(disk)], capture_output=True).returncode:
        print("full tmpfs: skipped (cannot mount)")
        return
    try:
        from vitkit.models import VisionTransformer, get_config

        big = VisionTransformer(get_config("vit_test", depth=10, image_size=16, num_classes=3))
        torch.manual_seed(5)
        old_model = VisionTransformer(big.config)
        for format, name in FORMATS.items():
            dst = disk / name
            save_checkpoint(old_model, dst, format)
            try:
                save_checkpoint(big, dst, format)
                message = ""
            except CheckpointError as err:
                message = str(err)
            counts["faults injected"] += 1
            holds = _check(dst, old_model.state_dict(), big.state_dict(), _size(dst))
            # refused before writing (too little free space to hold it) or stopped by the full disk: named, nothing lost
            if holds != "old" or not ("No space left" in message or "free some space" in message):
                counts["wrong messages"] += 1
            shutil.rmtree(dst) if dst.is_dir() else dst.unlink()
            print(f"full tmpfs (600 KiB), {format}: {holds} model kept; {message[:60]}...")
    finally:
        subprocess.run(["umount", str(disk)])


TRAIN = [
    "model.name=vit_test",
    "model.depth=1",
    "model.image_size=8",
    "data.name=synthetic",
    "data.synthetic_size=64",
    "train.batch_size=16",
    "train.warmup_steps=2",
    "train.log_every=1",
    "train.eval_every=100",
    "train.checkpoint_every=1",
    "train.progress=false",
    "augment.crop=pad",
    "augment.pad=1",
    "train.threads=1",
    "train.decay=constant",
    "train.keep_checkpoints=1",
]


train_counts = {"killed": 0, "same": 0}  # the `vitkit train` kills alone, for their row


def train_kills(work: Path, n: int, steps: int = 40) -> None:
    straight = work / "straight"
    started = time.monotonic()
    subprocess.run(
        [VITKIT, "train", "--out", str(straight), *TRAIN, f"train.steps={steps}"], check=True, capture_output=True
    )
    took = time.monotonic() - started
    want = read_safetensors(straight / "final" / "model.safetensors")
    rng = random.Random(1)
    for i in range(n):
        out = work / f"killed{i}"
        run = subprocess.Popen(
            [VITKIT, "train", "--out", str(out), *TRAIN, f"train.steps={steps}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(0.5, 0.95) * took)  # the later half of a run as long as the straight one, on any machine
        if run.poll() is not None:  # it finished first: nothing was killed, nothing counted
            print(f"SIGKILL of vitkit train {i + 1}/{n}: the run had ended; not counted")
            continue
        run.kill()
        run.wait()
        counts["faults injected"] += 1
        if not (out / "final").is_dir():  # (killed after its final model was written: that model is compared as it is)
            args = (
                ["--resume", str(out)] if step_checkpoints(out) else ["--out", str(out), *TRAIN, f"train.steps={steps}"]
            )
            subprocess.run([VITKIT, "train", *args], check=True, capture_output=True)
        got = read_safetensors(out / "final" / "model.safetensors")
        same = all(torch.allclose(got[k], want[k], atol=1e-6, rtol=0) for k in want)
        counts["kills survived"] += same
        train_counts["killed"] += 1
        train_counts["same"] += same
        counts["bytes lost"] += 0 if same else _size(out / "final")
        print(f"SIGKILL of vitkit train {i + 1}/{n}: resumed to the same weights as a straight run: {same}")


class Payload:
    """A pickle that creates `marker` when it is loaded: what an attacker puts where tensors are expected."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _one_line_refusal(command: list[str], what: str, **run) -> None:
    """Run a vitkit command that must refuse: one line, exit 2; count a wrong message or a hang otherwise."""
    counts["inputs tried"] += 1
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, **run)
    except subprocess.TimeoutExpired:
        counts["hangs"] += 1
        print(f"  HANG: {what}")
        return
    lines = done.stderr.strip().splitlines()
    if done.returncode != 2 or len(lines) != 1 or "Traceback" in done.stderr:
        counts["wrong messages"] += 1
        print(f"  WRONG MESSAGE: {what}: exit {done.returncode}: {done.stderr[-500:]}")


def planted_pickles(work: Path) -> None:
    from PIL import Image

    run = work / "pickle-run"
    subprocess.run(
        [VITKIT, "train", "--out", str(run), *TRAIN, "train.steps=4", "train.checkpoint_every=2"],
        check=True,
        capture_output=True,
    )
    image = work / "pickle-image.png"
    Image.new("RGB", (8, 8), (120, 30, 200)).save(image)
    marker = work / "pwned"
    payload = {"patch_embed.weight": Payload(marker)}
    timm_file = work / "model.pth"
    torch.save(payload, timm_file)
    hf = work / "hf"
    hf.mkdir(exist_ok=True)
    (hf / "config.json").write_text(json.dumps({"model_type": "vit", "image_size": 8, "patch_size": 4}))
    torch.save(payload, hf / "pytorch_model.bin")
    import numpy as np

    npz = work / "model.npz"
    np.savez(npz, **{"embedding/kernel": np.array([Payload(marker)], dtype=object)})
    step = sorted((run / "checkpoints").iterdir())[-1]
    torch.save({"optimizer": Payload(marker)}, step / "train_state.pt")
    for target in (timm_file, hf, npz):
        for command in (["info", str(target)], ["predict", str(target), str(image)], ["convert", str(target)]):
            args = [*command, str(work / "converted.npz")] if command[0] == "convert" else command
            _one_line_refusal([VITKIT, *args], f"vitkit {' '.join(args)}")
        _one_line_refusal([VITKIT, "eval", str(target), "--data", "synthetic"], f"vitkit eval {target}")
    _one_line_refusal([VITKIT, "train", "--resume", str(run), "train.steps=6"], "train --resume, train_state.pt")
    executed = marker.exists()
    counts["pickles executed"] += executed
    print(f"planted pickles: {'EXECUTED' if executed else 'none executed'}")


def special_files(work: Path) -> None:
    fifo = work / "fifo.png"
    os.mkfifo(fifo)
    zero = work / "zero.png"
    zero.symlink_to("/dev/zero")
    ckpt_fifo = work / "fifo.pth"
    os.mkfifo(ckpt_fifo)
    run = work / "pickle-run"
    limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    for args in (["predict", str(run), str(fifo)], ["predict", str(run), str(zero)], ["info", str(ckpt_fifo)],
                 ["info", "/dev/zero"]):  # fmt: skip
        _one_line_refusal([VITKIT, *args], f"vitkit {' '.join(args)}", preexec_fn=limit)
    print("special files: tried")


# -- live runs and trackers: reads of a run while it trains, trackers after a resume, tracker and disk faults ---------
live_counts = {
    "reads": 0,
    "reads failed": 0,
    "tracker runs": 0,
    "disagreeing": 0,
    "faults": 0,
    "wrong lines": 0,
    "data lost": 0,
}


def _wait_for(condition, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def live_run_reads(work: Path, n: int) -> None:
    """predict, convert and info on a run while it trains (a checkpoint each step, one kept): each must read it whole."""
    from PIL import Image

    image = work / "live.png"
    Image.new("RGB", (8, 8), (30, 120, 200)).save(image)
    run = work / "live-run"
    trainer = subprocess.Popen(
        [VITKIT, "train", "--out", str(run), *TRAIN, "train.steps=1000000"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for(lambda: step_checkpoints(run), "the live run's first checkpoint")
        for i in range(n):
            command = [
                ["predict", str(run), str(image)],
                ["convert", str(run), str(work / f"live{i}")],
                ["info", str(run)],
            ]
            args = command[i % 3]
            done = subprocess.run([VITKIT, *args], capture_output=True, text=True, timeout=300)
            live_counts["reads"] += 1
            counts["inputs tried"] += 1
            if done.returncode != 0:
                live_counts["reads failed"] += 1
                counts["wrong messages"] += 1
                print(f"  READ FAILED: vitkit {args[0]}: {done.stderr.strip()[-300:]}")
        newest = step_checkpoints(run)[-1].name
    finally:
        trainer.kill()
        trainer.wait()
    print(f"reads of a live run (a checkpoint each step, up to {newest}): {live_counts['reads failed']} of {n} failed")


def _tracker_views(out: Path, wandb_dir: Path) -> dict[str, dict[int, float]]:
    """train/loss per step as each tracker's reader sees it (W&B: every value of the run's offline files, a step
    logged twice listed twice); a step with two values is kept as a list."""
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def collect(pairs) -> dict:
        found: dict = {}
        for step, value in pairs:
            found.setdefault(step, []).append(value)
        return found

    ids = json.loads((out / "trackers.json").read_text())
    history = MlflowClient().get_metric_history(ids["mlflow"]["run_id"], "train/loss")
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    wandb_pairs = [
        (step, row["train/loss"])
        for path in sorted(wandb_dir.glob(f"wandb/offline-run-*/run-{ids['wandb']['id']}.wandb"))
        for step, row in wandb_run(str(path))[2].items()
        if "train/loss" in row
    ]
    csv_rows = [line.split(",") for line in (out / "metrics.csv").read_text().splitlines()[1:]]
    return {
        "csv": collect((int(r[1]), float(r[3])) for r in csv_rows if r[0] == "train"),
        "tensorboard": collect((e.step, e.value) for e in events.Scalars("train/loss")),
        "wandb": collect(wandb_pairs),
        "mlflow": collect((m.step, m.value) for m in history),
    }


def tracker_resumes(work: Path, kills: int) -> None:
    """kill -9 after a checkpoint, with steps logged past it; `--resume RUN train.steps=N` with another N: each tracker
    must hold metrics.jsonl's train/loss, one value per step."""
    from vitkit.train.state import read_metrics

    for i in range(kills):
        out, wandb_dir = work / f"tracked{i}", work / f"wandb{i}"
        env = {
            **os.environ,
            **TRACKER_ENV,
            "WANDB_DIR": str(wandb_dir),
            "MLFLOW_TRACKING_URI": f"file:{work / 'mlruns'}",
        }
        wandb_dir.mkdir()
        # a cosine decay over train.steps: the retrained steps get other values than the killed run's
        logs = ["train.checkpoint_every=4", "train.decay=cosine", "train.log_to=[csv,tensorboard,wandb,mlflow]"]
        run = subprocess.Popen(
            [VITKIT, "train", "--out", str(out), *TRAIN, *logs, "train.steps=400"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        past = 2 + i  # steps logged after the newest checkpoint when the kill comes

        def logged_past() -> bool:
            steps = step_checkpoints(out)
            rows = read_metrics(out) if steps else []
            return bool(rows) and rows[-1]["step"] >= int(steps[-1].name.split("_")[1]) + past

        _wait_for(logged_past, "steps logged past a checkpoint")
        run.kill()
        run.wait()
        counts["faults injected"] += 1
        checkpoint = int(step_checkpoints(out)[-1].name.split("_")[1])
        resume = [VITKIT, "train", "--resume", str(out), f"train.steps={checkpoint + 3 + i}"]
        subprocess.run(resume, env=env, check=True, capture_output=True)
        want = {r["step"]: r["loss"] for r in read_metrics(out) if r["kind"] == "train"}
        for tracker, got in _with_env(env, lambda: _tracker_views(out, wandb_dir)).items():
            live_counts["tracker runs"] += 1
            agrees = sorted(got) == sorted(want) and all(
                len(values) == 1 and abs(values[0] - want[step]) <= 1e-6 * abs(want[step])
                for step, values in got.items()
            )
            live_counts["disagreeing"] += not agrees
            counts["wrong messages"] += not agrees
            if not agrees:
                print(f"  DISAGREES: {tracker} after kill {i + 1}: {got} against metrics.jsonl {want}")
    print(
        f"kill -9 past a checkpoint, --resume with another train.steps: {live_counts['disagreeing']} of "
        f"{live_counts['tracker runs']} tracker runs differ from metrics.jsonl"
    )


def _with_env(env: dict, fn):
    """fn() with os.environ as `env` (MLflow's client reads its store from MLFLOW_TRACKING_URI), put back after."""
    before = dict(os.environ)
    os.environ.update(env)
    try:
        return fn()
    finally:
        os.environ.clear()
        os.environ.update(before)


def _one_line_naming(command: list[str], named: str, what: str, **run) -> subprocess.CompletedProcess:
    """A command that must fail in one line, exit 2, naming `named`; counted as a fault, and a wrong line otherwise."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, **run)
    lines = done.stderr.strip().splitlines()
    live_counts["faults"] += 1
    counts["faults injected"] += 1
    ok = done.returncode == 2 and len(lines) == 1 and named in lines[0] and "a file:" not in lines[0]
    if not ok or "Traceback" in done.stderr:
        live_counts["wrong lines"] += 1
        counts["wrong messages"] += 1
        print(f"  WRONG LINE: {what}: exit {done.returncode}: {done.stderr.strip()[-500:]}")
    else:
        print(f"  {what}: {lines[0][:160]}")
    return done


def tracker_environments(work: Path) -> None:
    """Tracker packages installed but broken, a setting W&B refuses, an MLflow store that cannot be made."""
    base = {**os.environ, **TRACKER_ENV, "WANDB_DIR": str(work), "MLFLOW_TRACKING_URI": f"file:{work / 'mlruns'}"}
    for package in ("wandb", "mlflow"):
        site = work / f"broken-{package}"
        (site / package).mkdir(parents=True)
        (site / package / "__init__.py").write_text(
            "raise AttributeError(\"module 'pydantic' has no attribute 'v1'\")\n"
        )
        env = {**base, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
        command = [VITKIT, "train", "--out", str(work / f"env-{package}"), *TRAIN, f"train.log_to=[{package}]"]
        _one_line_naming(
            command, f"the {package} package is installed but fails to import", f"broken {package}", env=env
        )
    settings = [("wandb", "WANDB_MODE", "ofline"), ("mlflow", "MLFLOW_TRACKING_URI", "file:/proc/vitkit/mlruns")]
    for tracker, variable, value in settings:
        command = [VITKIT, "train", "--out", str(work / f"env-{variable}"), *TRAIN, f"train.log_to=[{tracker}]"]
        _one_line_naming(command, variable, f"{variable}={value}", env={**base, variable: value})
    print(f"tracker environments: {live_counts['wrong lines']} wrong lines of {live_counts['faults']}")


def _run_kept(out: Path) -> bool:
    """What a run wrote before its disk filled stays: metrics.jsonl's train steps 1..k, metrics.csv and TensorBoard
    holding none of other values."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from vitkit.train.state import read_metrics

    loss = {r["step"]: r["loss"] for r in read_metrics(out) if r["kind"] == "train"}
    if sorted(loss) != list(range(1, len(loss) + 1)):
        return False
    kept = {}
    if (out / "tensorboard").is_dir():
        events = EventAccumulator(str(out / "tensorboard"))
        events.Reload()
        kept = (
            {e.step: e.value for e in events.Scalars("train/loss")} if "train/loss" in events.Tags()["scalars"] else {}
        )
    return all(step in loss and abs(value - loss[step]) <= 1e-6 * abs(loss[step]) for step, value in kept.items())


def full_disks_under_trackers(work: Path) -> None:
    """train.log_to=[csv,tensorboard] on a full disk: a real small tmpfs (a user and mount namespace, where unshare
    works) and a file-size limit (EFBIG), at three sizes each: one line naming the file, what was written kept."""
    logs = ["train.log_to=[csv,tensorboard]", "train.checkpoint_every=1000000", "train.steps=600"]
    tmpfs = subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0
    for kb in (32, 64, 128):
        out = work / f"fsize{kb}" / "run"
        limit = lambda kb=kb: resource.setrlimit(resource.RLIMIT_FSIZE, (kb << 10, resource.RLIM_INFINITY))
        _one_line_naming(
            [VITKIT, "train", "--out", str(out), *TRAIN, *logs], str(out), f"{kb} KiB files", preexec_fn=limit
        )
        _count_kept(out, f"{kb} KiB files")
        if not tmpfs:
            continue
        disk, copy = work / f"tmpfs{kb}", work / f"tmpfs{kb}-copy"
        disk.mkdir()
        script = 'mount -t tmpfs -o size="$1" tmpfs "$2" && "$3" train --out "$2/run" "${@:5}"; rc=$?; cp -r "$2/run" "$4"; exit $rc'
        command = ["unshare", "-rm", "bash", "-c", script, "-", f"{kb}k", str(disk), VITKIT, str(copy), *TRAIN, *logs]
        _one_line_naming(command, str(disk / "run"), f"a {kb} KiB tmpfs")
        _count_kept(copy, f"a {kb} KiB tmpfs")
    print(f"full disks under csv and tensorboard ({'tmpfs and ' if tmpfs else ''}file-size limits): done")


def _count_kept(out: Path, what: str) -> None:
    if not _run_kept(out):
        live_counts["data lost"] += 1
        counts["bytes lost"] += sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
        print(f"  DATA LOST: {what}: {out}")


def live_runs_and_trackers(work: Path, reads: int, kills: int) -> None:
    """The group for reads of live runs and for trackers (reads, resumes, environments, full disks)."""
    work.mkdir(exist_ok=True)
    live_run_reads(work, reads)
    tracker_resumes(work, kills)
    tracker_environments(work)
    full_disks_under_trackers(work)


domain_counts = {"tried": 0, "held": 0}  # the bounded-domain group alone, for its row


def _domain_case(command: list[str], what: str, *, refused: bool, words: str = "", **run) -> None:
    """One case of the bounded-domain group: a refusal must be one line with exit 2 that holds `words` and names no
    Python exception type; a readable input must exit 0. Counted in the campaign's counts and the group's own."""
    counts["inputs tried"] += 1
    domain_counts["tried"] += 1
    try:
        done = subprocess.run([VITKIT, *command], capture_output=True, text=True, timeout=300, **run)
    except subprocess.TimeoutExpired:
        counts["hangs"] += 1
        print(f"  HANG: {what}")
        return
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    if refused:
        held = (
            done.returncode == 2
            and len(lines) == 1
            and words in lines[0]
            and "%" not in done.stdout
            and not re.search(r"\b[A-Z]\w*(Error|Exception)\b|Traceback", done.stderr)
        )
    else:
        held = done.returncode == 0
    domain_counts["held"] += held
    if not held:
        counts["wrong messages"] += 1
        print(f"  WRONG: {what}: exit {done.returncode}: {done.stderr[-500:]}")


def _domain_inputs(work: Path) -> tuple[Path, Path, Path, Path]:
    """(vitkit checkpoint, its HF copy, a 40x30 PNG, an image folder of its 3 classes) for the group."""
    import numpy as np
    from PIL import Image

    root = work / "domains"
    root.mkdir(exist_ok=True)
    model = _model(0)
    torch.nn.init.normal_(model.head.weight)  # a head that answers: a zero head is refused for its own reason
    native, hf = root / "vitkit", root / "hf"
    save_checkpoint(model, native, metadata={"class_names": ["a", "b", "c"]})
    save_checkpoint(model, hf, "hf")
    image = root / "x.png"
    Image.fromarray(np.full((30, 40, 3), 90, np.uint8)).save(image)
    for name in "abc":
        (root / "data" / "test" / name).mkdir(parents=True, exist_ok=True)
        shutil.copy(image, root / "data" / "test" / name / "1.png")
    return native, hf, image, root / "data"


def bounded_domains(work: Path) -> None:
    native, hf, image, data = _domain_inputs(work)
    root = native.parent
    edits = [  # (checkpoint, file, change, the words its line holds)
        (hf, "preprocessor_config.json", {"image_std": [1e-300, 1, 1]}, "image_std: expected"),
        (hf, "preprocessor_config.json", {"image_mean": [1e308, 0, 0]}, "image_mean: expected"),
        (hf, "preprocessor_config.json", {"rescale_factor": "x"}, "rescale_factor: expected"),
        (hf, "preprocessor_config.json", {"crop_pct": 1e-5}, "crop_pct: expected"),
        (hf, "config.json", {"patch_size": 0}, "patch_size: expected"),
        (hf, "config.json", {"patch_size": [4]}, "patch_size: expected"),
        (hf, "config.json", {"image_size": [16]}, "image_size: expected"),
        (hf, "config.json", {"num_channels": 3000}, "num_channels: expected"),
        (hf, "config.json", {"layer_norm_eps": "1e-6"}, "layer_norm_eps: expected"),
        (hf, "config.json", {"id2label": "x"}, "id2label: expected"),
        (native, "config.json", {"model__std": [1e-300, 1, 1]}, "std: expected"),
        (native, "config.json", {"model__mean": [1e308, 0, 0]}, "mean: expected"),
        (native, "config.json", {"preprocess": {"crop_pct": 1e-5}}, "preprocess.crop_pct: expected"),
    ]
    for i, (source, name, change, words) in enumerate(edits):
        edited = edited_copy(source, root / f"edit{i}", name, **change)
        for command in (["predict", str(edited), str(image)], ["info", str(edited)]):
            _domain_case(command, f"{command[0]} with {name} {change}", refused=True, words=words)
    big = _model(0)
    with torch.no_grad():
        big.head.weight.fill_(3e38)  # finite weights whose outputs overflow
    save_checkpoint(big, root / "big", metadata={"class_names": ["a", "b", "c"]})
    for command in (["predict", str(root / "big"), str(image)], ["eval", str(root / "big"), "--data", str(data)]):
        _domain_case(command, f"{command[0]}: infinite outputs", refused=True, words="NaN or infinite")
    limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    for override in ("data.synthetic_classes=100000000", "train.threads=100000", "model.std=[1e-300,1,1]"):
        command = ["train", "--out", str(root / "run"), *TRAIN, "train.steps=1", override]
        _domain_case(command, override, refused=True, words=override.split("=")[0], preexec_fn=limit)
    _domain_case(["train", "--out", str(root / "sci"), *TRAIN, "train.steps=1", "model.in_chans=3",
                  "model.std=[1e-3,0.5,0.5]"], "model.std=[1e-3,0.5,0.5]", refused=False)  # fmt: skip
    _domain_dtypes(root, hf, image, data)
    (root / "dir.png").mkdir()
    _domain_case(["predict", str(native), str(root / "dir.png")], "a folder named dir.png", refused=True,
                 words="no images found")  # fmt: skip
    (root / "list.jsonl").write_text('{"path": "x.png", "label": 0}\n{"path": "x.png", "label": -1}\n')
    _domain_case(["data", str(root / "list.jsonl")], "JSONL label -1", refused=True, words="list.jsonl:2: label -1")
    print(f"bounded domains: {domain_counts['held']} of {domain_counts['tried']} inputs held")


def _domain_dtypes(root: Path, hf: Path, image: Path, data: Path) -> None:
    """Safetensors of every float8 kind are read by every command; packed float4 is refused in one line."""
    kinds = [k for k in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz") if hasattr(torch, k)]
    for kind in kinds:
        stored = dtype_copy(hf, root / kind, getattr(torch, kind))
        for command in (["info", str(stored)], ["predict", str(stored), str(image)],
                        ["convert", str(stored), str(root / f"{kind}.npz")], ["eval", str(stored), "--data", str(data)]):  # fmt: skip
            _domain_case(command, f"{command[0]} of {kind} safetensors", refused=False)
    if hasattr(torch, "float4_e2m1fn_x2"):
        stored = dtype_copy(hf, root / "float4", torch.float4_e2m1fn_x2)
        for command in (["info", str(stored)], ["predict", str(stored), str(image)]):
            _domain_case(command, f"{command[0]} of float4 safetensors", refused=True, words="float4_e2m1fn_x2")


def fuzz(examples: int) -> None:
    files = [
        "tests/test_input_fuzz.py",
        "tests/data/test_images_fuzz.py",
        "tests/checkpoint/test_checkpoint_fuzz.py",
        "tests/data/test_shards_fuzz.py",
    ]  # under the fuzz profile: `examples` where a test run has 100, each test its own multiple of it
    env = {**os.environ, "HYPOTHESIS_PROFILE": "fuzz", "VITKIT_FUZZ_EXAMPLES": str(examples)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--hypothesis-show-statistics", *files],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    phases = re.findall(r"- (\d+) passing, (\d+) failing", result.stdout)  # hypothesis statistics, every phase
    tried, failed = sum(int(p) for p, _ in phases), sum(int(f) for _, f in phases)
    counts["inputs tried"] += tried + failed
    tail = result.stdout.strip().splitlines()[-1]
    if result.returncode:
        print(result.stdout[-3000:])
    print(f"fuzzers ({', '.join(files)}): {tried + failed} inputs, {failed} failing; pytest: {tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--fuzz-examples",
        type=int,
        default=300,
        help="hypothesis examples per fuzzer (x_input_fuzz, images, checkpoints)",
    )
    parser.add_argument("--random-kills", type=int, default=20)
    parser.add_argument("--train-kills", type=int, default=5)
    parser.add_argument("--live-reads", type=int, default=12, help="reads of a run while it trains")
    parser.add_argument("--tracker-kills", type=int, default=3, help="kill -9, then --resume with another train.steps")
    parser.add_argument(
        "--results",
        action="store_true",
        help="write the rows faults-{bytes-lost,wrong-messages,train-kills,domains}-SLUG of "
        "benchmarks/results/reliability.csv (of the groups that ran)",
    )
    parser.add_argument(
        "--groups", default=",".join(GROUPS), help=f"comma-separated groups to run (default: all): {', '.join(GROUPS)}"
    )
    args = parser.parse_args()
    groups = [g.strip() for g in args.groups.split(",") if g.strip()]
    unknown = sorted(set(groups) - set(GROUPS))
    if unknown:
        parser.error(f"--groups: unknown {', '.join(unknown)}; groups are {', '.join(GROUPS)}")
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="vitkit-faults-") as tmp:
        work = Path(tmp)
        for group in groups:
            GROUPS[group](work, args)
    print(
        f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {time.time() - started:.0f} s, "
        f"{os.cpu_count()} CPUs, torch {torch.__version__}"
    )
    print("| " + " | ".join(counts) + " |")
    print("|" + "---|" * len(counts))
    print("| " + " | ".join(f"{counts[k]:,}" for k in counts) + " |")
    print(json.dumps(counts))
    if args.results:
        write_results(groups)


def write_live_results() -> None:
    from rows import write_rows

    common = {"benchmark": "Fault campaign (reliability)"}
    c = live_counts
    write_rows(
        "reliability",
        [
            {
                **common,
                "id": "faults-live-reads",
                "claim": "reads of a training run that failed (predict, convert, info)",
                "figure": f"{c['reads failed']} of {c['reads']}",
                "unit": "reads",
                "model": "vitkit run",
                "setting": "a checkpoint each step, 1 kept",
            },
            {
                **common,
                "id": "faults-trackers",
                "claim": "tracker runs disagreeing with metrics.jsonl after kill -9 and --resume with other train.steps",
                "figure": f"{c['disagreeing']} of {c['tracker runs']}",
                "unit": "runs",
                "model": "csv, TensorBoard, W&B, MLflow",
                "setting": "killed past a checkpoint",
            },
            {
                **common,
                "id": "faults-tracker-lines",
                "claim": "tracker faults and full disks not ending in one line naming the package, variable or file, or losing data",
                "figure": f"{c['wrong lines'] + c['data lost']} of {c['faults']}",
                "unit": "faults",
                "model": "train.log_to",
                "setting": "broken packages, bad env, tmpfs, file-size limits",
            },
        ],
    )


# the campaign's groups in order; special files read the run the planted pickles trained
GROUPS = {
    "kills": lambda work, args: kill_every_step(work),
    "convert-kills": lambda work, args: random_convert_kills(work, args.random_kills),
    "fsize": lambda work, args: file_size_limits(work),
    "tmpfs": lambda work, args: tmpfs_full(work),
    "train-kills": lambda work, args: train_kills(work, args.train_kills),
    "pickles": lambda work, args: planted_pickles(work),
    "special": lambda work, args: special_files(work),
    "fuzz": lambda work, args: fuzz(args.fuzz_examples),
    "domains": lambda work, args: bounded_domains(work),
    "live-trackers": lambda work, args: live_runs_and_trackers(work / "live", args.live_reads, args.tracker_kills),
}


def write_results(groups: list[str]) -> None:
    from rows import write_rows

    common = {"benchmark": "Fault campaign (reliability)"}
    rows = _campaign_rows(common) if set(groups) >= set(GROUPS) else []  # the shared counts: the whole campaign only
    if "domains" in groups:
        rows.append(
            {
                **common,
                "id": "faults-domains",
                "claim": "inputs out of a key's domain refused in one line naming the key (no exception type), "
                "and readable ones read: HF and vitkit configs, KEY=VALUE, float8/float4 safetensors, overflowing "
                "outputs, a JSONL label -1, a folder named like an image",
                "figure": f"{domain_counts['held']} of {domain_counts['tried']}",
                "unit": "inputs",
                "model": "vitkit dir, HF dir; predict, info, convert, eval, train, data",
                "setting": "each refusal exit 2 and one line; each readable input exit 0",
            }
        )
    if rows:
        write_rows("reliability", rows)
    if "live-trackers" in groups:
        write_live_results()


def _campaign_rows(common: dict) -> list[dict]:
    return [
        {
            **common,
            "id": "faults-bytes-lost",
            "claim": f"bytes lost over {counts['faults injected']:,} faults injected "
            f"({counts['kills survived']:,} kills survived) and {counts['inputs tried']:,} fuzzed inputs",
            "figure": f"{counts['bytes lost']}",
            "unit": "bytes",
            "model": "vitkit dir, HF dir, .npz + sidecar, timm .safetensors",
            "setting": "SIGKILLs, file-size limits, full disk, fuzzing",
        },
        {
            **common,
            "id": "faults-wrong-messages",
            "claim": "wrong messages over the same campaign",
            "figure": f"{counts['wrong messages']}",
            "unit": "messages",
            "model": "all formats",
            "setting": "each failure ends in one line, exit code 2",
        },
        {
            **common,
            "id": "faults-train-kills",
            "claim": "`vitkit train` runs killed then `--resume`d that end with the unkilled run's weights (to 1e-6)",
            "figure": f"{train_counts['same']} of {train_counts['killed']}",
            "unit": "runs",
            "model": "40 steps, a checkpoint each step",
            "setting": "SIGKILL in the later half of the run",
        },
        {
            **common,
            "id": "faults-pickles-executed",
            "claim": "planted pickles executed (timm .pth, HF .bin, .npz object array, train_state.pt; "
            "info, predict, convert, eval, train --resume)",
            "figure": f"{counts['pickles executed']}",
            "unit": "pickles",
            "model": "vitkit run, HF dir, .npz, timm .pth",
            "setting": "a pickle whose loading creates a file",
        },
        {
            **common,
            "id": "faults-hangs",
            "claim": "hangs or runaway reads on special files (FIFO, /dev/zero as image and checkpoint)",
            "figure": f"{counts['hangs']}",
            "unit": "commands",
            "model": "predict, info",
            "setting": "120 s timeout, 4 GiB address space",
        },
    ]


if __name__ == "__main__":
    main()
