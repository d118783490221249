"""train.log_to through the real `vitkit train`: each tracker read back with its own reader, a resumed run continued
in each, and a missing package named before any work. Nothing reaches the network: W&B runs offline, MLflow writes
a local file store with its telemetry off."""

import glob
import json
import shutil
import struct
import sys
import threading
from pathlib import Path

import pytest
from test_train_cli import FAST as TRAIN_FAST  # the tiny model and schedule of the train command's tests

from vitkit.train.state import read_metrics

FAST = [*TRAIN_FAST, "data.name=synthetic", "data.synthetic_size=32", "--no-progress"]


def wandb_records(path):
    """The records of a .wandb file: W&B's own protobuf records, in LevelDB log framing (32 KiB blocks of chunks
    with a 7-byte header: checksum, length, type 1 full | 2 first | 3 middle | 4 last), after a 7-byte file header."""
    from wandb.proto import wandb_internal_pb2

    data = open(path, "rb").read()
    assert data[:4] == b":W&B"
    pos, chunks = 7, b""
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if left < 7 or kind == 0:  # a block's padding
            pos += left
            continue
        chunks, pos = chunks + data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunks)
            chunks = b""
            yield record


def wandb_run(path):
    """(run id, config section -> dict, {step: {key: value}}) of one offline run file."""
    run_id, config, history = None, {}, {}
    for record in wandb_records(path):
        if record.WhichOneof("record_type") == "run":
            run_id = record.run.run_id
            config = {item.key: json.loads(item.value_json) for item in record.run.config.update}
        elif record.WhichOneof("record_type") == "history":
            row = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            history[record.history.step.num] = row
    return run_id, config, history


TRACKER_ENV = {
    "WANDB_MODE": "offline",
    "WANDB_SILENT": "true",
    "WANDB_ERROR_REPORTING": "false",
    "MLFLOW_ALLOW_FILE_STORE": "true",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
}


