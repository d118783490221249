"""Family benchmark: which model `vitkit train --data FOLDER` should fit to a small set of one's own, measured.

    nice python benchmarks/families.py --runs /tmp/families --results            # every kind: hours on 1 thread
    python benchmarks/families.py --kinds digits,glyphs --runs /tmp/families       # some kinds
    python benchmarks/families.py --kinds icons16 --seeds 3 --runs /tmp/families   # each figure a mean of 3 seeds

For each kind of data it trains, one thread each, in this process (CPU seconds counted):
- `fitted`: the recipe `vitkit train --data` fits today, as it is (its family, size, length and augmentation);
- `plain`, `hybrid`, `deep`, `conv`, `resnet`: that recipe with each model family in its place (a plain ViT on a
  4x4 grid of patches; the conv-stem hybrid; the deep stem with one block; that stem alone, average-pooled (a conv
  net, depth 0); BiT's small ResNet R11 at the same size), each run as long as the fitted run's CPU time allows: a
  training step of each is timed side by side with the fitted model's (`matched_steps`), and its step count scaled
  by the ratio. The fitted family's own row is the fitted run.
and fits two pixel baselines on the same train/ split, scored on the same val/ split: a multinomial logistic
regression and a random forest of 500 trees on 32x32 RGB pixels (RGBA composited on white). `best` is the best
val top-1 of every model above (and of --try recipes), so the fitted default's distance to it is plain.
Every figure is top-1 on val/, which no run picks on (each run's final step is its figure). A val split of a few
hundred images moves several points between seeds: --seeds N trains each model with train.seed 0..N-1 and fits the
forest with N random states, and each figure is their mean (the rows list each seed's).

| kind         | what                                                                              | train  | val   |
|--------------|-----------------------------------------------------------------------------------|--------|-------|
| icons        | the Adwaita icon theme's PNGs (RGBA, 32-96 px), 6 contexts, split by icon name    | 722    | 240   |
| icons16      | the same theme's 16 and 24 px PNGs (RGBA), split by icon name                     | ~720   | ~240  |
| fashion500   | Fashion-MNIST (28 px grayscale), 50 training images a class                       | 500    | 500   |
| fashion2000  | Fashion-MNIST, 200 training images a class                                        | 2,000  | 1,000 |
| fashion10000 | Fashion-MNIST, 1,000 training images a class                                      | 10,000 | 2,000 |
| digits       | handwritten digits (scikit-learn's copy of UCI's 8x8 set), a seeded 60/20 split   | 1,078  | 359   |
| glyphs       | digits rendered from the machine's fonts (recipes.py)                             | 400    | 300   |
| scenes       | RGB scenes whose label is what stands where (recipes.py)                          | 420    | 300   |

Writes benchmarks/results/families.csv (with --results): per kind one row for each model and baseline, and the
fitted row naming what it beat. A run directory already in --runs (RUNS/KIND/NAME/final) is read, not trained again.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import shlex
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recipes
from rows import add_results_arguments, write_asked_rows

THEME = Path("/usr/share/icons/Adwaita")
ICON_CLASSES = ("actions", "devices", "emotes", "mimetypes", "places", "status")


def make_icons(root: Path, sizes=("32x32", "48x48", "64x64", "96x96"), seed: int = 0) -> dict:
    """The theme's PNG icons of six contexts, each icon name in one split only (60% train, 20% val, 20% test), each
    name at up to two of `sizes`."""
    rng, counts = random.Random(seed), {}
    for c in ICON_CLASSES:
        by_name: dict[str, list[Path]] = {}
        for size in sizes:
            for p in sorted((THEME / size / c).glob("*.png")):
                by_name.setdefault(p.name, []).append(p)
        names = sorted(by_name)
        rng.shuffle(names)
        a, b = round(len(names) * 0.6), round(len(names) * 0.8)
        for split, part in (("train", names[:a]), ("val", names[a:b]), ("test", names[b:])):
            folder = root / split / c
            folder.mkdir(parents=True, exist_ok=True)
            for name in part:
                for p in rng.sample(by_name[name], min(2, len(by_name[name]))):
                    shutil.copyfile(p, folder / f"{p.parent.parent.name}-{name}")
                    counts[split] = counts.get(split, 0) + 1
    return counts


def make_digits(root: Path, seed: int = 0) -> dict:
    """scikit-learn's bundled copy of the UCI handwritten digits (1,797 images, 8x8, 17 gray levels) as 8x8 PNGs:
    a seeded 60% train, 20% val, 20% test, stratified by digit."""
    import sklearn.datasets

    table = np.loadtxt(gzip.open(Path(sklearn.datasets.__file__).parent / "data" / "digits.csv.gz"), delimiter=",")
    rng, counts = np.random.default_rng(seed), {}
    for digit in range(10):
        rows = table[table[:, -1] == digit]
        rows = rows[rng.permutation(len(rows))]
        a, b = round(len(rows) * 0.6), round(len(rows) * 0.8)
        for split, part in (("train", rows[:a]), ("val", rows[a:b]), ("test", rows[b:])):
            folder = root / split / str(digit)
            folder.mkdir(parents=True, exist_ok=True)
            for i, row in enumerate(part):
                pixels = np.round(row[:64].reshape(8, 8) * 255 / 16).astype(np.uint8)
                Image.fromarray(pixels).save(folder / f"{i:04d}.png")
            counts[split] = counts.get(split, 0) + len(part)
    return counts


KINDS = {
    "icons": make_icons,
    "icons16": lambda root: make_icons(root, sizes=("16x16", "24x24")),
    "fashion500": lambda root: recipes.make_fashion(root, train=50, val=50),
    "fashion2000": lambda root: recipes.make_fashion(root, train=200, val=100),
    "fashion10000": lambda root: recipes.make_fashion(root, train=1000, val=200),
    "digits": make_digits,
    "glyphs": lambda root: recipes.make_glyphs(root, train=40, val=30),
    "scenes": lambda root: recipes.make_scenes(root, train=70, val=50),
}
FAMILIES = ("plain", "hybrid", "deep", "conv", "resnet")


def fitted_recipe(folder: Path) -> tuple[dict, str]:
    """The typed first layer `vitkit train --data folder` fits ({"section.key": value}), and the line it prints."""
    import contextlib
    import io

    from vitkit.train.fit import fitted_unless_named

    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        fitted = fitted_unless_named(str(folder), False, list(recipes.QUIET), "train")
    print(said.getvalue(), end="", flush=True)
    return fitted, said.getvalue()


def family_of(fitted: dict) -> str:
    """The family of a fitted recipe's model."""
    from vitkit.train.fit import family_model

    size = fitted["model.image_size"]
    model = {k: v for k, v in fitted.items() if k.startswith("model.")}
    vits = (f for f in FAMILIES if f != "resnet")  # the families family_model builds
    return next((f for f in vits if family_model(f, size).items() <= model.items()), "other")


