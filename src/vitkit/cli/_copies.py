"""The note every scoring command prints where the scored images include images the model trained on."""

from __future__ import annotations


def scored_training_copies(meta: dict, checkpoint, which: str, split, config) -> dict | None:
    """{"images": n, "example": [...]} where files of the scored split are training files of the checkpoint's record, or
    byte-identical to one (splits are kept apart by folder, not by content); None where none are, or it cannot be told."""
    from vitkit.data import DataSpec
    from vitkit.data.summary import copies_of_training_images as copies
    from vitkit.errors import DataError

    if which == "train" or split.paths is None:  # arrays in memory: no files to compare
        return None
    try:
        trained = DataSpec.from_checkpoint(meta, checkpoint).open("train", channels=config.in_chans, image_size=config.image_size[0])
    except DataError:  # no record, or the data has moved: nothing to compare with
        return None
    return (copies({"train": trained, "test": split}) or {}).get("test")


def copies_note(copies: dict, which: str) -> str:
    """The line that says so, under the figures."""
    n, (scored, trained) = copies["images"], copies["example"]
    example = f"{scored}, itself a training image" if scored == trained else f"{scored} = {trained}"
    return (f"note: {n:,} of these {which} images {'are byte-identical to images' if n != 1 else 'is byte-identical to an image'} the "
            f"model trained on (e.g. {example}), and {'count' if n != 1 else 'counts'} as unseen in the figures above")
