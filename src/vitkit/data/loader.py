"""Batches in a reproducible order: the data-order state is (seed, epoch, position) and nothing else.

Small datasets (IDX, synthetic, or image files that fit `memory_mb`) live on the training device as
one uint8 tensor and are indexed there; large image folders stream through a multi-worker DataLoader
that decodes and resizes on the CPU. Either way the batch at (epoch, position) is the same, so a
resumed run sees exactly the data a straight run would have seen. Under torchrun every rank walks the
same order and takes its contiguous share of each batch, so N processes see what one process would.
"""

from __future__ import annotations

import math
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from vitkit.errors import ConfigError, DataError
from vitkit.limits import check_batch_room

from .decode import crop_draws, inception_crop
from .images import as_hw, load_image
from .sources import parquet
from .split import BadFiles, Split


def epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The permutation of range(n) used in `epoch`: a function of (seed, epoch) only."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=g)


def block_order(blocks: np.ndarray, seed: int, epoch: int, window: int = parquet.ROW_GROUP_WINDOW) -> torch.Tensor:
    """A permutation of range(len(blocks)) that keeps the samples of a block (a Parquet row group) near each
    other: the blocks in a seeded order, then the samples of every `window` consecutive blocks shuffled
    together. A function of (seed, epoch) only, like `epoch_order`."""
    g = np.random.default_rng((seed, epoch))
    rank = np.empty(int(blocks.max()) + 1, dtype=np.int64)
    rank[g.permutation(len(rank))] = np.arange(len(rank))
    return torch.from_numpy(np.lexsort((g.random(len(blocks)), rank[blocks] // window)))


class FileImages(Dataset):
    """Decodes image files to (C, size, size) uint8 tensors: resized and centre-cropped, or, with `crop`
    = (scale, ratio), the Inception crop of the whole image (items are then (index, batch, slot): the
    crop's random numbers are a function of the seed, the batch number and the place in the batch).

    An item is (pixels, label, None), or (None, label, (index, path, message)) for a file that cannot
    be read: the error travels back from the DataLoader workers with the batch (see `collate`).
    """

    def __init__(
        self,
        split: Split,
        channels: int,
        size: int,
        crop_pct: float = 1.0,
        crop: tuple | None = None,
        seed: int = 0,
        background=None,
    ):
        self.paths, self.labels = split.paths, split.labels
        self.channels, self.size, self.crop_pct, self.crop, self.seed = channels, size, crop_pct, crop, seed
        self.background = background  # the model config's: transparent pixels are composited on it

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, item) -> tuple[torch.Tensor | None, torch.Tensor, tuple[int, str, str] | None]:
        i, batch, slot = item if self.crop is not None else (item, 0, 0)
        try:
            if self.crop is None:
                # writable
                pixels = np.array(
                    load_image(self.paths[i], self.channels, self.size, self.crop_pct, background=self.background),
                    copy=True,
                )
            else:
                draws = crop_draws(self.seed, batch, slot)
                # a new array
                pixels = inception_crop(
                    self.paths[i], self.channels, (self.size, self.size), draws, *self.crop, background=self.background
                )
        except DataError as err:
            return None, self.labels[i], (i, str(self.paths[i]), str(err))
        return torch.from_numpy(pixels), self.labels[i], None


def collate(items: list) -> tuple[torch.Tensor | None, torch.Tensor | None, list[tuple[int, str, str]]]:
    """(images, labels) of the readable files of a batch (None when there is none) and the errors of the others."""
    good = [(x, y) for x, y, err in items if err is None]
    errors = [err for _, _, err in items if err is not None]
    if not good:
        return None, None, errors
    return _stack([x for x, _ in good]), torch.stack([y for _, y in good]), errors


def _stack(images: list[torch.Tensor]) -> torch.Tensor:
    """(B, C, H, W) of (C, H, W) images. Crops that lie channels-last in memory (`inception_crop`'s) stay so: stacked
    as (H, W, C) it is a plain copy, where a (C, H, W) stack moves every byte to a new place; the batch is then a
    channels-last (B, C, H, W) view."""
    if all(x.permute(1, 2, 0).is_contiguous() for x in images):
        return torch.stack([x.permute(1, 2, 0) for x in images]).permute(0, 3, 1, 2)
    return torch.stack(images)


def _sigterm_from_parent_only(worker_id: int) -> None:
    """In a DataLoader worker started with SIGTERM blocked (see `_start_workers`): exit on the parent's
    SIGTERM (its shutdown), ignore everyone else's (a scheduler signalling the whole process group)."""
    if not hasattr(signal, "sigwaitinfo") or signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, []):
        return  # torch's default: the worker dies on any SIGTERM
    parent = os.getppid()

    def wait() -> None:
        while True:
            if signal.sigwaitinfo({signal.SIGTERM}).si_pid == parent:
                os._exit(0)

    threading.Thread(target=wait, daemon=True).start()


def _start_workers(loader: DataLoader):
    """iter(loader). While a training run handles SIGTERM itself (a Python handler is installed), the workers
    are forked with SIGTERM blocked, so a SIGTERM sent to the whole process group cannot kill them (torch would
    then raise in the middle of a step) and the run stops at its next step boundary."""
    if not loader.num_workers or not callable(signal.getsignal(signal.SIGTERM)) or not hasattr(signal, "sigwaitinfo"):
        return iter(loader)
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        return iter(loader)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)  # a SIGTERM that came meanwhile reaches the handler now


