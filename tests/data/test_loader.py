"""DataLoader workers during a training run: a SIGTERM from outside (a scheduler signalling the whole process
group) must not kill them, or torch raises in the middle of a step; their parent can still stop them."""

import multiprocessing
import subprocess

import numpy as np
import torch
from PIL import Image

from vitkit.data import Batches
from vitkit.data.sources import open_split
from vitkit.train import faults


def _streamed(tmp_path):
    for c in ("a", "b"):
        (tmp_path / "train" / c).mkdir(parents=True)
        for i in range(8):
            Image.fromarray(np.full((8, 8, 3), 20 * i + c.startswith("b"), dtype=np.uint8)).save(
                tmp_path / "train" / c / f"{i}.png"
            )
    split = open_split(tmp_path, "train", channels=3)
    return Batches(split, 4, seed=0, device=torch.device("cpu"), channels=3, size=8, workers=2)


def test_workers_survive_an_outside_sigterm_while_a_run_handles_it(tmp_path):
    batches = _streamed(tmp_path)
    straight = [y for _, (_, y) in zip(range(6), batches.iterate(0, 0))]
    with faults.stop_on_signals():
        stream = batches.iterate(0, 0)
        seen = [next(stream)[1]]
        workers = multiprocessing.active_children()
        assert len(workers) == 2
        for w in workers:
            subprocess.run(["kill", "-TERM", str(w.pid)], check=True)  # sent by another process, as a scheduler would
        seen += [next(stream)[1] for _ in range(5)]  # the same batches; no "DataLoader worker killed" error
        assert all(w.is_alive() for w in workers if w in multiprocessing.active_children())
        assert faults.stop_requested() is None  # the workers did not ask for anything either
    for a, b in zip(straight, seen):
        assert torch.equal(a, b)


def test_the_parent_can_still_terminate_its_workers(tmp_path):
    batches = _streamed(tmp_path)
    with faults.stop_on_signals():
        stream = batches.iterate(0, 0)
        next(stream)
        workers = multiprocessing.active_children()
        for w in workers:
            w.terminate()  # SIGTERM from the parent: what DataLoader shutdown and interpreter exit do
        for w in workers:
            w.join(timeout=30)
            assert not w.is_alive()
        stream.close()


def test_a_batch_of_channels_last_crops_keeps_their_pixels_and_layout():
    from vitkit.data.loader import collate

    g = torch.Generator().manual_seed(0)
    hwc = [torch.randint(0, 256, (5, 7, 3), dtype=torch.uint8, generator=g) for _ in range(4)]
    crops = [x.permute(2, 0, 1) for x in hwc]  # (C, H, W) views over (H, W, C) memory, as inception_crop returns
    planar = [x.contiguous() for x in crops]  # load_image's (C, H, W) arrays
    labels = [torch.tensor(i) for i in range(4)]
    batch, y, errors = collate([(x, t, None) for x, t in zip(crops, labels)])
    assert batch.shape == (4, 3, 5, 7) and torch.equal(batch, torch.stack(planar)) and errors == []
    assert batch.is_contiguous(memory_format=torch.channels_last) and torch.equal(y, torch.arange(4))
    batch, _, _ = collate([(x, t, None) for x, t in zip(planar, labels)])
    assert batch.is_contiguous() and torch.equal(batch, torch.stack(planar))


def test_the_scan_measures_images_upright_and_reads_shard_records(tmp_path):
    """The fit line said "median 40x100 px" of photos stored 40x100 with an EXIF rotation (upright 100x40, as training
    and the sizes line read them), and a shard record (not a path) was opened as if it were a file."""
    from vitkit.data import Split
    from vitkit.data.scan import scan
    from vitkit.data.sources import open_sharded, write_tar_shards

    paths = []
    for i in range(3):
        image = Image.fromarray(
            np.random.default_rng(i).integers(0, 255, (100, 40, 3), dtype=np.uint8)
        )  # 40 wide, 100 high
        exif = image.getexif()
        exif[0x0112] = 6  # shown turned 90 degrees: 100 wide, 40 high
        image.save(tmp_path / f"{i}.jpg", exif=exif)
        paths.append(tmp_path / f"{i}.jpg")
    found = scan(Split(torch.zeros(3, dtype=torch.long), ["a"], paths=paths))
    assert (found.scanned, found.width, found.height, found.channels) == (3, 100, 40, 3)
    write_tar_shards(Split(torch.zeros(3, dtype=torch.long), ["a"], paths=paths), tmp_path / "shards")
    records = open_sharded(tmp_path / "shards", "train", val_fraction=0.0)
    assert records.images is None and (scan(records).scanned, scan(records).width) == (3, 100)


def test_a_scan_that_could_read_no_image_does_not_report_a_size():
    """Every sampled image unreadable: the fit line said "median 0x0 px, colour"."""
    from vitkit.data.scan import ImageScan

    assert (
        str(ImageScan(0, 90, 0, 0, 3, unreadable=64))
        == "none of the 64 of 90 images looked at could be read: size and colour not known"
    )
    assert (
        str(ImageScan(60, 90, 28, 30, 1, unreadable=4))
        == "scanned 60 of 90 images (4 unreadable): median 30x28 px, grayscale"
    )


def test_repeated_augmentation_repeats_each_image_in_a_resumable_order():
    """data.repeats=3 (DeiT): the epoch's order with each image three times in a row, cut to the epoch's length;
    a function of (seed, epoch) like the plain order, so a resumed run reads what a straight one reads."""
    from vitkit.data import epoch_order, open_dataset

    split = open_dataset("synthetic", None, "train", channels=1, image_size=4, synthetic_size=30)
    make = lambda k: Batches(split, 6, seed=2, device=torch.device("cpu"), channels=1, size=4, repeats=k)
    batches, plain = make(3), make(1)
    assert batches.per_epoch == plain.per_epoch == 5
    for epoch in (0, 1):
        order = batches._order(epoch).flatten()
        assert torch.equal(order, epoch_order(30, 2, epoch).repeat_interleave(3)[:30])
        assert torch.equal(order.view(-1, 3), order[::3, None].expand(-1, 3))  # three copies in a row
    straight = batches.iterate(0, 0)
    seen = [next(straight)[0] for _ in range(8)]
    resumed = batches.iterate(1, 1)  # batch 6 = epoch 1, position 1
    for a in seen[6:]:
        assert torch.equal(a, next(resumed)[0])
