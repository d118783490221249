"""The notes every scoring command prints where the scored images include images the model trained on, or where the
data changed since it trained."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from vitkit.checkpoint.runs import resolve
from vitkit.data.split import same_images
from vitkit.errors import VitkitError
from vitkit.files import read_json


@dataclass
class Against:
    """What the scored images are, set against the checkpoint's training data."""

    copies: dict | None = None  # {"images": n, "example": [scored, trained]}: scored images the model trained on
    changed: dict[str, dict] = field(default_factory=dict)  # {split: {"then": record, "now": record}} since it trained
    unchecked: str | None = None  # why the scored images could not be checked against recorded training data

    def record(self, result: dict) -> None:
        """Into a command's JSON."""
        if self.copies is not None:
            result["copies_of_training_images"] = self.copies["images"]
        if self.changed:
            result["changed_since_training"] = self.changed
        if self.unchecked and self.copies is None:
            result["copies_of_training_images"] = None  # not checked

    def notes(self, which: str) -> list[str]:
        """The lines that say so, under the figures."""
        from vitkit.data.split import described

        lines = [copies_note(self.copies, which)] if self.copies is not None else []
        if self.unchecked:
            lines.append(
                f"note: {_these(which)} were not checked for copies of the images the model trained on ({self.unchecked})"
            )
        for name, change in self.changed.items():
            then, now = described(change["then"]), described(change["now"])
            other = ", other images" if change["then"]["n"] == change["now"]["n"] else ""
            lines.append(
                f"note: the {name} split changed since the checkpoint was trained ({then} then, {now} now{other})"
                + (
                    ": an image moved out of it is not known to be one the model trained on"
                    if name == "train"
                    else ": these figures are not of the images it was held out with"
                )
            )
        return lines


def scored_against_training(meta: dict, checkpoint, which: str, split, config) -> Against:
    """The scored split's copies of training images (files of the checkpoint's training split, or byte-identical to
    one: splits are kept apart by folder, not by content), of its own and of the checkpoints it was fine-tuned from
    (`spec.trained_on`), and the recorded splits that changed since it trained (the training split, and the scored
    one where it is of the same data)."""
    from vitkit.data import DataSpec
    from vitkit.data.spec import without_advice
    from vitkit.data.summary import held_out_twins
    from vitkit.errors import DataError

    if not isinstance(meta.get("data"), dict):  # no record (not trained by vitkit): nothing to compare with
        return Against()
    try:
        spec = DataSpec.from_checkpoint(meta, checkpoint)
        trained = spec.open(spec.train_split, channels=config.in_chans, image_size=config.image_size)
    except DataError as err:  # the recorded data has moved, or is on another machine
        return Against(unchecked=without_advice(err))
    against = Against()
    if which != spec.train_split:
        twins = held_out_twins(trained, split, which)
        if twins is None:
            against.unchecked = (
                "they and its training images are not compared image by image here: Parquet rows, arrays "
                "against files, or over 200,000 training images"
            )
        earlier = 0
        for record in meta.get("pretrained_on") or []:  # a fine-tuned model's pre-training images are not unseen either
            try:
                start = DataSpec.from_checkpoint({"data": record}, checkpoint)
                theirs = held_out_twins(
                    start.open(start.train_split, channels=config.in_chans, image_size=config.image_size),
                    split,
                    which,
                )
            except DataError as err:  # moved, or on another machine
                against.unchecked = f"the images it was pre-trained on: {without_advice(err)}"
                continue
            for i, pair in enumerate(theirs or []):
                if pair is not None and twins is not None and twins[i] is None:
                    twins[i], earlier = pair, earlier + 1
        if copies := [pair for pair in twins or [] if pair is not None]:
            against.copies = {"images": len(copies), "example": list(copies[0]), "pretrained": earlier}
    for name, now in ((spec.train_split, trained), (which, split)):
        if name not in against.changed and (change := spec.changed(name, now)) is not None:  # not for --data elsewhere
            against.changed[name] = dict(zip(("then", "now"), change))
    return against


def copies_note(copies: dict, which: str) -> str:
    """The line that says so, under the figures."""
    n, (scored, trained) = copies["images"], copies["example"]
    example = f"{scored}, itself a training image" if scored == trained else f"{scored} = {trained}"
    trained_on = (
        "the model, or the checkpoint it was fine-tuned from, trained on"
        if copies.get("pretrained")
        else "the model trained on"
    )
    return (
        f"note: {n:,} of {_these(which)} {'are byte-identical to images' if n != 1 else 'is byte-identical to an image'} "
        f"{trained_on} (e.g. {example}), and {'count' if n != 1 else 'counts'} as unseen in these figures"
    )


def _these(which: str) -> str:
    """'these test images'; 'these images' for --split all (a folder without splits)."""
    return "these images" if which == "all" else f"these {which} images"


def picked_on(checkpoint: str | os.PathLike, name: str, split, extra: dict) -> str | None:
    """A warning where the images of `split` (named `name`) picked `checkpoint` in a fine-tuning sweep of several
    learning rates: its record says so (`extra["picked"]`, kept by every convert and copy), or, for a model picked
    before records said so, it is a sweep's DIR/final (or the lr_X run final links to) and `split` holds exactly the
    images its record (`extra["data"]["splits"]`) names for the sweep's validation split, whatever it is called here
    (eval's "all" of that folder too). A figure on them is optimistic. Else None."""
    pick = extra.get("picked")
    if isinstance(pick, dict):
        if not same_images(pick.get("images"), split.describe()):
            return None
        sweep = pick.get("sweep")
        # the sweep folder moved: its sweep.json where the model is now
        if isinstance(sweep, str) and not Path(sweep).is_file():
            try:
                here = Path(os.path.realpath(resolve(checkpoint))).parent.parent / "sweep.json"
            except (OSError, VitkitError):
                here = None
            sweep = here if here is not None and here.is_file() else f"{sweep}, no longer there"
        return pick_note(name, pick.get("among"), sweep)
    try:
        run = Path(os.path.realpath(resolve(checkpoint))).parent  # DIR/lr_X/final -> DIR/lr_X
        sweep = read_json(run.parent / "sweep.json")
    except (OSError, ValueError, VitkitError):  # not a sweep's model, or no readable sweep.json: nothing to say
        return None
    if (
        not isinstance(sweep, dict)
        or (sweep.get("best") or {}).get("run") != run.name
        or len(sweep.get("runs", [])) < 2
    ):
        return None  # not the picked run; or a sweep of one learning rate, which picked nothing
    if not same_images(((extra.get("data") or {}).get("splits") or {}).get(sweep.get("val_split")), split.describe()):
        return None
    return pick_note(name, len(sweep["runs"]), run.parent / "sweep.json")


def pick_note(name: str, among, sweep) -> str:
    these = "these images" if name == "all" else f"these {name} images"
    return (
        f"note: {these} picked this model's learning rate among {among} runs ({sweep}), so a figure on them is "
        "optimistic; keep images out of both for an unbiased one (a test split)"
    )
