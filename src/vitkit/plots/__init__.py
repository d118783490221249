"""PNG figures of a run: loss and accuracy curves, the learning-rate schedule, a confusion matrix.

matplotlib is imported inside each function (Agg backend); every PNG is written atomically. It is an optional extra
(`pip install 'vitkit[plots]'`): `missing()` says so before a figure is asked of it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from vitkit.files import atomic_path

NO_MATPLOTLIB = "matplotlib is not installed; pip install 'vitkit[plots]' draws them"


def missing() -> str | None:
    """Why no figure can be drawn here (matplotlib, an optional extra, is not installed), else None."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return NO_MATPLOTLIB
    return None


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    _pyplot().close(fig)
    return path


def _title(ax, title: str, *lines: str | None) -> None:
    """A figure's title with the data it was drawn from in smaller type beneath it."""
    below = [line for line in lines if line]
    ax.set_title(title + "".join(f"\n{line}" for line in below), fontsize=9 if below else None)


def _series(rows: Sequence[dict], key: str) -> tuple[list[float], list[float]]:
    points = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
    return [p[0] for p in points], [p[1] for p in points]


def plot_run(
    rows: Sequence[dict],
    directory: str | os.PathLike,
    *,
    train_data: str | None = None,
    val_data: str | None = None,
    classes: int | None = None,
    objective: str | None = None,
    ema: bool = False,
    soft_targets: bool = True,
) -> list[Path]:
    """loss.png, accuracy.png and lr.png from metrics rows ({"step", "loss" | "val_loss" | "val_top1" | "lr"});
    `train_data` / `val_data` (which images, how many) go under the titles of the figures drawn from them. Top-5 is
    left out for 5 classes or fewer (`classes`), where it is 1 whatever the model does. The labels say what was
    measured: masked patch prediction's colour accuracy (`objective`), validation through EMA weights (`ema`), a train
    loss against smoothed or mixed targets (`soft_targets`)."""
    plt = _pyplot()
    directory = Path(directory)
    train_rows = [r for r in rows if r.get("kind") == "train"]
    val_rows = [r for r in rows if r.get("kind") == "val"]
    written = []

    fig, ax = plt.subplots(figsize=(6, 4))
    weights = " (EMA weights)" if ema else ""
    what = " colour-prediction" if objective == "masked_patch" else ""
    ax.plot(
        *_series(train_rows, "loss"),
        ".-" if len(train_rows) < 30 else "-",
        label="train loss" + (" (smoothed / mixed targets)" if soft_targets else ""),
    )
    ax.plot(*_series(val_rows, "val_loss"), "o-", label=f"validation{what} loss{weights}")
    ax.set(xlabel="step", ylabel="cross-entropy")
    _title(ax, "Loss", f"train: {train_data}" if train_data else None, f"validation: {val_data}" if val_data else None)
    ax.legend()
    written.append(_save(fig, directory / "loss.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(*_series(val_rows, "val_top1"), "o-", label=f"validation{what} top-1{weights}")
    if classes is None or classes > 5 or objective == "masked_patch":
        ax.plot(*_series(val_rows, "val_top5"), "s--", label=f"validation{what} top-5{weights}")
    ax.set(xlabel="step", ylabel="accuracy", ylim=(0, 1))
    _title(ax, "Accuracy", f"validation: {val_data}" if val_data else None)
    ax.legend()
    written.append(_save(fig, directory / "accuracy.png"))

    fig, ax = plt.subplots(figsize=(6, 3))
    ax.plot(*_series(train_rows, "lr"), ".-" if len(train_rows) < 30 else "-")
    ax.set(xlabel="step", ylabel="learning rate", title="Learning-rate schedule")
    written.append(_save(fig, directory / "lr.png"))
    return written


def plot_confusion(
    confusion: Sequence[Sequence[int]], class_names: Sequence[str], path: str | os.PathLike, *, data: str | None = None
) -> Path:
    """A row-normalised confusion matrix (rows: true class, columns: predicted), counts in the cells; `data` (which
    images, how many) under the title."""
    import numpy as np

    plt = _pyplot()
    cm = np.asarray(confusion, dtype=float)
    rates = cm / np.maximum(cm.sum(axis=1, keepdims=True), 1)
    k = len(class_names)
    fig, ax = plt.subplots(figsize=(max(4, 0.55 * k + 2), max(3.5, 0.5 * k + 1.5)))
    im = ax.imshow(rates, cmap="Blues", vmin=0, vmax=1)
    if k <= 30:
        ax.set_xticks(range(k), class_names, rotation=45, ha="right")
        ax.set_yticks(range(k), class_names)
        for i in range(k):
            for j in range(k):
                ax.text(
                    j,
                    i,
                    int(cm[i, j]),
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if rates[i, j] > 0.5 else "black",
                )
    ax.set(xlabel="predicted", ylabel="true")
    _title(ax, "Confusion matrix", data)
    fig.colorbar(im, ax=ax, fraction=0.046)
    return _save(fig, Path(path))
