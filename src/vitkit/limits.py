"""Bounds on what a small input may make vitkit allocate: compressed data (a .npz, a gzipped IDX file) that
expands far beyond its size, and headers that promise more than the file holds, are refused from their
declared sizes, before anything is allocated or decompressed. And the domain of every number a key takes
(`DOMAINS`), one per key for every reader: flags, run configs and the files of every checkpoint format."""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
from pathlib import Path
from typing import Any

from vitkit.errors import shown

# the largest whole number any key or flag takes: seeds feed torch generators, steps and sizes a loop
MAX_INT = 2**31 - 1
MAX_EXPANSION = 64  # weights and pixels compress a few times at most; a decompression bomb, thousands of times
MIN_BUDGET = 256 << 20  # any file may expand to this much (small files of zeros compress well and are harmless)


def check_expansion(path: str | os.PathLike, declared: int, stored: int, error: type[Exception], what: str) -> None:
    """Raise `error` naming `path` if `declared` uncompressed bytes are more than `stored` bytes can legitimately hold."""
    budget = max(MAX_EXPANSION * stored, MIN_BUDGET)
    if declared > budget:
        raise error(
            f"{path}: {what} declares {declared:,} bytes uncompressed from {stored:,} bytes on disk, more than "
            f"{MAX_EXPANSION}x (a decompression bomb, or a damaged file); vitkit refuses it before decompressing"
        )


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.1f} {unit}"
    return f"{nbytes} bytes"


def memory_available() -> int | None:
    """Bytes this process may still allocate: the kernel's MemAvailable (Linux), lowered to what is left of the
    process's address-space limit (RLIMIT_AS) where one is set; None where neither is known."""
    try:
        with open("/proc/meminfo") as f:
            free = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        free = None
    left = _address_space_left()
    return free if left is None else left if free is None else min(free, left)


def _address_space_left() -> int | None:
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        if limit == resource.RLIM_INFINITY:
            return None
        with open("/proc/self/statm") as f:
            used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (ImportError, OSError, ValueError, IndexError):
        return None
    return max(limit - used, 0)


def forward_bytes(
    batch: int, image_size: tuple[int, int], channels: int, *, tokens: int = 0, width: int = 0, mlp: int = 0
) -> int:
    """The least a forward pass over `batch` float32 images holds at once: the images, and for a Vision Transformer
    (its `tokens` per image, `width` and `mlp` size) its position embeddings and one block's activations."""
    h, w = image_size
    floats = batch * channels * h * w + tokens * width + batch * tokens * (3 * width + mlp)
    return 4 * floats


def check_batch_room(
    batch: int, image_size: int | tuple[int, int], channels: int, what: str, error: type[Exception], *,
    hint: str, **model: int,
) -> None:  # fmt: skip
    """Raise `error` starting with `what` (the flags that chose these sizes) if a forward pass over `batch` images of
    `image_size` (and the model's sizes, see forward_bytes) needs more memory than this process may allocate, before
    any of it is allocated; `hint` says what to do."""
    size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    nbytes = forward_bytes(batch, size, channels, **model)
    available = memory_available()
    if available is not None and nbytes > available:
        images = f"{batch:,} image{'s' * (batch != 1)} of {channels}x{size[0]}x{size[1]} px"
        raise error(
            f"{what}: a forward pass over {images} needs at least {_size(nbytes)} of memory and this process has {_size(available)} "
            f"available; {hint}"
        )


def check_room(
    path: str | os.PathLike, nbytes: int, what: str, error: type[Exception], *, memory: bool = False
) -> None:
    """Raise `error` before `what` (`nbytes` to be written to `path`, and held in memory first when `memory`) is
    built, if the disk under `path` (or the machine's memory) has not that much free: a full disk found halfway
    through costs the time and leaves nothing."""
    folder = Path(path).absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    if nbytes > free:
        raise error(
            f"{path}: {what} needs about {_size(nbytes)} on disk and {folder} has {_size(free)} free; "
            "free some space or write it elsewhere"
        )
    available = memory_available() if memory else None
    if available is not None and nbytes > available:
        raise error(
            f"{path}: {what} needs about {_size(nbytes)} of memory and this machine has {_size(available)} available; "
            "choose a smaller model"
        )