def _file_batches(
    split: Split,
    channels: int,
    size: int,
    crop_pct: float,
    bad: BadFiles | None,
    crop=None,
    seed=0,
    background=None,
    **loader_args,
):
    """(images, labels, errors) batches of decoded files, transparent pixels on `background`; errors go to `bad`
    (default: fail on the first)."""
    bad = BadFiles("fail") if bad is None else bad
    if loader_args.get("num_workers"):  # keep the workers busy: a few batches decoded ahead
        loader_args.setdefault("prefetch_factor", 4)
    loader = DataLoader(
        FileImages(split, channels, size, crop_pct, crop, seed, background),
        collate_fn=collate,
        worker_init_fn=_sigterm_from_parent_only,
        **loader_args,
    )
    for x, y, errors in _start_workers(loader):
        bad.report(errors)
        yield x, y, errors


def load_into_memory(
    split: Split,
    channels: int,
    size: int | tuple[int, int],
    crop_pct: float = 1.0,
    workers: int = 0,
    bad: BadFiles | None = None,
    background=None,
) -> Split:
    """Decode every file of `split` once into a (N, C, H, W) uint8 tensor at `size` (one side, or (H, W)), transparent
    pixels on `background` (the model config's); files `bad` skips are left out."""
    if split.images is not None:
        return split
    chunks, dropped = [], set()
    batches = _file_batches(
        split, channels, size, crop_pct, bad, background=background, batch_size=256, num_workers=workers
    )
    for x, _, errors in batches:
        chunks += [] if x is None else [x]
        dropped |= {i for i, _, _ in errors}
    if dropped:
        split = split.subset(np.array([i for i in range(len(split)) if i not in dropped], dtype=np.int64))
        if not len(split):
            raise DataError(f"{split.source}: none of the image files could be read (see the messages above)")
    images = torch.cat(chunks) if chunks else torch.empty(0, channels, *as_hw(size), dtype=torch.uint8)
    return replace(split, images=images, paths=None)  # the same images, cut and selection, now decoded


def fits_in_memory(split: Split, channels: int, size: int | tuple[int, int], memory_mb: float) -> bool:
    return split.images is not None or len(split) * channels * math.prod(as_hw(size)) <= memory_mb * 2**20


