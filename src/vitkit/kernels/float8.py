"""train.precision=fp8: the transformer blocks' linear layers train through torchao's float8 linears (e4m3 inputs and
weights, e5m2 gradients, each scaled by its tensor's absolute maximum every step); everything else runs in bf16
autocast, as train.precision=bf16.

    converted = float8.convert(model, device)   # before the optimizer, the distributed wrapper and torch.compile
    float8.describe(model)                      # the plan's words: how many linear layers, and where

Only linear layers inside the blocks (Q/K/V, the attention output, both MLP layers) whose two sizes are multiples of
16 (what fp8 matrix units multiply) convert; the patch embedding and the head keep bf16, as torchao advises for the
first and last layers. A converted layer keeps its parameters, so checkpoints, EMA and exports are those of a bf16 run.
fp8 matmuls pay on GPUs with fp8 tensor cores (compute capability 8.9 and up: Ada, Hopper, Blackwell); an older GPU is
refused. The CPU has none: there the layers are emulated (inputs rounded to fp8, multiplied in fp32), several times
slower than bf16, to check a recipe before a GPU run.
"""

from __future__ import annotations

import torch
from torch import nn

from vitkit.errors import ConfigError
from vitkit.kernels import import_torchao

MIN_CAPABILITY = (8, 9)  # the first NVIDIA GPUs with fp8 tensor cores (Ada); Hopper is 9.0
MULTIPLE = 16  # fp8 GEMMs need both sizes of the weight in multiples of this
INSIDE = "blocks."  # the transformer blocks, by their parameter names


def eligible(module: nn.Module, name: str) -> bool:
    """Whether the layer `name` of a vitkit model trains in fp8: a linear layer of a block, both sizes multiples of 16."""
    return (
        isinstance(module, nn.Linear)
        and name.startswith(INSIDE)
        and module.in_features % MULTIPLE == 0
        and module.out_features % MULTIPLE == 0
    )


def check(device: torch.device) -> None:
    """A clear one-line error where fp8 training cannot run: no torchao, a GPU without fp8 tensor cores, or a device
    other than a CUDA GPU or the CPU."""
    try:
        import_torchao()
        import torchao.float8  # noqa: F401
    except Exception as e:
        raise ConfigError(
            f"train.precision=fp8: needs torchao's float8 training ({type(e).__name__}: {e}); "
            "install it (pip install 'vitkit[int8]') or use train.precision=bf16"
        ) from None
    if device.type == "cuda":
        capability = torch.cuda.get_device_capability(device)
        if capability < MIN_CAPABILITY:
            raise ConfigError(
                f"train.precision=fp8: {torch.cuda.get_device_name(device)} (compute capability "
                f"{capability[0]}.{capability[1]}) has no fp8 tensor cores (8.9 and up: Ada, Hopper); "
                "use train.precision=bf16"
            )
    elif device.type != "cpu":
        raise ConfigError(f"train.precision=fp8: runs on NVIDIA GPUs (and the CPU, for checks), not on {device.type}")


def convert(model: nn.Module, device: torch.device) -> int:
    """The eligible linear layers of `model` as torchao's float8 training linears, in place (their parameters kept):
    how many converted. Raises ConfigError where fp8 cannot run (`check`)."""
    check(device)
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    before = {name for name, m in model.named_modules() if eligible(m, name)}
    # without fp8 matrix units, emulated: inputs rounded to fp8 as on a GPU, multiplied in fp32 (torch's own fp8
    # matmul on the CPU is a plain reference loop)
    config = Float8LinearConfig(emulate=device.type != "cuda")
    convert_to_float8_training(model, module_filter_fn=lambda m, name: name in before, config=config)
    return len(before)


def converted(model: nn.Module) -> int:
    """How many of `model`'s layers are float8 training linears."""
    return sum(type(m).__name__ == "Float8Linear" for m in model.modules())


def describe(model: nn.Module, device: torch.device) -> str:
    """The plan's precision line for an fp8 run."""
    linears = sum(isinstance(m, nn.Linear) for m in model.modules())
    where = (
        "; the CPU has no fp8 matrix units: emulated (rounded to fp8, multiplied in fp32), several times slower "
        "than bf16, a check before a GPU run"
        if device.type == "cpu"
        else ""
    )
    return (
        f"fp8 (train.precision=fp8): {converted(model)} of {linears} linear layers in torchao's float8 "
        f"(e4m3, e5m2 gradients, scales per tensor and step), bf16 autocast elsewhere{where}"
    )
