"""What `vitkit fewshot`, `vitkit knn` and `vitkit linear-probe` share and compute: a checkpoint's frozen features
on two or three splits of its data, scored, written as NAME.json and NAME.md and set against its training data."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vitkit.evaluate.metrics import fewshot_eval, knn_eval, linear_probe_eval, report_markdown, write_report
from vitkit.evaluate.provenance import Against, picked_on, scored_against_training
from vitkit.evaluate.requests import FeatureRequest, FewshotRequest, KnnRequest, LinearProbeRequest, TwoSplitsRequest

DEFAULT_SHOTS = (1, 5, 10, 25)  # the paper's (Fig. 3-4, Table 5)
POOLS_SAID = {  # the feature_pool of models.pooling, as a report says it
    "head": "what the head reads (--pool head)",
    "cls": "the class token (--pool cls)",
    "mean": "the mean of the patch tokens (--pool mean)",
    "cls_mean": "the class token with the mean of the patch tokens (--pool cls_mean)",
}


@dataclass
class Frozen:
    """A checkpoint ready for its features to be read: the command's request, the model and its metadata, the data,
    the unreadable files met, and the options of `split_features`."""

    request: FeatureRequest
    model: Any
    meta: dict
    spec: Any
    bad: Any
    features: dict

    @property
    def config(self):
        return self.model.config

    @property
    def input_size(self) -> list[int]:
        """Said in every report: --image-size reads the features at another resolution."""
        return list(self.model.config.image_size)

    def open(self, split: str, flag: str = "--train-split"):
        from vitkit.errors import DataError

        c = self.model.config
        opened = self.spec.open(split, channels=c.in_chans, image_size=c.image_size, flag=flag)
        if opened.multi_label:  # their classifiers pick one class per image
            raise DataError(
                f"{opened.source}: gives each image a list of labels; few-shot, k-NN and the linear probe score one "
                "label per image (vitkit eval scores a multi-label model: mAP, per-class AP, F1)"
            )
        return opened


@dataclass
class Report:
    """A written report: the result (its JSON), its Markdown, and the paths of NAME.json and NAME.md."""

    result: dict
    markdown: str
    paths: tuple[Path, Path]


def prepare(request: FeatureRequest) -> Frozen:
    """The model (random weights of its architecture with --random-init), the data and the feature options for
    `request`; the --out folder is checked before any feature work."""
    import torch

    from vitkit.checkpoint import load_with_metadata
    from vitkit.data import BadFiles, DataSpec
    from vitkit.devices import pick_device
    from vitkit.models import build_model
    from vitkit.models.pooling import with_feature_pool

    # before the feature work, not after it (a file there: "File exists", minutes later)
    if request.out is not None:
        from vitkit.files import writable_folder

        writable_folder(request.out, "the reports", "choose another --out")
    if request.threads:
        torch.set_num_threads(request.threads)
    model, meta = load_with_metadata(request.checkpoint, image_size=request.image_size)
    if request.random_init is not None:
        torch.manual_seed(request.random_init)
        model = build_model(model.config).eval()
    model = with_feature_pool(model, request.pool)  # DINOv2's class token with the mean of the patches, ...
    bad = BadFiles("skip" if request.skip_unreadable else "fail", hint="; --skip-unreadable leaves such files out")
    features = {
        "batch_size": request.batch_size,
        "device": pick_device(request.device),
        "crop_pct": meta.get("preprocess", {}).get("crop_pct", 1.0),
        "precision": request.precision,
        "calibration": request.calibration,
        "bad": bad,
    }
    spec = DataSpec.from_checkpoint(meta, request.checkpoint, data=request.data, val_fraction=request.val_fraction)
    return Frozen(request, model, meta, spec, bad, features)


def fewshot(request: FewshotRequest) -> Report:
    """`vitkit fewshot`: few-shot linear accuracy for --shots (default: those of DEFAULT_SHOTS the smallest class has
    images for, the others announced as left out), --seeds draws each, ridge lambda --l2."""
    frozen = prepare(request)
    train, test = frozen.open(request.train_split), frozen.open(request.test_split, "--test-split")
    shots, left_out, have = _shots(request, train)
    result = fewshot_eval(
        frozen.model, train, test, shots=shots, seeds=request.seeds, l2_reg=request.l2, **frozen.features
    )
    result = {
        **_splits(request, test),
        **result,
        **({"shots_left_out": left_out, "fewest_per_class": have} if left_out else {}),
    }
    return report(frozen, "fewshot", result, f"Few-shot linear accuracy of {request.checkpoint}", test)


def _shots(request: FewshotRequest, train) -> tuple[list[int], list[int], int]:
    """(the shot counts to run, those of the defaults left out, the images of the smallest class)."""
    from vitkit.errors import DataError

    counts = np.bincount(np.asarray(train.labels), minlength=len(train.class_names))
    smallest = int(counts.argmin())
    have = int(counts[smallest])
    fewest = f"class {train.class_names[smallest]!r} has {have} image{'s' * (have != 1)} in {train.source} ({request.train_split})"
    shots = list(request.shots or [n for n in DEFAULT_SHOTS if n <= have])
    if not shots or max(shots) > have:
        raise DataError(f"{fewest}, fewer than {max(request.shots or DEFAULT_SHOTS[:1])} shots; ask for fewer --shots")
    left_out = [n for n in DEFAULT_SHOTS if n not in shots] if request.shots is None else []
    # said before the features are read, which takes a while
    if left_out:
        print(f"vitkit fewshot: {', '.join(map(str, left_out))} shots left out: {fewest}", flush=True)
    return shots, left_out, have


def _splits(request: TwoSplitsRequest, test) -> dict:
    return {
        "split": request.test_split,
        "n": len(test),
        "train_split": request.train_split,
        "test_split": request.test_split,
    }


def knn(request: KnnRequest) -> Report:
    """`vitkit knn`: cosine k-NN accuracy for each of --k, votes weighted by exp(sim / --temperature) (0: uniform)."""
    frozen = prepare(request)
    test = frozen.open(request.test_split, "--test-split")
    result = knn_eval(
        frozen.model,
        frozen.open(request.train_split),
        test,
        ks=request.k,
        temperature=request.temperature or None,
        **frozen.features,
    )
    return report(frozen, "knn", {**_splits(request, test), **result}, f"k-NN accuracy of {request.checkpoint}", test)


def linear_probe(request: LinearProbeRequest) -> Report:
    """`vitkit linear-probe`: one probe per --l2 fitted on train, the best on val scored on --test-split; with
    --test-split val, l2 is picked on a held-out share of train instead."""
    from vitkit.data.split import hold_out
    from vitkit.errors import DataError

    frozen = prepare(request)
    train, test = frozen.open("train"), frozen.open(request.test_split, "--test-split")
    # l2 is never picked on the images it is scored on: a share of train picks it
    if request.test_split == "val":
        if request.val_fraction == 0:
            raise DataError(
                "--val-fraction 0: with --test-split val, l2 is picked on a share of the training images held out; "
                "give a share above 0 (default 0.1)"
            )
        train, val = hold_out(train, frozen.spec.val_fraction or 0.1, frozen.spec.split_seed, frozen.spec.split_rule)
    else:
        val = frozen.open("val", "--val-fraction")
    for part, what in ((train, "fit the probe on"), (val, "pick l2 on")):
        if not len(part):
            raise DataError(
                f"{part.source}: no images to {what} ({part.selection}); raise --val-fraction, or score more data"
            )
    result = linear_probe_eval(
        frozen.model, train, val, test, l2s=request.l2, max_iter=request.max_iter, **frozen.features
    )
    result = {"split": request.test_split, "n": len(test), "test_split": request.test_split, **result}
    return report(frozen, "linear_probe", result, f"Linear probe of {request.checkpoint}", test)


def report(frozen: Frozen, name: str, result: dict, title: str, scored) -> Report:
    """Write NAME.json and NAME.md for `result` on the `scored` split, with the notes on its images: unreadable ones
    left out, a fine-tuning sweep that picked the model on them, copies of training images, changed splits."""
    from vitkit.checkpoint.runs import report_dir

    request = frozen.request
    result = {
        "checkpoint": str(request.checkpoint),
        "random_init": request.random_init,
        "data": frozen.spec.where,
        "image_size": frozen.input_size,
        "pool": getattr(frozen.model, "pool", "head"),
        **result,
    }
    if len(frozen.bad):
        result["unreadable"] = [{"path": p, "error": e} for p, e in frozen.bad.files.items()]
    title += _images_said(frozen, result, scored)
    warning = picked_on(request.checkpoint, result["split"], scored, frozen.meta)
    # random weights: nothing was picked
    warning = None if request.random_init is not None else warning
    result["picked_on_this_split"] = warning is not None
    h, w = frozen.input_size
    if "precision" in result:  # what read the features, at which resolution
        title += f"\n\nFeatures read at {result['precision']}, at {h}x{w} px: {POOLS_SAID[result['pool']]}."
    if warning:
        title += f"\n\n{warning[0].upper()}{warning[1:]}."
    against = (
        Against()
        if request.random_init is not None
        else scored_against_training(frozen.meta, request.checkpoint, result["split"], scored, frozen.config)
    )
    against.record(result)  # the features of images the backbone trained on, scored as held out; splits changed since
    for note in against.notes(result["split"]):
        note = note[len("note: ") :]
        title += f"\n\n{note[0].upper()}{note[1:]}."
    markdown = report_markdown(result, title)
    paths = write_report(request.out or report_dir(request.checkpoint, _folder(frozen, name)), name, result, markdown)
    return Report(result, markdown, paths)


def _images_said(frozen: Frozen, result: dict, scored) -> str:
    """' on SPLIT of DATA (N images: ...)', with the unreadable images left out and a random initialisation."""
    request, bad = frozen.request, frozen.bad
    names = {str(p) for p in scored.paths} if scored.paths is not None else set()
    here = sum(path in names for path in bad.files)  # of the scored split; the others', of the images fitted on
    skipped = f"; {here:,} unreadable left out" if here else ""
    said = f" on {result['split']} of {frozen.spec.where} ({len(scored):,} image{'s' * (len(scored) != 1)}: {scored.source}, {scored.selection}{skipped})"
    if elsewhere := len(bad) - here:
        said += f"; {elsewhere:,} unreadable image{'s' * (elsewhere != 1)} of the other splits it read left out"
    if request.random_init is not None:
        said += f" (its architecture, randomly initialised with seed {request.random_init})"
    return said


def _folder(frozen: Frozen, name: str) -> str:
    """The report's folder in the run: never over the report of the run's own data, nor over a trained model's, its
    fp32 report, or the report at the model's own resolution."""
    from vitkit.checkpoint.runs import data_tag

    request = frozen.request
    folder = name + data_tag(frozen.spec.path, frozen.meta)
    folder += "" if request.random_init is None else f"_random{request.random_init}"
    if request.precision != "fp32":
        folder += f"_{request.precision}"
    if request.pool is not None:  # not over the report of the model's own feature
        folder += f"_{request.pool}"
    if request.image_size is not None:
        h, w = frozen.input_size
        folder += f"_{h}px" if h == w else f"_{h}x{w}px"
    return folder
