"""Data parallelism through torchrun with real processes (gloo on CPU): the same global batch gives the same losses."""

import importlib.util
import json

import pytest
import torch
from torchrun_runs import COMMON, EMA, vitkit_train

from vitkit.checkpoint import load_pretrained
from vitkit.train import train
from vitkit.train.config import load_run_config


def train_losses(run) -> dict[int, float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if r["kind"] == "train"}


def val_losses(run) -> dict[int, float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["val_loss"] for r in rows if r["kind"] == "val"}


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """One plain process (this one: the reference, not what is tested), 6 steps, keeping an EMA: final/ holds the
    average, checkpoints/step_0000006 the live weights."""
    out = tmp_path_factory.mktemp("dist") / "single"
    train(load_run_config(None, ["train.steps=6", *COMMON, *EMA]), out)
    return out


def test_two_ddp_processes_match_one_process(single, tmp_path):
    """Two FSDP processes are held to one process by the resume test below and to DDP by the masked-patch test."""
    out = tmp_path / "ddp"
    logs = ["train.log_to=[csv,tensorboard]"] if importlib.util.find_spec("tensorboard") else []
    done = vitkit_train("--out", str(out), "train.steps=6", "train.strategy=ddp", *COMMON, *logs, nproc=2)
    assert "on cpu, 2 processes x 1 thread" in done.stdout  # the plan said "on cpu, 1 thread"
    one, two = train_losses(single), train_losses(out)
    assert list(two) == [1, 2, 3, 4, 5, 6] and len(set(one.values())) > 1
    if logs:  # rank 0 alone logs: one row a line of metrics.jsonl, one TensorBoard event file
        csv_steps = [line.split(",")[1] for line in (out / "metrics.csv").read_text().splitlines()[1:]]
        assert csv_steps == ["1", "2", "3", "4", "5", "6", "6"]
        assert len(list((out / "tensorboard").iterdir())) == 1
    for step in one:
        assert two[step] == pytest.approx(one[step], abs=1e-5), step
    # compare what the models compute: the key bias has a zero true gradient (softmax ignores it), so Adam
    # turns float noise there into different but irrelevant weights
    a, b = (
        load_pretrained(single / "checkpoints" / "step_0000006"),
        load_pretrained(out / "final"),
    )  # both the live weights
    x = torch.randn(4, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(b(x), a(x), atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(b.forward_features(x), a.forward_features(x), atol=1e-4, rtol=1e-4)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["processes"] == 2


def test_fsdp_resumes_on_another_world_size_with_its_ema_weights(single, fsdp_run):
    """2 FSDP ranks stopped at step 3 (fsdp_run), resumed by 1 (the strategy from the run's own run.yaml), train as one
    process straight through; the EMA is averaged shard by shard, saved with the shards, resharded on resume, gathered
    at the end."""
    sharded = fsdp_run
    assert (sharded / "checkpoints" / "step_0000003" / "sharded").is_dir()
    vitkit_train("--resume", str(sharded), "train.steps=6", nproc=1)  # no strategy given: it comes from run.yaml
    one, resumed = train_losses(single), train_losses(sharded)
    assert list(resumed) == [1, 2, 3, 4, 5, 6] and len(set(one.values())) > 1
    for step in one:
        assert resumed[step] == pytest.approx(one[step], abs=1e-5), step
    a, b = load_pretrained(single / "final"), load_pretrained(sharded / "final")  # the EMA weights
    x = torch.randn(4, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(b.forward_features(x), a.forward_features(x), atol=1e-4, rtol=1e-4)
        last = load_pretrained(sharded / "checkpoints" / "step_0000006")  # the live weights: not the average
        assert (last.forward_features(x) - a.forward_features(x)).abs().max() > 1e-3
    vals, want = val_losses(sharded), val_losses(single)
    assert list(vals) == list(want) == [3, 6]
    for step in want:
        assert vals[step] == pytest.approx(want[step], abs=1e-4), step


def test_fsdp_without_torchrun_is_a_clear_error(vitkit_cmd, tmp_path):
    result = vitkit_cmd("train", "--out", tmp_path / "x", "train.steps=1", "train.strategy=fsdp", *COMMON)
    assert result.returncode == 2 and "start the run with torchrun" in result.stderr
    assert "Traceback" not in result.stderr


def test_masked_patch_pretraining_under_ddp_and_fsdp(tmp_path):
    """The same 2 ranks draw the same corruptions, so DDP and FSDP (stopped at step 3, resumed) see the same losses."""
    ddp, fsdp = tmp_path / "ddp", tmp_path / "fsdp"
    vitkit_train("--out", str(ddp), "train.steps=6", "train.objective=masked_patch", *COMMON, nproc=2)
    vitkit_train(
        "--out", str(fsdp), "train.steps=3", "train.objective=masked_patch", "train.strategy=fsdp", *COMMON, nproc=2
    )
    vitkit_train("--resume", str(fsdp), "train.steps=6", nproc=2)
    want, got = train_losses(ddp), train_losses(fsdp)
    assert (fsdp / "checkpoints" / "step_0000006" / "sharded").is_dir()
    assert list(got) == [1, 2, 3, 4, 5, 6] and len(set(want.values())) > 1
    for step in want:
        assert got[step] == pytest.approx(want[step], abs=1e-5), step
    a, b = load_pretrained(ddp / "final"), load_pretrained(fsdp / "final")  # plain ViTs, the prediction head dropped
    assert type(b).__name__ == "VisionTransformer"
    x = torch.randn(4, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(b.forward_features(x), a.forward_features(x), atol=1e-4, rtol=1e-4)
    # on one process: the plan's time estimate called the sharded ViT outside its objective's wrapper (a DTensor traceback)
    vitkit_train("--resume", str(fsdp), "train.steps=7", nproc=1)
    assert list(train_losses(fsdp)) == [1, 2, 3, 4, 5, 6, 7]


def test_every_rank_s_bad_files_reach_bad_files_json(tmp_path):
    """Streamed files are split across the ranks, so each rank finds its own bad ones; rank 0 lists them all."""
    from PIL import Image

    rng = torch.Generator().manual_seed(0)
    root = tmp_path / "data"
    for c, name in enumerate(("a", "b")):
        (root / name).mkdir(parents=True)
        for i in range(16):
            pixels = (torch.randint(0, 60, (8, 8, 3), generator=rng) + 150 * c).to(torch.uint8).numpy()
            Image.fromarray(pixels).save(root / name / f"{i}.png")
        for i in range(4):
            (root / name / f"bad{i}.png").write_bytes(b"not a png")
    folder = [
        f"data.path={root}",
        "data.memory_mb=0.0001",
        "data.workers=0",
        "data.val_fraction=0.25",
        "data.val_split=val",
        "data.on_error=skip",
        "model.name=vit_test",
        "model.depth=1",
        "model.image_size=8",
        "train.batch_size=8",
        "train.steps=6",
        "train.eval_every=6",
        "train.checkpoint_every=3",
        "augment.crop=none",
        "train.progress=false",
        "train.figures=false",
        "train.threads=1",
        "train.device=cpu",
    ]
    listed = {}
    for nproc in (0, 2):
        out = tmp_path / f"run{nproc}"
        if nproc:
            vitkit_train("--out", str(out), *folder, nproc=nproc)
        else:  # one plain process: this one
            train(load_run_config(None, folder), out)
        rows = json.loads((out / "bad_files.json").read_text())
        listed[nproc] = {row["path"] for row in rows["files"]}
        assert rows["count"] == len(listed[nproc]) == json.loads((out / "summary.json").read_text())["bad_files"]
    assert len(listed[0]) >= 4 and listed[2] == listed[0]  # one process saw every bad file; two processes list the same
