"""What `vitkit inspect` computes and writes: the paper's Fig. 7 and attention maps of a checkpoint over chosen
images, the numbers behind them, and the lines that say what was inspected."""

from __future__ import annotations

from vitkit.evaluate import inspection
from vitkit.evaluate.inspect_images import COPIES_NOT_CHECKED, Chosen, given_images, recorded_images
from vitkit.evaluate.requests import InspectRequest


def inspect_checkpoint(request: InspectRequest) -> list[str]:
    """Inspect `request.checkpoint` as `vitkit inspect` asks, write the figures and numbers into `request.out`, and
    return the lines that say what was inspected and written."""
    import torch

    from vitkit.checkpoint import untrained_head
    from vitkit.errors import ConfigError
    from vitkit.plots import missing

    if why := missing():
        raise ConfigError(f"vitkit inspect draws figures: {why}")
    from vitkit.plots.figures import write_report

    if request.threads:
        torch.set_num_threads(request.threads)
    model, metadata = _load(request)
    config = model.config
    chosen = (given_images if request.images else recorded_images)(request, metadata, config)
    if chosen.skipped:
        chosen.where += f" ({len(chosen.skipped)} unreadable left out)"
    x = inspection.normalize(chosen.pixels, config)
    results = inspection.inspect_model(
        model, x, num_show=request.show, num_components=request.components, batch_size=request.batch_size
    )
    trained_head = untrained_head(metadata, request.checkpoint, model) is None
    titles = titles_of(
        model, x[: request.show], chosen.truth[: request.show], metadata.get("class_names"), chosen.seen, trained_head
    )
    caption = _caption(chosen)
    info = _info(request, config, chosen, titles)
    written = write_report(results, chosen.pixels, request.out, info=info, titles=titles, caption=caption)
    distance = results["mean_attention_distance"].mean(dim=1)
    return [
        f"inspected {caption} ({chosen.training_data}), at {config.image_size[0]}x{config.image_size[1]} "
        f"(a {config.grid_size[0]}x{config.grid_size[1]} grid of {config.total_patch_size[0]}x{config.total_patch_size[1]}-px patches)",
        "mean attention distance per layer (px): " + " ".join(f"{d:.1f}" for d in distance.tolist()),
        *(f"wrote {path}" for path in written),
    ]


def _load(request: InspectRequest):
    """(model on --device, metadata): a Vision Transformer at --image-size."""
    from vitkit.checkpoint import load_with_metadata
    from vitkit.devices import pick_device
    from vitkit.errors import ConfigError

    model, metadata = load_with_metadata(request.checkpoint, image_size=request.image_size)
    model = model.to(pick_device(request.device))
    if not hasattr(model, "forward_features_explicit"):
        raise ConfigError(
            f"{request.checkpoint}: a {type(model).__name__} has no attention or position embeddings to inspect; "
            "vitkit inspect reads Vision Transformers"
        )
    if not model.config.depth:
        raise ConfigError(
            f"{request.checkpoint}: model.depth is 0 (a conv net: the conv stem average-pooled, no transformer block), "
            "so it has no attention to inspect; vitkit eval and predict read it"
        )
    return model, metadata


def _caption(chosen: Chosen) -> str:
    """'N images from WHERE; K of them in this model's training data' (or that it was not checked)."""
    trained = None if chosen.seen is None else sum(chosen.seen)
    counted = (
        "from its training split"
        if chosen.training_data.endswith(COPIES_NOT_CHECKED)
        else "in this model's training data"
    )
    return f"{len(chosen.pixels)} images from {chosen.where}; " + (
        f"{trained or 'none'} of them {counted}" if trained is not None else "not checked against its training data"
    )


def _info(request: InspectRequest, config, chosen: Chosen, titles: list[str] | None) -> dict:
    """inspection.json: the images, the model's geometry, the images shown with their titles."""
    seen = chosen.seen
    return {
        "checkpoint": str(request.checkpoint),
        "images": [str(p) for p in request.images] if request.images else [chosen.where],
        "num_images": len(chosen.pixels),
        "in_training_data": None if seen is None else sum(seen),  # None: not checked (see training_data)
        "training_data": chosen.training_data,
        "image_size": list(config.image_size),
        "grid_size": list(config.grid_size),
        "patch_size_pixels": list(config.total_patch_size),
        "hybrid": config.backbone is not None,
        "shown": [
            {"image": f, "label": t, "in_training_data": None if seen is None else seen[i]}
            for i, (f, t) in enumerate(zip(chosen.shown[: request.show], titles or [""] * request.show))
        ],
        **(
            {"unreadable": [{"path": path, "error": error} for path, error in chosen.skipped]} if chosen.skipped else {}
        ),
    }


def titles_of(
    model, x, truth: list[str], class_names: list[str] | None, seen: list[bool] | None, trained_head: bool
) -> list[str] | None:
    """'true: CLASS / pred: CLASS' for each shown image (true: its label, or the class folder it is in, '?' where that
    names no class; no prediction from a head that never trained), with a third line 'trained on' for an image of the
    model's training split (`seen`, where known)."""
    import torch

    if not model.config.num_classes:
        return None
    marks = ["\ntrained on" if seen is not None and seen[i] else "" for i in range(len(truth))]
    if not trained_head:  # masked patch pre-training, a new zero head: its argmax is class 0, not a prediction
        return [f"true: {t}{m}" for t, m in zip(truth, marks)]
    names = class_names or [str(i) for i in range(model.config.num_classes)]
    with torch.no_grad():
        predicted = model(x.to(next(model.parameters()).device)).argmax(dim=1).tolist()
    return [f"true: {t}\npred: {names[p]}{m}" for t, p, m in zip(truth, predicted, marks)]
