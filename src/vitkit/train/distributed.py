"""Data parallelism on PyTorch's own engine: torchrun starts the processes, DDP or FSDP2 wraps the model.

    torchrun --nproc_per_node=N -m vitkit train --config ... --out RUN            # DDP
    torchrun --nproc_per_node=N -m vitkit train ... train.strategy=fsdp            # FSDP2 (fully_shard)

torchrun sets RANK / WORLD_SIZE / LOCAL_RANK; `setup` joins the process group (NCCL on GPUs, gloo on
CPUs). Every rank walks the same global batch order and takes its contiguous share of each micro-batch,
so N processes see exactly the samples one process would, and with the gradients averaged across ranks
a step equals the single-process step on the same global batch. Only rank 0 logs and writes files;
FSDP checkpoints go through torch.distributed.checkpoint, so a run resumes on any world size.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from vitkit.errors import ConfigError, shown
from vitkit.files import read_pickle_of, verify_checksums

STRATEGIES = ("auto", "ddp", "fsdp")


@dataclass(frozen=True)
class Dist:
    """Where this process stands: its rank, the world size and how the model is spread."""

    rank: int = 0
    size: int = 1
    strategy: str = "none"  # none | ddp | fsdp

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def sharded(self) -> bool:
        return self.strategy == "fsdp"

    def share(self, batch: torch.Tensor) -> torch.Tensor:
        """This rank's contiguous share of a global (micro-)batch."""
        n = batch.shape[0] // self.size
        return batch[self.rank * n : (self.rank + 1) * n]


def launched() -> bool:
    """True inside a torchrun (or any torch.distributed) launch."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


# The one reader of the launcher's environment: every other module asks these.
def rank() -> int:
    """This process's rank: RANK under torchrun, else 0."""
    return int(os.environ.get("RANK", "0"))


def is_main() -> bool:
    """Rank 0 under torchrun (it alone says what the run does, holds its lock and writes its files), else the only
    process."""
    return os.environ.get("RANK", "0") == "0"


def world_size() -> int:
    """Processes the run is split across: WORLD_SIZE under torchrun, else 1."""
    try:
        return max(int(os.environ.get("WORLD_SIZE", "1")), 1)
    except ValueError:
        raise ConfigError(
            f"WORLD_SIZE: expected a number of processes, got {shown(os.environ['WORLD_SIZE'])}"
        ) from None


