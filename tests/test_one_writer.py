"""Two vitkit processes writing one file target: the second is refused while the first writes (the lock every target
has, file or folder), or waits its turn; never does a writer that exited 0 lose its write to a shared scratch name."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

import vitkit


def two_models(tmp_path):
    made = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        folder = tmp_path / f"m{seed}"
        vitkit.save_pretrained(vitkit.create_model("vit_test", num_classes=3), folder)
        made.append(folder)
    return made


def weights_of(path):
    with np.load(path, allow_pickle=False) as archive:
        return {k: archive[k].copy() for k in archive.files}


def test_two_converts_into_one_file_never_lose_a_write(tmp_path, run_cli, vitkit_cmd):
    a, b = two_models(tmp_path)
    alone = {}
    for folder in (a, b):  # what each writes alone (in this process: the races below are real processes)
        assert vitkit_cmd("convert", folder, tmp_path / f"{folder.name}.npz").returncode == 0
        alone[folder.name] = weights_of(tmp_path / f"{folder.name}.npz")
    for trial in range(4):
        target = tmp_path / f"cc{trial}.npz"
        with ThreadPoolExecutor(2) as pool:
            done = list(pool.map(lambda folder: run_cli("convert", folder, target), (a, b)))
        codes = [d.returncode for d in done]
        assert all(c in (0, 2) for c in codes) and 0 in codes, [d.stderr for d in done]
        for d in done:
            if d.returncode == 2:
                assert "another vitkit process is writing it" in d.stderr and "Traceback" not in d.stderr, d.stderr
        got = weights_of(target)
        winners = [f for f, d in zip((a, b), done) if d.returncode == 0]
        matches = [name for name, want in alone.items() if all(np.array_equal(got[k], want[k]) for k in want)]
        assert len(matches) == 1, "the file holds neither write whole"
        if len(winners) == 1:  # the one that exited 0 is the one whose write the file holds
            assert matches == [winners[0].name]
        leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(f".{target.name}")]
        assert leftovers == [], leftovers
