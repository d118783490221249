"""Dataset hub names (hf://datasets/ORG/NAME[@REV][/CONFIG]) read through a real huggingface_hub cache, built here in
its own layout (datasets--ORG--NAME/{blobs, snapshots/COMMIT, refs/main}) with HF_HUB_OFFLINE=1: nothing is
downloaded. Only the Parquet files are fetched; a dataset kept otherwise is read from the Hub's Parquet conversion."""

import hashlib
import io
import json
import os

import pytest
from PIL import Image

from vitkit.data.hub import dataset_folder
from vitkit.errors import DataError

pytest.importorskip("huggingface_hub")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

CLASSES = ["angular_leaf_spot", "bean_rust", "healthy"]


def parquet(n: int, shade: int) -> bytes:
    """A Parquet file as Hugging Face datasets writes one: n images and their ClassLabel, i % 3."""
    images = []
    for i in range(n):
        buffer = io.BytesIO()
        Image.new("RGB", (12, 10), (shade, 40 * (i % 3), 7 * i % 255)).save(buffer, "PNG")
        images.append({"bytes": buffer.getvalue(), "path": f"{i}.png"})
    table = pa.table({"image": images, "labels": [i % 3 for i in range(n)]})
    features = {"image": {"_type": "Image"}, "labels": {"names": CLASSES, "_type": "ClassLabel"}}
    table = table.replace_schema_metadata({"huggingface": json.dumps({"info": {"features": features}})})
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


def cache_dataset(cache, repo: str, files: dict, ref: str = "main"):
    """Put `files` ({path in the repository: bytes}) into huggingface_hub's cache as dataset `repo` at `ref`, as a
    download leaves them: blobs named by their sha256, linked from snapshots/COMMIT/, refs/REF naming COMMIT."""
    root = cache / f"datasets--{repo.replace('/', '--')}"
    commit = hashlib.sha1(f"{repo}@{ref}".encode()).hexdigest()
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        blob = root / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = root / "snapshots" / commit / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (root / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
    (root / "refs" / ref).write_text(commit)
    return root / "snapshots" / commit


@pytest.fixture
def hub(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    train, val = parquet(30, 10), parquet(9, 200)
    data = {"data/train-00000-of-00001.parquet": train, "data/validation-00000-of-00001.parquet": val}
    cache_dataset(cache, "beans-org/beans", {**data, "README.md": b"beans\n"})
    cache_dataset(cache, "someone/photos", {"README.md": b"kept as images\n", "images/a.png": b"png"})
    converted = {"default/train/0000.parquet": train, "default/test/0000.parquet": val}
    cache_dataset(cache, "someone/photos", converted, ref="refs/convert/parquet")
    configs = {"small/train-00000.parquet": train, "large/train-00000.parquet": train}
    cache_dataset(cache, "someone/configs", configs)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def test_a_dataset_hub_name_trains_and_evaluates_from_its_parquet_files(hub, tmp_path, vitkit_cmd, tiny_run):
    said = vitkit_cmd("data", "hf://datasets/beans-org/beans")
    assert said.returncode == 0, said.stderr
    assert "classes  3: angular_leaf_spot, bean_rust, healthy" in said.stdout
    assert "train    30 images, 10 per class" in said.stdout and "val      9 images, 3 per class" in said.stdout
    out = tmp_path / "run"
    args = [*tiny_run, "data.name=auto", "model.in_chans=3", "train.steps=2"]
    assert vitkit_cmd("train", "--data", "hf://datasets/beans-org/beans", "--out", out, *args).returncode == 0
    recorded = json.loads((out / "summary.json").read_text())["val_images"]["source"]
    assert recorded.startswith(str(hub / "datasets--beans-org--beans" / "snapshots"))
    scored = vitkit_cmd("eval", out, "--split", "val", "--json", "--threads", "1")
    assert scored.returncode == 0, scored.stderr
    assert json.loads(scored.stdout.strip().splitlines()[-1])["n"] == 9


def test_a_dataset_kept_as_images_is_read_from_the_hub_s_parquet_conversion(hub):
    folder = dataset_folder("hf://datasets/someone/photos")
    assert folder.name == "default" and sorted(p.name for p in folder.iterdir()) == ["test", "train"]


def test_several_configurations_are_one_error_naming_them_and_config_picks_one(hub):
    with pytest.raises(
        DataError, match=r"holds several configurations \(large, small\); name one: hf://datasets/someone/configs/large"
    ):
        dataset_folder("hf://datasets/someone/configs")
    assert dataset_folder("hf://datasets/someone/configs/small").name == "small"


def test_a_dataset_not_cached_offline_or_a_malformed_name_is_one_line(hub, vitkit_cmd):
    done = vitkit_cmd("data", "hf://datasets/someone/missing")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert f"someone/missing is not in the Hugging Face cache {hub} (set by HF_HUB_CACHE)" in done.stderr
    assert "(hf download someone/missing --repo-type dataset)" in done.stderr
    with pytest.raises(DataError, match=r"not a dataset hub name; write hf://datasets/ORG/NAME"):
        dataset_folder("hf://datasets/beans")
    url = vitkit_cmd("data", "https://huggingface.co/datasets/beans-org/beans/tree/main")
    assert url.returncode == 2 and "(a dataset on the Hub: hf://datasets/beans-org/beans)" in url.stderr


def test_online_only_the_parquet_files_are_fetched_as_a_dataset(tmp_path, monkeypatch):
    import huggingface_hub

    calls = []

    def snapshot_download(repo_id, **kwargs):
        calls.append((repo_id, kwargs))
        folder = tmp_path / "snap"
        (folder / "data").mkdir(parents=True, exist_ok=True)
        (folder / "data" / "train-0.parquet").write_bytes(parquet(3, 0))
        return str(folder)

    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    assert dataset_folder("hf://datasets/beans-org/beans@v1") == tmp_path / "snap" / "data"
    ((repo, kwargs),) = calls
    assert repo == "beans-org/beans" and kwargs["repo_type"] == "dataset" and kwargs["revision"] == "v1"
    assert kwargs["allow_patterns"] == ["*.parquet"] and kwargs["local_files_only"] is False
