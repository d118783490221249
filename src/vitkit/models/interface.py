"""timm's model API on every vitkit model: the names that code written for timm calls (its layer-decay optimiser,
data-config resolution, detection and segmentation backbones), with timm's meaning, read from the model's config.

    num_classes, num_features, head_hidden_size, global_pool    the head and what it reads
    get_classifier(), reset_classifier(num_classes, global_pool=None)
    pretrained_cfg / default_cfg                                 input size, normalisation, crop: timm's dict
    group_matcher(coarse=False)                                  regexes: stem, then blocks in order (layer decay)
    feature_info, prune_intermediate_layers(indices)             per-level channels and reduction (features_only)

Each model class adds what is its own: `group_matcher`, `feature_info` and `prune_intermediate_layers`.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from vitkit.errors import ConfigError

# vitkit's eval preprocessing where a checkpoint records none: the whole image resized, bilinear (data.images.crop_of)
DEFAULT_PREPROCESS = {"crop_pct": 1.0, "crop_mode": "center", "interpolation": "bilinear"}


def pretrained_cfg(config: Any, metadata: dict, *, first_conv: str) -> dict:
    """timm's pretrained_cfg of a model of `config`: its input (size, normalisation), the crop and filter `metadata`
    (what `read_metadata` returns for its checkpoint) records, its classes and where its first conv and head are."""
    preprocess = {**DEFAULT_PREPROCESS, **{k: v for k, v in (metadata.get("preprocess") or {}).items() if v}}
    cfg = {
        "input_size": (config.in_chans, *config.image_size),
        "fixed_input_size": not getattr(config, "dynamic_img_size", False),
        "interpolation": preprocess["interpolation"],
        "crop_pct": preprocess["crop_pct"],
        "crop_mode": preprocess["crop_mode"],
        "mean": tuple(config.mean),
        "std": tuple(config.std),
        "num_classes": config.num_classes,
        "pool_size": None,
        "first_conv": first_conv,
        "classifier": "head",
    }
    if metadata.get("class_names"):
        cfg["label_names"] = tuple(metadata["class_names"])
    return cfg


class TimmInterface:
    """The part of timm's model API every vitkit classifier shares; a model has `config`, `head` and `reset_head`."""

    # what the checkpoint the model was loaded from records beside its weights (class names, preprocessing):
    # `vitkit.create_model(..., pretrained=True)` sets it; a model built from a name has none
    pretrained_metadata: dict = {}
    global_pool = "avg"  # timm's name of the pooling forward_head does

    @property
    def num_classes(self) -> int:
        return self.config.num_classes

    @property
    def head_hidden_size(self) -> int:
        """Width of what the head reads (the pre-logits layer's, where there is one)."""
        return self.num_features

    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """A new zero-initialised head for `num_classes` (0: none, forward returns the pooled features). The pooling is
        part of a vitkit model's architecture: `global_pool` may only name the one it has."""
        if global_pool is not None and global_pool != self.global_pool:
            raise ConfigError(
                f"global_pool: this model pools with {self.global_pool!r}, fixed when it is built; for another pooling "
                "build the model so (a ViT's classifier: token or gap)"
            )
        self.reset_head(num_classes)

    @property
    def pretrained_cfg(self) -> dict:
        return pretrained_cfg(self.config, self.pretrained_metadata, first_conv=self.first_conv)

    @property
    def default_cfg(self) -> dict:
        """timm's older name of `pretrained_cfg`."""
        return self.pretrained_cfg


def feature_level(module: str, channels: int, reduction: int | tuple[int, int]) -> dict:
    """One entry of `feature_info`: timm's keys (num_chs, reduction: pixels per feature-map cell, module)."""
    return {"module": module, "num_chs": channels, "reduction": reduction}
