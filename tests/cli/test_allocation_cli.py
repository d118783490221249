"""Sizes taken from flags (--image-size, --batch, --batch-size) are checked against the memory the process may
use before anything is allocated from them: one line naming the flag and what it would need, exit 2, instead of an
allocator's traceback. Each command runs as a subprocess under an address-space limit, so a miss fails quickly
instead of eating the machine's memory."""

import resource

import numpy as np
import pytest
from PIL import Image

import vitkit

MEMORY = 4 << 30  # address space for a vitkit process: torch's import and a tiny model fit many times over
TIMEOUT = 120


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny checkpoint and an image folder with train and test splits of three classes."""
    root = tmp_path_factory.mktemp("alloc")
    vitkit.save_pretrained(vitkit.create_model("vit_test", num_classes=3), root / "ck")
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for name in "abc":
            folder = root / "data" / split / name
            folder.mkdir(parents=True)
            for i in range(2):
                Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    return root


def refused(done, *words: str) -> None:
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "alloc" not in done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert "memory" in lines[0] and "needs" in lines[0]


def test_fewshot_at_an_image_size_no_memory_holds(run_cli, tiny):
    done = run_cli(
        "fewshot", tiny / "ck", "--data", tiny / "data", "--shots", "1", "--out", tiny / "o1",
        "--image-size", "65536", timeout=TIMEOUT, preexec_fn=_limited,
    )  # fmt: skip
    refused(done, "--image-size", "65536x65536")
    assert not (tiny / "o1" / "fewshot.json").exists()


def test_benchmark_at_an_image_size_no_memory_holds(run_cli):
    done = run_cli("benchmark", "--model", "vit_test", "--image-size", "65536", timeout=TIMEOUT, preexec_fn=_limited)
    refused(done, "--image-size", "65536x65536")


def test_benchmark_with_a_batch_no_memory_holds(run_cli):
    done = run_cli("benchmark", "--model", "vit_test", "--batch", "2147483647", timeout=TIMEOUT, preexec_fn=_limited)
    refused(done, "--batch 2147483647")


def test_a_batch_size_over_the_data_reads_the_data_as_one_batch(run_cli, tiny):
    """--batch-size is the most read at once: a small dataset is one batch of its own size, and that fits."""
    done = run_cli(
        "fewshot", tiny / "ck", "--data", tiny / "data", "--shots", "1", "--seeds", "1", "--out", tiny / "o2",
        "--batch-size", "2147483647", timeout=TIMEOUT, preexec_fn=_limited,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tiny / "o2" / "fewshot.json").is_file()


def test_an_image_size_that_fits_still_runs(run_cli, tiny):
    done = run_cli(
        "fewshot", tiny / "ck", "--data", tiny / "data", "--shots", "1", "--seeds", "1", "--out", tiny / "o3",
        "--image-size", "32", timeout=TIMEOUT, preexec_fn=_limited,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tiny / "o3" / "fewshot.json").is_file()


def test_train_with_a_batch_no_memory_holds(run_cli, tmp_path):
    done = run_cli(
        "train", "data.name=synthetic", "model.name=vit_test", "model.image_size=1024", "train.steps=2",
        "train.batch_size=256", "--out", tmp_path / "run", timeout=TIMEOUT, preexec_fn=_limited,
    )  # fmt: skip
    refused(done, "train.batch_size 256", "1024x1024")
    assert not (tmp_path / "run" / "checkpoints").exists()
