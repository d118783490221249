"""Recipe benchmark: the defaults of `vitkit train --data FOLDER` (the recipe fitted to the data) and of
`vitkit finetune` against the best recipe a budgeted search finds, on six kinds of data.

    nice python benchmarks/recipes.py --jobs 2 --results     # the whole benchmark: ~25 CPU-minutes on a quiet machine
    python benchmarks/recipes.py --datasets glyphs --budget 1 --finetune-budget 0 --scale 0.3   # a quick check

Each dataset is made by this script as a train/ + val/ image folder (PNG), deterministically from --seed:

| name     | what                                                                     | flips     |
|----------|--------------------------------------------------------------------------|-----------|
| fashion  | Fashion-MNIST (28 px grayscale), a seeded subset of its training images  | harmless  |
| glyphs   | the digits 0-9 rendered from the machine's TrueType fonts, 32 px gray    | wrong     |
| scenes   | RGB scenes: sky above ground, a sun, tree or house on the left or right  | wrong     |
| shapes   | RGB mirror-symmetric shapes and stripes on noisy backgrounds, 32 px      | harmless  |
| many     | 50 glyph classes (digits, capitals, distinct lowercase)                  | wrong     |
| tiny     | Fashion-MNIST, 16 training images per class (160 in all)                 | harmless  |

About 400 training and 300 validation images each (`DATASETS`): a small folder of one's own, where the fitted recipe
plans its shortest run (200 steps of 64, ~15 CPU-seconds on a quiet core).

The search is one factor at a time around the default (each candidate changes one thing: hflip, the crop, RandAugment
and its strength, lr, weight decay, mixup, the length), then one run combining every change that beat the default by
at least --combine-min points (the best of each kind). Candidates run in order until the dataset's budget (--budget,
in runs of the default's length: a run twice as long counts 2; a count of work, so a loaded machine runs the same
search, only slower) is spent; what did not fit is listed as skipped, and the tables give each run's CPU seconds.
The default is run twice (seeds 0 and 1, the second after the first candidate): their spread is the noise a gap
must beat. Every figure is top-1 on val/, the split the search picks on, so the best is optimistic by about that
noise.

Fine-tuning starts from the default run's model at 1.5x its image size, with what `vitkit finetune --data` fits to
the training images (length, batch, crop and flip: `finetune_setup.fitted_recipe`, the command's own path) and one
learning rate, the recipe's. Its search varies the crop, hflip and lr.

Writes benchmarks/results/recipes.csv (with --results; rendered into RESULTS.md by render.py) and
benchmarks/results/recipes.md (every run tried, with its val top-1 and CPU seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

sys.path.insert(0, str(Path(__file__).resolve().parent))
ROOT = Path(__file__).resolve().parents[1]

DIGITS = "0123456789"
# 50 classes that a font tells apart: digits, capitals, and lowercase letters whose shape differs from their capital
MANY = DIGITS + "ABCDEFGHIJKLMNOPQRSTUVWXYZ" + "abdefghimnqrty"
FASHION_DIR = Path(os.environ.get("VITKIT_DATA") or "/usr/share/datasets/fashion-mnist")


# ---------------------------------------------------------------------------------------------------------- the data


def _save(root: Path, split: str, label: str, index: int, image: Image.Image) -> None:
    folder = root / split / label
    folder.mkdir(parents=True, exist_ok=True)
    image.save(folder / f"{index:05d}.png", optimize=False)


def _write(root: Path, draw, classes: list[str], per_class: dict[str, int], seed: int) -> dict:
    """Draw per_class[split] images of every class with `draw(rng, class_index) -> Image`; the counts written."""
    for s, (split, n) in enumerate(per_class.items()):
        rng = random.Random(f"{seed}-{split}")
        for i in range(n * len(classes)):
            c = i % len(classes)
            _save(root, split, classes[c], i, draw(rng, c))
    return {"classes": len(classes), **{split: n * len(classes) for split, n in per_class.items()}}


def make_fashion(root: Path, seed: int = 0, train: int = 100, val: int = 50, source: Path = FASHION_DIR) -> dict:
    """Fashion-MNIST's training images as train/ and val/ folders: `train` and `val` images of each class, drawn by
    a seeded order (no image in both)."""
    sys.path.insert(0, str(ROOT / "src"))
    from vitkit.data.sources.idx import FASHION_MNIST_CLASSES, load_idx_split

    images, labels = load_idx_split(source, "train")
    order = np.random.default_rng(seed).permutation(len(labels))
    names = [n.replace("/", "-") for n in FASHION_MNIST_CLASSES]
    taken = {c: 0 for c in range(len(names))}
    for i in order:
        c = int(labels[i])
        if taken[c] >= train + val:
            continue
        split = "train" if taken[c] < train else "val"
        _save(root, split, names[c], int(i), Image.fromarray(images[i].reshape(28, 28)))
        taken[c] += 1
        if all(v >= train + val for v in taken.values()):
            break
    return {"classes": len(names), "train": train * len(names), "val": val * len(names)}


def fonts() -> list[str]:
    """The machine's TrueType fonts with upright, regular-width glyphs, sorted (the same list on every run here)."""
    found = []
    for folder in ("/usr/share/fonts", "/usr/local/share/fonts", str(Path.home() / ".fonts")):
        found += [str(p) for p in Path(folder).rglob("*.ttf")] if Path(folder).is_dir() else []
    return sorted(f for f in found if not any(w in Path(f).name for w in ("Math", "Symbol", "Emoji")))


