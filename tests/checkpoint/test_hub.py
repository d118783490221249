"""Hub names (hf-hub:ORG/NAME[@REV], timm's MODEL.TAG) read through a real huggingface_hub cache, built here in its own
layout (models--ORG--NAME/{blobs, snapshots/COMMIT, refs/main}) with HF_HUB_OFFLINE=1: nothing is downloaded. The
source's preprocessing (an HF image processor's, timm's pretrained_cfg) drives predict and survives convert."""

import hashlib
import json
import os
import shutil
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file, save_file

import vitkit
from vitkit.checkpoint import hub, save_checkpoint

transformers = pytest.importorskip("transformers")
pytest.importorskip("huggingface_hub")

HF_REPO, TIMM_NAME = "google/vit-tiny-test", "vit_test_patch4_16.tiny_in3"
NAMES = ["cat", "dog", "emu"]


def cache_repo(cache: Path, repo: str, folder: Path) -> Path:
    """Put the files of `folder` into huggingface_hub's cache `cache` as repository `repo` at main, as a download leaves
    them: each file a blob named by its sha256, linked from snapshots/COMMIT/, refs/main naming COMMIT."""
    root = cache / f"models--{repo.replace('/', '--')}"
    commit = hashlib.sha1(repo.encode()).hexdigest()  # 40 hex digits, as a git commit
    snapshot = root / "snapshots" / commit
    (root / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (root / "refs").mkdir()
    for file in sorted(folder.iterdir()):
        data = file.read_bytes()
        blob = root / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / file.name).symlink_to(os.path.relpath(blob, snapshot))
    (root / "refs" / "main").write_text(commit)
    return snapshot


def _hf_folder(folder: Path) -> None:
    """A transformers-saved ViT classifier and its ViTImageProcessor: both sides to 16 px (squash), bicubic."""
    config = transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=16, patch_size=4,
        num_labels=3, id2label=dict(enumerate(NAMES)), label2id={n: i for i, n in enumerate(NAMES)},
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.ViTForImageClassification(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ViTImageProcessor without torchvision: its PIL backend, said in a warning
        processor = transformers.ViTImageProcessor(
            size={"height": 16, "width": 16}, resample=3, image_mean=[0.5, 0.4, 0.3], image_std=[0.2, 0.25, 0.3]
        )
    model.save_pretrained(folder)
    processor.save_pretrained(folder)


def _timm_folder(folder: Path) -> None:
    """What timm's push_to_hub leaves: the bare tensors and config.json with architecture and pretrained_cfg."""
    torch.manual_seed(1)
    model = vitkit.create_model("vit_test", num_classes=3)
    with torch.no_grad():
        model.head.weight.normal_(0, 0.2)  # probabilities away from 0 and 1, where a difference shows
    save_checkpoint(model, folder / "vitkit.safetensors", "timm")
    save_file(load_file(folder / "vitkit.safetensors"), folder / "model.safetensors")  # tensors only, as timm's
    (folder / "vitkit.safetensors").unlink()
    cfg = {"input_size": [3, 16, 16], "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
    cfg |= {"crop_pct": 0.9, "crop_mode": "squash", "interpolation": "bicubic", "num_classes": 3}
    config = {"architecture": "vit_test_patch4_16", "num_classes": 3, "label_names": NAMES, "pretrained_cfg": cfg}
    (folder / "config.json").write_text(json.dumps(config))


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    for name, make in (("hf", _hf_folder), ("timm", _timm_folder)):
        (root / name).mkdir()
        make(root / name)
    cache_repo(root / "cache", HF_REPO, root / "hf")
    cache_repo(root / "cache", f"timm/{TIMM_NAME}", root / "timm")
    rng = np.random.default_rng(0)
    images = [root / "tall.png", root / "wide.png"]
    for path, shape in zip(images, [(37, 23, 3), (19, 44, 3)]):  # not square: a crop would show
        Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8)).save(path)
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(root / "cache")}
    return SimpleNamespace(root=root, cache=root / "cache", images=images, env=env)


@pytest.fixture
def offline(hub_cache, monkeypatch):
    for key, value in hub_cache.env.items():
        monkeypatch.setenv(key, value)
    return hub_cache


