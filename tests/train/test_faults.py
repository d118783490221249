"""Faults during training, through train() and through the real `vitkit train`: preemption signals, kill -9,
a full disk, non-finite steps and unreadable image files. Nothing already saved is lost."""

import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from tiny_run import TINY_RUN

from vitkit.checkpoint.io import read_safetensors
from vitkit.errors import CheckpointError, ConfigError, DataError, TrainingError
from vitkit.files import verify_checksums
from vitkit.train import faults, find_checkpoint, load_checkpoint, resume_config, step_checkpoints, train
from vitkit.train.config import load_run_config

TINY = [*TINY_RUN, "train.log_every=1", "train.eval_every=100", "train.decay=constant"]


def _final_weights(run: Path) -> dict[str, torch.Tensor]:
    return read_safetensors(run / "final" / "model.safetensors")


def _assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(b[key], a[key], atol=1e-6, rtol=0, msg=key)


# -- signals ---------------------------------------------------------------------------------
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_handlers_are_installed_only_while_training(sig):
    before = signal.getsignal(sig)
    with faults.stop_on_signals():
        assert signal.getsignal(sig) is not before
        assert faults.stop_requested() is None
        os.kill(os.getpid(), sig)  # delivered to the handler: a request, not an exit
        assert faults.stop_requested() == signal.Signals(sig).name
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), sig)  # asked twice: stop now
    assert signal.getsignal(sig) is before and faults.stop_requested() is None


def test_a_stop_signal_after_the_last_step_says_the_run_is_finishing(capfd):
    """SIGTERM while final/ and the figures were written said "saving a checkpoint after this step", then the run
    finished with exit 0: it says now that the steps are done and what it writes before stopping."""
    with faults.stop_on_signals():
        faults.steps_done()
        os.kill(os.getpid(), signal.SIGTERM)
    err = capfd.readouterr().err
    assert (
        "SIGTERM received: the steps are done: writing the final model and figures, then stopping" in err
        and "after this step" not in err
    )
    with faults.stop_on_signals():  # a new run starts with steps to train
        os.kill(os.getpid(), signal.SIGTERM)
    assert "saving a checkpoint after this step" in capfd.readouterr().err


def test_under_torchrun_its_forwarded_copy_of_the_signal_is_not_a_second_request(monkeypatch):
    """Ctrl-C under torchrun reaches every worker twice: from the terminal and from torchrun, which forwards the SIGINT it
    got. Unless the kernel merged the two, the copy stopped the workers at once, without their checkpoint."""
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    clock = [100.0]
    monkeypatch.setattr(faults.time, "monotonic", lambda: clock[0])
    with faults.stop_on_signals():
        os.kill(os.getpid(), signal.SIGINT)
        clock[0] += 0.05
        os.kill(os.getpid(), signal.SIGINT)  # torchrun's copy: still one request
        assert faults.stop_requested() == "SIGINT"
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)  # another signal is a second request
    with faults.stop_on_signals():
        os.kill(os.getpid(), signal.SIGINT)
        clock[0] += faults.FORWARDED_WITHIN_S
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)  # pressed again, later: stop now


def test_under_torchrun_only_rank_0_announces_the_stop(monkeypatch, capsys):
    """Every rank printed "SIGTERM received: saving a checkpoint ...": the same line once per process."""
    for rank, said in (("1", False), ("0", True)):
        monkeypatch.setenv("RANK", rank)
        with faults.stop_on_signals():
            os.kill(os.getpid(), signal.SIGTERM)
            assert faults.stop_requested() == "SIGTERM"  # every rank stops
        assert ("SIGTERM received" in capsys.readouterr().err) is said


def test_forked_workers_leave_the_signal_to_the_main_process():
    """DataLoader workers are forked with the handler installed; Ctrl-C reaches them too, and they must ignore it."""
    with faults.stop_on_signals():
        child = os.fork()
        if child == 0:  # the worker: a signal neither records a stop nor prints
            os.kill(os.getpid(), signal.SIGINT)
            os._exit(0 if faults.stop_requested() is None else 1)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert faults.stop_requested() is None


def _vitkit(*args) -> list[str]:
    return [sys.executable, "-m", "vitkit", *map(str, args)]