MAX_CLASS_INDEX = 10**6  # a class list is made up to the largest index: no dataset has more classes than this


def is_class_index(label: str) -> bool:
    """Whether a label is a class index: ASCII digits, a leading minus allowed (Hugging Face's -1, no label). Other
    digits (superscripts, Arabic-Indic) make a class name: str.isdigit() takes them and int() refuses or reads them."""
    digits = label[1:] if label.startswith("-") else label
    return digits.isascii() and digits.isdigit()


def check_class_index(label: str, where: str, error: type[Exception]) -> None:
    """Raise `error` naming `where` if the class index `label` is over MAX_CLASS_INDEX, before any list is made up to it."""
    if is_class_index(label) and (len(label) > 7 or int(label) > MAX_CLASS_INDEX):
        shown = label[:20] + ("..." if len(label) > 20 else "")
        raise error(
            f"{where}: class index {shown} is over the limit of {MAX_CLASS_INDEX:,}; expected a class index or name"
        )


@dataclasses.dataclass(frozen=True)
class Limit:
    """What a field may hold, declared on the field itself (`limits`): `choices` (text, or each item of a list), a
    positive number, or an `interval` ("[" / "]" closed, "(" / ")" open; a tuple element by element). `says` words the
    expectation for a user where the interval alone would not ("a share from 0 to below 1"). A request's field whose
    value becomes a run-config `key` (train.steps) is checked there, by that key's field, and not again."""

    interval: str | None = None
    positive: bool = False
    choices: tuple[str, ...] = ()
    says: str | None = None
    key: str | None = None
    # the flag that gives a request's field, where it is not the field's name (--lr for lrs)
    flag: str | None = None
    # whole numbers only (a domain of DOMAINS; a field's type says it for the fields of a config)
    integer: bool = False

    def contains(self, value: float) -> bool:
        """Whether `value` lies in the interval (True without one)."""
        if self.interval is None:
            return True
        low, high = (float(x) for x in self.interval[1:-1].split(","))
        above = value > low if self.interval[0] == "(" else value >= low
        below = value < high if self.interval[-1] == ")" else value <= high
        return above and below


NO_LIMIT = Limit()


def limits(
    interval: str | None = None,
    *,
    positive: bool = False,
    choices: tuple[str, ...] = (),
    says: str | None = None,
    key: str | None = None,
    flag: str | None = None,
) -> dict[str, Limit]:
    """The metadata of a dataclass field that carries its limit: `field(default=..., metadata=limits("[0, 1)"))`."""
    return {"limit": Limit(interval, positive, choices, says, key, flag)}


MAX_THREADS = 1024  # CPU threads a process asks for; OpenMP fails on far more, a machine has far fewer
MAX_SIDE = 65_536  # pixels on a side of an image or a patch, the model's input as a file or flag gives it
MAX_CHANNELS = 1024  # input channels: RGB, grayscale, multispectral bands; a bound before anything is sized by it

# One bounded domain per key, whoever reads it: a flag, a run config (YAML or KEY=VALUE), vitkit's config.json and the
# foreign files whose keys map onto these (Hugging Face's image_std is std, timm's pretrained_cfg crop_pct is
# crop_pct). A dataclass field of that name takes its domain from here (`limit_of`), and the checkpoint readers check
# the keys they read with `number_problem`. mean and std are on pixels in [0, 1]: (x - mean) / std must stay a
# number every precision holds.
DOMAINS: dict[str, Limit] = {
    "mean": Limit("[-1000, 1000]", says="a number from -1000 to 1000 per input channel (pixels are in [0, 1])"),
    "std": Limit("[1e-4, 1000]", says="a number from 1e-4 to 1000 per input channel (pixels are in [0, 1])"),
    "background": Limit("[0, 1]", says="a value in [0, 1] per input channel (0 black, 1 white)"),
    "crop_pct": Limit("[0.1, 1]", says="a share from 0.1 to 1 (the centre crop over the resized image)"),
    "layer_norm_eps": Limit("(0, 1]", says="a small positive number, at most 1"),
    "rescale_factor": Limit("[1e-6, 1]", says="a number from 1e-6 to 1 (pixels of 0-255 times it)"),
    "image_size": Limit(f"[1, {MAX_SIDE}]", integer=True, says=f"whole numbers from 1 to {MAX_SIDE:,} px"),
    "patch_size": Limit(f"[1, {MAX_SIDE}]", integer=True, says=f"whole numbers from 1 to {MAX_SIDE:,} px"),
    "in_chans": Limit(f"[1, {MAX_CHANNELS}]", integer=True, says=f"from 1 to {MAX_CHANNELS} input channels"),
    "threads": Limit(f"[0, {MAX_THREADS}]", integer=True, says=f"a thread count from 0 (automatic) to {MAX_THREADS}"),
    "synthetic_classes": Limit(
        f"[1, {MAX_CLASS_INDEX}]", integer=True, says=f"a class count from 1 to {MAX_CLASS_INDEX:,}"
    ),
}


