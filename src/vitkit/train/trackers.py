"""Where a run's scalars go: metrics.jsonl always, and the trackers train.log_to adds.

    vitkit train --out RUN train.log_to=[csv,tensorboard,wandb,mlflow]

Every tracker gets the same scalars at the same steps: train/loss, train/lr, train/grad_norm, train/img_s and
train/epoch at each log line, val/top1, val/top5 and val/loss at each validation, and the run config once, when
the tracker first sees the run. At the end, the run's figures (loss, accuracy, learning rate, confusion matrix) go to
TensorBoard (images), W&B (media) and MLflow (artifacts under figures/, with the final model under model/). MLflow
with no MLFLOW_TRACKING_URI writes a file store in the run directory, RUN/mlruns. A resumed run continues the same run in each: metrics.csv is rebuilt from
metrics.jsonl (already cut back to the checkpoint's step), TensorBoard's events after that step are purged, and
the W&B and MLflow runs are found again by the ids kept in RUN/trackers.json. Those two keep every value they were
sent, so where the run that stopped had logged steps after its checkpoint (a kill), the resumed run trains them again
in a new W&B and a new MLflow run that begins with metrics.jsonl's rows up to the checkpoint: each tracker's run then
holds exactly metrics.jsonl's values, one per step (the old MLflow run is tagged with the new one's id). Only rank 0
logs.

tensorboard, wandb and mlflow are optional extras (`pip install 'vitkit[wandb]'`), imported here only when asked for;
a package that fails to import or to start a run is one line naming it (or the variable that set it up wrong).
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import json
import os
import shutil
import socket
import time
from functools import partial
from pathlib import Path
from typing import Any

from vitkit.errors import ConfigError, first_line
from vitkit.files import atomic_path, naming, read_json, write_json
from vitkit.train.config import RunConfig, dump_run_config
from vitkit.train.state import read_metrics, truncate_metrics

PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}  # tracker: package (and its extra)
IMPORTS = {  # what each tracker imports of its package
    "tensorboard": ("tensorboard.compat.proto.event_pb2", "tensorboard.summary.writer.record_writer"),
    "wandb": ("wandb",),
    "mlflow": ("mlflow.entities", "mlflow.exceptions", "mlflow.tracking"),
}
IDS = "trackers.json"  # the W&B and MLflow runs a resumed run continues
REPLACE = "replace"  # in trackers.json: the run holds values of steps the resumed run trains again (see cut_back)
CSV_COLUMNS = ("kind", "step", "epoch", "loss", "lr", "grad_norm", "img_s", "val_top1", "val_top5", "val_loss")


def check_installed(log_to: tuple[str, ...]) -> None:
    """Each tracker of train.log_to imports: else one line naming the package (missing, or installed but broken: its
    import raises), before any work."""
    for name in log_to:
        package = PACKAGES.get(name)
        if package is None:
            continue
        try:
            missing = importlib.util.find_spec(package) is None
        except Exception:  # a parent or a stale entry in sys.modules: found, and broken
            missing = False
        if missing:
            raise ConfigError(
                f"train.log_to: {name} needs the {package} package, which is not installed; "
                f"pip install 'vitkit[{name}]', or leave {name} out of train.log_to"
            )
        for module in IMPORTS[name]:
            try:
                importlib.import_module(module)
            except Exception as err:  # whatever a broken install raises: ImportError, AttributeError, SyntaxError...
                raise ConfigError(
                    f"train.log_to: {name}: the {package} package is installed but fails to import ({first_line(err)}); "
                    f"reinstall it (pip install --force-reinstall 'vitkit[{name}]'), or leave {name} out of "
                    "train.log_to"
                ) from None


def _cannot_start(name: str, err: Exception, prefix: str, advice: str) -> ConfigError:
    """One line for a tracker that fails to start a run: the environment variable that set it up wrong where the error
    names a setting one of them sets (W&B's settings are checked by pydantic: `loc` names the field), else its error."""
    problems = err.errors() if callable(getattr(err, "errors", None)) else []
    for problem in problems if isinstance(problems, list) else []:
        field = str((problem.get("loc") or [""])[0]) if isinstance(problem, dict) else ""
        variable = f"{prefix}{field.upper()}"
        if field and variable in os.environ:
            return ConfigError(
                f"train.log_to: {name}: {variable}={os.environ[variable]!r}: {problem.get('msg')}; fix or unset "
                f"{variable}"
            )
    set_here = sorted(v for v in os.environ if v.startswith(prefix))
    where = f" (set here: {', '.join(set_here)})" if set_here else ""
    return ConfigError(f"train.log_to: {name}: cannot start a run: {first_line(err)}{where}; {advice}")


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
        """Close metrics.jsonl and every tracker. Where the run failed already (a full disk), an error closing one is the
        same fault again and does not hide the first; else the first is raised once all are closed."""
        errors = []
        for close in (self._close_file, *(partial(tracker.close, failed) for tracker in self.trackers)):
            try:
                close()
            except Exception as err:
                errors.append(err)
        if errors and not failed:
            raise errors[0]

    def _close_file(self) -> None:
        with naming(self.file.name):  # what a full disk kept in its buffer is written now
            self.file.close()


def open_log(config: RunConfig, out: Path, step: int, main: bool) -> RunLog:
    """The run's log from `step` on (0: a new run): on rank 0 metrics.jsonl and each tracker; elsewhere nothing."""
    if not main:
        return RunLog(os.devnull, [])
    ids = _read_ids(out)
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


def cut_back(out: Path, step: int) -> None:
    """On resume: metrics.jsonl loses its rows after `step`, the checkpoint the run continues from. Where it had some,
    the run that stopped sent them to its W&B and MLflow runs too, which keep every value: trackers.json marks those
    runs to be replaced (REPLACE) before the rows go, so that a kill between the two still replaces them."""
    if (out / IDS).is_file() and any(row["step"] > step for row in read_metrics(out)):
        ids = _read_ids(out)
        for known in ids.values():
            if isinstance(known, dict):
                known[REPLACE] = True
        write_json(out / IDS, ids)
    truncate_metrics(out, step)


def _read_ids(out: Path) -> dict:
    ids = read_json(out / IDS, damaged="delete it to start new W&B and MLflow runs") if (out / IDS).is_file() else {}
    if not isinstance(ids, dict):
        raise ConfigError(f"{out / IDS}: not a mapping of tracker run ids; delete it to start new W&B and MLflow runs")
    return ids


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
    """RUN/tensorboard: an event file per stretch of the run, each record written when the run logs it, by the run's
    own thread (no writer thread behind it: a failed write is an error naming the file, and what was written before
    stays). A resumed run's file begins by purging the events after its checkpoint's step (a SessionLog START)."""

    def __init__(self, out: Path, config: RunConfig, step: int, ids: dict) -> None:
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog
        from tensorboard.summary.writer.record_writer import RecordWriter
        from torch.utils.tensorboard.summary import hparams, text

        folder = out / "tensorboard"
        new = not folder.exists()
        # named by the time in microseconds: TensorBoard reads a folder's files in name order, the purge after the events
        self.path = folder / f"events.out.tfevents.{time.time_ns() // 1000:016d}.{socket.gethostname()}.{os.getpid()}"
        with naming(self.path):
            folder.mkdir(parents=True, exist_ok=True)
            self.file = RecordWriter(open(self.path, "ab", buffering=0))  # each record one write, nothing held back
        self._event = Event
        self._write(Event(file_version="brain.Event:2"))
        if step:
            self._write(Event(step=step + 1, session_log=SessionLog(status=SessionLog.START)))
        if new:  # the config once: as hparams (the HPARAMS tab) and as run.yaml's text
            for summary in hparams(flat_config(config.to_dict()), {}):
                self._write(Event(summary=summary))
            self._write(Event(summary=text("config", "```\n" + dump_run_config(config) + "```"), step=0))

    def _write(self, event) -> None:
        event.wall_time = time.time()
        with naming(self.path):
            self.file.write(event.SerializeToString())

    def log(self, row: dict) -> None:
        from torch.utils.tensorboard.summary import scalar

        for tag, value in scalars(row).items():
            self._write(self._event(summary=scalar(tag, value), step=row["step"]))

    def artifacts(self, figures: list[Path], model: Path, step: int) -> None:
        import numpy as np
        from PIL import Image
        from torch.utils.tensorboard.summary import image

        for figure in figures:  # the IMAGES tab: figures/loss, figures/confusion, ...
            with Image.open(figure) as png:
                pixels = np.asarray(png.convert("RGB"))
            self._write(self._event(summary=image(f"figures/{figure.stem}", pixels, dataformats="HWC"), step=step))

    def close(self, failed: bool) -> None:
        self.file.close()


class WandbLog:
    """A Weights & Biases run named after the run folder, project $WANDB_PROJECT or vitkit; its files in RUN/wandb
    unless $WANDB_DIR says; WANDB_MODE=offline keeps it on this machine (`wandb sync` later). A run that holds steps
    the resumed run trains again is not continued (W&B keeps a step's first values): a new one is, see cut_back."""

    def __init__(self, out: Path, config: RunConfig, step: int, ids: dict) -> None:
        import wandb

        known = ids.get("wandb", {})
        project = known.get("project") or os.environ.get("WANDB_PROJECT") or "vitkit"
        again = None if known.get(REPLACE) else known.get("id")  # None: a new run, its id chosen by wandb
        replaced = (
            f"continues W&B run {known['id']} from step {step}" if known.get(REPLACE) and known.get("id") else None
        )
        try:
            self.run = wandb.init(
                project=project,
                id=again,
                name=out.name,
                resume="allow",  # the same id continues the same run
                config=config.to_dict(),
                dir=None if os.environ.get("WANDB_DIR") else str(out),
                notes=replaced,
            )
        except wandb.Error as err:
            raise ConfigError(
                f"train.log_to: wandb: {first_line(err)}; log in (wandb login), or set WANDB_MODE=offline "
                "to keep the run on this machine"
            ) from None
        except Exception as err:  # a setting W&B refuses (WANDB_MODE=ofline), or a fault of the package itself
            raise _cannot_start("wandb", err, "WANDB_", "fix it, or leave wandb out of train.log_to") from None
        ids["wandb"] = {"id": self.run.id, "project": project}
        if again is None and step:  # a new run of a resumed one: metrics.jsonl's rows so far first
            for row in read_metrics(out):
                self.log(row)

    def log(self, row: dict) -> None:
        self.run.log(scalars(row), step=row["step"])

    def artifacts(self, figures: list[Path], model: Path, step: int) -> None:
        import wandb

        self.run.log({f"figures/{figure.stem}": wandb.Image(str(figure)) for figure in figures}, step=step)

    def close(self, failed: bool) -> None:
        self.run.finish(exit_code=1 if failed else 0)


class MlflowLog:
    """An MLflow run named after the run folder, in experiment $MLFLOW_EXPERIMENT_NAME or vitkit, at
    $MLFLOW_TRACKING_URI (a resumed run: where it began); the config as params. A run that holds steps the resumed run
    trains again (MLflow keeps every value sent) is replaced by a new one, tagged vitkit.continues; the old one is
    tagged vitkit.replaced_by and ends KILLED."""

    def __init__(self, out: Path, config: RunConfig, step: int, ids: dict) -> None:
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        known = ids.get("mlflow", {})
        uri = known.get("tracking_uri") or (None if os.environ.get("MLFLOW_TRACKING_URI") else own_store(out))
        if uri == own_store(out):  # MLflow keeps its file store behind this switch (a database needs the full mlflow)
            os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
        try:
            self.client = MlflowClient(tracking_uri=uri)
            self.run_id = self._continued(known, step)
            if self.run_id is None:
                self.run_id = self._create(out.name, flat_config(config.to_dict()))
                self._send(read_metrics(out) if step else [])  # a new run of a resumed one: the rows so far first
                self._replaces(known.get("run_id"))
        except MlflowException as err:
            advice = (
                f"is its store at {known.get('tracking_uri')} still there? (delete {out / IDS} to start new runs)"
                if known
                else "set MLFLOW_TRACKING_URI to a tracking server (http://HOST:5000) or a store of yours"
            )
            raise ConfigError(f"train.log_to: mlflow: {first_line(err)}; {advice}") from None
        except Exception as err:  # a store it cannot open (a file: URI it cannot write), a fault of the package itself
            advice = "set MLFLOW_TRACKING_URI to a tracking server (http://HOST:5000) or a store you can write"
            raise _cannot_start("mlflow", err, "MLFLOW_", advice) from None
        ids["mlflow"] = {"run_id": self.run_id, "tracking_uri": self.client.tracking_uri}

    def _continued(self, known: dict, step: int) -> str | None:
        """The run of trackers.json, set running again; None where there is none, or it holds values after `step`."""
        run_id = known.get("run_id")
        if not run_id or known.get(REPLACE) or self._last_step(run_id) > step:
            return None
        self.client.update_run(run_id, status="RUNNING")
        return run_id

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

    def _send(self, rows: list[dict]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(key, value, now, row["step"]) for row in rows for key, value in scalars(row).items()]
        for start in range(0, len(metrics), 1000):  # a batch holds at most 1000 metrics
            self.client.log_batch(self.run_id, metrics=metrics[start : start + 1000])

    def _replaces(self, old: str | None) -> None:
        """Each of the runs names the other; the old one, which a kill left running, ends KILLED."""
        from mlflow.exceptions import MlflowException

        if old:
            self.client.set_tag(self.run_id, "vitkit.continues", old)
            with contextlib.suppress(MlflowException):  # deleted meanwhile: the new run stands alone
                self.client.set_tag(old, "vitkit.replaced_by", self.run_id)
                self.client.set_terminated(old, status="KILLED")

    def _last_step(self, run_id: str) -> int:
        keys = self.client.get_run(run_id).data.metrics
        return max((m.step for key in keys for m in self.client.get_metric_history(run_id, key)), default=0)

    def log(self, row: dict) -> None:
        self._send([row])

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
