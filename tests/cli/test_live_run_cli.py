"""Commands reading a run while it trains: the step checkpoint a reader resolved is pinned, so the trainer's rotation
(train.keep_checkpoints) cannot delete it between the reader's config.json and its weights. The trainer's save runs
in the middle of the reader's read, at a fixed point (no timing): the real save_checkpoint, with keep=1."""

import numpy as np
import pytest
import torch
from PIL import Image

import vitkit
from vitkit.checkpoint import native
from vitkit.train.state import save_checkpoint

NAMES = ["ant", "bee"]


def _save(run, model, step):
    """What a training run's step checkpoint holds for a reader; older ones rotated away (keep=1)."""
    state = {"step": step, "elapsed_s": 0.0}
    return save_checkpoint(run, model, extra={"class_names": NAMES}, state=state, tensors={}, keep=1)


@pytest.fixture
def live_run(tmp_path):
    model = vitkit.create_model("vit_test", depth=1, image_size=8, num_classes=2)
    torch.nn.init.normal_(model.head.weight)  # a trained head: a new one is all zeros, and refused
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.yaml").write_text("model:\n  name: vit_test\n")
    _save(run, model, 1)
    image = tmp_path / "x.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(image)
    return run, model, image


@pytest.mark.parametrize("command", ["predict", "convert", "info"])
def test_a_checkpoint_rotated_away_mid_read_is_still_read_whole(live_run, tmp_path, vitkit_cmd, monkeypatch, command):
    run, model, image = live_run
    read, real = [], native.verify_checksums

    def trainer_saves_meanwhile(directory, **kwargs):  # the reader has resolved step 1 and read nothing of it yet
        if not read:
            _save(run, model, 2)  # rotates step 1 away, unless the reader's pin keeps it
            read.append((directory.name, directory.is_dir()))
        return real(directory, **kwargs)

    monkeypatch.setattr(native, "verify_checksums", trainer_saves_meanwhile)
    args = {"predict": [image], "convert": [tmp_path / "copy"], "info": []}[command]
    done = vitkit_cmd(command, run, *args)
    assert done.returncode == 0, done.stderr
    assert read == [("step_0000001", True)]  # still in place when the reader went on
    steps = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert steps == ["step_0000001", "step_0000002"]  # the pinned one outlived its rotation
    if command == "predict":
        assert "ant" in done.stdout and "bee" in done.stdout
    _save(run, model, 3)  # the command has ended and let its pin go: the next save removes it
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_0000003"]


def test_a_command_reads_one_checkpoint_of_a_live_run_however_often_it_resolves_it(live_run, vitkit_cmd, monkeypatch):
    """info reads the weights and then the metadata: a checkpoint saved between the two is not the one it describes."""
    run, model, _ = live_run
    from vitkit.checkpoint import runs

    resolved, real = [], runs.locate

    def locate(path):
        found = real(path)
        resolved.append(found[0].name)
        if len(resolved) == 1:
            _save(run, model, 2)  # between the two reads
        return found

    monkeypatch.setattr(runs, "locate", locate)
    done = vitkit_cmd("info", run)
    assert done.returncode == 0, done.stderr
    assert len(resolved) >= 2 and set(resolved) == {"step_0000001"}