def with_family(fitted: dict, family: str) -> dict:
    """The fitted recipe with `family` as its model: the same size, channels and background, the rest of the recipe
    as fitted."""
    from vitkit.train.fit import family_model

    size = fitted["model.image_size"]
    if family == "resnet":
        kept = {k: v for k, v in fitted.items() if not k.startswith("model.")}
        model = {k: fitted[k] for k in ("model.image_size", "model.in_chans", "model.background") if k in fitted}
        return {**kept, "model.name": "bit_r11_28", **model}
    return {**fitted, **family_model(family, size)}


def run_config(folder: Path, recipe: dict, changes: list[str]):
    from vitkit.train.config import load_run_config
    from vitkit.train.fit import layers

    return load_run_config(None, [*recipes.QUIET, *changes, ("data.path", str(folder))], base=layers(recipe))


def step_seconds(configs: dict, rounds: int = 7) -> dict[str, float]:
    """CPU seconds of one training step (forward + backward of a batch) of each run config's model, timed side by
    side: the models take turns, and each one's median counts, so a busy machine slows them alike."""
    import torch

    from vitkit.models.registry import build_model

    torch.set_num_threads(1)
    timed = {}
    for name, config in configs.items():
        model = build_model(config.model_config().replace(num_classes=10))
        c = model.config
        x = torch.rand(config.train.batch_size, c.in_chans, *c.image_size)
        timed[name] = (model, x, [])
    for _ in range(rounds):
        for model, x, times in timed.values():
            start = time.process_time()
            model(x).logsumexp(-1).mean().backward()
            times.append(time.process_time() - start)
    return {name: statistics.median(times[1:]) for name, (_, _, times) in timed.items()}


def matched_steps(fitted_steps: int, seconds: dict[str, float], fitted: str) -> dict[str, int]:
    """Each family's step count at the fitted run's CPU time: its steps times the fitted model's step time over the
    family's."""
    return {name: max(round(fitted_steps * seconds[fitted] / s), 1) for name, s in seconds.items()}


