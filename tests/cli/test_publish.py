"""What a published model carries, through the real `vitkit` command: every file convert and export write holds no
local path (the run's folder, the data's), the Hugging Face and timm folders carry a model card made of the run's own
record, and `vitkit push` uploads such a folder through huggingface_hub.upload_folder (replaced here: no network)."""

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image
from tiny_run import TINY_RUN

from vitkit.cli import main

# every target convert writes (DST, flags) and every export format (--format, file)
CONVERTS = {"vitkit": [], "m.npz": [], "m.safetensors": [], "m.pth": [], "timm": ["--to", "timm"], "hf": ["--to", "hf"]}
EXPORTS = {"onnx": "m.onnx", "torchscript": "m.pt", "exported-program": "m.pt2"}


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A tiny run on an image folder (train/ and val/ of two classes), converted to every format and exported."""
    root = tmp_path_factory.mktemp("publish")
    rng = np.random.default_rng(0)
    for split, n in (("train", 8), ("val", 4)):
        for name in ("a", "b"):
            (root / "shapes" / split / name).mkdir(parents=True)
            for i in range(n):
                pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / "shapes" / split / name / f"{i}.png")
    threads = torch.get_num_threads()
    try:
        folder = [f"data.path={root / 'shapes'}", "data.name=auto", "train.steps=2", "train.batch_size=8"]
        assert main(["train", "--out", str(root / "run"), *TINY_RUN, *folder]) == 0
        for dst, flags in CONVERTS.items():
            assert main(["convert", str(root / "run"), str(root / "out" / dst), *flags]) == 0, dst
        for format, name in EXPORTS.items():
            out = root / "out" / "exports" / name
            assert main(["export", str(root / "run"), "--format", format, "--out", str(out), "--threads", "1"]) == 0
    finally:
        torch.set_num_threads(threads)
    return SimpleNamespace(root=root, data=root / "shapes", run=root / "run", out=root / "out")


def test_no_exported_file_holds_a_local_path(published):
    """The HF config.json and the timm safetensors metadata held the training data's path ("path": "/tmp/.../shapes");
    ONNX and torch.export files the stack traces of this machine's Python files."""
    files = [p for p in published.out.rglob("*") if p.is_file()]
    names = {p.relative_to(published.out).as_posix() for p in files}
    assert {"hf/config.json", "timm/config.json", "m.safetensors", "m.pth.json", "m.npz.json"} <= names
    assert {f"exports/{name}" for name in EXPORTS.values()} <= names
    local = [str(published.root).encode(), str(Path(__file__).resolve().parents[2]).encode()]
    assert local[0] in (published.run / "final" / "config.json").read_bytes()  # a run's own record keeps its paths
    holding = [p.relative_to(published.out).as_posix() for p in files if any(s in p.read_bytes() for s in local)]
    assert holding == []


def test_hf_and_timm_folders_carry_a_model_card_of_the_run_s_record(published):
    record = json.loads((published.run / "final" / "config.json").read_text())
    summary = json.loads((published.run / "summary.json").read_text())
    for folder, library in (("hf", "transformers"), ("timm", "timm")):
        card = (published.out / folder / "README.md").read_text()
        header = card.split("---\n")[1]
        assert f"library_name: {library}\n" in header and "license: unknown\n" in header and f"- {library}\n" in header
        assert "`a`, `b`" in card and "the folder `shapes`" in card
        for split, images in record["data"]["splits"].items():
            assert f"| {split} | {images['n']:,} | all | {images['digest']} |" in card
        val = f"| top-1 accuracy | {summary['final_val_top1']:.4f} | val | {summary['val_images']['n']:,} |"
        assert val in card
        assert f"(x - {record['model']['mean']}) / {record['model']['std']}" in card
        assert "vitkit.load_pretrained" in card and 'pipeline("image-classification"' in card
    assert 'timm.create_model("local-dir:DIR", pretrained=True)' in (published.out / "timm" / "README.md").read_text()


def test_an_export_names_its_data_by_folder_and_eval_asks_for_the_data(published, vitkit_cmd):
    """Without the path, the record must not fall back to the default data (Fashion-MNIST): eval says to name it; named,
    the recorded images are the data's own (their digests)."""
    from vitkit.checkpoint import read_metadata
    from vitkit.data import DataSpec
    from vitkit.data.split import same_images

    refused = vitkit_cmd("eval", published.out / "hf", "--split", "val")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "by the folder's name only (shapes" in refused.stderr and "--data" in refused.stderr
    meta = read_metadata(published.out / "timm")
    spec = DataSpec.from_checkpoint(meta, published.out / "timm", data=published.data)
    for split in ("train", "val"):
        assert same_images(meta["data"]["splits"][split], spec.open(split, channels=3, image_size=8).describe())
    assert not same_images(
        {**meta["data"]["splits"]["val"], "source": "train"}, spec.open("val", channels=3, image_size=8).describe()
    )
    info = vitkit_cmd("info", published.out / "m.safetensors")
    assert "8 images (val, all)" in info.stdout


@pytest.fixture
def hub_calls(monkeypatch):
    """huggingface_hub's create_repo and upload_folder replaced by recorders; online as far as vitkit can tell."""
    import huggingface_hub

    calls = []
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "create_repo", lambda repo, **kw: calls.append(("create_repo", repo, kw)))

    def upload_folder(**kw):
        calls.append(("upload_folder", kw["repo_id"], kw))
        return SimpleNamespace(commit_url=f"https://huggingface.co/{kw['repo_id']}/commit/0123")

    monkeypatch.setattr(huggingface_hub, "upload_folder", upload_folder)
    return calls


@pytest.mark.parametrize("folder", ["hf", "timm"])
def test_push_uploads_an_export_folder_to_the_repository(folder, published, hub_calls, vitkit_cmd):
    done = vitkit_cmd("push", published.out / folder, "someone/tiny-vit", "--private")
    assert done.returncode == 0, done.stderr
    assert "https://huggingface.co/someone/tiny-vit/commit/0123" in done.stdout
    (_, created, options), (_, uploaded, upload) = hub_calls
    assert created == uploaded == "someone/tiny-vit" and options["private"] and options["exist_ok"]
    assert Path(upload["folder_path"]) == published.out / folder and "token" not in upload  # HF's own login


@pytest.mark.parametrize(
    "target, repo, words",
    [
        ("vitkit", "someone/tiny-vit", "not a Hugging Face or timm export folder"),
        ("m.safetensors", "someone/tiny-vit", "not a Hugging Face or timm export folder"),
        ("hf", "tiny-vit", "write ORG/NAME"),
    ],
)
def test_push_refuses_what_is_no_export_folder_or_no_repository_in_one_line(
    target, repo, words, published, hub_calls, vitkit_cmd
):
    done = vitkit_cmd("push", published.out / target, repo)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and words in done.stderr
    assert hub_calls == []


def test_push_refuses_offline_and_says_why_an_upload_failed_in_one_line(published, hub_calls, vitkit_cmd, monkeypatch):
    import huggingface_hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    done = vitkit_cmd("push", published.out / "hf", "someone/tiny-vit")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "HF_HUB_OFFLINE" in done.stderr
    assert hub_calls == []
    monkeypatch.delenv("HF_HUB_OFFLINE")

    def refused(**kw):
        raise OSError("401 Client Error: Unauthorized for url: https://huggingface.co/api/repos/create")

    monkeypatch.setattr(huggingface_hub, "upload_folder", refused)
    done = vitkit_cmd("push", published.out / "timm", "someone/tiny-vit")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "401 Client Error" in done.stderr and "hf auth login" in done.stderr
