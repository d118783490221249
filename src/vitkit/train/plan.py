"""The run's plan: made once at the top (`resolve`: a run config and the run directory it names become a `Setup`: the
model config, built once here; the device, rank and world (train.distributed); the micro-batches, as the run config
checked them (config.check_batches); the checkpoints to resume from), and told to the user (`plan_block`: model, data,
run, an estimated time, with the timing probe behind the estimate); the run's rate and stretches as summary.json
reports them. Everything below reads the plan; a change of it (the precision chosen, the data's classes) is
dataclasses.replace."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch

from vitkit.checkpoint.runs import step_checkpoints
from vitkit.data.augment import AugmentConfig
from vitkit.data.scan import blank_words, other_background
from vitkit.data.split import where_from
from vitkit.data.summary import copies_warning, relabelled_warning
from vitkit.devices import COUNT_KEYS, cpu_compiler, pick_device, usable_cpus
from vitkit.errors import CheckpointError, ConfigError
from vitkit.files import refuse_foreign
from vitkit.models import BiTConfig, ConvStemConfig, ModelConfig, VisionTransformer
from vitkit.models.distill import one_output
from vitkit.train import distributed
from vitkit.train.config import RunConfig, epochs_done
from vitkit.train.objectives import OBJECTIVES
from vitkit.train.optim import describe
from vitkit.train.precision import autocast_dtype, timing_passes
from vitkit.train.state import RUN_FILES, Data, Setup, is_number


def model_of(config: RunConfig) -> ModelConfig:
    """The model config of a run config's model section (num_classes as the section says; the data's classes are set
    on it with `replace` once the data is read). The one place a command builds it: it is built once and handed down."""
    return config.model_config()


def resolve(config: RunConfig, out: Path, resume: bool) -> Setup:
    """The run's plan: its model config, device and processes, the micro-batch split, and whether `out` may be
    started or resumed."""
    t = config.train
    device = pick_device(t.device, key="train.device")
    # under torchrun: DDP or FSDP across processes
    world, device = distributed.setup(t.strategy, device)
    # split as the run config checked it (config.check_batches)
    micro = t.micro_batch or t.batch_size
    checkpoints = step_checkpoints(out)
    _check_out(out, resume, checkpoints)
    return Setup(
        device,
        world,
        autocast_dtype(t.precision, device),
        micro,
        t.batch_size // micro,
        checkpoints,
        model=model_of(config),
        compiles=t.compile and (device.type != "cpu" or cpu_compiler() is not None),
    )


def _check_out(out: Path, resume: bool, checkpoints: list[Path]) -> None:
    """`out` holds a run to resume, or none to start."""
    if resume and not checkpoints:
        raise CheckpointError(f"{out}: no checkpoint to resume from (expected {out}/checkpoints/step_*/)")
    if not resume and (checkpoints or (out / "final").exists()):
        raise ConfigError(f"--out {out}: already holds a run; continue it with --resume {out} or choose another --out")
    if resume:
        # its end replaces final/ as a whole: a user's file there (an export, notes) is refused now, not lost then
        refuse_foreign(out / "final", f"move it out of {out / 'final'}, then resume")
    theirs = [name for name in RUN_FILES if (out / name).exists()]
    # not a run stopped before its first checkpoint
    if not resume and theirs and not (out / "run.yaml").is_file():
        raise ConfigError(
            f"--out {out}: holds {theirs[0]}, which a run writes, and is not a vitkit run; choose a new or "
            "empty --out (nothing was changed)"
        )


def plan_block(
    config: RunConfig,
    model: VisionTransformer,
    data: Data,
    env: Setup,
    step: int,
    last: int,
    resumed_from: Path | None,
) -> str:
    """The block printed before training: model, its size and cost, the data of each split, the run, an estimated time."""
    lines = [_model_line(config, model), *_data_lines(config, data), _training_line(config, data, env, step, last)]
    lines += _objective_lines(config, data, env)
    lines.append(f"optimizer  {describe(config.train, getattr(model.config, 'depth', None))}")
    lines += [f"precision  {env.precision}"] if env.precision and step < last else []
    lines += [f"compile    {_compile_line(env)}"] if config.train.compile and step < last else []
    lines += augment_lines(config.augment, model.config.image_size[0], len(data.class_names))
    lines += _warnings(config, data, env)
    # one process of FSDP: the wrapped objective, not the model, unshards it
    if env.world.size == 1 and not env.world.sharded and step < last:
        step_s, probe = _time_step(model, env.micro, env.device, env.amp_dtype)
        # the probe runs eager: a compiled run's steps are faster
        eager, faster = ("an eager ", "compiled steps run faster; ") if env.compiles else ("", "")
        lines.append(
            f"estimated  {clock(step_s * env.accum * (last - step))} ({eager}forward + backward of {probe} "
            f"image{'s' * (probe > 1)} timed over {TIMED_PASSES} passes at start, the median, scaled to the batch; "
            f"{faster}data loading and evaluation come on top; the progress ETA follows the running rate)"
        )
    if resumed_from is not None:
        lines.insert(0, f"resuming from step {step} ({resumed_from})")
    return "\n".join(lines)


def _model_line(config: RunConfig, model: VisionTransformer) -> str:
    """The model: its name, input, shape, parameters and cost per image."""
    from vitkit.models.summary import count_flops

    c = model.config
    params = sum(p.numel() for p in model.parameters())
    if isinstance(c, BiTConfig):  # a ResNet: stages and widths, no tokens
        shape = f"units {'-'.join(map(str, c.layers))}, width {c.width * c.width_factor}, {c.stem} stem"
    else:
        b = c.backbone
        if b is None:
            stem = ""
        elif isinstance(b, ConvStemConfig):
            stem = f"conv stem {'-'.join(map(str, b.convs))} (stride {b.stride}), "
        else:
            stem = f"ResNet {'stem' if not b.layers else 'units ' + '-'.join(map(str, b.layers))} (width {b.width}), "
        dist = " + a distillation token" if c.distilled else ""
        shape = f"{stem}patch {c.patch_size[0]} ({c.num_patches} tokens{dist}), width {c.width}, depth {c.depth}"
        if c.attention_init == "mimetic" and c.depth and config.model.init is None:  # fresh attention weights
            shape += ", mimetic attention init"
    return (
        f"model      {model_name(config.model, c)} at {c.image_size[0]}x{c.image_size[1]}, "
        f"{c.in_chans} channel{'s' * (c.in_chans > 1)}, {shape}: {params:,} parameters, {count_flops(c) / 1e9:.3g} GFLOPs/image"
    )


def _data_lines(config: RunConfig, data: Data) -> list[str]:
    """The data, its classes, each split's images and the unreadable ones skipped."""
    record, names = data.record, data.class_names
    shown = ", ".join(names[:10]) + (f", ... ({len(names)} in all)" if len(names) > 10 else "")
    lines = [
        f"data       {record['name'] if record['name'] == 'synthetic' else record['path']}: {len(names)} class{'es' * (len(names) != 1)} ({shown})",
    ]
    skipped = data.unreadable(t_split := config.data.train_split, config.data.val_split)
    for name, split in record["splits"].items():
        lines.append(
            f"  {name:<8} {split['n']:>7,} image{'s' if split['n'] != 1 else ' '}  {where_from(split)}"
            + (
                f": {skipped[name]:,} unreadable skipped, {split['n'] - skipped[name]:,} read"
                if skipped.get(name)
                else ""
            )
        )
    lines += [f"  read     {note}" for note in dict.fromkeys(s.read_as for s in (data.train, data.val) if s.read_as)]
    if data.held_out is not None and data.held_out[1] is not None:
        # as held_out_list names them: files below the data folder, or rows of images in memory (IDX files); a
        # folder's val images may be in memory by now, read whole, but its list names their files
        named = "below the data folder" if data.val_files else "its row in the training file, from 0"
        lines.append(f"  listed   the {config.data.val_split} images in {data.held_out[0]} (one a line, {named})")
    # found while loading the data into memory, or listed by an earlier segment; a streamed run finds its own as it reads
    if len(data.bad):
        lines.append(
            f"  skipped  {len(data.bad):>7,} unreadable (data.on_error=skip, listed in bad_files.json): "
            + ", ".join(f"{k:,} of {name}" for name, k in skipped.items())
            + f"; {(read := len(data.train) - (0 if data.train.images is not None else skipped[t_split])):,} training "
            + ("image is" if read == 1 else "images are")
            + " read"
        )
    return lines