def test_predict_by_hub_name_gives_the_transformers_pipeline_s_probabilities(hub_cache, run_cli):
    """An HF checkpoint's ViTImageProcessor (resize both sides to its size, bicubic, no crop) is vitkit's default:
    on non-square images the probabilities are the pipeline's, read through the real `vitkit` command."""
    done = run_cli("predict", f"hf-hub:{HF_REPO}", *hub_cache.images, "--json", "--top", "3", env=hub_cache.env)
    assert done.returncode == 0, done.stderr
    ours = [json.loads(line) for line in done.stdout.splitlines()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        classify = transformers.pipeline("image-classification", model=str(hub_cache.root / "hf"), device="cpu")
        theirs = [classify(Image.open(path), top_k=3) for path in hub_cache.images]
    assert [e["image"] for e in ours] == [str(p) for p in hub_cache.images]
    for entry, want in zip(ours, theirs):
        assert [t["label"] for t in entry["top"]] == [w["label"] for w in want]
        np.testing.assert_allclose([t["prob"] for t in entry["top"]], [w["score"] for w in want], rtol=0, atol=1e-5)


def test_hub_names_through_info_convert_and_train_keep_the_source_s_preprocessing(offline, vitkit_cmd, tmp_path):
    """timm's MODEL.TAG and hf-hub:ORG/NAME are read from the cache by info, convert and train model.init; the
    preprocessing (crop_pct, crop_mode, interpolation) is written into the converted folders both ways."""
    from vitkit.checkpoint import read_metadata

    done = vitkit_cmd("info", TIMM_NAME, "--json")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    timm_preprocess = {"crop_pct": 0.9, "crop_mode": "squash", "interpolation": "bicubic"}
    assert info["format"] == "timm" and info["metadata"] == {"class_names": NAMES, "preprocess": timm_preprocess}
    assert vitkit_cmd("convert", TIMM_NAME, tmp_path / "as_hf", "--to", "hf").returncode == 0  # timm -> HF
    processor = json.loads((tmp_path / "as_hf" / "preprocessor_config.json").read_text())
    assert processor["size"] == {"height": 17, "width": 17} and processor["crop_size"] == {"height": 16, "width": 16}
    assert processor["do_center_crop"] is True and processor["resample"] == 3  # floor(16 / 0.9), bicubic
    assert read_metadata(tmp_path / "as_hf")["preprocess"] == timm_preprocess
    with warnings.catch_warnings():  # transformers runs the converted folder as vitkit runs timm's name
        warnings.simplefilter("ignore")
        classify = transformers.pipeline("image-classification", model=str(tmp_path / "as_hf"), device="cpu")
        theirs = [{w["label"]: w["score"] for w in classify(Image.open(p), top_k=3)} for p in offline.images]
    ours = vitkit.Classifier.load(TIMM_NAME).predict([str(p) for p in offline.images], top=3)
    for mine, want in zip(ours, theirs):
        assert max(p for _, p in mine) < 0.99  # not saturated: a change of pixels would show
        np.testing.assert_allclose([p for _, p in mine], [want[n] for n, _ in mine], rtol=0, atol=1e-5)
    assert vitkit_cmd("convert", f"hf-hub:{HF_REPO}", tmp_path / "as_timm.safetensors").returncode == 0  # HF -> timm
    hf_preprocess = {"crop_pct": 1.0, "crop_mode": "squash", "interpolation": "bicubic"}
    assert read_metadata(tmp_path / "as_timm.safetensors")["preprocess"] == hf_preprocess
    from safetensors import safe_open

    with safe_open(str(tmp_path / "as_timm.safetensors"), "pt") as f:
        cfg = json.loads(f.metadata()["pretrained_cfg"])
    assert (cfg["crop_pct"], cfg["crop_mode"], cfg["interpolation"]) == (1.0, "squash", "bicubic")
    assert vitkit_cmd("convert", tmp_path / "as_timm.safetensors", tmp_path / "back", "--to", "hf").returncode == 0
    back = json.loads((tmp_path / "back" / "preprocessor_config.json").read_text())
    original = json.loads((offline.root / "hf" / "preprocessor_config.json").read_text())
    for key in ("size", "resample", "image_mean", "image_std"):  # HF -> timm -> HF: the same processor
        assert back[key] == pytest.approx(original[key]), key
    assert not back.get("do_center_crop")
    run = vitkit_cmd(
        "train", "--out", tmp_path / "run", f"model.init=hf-hub:{HF_REPO}", "model.name=vit_test",
        "model.image_size=8", "data.name=synthetic", "data.synthetic_size=32", "train.batch_size=16", "train.steps=1",
        "train.warmup_steps=0", "train.eval_every=100", "train.progress=false", "augment.crop=pad",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert f"model.init: every weight from hf-hub:{HF_REPO}" in run.stdout


def test_train_from_a_hub_name_takes_the_hub_model_s_architecture(offline, vitkit_cmd, tmp_path):
    """`train --data FOLDER model.init=HUB_NAME` built the built-in default model (one channel, width 192), which the
    hub model's weights were then refused for; the run now takes the hub model's architecture and normalisation."""
    rng = np.random.default_rng(0)
    for split, count in (("train", 8), ("val", 2)):
        for name in ("bird", "fish"):
            (tmp_path / "data" / split / name).mkdir(parents=True)
            for i in range(count):
                Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(
                    tmp_path / "data" / split / name / f"{i}.png"
                )
    for i, name in enumerate((f"hf-hub:{HF_REPO}", TIMM_NAME)):
        done = vitkit_cmd(
            "train", "--data", tmp_path / "data", "--out", tmp_path / f"run{i}", f"model.init={name}",
            "train.steps=1", "train.threads=1", "--no-progress",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert f"vitkit train: the model of model.init={name} as saved (16x16 px, 3 channels)" in done.stdout
        ours = vitkit.load_pretrained(tmp_path / f"run{i}").config
        theirs = vitkit.load_pretrained(name).config
        assert ours == theirs.replace(num_classes=2) and ours.mean == theirs.mean != (0.5, 0.5, 0.5)


def test_offline_and_not_cached_is_one_line_naming_the_repo_the_cache_and_the_variable(offline, vitkit_cmd, tmp_path):
    image = str(offline.images[0])
    for args in (
        ("predict", "hf-hub:google/not-cached", image),
        ("finetune", "--from", "vit_small_patch16_224.not_cached", "--out", tmp_path / "ft", "data.name=synthetic"),
        ("train", "--out", tmp_path / "run", "model.init=hf-hub:google/not-cached@v2", "data.name=synthetic"),
    ):
        done = vitkit_cmd(*args)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        repo = "timm/vit_small_patch16_224.not_cached" if args[0] == "finetune" else "google/not-cached"
        assert f"{repo} is not in the Hugging Face cache {offline.cache} (set by HF_HUB_CACHE)" in lines[0]
        assert "HF_HUB_OFFLINE=1 forbids downloading it" in lines[0]
    assert not (tmp_path / "run").exists() and not (tmp_path / "ft").exists()
    done = vitkit_cmd("info", "hf-hub:google/vit@")
    assert done.returncode == 2 and "not a hub name; write hf-hub:ORG/NAME or hf-hub:ORG/NAME@REVISION" in done.stderr


def test_a_local_path_wins_over_a_hub_name_and_python_reads_names_too(offline, monkeypatch, tmp_path):
    """create_model(name, pretrained=True) and load_pretrained take hub names; a folder named like one is read
    instead (./NAME forces the folder, hf-hub:ORG/NAME the hub); a vitkit size has no weights of its own."""
    from vitkit.errors import CheckpointError

    by_name = vitkit.create_model(TIMM_NAME, pretrained=True, num_classes=5)
    assert by_name.config.num_classes == 5 and by_name.config.mean == (0.485, 0.456, 0.406)
    # timm's img_size, as timm.create_model(name, pretrained=True, img_size=...) takes it
    resized = vitkit.create_model(TIMM_NAME, pretrained=True, img_size=24)
    assert resized.config.image_size == (24, 24) and resized(torch.zeros(1, 3, 24, 24)).shape[0] == 1
    hf = vitkit.load_pretrained(f"hf-hub:{HF_REPO}")
    assert hf.config.layer_norm_eps == 1e-12 and hf.config.mean == (0.5, 0.4, 0.3)
    monkeypatch.chdir(tmp_path)
    vitkit.save_pretrained(vitkit.create_model("vit_test", num_classes=7), tmp_path / TIMM_NAME)
    assert vitkit.load_pretrained(TIMM_NAME).config.num_classes == 7  # the local folder
    assert vitkit.load_pretrained(f"hf-hub:timm/{TIMM_NAME}").config.num_classes == 3  # the hub, forced
    with pytest.raises(CheckpointError, match="a vitkit size, without weights of its own"):
        vitkit.create_model("vit_b16", pretrained=True)


def test_online_a_missing_model_is_fetched_by_huggingface_hub_with_only_the_files_vitkit_reads(
    hub_cache, monkeypatch, tmp_path
):
    """Without HF_HUB_OFFLINE, huggingface_hub's snapshot_download fetches the configs and safetensors weights at the
    revision asked into the cache HF_HOME names (replaced here by a stand-in that records the call)."""
    import huggingface_hub

    calls = []

    def snapshot_download(repo_id, **kwargs):
        calls.append((repo_id, kwargs))
        return str(hub_cache.root / "hf")

    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    model = vitkit.load_pretrained(f"hf-hub:{HF_REPO}@v1.0")
    assert model.config.num_classes == 3 and len(calls) == 1
    repo, kwargs = calls[0]
    assert repo == HF_REPO and kwargs["revision"] == "v1.0" and kwargs["local_files_only"] is False
    assert Path(kwargs["cache_dir"]) == tmp_path / "home" / "hub"
    assert {"config.json", "preprocessor_config.json", "model.safetensors"} <= set(kwargs["allow_patterns"])
    assert not any(p.endswith(".bin") for p in kwargs["allow_patterns"])  # PyTorch's only where no safetensors
    assert hub.parse("model.npz") is None and hub.parse("runs/demo") is None  # files, never hub names


def test_pretrained_models_list_the_cached_hub_models_and_carry_their_preprocessing(offline, tmp_path):
    """list_models(pretrained=True): the hub models in the cache that create_model(pretrained=True) reads; such a model
    says its checkpoint's crop, filter and classes in timm's pretrained_cfg, and takes timm's fine-tuning arguments."""
    assert vitkit.list_models(pretrained=True) == [f"hf-hub:{HF_REPO}", TIMM_NAME]
    assert vitkit.list_models("vit_*", pretrained=True) == [TIMM_NAME]
    assert vitkit.list_models(pretrained=True, exclude_filters="*tiny*") == []
    unreadable = hub.cache_dir()[0] / "models--someone--notes"  # a repository of no model vitkit reads
    try:
        (unreadable / "snapshots" / "abc").mkdir(parents=True)
        (unreadable / "refs").mkdir()
        (unreadable / "refs" / "main").write_text("abc")
        (unreadable / "snapshots" / "abc" / "README.md").write_text("notes")
        assert set(hub.cached()) == {f"hf-hub:{HF_REPO}", TIMM_NAME, "hf-hub:someone/notes"}
        assert vitkit.list_models(pretrained=True) == [f"hf-hub:{HF_REPO}", TIMM_NAME]
    finally:
        shutil.rmtree(unreadable)  # the cache is the module's
    model = vitkit.create_model(TIMM_NAME, pretrained=True, drop_path_rate=0.1)
    cfg = model.pretrained_cfg
    assert (cfg["crop_pct"], cfg["crop_mode"], cfg["interpolation"]) == (0.9, "squash", "bicubic")
    assert cfg["label_names"] == tuple(NAMES) and cfg["mean"] == pytest.approx((0.485, 0.456, 0.406))
    assert model.config.drop_path == 0.1 and model.blocks[-1].drop_path.rate == pytest.approx(0.1)
    assert "label_names" not in vitkit.create_model(TIMM_NAME, pretrained=True, num_classes=5).pretrained_cfg
    features = vitkit.create_model(TIMM_NAME, pretrained=True, features_only=True, out_indices=(-1,))
    assert features.feature_info.channels() == [model.num_features]
    with pytest.raises(vitkit.ConfigError, match="depth: a pretrained model keeps its architecture"):
        vitkit.create_model(TIMM_NAME, pretrained=True, depth=3)


def _docs_block(page: str, heading: str) -> str:
    """The first ```sh block under `heading` of docs/`page`."""
    text = (Path(__file__).resolve().parents[2] / "docs" / page).read_text()
    after = text.split(f"\n{heading}\n", 1)[1]
    return after.split("```sh\n", 1)[1].split("\n```", 1)[0]


def test_the_docs_commands_put_a_saved_model_into_the_cache_offline(vitkit_cmd, monkeypatch, tmp_path):
    """How a locally saved model goes into the hub cache was shown only by this file's `cache_repo`: the docs' commands,
    run as written (bash, coreutils), make a cache that `hf-hub:ME/NAME` reads offline, weights and all."""
    import subprocess

    model = vitkit.create_model("vit_test", num_classes=3).eval()
    vitkit.save_pretrained(model, tmp_path / "final")
    script = _docs_block("finetune-pretrained.md", "## Put a model of your own into the cache").splitlines()
    assert "MODEL=runs/pets/final REPO=me/pets-vit" in script and script[-1].startswith("HF_HUB_OFFLINE=1 vitkit info")
    commands = "\n".join(script[:-1]).replace("MODEL=runs/pets/final", f"MODEL={tmp_path / 'final'}")
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(["bash", "-ec", commands], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    info = vitkit_cmd("info", "hf-hub:me/pets-vit")  # the script's last line, in this process
    assert info.returncode == 0 and "hf-hub:me/pets-vit" in info.stdout, info.stderr
    loaded = vitkit.load_pretrained("hf-hub:me/pets-vit").state_dict()
    for key, value in model.state_dict().items():
        torch.testing.assert_close(loaded[key], value, atol=0, rtol=0, msg=key)
