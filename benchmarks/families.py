"""Family benchmark: which model `vitkit train --data FOLDER` should fit to a small set of one's own, measured.

    nice python benchmarks/families.py --runs /tmp/families --results       # every dataset: ~1 CPU-hour on 1 thread
    python benchmarks/families.py --datasets fashion500 --runs /tmp/families   # one dataset

For each dataset it trains, with the fitted recipe's length, batch and augmentation (train.threads=1):
- `plain`: the fitted recipe with a plain ViT (`model.backbone=null`, a 4x4 grid of patches);
- `fitted`: the recipe as `vitkit train --data` fits it today (`FITTED_HYBRID_BELOW`: a conv-stem hybrid for small sets);
and fits two pixel baselines on the same train/ split, scored on the same val/ split: a multinomial logistic
regression and a random forest of 500 trees on 32x32 RGB pixels (RGBA composited on white), where scikit-learn is
installed. A run directory already in --runs (RUNS/NAME_MODEL/final) is read, not trained again.

| name       | what                                                                       | train | val |
|------------|----------------------------------------------------------------------------|-------|-----|
| icons      | the Adwaita icon theme's PNGs (RGBA, 32-96 px), 6 contexts, split by name  | 722   | 240 |
| fashion500 | Fashion-MNIST, 50 training and 50 validation images a class                | 500   | 500 |
| glyphs     | digits rendered from the machine's fonts (recipes.py)                      | 400   | 300 |
| scenes     | RGB scenes whose label is what stands where (recipes.py)                   | 420   | 300 |

Writes benchmarks/results/families.csv (with --results): one row per dataset, the fitted model's val top-1, with
the plain ViT's and the pixel baselines' beside it (`against`).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
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
ICON_SIZES = ("32x32", "48x48", "64x64", "96x96")


def make_icons(root: Path, seed: int = 0) -> dict:
    """The theme's PNG icons of six contexts, each icon name in one split only (60% train, 20% val, 20% test), each
    name at up to two of its sizes."""
    rng, counts = random.Random(seed), {}
    for c in ICON_CLASSES:
        by_name: dict[str, list[Path]] = {}
        for size in ICON_SIZES:
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


DATASETS = {
    "icons": lambda root: make_icons(root),
    "fashion500": lambda root: recipes.make_fashion(root, train=50, val=50),
    "glyphs": lambda root: recipes.make_glyphs(root, train=40, val=30),
    "scenes": lambda root: recipes.make_scenes(root, train=70, val=50),
}


def train(data: Path, out: Path, extra: list[str]) -> dict:
    """summary.json of `vitkit train --data data` (with `extra` overrides), trained now unless `out` holds it."""
    if not (out / "final").is_dir():
        shutil.rmtree(out, ignore_errors=True)
        argv = [sys.executable, "-m", "vitkit", "train", "--data", str(data), "--out", str(out), "--no-progress"]
        subprocess.run([*argv, "train.threads=1", *extra], check=True, stdout=subprocess.DEVNULL)
    summary = json.loads((out / "summary.json").read_text())
    config = json.loads((out / "final" / "config.json").read_text())["model"]
    return {**summary, "model_config": config}


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


def pixel_baselines(root: Path) -> dict[str, float]:
    """Val top-1 of a logistic regression and a 500-tree random forest on the pixels ({} without scikit-learn)."""
    try:
        from sklearn.ensemble import RandomForestClassifier
        from sklearn.linear_model import LogisticRegression
    except ImportError:
        return {}
    names = sorted(p.name for p in (root / "train").iterdir())
    (x, y), (vx, vy) = pixels(root, "train", names), pixels(root, "val", names)
    forest = RandomForestClassifier(500, random_state=0, n_jobs=1).fit(x, y)
    logistic = LogisticRegression(max_iter=500).fit(x, y)
    return {"forest": float((forest.predict(vx) == vy).mean()), "logistic": float((logistic.predict(vx) == vy).mean())}


def measure(name: str, runs: Path) -> list[dict]:
    data = runs / name
    if not (data / "train").is_dir():
        DATASETS[name](data)
    fitted = train(data, runs / f"r_{name}_fitted", [])
    size = fitted["model_config"]["image_size"][0]
    plain = train(data, runs / f"r_{name}_plain", ["model.backbone=null", f"model.patch_size={size // 4}"])
    n_train = sum(1 for _ in (data / "train").rglob("*.png"))
    n_val = fitted["val_images"]["n"]
    setting = f"{n_train} train / {n_val} val images, {fitted['steps']} steps of the fitted recipe, 1 thread"
    started = time.perf_counter()
    pixel = pixel_baselines(data)
    print(f"{name}: pixel baselines in {time.perf_counter() - started:.0f} s", flush=True)
    stem = fitted["model_config"].get("backbone")
    what = f"conv-stem hybrid {stem['convs']}" if stem else "plain ViT"
    against = [f"plain ViT {plain['final_val_top1']:.4f} ({plain['wall_time_s']:.0f} s)"]
    against += [f"{model} on 32x32 pixels {top1:.4f}" for model, top1 in pixel.items()]
    best = max([plain["final_val_top1"], *pixel.values()])
    top1 = fitted["final_val_top1"]
    verdict = "beats every other" if top1 > best else "ties the best other" if top1 == best else "below the best other"
    claim = f"{name}: the fitted {what} ({fitted['wall_time_s']:.0f} s), {verdict}"
    rows = [_row(name, "fitted", fitted["final_val_top1"], claim, setting)]
    rows[0]["against"] = "; ".join(against)
    return rows


def _row(data: str, model: str, top1: float, claim: str, setting: str) -> dict:
    return {
        "id": f"families-{data}-{model}",
        "benchmark": "Recipe families on small sets",
        "claim": claim,
        "figure": f"{top1:.4f}",
        "unit": "val top-1",
        "model": model,
        "setting": setting,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated: " + ", ".join(DATASETS))
    parser.add_argument("--runs", type=Path, required=True, help="where the data and the run directories go")
    add_results_arguments(parser, "families")
    args = parser.parse_args()
    rows = []
    for name in args.datasets.split(","):
        if name == "icons" and not THEME.is_dir():
            print(f"icons: skipped ({THEME} is not installed: apt install adwaita-icon-theme)")
            continue
        rows += measure(name, args.runs)
    for row in rows:
        print(f"{row['id']:32s} {row['figure']}  {row['claim']}")
    write_asked_rows(args, "families", rows)


if __name__ == "__main__":
    main()