def _training_line(config: RunConfig, data: Data, env: Setup, step: int, last: int) -> str:
    """The steps left, the batch and schedule, the images they read and where they run."""
    t = config.train
    images = (last - step) * t.batch_size
    epochs = epochs_done(last - step, t.batch_size, len(data.train))
    threads = torch.get_num_threads()
    length = f" (train.epochs={t.epochs:g})" if t.epochs is not None else ""
    if step >= last:  # trained to its end before it stopped: only the final model and figures are left to write
        return f"training   all {t.steps} steps done; writing the final model and figures"
    return (
        f"training   steps {step + 1}-{last} of {t.steps}{length}, batch {t.batch_size}, lr {t.lr:g} ({t.optimizer}, {t.decay}): "
        f"{images:,} images ({epochs:.3g} epochs) on {env.device}, "
        + (f"{env.world.size} processes x " if env.world.size > 1 else "")
        + f"{threads} thread{'s' * (threads > 1)}"
        + _threads_why(t.threads, threads, env.device)
    )


def _threads_why(asked: int, threads: int, device: torch.device) -> str:
    """Why a CPU run computes on as many threads as it does, where vitkit chose them (train.threads=0)."""
    if asked or device.type != "cpu":
        return ""
    cpus = usable_cpus()
    named = next((key for key in COUNT_KEYS if os.environ.get(key)), None)
    if named:  # the user's count, which vitkit keeps
        return f" ({named}={os.environ[named]}; {cpus} usable CPU{'s' * (cpus > 1)})"
    if threads < cpus:
        return f" (of {cpus} usable CPUs, the rest busy with other processes at start; train.threads=N to set)"
    return f" (the {cpus} usable CPU{'s' * (cpus > 1)}; train.threads=N to set)"