def domain(key: str) -> dict[str, Limit]:
    """The metadata of a dataclass field whose name is not its key's but whose domain is (augment.eval_crop_pct is a
    crop_pct): `field(default=..., metadata=domain("crop_pct"))`."""
    return {"limit": DOMAINS[key]}


def limit_of(field: dataclasses.Field) -> Limit:
    """The domain of a dataclass field: its key's in DOMAINS, else the limit declared on the field (NO_LIMIT where
    it declares none)."""
    return DOMAINS.get(field.name) or field.metadata.get("limit", NO_LIMIT)


def is_number(value: Any) -> bool:
    """An int or a float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def number_problem(key: str, value: Any, given: Any = None) -> str | None:
    """What is wrong with `value` (a number, or a list of numbers) as the key `key` takes it, by its domain in DOMAINS:
    not a number (a whole one where the domain says so), not finite, or outside the domain; worded after "KEY: ", with
    `given` (default `value`) quoted. None where nothing is."""
    domain = DOMAINS[key]
    values = value if isinstance(value, (list, tuple)) else (value,)
    whole = domain.integer
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) if whole else is_number(v) for v in values):
        return f"expected {domain.says}, got {shown(value if given is None else given)}"
    return limit_problem(tuple(values), domain, given=value if given is None else given)


def limit_problem(value: Any, limit: Limit, given: Any = None) -> str | None:
    """What is wrong with a converted `value` under `limit` and the bounds every number has (finite, at most MAX_INT,
    and a single number not negative), worded after "KEY: "; None where nothing is. `given`: the value as the user wrote it, quoted."""
    quoted = shown(value if given is None else given)
    values = value if isinstance(value, tuple) else (value,)
    wrong = next((v for v in values if limit.choices and v not in limit.choices), None)
    if wrong is not None:
        return f"expected one of {', '.join(limit.choices)}, got {shown(wrong)}"
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if any(isinstance(v, float) and not math.isfinite(v) for v in numbers):
        return f"expected a finite number, got {quoted}"
    if any(isinstance(v, int) and v > MAX_INT for v in numbers):
        return f"expected at most {MAX_INT}, got {quoted}"
    if limit.positive and any(v <= 0 for v in numbers):
        return f"expected {limit.says or 'a positive number'}, got {quoted}"
    if not all(limit.contains(v) for v in numbers):
        return f"expected {limit.says or f'a value in {limit.interval}'}, got {quoted}"
    # a list may hold negative numbers where its field allows them; a single number may not
    if not isinstance(value, tuple) and any(v < 0 for v in numbers):
        return f"expected a number >= 0, got {quoted}"
    return None


def check_fields(request: Any, error: type[Exception]) -> None:
    """Raise `error` naming the flag (--batch-size for batch_size, or the limit's own) of the first field of the dataclass `request` whose
    value breaks its declared limit or the bounds every number has (see limit_problem); None values are not given, and
    a field that becomes a run-config key is checked there."""
    for field in dataclasses.fields(request):
        value, limit = getattr(request, field.name), limit_of(field)
        problem = None if value is None or limit.key else limit_problem(value, limit)
        if problem:
            raise error(f"{limit.flag or '--' + field.name.replace('_', '-')}: {problem}")
