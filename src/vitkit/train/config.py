"""Run configs: a YAML file of four sections (model, data, augment, train) plus dotted overrides.

    vitkit train --config configs/fashion_mnist.yaml train.lr=1e-3 model.name=vit_s16 data.name=synthetic

Every key is checked before any work starts: an unknown key, a value of the wrong type or out of
range, an impossible model (patch size not dividing the image, heads not dividing the width) or a
batch that does not split across the processes (WORLD_SIZE) is a ConfigError naming the key. `model` takes `name`, `init` (a checkpoint to start from) and any
ViTConfig field (width, depth, patch_size, drop_path, ...).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vitkit.data.augment import AugmentConfig, check_policy
from vitkit.data.split import SPLIT_RULES
from vitkit.errors import ConfigError, first_line, key_shown, shown
from vitkit.limits import Limit, limit_of, limit_problem, limits
from vitkit.models import BiTConfig, ModelConfig, ViTConfig, get_config
from vitkit.train import distributed

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class DataConfig:
    # "auto" (what `path` holds: IDX dir, image folder, .csv/.jsonl list) or "synthetic"
    name: str = field(default="auto", metadata=limits(choices=("auto", "synthetic")))
    # None: Fashion-MNIST from $VITKIT_DATA or /usr/share/datasets/fashion-mnist
    path: str | None = None
    train_split: str = field(default="train", metadata=limits(choices=SPLITS))
    # split validated during training (a "val" folder, else held out of train with val_fraction)
    val_split: str = field(default="val", metadata=limits(choices=SPLITS))
    # share of train held out as "val" when the source has no val split on disk
    val_fraction: float = field(default=0.1, metadata=limits("[0, 1)"))
    split_seed: int = 0
    # how val is held out of train: "stratified" (each class keeps its share; a class of one image stays in train) or
    # "random" (a seeded cut blind to the classes, vitkit's rule before it stratified; a run.yaml naming no rule had it)
    split_rule: str = field(default="stratified", metadata=limits(choices=SPLIT_RULES))
    # train on only the first N images of a seeded order (split_seed) of the training split, after any val hold-out:
    # for one seed a smaller N is a subset of a larger one (the paper's data-size experiments, Fig. 3-4); None: all
    train_images: int | None = field(default=None, metadata=limits(positive=True))
    # a list's column of the labels (CSV header or JSONL key, any case), where its names do not tell it: HAM10000's
    # dx; a Parquet file's, CIFAR-100's coarse_label. None: a column named label, class, category, target (labels or
    # tags: several an image), or the one other; in Parquet, the first ClassLabel
    label_column: str | None = None
    # a list's column naming what images belong together (HAM10000's lesion_id, a patient id): val is held out by
    # whole groups, so that no group has images in both train and val. None: by image, with a warning where a
    # column such as lesion_id or patient_id puts images of one group on both sides
    group_column: str | None = None
    # a regular expression whose first group in the file name of an image without a class folder is its class
    # (fastai's from_name_re): Oxford-IIIT Pet's images/Abyssinian_12.jpg with '^(.*)_\d+\.'
    name_pattern: str | None = None
    # image files up to this size are decoded once and kept on the device (not with augment.crop=rrc)
    memory_mb: float = field(default=4096.0, metadata=limits(positive=True))
    # square size files are kept at for augment.crop=pad|none (None: image size); rrc crops the whole image
    load_size: int | None = field(default=None, metadata=limits(positive=True))
    # DataLoader workers for streamed image files
    workers: int = 2
    # repeated augmentation (DeiT): each image drawn comes k times in a row, each copy augmented on its own; an
    # epoch keeps its length, so it holds 1/k of the images k times each (1: off)
    repeats: int = field(default=1, metadata=limits(positive=True))
    synthetic_size: int = field(default=512, metadata=limits(positive=True))
    synthetic_classes: int = 10  # its domain: limits.DOMAINS
    # an image file that cannot be read: "skip" (counted, warned, listed in bad_files.json) or "fail"
    on_error: str = field(default="skip", metadata=limits(choices=("skip", "fail")))


def _positive(default: int | None) -> Any:
    """A field whose value, where given, is a positive number."""
    return field(default=default, metadata=limits(positive=True))


@dataclass(frozen=True)
class TrainConfig:
    # optimizer steps
    steps: int = _positive(1000)
    # the length in passes over the training split instead (the paper's unit, Table 3): steps = ceil(epochs x training
    # images / batch_size), set once the data is read; a layer of the config that sets one of the two drops the other
    epochs: float | None = field(default=None, metadata=limits("(0, inf)"))
    # classification | multi_label (a sigmoid per class: several labels per image) | masked_patch (self-supervised,
    # paper §4.6; labels unused) | auto: multi_label where the training split gives each image a set of labels (a list's
    # labels column), else classification (chosen each time the data is read; run.yaml keeps "auto")
    objective: str = field(
        default="auto", metadata=limits(choices=("auto", "classification", "multi_label", "masked_patch"))
    )
    # a checkpoint vitkit reads (a run, a hub name, an HF folder) to distil from: DeiT's hard-label distillation through
    # the student's distillation token (model.distilled=true), the teacher frozen, at its own size and normalisation
    teacher: str | None = None
    # logical batch (the paper's 4096 runs as micro_batch x accumulation)
    batch_size: int = _positive(128)
    # per forward pass; None = batch_size (no accumulation)
    micro_batch: int | None = _positive(None)
    optimizer: str = field(default="adamw", metadata=limits(choices=("adamw", "adam", "sgd")))
    lr: float = field(default=1e-3, metadata=limits("[0, inf)"))
    # decoupled; none on norms, biases, position embeddings, class token
    weight_decay: float = 0.05
    betas: tuple[float, float] = field(default=(0.9, 0.999), metadata=limits("[0, 1)"))
    # sgd
    momentum: float = field(default=0.9, metadata=limits("[0, 1)"))
    # layer-wise learning-rate decay (BEiT, MAE): block i of L at lr x layer_decay^(L + 1 - i), the embeddings at
    # x layer_decay^(L + 1), the head at lr (timm's grouping: the final norm with the last block); None: off
    layer_decay: float | None = field(default=None, metadata=limits("(0, 1]"))
    warmup_steps: int = 100
    # after a linear warmup
    decay: str = field(default="cosine", metadata=limits(choices=("cosine", "linear", "constant")))
    # final lr as a fraction of lr
    end_lr_ratio: float = field(default=0.0, metadata=limits("[0, 1]"))
    # global-norm gradient clipping (None: off)
    clip_norm: float | None = field(default=1.0, metadata=limits("(0, inf)"))
    # auto (bf16 on GPU; on CPU bf16 where measured faster) | fp32 | bf16 | fp16 | fp8 (the blocks' linear layers in
    # torchao's float8, bf16 elsewhere: vitkit.kernels.float8)
    precision: str = field(default="auto", metadata=limits(choices=("auto", "fp32", "bf16", "fp16", "fp8")))
    # torch.compile the model
    compile: bool = False
    # recompute each block in backward: less activation memory, ~1/3 more compute
    grad_checkpointing: bool = False
    # decay of an exponential moving average of the weights (e.g. 0.9998)
    ema: float | None = field(default=None, metadata=limits("(0, 1)"))
    seed: int = 0
    # auto | cpu | cuda | cuda:N | mps
    device: str = "auto"
    # under torchrun: auto/ddp (DistributedDataParallel) or fsdp (FSDP2 fully_shard)
    strategy: str = field(default="auto", metadata=limits(choices=("auto", "ddp", "fsdp")))
    # torch.set_num_threads (0: the CPUs this process can get, less those busy at start); its domain: limits.DOMAINS
    threads: int = 0
    log_every: int = _positive(50)
    # also at the end
    eval_every: int = _positive(500)
    # also at the end
    checkpoint_every: int = _positive(500)
    # step checkpoints kept besides the final one
    keep_checkpoints: int = field(default=2, metadata=limits("[1, inf)"))
    eval_batch_size: int = _positive(512)
    # progress bar on stderr
    progress: bool = True
    # loss.png, accuracy.png, lr.png and confusion.png when a run ends; false draws none (sweeps, tests)
    figures: bool = True
    # steps with a non-finite loss/gradient are skipped; this many in a row stop the run
    max_nonfinite_steps: int = _positive(10)
    # a pixel baseline (softmax regression on 16x16 pixels, evaluate/baseline.py) fitted on the training split before the
    # first step and set beside the val figure, with a warning where the model does not beat it; `vitkit train --data`
    # without a named model (the recipe fitted to the data) turns it on
    baseline: bool = False
    # where the scalars go: jsonl (metrics.jsonl, always written), csv, tensorboard, wandb, mlflow (see train/trackers.py);
    # each item one of them
    log_to: tuple[str, ...] = field(
        default=("jsonl",), metadata=limits(choices=("jsonl", "csv", "tensorboard", "wandb", "mlflow"))
    )


MAX_CONFIG_BYTES = 1 << 20

SECTIONS = {"data": DataConfig, "augment": AugmentConfig, "train": TrainConfig}


def check_batches(train: TrainConfig, world: int) -> None:
    """The logical batch splits into micro-batches, and each micro-batch evenly across the `world` processes."""
    micro = train.micro_batch or train.batch_size
    if train.batch_size % micro:
        raise ConfigError(
            f"train.micro_batch: {micro} does not divide train.batch_size {train.batch_size}; use a divisor of it"
        )
    if micro % world:
        raise ConfigError(
            f"train.{'micro_batch' if train.micro_batch else 'batch_size'}: {micro} images per micro-batch do not split evenly "
            f"across {world} processes (WORLD_SIZE); use a multiple of {world}"
        )


@dataclass(frozen=True)
class ModelChoice(Mapping):
    """The model section of a run config, typed: the model `name`, the checkpoint to start from (`init`) and the
    ViTConfig (or BiTConfig) field `overrides` as (key, value) pairs in the order given. `config`, the model config
    it names, is built here once, with `replace` on `known` (the registered config of `name`, looked up by
    `from_dict` as it checks the section and handed on by `changed`): every reader takes that object. It reads as the
    mapping of the section too (choice["name"], choice.get("init")), as the plain dict it replaces did."""

    name: str = "vit_mini4_28"
    init: str | None = None
    overrides: tuple[tuple[str, Any], ...] = ()
    # the registered config of `name` (None: looked up by name here); a new name is a new ModelChoice, not a replace
    known: ModelConfig | None = field(default=None, compare=False, repr=False)
    config: ModelConfig = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        known = self.known if self.known is not None else get_config(self.name)
        object.__setattr__(self, "known", known)
        object.__setattr__(self, "config", known.replace(**dict(self.overrides)))

    def section(self) -> dict[str, Any]:
        """The section as a run config file holds it: name, init where set, then the overrides."""
        return {"name": self.name, **({"init": self.init} if self.init is not None else {}), **dict(self.overrides)}

    def changed(self, drop: tuple[str, ...] = (), **values: Any) -> ModelChoice:
        """This choice with `values` set and the `drop` keys left out (its config rebuilt from `known`)."""
        kept = {k: v for k, v in self.overrides if k not in drop}
        init = values.pop("init", self.init)
        return dataclasses.replace(self, init=init, overrides=tuple({**kept, **values}.items()))

    def __getitem__(self, key: str) -> Any:
        return self.section()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.section())

    def __len__(self) -> int:
        return len(self.section())


@dataclass(frozen=True)
class RunConfig:
    model: ModelChoice = field(default_factory=ModelChoice)
    data: DataConfig = DataConfig()
    augment: AugmentConfig = AugmentConfig()
    train: TrainConfig = TrainConfig()

    def __post_init__(self) -> None:
        # a model section given as a plain mapping (as before the typed choice) is checked as a run config's is
        if not isinstance(self.model, ModelChoice):
            object.__setattr__(self, "model", model_choice(dict(self.model)))

    def to_dict(self) -> dict[str, Any]:
        sections = {name: _plain(dataclasses.asdict(getattr(self, name))) for name in SECTIONS}
        # the length is given in epochs: steps follow from the data (`with_steps_for`)
        if self.train.epochs is not None:
            del sections["train"]["steps"]
        return {"model": _plain(self.model.section()), **sections}

    def with_steps_for(self, train_images: int) -> RunConfig:
        """This config with train.steps set from train.epochs for a training split of `train_images` (unchanged
        without train.epochs)."""
        t = self.train
        if t.epochs is None:
            return self
        return dataclasses.replace(
            self, train=dataclasses.replace(t, steps=steps_for(t.epochs, train_images, t.batch_size))
        )

    def model_config(self, **fixed: Any) -> ModelConfig:
        """The ViTConfig of model.name with the model.* overrides (and `fixed`, e.g. num_classes from the data): the
        one the model choice built when it was checked."""
        return self.model.config.replace(**fixed) if fixed else self.model.config


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def load_run_config(
    path: str | os.PathLike | None = None, overrides: list[str] = (), *, base: dict | None = None
) -> RunConfig:
    """Read a YAML run config over `base` (a layer under it) and the defaults, apply overrides, validate everything.

    An override is "section.key=value" text (typed by the key, see `override_value`) or a (key, value) pair.
    """
    data: dict[str, Any] = {section: dict(values) for section, values in (base or {}).items()}
    if path is not None:
        path = Path(path)
        try:
            if path.is_file() and path.stat().st_size > MAX_CONFIG_BYTES:
                raise ConfigError(
                    f"{path}: {path.stat().st_size:,} bytes; a run config is a small YAML file (at most {MAX_CONFIG_BYTES:,})"
                )
            read = parse_yaml(path.read_text(encoding="utf-8")) or {}
        except FileNotFoundError:
            # the repository's recipes (a source checkout)
            shipped = Path(__file__).resolve().parents[3] / "configs" / path.name
            hint = (
                f"; the recipe of that name is {shipped} (configs/ paths in the docs are from the repository's root)"
                if (not path.is_absolute() and shipped.is_file())
                else ""
            )
            raise ConfigError(f"{path}: config file not found{hint}") from None
        except IsADirectoryError:
            raise ConfigError(
                f"{path}: is a folder; --config takes a YAML file (e.g. configs/fashion_mnist.yaml)"
            ) from None
        except UnicodeDecodeError as err:
            raise ConfigError(f"{path}: not UTF-8 text (byte {err.start}); a run config is a YAML text file") from None
        except (yaml.YAMLError, RecursionError) as err:
            raise ConfigError(f"{path}: not valid YAML ({first_line(err)})") from None
        if not isinstance(read, dict):
            raise ConfigError(f"{path}: expected a mapping of sections (model, data, augment, train)")
        for section, values in read.items():
            # a section that is no mapping is the file's, and found wrong as such
            if isinstance(values, dict) and isinstance(data.get(section), dict):
                merge_layer(data, section, values, str(path))
            else:
                data[section] = values
    where = str(path) if path else "config"
    for section, values in override_layer(overrides).items():
        merge_layer(data, section, values, "overrides")
    return from_dict(data, where=where)


# What a run.yaml written before a key existed ran with, where that is not the key's default today: its run's value
RUN_YAML_BEFORE = {"data": {"split_rule": "random"}}


def load_run_yaml(path: str | os.PathLike, overrides: list[str] = ()) -> RunConfig:
    """A run directory's run.yaml (and `overrides`): every key as the run had it, a key added since as it was then
    (RUN_YAML_BEFORE: a run of vitkit before it stratified its hold-out held val out at random)."""
    return load_run_config(path, overrides, base=RUN_YAML_BEFORE)


def override_layer(overrides: list) -> dict[str, dict[str, Any]]:
    """The overrides as one layer of a config, by section, typed by their keys; the last of a key wins."""
    given: dict[str, dict[str, Any]] = {}
    for item in overrides:
        if isinstance(item, tuple):  # (key, value) from a CLI flag such as --data: the value as given, never parsed
            section, name = item[0].split(".", 1)
            given.setdefault(section, {})[name] = item[1]
            continue
        key, sep, text = item.partition("=")
        if not sep or "." not in key:
            raise ConfigError(f"override {shown(item)}: expected section.key=value, e.g. train.lr=1e-3")
        section, _, name = key.strip().partition(".")
        given.setdefault(section, {})[name.strip()] = override_value(section, name.strip(), text)
    return given


def data_and_train(overrides: list) -> tuple[DataConfig, TrainConfig]:
    """The data and train sections that `overrides` (data.* and train.* keys) make over the defaults, checked as a
    run config's are, with no model config built: what a fit to the data reads before the model is chosen."""
    given = override_layer(overrides)
    _length_set(given.get("train"), "overrides")
    return _section(DataConfig, given.get("data", {}), "data"), _section(TrainConfig, given.get("train", {}), "train")