def augment_lines(a: AugmentConfig, size: int, classes: int) -> list[str]:
    """Every augmentation the run applies, with its strength, why it is on and the key that turns it off; then the
    ones that are off, with the key that turns each on."""
    lines = [f"augment    {_crop(a, size)}"]
    if a.hflip > 0:
        lines.append(
            f"  hflip    {a.hflip:g}: a mirrored photo is as real as the photo; "
            "off with augment.hflip=0 for digits, text, signs and charts"
        )
    if a.randaugment_ops > 0:
        lines.append(
            f"  randaug  {a.randaugment_ops} ops at magnitude {a.randaugment_magnitude:g}/10: colour, contrast and "
            "geometry vary, against overfitting few images; off with augment.randaugment_ops=0"
        )
    for name, alpha in (("mixup", a.mixup), ("cutmix", a.cutmix)):
        if alpha > 0:
            lines.append(
                f"  {name:<8} alpha {alpha:g} in {a.mix_prob:.0%} of batches: blended images and targets, against "
                f"overfitting; off with augment.{name}=0"
            )
    if a.label_smoothing > 0:
        top = 1 - a.label_smoothing + a.label_smoothing / max(classes, 1)
        lines.append(
            f"  smooth   {a.label_smoothing:g} (label smoothing): target {top:.3g} on the label, against over-confident logits; "
            "off with augment.label_smoothing=0"
        )
    if a.erase > 0:
        lines.append(
            f"  erase    {a.erase:g} of images lose a rectangle of {a.erase_scale[0]:.0%}-{a.erase_scale[1]:.0%} of "
            "their area to noise, as if occluded; off with augment.erase=0"
        )
    off = [
        f"{what} ({key})"
        for what, key, on in (
            ("hflip", "augment.hflip=0.5 for photos, where a mirrored image is as real", a.hflip > 0),
            ("RandAugment", "augment.randaugment_ops=2", a.randaugment_ops > 0),
            ("mixup", "augment.mixup=0.2", a.mixup > 0),
            ("cutmix", "augment.cutmix=1", a.cutmix > 0),
            ("label smoothing", "augment.label_smoothing=0.1", a.label_smoothing > 0),
            ("random erasing", "augment.erase=0.25", a.erase > 0),
        )
        if not on
    ]
    return lines + ([f"  off      {', '.join(off)}"] if off else [])