def local_world_size() -> int:
    """Processes on this machine (torchrun's --nproc_per_node): LOCAL_WORLD_SIZE, else 1."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def under_torchrun() -> bool:
    """Started by torchrun (its elastic agent forwards signals to every process)."""
    return "TORCHELASTIC_RUN_ID" in os.environ


def setup(strategy: str, device: torch.device) -> tuple[Dist, torch.device]:
    """Join the process group when launched by torchrun; pick this rank's GPU."""
    if strategy not in STRATEGIES:
        raise ConfigError(f"train.strategy: expected one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if not launched():
        if strategy == "fsdp":
            raise ConfigError(
                "train.strategy=fsdp: start the run with torchrun, e.g. torchrun --nproc_per_node=2 -m vitkit train ..."
            )
        return Dist(), device
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Dist(rank, size, "fsdp" if strategy == "fsdp" else "ddp"), device


def teardown() -> None:
    """Leave the process group joined by `setup` (nothing outside a torchrun launch)."""
    if launched() and dist.is_initialized():
        dist.destroy_process_group()


def wrap(model: nn.Module, d: Dist, device: torch.device, blocks: Iterable[nn.Module]) -> nn.Module:
    """The module to call in training: the model itself, DDP around it, or the model sharded in place (FSDP2).

    Under FSDP each of `blocks` (the transformer blocks, wherever they sit inside `model`) is its own unit.
    """
    if d.strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if d.strategy == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for block in blocks:  # one all-gather per block, freed after use
            fully_shard(block)
        fully_shard(model)
    return model


def grad_sync(module: nn.Module, d: Dist, sync: bool):
    """A context for one micro-batch: gradients are reduced across ranks only when `sync` (the last of a step)."""
    if d.strategy == "ddp" and not sync:
        return module.no_sync()
    if d.strategy == "fsdp":
        module.set_requires_gradient_sync(sync)
    return nullcontext()


def mean(value: torch.Tensor, d: Dist) -> torch.Tensor:
    """The mean of a tensor over ranks (itself in one process)."""
    if d.size == 1:
        return value
    value = value.detach().clone()
    dist.all_reduce(value)  # gloo has no AVG: sum, then divide
    return value / d.size


def any_rank(flag: bool, d: Dist) -> bool:
    """True on every rank if `flag` is true on any (e.g. a stop signal that reached one process first)."""
    if d.size == 1:
        return flag
    value = torch.tensor([1.0 if flag else 0.0])
    if dist.get_backend() == "nccl":
        value = value.cuda()
    dist.all_reduce(value)
    return bool(value.item() > 0)


def barrier(d: Dist) -> None:
    if d.size > 1:
        dist.barrier()


def gather_objects(obj: Any, d: Dist) -> list[Any]:
    """`obj` from every rank, in rank order."""
    if d.size == 1:
        return [obj]
    out: list[Any] = [None] * d.size
    dist.all_gather_object(out, obj)
    return out


# -- FSDP state: sharded checkpoints through torch.distributed.checkpoint --------------------------
def full_state_dict(model: nn.Module, d: Dist) -> dict[str, torch.Tensor]:
    """The whole model's weights on CPU (rank 0 gets them; every rank must call this under FSDP)."""
    if not d.sharded:
        return {k: v.detach().cpu() for k, v in model.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def full_tensors(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Whole tensors on CPU from a state dict whose entries may be FSDP shards (every rank must call)."""
    from torch.distributed.tensor import DTensor

    return {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().cpu() for k, v in state.items()}


def save_sharded(
    model: nn.Module, optimizer: torch.optim.Optimizer, path: Path, ema: dict[str, torch.Tensor] | None = None
) -> None:
    """Every rank writes its shards of the model, optimizer and (if kept) EMA state to `path` (a directory)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    if ema is not None:
        state["ema"] = ema
    dcp.save(state, checkpoint_id=str(path))


def load_sharded(
    model: nn.Module, optimizer: torch.optim.Optimizer, path: Path, ema: dict[str, torch.Tensor] | None = None
) -> None:
    """Load a sharded checkpoint written with any world size into this run's shards.

    Every file of `path` must match the digest its step checkpoint's checksums.json took when it was saved, and the
    files are then read without running code (`_dcp_classes`). `ema` (sharded like the model's state
    dict) is filled in place when the checkpoint holds EMA weights; a run that did not keep them starts its average
    from the current weights.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    verify_checksums(path.parent, complete=path.name)
    safe_reader, safe_planner = _dcp_classes()
    reader, planner = safe_reader(str(path)), safe_planner()
    saved = reader.read_metadata().state_dict_metadata
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    if ema is not None and any(key.startswith("ema.") for key in saved):
        state["ema"] = ema
    dcp.load(state, storage_reader=reader, planner=planner)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])


# DCP writes its .metadata as a pickle of these types; reading it builds them and nothing else
_DCP_MODULES = ("torch.distributed.checkpoint.metadata", "torch.distributed.checkpoint.filesystem")
_DCP_OTHERS = {
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"),
    ("collections", "OrderedDict"),
}


def _dcp_type(module: str, name: str) -> bool:
    if (module, name) in _DCP_OTHERS:
        return True
    if module == "torch":  # dtypes and memory formats are values of torch, not callables
        return isinstance(getattr(torch, name, None), (torch.dtype, torch.memory_format))
    if module in _DCP_MODULES:
        found = getattr(sys.modules.get(module), name, None)
        return isinstance(found, type) and found.__module__ == module  # its own dataclasses and enums, no function
    return False


def _dcp_classes():
    from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader

    class SafeReader(FileSystemReader):
        """DCP's file reader, its .metadata read by an unpickler that builds DCP's own types only."""

        def read_metadata(self, *args: Any, **kwargs: Any):
            rank = kwargs.get("rank")
            name = ".metadata" if rank is None else f"__{rank}.metadata"
            metadata = read_pickle_of(
                Path(self.path) / name,
                _dcp_type,
                "DCP metadata",
                "the sharded checkpoint is damaged or was changed; resume from another checkpoint",
            )
            if getattr(metadata, "storage_meta", None) is None:
                from torch.distributed.checkpoint.metadata import StorageMeta

                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    class SafePlanner(DefaultLoadPlanner):
        """DCP's load planner, its non-tensor values (learning rates, betas) read with weights_only=True."""

        def load_bytes(self, read_item, value) -> None:
            loaded = torch.load(value, weights_only=True)
            if self.flatten_state_dict:
                from torch.distributed.checkpoint._traverse import set_element

                set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], loaded)
            else:
                self.state_dict[read_item.dest_index.fqn] = loaded

    return SafeReader, SafePlanner
