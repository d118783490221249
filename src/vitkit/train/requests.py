"""What a training command asks for, as its parser made it (STYLE.md 15): one frozen, typed request per command.
What the parser made goes no further than the CLI: the library reads these, and the resolve steps turn them, with the
files they name, into a run config (`fit.run_config`) and its plan (`resolve`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from vitkit.errors import ConfigError
from vitkit.limits import check_fields, limits


@dataclass(frozen=True)
class TrainRequest:
    """`vitkit train`: a new run into `out`, or `resume` one; `overrides` are its KEY=VALUE items as typed."""

    overrides: tuple[str, ...] = ()
    config: str | None = None
    out: str | None = None
    data: str | None = None
    resume: str | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        if self.resume and self.config:
            raise ConfigError("--config: a resumed run keeps its own run.yaml; pass changes as KEY=VALUE overrides")
        if self.resume and self.out and self.out != self.resume:
            raise ConfigError("--out: a resumed run writes into its own directory; drop --out")
        if not self.resume and not self.out:
            raise ConfigError("--out: required; name the run directory to create, e.g. --out runs/demo")

    @property
    def run_dir(self) -> str:
        """The run directory: the one resumed, else the one to create."""
        return self.resume or self.out


@dataclass(frozen=True)
class FinetuneRequest:
    """`vitkit finetune`: `checkpoint` fine-tuned into `out` at `image_size` (H, W) (None: the recipe's, else the
    checkpoint's), one run per learning rate of `lrs` (None: the recipe's)."""

    checkpoint: str
    out: str
    overrides: tuple[str, ...] = ()
    data: str | None = None
    config: str | None = None
    image_size: tuple[int, int] | None = None
    lrs: tuple[float, ...] | None = field(default=None, metadata=limits(flag="--lr"))
    # these three become train.steps, train.batch_size and train.micro_batch, whose fields check them
    steps: int | None = field(default=None, metadata=limits(key="train.steps"))
    epochs: float | None = field(
        default=None, metadata=limits("(0, inf)", says="a positive number of passes over the training images")
    )
    batch_size: int | None = field(default=None, metadata=limits(key="train.batch_size"))
    micro_batch: int | None = field(default=None, metadata=limits(key="train.micro_batch"))
    keep_pre_logits: bool = False
    new_head: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        check_fields(self, ConfigError)


@dataclass(frozen=True)
class DataRequest:
    """`vitkit data PATH`: the data at `path` as the run config (`config` + `overrides`) reads it; `samples` images
    of the first training batch to `out`; its splits as tar shards to `to_shards`."""

    path: str | None = None
    config: str | None = None
    overrides: tuple[str, ...] = ()
    split: str | None = None
    samples: int = 0
    out: str | None = None
    to_shards: str | None = None
    per_shard: int = field(default=1000, metadata=limits(positive=True))

    def __post_init__(self) -> None:
        check_fields(self, ConfigError)