def _crop(a: AugmentConfig, size: int) -> str:
    """The crop, its strength and how to change it."""
    if a.crop == "rrc":
        low, high = a.rrc_scale
        return (
            f"Inception crop of {low:.0%}-{high:.0%} of the image's area (aspect {a.rrc_ratio[0]:.3g}-{a.rrc_ratio[1]:.3g}) "
            f"resized to {size} px: scale and framing vary; augment.rrc_scale=[0.5,1] crops less, augment.crop=pad shifts"
        )
    if a.crop == "pad" and a.pad > 0:
        return (
            f"padded random crop, shifts of up to {a.pad} px ({a.pad / size:.0%} of {size} px): position varies; "
            "augment.pad=0 for none"
        )
    return f"no crop: the whole image at {size} px; augment.crop=pad shifts it, augment.crop=rrc crops it"


def _objective_lines(config: RunConfig, data: Data, env: Setup) -> list[str]:
    """The objective, where vitkit chose one the user did not name (train.objective=auto) other than classification;
    the teacher and the loss where the run distils."""
    if env.teacher is not None:
        return [env.teacher.line()]
    if config.train.objective != "auto" or env.objective == "classification":
        return []
    read = f" ({data.train.labels_read})" if data.train.labels_read else ""
    return [
        f"objective  {env.objective}: chosen by train.objective=auto (the default), as {data.train.source} gives each "
        f"image a set of labels{read}: a sigmoid per class"
    ]


def _compile_line(env: Setup) -> str:
    """train.compile: compiled (its first steps compile), or why the run trains eager."""
    if env.objective in OBJECTIVES and not OBJECTIVES[env.objective].compiles:
        return f"off: the {env.objective} objective trains eager (train.compile applies to classification)"
    if env.compiles:
        return "torch.compile (train.compile=true): the first steps compile the graph, then run fused"
    return (
        "off: train.compile=true, but torch.compile on the CPU needs a C++ compiler and none is on PATH (g++ or $CXX); "
        "training eager (install g++ to compile)"
    )


def _warnings(config: RunConfig, data: Data, env: Setup) -> list[str]:
    """Validation images that are copies of training images; copies of one image under different labels; classes far
    apart in size, or with no validation image; transparent images blank on the background; a warmup longer than the
    run."""
    t, lines = config.train, []
    if data.val_copies:
        lines.append(f"warning    {copies_warning('val', data.val_copies)}")
    if data.relabelled:
        lines.append(f"warning    {relabelled_warning(data.relabelled)}")
    if len(data.class_names) > 1 and env.objective != "masked_patch":  # the labels are learned
        lines += [f"warning    {line}" for line in class_warnings(data, config.data.val_split)]
    if data.blank[0]:
        background = data.shape.background
        said = blank_words(*data.blank, background, "training images")
        lines.append(f"warning    {said}; model.background={other_background(background)} shows them")
    if t.warmup_steps > t.steps:
        lines.append(
            f"warning    train.warmup_steps={t.warmup_steps} is more than train.steps={t.steps}: the learning rate only warms up "
            f"(to {t.lr * t.steps / t.warmup_steps:.3g} at the last step) and never reaches {t.lr:g}; lower train.warmup_steps"
        )
    return lines


# the largest class this many times the smallest: the plan says so
IMBALANCE = 5


def class_warnings(data: Data, val_split: str) -> list[str]:
    """The training classes far apart in size (IMBALANCE), and the classes the validation split holds no image of."""
    names, counts = data.class_names, data.train.class_counts()
    lines, small, large = [], int(counts.argmin()), int(counts.argmax())
    if counts[large] >= IMBALANCE * max(counts[small], 1):
        ratio = (
            f"the largest ({names[large]}) {counts[large] / counts[small]:.0f}x the smallest ({names[small]})"
            if counts[small]
            else f"none of {names[small]}"
        )
        lines.append(
            f"classes: {counts[small]:,} to {counts[large]:,} training images, {ratio}: top-1 leans to the large "
            "classes; read each class's accuracy in vitkit eval"
        )
    unscored = [name for name, n, v in zip(names, counts, data.val.class_counts()) if n and not v]
    if unscored:
        # a stratified hold-out leaves a class of one image whole in train
        single = [name for name, n in zip(names, counts) if name in unscored and n == 1 and data.val.held_out]
        lines.append(
            f"{val_split} holds no image of {len(unscored)} class{'es' * (len(unscored) != 1)} "
            f"({', '.join(unscored[:5])}{', ...' * (len(unscored) > 5)}): trained on, never scored"
            + (f"; a class of one image ({', '.join(single[:5])}) stays whole in train" if single else "")
        )
    return lines


