"""vitkit: the Vision Transformer of "An Image is Worth 16x16 Words" as a PyTorch toolkit."""

import importlib
import importlib.util

from vitkit.errors import CheckpointError, ConfigError, DataError, TrainingError, VitkitError

# The rest is imported on first use (PEP 562): `import vitkit.cli` then loads no torch, so the command line answers
# --help at once and a Ctrl-C while torch loads is vitkit's one line, not a traceback from the import.
_LAZY = {
    "load_pretrained": "vitkit.checkpoint",
    "save_pretrained": "vitkit.checkpoint",
    "create_model": "vitkit.checkpoint",  # the named models, and with pretrained=True any checkpoint or hub name
    "list_models": "vitkit.checkpoint",  # the named models, and with pretrained=True the hub models in the cache
    "Classifier": "vitkit.inference.classifier",
    **{
        name: "vitkit.models"
        for name in (
            "ConvStemConfig",
            "ResNetConfig",
            "ViTConfig",
            "VisionTransformer",
            "get_config",
            "resample_pos_embed",
        )
    },
}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    # a subpackage, as `import vitkit` made them before: vitkit.checkpoint
    elif importlib.util.find_spec(f"vitkit.{name}") is not None:
        value = importlib.import_module(f"vitkit.{name}")
    else:
        raise AttributeError(f"module 'vitkit' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__version__ = "0.2.0"

__all__ = [
    "CheckpointError",
    "Classifier",
    "ConfigError",
    "ConvStemConfig",
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