def _glyph(text: str, rng: random.Random, faces: list[str], size: int) -> Image.Image:
    """One character in a random font, size, place and slant, white on a noisy dark ground."""
    pt = rng.randint(int(size * 0.55), int(size * 0.8))
    font = ImageFont.truetype(rng.choice(faces), pt) if faces else ImageFont.load_default(pt)
    canvas = Image.new("L", (size * 2, size * 2), 0)
    ImageDraw.Draw(canvas).text((size, size), text, fill=rng.randint(170, 255), font=font, anchor="mm")
    canvas = canvas.rotate(rng.uniform(-12, 12), resample=Image.BILINEAR)
    dx, dy = rng.randint(-size // 8, size // 8), rng.randint(-size // 8, size // 8)
    image = canvas.crop((size // 2 + dx, size // 2 + dy, size // 2 + dx + size, size // 2 + dy + size))
    noise = np.random.default_rng(rng.getrandbits(32)).normal(0, 12, (size, size))
    return Image.fromarray(np.clip(np.asarray(image, np.float32) + noise + rng.randint(0, 40), 0, 255).astype(np.uint8))


def make_glyphs(root: Path, seed: int = 0, chars: str = DIGITS, train: int = 100, val: int = 50, size: int = 32):
    """Characters rendered from fonts: one class per character (folder names spell them, cased ones as 'A_upper')."""
    faces = fonts()
    names = [f"{ch}_upper" if ch.isupper() else ch for ch in chars]
    return _write(root, lambda rng, c: _glyph(chars[c], rng, faces, size), names, {"train": train, "val": val}, seed)


def _noisy(rng: random.Random, size: int, top, bottom, split: float, amount: float = 14) -> np.ndarray:
    """An RGB ground: colour `top` above row split*size, `bottom` below it, with pixel noise."""
    g = np.random.default_rng(rng.getrandbits(32))
    rows = (np.arange(size) >= split * size)[:, None, None]
    base = np.where(rows, np.array(bottom, np.float32), np.array(top, np.float32))
    return np.broadcast_to(base, (size, size, 3)) + g.normal(0, amount, (size, size, 3))


def _jitter(rng: random.Random, colour, by: int = 30) -> tuple:
    return tuple(int(min(max(v + rng.randint(-by, by), 0), 255)) for v in colour)


SCENE_KINDS = ("sun", "tree", "house")


def _scene(rng: random.Random, c: int, size: int = 32) -> Image.Image:
    """Sky above ground; a sun in the sky, or a tree or a house standing on the ground, on the left or right half."""
    kind, right = SCENE_KINDS[c // 2], c % 2 == 1
    horizon = rng.uniform(0.45, 0.65)
    sky, ground = _jitter(rng, (110, 160, 230), 35), _jitter(rng, rng.choice([(70, 150, 60), (150, 120, 70)]), 30)
    image = Image.fromarray(np.clip(_noisy(rng, size, sky, ground, horizon), 0, 255).astype(np.uint8))
    d, h = ImageDraw.Draw(image), horizon * size
    x = rng.uniform(0.6, 0.85) * size if right else rng.uniform(0.15, 0.4) * size
    s = rng.uniform(0.12, 0.2) * size
    if rng.random() < 0.7:  # a cloud anywhere in the sky: a distractor
        cx, cy = rng.uniform(0, size), rng.uniform(0, h * 0.6)
        d.ellipse((cx - s, cy - s / 2, cx + s, cy + s / 2), fill=_jitter(rng, (235, 235, 235), 15))
    if kind == "sun":
        y = rng.uniform(0.1, 0.5) * h + s / 2
        d.ellipse((x - s / 2, y - s / 2, x + s / 2, y + s / 2), fill=_jitter(rng, (250, 210, 40), 5))
    elif kind == "tree":
        d.rectangle((x - s / 6, h - s * 1.2, x + s / 6, h + s / 4), fill=_jitter(rng, (100, 60, 30), 15))
        d.ellipse((x - s / 1.5, h - s * 2.2, x + s / 1.5, h - s * 0.8), fill=_jitter(rng, (30, 110, 40), 20))
    else:
        d.rectangle((x - s / 1.6, h - s, x + s / 1.6, h + s / 4), fill=_jitter(rng, (200, 80, 70), 40))
        d.polygon([(x - s / 1.2, h - s), (x + s / 1.2, h - s), (x, h - s * 1.8)], fill=_jitter(rng, (90, 50, 40), 20))
    return image


def make_scenes(root: Path, seed: int = 0, train: int = 100, val: int = 50) -> dict:
    """6 classes of RGB scenes with a natural orientation: what stands where (sky up, left or right) is the label."""
    names = [f"{k}_{side}" for k in SCENE_KINDS for side in ("left", "right")]
    return _write(root, _scene, names, {"train": train, "val": val}, seed)


SHAPES = ("disc", "ring", "square", "diamond", "plus", "triangle", "hstripes", "vstripes")


def _shape(rng: random.Random, c: int, size: int = 32) -> Image.Image:
    """A shape symmetric about the vertical axis (a mirror image is the same class), on a two-tone noisy ground."""
    back = [_jitter(rng, (rng.randint(0, 255),) * 3, 60) for _ in range(2)]
    image = Image.fromarray(np.clip(_noisy(rng, size, back[0], back[1], rng.random(), 20), 0, 255).astype(np.uint8))
    d, fg = ImageDraw.Draw(image), tuple(rng.randint(0, 255) for _ in range(3))
    s = rng.uniform(0.22, 0.38) * size
    x, y = rng.uniform(s, size - s), rng.uniform(s, size - s)
    kind, box = SHAPES[c], (x - s, y - s, x + s, y + s)
    if kind == "disc":
        d.ellipse(box, fill=fg)
    elif kind == "ring":
        d.ellipse(box, outline=fg, width=max(int(s / 3), 2))
    elif kind == "square":
        d.rectangle(box, fill=fg)
    elif kind == "diamond":
        d.polygon([(x, y - s), (x + s, y), (x, y + s), (x - s, y)], fill=fg)
    elif kind == "plus":
        d.rectangle((x - s, y - s / 3, x + s, y + s / 3), fill=fg)
        d.rectangle((x - s / 3, y - s, x + s / 3, y + s), fill=fg)
    elif kind == "triangle":
        d.polygon([(x - s, y + s), (x + s, y + s), (x, y - s)], fill=fg)
    else:
        step = rng.randint(3, 5)
        for k in range(0, size, step * 2):
            d.rectangle((0, k, size, k + step - 1) if kind == "hstripes" else (k, 0, k + step - 1, size), fill=fg)
    return image


def make_shapes(root: Path, seed: int = 0, train: int = 100, val: int = 50) -> dict:
    """8 classes of mirror-symmetric RGB shapes and stripes: flips are harmless here."""
    return _write(root, _shape, list(SHAPES), {"train": train, "val": val}, seed)


# name: (maker, images per class in train and val, whether a left-right flip keeps the class)
DATASETS = {
    "fashion": (make_fashion, {"train": 40, "val": 30}, True),
    "glyphs": (make_glyphs, {"train": 40, "val": 30}, False),
    "scenes": (make_scenes, {"train": 67, "val": 50}, False),
    "shapes": (make_shapes, {"train": 50, "val": 38}, True),
    "many": (lambda root, seed, **n: make_glyphs(root, seed, MANY, **n), {"train": 8, "val": 6}, False),
    "tiny": (make_fashion, {"train": 16, "val": 30}, True),
}


def make(name: str, root: Path, seed: int = 0, scale: float = 1.0) -> dict:
    """Dataset `name` as an image folder in `root` (train/ and val/), its per-class counts times `scale`."""
    maker, counts, _ = DATASETS[name]
    return maker(root, seed, **{k: max(int(v * scale), 1) for k, v in counts.items()})


# ---------------------------------------------------------------------------------------------------------- the runs

# every run: one compute thread (the machine is shared), images read in this process, no checkpoints between the end
# points, no progress bar; these change the time a run takes, not what it learns
QUIET = ["train.threads=1", "train.progress=false", "data.workers=0", "train.checkpoint_every=1000000"]


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _no_plots() -> None:
    """Runs here write no PNG curves (matplotlib's time is not the recipe's)."""
    import vitkit.train.loop as loop

    loop._plot = lambda *args, **kwargs: None


def train_run(folder: Path, out: Path, changes: list[str]) -> dict:
    """`vitkit train --data folder --out out CHANGES...` in this process: the fitted recipe, then `changes`."""
    from vitkit.train import train
    from vitkit.train.config import load_run_config
    from vitkit.train.fit import fitted_unless_named, layers

    overrides = [*QUIET, *changes]
    fitted = fitted_unless_named(str(folder), False, overrides, "train")
    config = load_run_config(None, [*overrides, ("data.path", str(folder))], base=layers(fitted))
    started = cpu_seconds()
    summary = train(config, out)
    return {"top1": summary["final_val_top1"], "cpu_s": cpu_seconds() - started, "steps": summary["steps"]}


def finetune_plan(folder: Path, size: int) -> tuple[dict, str]:
    """The length, batch and augmentation `vitkit finetune --data folder --image-size size` fits to the training
    images (`finetune_setup.fitted_recipe`, the command's own path): the fitted recipe's sections and the line it
    prints."""
    import contextlib
    import io

    from vitkit.train.finetune import finetune_recipe
    from vitkit.train.finetune_setup import fitted_recipe
    from vitkit.train.requests import FinetuneRequest

    base = [*QUIET, ("data.path", str(folder))]
    recipe = finetune_recipe(None, base)
    # one learning rate, the recipe's (the search varies it one factor at a time)
    request = FinetuneRequest(checkpoint="", out="", image_size=(size, size), lrs=(recipe.train.lr,))
    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        fitted, _ = fitted_recipe(request, recipe, base)
    return fitted.to_dict(), said.getvalue().strip().removeprefix("vitkit finetune: ")


def finetune_run(folder: Path, start: Path, out: Path, changes: list[str], size: int, fitted: dict) -> dict:
    """`vitkit finetune --from start --data folder --image-size size` with one learning rate, in this process: the
    fitted recipe's sections (`finetune_plan`), then `changes`."""
    from vitkit.train.config import load_run_config
    from vitkit.train.finetune import finetune

    recipe = load_run_config(None, list(changes), base=fitted)
    started = cpu_seconds()
    result = finetune(recipe, start / "final", out, image_size=size)
    return {"top1": result["best"]["final_val_top1"], "cpu_s": cpu_seconds() - started, "steps": recipe.train.steps}


# the one-factor-at-a-time search: (kind, label, overrides); a kind's best joins the combined run
TRAIN_SEARCH = [
    ("hflip", "hflip=0.5", ["augment.hflip=0.5"]),
    ("length", "50 epochs", ["train.epochs=50"]),
    ("length", "200 epochs", ["train.epochs=200"]),
    ("randaug", "RandAugment 2/5", ["augment.randaugment_ops=2", "augment.randaugment_magnitude=5"]),
    ("crop", "rrc 0.35-1", ["augment.crop=rrc", "augment.rrc_scale=[0.35,1]"]),
    ("lr", "lr=1e-3", ["train.lr=1e-3"]),
    ("mixup", "mixup 0.2", ["augment.mixup=0.2"]),
    ("wd", "wd=0.15", ["train.weight_decay=0.15"]),
    ("randaug", "RandAugment 2/9", ["augment.randaugment_ops=2", "augment.randaugment_magnitude=9"]),
    ("crop", "crop=none", ["augment.crop=none"]),
    ("lr", "lr=1e-2", ["train.lr=1e-2"]),
    ("wd", "wd=0.01", ["train.weight_decay=0.01"]),
]
FINETUNE_SEARCH = [
    ("crop", "rrc 0.35-1", ["augment.crop=rrc", "augment.rrc_scale=[0.35,1]"]),
    ("hflip", "hflip=0.5", ["augment.hflip=0.5"]),
    ("lr", "lr=0.003", ["train.lr=0.003"]),
    ("lr", "lr=0.03", ["train.lr=0.03"]),
]


def combined(tried: list[dict], baseline: float, min_gain: float) -> tuple[str, list[str]] | None:
    """The best change of each kind that beat `baseline` by `min_gain` points, as one candidate; None unless two."""
    best: dict[str, dict] = {}
    for t in tried:
        if t.get("kind") and t.get("top1") is not None and (t["top1"] - baseline) * 100 >= min_gain:
            if t["kind"] not in best or t["top1"] > best[t["kind"]]["top1"]:
                best[t["kind"]] = t
    if len(best) < 2:
        return None
    picked = sorted(best.values(), key=lambda t: -t["top1"])
    return " + ".join(t["label"] for t in picked), [o for t in picked for o in t["changes"]]


def search(run, candidates: list, budget: float, min_gain: float, noise_run: bool) -> list[dict]:
    """Run the default, then (with `noise_run`) the default with another seed after the first candidate, then the
    other `candidates` and their combination while `budget` runs last (a run twice the default's length counts 2);
    `run(changes) -> {top1, cpu_s, steps}`. Every run, tried or skipped, in order."""
    tried = [{"label": "default", "changes": [], **run([])}]
    base, spent = tried[0], 1.0
    plan = list(candidates)
    if noise_run:
        plan.insert(1, (None, "default, seed 1", ["train.seed=1"]))
    while plan:
        kind, label, changes = plan.pop(0)
        cost = next((float(c.split("=")[1]) / 30 for c in changes if c.startswith("train.epochs=")), 1.0)
        if spent + cost > budget + 1e-9:
            tried.append({"kind": kind, "label": label, "changes": changes, "top1": None, "skipped": "budget"})
            continue
        tried.append({"kind": kind, "label": label, "changes": changes, **run(changes)})
        spent += cost
        if not plan and not any(t["label"].count(" + ") for t in tried):
            both = combined(tried, base["top1"], min_gain)
            if both:
                plan.append((None, *both))
    return tried


def best_of(tried: list[dict]) -> dict:
    """The run with the highest val top-1; the default's second seed is no other recipe, so not a candidate."""
    return max(
        (t for t in tried if t.get("top1") is not None and t["label"] != "default, seed 1"), key=lambda t: t["top1"]
    )


def noise_of(tried: list[dict]) -> float | None:
    """Points between the default's two seeds, where both ran."""
    seeds = [t["top1"] for t in tried if t["label"] in ("default", "default, seed 1") and t.get("top1") is not None]
    return abs(seeds[0] - seeds[1]) * 100 if len(seeds) == 2 else None


def bench_dataset(name: str, work: Path, args) -> dict:
    """Make dataset `name` in `work`, search its training recipe and then its fine-tuning recipe; the record."""
    _no_plots()  # in this process (a pool's worker too)
    folder, runs = work / name / "data", work / name / "runs"
    counts = make(name, folder, args.seed, args.scale)
    print(f"== {name}: {json.dumps(counts)}", flush=True)
    n = {"i": 0}

    def out(prefix: str) -> Path:
        n["i"] += 1
        return runs / f"{prefix}{n['i']:02d}"

    known = args.known.get(name, {}) if args.known else {}  # --reuse: the page's runs, the default's excepted
    spend, (train, tune) = (args.budget, args.combine_min), (known.get(p, {}) for p in ("train", "finetune"))
    candidates = TRAIN_SEARCH[: args.candidates]
    tried = search(lambda ch: train.get(tuple(ch)) or train_run(folder, out("t"), ch), candidates, *spend, True)
    record = {"name": name, "counts": counts, "flip_safe": DATASETS[name][2], "train": tried, "finetune": []}
    if args.finetune_budget > 0:
        start, size = runs / "t01", _fitted_size(runs / "t01") * 3 // 2
        length, said = finetune_plan(folder, size)
        record.update(ft_size=size, ft_length=said, start_top1=tried[0]["top1"])
        record["finetune"] = search(
            lambda ch: tune.get(tuple(ch)) or finetune_run(folder, start, out("f"), ch, size, length),
            FINETUNE_SEARCH,
            args.finetune_budget,
            args.combine_min,
            False,
        )
    if not args.keep:
        shutil.rmtree(runs, ignore_errors=True)
    return record


def _fitted_size(run: Path) -> int:
    from vitkit.checkpoint.native import read_native_config

    config, _ = read_native_config(run / "final")
    return config.image_size[0] if isinstance(config.image_size, (tuple, list)) else config.image_size


# ---------------------------------------------------------------------------------------------------------- reports

TITLE = "Recipes: defaults against a budgeted search (every run: results/recipes.md)"
KINDS = {
    "fashion": "Fashion-MNIST subset",
    "glyphs": "digits from fonts",
    "scenes": "RGB scenes, left/right labels",
    "shapes": "mirror-symmetric RGB shapes",
    "tiny": "tiny Fashion-MNIST",
    "many": "50 glyph classes",
}


def _table(tried: list[dict], base: float) -> list[str]:
    lines = ["| run | overrides | val top-1 | vs default (points) | steps | CPU s |", "|---|---|---|---|---|---|"]
    for t in tried:
        changes = " ".join(f"`{c}`" for c in t["changes"]) or "-"
        if t.get("top1") is None:
            lines.append(f"| {t['label']} | {changes} | not run ({t.get('skipped')}) | - | - | - |")
            continue
        delta = "-" if t["label"] == "default" else f"{(t['top1'] - base) * 100:+.1f}"
        lines.append(f"| {t['label']} | {changes} | {t['top1']:.4f} | {delta} | {t['steps']} | {t['cpu_s']:.0f} |")
    return lines


INTRO = (
    "Written by `benchmarks/recipes.py --results`, one section per dataset, each naming the command, machine and date "
    "that made it. Every figure is val top-1. The default ran with seeds 0 and 1: their spread is the noise a gap "
    "must beat. The search picks on val, so its best is optimistic by about that noise."
)


def section(r: dict, said: str) -> str:
    """One dataset's runs, tried and skipped, as a section of benchmarks/results/recipes.md."""
    c = r["counts"]
    lines = [f"## {r['name']}: {KINDS[r['name']]}", "", said, ""]
    lines += [
        f"{c['classes']} classes, {c['train']} train / {c['val']} val images; "
        f"flips {'harmless' if r['flip_safe'] else 'wrong'}.",
        "",
    ]
    lines += ["`vitkit train --data` (the fitted recipe, then each run's overrides):", ""]
    lines += _table(r["train"], r["train"][0]["top1"])
    if r["finetune"]:
        lines += [
            "",
            f"`vitkit finetune` from the default run (val top-1 {r['start_top1']:.4f}) at {r['ft_size']} px, "
            f"one lr; {r['ft_length']}:",
            "",
        ]
        lines += _table(r["finetune"], r["finetune"][0]["top1"])
    return "\n".join(lines)


def merged(old: str, records: list[dict], said: str) -> str:
    """The page `old` with the sections of `records` written anew (other datasets' sections kept), in DATASETS order."""
    sections = {chunk.split(":", 1)[0]: "## " + chunk.strip("\n") for chunk in old.split("\n## ")[1:]}
    sections.update({r["name"]: section(r, said) for r in records})
    return "\n\n".join([f"# {TITLE}", INTRO, *(sections[n] for n in DATASETS if n in sections)]) + "\n"


def _row(r: dict, part: str, claim: str, model: str) -> dict:
    tried = r[part]
    base, best = tried[0], best_of(tried)
    noise, ran = noise_of(tried), [t for t in tried if t.get("top1") is not None]
    c = r["counts"]
    return {
        "id": f"recipes-{r['name']}-{part}",
        "benchmark": TITLE,
        "claim": f"{KINDS[r['name']]}: {claim}",
        "figure": f"{base['top1']:.4f}",
        "unit": "val top-1",
        "against": f"best {best['top1']:.4f} ({best['label']}), {(best['top1'] - base['top1']) * 100:+.1f} points"
        + (f"; noise {noise:.1f}" if noise is not None else ""),
        "model": model,
        "setting": f"{c['train']}/{c['val']} images, {c['classes']} classes; {len(ran)} runs, "
        f"{sum(t['cpu_s'] for t in ran):.0f} CPU-s",
    }


def rows(records: list[dict]) -> list[dict]:
    """Two rows a dataset (train, finetune): the default's val top-1, against the searched best; every run tried is
    in results/recipes.md."""
    out = []
    for r in records:
        out.append(_row(r, "train", "`train --data` defaults", "fitted"))
        if r["finetune"]:
            claim = f"`finetune` defaults at {r['ft_size']} px, from {r['start_top1']:.4f}"
            out.append(_row(r, "finetune", claim, r["ft_length"].split(": ", 1)[-1]))
    return out


SAID = re.compile(
    r"^`(?P<command>.+)` on (?P<machine>.+?), (?P<date>\d{4}-\d\d-\d\d \d\d:\d\d UTC); load average (?P<load>[\d.]+)"
)
COUNTS = re.compile(r"^(\d+) classes, (\d+) train / (\d+) val images; flips (harmless|wrong)\.$")
FINETUNE_LINE = re.compile(r"val top-1 ([\d.]+)\) at (\d+) px, one lr; (.+):$")


def _run_of(line: str) -> dict:
    """A table line of `_table` back as a run."""
    label, changes, top1, _, steps, cpu = (c.strip() for c in line.strip().strip("|").split(" | "))
    run = {"label": label, "changes": [] if changes == "-" else [c.strip("`") for c in changes.split("` `")]}
    if top1.startswith("not run"):
        return {**run, "top1": None, "skipped": top1[len("not run (") : -1]}
    return {**run, "top1": float(top1), "steps": int(steps), "cpu_s": float(cpu)}


def _known(page: Path) -> dict:
    """{dataset: {"train" | "finetune": {overrides: run}}} of the runs on `page` that ran, the default's excepted."""
    known: dict = {}
    for record, _ in records_from_page(page.read_text(encoding="utf-8")) if page.exists() else []:
        for part in ("train", "finetune"):
            runs = {tuple(t["changes"]): t for t in record[part] if t["changes"] and t.get("top1") is not None}
            known.setdefault(record["name"], {})[part] = runs
    return known


def records_from_page(text: str) -> list[tuple[dict, dict]]:
    """Each dataset's record back from the page `merged` writes, with what its section says of the run that made it
    (command, machine, date, load)."""
    found = []
    for chunk in text.split("\n## ")[1:]:
        name, said, part = chunk.split(":", 1)[0], {}, "train"
        record = {"name": name, "flip_safe": DATASETS[name][2], "train": [], "finetune": []}
        for line in chunk.splitlines():
            if SAID.match(line):
                said = SAID.match(line).groupdict()
            elif COUNTS.match(line):
                classes, train, val, flips = COUNTS.match(line).groups()
                record["counts"] = {"classes": int(classes), "train": int(train), "val": int(val)}
            elif FINETUNE_LINE.search(line):
                start, size, length = FINETUNE_LINE.search(line).groups()
                record.update(start_top1=float(start), ft_size=int(size), ft_length=length)
                part = "finetune"
            elif line.startswith("| ") and not line.startswith("| run |"):
                record[part].append(_run_of(line))
        found.append((record, said))
    return found


def rows_from_page(page: Path) -> None:
    """Write recipes.csv's rows anew from recipes.md (no run): each row with its section's command, machine, date."""
    from rows import write_rows

    for record, said in records_from_page(page.read_text(encoding="utf-8")):
        table = rows([record])
        for row in table:
            row.update(command=said["command"], machine=said["machine"], date=said["date"])
            row["setting"] = f"{row['setting']}; load {said['load']}"
        write_rows("recipes", table)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated, of: " + ", ".join(DATASETS))
    p.add_argument("--budget", type=float, default=12, help="training runs per dataset, the default's included")
    p.add_argument("--finetune-budget", type=float, default=4, help="fine-tuning runs per dataset (0: off)")
    p.add_argument("--combine-min", type=float, default=1.0, help="points a change must gain to join the combination")
    p.add_argument("--scale", type=float, default=1.0, help="images per class times this (a quick check: 0.2)")
    p.add_argument("--seed", type=int, default=0, help="the data's seed")
    p.add_argument("--work", help="folder for the data and runs (default: a temporary one, removed)")
    p.add_argument("--keep", action="store_true", help="keep the run folders")
    p.add_argument("--jobs", type=int, default=1, help="datasets benchmarked at once, one process each (default 1)")
    p.add_argument("--candidates", type=int, default=len(TRAIN_SEARCH), help="try only the first N training changes")
    p.add_argument(
        "--reuse",
        action="store_true",
        help="read runs already in recipes.md with the same overrides instead of running them again (a run is "
        "deterministic for its seed; the default always runs, fine-tuning starts from it)",
    )
    p.add_argument("--rows-from-page", action="store_true", help="write recipes.csv from recipes.md, running nothing")
    p.add_argument("--results", action="store_true", help="write benchmarks/results/recipes.csv and recipes.md")
    args = p.parse_args(argv)
    if args.rows_from_page:
        rows_from_page(ROOT / "benchmarks" / "results" / "recipes.md")
        return 0
    names = [n for n in args.datasets.split(",") if n]
    unknown = [n for n in names if n not in DATASETS]
    if unknown:
        p.error(f"--datasets: no dataset {unknown[0]!r}; one of {', '.join(DATASETS)}")
    args.known = _known(ROOT / "benchmarks" / "results" / "recipes.md") if args.reuse else None
    _no_plots()
    work = Path(args.work or tempfile.mkdtemp(prefix="vitkit-recipes-"))
    wall, load = time.monotonic(), os.getloadavg()[0]
    try:
        records = []
        for record in _records(names, work, args):  # reported as each dataset ends: a stopped run keeps the rest
            records.append(record)
            records.sort(key=lambda r: names.index(r["name"]))
            report(records, args, time.monotonic() - wall, load)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def _records(names: list[str], work: Path, args):
    """Each dataset's record as it ends; with --jobs N, N datasets at once, one process each."""
    if args.jobs <= 1:
        yield from (bench_dataset(name, work, args) for name in names)
        return
    import functools
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(args.jobs, maxtasksperchild=1) as pool:
        yield from pool.imap_unordered(functools.partial(_bench, work=work, args=args), names, chunksize=1)


def _bench(name: str, work: Path, args) -> dict:
    return bench_dataset(name, work, args)


def report(records: list[dict], args, wall: float, load: float) -> None:
    """Print the sections of `records`; with --results, upsert their rows and their sections of recipes.md."""
    from rows import command, fmt, machine, today, write_rows

    said = (
        f"`{command()}` on {machine()}, {today()}; load average {load:.1f} at the start (a machine shared with other "
        f"work), {wall / 60:.0f} min wall by then; one compute thread per run."
        + (" Runs with the same overrides already on this page were read from it (`--reuse`)." if args.reuse else "")
    )
    print(merged("", records, said))
    if args.results:
        table = rows(records)
        for row in table:
            row["setting"] = f"{row['setting']}; load {fmt(load, 1)}"
        write_rows("recipes", table)
        page = ROOT / "benchmarks" / "results" / "recipes.md"
        page.write_text(merged(page.read_text(encoding="utf-8") if page.exists() else "", records, said), "utf-8")


if __name__ == "__main__":
    sys.exit(main())
