"""Where a run's scalars go: metrics.jsonl always, and the trackers train.log_to adds.

    vitkit train --out RUN train.log_to=[csv,tensorboard,wandb,mlflow]

Every tracker gets the same scalars at the same steps: train/loss, train/lr, train/grad_norm, train/img_s and
train/epoch at each log line, val/top1, val/top5 and val/loss at each validation, and the run config once, when
the tracker first sees the run. At the end, the run's figures (loss, accuracy, learning rate, confusion matrix) go to
TensorBoard (images), W&B (media) and MLflow (artifacts under figures/, with the final model under model/). MLflow
with no MLFLOW_TRACKING_URI writes a file store in the run directory, RUN/mlruns. A resumed run continues the same run in each: metrics.csv is rebuilt from
metrics.jsonl (already cut back to the checkpoint's step), TensorBoard's events after that step are purged, and
the W&B and MLflow runs are found again by the ids kept in RUN/trackers.json. Only rank 0 logs.

tensorboard, wandb and mlflow are optional extras (`pip install 'vitkit[wandb]'`), imported here only when asked for.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from vitkit.errors import ConfigError, first_line
from vitkit.files import atomic_path, naming, read_json, write_json
from vitkit.train.config import RunConfig, dump_run_config
from vitkit.train.state import read_metrics

PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}  # tracker: module (and its extra)
IDS = "trackers.json"  # the W&B and MLflow runs a resumed run continues
CSV_COLUMNS = ("kind", "step", "epoch", "loss", "lr", "grad_norm", "img_s", "val_top1", "val_top5", "val_loss")


def check_installed(log_to: tuple[str, ...]) -> None:
    """Each tracker of train.log_to can be imported: else one line naming the extra to install, before any work."""
    for name in log_to:
        module = PACKAGES.get(name)
        if module and importlib.util.find_spec(module) is None:
            raise ConfigError(
                f"train.log_to: {name} needs the {module} package, which is not installed; "
                f"pip install 'vitkit[{name}]', or leave {name} out of train.log_to"
            )


def scalars(row: dict) -> dict[str, float]:
    """A metrics.jsonl row as tracker scalars: {"train/loss": ...} or {"val/top1": ...}."""
    kind = row["kind"]
    return {
        f"{kind}/{key.removeprefix(kind + '_')}": float(value)
        for key, value in row.items()
        if key not in ("kind", "step") and isinstance(value, (int, float)) and not isinstance(value, bool)
    }


def flat_config(config: dict) -> dict[str, Any]:
    """The run config as section.key: value, lists and None as text (what hparams and params take)."""
    return {
        f"{section}.{key}": value if isinstance(value, (int, float, str, bool)) else json.dumps(value)
        for section, values in config.items()
        for key, value in values.items()
    }


class RunLog:
    """metrics.jsonl and the trackers of train.log_to: `write(row)` gives one metrics row to each."""

    def __init__(self, path: str, trackers: list) -> None:
        self.file, self.trackers = open(path, "a"), trackers

    def write(self, row: dict) -> None:
        with naming(self.file.name):  # a full disk: the message names metrics.jsonl
            self.file.write(json.dumps(row) + "\n")
            self.file.flush()
        for tracker in self.trackers:
            tracker.log(row)

    def artifacts(self, figures: list[Path], model: Path, step: int) -> None:
        """The run's figures (PNG files) and its final model folder, at the last step, to each tracker that keeps them."""
        for tracker in self.trackers:
            tracker.artifacts(figures, model, step)

    def close(self, failed: bool = False) -> None:
        self.file.close()
        for tracker in self.trackers:
            tracker.close(failed)


