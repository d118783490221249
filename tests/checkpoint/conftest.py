import os

import pytest
import torch

import vitkit

torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture
def make_model():
    """A small vitkit model with every tensor random (the zero-initialised head too), in eval mode."""

    def make(name: str = "vit_test", seed: int = 0, **overrides) -> vitkit.VisionTransformer:
        torch.manual_seed(seed)
        model = vitkit.create_model(name, **overrides).eval()
        with torch.no_grad():
            for key, p in model.named_parameters():
                scale = 1.0 if p.ndim == 1 and "norm" in key and key.endswith("weight") else 0.0
                p.copy_(torch.randn_like(p) * 0.3 + scale)
        return model

    return make


@pytest.fixture
def make_images():
    """Images in [-1, 1] for a config: (n, C, H, W), seeded."""

    def make(config, n: int = 2, seed: int = 1) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        return torch.rand(n, config.in_chans, *config.image_size, generator=g) * 2 - 1

    return make
