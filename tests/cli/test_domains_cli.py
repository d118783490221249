"""Every number read from a flag or a file passes the one domain of its key (vitkit.limits.DOMAINS), whoever reads it:
KEY=VALUE overrides and YAML (scientific notation included), vitkit's config.json, Hugging Face's config.json and
preprocessor_config.json. A value outside it is one line naming the file and the key, with the rule, and exit code 2;
outputs that are no numbers are never printed as probabilities; every floating-point kind of safetensors is read or
refused in one line."""

import json
import resource
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file, save_file
from tiny_run import TINY_RUN

from vitkit.checkpoint import save_checkpoint, save_pretrained
from vitkit.models import VisionTransformer, get_config


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A tiny ViT with a trained-looking head as a vitkit and a Hugging Face directory, and a 40x30 PNG."""
    root = tmp_path_factory.mktemp("domains")
    torch.manual_seed(0)
    model = VisionTransformer(get_config("vit_test", depth=1, image_size=8, num_classes=3))
    torch.nn.init.normal_(model.head.weight)
    save_pretrained(model, root / "vitkit", extra={"class_names": ["a", "b", "c"]})
    save_checkpoint(model, root / "hf", "hf")
    Image.fromarray(np.full((30, 40, 3), 90, np.uint8)).save(root / "x.png")
    return root


def edited_copy(source: Path, target: Path, name: str, **changes) -> Path:
    """A copy of the checkpoint directory `source` at `target` with keys of its JSON file `name` set (a__b: key b
    under a). The fault campaign (benchmarks/faults.py) makes its cases with it too."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    data = json.loads((target / name).read_text())
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = data
        for parent in parents:
            node = node[parent]
        node[last] = value
    (target / name).write_text(json.dumps(data))
    return target


def _one_line(done, *words: str) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "%" not in done.stdout, done.stdout  # no probability printed
    for word in words:
        assert word in lines[0], lines[0]
    assert not any(kind in lines[0] for kind in ("ZeroDivisionError", "TypeError", "IndexError", "ValueError"))
    return lines[0]


@pytest.mark.parametrize(
    "source, name, changes, words",
    [
        ("hf", "preprocessor_config.json", {"image_std": [1e-300, 1, 1]}, ["preprocessor_config.json: image_std:", "1e-4"]),
        ("hf", "preprocessor_config.json", {"image_mean": [1e308, 0, 0]}, ["preprocessor_config.json: image_mean:", "1000"]),
        ("vitkit", "config.json", {"model__std": [1e-300, 1, 1]}, ["config.json", "std: expected a number from 1e-4"]),
        ("vitkit", "config.json", {"model__mean": [1e308, 0, 0]}, ["config.json", "mean: expected a number from -1000"]),
        ("hf", "config.json", {"patch_size": 0}, ["config.json: patch_size: expected whole numbers from 1"]),
        ("hf", "config.json", {"patch_size": [4]}, ["config.json: patch_size: expected an int or [height, width]"]),
        ("hf", "config.json", {"image_size": [16]}, ["config.json: image_size: expected an int or [height, width]"]),
        ("hf", "preprocessor_config.json", {"rescale_factor": "x"}, ["rescale_factor: expected a number from 1e-6"]),
        ("hf", "config.json", {"id2label": "x"}, ["config.json: id2label: expected a mapping"]),
        ("vitkit", "config.json", {"preprocess": {"crop_pct": 1e-5}}, ["preprocess.crop_pct: expected a share from 0.1"]),
    ],
    ids=["hf-std", "hf-mean", "std", "mean", "patch-0", "patch-list-of-one", "size-list-of-one", "rescale-text",
         "id2label-text", "crop-pct"],
)  # fmt: skip
def test_a_checkpoint_value_out_of_its_domain_is_one_line_naming_the_key(
    vitkit_cmd, models, tmp_path, source, name, changes, words
):
    edited = edited_copy(models / source, tmp_path / "edited", name, **changes)
    line = _one_line(vitkit_cmd("predict", edited, models / "x.png"), *words)
    assert "x.png" not in line  # the checkpoint's value is named, not the image it would have resized


def test_outputs_that_are_no_numbers_end_predict_and_eval_in_one_line(vitkit_cmd, models, tmp_path):
    """Finite weights whose products overflow: the logits are infinite, their softmax NaN."""
    torch.manual_seed(0)
    model = VisionTransformer(get_config("vit_test", depth=1, image_size=8, num_classes=2))
    with torch.no_grad():
        model.head.weight.fill_(3e38)
    save_pretrained(model, tmp_path / "big", extra={"class_names": ["a", "b"]})
    for name in "ab":
        (tmp_path / "data" / "test" / name).mkdir(parents=True)
        shutil.copy(models / "x.png", tmp_path / "data" / "test" / name / "1.png")
    _one_line(vitkit_cmd("predict", tmp_path / "big", models / "x.png"), "NaN or infinite for 1 of 1 image")
    done = vitkit_cmd("eval", tmp_path / "big", "--data", tmp_path / "data", "--confusion", tmp_path / "c.png")
    _one_line(done, "NaN or infinite for 2 of 2 images")
    assert not (tmp_path / "c.png").exists()


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # a miss fails fast instead of eating the machine