def offline_trackers(tmp_path, monkeypatch):
    """W&B offline and MLflow in a file store, both under tmp_path, for the vitkit processes and the readers here."""
    env = {**TRACKER_ENV, "WANDB_DIR": str(tmp_path), "MLFLOW_TRACKING_URI": f"file:{tmp_path / 'mlruns'}"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(autouse=True)
def _wandb_reads_each_tests_environment():
    """W&B reads its WANDB_* settings once a process, at its first run: after a test that ran W&B in this process,
    its setup is ended, so the next test's WANDB_DIR and WANDB_MODE are read."""
    yield
    if "wandb" in sys.modules and hasattr(sys.modules["wandb"], "teardown"):
        sys.modules["wandb"].teardown()


def wandb_files(tmp_path, run_id: str = "*") -> list[str]:
    """The offline files of W&B runs under tmp_path, in the order the runs began. A run's finish() returns before W&B's
    service has written all of its file (2 of 40 were incomplete then): W&B's teardown waits for it to write them and
    stop (the next run starts another). A run begun in the same second as one of the same id is DIR-1, DIR-2 ..."""
    if "wandb" in sys.modules and hasattr(sys.modules["wandb"], "teardown"):
        sys.modules["wandb"].teardown()

    def begun(path: str) -> tuple[str, int]:
        parts = Path(path).parent.name.split("-")  # offline-run-YYYYMMDD_HHMMSS-ID[-N]
        return parts[2], int(parts[4]) if len(parts) > 4 else 0

    return sorted(glob.glob(str(tmp_path / "wandb" / "offline-run-*" / f"run-{run_id}.wandb")), key=begun)


def wandb_history(tmp_path, run_id):
    """{step: {key: value}} of a W&B run over its offline files (a resumed run adds one), the later file's value last."""
    history = {}
    for path in wandb_files(tmp_path, run_id):
        for step, row in wandb_run(path)[2].items():
            history.setdefault(step, {}).update(row)
    return history


def test_a_run_logs_to_every_tracker_and_a_resumed_run_continues_each_without_a_step_twice(
    tmp_path, vitkit_cmd, monkeypatch
):
    """Killed after logging steps 5-8 past its checkpoint at 4, resumed with train.steps=6 (another schedule, other
    values at 5 and 6): every tracker holds metrics.jsonl's values, one per step. Then resumed once more (a run that
    ended at its checkpoint): the same runs go on."""
    for package in ("tensorboard", "wandb", "mlflow"):
        pytest.importorskip(package)
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    offline_trackers(tmp_path, monkeypatch)
    out = tmp_path / "run"
    every = "train.log_to=[csv,tensorboard,wandb,mlflow]"
    first = vitkit_cmd("train", "--out", out, *FAST, "train.steps=8", "train.log_every=1", every)
    assert first.returncode == 0, first.stderr
    dead, ids = read_metrics(out), json.loads((out / "trackers.json").read_text())
    shutil.rmtree(out / "checkpoints" / "step_0000008")  # as if killed after step 8 was logged, before its checkpoint
    shutil.rmtree(out / "final")
    second = vitkit_cmd("train", "--resume", out, "train.steps=6")
    assert second.returncode == 0, second.stderr
    rows = read_metrics(out)
    loss = {r["step"]: r["loss"] for r in rows if r["kind"] == "train"}
    assert sorted(loss) == [1, 2, 3, 4, 5, 6] and [r["step"] for r in rows if r["kind"] == "val"] == [4, 6]
    dead_loss = {r["step"]: r["loss"] for r in dead if r["kind"] == "train"}
    assert all(dead_loss[s] == loss[s] for s in (1, 2, 3, 4)) and dead_loss[6] != loss[6]  # retrained, other values
    new_ids = json.loads((out / "trackers.json").read_text())
    assert new_ids["wandb"]["id"] != ids["wandb"]["id"] and new_ids["mlflow"]["run_id"] != ids["mlflow"]["run_id"]

    csv_rows = (out / "metrics.csv").read_text().splitlines()
    assert csv_rows[0].startswith("kind,step,epoch,loss") and len(csv_rows) == 1 + len(rows)
    assert [line.split(",")[1] for line in csv_rows[1:]] == [str(r["step"]) for r in rows]

    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [
        (s, pytest.approx(loss[s], rel=1e-6)) for s in sorted(loss)
    ]  # the first run's steps 5 to 8 purged
    assert [e.step for e in events.Scalars("val/top1")] == [4, 6]
    assert "log_to:" in events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    hparams = plugin_data_pb2.HParamsPluginData.FromString(
        events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    ).session_start_info.hparams
    assert hparams["train.lr"].number_value == pytest.approx(1e-3) and hparams["model.name"].string_value == "vit_test"

    client = MlflowClient()
    run = client.get_run(new_ids["mlflow"]["run_id"])
    assert run.info.status == "FINISHED" and run.data.params["train.lr"] == "0.001"
    assert run.data.tags["vitkit.continues"] == ids["mlflow"]["run_id"]
    old = client.get_run(ids["mlflow"]["run_id"])
    assert old.info.status == "KILLED" and old.data.tags["vitkit.replaced_by"] == run.info.run_id
    history = client.get_metric_history(run.info.run_id, "train/loss")
    assert sorted((m.step, m.value) for m in history) == [(s, pytest.approx(loss[s], rel=1e-6)) for s in sorted(loss)]
    assert [m.step for m in client.get_metric_history(run.info.run_id, "val/loss")] == [4, 6]

    (_, config, _), *_ = map(wandb_run, wandb_files(tmp_path))
    assert config["train"]["log_to"] == ["csv", "tensorboard", "wandb", "mlflow"]
    history = wandb_history(tmp_path, new_ids["wandb"]["id"])
    assert {s: row["train/loss"] for s, row in history.items() if "train/loss" in row} == pytest.approx(loss, rel=1e-6)
    assert sorted(s for s, row in history.items() if "val/top1" in row) == [4, 6]

    third = vitkit_cmd("train", "--resume", out, "train.steps=8")  # ended at its checkpoint: nothing past it to replace
    assert third.returncode == 0, third.stderr
    assert json.loads((out / "trackers.json").read_text()) == new_ids  # the same W&B and MLflow runs go on
    loss = {r["step"]: r["loss"] for r in read_metrics(out) if r["kind"] == "train"}
    assert sorted(loss) == list(range(1, 9))
    history = client.get_metric_history(run.info.run_id, "train/loss")
    assert sorted((m.step, m.value) for m in history) == [(s, pytest.approx(loss[s], rel=1e-6)) for s in sorted(loss)]
    history = wandb_history(tmp_path, new_ids["wandb"]["id"])
    assert {s: row["train/loss"] for s, row in history.items() if "train/loss" in row} == pytest.approx(loss, rel=1e-6)


def test_a_tracker_whose_package_is_missing_is_one_line_before_any_work(tmp_path, vitkit_cmd, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if not installed
    out = tmp_path / "run"
    result = vitkit_cmd("train", "--out", out, *FAST, "train.log_to=[csv,mlflow]")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "train.log_to: mlflow needs the mlflow package" in result.stderr and "vitkit[mlflow]" in result.stderr
    assert not out.exists()
    result = vitkit_cmd("train", "--out", out, *FAST, "train.log_to=[csv,comet]")
    assert result.returncode == 2 and "train.log_to: expected one of jsonl, csv, tensorboard" in result.stderr


def test_the_trackers_get_the_figures_and_mlflow_the_model_in_its_own_store_and_one_epoch_count(
    tmp_path, vitkit_cmd, monkeypatch
):
    """Trackers got scalars only; `train.log_to=[mlflow]` with no MLFLOW_TRACKING_URI failed with MLflow's own error
    about sqlite (its default store needs a database driver the extra does not install); the logged train/epoch
    counted the loader's whole batches (3 a step on 40 images in batches of 16) where the plan counts images.
    Now TensorBoard and W&B get the run's figures, MLflow them and final/ in RUN/mlruns, and every count agrees."""
    for package in ("tensorboard", "wandb", "mlflow"):
        pytest.importorskip(package)
    import re

    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    offline_trackers(tmp_path, monkeypatch)
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_ALLOW_FILE_STORE"):  # unset here: vitkit's own default store
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "run"
    fast = [
        *FAST,
        "data.synthetic_size=40",
        "train.steps=6",
        "train.log_to=[csv,tensorboard,wandb,mlflow]",
        "train.figures=true",
    ]
    done = vitkit_cmd("train", "--out", out, *fast)
    assert done.returncode == 0, done.stderr
    planned = float(re.search(r"images \(([\d.]+) epochs\)", done.stdout).group(1))
    assert planned == pytest.approx(6 * 16 / 40, rel=1e-2)  # 2.4, where the loader has made 3 passes of 2 batches
    rows = [r for r in read_metrics(out) if r["kind"] == "train"]
    assert rows[-1]["step"] == 6 and rows[-1]["epoch"] == pytest.approx(planned, rel=1e-2)
    figures = {"loss", "accuracy", "lr", "confusion"}
    assert {p.stem for p in out.glob("*.png")} == figures

    events = EventAccumulator(str(out / "tensorboard"), size_guidance={"images": 0})
    events.Reload()
    assert events.Scalars("train/epoch")[-1].value == pytest.approx(planned, rel=1e-2)
    assert set(events.Tags()["images"]) == {f"figures/{name}" for name in figures}
    assert all(events.Images(f"figures/{name}")[-1].step == 6 for name in figures)

    ids = json.loads((out / "trackers.json").read_text())
    assert ids["mlflow"]["tracking_uri"] == (out / "mlruns").as_uri()  # its own store, in the run directory
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # for the reader here, as the run set it for itself
    client = MlflowClient(tracking_uri=ids["mlflow"]["tracking_uri"])
    run_id = ids["mlflow"]["run_id"]
    assert client.get_metric_history(run_id, "train/epoch")[-1].value == pytest.approx(planned, rel=1e-2)
    listed = {a.path for a in client.list_artifacts(run_id, "figures")} | {
        a.path for a in client.list_artifacts(run_id, "model")
    }
    assert {f"figures/{name}.png" for name in figures} | {"model/config.json", "model/model.safetensors"} <= listed
    assert client.get_run(run_id).info.status == "FINISHED"

    (wandb_file,) = wandb_files(tmp_path)
    _, _, history = wandb_run(wandb_file)
    assert history[6]["train/epoch"] == pytest.approx(planned, rel=1e-2)
    logged = {
        "/".join(key.split("/")[:2]) for key in history[6] if key.startswith("figures/")
    }  # nested: figures/loss/...
    assert logged == {f"figures/{name}" for name in figures} and history[6]["figures/loss/_type"] == "image-file"
    media = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "files" / "media" / "images" / "figures" / "*.png"))
    assert len(media) == len(figures)