def open_log(config: RunConfig, out: Path, step: int, main: bool) -> RunLog:
    """The run's log from `step` on (0: a new run): on rank 0 metrics.jsonl and each tracker; elsewhere nothing."""
    if not main:
        return RunLog(os.devnull, [])
    ids = read_json(out / IDS, damaged="delete it to start new W&B and MLflow runs") if (out / IDS).is_file() else {}
    if not isinstance(ids, dict):
        raise ConfigError(f"{out / IDS}: not a mapping of tracker run ids; delete it to start new W&B and MLflow runs")
    before = json.dumps(ids, sort_keys=True)
    trackers: list = []
    try:
        for name in dict.fromkeys(config.train.log_to):
            if name != "jsonl":
                trackers.append(OPENERS[name](out, config, step, ids))
    except BaseException:
        for tracker in trackers:
            tracker.close(failed=True)
        raise
    if json.dumps(ids, sort_keys=True) != before:
        write_json(out / IDS, ids)
    return RunLog(str(out / "metrics.jsonl"), trackers)


def forget(out: Path) -> None:
    """A new run in a folder whose run stopped before its first checkpoint: its trackers' runs are not continued."""
    (out / IDS).unlink(missing_ok=True)
    shutil.rmtree(out / "tensorboard", ignore_errors=True)


class CsvLog:
    """RUN/metrics.csv: the rows of metrics.jsonl as a table, one column a key (rewritten when a new key comes)."""

    def __init__(self, out: Path, config: RunConfig, step: int, ids: dict) -> None:
        self.out, self.path = out, out / "metrics.csv"
        self._rewrite()  # from metrics.jsonl, already cut back to the resumed step: no step twice

    def _rewrite(self) -> None:
        rows = read_metrics(self.out)
        self.columns = list(dict.fromkeys([*CSV_COLUMNS, *(key for row in rows for key in row)]))
        with atomic_path(self.path) as tmp, open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, self.columns)
            writer.writeheader()
            writer.writerows(rows)

    def log(self, row: dict) -> None:
        if not row.keys() <= set(self.columns):  # metrics.jsonl already holds this row
            return self._rewrite()
        with naming(self.path), open(self.path, "a", newline="") as f:
            csv.DictWriter(f, self.columns).writerow(row)

    def artifacts(self, figures: list[Path], model: Path, step: int) -> None:
        pass  # the figures are beside metrics.csv already

    def close(self, failed: bool) -> None:
        pass


class TensorBoardLog:
    """RUN/tensorboard: event files; a resumed run purges the events written after its checkpoint's step."""

    def __init__(self, out: Path, config: RunConfig, step: int, ids: dict) -> None:
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams

        folder = out / "tensorboard"
        new = not folder.exists()
        self.writer = SummaryWriter(str(folder), purge_step=step + 1 if step else None)
        if new:  # the config once: as hparams (the HPARAMS tab) and as run.yaml's text
            for summary in hparams(flat_config(config.to_dict()), {}):
                self.writer.file_writer.add_summary(summary)
            self.writer.add_text("config", "```\n" + dump_run_config(config) + "```", 0)

    def log(self, row: dict) -> None:
        for tag, value in scalars(row).items():
            self.writer.add_scalar(tag, value, row["step"])
        self.writer.flush()

    def artifacts(self, figures: list[Path], model: Path, step: int) -> None:
        import numpy as np
        from PIL import Image

        for figure in figures:  # the IMAGES tab: figures/loss, figures/confusion, ...
            with Image.open(figure) as image:
                pixels = np.asarray(image.convert("RGB"))
            self.writer.add_image(f"figures/{figure.stem}", pixels, step, dataformats="HWC")
        self.writer.flush()

    def close(self, failed: bool) -> None:
        self.writer.close()


class WandbLog:
    """A Weights & Biases run named after the run folder, project $WANDB_PROJECT or vitkit; its files in RUN/wandb
    unless $WANDB_DIR says; WANDB_MODE=offline keeps it on this machine (`wandb sync` later)."""

    def __init__(self, out: Path, config: RunConfig, step: int, ids: dict) -> None:
        import wandb

        known = ids.get("wandb", {})
        project = known.get("project") or os.environ.get("WANDB_PROJECT") or "vitkit"
        try:
            self.run = wandb.init(
                project=project,
                id=known.get("id"),  # None: a new run, its id chosen by wandb
                name=out.name,
                resume="allow",  # the same id continues the same run
                config=config.to_dict(),
                dir=None if os.environ.get("WANDB_DIR") else str(out),
            )
        except wandb.Error as err:
            raise ConfigError(
                f"train.log_to: wandb: {first_line(err)}; log in (wandb login), or set WANDB_MODE=offline "
                "to keep the run on this machine"
            ) from None
        ids["wandb"] = {"id": self.run.id, "project": project}

    def log(self, row: dict) -> None:
        self.run.log(scalars(row), step=row["step"])

    def artifacts(self, figures: list[Path], model: Path, step: int) -> None:
        import wandb

        self.run.log({f"figures/{figure.stem}": wandb.Image(str(figure)) for figure in figures}, step=step)

    def close(self, failed: bool) -> None:
        self.run.finish(exit_code=1 if failed else 0)