def _wait_for(condition, process: subprocess.Popen, timeout: float = 120.0) -> None:
    """Poll until `condition()` holds; fail with the process's output if it ends first or time runs out."""
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            out, err = process.communicate()
            pytest.fail(f"vitkit train ended early (exit {process.returncode}): {err[-2000:]}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail("vitkit train made no progress in time")
        time.sleep(0.05)  # polling interval


def _trained_steps(out: Path) -> int:
    path = out / "metrics.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.endswith("}")] if path.is_file() else []
    return max((r["step"] for r in rows), default=0)


def _newest_step(out: Path) -> int:
    steps = step_checkpoints(out)
    return int(steps[-1].name.split("_")[1]) if steps else 0


def test_ctrl_c_saves_a_checkpoint_and_exits_130_so_a_chain_of_commands_stops(tmp_path, vitkit_cmd, monkeypatch):
    """Ctrl-C (SIGINT) stopped the run at a step boundary and exited 0: `make demo` (and any `train && eval`) went
    on to evaluate the partial model. It exits 130 now, the checkpoint saved as before."""
    from vitkit.train import loop

    logged = loop._log_train

    def interrupted_at_the_first_log_line(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl-C, through train's own handler
        return logged(*args, **kwargs)

    monkeypatch.setattr(loop, "_log_train", interrupted_at_the_first_log_line)
    out = tmp_path / "run"
    done = vitkit_cmd("train", "--out", out, *TINY, "train.steps=6", "train.checkpoint_every=100")
    assert done.returncode == 130, done.stderr
    assert "SIGINT received" in done.stderr and "stopped at step 1 of 6, checkpoint saved" in done.stdout
    assert _newest_step(out) == 1 and not (out / "final").exists()


def test_sigterm_saves_a_checkpoint_exits_0_and_resume_continues_exactly(tmp_path, vitkit_cmd):
    """Images streamed by 2 DataLoader workers, 2 micro-batches a step; SIGTERM to the whole process group (as a
    scheduler, or Ctrl-C, delivers it): the workers leave it to the main process, which stops at the step boundary."""
    _folder_with_bad_files(tmp_path / "data")
    out = tmp_path / "run"
    streamed = [
        f"data.path={tmp_path / 'data'}",
        "data.memory_mb=0.0001",
        "data.workers=2",
        "data.val_split=val",
        "data.val_fraction=0.25",
        "train.micro_batch=8",
        "model.name=vit_test",
        "model.depth=1",
        "model.image_size=8",
        "train.batch_size=16",
        "train.warmup_steps=2",
        "train.log_every=1",
        "train.eval_every=1000",
        "train.progress=false",
        "augment.crop=none",
        "train.threads=1",
        "train.decay=constant",
        "train.steps=100000",
        "train.checkpoint_every=1000",
    ]
    run = subprocess.Popen(
        _vitkit("train", "--out", out, *streamed),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    _wait_for(lambda: _trained_steps(out) >= 5, run)
    signalled_after = _trained_steps(out)
    os.killpg(run.pid, signal.SIGTERM)
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 0, stderr
    assert stderr.count("SIGTERM received") == 1 and "Traceback" not in stderr
    stopped = _newest_step(out)
    assert stopped >= signalled_after and not (out / "final").exists()  # an ordinary step checkpoint, not the end
    assert (
        f"stopped at step {stopped} of 100000, checkpoint saved; continue with: vitkit train --resume {out}" in stdout
    )
    verify_checksums(step_checkpoints(out)[-1])

    resumed = vitkit_cmd(
        "train", "--resume", out, f"train.steps={stopped + 3}"
    )  # the command the message names, in-process
    assert resumed.returncode == 0, resumed.stderr
    straight = tmp_path / "straight"
    train(resume_config(out, [f"train.steps={stopped + 3}"]), straight)
    _assert_same_weights(_final_weights(straight), _final_weights(out))


def test_resume_after_kill_9_continues_from_the_last_complete_checkpoint(tmp_path):
    out = tmp_path / "run"
    run = subprocess.Popen(
        _vitkit("train", "--out", out, *TINY, "train.steps=100000", "train.checkpoint_every=3"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for(lambda: _newest_step(out) >= 6, run)
    run.kill()  # SIGKILL: no handler runs, a checkpoint may be half written
    run.communicate(timeout=60)
    assert run.returncode == -signal.SIGKILL
    last = _newest_step(out)
    train(resume_config(out, [f"train.steps={last + 2}"]), out, resume=True)  # what vitkit train --resume runs
    assert not list((out / "checkpoints").glob(".*"))  # no half-written checkpoint left behind
    straight = tmp_path / "straight"
    train(resume_config(out, [f"train.steps={last + 2}"]), straight)
    _assert_same_weights(_final_weights(straight), _final_weights(out))


def test_a_kill_between_the_two_renames_of_final_loses_nothing(tmp_path, vitkit_cmd):
    """Replacing final/ is two renames (final -> .final.old, .final.tmp -> final); a kill -9 between
    them leaves no final/. The next reader finishes the replacement with the new, complete directory."""
    out = tmp_path / "run"
    train(load_run_config(None, TINY + ["train.steps=4"]), out)
    new = _final_weights(out)
    os.replace(out / "final", out / ".final.tmp")  # the new final/, complete
    old = out / ".final.old"
    old.mkdir()
    (old / "config.json").write_text("{}")  # the previous final/, already moved aside
    image = tmp_path / "x.png"
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(image)
    result = vitkit_cmd("predict", out, image, "--json")  # what a user runs next
    assert result.returncode == 0, result.stderr
    assert (out / "final").is_dir() and not old.exists() and not (out / ".final.tmp").exists()
    _assert_same_weights(new, _final_weights(out))
    # without .final.old, a .final.tmp may be half written: it never replaces anything
    (out / ".final.tmp").mkdir()
    assert find_checkpoint(out) == out / "final" and (out / ".final.tmp").exists()
    _assert_same_weights(new, _final_weights(out))


# -- a full disk -----------------------------------------------------------------------------
def test_a_full_disk_while_saving_keeps_the_previous_checkpoint(tmp_path):
    """Real failing writes: a file-size limit (RLIMIT_FSIZE) makes every write past it fail with EFBIG."""
    out = tmp_path / "run"
    config = load_run_config(None, TINY + ["train.steps=6"])
    train(config, out, stop_at=2)
    previous = step_checkpoints(out)[-1]
    limit = (previous / "model.safetensors").stat().st_size // 2  # small JSON files still fit, weights do not
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        with pytest.raises(
            CheckpointError,
            match=r"step_0000004.tmp/model\.safetensors: cannot be written \(.*\); nothing was replaced",
        ) as caught:
            train(config, out, resume=True)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert "--resume" in str(caught.value)
    assert step_checkpoints(out) == [previous]  # the half-written step_4 never got its name
    verify_checksums(previous)
    model, state, _ = load_checkpoint(previous)
    assert state["step"] == 2
    train(config, out, resume=True)  # space is back: the run goes on from step 2
    assert json.loads((out / "summary.json").read_text())["steps"] == 6
    assert not list((out / "checkpoints").glob(".*"))  # and the partial directory is gone


def test_a_run_directory_removed_while_training_is_not_written_again(tmp_path, monkeypatch):
    """rm -rf of the run directory mid-run: the next checkpoint made a new folder there (no run.yaml, metrics or lock),
    the run ended with exit 0, and neither --resume nor a new run would take that folder."""
    import shutil

    import vitkit.train.loop as training

    out = tmp_path / "run"
    real, saves = training._save_step, []

    def removed_first(out_dir, *args, **kwargs):
        saves.append(out_dir)
        if len(saves) == 2:  # after the first checkpoint
            shutil.rmtree(out_dir)
        return real(out_dir, *args, **kwargs)

    monkeypatch.setattr(training, "_save_step", removed_first)
    with pytest.raises(
        TrainingError, match=r"run: the run directory was removed or moved while training \(its run.yaml is gone\)"
    ):
        train(load_run_config(None, TINY + ["train.steps=6", "train.checkpoint_every=2"]), out)
    assert not out.exists()


def test_a_damaged_checkpoint_is_named_on_resume(tmp_path):
    out = tmp_path / "run"
    config = load_run_config(None, TINY + ["train.steps=6"])
    train(config, out, stop_at=4)
    state = step_checkpoints(out)[-1] / "train_state.pt"
    good = state.read_bytes()
    data = bytearray(good)
    data[len(data) // 2] ^= 0xFF
    state.write_bytes(bytes(data))
    with pytest.raises(
        CheckpointError, match=r"step_0000004/train_state\.pt: corrupt .*remove this checkpoint directory"
    ):
        train(config, out, resume=True)
    state.write_bytes(good)
    text = step_checkpoints(out)[-1] / "train_state.json"  # truncated: it said only "damaged or not a config"
    text.write_text(text.read_text()[:20])
    with pytest.raises(
        CheckpointError, match=r"train_state\.json: not valid JSON .*; the checkpoint is damaged; remove its directory"
    ):
        train(config, out, resume=True)


# -- non-finite steps ------------------------------------------------------------------------
def _poison_loss(monkeypatch, bad_calls):
    """Make the loss NaN on the given (0-based) calls of the training loss."""
    from vitkit.train import objectives as train_module  # the loss of the classification objective

    real, calls = train_module.soft_cross_entropy, []

    def loss(logits, targets):
        calls.append(None)
        value = real(logits, targets)
        return value * float("nan") if len(calls) - 1 in bad_calls else value

    monkeypatch.setattr(train_module, "soft_cross_entropy", loss)


def test_a_non_finite_step_is_skipped_and_counted(tmp_path, monkeypatch, capfd):
    _poison_loss(monkeypatch, {2})
    summary = train(load_run_config(None, TINY + ["train.steps=5"]), tmp_path / "run")
    assert summary["skipped_steps"] == 1 and summary["steps"] == 5
    assert "step 3: loss nan" in capfd.readouterr().err
    model, state, tensors = load_checkpoint(tmp_path / "run" / "checkpoints" / "step_0000004")
    assert all(torch.isfinite(p).all() for p in model.state_dict().values())
    adam_steps = {float(s["step"]) for s in tensors["optimizer"]["state"].values()}
    assert adam_steps == {3.0}  # 4 steps, one of them skipped: the optimizer saw 3 updates


def test_too_many_non_finite_steps_in_a_row_stop_the_run(tmp_path, monkeypatch):
    _poison_loss(monkeypatch, set(range(3, 100)))
    with pytest.raises(TrainingError, match=r"not finite for 3 steps in a row \(steps 4-6; 3 skipped in all\)"):
        train(load_run_config(None, TINY + ["train.steps=20", "train.max_nonfinite_steps=3"]), tmp_path / "run")
    newest = step_checkpoints(tmp_path / "run")[-1]
    model, state, _ = load_checkpoint(newest)
    assert state["skipped_steps"] == 1  # the checkpoint at step 4 saw one skipped step; weights are finite
    assert all(torch.isfinite(p).all() for p in model.state_dict().values())


def test_a_diverging_run_stops_with_a_clear_message(tmp_path):
    with pytest.raises(TrainingError, match="the run diverged") as caught:
        train(
            load_run_config(
                None,
                TINY
                + [
                    "train.steps=30",
                    "train.lr=1e30",
                    "train.clip_norm=null",
                    "train.max_nonfinite_steps=2",
                    "train.checkpoint_every=1",
                ],
            ),
            tmp_path / "run",
        )
    named = re.search(r"the last checkpoint with finite weights is (\S+);", str(caught.value))
    if named:  # the checkpoint it names really holds finite weights (it is read, not assumed)
        weights = read_safetensors(Path(named.group(1)) / "model.safetensors")
        assert all(bool(torch.isfinite(t).all()) for t in weights.values())
    else:
        assert "no checkpoint holds finite weights" in str(caught.value)
    for folder in step_checkpoints(tmp_path / "run"):  # and no checkpoint of non-finite weights was ever written
        assert all(bool(torch.isfinite(t).all()) for t in read_safetensors(folder / "model.safetensors").values())


# -- unreadable image files (data.on_error) --------------------------------------------------
def _folder_with_bad_files(root: Path) -> list[Path]:
    rng = np.random.default_rng(0)
    for c, name in enumerate(("a", "b")):
        (root / name).mkdir(parents=True)
        for i in range(12):
            Image.fromarray((rng.integers(0, 60, (8, 8, 3)) + 150 * c).astype(np.uint8)).save(root / name / f"{i}.png")
    good = (root / "a" / "0.png").read_bytes()
    bad = [root / "a" / "truncated.png", root / "b" / "empty.png", root / "b" / "notes.jpg"]
    bad[0].write_bytes(good[: len(good) // 2])
    bad[1].write_bytes(b"")
    bad[2].write_text("not an image")
    return bad


FOLDER = [
    "model.name=vit_test",
    "model.depth=1",
    "model.image_size=8",
    "train.batch_size=8",
    "train.steps=4",
    "train.threads=1",
    "train.progress=false",
    "train.eval_every=4",
    "train.checkpoint_every=4",
    "augment.crop=none",
    "data.val_fraction=0.25",
    "data.val_split=val",
    "data.workers=0",
]


@pytest.mark.parametrize("memory_mb", [4096, 0.0001])  # decoded once into memory / streamed batch by batch
def test_bad_image_files_are_skipped_counted_and_listed(tmp_path, memory_mb, capfd):
    bad = _folder_with_bad_files(tmp_path / "data")
    out = tmp_path / "run"
    summary = train(
        load_run_config(None, FOLDER + [f"data.path={tmp_path / 'data'}", f"data.memory_mb={memory_mb}"]), out
    )
    listed = json.loads((out / "bad_files.json").read_text())
    seen = {Path(row["path"]) for row in listed["files"]}
    assert seen <= set(bad) and seen and listed["count"] == len(seen) == summary["bad_files"]
    assert all(row["error"].startswith(row["path"]) for row in listed["files"])
    printed = capfd.readouterr()
    assert "skipping a bad image" in printed.err
    assert summary["steps"] == 4 and (out / "final" / "model.safetensors").is_file()
    if memory_mb > 1:  # found before training: the plan says how many images are read (it counted the unreadable ones)
        assert re.search(
            r"skipped +\d+ unreadable \(data.on_error=skip, listed in bad_files.json\): \d+ of train, \d+ of val; "
            r"\d+ training images",
            printed.out,
        )


@pytest.mark.parametrize("memory_mb", [4096, 0.0001])
def test_unreadable_validation_images_are_not_counted_as_scored_nor_blamed_on_training(
    tmp_path, memory_mb, capfd, monkeypatch
):
    """Three unreadable files in val.csv: the plan said "val 15 images" and "120 training images are read", and the
    accuracy figure and summary.json said validation was 15 images, where 12 were scored."""
    from vitkit import plots

    rng = np.random.default_rng(0)
    rows = {"train": [], "val": []}
    for split, n in (("train", 16), ("val", 12)):
        for i in range(n):
            path = tmp_path / "img" / f"{split}{i}.png"
            path.parent.mkdir(exist_ok=True)
            Image.fromarray(rng.integers(0, 255, (10, 12, 3), dtype=np.uint8)).save(path)
            rows[split].append(f"{path},{'ab'[i % 2]}")
    (tmp_path / "img" / "cut.png").write_bytes((tmp_path / "img" / "val0.png").read_bytes()[:30])
    (tmp_path / "img" / "notes.png").write_text("not an image")
    rows["val"] += [
        f"{tmp_path / 'img' / 'cut.png'},a",
        f"{tmp_path / 'img' / 'notes.png'},b",
        f"{tmp_path / 'img' / 'gone.png'},a",
    ]
    for split, lines in rows.items():
        (tmp_path / "data" / f"{split}.csv").parent.mkdir(exist_ok=True)
        (tmp_path / "data" / f"{split}.csv").write_text("\n".join(lines) + "\n")
    titles = {}
    save = plots._save
    monkeypatch.setattr(
        plots, "_save", lambda fig, path: titles.setdefault(path.name, fig.axes[0].get_title()) and save(fig, path)
    )
    summary = train(
        load_run_config(None, FOLDER + [f"data.path={tmp_path / 'data'}", f"data.memory_mb={memory_mb}"]),
        tmp_path / "run",
    )
    assert summary["unreadable"] == {"train": 0, "val": 3} and summary["val_images"]["n"] == 15
    listed = json.loads((tmp_path / "run" / "bad_files.json").read_text())["files"]
    assert len(listed) == 3 and {row["split"] for row in listed} == {"val"}  # which split each file is of
    assert "validation: 12 of 15 images (3 unreadable skipped)" in titles["accuracy.png"]
    printed = capfd.readouterr().out
    if memory_mb > 1:  # found before training (streamed, they are found as validation reads them)
        assert (
            "3 unreadable skipped, 12 read" in printed
            and "0 of train, 3 of val; 16 training images are read" in printed
        )


def test_on_error_fail_names_the_file(tmp_path):
    bad = _folder_with_bad_files(tmp_path / "data")
    config = load_run_config(None, FOLDER + [f"data.path={tmp_path / 'data'}", "data.on_error=fail"])
    with pytest.raises(DataError, match=r"(truncated|empty|notes).*data\.on_error=fail") as caught:
        train(config, tmp_path / "run")
    assert any(str(caught.value).startswith(str(p)) for p in bad)
    assert not step_checkpoints(tmp_path / "run")  # stopped before training


def test_resume_never_unpickles_the_train_state(tmp_path):
    out = tmp_path / "run"
    config = load_run_config(None, TINY + ["train.steps=6"])
    train(config, out, stop_at=2)
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    folder = step_checkpoints(out)[-1]
    torch.save({"optimizer": Exploit()}, folder / "train_state.pt")
    (folder / "checksums.json").unlink()  # past the checksum, straight to the reader
    with pytest.raises(CheckpointError, match=r"train_state\.pt: holds Python objects other than tensors"):
        train(config, out, resume=True)
    assert not marker.exists()


def test_init_from_another_architecture_names_the_file_and_the_settings_that_match_it(tmp_path, vitkit_cmd):
    import vitkit

    other = vitkit.save_pretrained(
        vitkit.create_model("vit_test", depth=1, width=48, num_heads=4, image_size=8, patch_size=2), tmp_path / "other"
    )
    done = vitkit_cmd("train", "--out", tmp_path / "run", *TINY, "train.steps=2", f"model.init={other}")
    assert done.returncode == 2 and "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert f"model.init={other}: its model differs from this run's in patch_size, width" in done.stderr
    assert "model.patch_size=2 model.width=48" in done.stderr and f"vitkit finetune --from {other}" in done.stderr
    assert not (tmp_path / "run").exists()
    config = vitkit.load_pretrained(other).config  # with the settings it names, the run starts from those weights
    matched = vitkit_cmd(
        "train",
        "--out",
        tmp_path / "run",
        *TINY,
        "train.steps=2",
        f"model.init={other}",
        *done.stderr.split("start it with ")[1].split(", or fine-tune")[0].split(),
    )
    assert matched.returncode == 0, matched.stderr
    assert vitkit.load_pretrained(tmp_path / "run").config.width == config.width == 48


def test_init_keeps_a_head_only_for_the_same_classes_matched_by_name(tmp_path, vitkit_cmd):
    """model.init kept the checkpoint's head row by row whenever the class count matched: a head trained on (cat, dog,
    bird) predicted (bird, cat, dog) for data whose sorted folders are in that order, with exit code 0. Its rows now
    follow the class names; a head of other classes is replaced by a new one, and the run says which it did."""
    import vitkit

    torch.manual_seed(0)
    model = vitkit.create_model("vit_test", depth=1, image_size=8, num_classes=10)
    with torch.no_grad():
        model.head.weight.normal_()
        model.head.bias.normal_()
    names = [f"class_{i}" for i in range(10)]  # the synthetic data's classes, in its order
    order = [3, 1, 4, 9, 5, 2, 6, 0, 8, 7]
    shuffled = vitkit.create_model("vit_test", depth=1, image_size=8, num_classes=10)
    shuffled.load_state_dict(model.state_dict())
    with torch.no_grad():
        shuffled.head.weight.copy_(model.head.weight[order])
        shuffled.head.bias.copy_(model.head.bias[order])
    vitkit.save_pretrained(shuffled, tmp_path / "same", extra={"class_names": [names[i] for i in order]})
    vitkit.save_pretrained(model, tmp_path / "other", extra={"class_names": [f"kind_{i}" for i in range(10)]})
    from vitkit.checkpoint import save_checkpoint  # any format a checkpoint is read in (was: vitkit's own only)

    save_checkpoint(
        shuffled, tmp_path / "same.safetensors", "timm", metadata={"class_names": [names[i] for i in order]}
    )
    for init, kept in (("same", True), ("other", False), ("same.safetensors", True)):
        done = vitkit_cmd(
            "train",
            "--out",
            tmp_path / f"run_{init}",
            *TINY,
            "train.steps=1",
            "train.lr=0",
            "train.warmup_steps=0",
            f"model.init={tmp_path / init}",
        )
        assert done.returncode == 0, done.stderr
        head = vitkit.load_pretrained(tmp_path / f"run_{init}").head
        if kept:
            assert "its head scores the same 10 classes (rows put in this data's class order)" in done.stdout
            assert torch.equal(head.weight, model.head.weight) and torch.equal(head.bias, model.head.bias)
        else:
            assert "its head scores classes kind_0, kind_1, kind_2, kind_3, ..., not this data's" in done.stdout
            assert not head.weight.any() and not head.bias.any()


def test_resume_with_another_model_is_refused_and_run_yaml_kept(tmp_path):
    """--resume model.depth=4 trained on the checkpoint's 1-layer model, exit 0, and run.yaml then recorded depth 4."""
    out = tmp_path / "run"
    config = load_run_config(None, TINY + ["train.steps=4"])
    train(config, out, stop_at=2)
    before = (out / "run.yaml").read_text()
    with pytest.raises(ConfigError, match=r"model.depth=1 \(now 2\): .* a resumed run keeps its model"):
        train(resume_config(out, ["model.depth=2"]), out, resume=True)
    # another batch size: named as the key that was changed (it said train.micro_batch, a key the user never set)
    with pytest.raises(
        ConfigError, match=r"^train.batch_size: the run was checkpointed with 16, not 8; .* \(model.init="
    ):
        train(resume_config(out, ["train.batch_size=8"]), out, resume=True)
    assert (out / "run.yaml").read_text() == before
    train(resume_config(out, []), out, resume=True)  # as it was: it goes on
    assert json.loads((out / "summary.json").read_text())["steps"] == 4


def test_a_resume_refuses_a_final_folder_holding_a_users_files_before_training(tmp_path):
    """An export written into RUN/final/ (and the user's notes there) were deleted by the next --resume, which replaces
    final/ as a whole at its end."""
    from vitkit.errors import CheckpointError

    out = tmp_path / "run"
    train(load_run_config(None, TINY + ["train.steps=2"]), out)
    (out / "final" / "NOTES.txt").write_text("mine")
    with pytest.raises(
        CheckpointError,
        match=r"final: holds NOTES.txt, which is not part of a checkpoint, .* move it out of .*final, then resume",
    ):
        train(resume_config(out, ["train.steps=4"]), out, resume=True)
    assert (out / "final" / "NOTES.txt").read_text() == "mine" and json.loads((out / "summary.json").read_text())[
        "steps"
    ] == 2
    (out / "final" / "NOTES.txt").unlink()
    train(resume_config(out, ["train.steps=4"]), out, resume=True)
    assert json.loads((out / "summary.json").read_text())["steps"] == 4


def test_a_signal_while_the_command_starts_is_one_line_and_exit_130(monkeypatch, capsys):
    """Ctrl-C while vitkit imported torch (before any handler of its own) printed a 60-line KeyboardInterrupt traceback,
    exit 1, and SIGTERM then killed it (exit 143) where the docs say 130."""
    from vitkit import cli

    done = subprocess.run(
        [sys.executable, "-c", "import sys, vitkit.cli; print('torch' in sys.modules)"], capture_output=True, text=True
    )
    assert done.stdout.strip() == "False", done.stderr  # torch loads inside the command, where its interrupt is handled
    api = "import vitkit; vitkit.checkpoint.load_with_metadata; vitkit.models.get_config; print(vitkit.create_model('vit_test').config.width)"
    done = subprocess.run(
        [sys.executable, "-c", api], capture_output=True, text=True
    )  # what `import vitkit` gave before stays
    assert done.stdout.strip() == "32", done.stderr
    monkeypatch.setattr(sys, "argv", ["vitkit", "models"])
    monkeypatch.setattr(
        cli, "build_parser", lambda: os.kill(os.getpid(), signal.SIGTERM)
    )  # SIGTERM as the command starts
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        assert cli.main() == 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert capsys.readouterr().err == "vitkit: interrupted\n"


def test_resuming_a_run_that_trained_to_its_end_only_writes_what_is_left(tmp_path, capsys):
    """A run killed after its last checkpoint, before final/ and its figures: the resume said "steps 5-4 of 4" and
    recorded an empty [4, 4] stretch in summary.json's segments."""
    import shutil

    out = tmp_path / "run"
    config = load_run_config(None, TINY + ["train.steps=4"])
    train(config, out)
    shutil.rmtree(out / "final")
    (out / "summary.json").unlink()
    capsys.readouterr()
    train(resume_config(out, []), out, resume=True)
    printed = capsys.readouterr().out
    assert "training   all 4 steps done; writing the final model and figures" in printed and "steps 5-4" not in printed
    assert "estimated" not in printed  # of no step
    summary = json.loads((out / "summary.json").read_text())
    assert [s["steps"] for s in summary["segments"]] == [[0, 4]] and (out / "final").is_dir()
