"""What an export tells whoever downloads it: its metadata without local paths (`publishable`) and its model card.

The card is README.md in Hugging Face's layout (a YAML header the hub reads: library_name, tags, license, then
Markdown): the model, its classes, the images it trained on (counts and digests, never paths), the figures measured
on it with their split and image count, how to prepare an image, and how to load the folder in vitkit, timm and
transformers.
"""

from __future__ import annotations

import os
from pathlib import Path

from vitkit.models import ViTConfig

# the library that loads each export folder as it is, and what the hub shows it under
LIBRARIES = {"hf": "transformers", "timm": "timm"}
CARD_NAME = "README.md"
MAX_NAMES = 50  # class names listed on the card; the rest are counted


def publishable(metadata: dict) -> dict:
    """`metadata` as an export holds it: no local path. A data record keeps its splits' image counts and digests and
    names its folder (`folder`) instead of its path; every other absolute path (the checkpoint a fine-tune started
    from, a sweep's report) becomes its last part. Class names stay as they are (a name may start with "/")."""
    kept = {}
    for key, value in metadata.items():
        if key == "class_names":
            kept[key] = value
        elif key == "data" and isinstance(value, dict):
            kept[key] = _data_record(value)
        elif key == "pretrained_on" and isinstance(value, list):
            kept[key] = [_data_record(r) if isinstance(r, dict) else _no_paths(r) for r in value]
        else:
            kept[key] = _no_paths(value)
    return kept


def _data_record(record: dict) -> dict:
    """A training-data record without its path: the folder's name, and each split's source below it."""
    root = record.get("path")
    kept = {k: _no_paths(v) for k, v in record.items() if k not in ("path", "splits")}
    if isinstance(root, str):
        kept["folder"] = Path(root).name
    splits = record.get("splits")
    if isinstance(splits, dict):
        kept["splits"] = {
            name: {**_no_paths(split), "source": _below(split["source"], root)}
            if isinstance(split, dict) and "source" in split
            else _no_paths(split)
            for name, split in splits.items()
        }
    return kept


def _below(source, root) -> str:
    """A split's source named from the data folder ("train", "." for the folder itself), else by its last part."""
    if not isinstance(source, str) or not os.path.isabs(source):
        return source
    if isinstance(root, str) and os.path.isabs(root):
        relative = os.path.relpath(source, root)
        if not relative.startswith(".."):
            return relative
    return Path(source).name


