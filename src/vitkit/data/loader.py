"""Batches in a reproducible order: the data-order state is (seed, epoch, position) and nothing else.

Small datasets (IDX, synthetic, or image files that fit `memory_mb`) live on the training device as
one uint8 tensor and are indexed there; large image folders stream through a multi-worker DataLoader
that decodes and resizes on the CPU. Either way the batch at (epoch, position) is the same, so a
resumed run sees exactly the data a straight run would have seen. (A DistributedSampler-style rank
slice of `epoch_order` is where data parallelism slots in.)
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from vitkit.errors import DataError

from .images import load_image
from .sources import Split


def epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The permutation of range(n) used in `epoch`: a function of (seed, epoch) only."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=g)


class FileImages(Dataset):
    """Decodes image files to (C, size, size) uint8 tensors, resized and centre-cropped."""

    def __init__(self, split: Split, channels: int, size: int, crop_pct: float = 1.0):
        self.paths, self.labels = split.paths, split.labels
        self.channels, self.size, self.crop_pct = channels, size, crop_pct

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        pixels = load_image(self.paths[i], self.channels, self.size, self.crop_pct)
        return torch.from_numpy(np.ascontiguousarray(pixels)), self.labels[i]


def load_into_memory(split: Split, channels: int, size: int, crop_pct: float = 1.0, workers: int = 0) -> Split:
    """Decode every file of `split` once into a (N, C, size, size) uint8 tensor."""
    if split.images is not None:
        return split
    loader = DataLoader(FileImages(split, channels, size, crop_pct), batch_size=256, num_workers=workers)
    images = torch.cat([x for x, _ in loader]) if len(split) else torch.empty(0, channels, size, size, dtype=torch.uint8)
    return Split(labels=split.labels, class_names=split.class_names, images=images, source=split.source)


def fits_in_memory(split: Split, channels: int, size: int, memory_mb: float) -> bool:
    return split.images is not None or len(split) * channels * size * size <= memory_mb * 2**20


class Batches:
    """Training batches of uint8 images (on `device`) and labels, `batch_size` per step, last partial batch dropped.

    `iterate(epoch, position)` starts at batch `position` of `epoch` and runs through later epochs forever.
    """

    def __init__(self, split: Split, batch_size: int, seed: int, device: torch.device, *, channels: int, size: int, workers: int = 0):
        if len(split) < batch_size:
            raise DataError(f"{split.source}: {len(split)} training images are fewer than one batch of {batch_size}; lower train.batch_size")
        self.split, self.batch_size, self.seed, self.device = split, batch_size, seed, device
        self.channels, self.size, self.workers = channels, size, workers
        self.per_epoch = len(split) // batch_size
        if split.images is not None:
            self.images = split.images.to(device)
            self.labels = split.labels.to(device)

    def iterate(self, epoch: int, position: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            order = epoch_order(len(self.split), self.seed, epoch)[: self.per_epoch * self.batch_size]
            order = order[position * self.batch_size :]
            if self.split.images is not None:
                index = order.to(self.device)
                for start in range(0, len(index), self.batch_size):
                    batch = index[start : start + self.batch_size]
                    yield self.images[batch], self.labels[batch]
            else:
                loader = DataLoader(
                    FileImages(self.split, self.channels, self.size),
                    batch_size=self.batch_size,
                    sampler=order.tolist(),
                    num_workers=self.workers,
                    pin_memory=self.device.type == "cuda",
                    persistent_workers=False,
                )
                for x, y in loader:
                    yield x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            epoch, position = epoch + 1, 0


def eval_batches(split: Split, batch_size: int, device: torch.device, *, channels: int, size: int, crop_pct: float, workers: int = 0):
    """Every image of `split` once, in order, as (uint8 images, labels) on `device`."""
    if split.images is not None:
        for start in range(0, len(split), batch_size):
            yield split.images[start : start + batch_size].to(device), split.labels[start : start + batch_size].to(device)
        return
    loader = DataLoader(FileImages(split, channels, size, crop_pct), batch_size=batch_size, num_workers=workers)
    for x, y in loader:
        yield x.to(device), y.to(device)