def model_name(choice, c) -> str:
    """The run's model name (its model choice's) where the architecture is that model's, as registered, else its
    family (e.g. a name kept only as a label)."""
    family = "BiT ResNet" if isinstance(c, BiTConfig) else "ViT" if c.backbone is None else "hybrid ViT"
    known, name = choice.known, choice.name
    keys = (
        ("layers", "width_factor", "width", "stem")
        if isinstance(c, BiTConfig)
        else ("width", "depth", "mlp_dim", "num_heads")
    )
    same = type(known) is type(c) and all(getattr(known, k) == getattr(c, k) for k in keys)
    return name if same else family


# the timed pass's size on a CPU: large enough for per-batch overheads not to dominate, quick everywhere
PROBE_FLOPS = 2e10
# on a GPU: tens of ms of bf16 work, so that kernel launches do not dominate (as a 1-image pass's do)
GPU_PROBE_FLOPS = 2e13


def probe_images(config, micro: int, device: torch.device) -> int:
    """Images in the timed pass: up to 64 (never more than the micro-batch), fewer where that exceeds the device's
    budget of work (forward + backward: about 3x the forward's FLOPs)."""
    from vitkit.models.summary import count_flops

    budget = GPU_PROBE_FLOPS if device.type == "cuda" else PROBE_FLOPS
    return max(1, min(micro, 64, int(budget / (3 * count_flops(config)))))


TIMED_PASSES = 5  # after a warm-up pass; their median, as a busy machine slows some of them


def _time_step(
    model: VisionTransformer, micro: int, device: torch.device, amp_dtype: torch.dtype | None
) -> tuple[float, int]:
    """Seconds of one forward + backward pass of a micro-batch, from the median of `TIMED_PASSES` passes of
    `probe_images` images in the run's autocast dtype, scaled to `micro`; and the images timed. A pass of a few images
    costs more per image than a full batch does, so the probe is as large as the budget allows. (Eager: a compiled
    run's steps are somewhat quicker.)

    Runs on the model itself, within `timing_passes` (the run's weights, buffers, data order and random draws are
    untouched)."""
    c = model.config
    probe = probe_images(c, micro, device)
    x = torch.zeros(probe, c.in_chans, *c.image_size, device=device)
    with timing_passes(model, device):
        times = []
        for _ in range(1 + TIMED_PASSES):  # the first pass warms up
            start = time.perf_counter()
            with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
                loss = one_output(model(x)).float().logsumexp(-1).mean()
            loss.backward()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - start)
    return sorted(times[1:])[TIMED_PASSES // 2] * micro / probe, probe


def clock(seconds: float) -> str:
    """h:mm:ss"""
    m, s = divmod(round(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}"


def running_step_time(previous: float | None, seconds: float, steps: int, weight: float = 0.5) -> float | None:
    """The running seconds per step: an exponential moving average over logged windows of `steps` steps taking
    `seconds`, each window weighed `weight` against those before it (None until a window holds a step)."""
    if steps <= 0:
        return previous
    now = seconds / steps
    return now if previous is None else weight * now + (1 - weight) * previous


def mean_rate(train_rows: list[dict], batch_size: int) -> float | None:
    """Training images a second over the logged windows: their images over their time (an average of the windows'
    rates weighed a short last window as much as a long one)."""
    images = seconds = 0.0
    previous = 0
    for row in train_rows:
        n = (row["step"] - previous) * batch_size
        previous = row["step"]
        if is_number(row.get("img_s")) and row["img_s"] > 0:
            images, seconds = images + n, seconds + n / row["img_s"]
    return images / seconds if seconds else None


def segments(stretches: list[dict], steps: int) -> list[dict]:
    """Each stretch of the run with the steps it trained: [from_step, to_step). A stretch stopped before its first
    checkpoint is not among them (its steps were trained again by the next)."""
    ends = [s["from_step"] for s in stretches[1:]] + [steps]
    return [
        {"steps": [s["from_step"], end], **{k: v for k, v in s.items() if k != "from_step"}}
        for s, end in zip(stretches, ends)
    ]