def _no_paths(value):
    """`value` with every absolute path in it (a string, or one inside lists and mappings) cut to its last part."""
    if isinstance(value, str):
        return Path(value).name if os.path.isabs(value) else value
    if isinstance(value, dict):
        return {k: _no_paths(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_paths(v) for v in value]
    return value


def model_card(model, metadata: dict, *, format: str, metrics: list[dict] | None = None) -> str:
    """README.md of an export folder in `format` ("hf" or "timm") of `model`, from its (publishable) `metadata` and the
    `metrics` measured on it (`runs.run_metrics`)."""
    c = model.config
    sections = [
        _header(format),
        f"# {_title(c)}\n\nA Vision Transformer classifier trained with vitkit, exported in {_format_name(format)}'s "
        "layout.\n",
        _model_section(model),
        _classes_section(metadata.get("class_names"), c.num_classes),
        _data_section(metadata.get("data")),
        _metrics_section(metrics or []),
        _preprocessing_section(c, metadata.get("preprocess") or {}),
        _use_section(format),
    ]
    return "\n".join(s for s in sections if s)


def _header(format: str) -> str:
    """The YAML block the hub reads: which library loads the folder, its task and tags; the license is the owner's to
    state, so it says unknown until they do."""
    library = LIBRARIES[format]
    tags = ["image-classification", "vision-transformer", "vitkit", library]
    return (
        "---\n"
        + f"library_name: {library}\npipeline_tag: image-classification\nlicense: unknown\ntags:\n"
        + "".join(f"- {t}\n" for t in tags)
        + "---\n"
    )


def _format_name(format: str) -> str:
    return {"hf": "Hugging Face transformers", "timm": "timm"}[format]


def _title(c: ViTConfig) -> str:
    ph, pw = c.patch_size
    patch = str(ph) if ph == pw else f"{ph}x{pw}"
    return f"ViT (width {c.width}, depth {c.depth}, patch {patch})"


def _model_section(model) -> str:
    c = model.config
    h, w = c.image_size
    pool = "class token" if c.classifier == "token" else "global average pooling"
    rows = [
        ("architecture", f"ViT: width {c.width}, {c.depth} layers, {c.num_heads} heads, MLP {c.mlp_dim}, {pool}"),
        ("patch", "x".join(map(str, c.patch_size))),
        ("input", f"{c.in_chans} x {h} x {w} ({'grayscale' if c.in_chans == 1 else 'RGB'})"),
        ("parameters", f"{sum(p.numel() for p in model.parameters()):,}"),
        ("outputs", f"{c.num_classes} classes" if c.num_classes else "image features (no classification head)"),
    ]
    return "## Model\n\n" + _table(("", ""), rows)


def _classes_section(names, count: int) -> str:
    if not count:
        return ""
    if not names:
        return f"## Classes\n\n{count} classes, unnamed (index 0 to {count - 1}).\n"
    shown = ", ".join(f"`{n}`" for n in names[:MAX_NAMES])
    more = f", and {len(names) - MAX_NAMES} more" if len(names) > MAX_NAMES else ""
    return f"## Classes\n\n{len(names)} classes, in the head's order: {shown}{more}.\n"


def _data_section(record) -> str:
    """The images it trained on: per split, how many and their digest (what `vitkit eval` compares), never a path."""
    if not isinstance(record, dict):
        return "## Data\n\nThe checkpoint records no training data.\n"
    name = "synthetic images" if record.get("name") == "synthetic" else f"the folder `{record.get('folder', '?')}`"
    splits = record.get("splits") if isinstance(record.get("splits"), dict) else {}
    rows = [
        (
            split,
            f"{r.get('n', '?'):,}" if isinstance(r.get("n"), int) else "?",
            r.get("selection", ""),
            r.get("digest", ""),
        )
        for split, r in splits.items()
        if isinstance(r, dict)
    ]
    table = _table(("split", "images", "selection", "digest"), rows) if rows else ""
    return f"## Data\n\nTrained on {name}.\n\n{table}"


def _metrics_section(metrics: list[dict]) -> str:
    if not metrics:
        return "## Metrics\n\nNo figures recorded with this checkpoint (convert it from its run directory to add the run's).\n"
    rows = [
        (m["metric"], f"{m['value']:.4f}", m["split"], f"{m['images']:,}" if m.get("images") else "?") for m in metrics
    ]
    return "## Metrics\n\n" + _table(("metric", "value", "split", "images"), rows)


def _preprocessing_section(c: ViTConfig, preprocess: dict) -> str:
    h, w = c.image_size
    crop_pct = preprocess.get("crop_pct") or 1.0
    filter = preprocess.get("interpolation", "bilinear")
    resize = (
        f"resize both sides to size / crop_pct ({filter}), then cut the centre {h} x {w}"
        if preprocess.get("crop_mode") == "squash"
        else f"resize, keeping the aspect ratio, to cover {h} x {w} / crop_pct ({filter}), then cut the centre {h} x {w}"
    )
    rows = [
        ("transparency", f"composite transparent pixels on {list(c.background)} (per channel, in [0, 1])"),
        ("resize and crop", f"{resize}; crop_pct {crop_pct:g}"),
        ("scale", "pixels to [0, 1]"),
        ("normalise", f"(x - {list(c.mean)}) / {list(c.std)}"),
    ]
    return "## Preprocessing\n\n" + _table(("step", "what"), rows)


def _use_section(format: str) -> str:
    """How to load the folder (DIR here, or ORG/NAME on the hub) in each library."""
    vitkit = (
        "```sh\nvitkit predict DIR image.jpg          # or hf-hub:ORG/NAME once pushed\n```\n\n"
        '```python\nimport vitkit\nmodel = vitkit.load_pretrained("DIR")\n```\n'
    )
    if format == "timm":
        others = (
            '```python\nimport timm\nmodel = timm.create_model("local-dir:DIR", pretrained=True)  # or "hf-hub:ORG/NAME"\n'
            "config = timm.data.resolve_data_config({}, model=model)  # the preprocessing above\n```\n\n"
            "transformers loads it through its timm wrapper (timm installed):\n\n"
            '```python\nfrom transformers import pipeline\npipe = pipeline("image-classification", model="DIR")\n```\n'
        )
    else:
        others = (
            '```python\nfrom transformers import pipeline\npipe = pipeline("image-classification", model="DIR")  '
            '# or "ORG/NAME"\n```\n\n'
            "timm reads timm's layout: `vitkit convert DIR --to timm TIMM_DIR`, then "
            '`timm.create_model("local-dir:TIMM_DIR", pretrained=True)`.\n'
        )
    return f"## Use\n\n{vitkit}\n{others}"


def _table(head: tuple[str, ...], rows: list[tuple]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