class Batches:
    """Training batches of uint8 images (on `device`) and labels, `batch_size` per step, last partial batch dropped.

    `iterate(epoch, position)` starts at batch `position` of `epoch` and runs through later epochs forever.
    With `world` > 1 processes, each yields only its contiguous share (rank) of every global batch.
    Streamed files are read by one DataLoader for the whole run (its workers live across epochs); with
    `crop` = (scale, ratio) they come as Inception crops of the whole image, `size` x `size` (`cropped`).
    Transparent pixels of streamed files are composited on `background` (the model config's).
    With `repeats` k > 1 (repeated augmentation, DeiT), every image of the epoch's order comes k times in a row, and
    each copy is augmented on its own (its own place in the batch); the epoch keeps its length, so it holds the first
    1/k of the order.
    """

    def __init__(
        self,
        split: Split,
        batch_size: int,
        seed: int,
        device: torch.device,
        *,
        channels: int,
        size: int,
        workers: int = 0,
        rank: int = 0,
        world: int = 1,
        bad: BadFiles | None = None,
        crop: tuple | None = None,
        repeats: int = 1,
        background=None,
    ):
        if len(split) < batch_size:
            raise DataError(
                f"{split.source}: {len(split)} training images are fewer than one batch of {batch_size}; lower train.batch_size"
            )
        self.split, self.batch_size, self.seed, self.device = split, batch_size, seed, device
        self.channels, self.size, self.workers, self.bad = channels, size, workers, bad
        self.repeats, self.background = repeats, background
        self.crop = crop if split.images is None else None
        self.cropped = self.crop is not None  # the device-side transform must not crop again
        self.blocks = parquet.blocks(split)  # Parquet: row-group windows
        self.per_epoch = len(split) // batch_size
        self.share = slice(rank * batch_size // world, (rank + 1) * batch_size // world)  # this rank's part of a batch
        if split.images is not None:
            self.images = split.images.to(device)
            self.labels = split.labels.to(device)

    def _order(self, epoch: int) -> torch.Tensor:
        """(per_epoch, batch_size) indices: the batches of `epoch`."""
        order = (
            epoch_order(len(self.split), self.seed, epoch)
            if self.blocks is None
            else block_order(self.blocks, self.seed, epoch)
        )
        if self.repeats > 1:
            order = order.repeat_interleave(self.repeats)
        return order[: self.per_epoch * self.batch_size].view(self.per_epoch, self.batch_size)

    def _items(self, epoch: int, position: int):
        """This rank's DataLoader items from batch `position` of `epoch` on, forever: file indices, with the
        crop's (batch number, place in the batch) when files are cropped here."""
        while True:
            order = self._order(epoch)
            for b in range(position, self.per_epoch):
                number = epoch * self.per_epoch + b
                for slot in range(self.share.start, self.share.stop):
                    i = int(order[b, slot])
                    yield (i, number, slot) if self.cropped else i
            epoch, position = epoch + 1, 0

    def iterate(self, epoch: int, position: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self.split.images is None:  # a batch holding a bad file (data.on_error=skip) is that much smaller
            for x, y, _ in _file_batches(
                self.split,
                self.channels,
                self.size,
                1.0,
                self.bad,
                crop=self.crop,
                seed=self.seed,
                background=self.background,
                batch_size=self.share.stop - self.share.start,
                sampler=self._items(epoch, position),
                num_workers=self.workers,
                pin_memory=self.device.type == "cuda",
            ):
                if x is None:
                    raise DataError(
                        f"{self.split.source}: no image of a whole batch could be read; see the messages above"
                    )
                yield x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            return
        while True:
            for batch in self._order(epoch)[position:].to(self.device):
                yield self.images[batch[self.share]], self.labels[batch[self.share]]
            epoch, position = epoch + 1, 0


def eval_batches(
    split: Split,
    batch_size: int,
    device: torch.device,
    *,
    channels: int,
    size: int | tuple[int, int],
    crop_pct: float,
    workers: int = 0,
    bad: BadFiles | None = None,
    background=None,
):
    """Every image of `split` once, in order, as (uint8 images, labels) on `device` (files `bad` skips left out;
    transparent pixels on `background`, the model config's)."""
    most = min(batch_size, len(split))  # the most held at once: a batch, or the whole split where it is smaller
    check_batch_room(
        most, as_hw(size), channels, f"--batch-size {batch_size}", ConfigError, hint="choose a smaller --batch-size"
    )
    if split.images is not None:
        for start in range(0, len(split), batch_size):
            yield (
                split.images[start : start + batch_size].to(device),
                split.labels[start : start + batch_size].to(device),
            )
        return
    batches = _file_batches(
        split, channels, size, crop_pct, bad, background=background, batch_size=batch_size, num_workers=workers
    )
    for x, y, _ in batches:
        if x is not None:
            yield x.to(device), y.to(device)