LENGTH_KEYS = ("steps", "epochs")  # train.steps or train.epochs: the training length


def steps_for(epochs: float, train_images: int, batch_size: int) -> int:
    """Optimizer steps that pass over `train_images` `epochs` times in batches of `batch_size` (at least one)."""
    return max(math.ceil(epochs * train_images / batch_size), 1)


def epochs_done(steps: int, batch_size: int, train_images: int) -> float:
    """The epochs `steps` optimizer steps of `batch_size` images make: images read over training images, the one
    count of train.epochs (`steps_for`), the plan and the logged train/epoch. (The loader's own epoch, a pass of whole
    batches that leaves the remainder out, orders the data; it runs ahead of this where batches are large.)"""
    return steps * batch_size / max(train_images, 1)


def merge_layer(data: dict[str, Any], section: str, values: dict[str, Any], where: str) -> None:
    """`values` (one layer of a config: defaults, a YAML file, the overrides) over `data[section]`. A layer that sets
    train.steps or train.epochs replaces the other one of the layers before it; one layer may not set both."""
    if not isinstance(data.setdefault(section, {}), dict):
        raise ConfigError(f"{section}: expected a mapping")
    if section == "train" and _length_set(values, where):
        for key in LENGTH_KEYS:
            data[section].pop(key, None)
    data[section].update(values)