@pytest.mark.parametrize("package", ["wandb", "mlflow"])
def test_a_tracker_package_that_fails_to_import_is_one_line_before_any_work(tmp_path, vitkit_cmd, monkeypatch, package):
    """Installed, so found, but broken: its import raises (here an AttributeError, as a mismatched dependency does)."""
    broken = tmp_path / "site" / package
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise AttributeError(\"module 'pydantic' has no attribute 'v1'\")\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
        monkeypatch.delitem(sys.modules, name)  # the real one, where another test imported it: put back after
    out = tmp_path / "run"
    result = vitkit_cmd("train", "--out", out, *FAST, f"train.log_to=[csv,{package}]")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert (
        f"train.log_to: {package}: the {package} package is installed but fails to import (module 'pydantic' has no "
        f"attribute 'v1'); reinstall it (pip install --force-reinstall 'vitkit[{package}]')" in result.stderr
    )
    assert not out.exists()


def test_a_tracker_setting_its_package_refuses_is_one_line_naming_the_variable(tmp_path, run_cli, monkeypatch):
    """In a process of its own: W&B reads its settings from the environment once a process, so an earlier test's
    run in this one would hide the typo."""
    pytest.importorskip("wandb")
    offline_trackers(tmp_path, monkeypatch)
    monkeypatch.setenv("WANDB_MODE", "ofline")  # a typo: W&B's settings refuse it when a run starts
    result = run_cli("train", "--out", tmp_path / "run", *FAST, "train.steps=1", "train.log_to=[wandb]")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "vitkit train: error: train.log_to: wandb: WANDB_MODE='ofline': Input should be 'online', 'offline'" in (
        result.stderr
    )
    assert "fix or unset WANDB_MODE" in result.stderr


def test_a_full_disk_under_tensorboard_names_the_file_and_keeps_what_was_written(tmp_path, vitkit_cmd, monkeypatch):
    """TensorBoard's event records are written through its RecordWriter: the 13th write (the second log line's
    third scalar, after the file's header, hparams and config) finds the disk full."""
    pytest.importorskip("tensorboard")
    import errno

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.summary.writer import record_writer

    real, writes = record_writer.RecordWriter.write, []

    def write(self, data):
        writes.append(len(data))
        if len(writes) > 12:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, data)

    monkeypatch.setattr(record_writer.RecordWriter, "write", write)
    thread_errors = []  # what a writer thread's failure would print as a traceback
    monkeypatch.setattr(threading, "excepthook", thread_errors.append)
    out = tmp_path / "run"
    result = vitkit_cmd("train", "--out", out, *FAST, "train.log_every=1", "train.log_to=[csv,tensorboard]")
    assert result.returncode == 2 and "Traceback" not in result.stderr and not thread_errors, result.stderr
    lines = result.stderr.strip().splitlines()
    events = sorted((out / "tensorboard").glob("events.out.tfevents.*"))
    assert len(lines) == 1 and len(events) == 1
    assert lines[0].startswith(f"vitkit train: error: {events[0]}: No space left on device; free some space")
    loss = {r["step"]: r["loss"] for r in read_metrics(out)}
    assert sorted(loss) == [1, 2]  # metrics.jsonl and the csv go first: both hold the line TensorBoard failed on
    assert [line.split(",")[1] for line in (out / "metrics.csv").read_text().splitlines()[1:]] == ["1", "2"]
    accumulator = EventAccumulator(str(out / "tensorboard"))
    accumulator.Reload()
    kept = {e.step: e.value for e in accumulator.Scalars("train/loss")}  # step 2's first scalars went in whole
    assert 1 in kept and set(kept) <= {1, 2} and kept == pytest.approx({s: loss[s] for s in kept}, rel=1e-6)
