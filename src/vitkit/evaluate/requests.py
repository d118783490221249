"""What `vitkit eval`, `fewshot`, `knn`, `linear-probe` and `inspect` ask for: one frozen, typed request per command,
made once from its parsed flags (checked here, by the limits declared on its fields) and read, never re-derived, by
everything below it."""

from __future__ import annotations

from dataclasses import dataclass, field

from vitkit.errors import ConfigError
from vitkit.evaluate.metrics import THRESHOLD, THRESHOLD_LIMIT
from vitkit.limits import check_fields, limits


@dataclass(frozen=True)
class EvalRequest:
    """`vitkit eval`: score `checkpoint` on one split of its data (or of `data`)."""

    checkpoint: str
    data: str | None = None
    # None: test, or "all" of a `data` folder or list without splits of its own
    split: str | None = None
    val_fraction: float | None = field(default=None, metadata=limits("[0, 1)", says="a share from 0 to below 1"))
    batch_size: int = field(default=256, metadata=limits(positive=True))
    device: str = "auto"
    keep_aspect: bool = False
    threads: int = 0
    # where the confusion-matrix PNG goes; None: beside the model
    confusion: str | None = None
    threshold: float = field(default=THRESHOLD, metadata=THRESHOLD_LIMIT)
    labels_by_index: bool = False
    precision: str = "fp32"
    calibration: int = 256
    compare_fp32: bool = False
    skip_unreadable: bool = False

    def __post_init__(self) -> None:
        check_fields(self, ConfigError)


@dataclass(frozen=True)
class FeatureRequest:
    """What `vitkit fewshot`, `knn` and `linear-probe` share: the checkpoint, its data, where the report goes, and how
    its frozen features are read (at `image_size` (H, W), None: the model's own)."""

    checkpoint: str
    data: str | None = None
    out: str | None = None
    image_size: tuple[int, int] | None = None
    # the seed of random weights of the same architecture: the baseline
    random_init: int | None = None
    batch_size: int = field(default=256, metadata=limits(positive=True))
    device: str = "auto"
    threads: int = 0
    precision: str = "fp32"
    calibration: int = 256
    val_fraction: float | None = field(default=None, metadata=limits("[0, 1)", says="a share from 0 to below 1"))
    skip_unreadable: bool = False
    pool: str | None = None  # the frozen feature (models.pooling; None: the model's feature_pool)

    def __post_init__(self) -> None:
        check_fields(self, ConfigError)


@dataclass(frozen=True)
class TwoSplitsRequest(FeatureRequest):
    """A classifier built on `train_split`'s features and scored on `test_split`'s, never the same split."""

    train_split: str = "train"
    test_split: str = "test"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.train_split == self.test_split:
            other = self.test_split if self.test_split != "train" else "val"
            raise ConfigError(
                f"--train-split and --test-split are both {self.test_split}: the images the classifier is built from "
                "would be the images it is scored on, a figure that says nothing; choose two splits (e.g. --train-split "
                f"train --test-split {other})"
            )


@dataclass(frozen=True)
class FewshotRequest(TwoSplitsRequest):
    """`vitkit fewshot`: `shots` images per class (None: the paper's, those the smallest class has), `seeds` draws
    each, ridge lambda `l2`."""

    shots: tuple[int, ...] | None = None
    seeds: int = field(default=3, metadata=limits(positive=True, says="at least 1"))
    l2: float = 2.0**10


@dataclass(frozen=True)
class KnnRequest(TwoSplitsRequest):
    """`vitkit knn`: the `k` nearest neighbours vote, weighted by exp(sim / `temperature`) (0: uniform votes)."""

    k: tuple[int, ...] = (10, 20)
    temperature: float = 0.07


@dataclass(frozen=True)
class LinearProbeRequest(FeatureRequest):
    """`vitkit linear-probe`: one probe per penalty of `l2` fitted on train, picked on val, scored on `test_split`."""

    l2: tuple[float, ...] = (1e-6, 1e-4, 1e-2, 1.0)
    max_iter: int = field(default=500, metadata=limits(positive=True))
    test_split: str = "test"


@dataclass(frozen=True)
class InspectRequest:
    """`vitkit inspect`: figures of `checkpoint` over `images` (files and folders), else over a split of its data (or
    of `data`), written into `out`; read at `image_size` (H, W), None: the model's own."""

    checkpoint: str
    out: str
    images: tuple[str, ...] | None = None
    split: str | None = None
    data: str | None = None
    num_images: int = field(default=128, metadata=limits(positive=True))
    show: int = field(default=8, metadata=limits(positive=True))
    components: int = field(default=28, metadata=limits(positive=True))
    image_size: tuple[int, int] | None = None
    batch_size: int = field(default=32, metadata=limits(positive=True))
    device: str = "cpu"
    threads: int = 0
    skip_unreadable: bool = False

    def __post_init__(self) -> None:
        check_fields(self, ConfigError)
        if self.images and (self.split or self.data):
            raise ConfigError("--split and --data choose the images when --images is not given; drop them or --images")
