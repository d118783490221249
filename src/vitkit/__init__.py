"""vitkit: the Vision Transformer of "An Image is Worth 16x16 Words" as a PyTorch toolkit."""

from vitkit.checkpoint import load_pretrained, save_pretrained
from vitkit.classifier import Classifier
from vitkit.errors import CheckpointError, ConfigError, DataError, TrainingError, VitkitError
from vitkit.models import (
    ResNetConfig,
    ViTConfig,
    VisionTransformer,
    create_model,
    get_config,
    list_models,
    resample_pos_embed,
)

__version__ = "0.1.0"

__all__ = [
    "CheckpointError",
    "Classifier",
    "ConfigError",
    "DataError",
    "ResNetConfig",
    "TrainingError",
    "ViTConfig",
    "VisionTransformer",
    "VitkitError",
    "__version__",
    "create_model",
    "get_config",
    "list_models",
    "load_pretrained",
    "resample_pos_embed",
    "save_pretrained",
]