def _length_set(train: Any, where: str) -> bool:
    """Whether a layer's train section sets train.steps or train.epochs; a ConfigError where it sets both."""
    given = [k for k in LENGTH_KEYS if isinstance(train, dict) and train.get(k) is not None]
    if len(given) == 2:
        raise ConfigError(
            f"{where}: train.steps={train['steps']} and train.epochs={train['epochs']} both set the training length; "
            "keep one (steps: optimizer steps; epochs: passes over the training split)"
        )
    return bool(given)


class _NoAliasLoader(yaml.SafeLoader):
    """safe_load without aliases (*name): a run config needs none, and a few lines of them expand to billions of values.
    Numbers in scientific notation without a dot (1e-3, 2E+5) are floats, as in YAML 1.2 and JSON: YAML 1.1 reads them as
    text, so that a list such as model.std=[1e-3,0.5,0.5] would hold a string."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.events.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "aliases (*name) are not allowed in a run config", event.start_mark
            )
        return super().compose_node(parent, index)


_NoAliasLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def parse_yaml(text: str) -> Any:
    """YAML text as a run config reads it (`_NoAliasLoader`): every reader of a run config or a KEY=VALUE list parses
    with this, so one spelling of a number means one number everywhere."""
    return yaml.load(text, Loader=_NoAliasLoader)


_NULL = ("", "null", "none", "~")
_BOOLS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}


def field_types(section: str) -> dict[str, Any]:
    """The type of every key of a section (model: the fields of either architecture's config, plus name and init)."""
    if section == "model":
        return {**typing.get_type_hints(BiTConfig), **typing.get_type_hints(ViTConfig), "name": str, "init": str | None}
    return typing.get_type_hints(SECTIONS[section]) if section in SECTIONS else {}


def override_value(section: str, name: str, text: str) -> Any:
    """The value of one KEY=VALUE override, typed by the key's field, never guessed: a text key (a path, a
    name) takes the text as it is (`data.path=#a b`); numbers and booleans are parsed as such; only lists and
    mappings (`train.betas=[0.9,0.95]`, `model.backbone={layers: [3]}`) are read as YAML. Text that does not
    parse is passed on as text, so the type check names the key."""
    hint = field_types(section).get(name)
    options = (
        typing.get_args(hint)
        if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
        else (hint,)
    )
    kinds = tuple(o for o in options if o is not type(None))
    if type(None) in options and text.strip().lower() in _NULL:
        return None
    if kinds == (str,) or hint is None and text.strip()[:1] not in ("[", "{"):
        return text
    stripped = text.strip()
    if kinds == (bool,):
        return _BOOLS.get(stripped.lower(), text)
    if kinds in ((int,), (float,)):
        try:
            return kinds[0](stripped)
        except ValueError:  # YAML's spellings of numbers (.nan, .inf, 1_000) are numbers too, checked as such
            number = parse_yaml(stripped) if stripped.lower().lstrip("+-") in (".nan", ".inf") else None
            return number if isinstance(number, float) else text
    try:
        return parse_yaml(stripped)
    except yaml.YAMLError:
        return text


def from_dict(data: dict[str, Any], where: str = "config") -> RunConfig:
    for section in data:
        if section not in ("model", *SECTIONS):
            raise ConfigError(f"{where}: unknown section {shown(section)}; sections are model, data, augment, train")
    if not isinstance(data.get("model") or {}, dict):
        raise ConfigError(f"{where}: model: expected a mapping of keys (name, width, ...), got {shown(data['model'])}")
    model = model_choice(dict(data.get("model") or {}), where)
    _length_set(data.get("train"), where)
    sections = {name: _section(cls, data.get(name) or {}, name) for name, cls in SECTIONS.items()}
    for key in ("rrc_scale", "rrc_ratio", "erase_scale", "erase_ratio"):
        low, high = getattr(sections["augment"], key)
        if low > high:
            raise ConfigError(f"augment.{key}: expected [low, high] with low <= high, got {[low, high]}")
    check_batches(sections["train"], distributed.world_size())
    check_policy(sections["augment"])
    return RunConfig(model=model, **sections)


def model_choice(model: dict[str, Any], where: str = "config") -> ModelChoice:
    """The model section of a run config, checked and typed: its model config built once (`ModelChoice`)."""
    model.setdefault("name", "vit_mini4_28")
    if not isinstance(model["name"], str):
        raise ConfigError(f"{where}: model.name: expected a model name (e.g. vit_b16), got {shown(model['name'])}")
    try:
        # a ViT's fields, or a BiT ResNet's
        known = get_config(model["name"])
    except TypeError as err:
        raise ConfigError(f"model: bad value ({err})") from None
    for key in model:
        _known_key("model", key, _model_keys(type(known)))
    for key in ("name", "init"):
        if key in model and not (isinstance(model[key], str) or key == "init" and model[key] is None):
            raise ConfigError(f"model.{key}: expected text, got {shown(model[key])}")
    overrides = tuple((k, v) for k, v in model.items() if k not in ("name", "init"))
    try:
        return ModelChoice(model["name"], model.get("init"), overrides, known=known)
    except ConfigError as err:
        raise ConfigError(f"model.{err}" if not str(err).startswith("model") else str(err)) from None
    except (TypeError, ValueError) as err:
        raise ConfigError(f"model: bad value ({err})") from None


def check_override_keys(overrides: list[str], model: type = ViTConfig) -> None:
    """The error `from_dict` would give for an unknown section or key among "section.key=value" `overrides`, raised
    before slow work that comes first (the scan of a fit to the data); `model`: the config class of the model."""
    for item in overrides:
        if isinstance(item, tuple) or "=" not in item or "." not in item.partition("=")[0]:
            continue  # a flag's pair, or a malformed item that load_run_config names
        section, _, key = item.partition("=")[0].strip().partition(".")
        key = key.strip()
        if section not in ("model", *SECTIONS):
            raise ConfigError(f"config: unknown section {shown(section)}; sections are model, data, augment, train")
        _known_key(
            section,
            key,
            _model_keys(model) if section == "model" else [f.name for f in dataclasses.fields(SECTIONS[section])],
        )


def _model_keys(family: type) -> list[str]:
    """The keys a model section takes: its config class's fields, and name and init."""
    return sorted({f.name for f in dataclasses.fields(family)} | {"name", "init"})


def _known_key(section: str, key: str, known: list[str]) -> None:
    if key not in known:
        raise ConfigError(f"{section}.{key_shown(key)}: unknown key; known keys are {', '.join(known)}")


def _section(cls: type, values: dict[str, Any], section: str) -> Any:
    if not isinstance(values, dict):
        raise ConfigError(f"{section}: expected a mapping of keys, got {shown(values)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    checked = {}
    for key, value in values.items():
        _known_key(section, key, list(fields))
        checked[key] = _check(f"{section}.{key}", value, hints[key], limit_of(fields[key]))
    return cls(**checked)


def _check(key: str, value: Any, hint: Any, limit: Limit) -> Any:
    """`value` converted to the field type `hint` and within the field's `limit`, or a ConfigError naming `key`."""
    options = (
        typing.get_args(hint)
        if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
        else (hint,)
    )
    if value is None:
        if type(None) in options:
            return None
        raise ConfigError(f"{key}: a value is required (got null)")
    for option in options:
        if option is type(None):
            continue
        converted = _convert(value, option)
        if converted is not _BAD:
            break
    else:
        names = " or ".join(_type_name(o) for o in options if o is not type(None))
        raise ConfigError(f"{key}: expected {names}, got {shown(value)}")
    problem = limit_problem(converted, limit, given=value)
    if problem:
        raise ConfigError(f"{key}: {problem}")
    return converted


_BAD = object()


def _type_name(option: Any) -> str:
    """How an error names a field type: int, float, ... or "a list of str" for a list of any length."""
    args = typing.get_args(option)
    if typing.get_origin(option) is tuple and args[1:] == (Ellipsis,):
        return f"a list of {args[0].__name__}, e.g. [a, b]"
    return getattr(option, "__name__", str(option))


def _convert(value: Any, option: Any) -> Any:
    if option is bool:
        return value if isinstance(value, bool) else _BAD
    if option is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _BAD
    if option is float:
        if isinstance(value, str):
            try:
                return float(value)  # YAML reads 1e-3 as a string
            except ValueError:
                return _BAD
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else _BAD
    if option is str:
        return value if isinstance(value, str) else _BAD
    if typing.get_origin(option) is tuple:
        args = typing.get_args(option)
        if args[1:] == (Ellipsis,):  # a list of any length; one item alone is a list of one
            items = [_convert(v, args[0]) for v in (value if isinstance(value, (list, tuple)) else [value])]
            return _BAD if any(i is _BAD for i in items) else tuple(items)
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            return _BAD
        items = [_convert(v, a) for v, a in zip(value, args)]
        return _BAD if any(i is _BAD for i in items) else tuple(items)
    return _BAD


DISPLAY_KEYS = (
    "train.progress",
    "train.figures",
    "train.threads",
    "train.device",
    "train.log_to",
)  # how a run is shown or where it runs, not what it trains


def changed_settings(saved: RunConfig, now: RunConfig) -> list[str]:
    """The keys (section.key) whose values differ between two run configs, display settings left out."""

    def flat(c: RunConfig) -> dict:
        return {f"{section}.{key}": value for section, values in c.to_dict().items() for key, value in values.items()}

    a, b = flat(saved), flat(now)
    return [k for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k) and k not in DISPLAY_KEYS]


def dump_run_config(config: RunConfig) -> str:
    return yaml.safe_dump(config.to_dict(), sort_keys=False)
