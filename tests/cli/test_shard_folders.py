"""`vitkit data --to-shards D`: a shard folder is written whole (staged beside D, renamed into place under D's lock),
by one writer at a time, and never inside the data it is made from."""

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image


def dataset(root: Path, classes: tuple[str, ...], per_class: int) -> Path:
    rng = np.random.default_rng(len(classes))
    for name in classes:
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 255, (12, 10, 3), dtype=np.uint8)).save(root / name / f"{i}.png")
    return root


def _vitkit(*args) -> list[str]:
    script = Path(sys.executable).with_name("vitkit")
    return [*([str(script)] if script.exists() else [sys.executable, "-m", "vitkit"]), *map(str, args)]


def _what_it_holds(folder: Path) -> tuple[list[str], int]:
    """The class names of a shard folder and how many images its shards hold, as training reads them."""
    from vitkit.data.sources import open_sharded

    split = open_sharded(folder, "train", val_fraction=0.0)
    return split.class_names, len(split)


def test_two_writers_racing_for_one_folder_leave_one_dataset_whole_and_the_loser_says_so(tmp_path):
    """Two `--to-shards D` at once both exited 0 with D mixing both datasets' shards under one classes.txt. Launched
    together, both find D free before either has read its images (a process's start outlasts the gap between the
    launches), so one round shows the race; the second writer is refused by D's lock or, later, by D's shards."""
    first = dataset(tmp_path / "first", ("ant", "bee", "cat"), per_class=40)
    second = dataset(tmp_path / "second", ("dog", "eel"), per_class=50)
    wanted = {("ant", "bee", "cat"): 120, ("dog", "eel"): 100}
    for round_ in range(1):
        out = tmp_path / f"shards{round_}"
        runs = [
            subprocess.Popen(
                _vitkit("data", src, "--to-shards", out, "--per-shard", "7"),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for src in (first, second)
        ]
        results = [(run.wait(timeout=300), run.stderr.read()) for run in runs]
        for run in runs:
            run.stderr.close()
        codes = sorted(code for code, _ in results)
        assert codes == [0, 2], results  # both 0: one of them lost what it said it wrote
        loser = next(err for code, err in results if code == 2)
        assert len(loser.splitlines()) == 1 and str(out) in loser, loser
        names, images = _what_it_holds(out)
        assert wanted.get(tuple(names)) == images, (names, images)
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(f".{out.name}")) == []


def _files(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


def test_a_shard_folder_inside_its_own_data_or_holding_it_is_refused_before_anything_is_written(tmp_path, vitkit_cmd):
    """`vitkit data ds --to-shards ds/train/zz` wrote shards into ds/train, whose class folders then included zz."""
    ds = tmp_path / "ds"
    dataset(ds / "train", ("ant", "bee"), per_class=4)
    dataset(ds / "val", ("ant", "bee"), per_class=2)
    before = _files(ds)
    for out, source in ((ds / "train" / "zz", ds), (ds, ds), (ds, ds / "train"), (tmp_path / "ln" / "x", ds)):
        if out.parent.name == "ln":
            (tmp_path / "ln").symlink_to(ds / "val")  # inside it by another name
        done = vitkit_cmd("data", source, "--to-shards", out)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and done.stdout == "", (out, done.stderr)
        assert lines[0].startswith(f"vitkit data: error: --to-shards {out}:"), lines
        assert "inside" in lines[0] or "holds" in lines[0], lines
        assert _files(ds) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "ln"]


def test_a_folder_holding_other_files_is_refused_and_an_empty_one_is_filled(tmp_path, vitkit_cmd):
    """The shards replace their folder whole: someone's notes in it are refused, not lost; an empty folder is fine."""
    ds = dataset(tmp_path / "ds", ("ant", "bee"), per_class=4)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    done = vitkit_cmd("data", ds, "--to-shards", tmp_path / "mine")
    assert done.returncode == 2 and "holds notes.txt" in done.stderr and len(done.stderr.splitlines()) == 1
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]
    (tmp_path / "empty").mkdir()
    assert vitkit_cmd("data", ds, "--to-shards", tmp_path / "empty").returncode == 0
    assert _what_it_holds(tmp_path / "empty") == (["ant", "bee"], 8)


def test_a_writer_finding_the_folder_being_written_is_one_line_and_leaves_it_to_the_other(tmp_path, vitkit_cmd):
    """The loser of a race that overlaps: the folder's staging is locked by the other writer."""
    from vitkit.files import abort_replacement, begin_replacement

    ds = dataset(tmp_path / "ds", ("ant", "bee"), per_class=4)
    out = tmp_path / "shards"
    staged, fd = begin_replacement(out)  # another writer, part way
    (staged / "theirs").write_text("")
    try:
        done = vitkit_cmd("data", ds, "--to-shards", out)
    finally:
        assert [p.name for p in staged.iterdir()] == ["theirs"]
        abort_replacement(staged, fd)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "another vitkit process is writing it now" in lines[0], lines
    assert not out.exists()