class MlflowLog:
    """An MLflow run named after the run folder, in experiment $MLFLOW_EXPERIMENT_NAME or vitkit, at
    $MLFLOW_TRACKING_URI (a resumed run: where it began); the config as params."""

    def __init__(self, out: Path, config: RunConfig, step: int, ids: dict) -> None:
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        known = ids.get("mlflow", {})
        uri = known.get("tracking_uri") or (None if os.environ.get("MLFLOW_TRACKING_URI") else own_store(out))
        if uri == own_store(out):  # MLflow keeps its file store behind this switch (a database needs the full mlflow)
            os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
        try:
            self.client = MlflowClient(tracking_uri=uri)
            self.run_id, self.last = known.get("run_id"), 0
            if self.run_id:
                self.last = self._last_step()  # steps logged after the checkpoint (a killed run) are not sent twice
                self.client.update_run(self.run_id, status="RUNNING")
            else:
                self.run_id = self._create(out.name, flat_config(config.to_dict()))
        except MlflowException as err:
            advice = (
                f"is its store at {known.get('tracking_uri')} still there? (delete {out / IDS} to start new runs)"
                if known
                else "set MLFLOW_TRACKING_URI to a tracking server (http://HOST:5000) or a store of yours"
            )
            raise ConfigError(f"train.log_to: mlflow: {first_line(err)}; {advice}") from None
        ids["mlflow"] = {"run_id": self.run_id, "tracking_uri": self.client.tracking_uri}

    def _create(self, name: str, params: dict) -> str:
        from mlflow.entities import Param

        experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME") or "vitkit"
        found = self.client.get_experiment_by_name(experiment)
        run = self.client.create_run(
            found.experiment_id if found else self.client.create_experiment(experiment), run_name=name
        )
        items = [Param(key, str(value)) for key, value in params.items()]
        for start in range(0, len(items), 100):  # a batch holds at most 100 params
            self.client.log_batch(run.info.run_id, params=items[start : start + 100])
        return run.info.run_id

    def _last_step(self) -> int:
        keys = self.client.get_run(self.run_id).data.metrics
        return max((m.step for key in keys for m in self.client.get_metric_history(self.run_id, key)), default=0)

    def log(self, row: dict) -> None:
        from mlflow.entities import Metric

        if row["step"] <= self.last:
            return
        now = int(time.time() * 1000)
        metrics = [Metric(key, value, now, row["step"]) for key, value in scalars(row).items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def artifacts(self, figures: list[Path], model: Path, step: int) -> None:
        for figure in figures:
            self.client.log_artifact(self.run_id, str(figure), "figures")
        self.client.log_artifacts(self.run_id, str(model), "model")  # final/: config.json and the weights

    def close(self, failed: bool) -> None:
        self.client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")


def own_store(out: Path) -> str:
    """The MLflow store of a run with no MLFLOW_TRACKING_URI: a file store in RUN/mlruns (`mlflow ui
    --backend-store-uri RUN/mlruns` shows it). MLflow's own default, sqlite:///mlflow.db in the working directory,
    needs a database driver that the mlflow extra (mlflow-skinny) does not install."""
    return (Path(os.path.abspath(out)) / "mlruns").as_uri()


OPENERS = {"csv": CsvLog, "tensorboard": TensorBoardLog, "wandb": WandbLog, "mlflow": MlflowLog}
