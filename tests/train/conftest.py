import shutil

import pytest
from torchrun_runs import COMMON, EMA, vitkit_train


@pytest.fixture(scope="session")
def fsdp_at_step_3(tmp_path_factory):
    """2 FSDP ranks under torchrun, 3 steps keeping an EMA: checkpoints/step_0000003/sharded holds the shards. Read
    only: the tests that resume it or damage it take a copy (fsdp_run)."""
    out = tmp_path_factory.mktemp("fsdp") / "run"
    vitkit_train("--out", str(out), "train.steps=3", "train.strategy=fsdp", *COMMON, *EMA, nproc=2)
    return out


@pytest.fixture
def fsdp_run(fsdp_at_step_3, tmp_path):
    """A copy of the shared FSDP run, this test's own to resume or damage."""
    return shutil.copytree(fsdp_at_step_3, tmp_path / "fsdp")
