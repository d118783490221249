"""The model: config, Vision Transformer (Eq. 1-4), BiT ResNet and conv stem for hybrids, BiT ResNet-v2 baseline, named variants."""

from .bit import ResNetV2
from .config import BiTConfig, ConvStemConfig, ModelConfig, ResNetConfig, ViTConfig, config_from_dict
from .features import FeatureInfo, FeatureNet
from .registry import MODELS, build_model, canonical_name, create_model, get_config, list_models
from .vit import VisionTransformer, resample_pos_embed, sincos_2d_pos_embed

__all__ = [
    "BiTConfig",
    "MODELS",
    "ModelConfig",
    "ResNetV2",
    "build_model",
    "ConvStemConfig",
    "FeatureInfo",
    "FeatureNet",
    "config_from_dict",
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
