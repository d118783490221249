"""An FSDP step checkpoint's sharded/ folder (DCP: a pickled .metadata, .distcp files) is read only after every one of
its files matches the digest written when it was saved, and then without running code: a tampered file is refused
before a byte of it is unpickled."""

import json
import pickle
from pathlib import Path

import pytest
import torch
from torchrun_runs import torchrun

import vitkit
from vitkit.errors import CheckpointError
from vitkit.files import update_checksums, verify_checksums
from vitkit.train import distributed


class Payload:
    """A pickle that, when loaded, creates `marker`: what an attacker would put in place of .metadata."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def sharded_step(tmp_path: Path) -> Path:
    """A step-checkpoint-like folder whose sharded/ the real save function wrote, in one process, with checksums."""
    model = vitkit.create_model("vit_test", num_classes=3)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 3, 16, 16)).sum().backward()
    optimizer.step()
    step = tmp_path / "step_0000001"
    distributed.save_sharded(model, optimizer, step / "sharded")
    (step / "weights.safetensors").write_bytes(b"placeholder")
    update_checksums(step)
    return step


def test_checksums_cover_every_file_of_sharded_and_a_tampered_metadata_is_refused(tmp_path):
    step = sharded_step(tmp_path)
    listed = json.loads((step / "checksums.json").read_text())["files"]
    assert {"sharded/.metadata", "sharded/__0_0.distcp"} <= set(listed)
    verify_checksums(step)  # as written: intact
    marker = tmp_path / "pwned"
    (step / "sharded" / ".metadata").write_bytes(pickle.dumps(Payload(marker)))
    with pytest.raises(CheckpointError, match=r"sharded/\.metadata: .*corrupt"):
        verify_checksums(step)
    with pytest.raises(CheckpointError, match=r"\.metadata"):
        distributed.load_sharded(torch.nn.Linear(2, 2), None, step / "sharded")
    assert not marker.exists()


def test_a_sharded_folder_without_digests_is_refused_and_a_forged_digest_still_runs_nothing(tmp_path):
    """Without a digest for each of its files sharded/ is not read; with a digest forged to match, the .metadata is
    read by an unpickler that builds only DCP's own metadata types."""
    step = sharded_step(tmp_path)
    marker = tmp_path / "pwned"
    (step / "sharded" / ".metadata").write_bytes(pickle.dumps(Payload(marker)))
    (step / "checksums.json").unlink()
    update_checksums(step)  # an attacker who can write the folder can rewrite checksums.json too
    with pytest.raises(CheckpointError, match=r"\.metadata.*not DCP metadata"):
        distributed.load_sharded(torch.nn.Linear(2, 2), None, step / "sharded")
    (step / "checksums.json").unlink()
    with pytest.raises(CheckpointError, match=r"no digest"):
        distributed.load_sharded(torch.nn.Linear(2, 2), None, step / "sharded")
    assert not marker.exists()


def test_resume_refuses_a_tampered_sharded_metadata_before_unpickling_it(fsdp_run, tmp_path):
    """A real 2-process FSDP run (a copy of the shared one); its .metadata replaced by a pickle that writes a file;
    `vitkit train --resume`."""
    run = fsdp_run
    metadata = run / "checkpoints" / "step_0000003" / "sharded" / ".metadata"
    marker = tmp_path / "pwned"
    metadata.write_bytes(pickle.dumps(Payload(marker)))
    resumed = torchrun("--resume", str(run), "train.steps=6", nproc=1)
    assert not marker.exists(), "the tampered .metadata was unpickled"
    # vitkit's own one line (torchrun adds its report of the rank's exit code 2 after it)
    lines = [line for line in resumed.stderr.splitlines() if line.startswith("vitkit train: error:")]
    assert resumed.returncode != 0 and "exitcode  : 2" in resumed.stderr, resumed.stderr[-3000:]
    assert len(lines) == 1 and "sharded/.metadata" in lines[0] and "corrupt" in lines[0], resumed.stderr[-3000:]
