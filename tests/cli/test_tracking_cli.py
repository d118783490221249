"""train.log_to through the real `vitkit train`: each tracker read back with its own reader, a resumed run continued
in each, and a missing package named before any work. Nothing reaches the network: W&B runs offline, MLflow writes
a local file store with its telemetry off."""

import glob
import json
import shutil
import struct
import sys

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


def test_a_run_logs_to_every_tracker_and_a_resumed_run_continues_each_without_a_step_twice(
    tmp_path, run_cli, monkeypatch
):
    for package in ("tensorboard", "wandb", "mlflow"):
        pytest.importorskip(package)
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    env = {
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_DIR": str(tmp_path),
        "WANDB_ERROR_REPORTING": "false",
        "MLFLOW_TRACKING_URI": f"file:{tmp_path / 'mlruns'}",
        "MLFLOW_ALLOW_FILE_STORE": "true",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "DO_NOT_TRACK": "true",
    }
    for name, value in env.items():  # for the vitkit processes and for the readers here alike
        monkeypatch.setenv(name, value)
    out = tmp_path / "run"
    first = run_cli("train", "--out", out, *FAST, "train.steps=6", "train.log_to=[csv,tensorboard,wandb,mlflow]")
    assert first.returncode == 0, first.stderr
    ids = json.loads((out / "trackers.json").read_text())
    # killed after step 6 was logged, before its checkpoint: the resumed run trains and logs step 6 again
    shutil.rmtree(out / "checkpoints" / "step_0000006")
    shutil.rmtree(out / "final")
    second = run_cli("train", "--resume", out)
    assert second.returncode == 0, second.stderr
    assert json.loads((out / "trackers.json").read_text()) == ids  # the same W&B and MLflow runs
    rows = read_metrics(out)
    loss = {r["step"]: r["loss"] for r in rows if r["kind"] == "train"}
    assert sorted(loss) == [2, 4, 6] and [r["step"] for r in rows if r["kind"] == "val"] == [4, 6]

    csv_rows = (out / "metrics.csv").read_text().splitlines()
    assert csv_rows[0].startswith("kind,step,epoch,loss") and len(csv_rows) == 1 + len(rows)
    assert [line.split(",")[1] for line in csv_rows[1:]] == [str(r["step"]) for r in rows]

    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [
        (s, pytest.approx(loss[s], rel=1e-6)) for s in (2, 4, 6)
    ]  # the first run's step 6 purged
    assert [e.step for e in events.Scalars("val/top1")] == [4, 6]
    assert "log_to:" in events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    hparams = plugin_data_pb2.HParamsPluginData.FromString(
        events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    ).session_start_info.hparams
    assert hparams["train.lr"].number_value == pytest.approx(1e-3) and hparams["model.name"].string_value == "vit_test"

    client = MlflowClient()
    run = client.get_run(ids["mlflow"]["run_id"])
    assert run.info.status == "FINISHED" and run.data.params["train.lr"] == "0.001"
    assert len(client.search_runs([run.info.experiment_id])) == 1
    history = client.get_metric_history(run.info.run_id, "train/loss")
    assert sorted((m.step, m.value) for m in history) == [(s, pytest.approx(loss[s], rel=1e-6)) for s in (2, 4, 6)]
    assert [m.step for m in client.get_metric_history(run.info.run_id, "val/loss")] == [4, 6]

    files = sorted(glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "run-*.wandb")))
    (id_1, config, history_1), (id_2, _, history_2) = map(wandb_run, files)
    assert id_1 == id_2 == ids["wandb"]["id"] and config["train"]["log_to"] == ["csv", "tensorboard", "wandb", "mlflow"]
    assert sorted(history_1) == [2, 4, 6] and sorted(history_2) == [6]  # the resumed run continues after step 4
    assert history_1[2]["train/loss"] == pytest.approx(loss[2], rel=1e-6) and "val/top1" in history_1[4]


def test_a_tracker_whose_package_is_missing_is_one_line_before_any_work(tmp_path, vitkit_cmd, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if not installed
    out = tmp_path / "run"
    result = vitkit_cmd("train", "--out", out, *FAST, "train.log_to=[csv,mlflow]")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "train.log_to: mlflow needs the mlflow package" in result.stderr and "vitkit[mlflow]" in result.stderr
    assert not out.exists()
    result = vitkit_cmd("train", "--out", out, *FAST, "train.log_to=[csv,comet]")
    assert result.returncode == 2 and "train.log_to: expected one of jsonl, csv, tensorboard" in result.stderr