def train_once(folder: Path, out: Path, recipe: dict, changes: list[str]) -> dict:
    """val top-1, CPU seconds and steps of one run (read from out/summary.json where it finished before)."""
    from vitkit.train import train

    if (out / "final").is_dir() and (out / "record.json").is_file():
        return json.loads((out / "record.json").read_text())
    shutil.rmtree(out, ignore_errors=True)
    started = recipes.cpu_seconds()
    summary = train(run_config(folder, recipe, changes), out)
    record = {
        "top1": summary["final_val_top1"],
        "cpu_s": recipes.cpu_seconds() - started,
        "steps": summary["steps"],
        "val_n": summary.get("val_images", {}).get("n"),
    }
    (out / "record.json").write_text(json.dumps(record))
    return record


def train_seeds(folder: Path, out: Path, recipe: dict, changes: list[str], seeds: int) -> dict:
    """`train_once` with train.seed 0..seeds-1 (seed 0 in `out`, seed s in `out`-seed{s}): their mean top-1 and CPU
    seconds, and each seed's top-1 in "tops". A small val split moves several points between seeds."""
    runs = [
        train_once(
            folder, out if s == 0 else out.with_name(f"{out.name}-seed{s}"), recipe, [*changes, f"train.seed={s}"]
        )
        for s in range(seeds)
    ]
    return averaged(runs)


def averaged(runs: list[dict]) -> dict:
    """One record of several seeds' runs: mean top-1 and CPU seconds, the first run's steps and val images, and each
    run's top-1 in "tops"."""
    return {
        "top1": statistics.fmean(r["top1"] for r in runs),
        "cpu_s": statistics.fmean(r["cpu_s"] for r in runs),
        "steps": runs[0]["steps"],
        "val_n": runs[0]["val_n"],
        "tops": [r["top1"] for r in runs],
    }


def length(steps: int) -> list[str]:
    """A run of `steps` steps, its warmup, logging and four evaluations following it as the fitted recipe's do."""
    return [
        f"train.steps={steps}",
        f"train.warmup_steps={steps // 10}",
        f"train.log_every={max(steps // 20, 1)}",
        f"train.eval_every={max(-(-steps // 4), 1)}",
    ]


