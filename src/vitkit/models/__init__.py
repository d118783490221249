"""The model: config, Vision Transformer (Eq. 1-4), BiT ResNet for hybrids, named variants."""

from .config import ResNetConfig, ViTConfig
from .registry import MODELS, canonical_name, create_model, get_config, list_models
from .vit import VisionTransformer, resample_pos_embed, sincos_2d_pos_embed

__all__ = [
    "MODELS",
    "ResNetConfig",
    "ViTConfig",
    "VisionTransformer",
    "canonical_name",
    "create_model",
    "get_config",
    "list_models",
    "resample_pos_embed",
    "sincos_2d_pos_embed",
]
