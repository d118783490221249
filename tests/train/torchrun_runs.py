"""Real `vitkit train` ranks under torchrun (gloo on CPU), and the tiny run the distributed tests share."""

import os
import subprocess
import sys

COMMON = [
    "data.name=synthetic",
    "data.synthetic_size=64",
    "model.name=vit_test",
    "train.batch_size=8",
    "train.lr=3e-3",
    "train.warmup_steps=0",
    "train.decay=constant",
    "train.log_every=1",
    "train.eval_every=1000",
    "train.checkpoint_every=3",
    "augment.crop=none",
    "augment.hflip=0",
    "train.progress=false",
    "train.figures=false",
    "train.threads=1",
    "train.device=cpu",
]
EMA = ["train.ema=0.8", "train.eval_every=3"]  # validation through the EMA weights at steps 3 and 6


def torchrun(*args: str, nproc: int) -> subprocess.CompletedProcess:
    """`vitkit train ARGS...` as `nproc` processes under torchrun; the CompletedProcess, whatever its exit code."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [*launcher, "-m", "vitkit", "train", *args], capture_output=True, text=True, env=env, timeout=600
    )


def vitkit_train(*args: str, nproc: int) -> subprocess.CompletedProcess:
    """torchrun(...), which must succeed."""
    result = torchrun(*args, nproc=nproc)
    assert result.returncode == 0, result.stderr[-3000:]
    return result
