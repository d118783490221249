"""Size of a model: parameters and forward FLOPs, computed on the meta device (no memory, no time)."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from .config import BiTConfig, ConvStemConfig, ModelConfig, ViTConfig
from .registry import build_model


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@functools.lru_cache(maxsize=256)  # a config is frozen and its count fixed: a run start asks for it more than once
def count_flops(config: ModelConfig, batch_size: int = 1, *, backward: bool = False, executed: bool = False) -> int:
    """FLOPs of one batch (a multiply-add counts 2): matmuls, convolutions and attention.

    Forward only by default; with backward=True the forward and backward passes of a training step.
    The model's FLOPs, as the paper and MFU count them: every token through every layer. With
    executed=True, what `model(x)` runs: with a class token, its last layer computes that token alone.
    """
    return _by_blocks(lambda c: _counted_flops(c, batch_size, backward, executed), config)


def _counted_flops(config: ModelConfig, batch_size: int, backward: bool, executed: bool) -> int:
    with torch.device("meta"):
        model = build_model(config)
    x = torch.empty(batch_size, config.in_chans, *config.image_size, device="meta")
    with FlopCounterMode(display=False) as counter, torch.set_grad_enabled(backward):
        out = model(x) if executed else model.forward_head(model.forward_features(x))
        if backward:
            out.sum().backward()
    return counter.get_total_flops()


def _by_blocks(measure: Callable[[ModelConfig], int], config: ModelConfig) -> int:
    """measure(config) for a ViT of L blocks from its versions of one and two blocks: the blocks are alike, so each
    adds the same; the last (a class token's alone where executed) is in both. Exact, with three blocks run, not L."""
    if not isinstance(config, ViTConfig) or config.depth <= 2:
        return measure(config)
    one, two = measure(config.replace(depth=1)), measure(config.replace(depth=2))
    return one + (config.depth - 1) * (two - one)


def _meta_parameters(config: ModelConfig) -> int:
    with torch.device("meta"):
        return count_parameters(build_model(config))


def config_parameters(config: ModelConfig) -> int:
    """The learnable parameters of a model of `config`, as training counts them: no buffers (BatchNorm's running
    statistics are in a checkpoint, not among them)."""
    return _by_blocks(_meta_parameters, config)


def describe(config: ModelConfig) -> dict:
    """One row of `vitkit models`: shape of the model, parameters and GFLOPs per image."""
    params = config_parameters(config)
    if isinstance(config, BiTConfig):  # a ResNet: no heads, MLP or patches; "width" is the feature width
        return {
            "layers": config.depth, "width": config.num_features, "mlp": "-", "heads": "-", "patch": "-",
            "resolution": _resolution(config), "backbone": f"BiT-R{config.depth}x{config.width_factor}",
            "params": params, "gflops": count_flops(config) / 1e9,
        }  # fmt: skip
    ph, pw = config.total_patch_size
    return {
        "layers": config.depth,
        "width": config.width,
        "mlp": config.mlp_dim,
        "heads": config.num_heads,
        "patch": ph if ph == pw else f"{ph}x{pw}",
        "resolution": _resolution(config),
        "backbone": _backbone_name(config),
        "params": params,
        "gflops": count_flops(config) / 1e9,
    }


def _resolution(config: ModelConfig) -> int | str:
    h, w = config.image_size
    return h if h == w else f"{h}x{w}"


def _backbone_name(config: ViTConfig) -> str:
    if config.backbone is None:
        return "-"
    if isinstance(config.backbone, ConvStemConfig):
        return "conv " + "-".join(map(str, config.backbone.convs))
    layers = config.backbone.layers
    return f"R{3 * sum(layers) + 2}" if layers else "R-stem"