@pytest.mark.parametrize(
    "override, words",
    [
        ("data.synthetic_classes=100000000", "data.synthetic_classes: expected a class count from 1 to 1,000,000"),
        ("train.threads=100000", "train.threads: expected a thread count from 0 (automatic) to 1024"),
    ],
)
def test_counts_beyond_their_domain_are_refused_before_anything_is_made(run_cli, tmp_path, override, words):
    # a subprocess: before the domains, the first asked for 307 GB and the second crashed the interpreter
    done = run_cli("train", "--out", tmp_path / "run", *TINY_RUN, override, timeout=120, preexec_fn=_limited)
    _one_line(done, words)
    assert not (tmp_path / "run").exists()


def test_scientific_notation_is_a_number_in_lists_overrides_and_yaml(vitkit_cmd, tmp_path):
    """model.std=[1e-3,0.5,0.5] was text to YAML 1.1 (a dot-less exponent), refused while train.lr=1e-3 was a number."""
    out = tmp_path / "run"
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model:\n  mean: [5e-1, 0.5, 0.5]\ntrain:\n  lr: 2E-3\n")
    done = vitkit_cmd("train", "--config", recipe, "--out", out, *TINY_RUN, "model.in_chans=3",
                      "model.std=[1e-3,0.5,0.5]", "train.steps=1")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    saved = json.loads((out / "final" / "config.json").read_text())["model"]
    assert saved["std"] == pytest.approx([1e-3, 0.5, 0.5]) and saved["mean"] == pytest.approx([0.5] * 3)
    assert "lr: 0.002" in (out / "run.yaml").read_text()


def dtype_copy(source: Path, target: Path, dtype: torch.dtype) -> Path:
    """A copy of the HF checkpoint `source` at `target` with every tensor stored as `dtype` (packed float4: zeros, as
    no cast makes it). The fault campaign uses it too."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    state = load_file(target / "model.safetensors")
    packed = str(dtype).endswith("_x2")
    cast = {k: torch.zeros(v.shape, dtype=torch.uint8).view(dtype) if packed else v.to(dtype) for k, v in state.items()}
    save_file(cast, target / "model.safetensors", metadata={"format": "pt"})
    return target


@pytest.mark.parametrize("kind", ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"])
def test_float8_safetensors_are_read_as_float32_by_every_command(vitkit_cmd, models, tmp_path, kind):
    hf = dtype_copy(models / "hf", tmp_path / kind, getattr(torch, kind))
    for args in (["info", hf], ["predict", hf, models / "x.png"], ["convert", hf, tmp_path / "out"]):
        done = vitkit_cmd(*args)
        assert done.returncode == 0, done.stderr[-2000:]
    written = load_file(tmp_path / "out" / "model.safetensors")
    expected = {
        k: v.to(getattr(torch, kind)).float() for k, v in load_file(models / "hf" / "model.safetensors").items()
    }
    assert written["patch_embed.weight"].dtype == torch.float32
    assert torch.equal(written["head.weight"], expected["classifier.weight"])  # the stored values, exactly


def test_packed_float4_safetensors_are_refused_in_one_line(vitkit_cmd, models, tmp_path):
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip("this torch has no float4_e2m1fn_x2")
    hf = dtype_copy(models / "hf", tmp_path / "float4", torch.float4_e2m1fn_x2)
    for args in (["info", hf], ["predict", hf, models / "x.png"], ["convert", hf, tmp_path / "out"]):
        _one_line(vitkit_cmd(*args), "float4_e2m1fn_x2", "packed values")
    assert not (tmp_path / "out").exists()


def test_a_folder_named_like_an_image_is_said_and_the_other_images_still_answered(vitkit_cmd, models, tmp_path):
    (tmp_path / "dir.png").mkdir()
    done = vitkit_cmd("predict", models / "vitkit", tmp_path / "dir.png", models / "x.png")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "dir.png: no images found" in done.stderr
    assert str(models / "x.png") in done.stdout and "%" in done.stdout


def test_a_negative_integer_label_in_a_jsonl_list_is_refused_naming_the_line(vitkit_cmd, models, tmp_path):
    for name in ("a.png", "b.png"):
        shutil.copy(models / "x.png", tmp_path / name)
    (tmp_path / "train.jsonl").write_text('{"path": "a.png", "label": 0}\n{"path": "b.png", "label": -1}\n')
    _one_line(vitkit_cmd("data", tmp_path / "train.jsonl"), "train.jsonl:2: label -1", "whole number >= 0")