def pixels(root: Path, split: str, names: list[str], size: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """(images as rows of 32x32 RGB pixels in [0, 1], labels) of one split; RGBA composited on white."""
    xs, ys = [], []
    for label, name in enumerate(names):
        for f in sorted((root / split / name).iterdir()):
            image = Image.open(f).convert("RGBA")
            image = Image.alpha_composite(Image.new("RGBA", image.size, (255, 255, 255, 255)), image)
            xs.append(np.asarray(image.convert("RGB").resize((size, size), Image.BILINEAR), np.float32).ravel() / 255)
            ys.append(label)
    return np.stack(xs), np.array(ys)


def pixel_baselines(root: Path, seeds: int = 1) -> dict[str, float]:
    """Val top-1 of a logistic regression and a 500-tree random forest on the pixels, the forest's the mean of `seeds`
    random states ({} without scikit-learn)."""
    try:
        from sklearn.ensemble import RandomForestClassifier
        from sklearn.linear_model import LogisticRegression
    except ImportError:
        return {}
    names = sorted(p.name for p in (root / "train").iterdir())
    (x, y), (vx, vy) = pixels(root, "train", names), pixels(root, "val", names)
    forests = [RandomForestClassifier(500, random_state=s, n_jobs=1).fit(x, y) for s in range(seeds)]
    logistic = LogisticRegression(max_iter=500).fit(x, y)
    forest = statistics.fmean(float((f.predict(vx) == vy).mean()) for f in forests)
    return {"forest": forest, "logistic": float((logistic.predict(vx) == vy).mean())}


def measure(kind: str, runs: Path, tries: list[str], families: tuple[str, ...], seeds: int = 1) -> list[dict]:
    """The rows of one kind of data: each family at matched CPU time, the fitted default, the pixel baselines, the
    best of them; each figure the mean of `seeds` runs."""
    data, where = runs / kind / "data", runs / kind
    if not (data / "train").is_dir():
        KINDS[kind](data)
    recipes._no_plots()
    fitted, plan = fitted_recipe(data)
    mirror = re.search(r"mirror images at (-?[0-9.]+)", plan)
    shift = re.search(r"keeps (-?[0-9.]+) of its skill when they move", plan)
    mine = family_of(fitted)
    recipes_by = {f: with_family(fitted, f) for f in families}
    configs = {f: run_config(data, r, []) for f, r in recipes_by.items()}
    seconds = step_seconds(configs)
    steps = matched_steps(fitted["train.steps"], seconds, mine)
    print(f"{kind}: step CPU s {json.dumps({k: round(v, 4) for k, v in seconds.items()})} -> steps {steps}", flush=True)
    results = {"fitted": train_seeds(data, where / "fitted", fitted, [], seeds)}
    for f in families:
        results[f] = (
            results["fitted"] if f == mine else train_seeds(data, where / f, recipes_by[f], length(steps[f]), seeds)
        )
    for i, extra in enumerate(tries):
        results[f"try: {extra}"] = train_seeds(data, where / f"try{i}", fitted, shlex.split(extra), seeds)
    started = time.perf_counter()
    pixel = pixel_baselines(data, seeds)
    print(f"{kind}: pixel baselines in {time.perf_counter() - started:.0f} s", flush=True)
    n_train = sum(1 for p in (data / "train").rglob("*") if p.is_file())
    n_val = results["fitted"]["val_n"]
    setting = (
        f"{n_train:,} train / {n_val:,} val images; {results['fitted']['cpu_s']:.0f} CPU s each, 1 thread; "
        f"mirror skill {mirror.group(1) if mirror else 'not told'}, flip {fitted['augment.hflip']:g}; "
        f"shift skill {shift.group(1) if shift else 'not told'}, crop {fitted['augment.crop']}"
        + (f"; mean of {seeds} seeds" if seeds > 1 else "")
    )
    rows = []
    for name, r in results.items():
        what = f"{r['steps']} steps, {r['cpu_s']:.0f} CPU s" + (
            f"; seeds {' / '.join(f'{t:.4f}' for t in r['tops'])}" if seeds > 1 else ""
        )
        rows.append(_row(kind, name, r["top1"], f"{kind}: {name} ({what})", setting))
    for name, top1 in pixel.items():
        rows.append(_row(kind, name, top1, f"{kind}: {name} on 32x32 pixels", setting))
    scores = {name: r["top1"] for name, r in results.items() if name != "fitted"}
    best_name = max(scores, key=scores.get)
    rows.append(_row(kind, "best", scores[best_name], f"{kind}: the best model found is {best_name}", setting))
    rows[0]["claim"] = verdict(kind, mine, results["fitted"]["top1"], pixel, scores[best_name], best_name)
    rows[0]["against"] = "; ".join(f"{r['model']} {r['figure']}" for r in rows[1:])
    return rows


def verdict(kind: str, family: str, top1: float, pixel: dict[str, float], best: float, best_name: str) -> str:
    """The fitted row's claim: whether the fitted default beats the best pixel baseline, and how far the best model
    found is above it."""
    base_name = max(pixel, key=pixel.get, default="no baseline")
    said = f"{kind}: fitted ({family}) {'beats' if top1 > pixel.get(base_name, 0.0) else 'does not beat'} {base_name}"
    return said + (f"; {best_name} {(best - top1) * 100:.1f} points higher" if best > top1 else "")


def _row(kind: str, model: str, top1: float, claim: str, setting: str) -> dict:
    slug = model.replace("try: ", "try-").replace(" ", "_").replace("=", "-")
    return {
        "id": f"families-{kind}-{slug}",
        "benchmark": "Model families on small sets",
        "claim": claim,
        "figure": f"{top1:.4f}",
        "unit": "val top-1",
        "model": model,
        "setting": setting,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated: " + ", ".join(KINDS))
    parser.add_argument("--families", default=",".join(FAMILIES), help="comma-separated: " + ", ".join(FAMILIES))
    parser.add_argument("--runs", type=Path, required=True, help="where the data and the run directories go")
    parser.add_argument(
        "--try",
        dest="tries",
        action="append",
        default=[],
        metavar="OVERRIDES",
        help="a recipe to try beside the families: KEY=VALUE overrides over the fitted one, split as a shell splits",
    )
    parser.add_argument(
        "--seeds", type=int, default=1, help="runs of each model (train.seed 0..N-1); each figure is their mean"
    )
    add_results_arguments(parser, "families")
    args = parser.parse_args()
    rows = []
    for kind in args.kinds.split(","):
        if kind.startswith("icons") and not THEME.is_dir():
            print(f"{kind}: skipped ({THEME} is not installed: apt install adwaita-icon-theme)")
            continue
        rows += measure(kind, args.runs, args.tries, tuple(args.families.split(",")), args.seeds)
        for row in rows:
            print(f"{row['id']:40s} {row['figure']}  {row['claim']}", flush=True)
        write_asked_rows(args, "families", rows)


if __name__ == "__main__":
    main()
