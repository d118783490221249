"""DeiT's hard-label distillation (train.teacher): the loss, the teacher's input, a tiny run through the CLI and the
two-head evaluation of what it trains."""

import json

import pytest
import torch
import torch.nn.functional as F

import vitkit
from vitkit.errors import ConfigError
from vitkit.train.objectives import Classification, Distillation
from vitkit.train.optim import soft_cross_entropy
from vitkit.train.teacher import load_teacher

CLASSES = [f"class_{i}" for i in range(10)]  # the synthetic data's


def save_teacher(path, class_names=None, seed=0):
    """A 16x16 teacher with its own normalisation and a random head (10 classes), saved as vitkit."""
    torch.manual_seed(seed)
    model = vitkit.create_model("vit_test", num_classes=10, image_size=16, mean=(0.4, 0.45, 0.5), std=(0.3, 0.2, 0.25))
    with torch.no_grad():
        model.head.weight.normal_(0, 1.0)
    vitkit.save_pretrained(model, path, extra={"class_names": class_names} if class_names else None)
    return model.eval()


def student(**overrides):
    torch.manual_seed(1)
    return vitkit.create_model("vit_test", distilled=True, image_size=8, **overrides)


def test_the_loss_is_half_the_labels_and_half_the_teacher_s_argmax_at_its_size_and_normalisation(tmp_path):
    names = CLASSES[::-1]  # the teacher scores the same classes in another order
    teacher_model = save_teacher(tmp_path / "teacher", names)
    model = student()
    with torch.no_grad():
        for head in (model.head, model.head_dist):
            head.weight.normal_(0, 1.0)
    teacher = load_teacher(str(tmp_path / "teacher"), model.config, CLASSES, "classification", torch.device("cpu"))
    assert not any(p.requires_grad for p in teacher.model.parameters()) and not teacher.model.training
    x = torch.rand(4, 3, 8, 8, generator=torch.Generator().manual_seed(2)) * 2 - 1  # normalised for the student
    targets = F.one_hot(torch.tensor([0, 1, 2, 3]), 10).float()
    objective = Distillation(model.train(), None, teacher)
    logits, (soft, hard) = objective.outputs(model, x, targets, None)
    # by hand: the student's pixels again, resized to 16x16, the teacher's normalisation, its rows in the data's order
    pixels = F.interpolate(x * 0.5 + 0.5, size=(16, 16), mode="bilinear", antialias=True, align_corners=False)
    mean, std = torch.tensor([0.4, 0.45, 0.5])[:, None, None], torch.tensor([0.3, 0.2, 0.25])[:, None, None]
    with torch.no_grad():
        theirs = teacher_model((pixels - mean) / std)
    want = torch.tensor([names.index(n) for n in CLASSES])
    assert torch.equal(hard, theirs[:, want].argmax(-1))
    y, y_dist = model(x)
    expected = 0.5 * soft_cross_entropy(y, targets) + 0.5 * F.cross_entropy(y_dist, hard)
    torch.testing.assert_close(objective.loss(logits, (soft, hard)), expected)
    assert not torch.allclose(expected, soft_cross_entropy(y, targets))  # the teacher's half counts


def test_without_a_teacher_both_heads_learn_the_labels():
    model = student().train()
    x, targets = torch.randn(3, 3, 8, 8), F.one_hot(torch.tensor([1, 2, 3]), 10).float()
    with torch.no_grad():
        model.head_dist.weight.normal_(0, 1.0)
    y, y_dist = model(x)
    want = (soft_cross_entropy(y, targets) + soft_cross_entropy(y_dist, targets)) / 2
    torch.testing.assert_close(Classification(model).loss((y, y_dist), targets), want)


def test_a_tiny_distillation_run_trains_through_the_cli_and_evaluates_both_heads_averaged(
    vitkit_cmd, tiny_run, tmp_path
):
    save_teacher(tmp_path / "teacher")
    run = tmp_path / "run"
    done = vitkit_cmd(
        "train", "--out", run, *tiny_run, "model.distilled=true", f"train.teacher={tmp_path / 'teacher'}",
        "train.steps=4",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    line = next(row for row in done.stdout.splitlines() if row.startswith("teacher"))
    assert "DeiT hard-label distillation" in line and "resized 8x8 -> 16x16" in line and "renormalised" in line
    summary = json.loads((run / "summary.json").read_text())
    assert summary["objective"] == "distillation"
    model = vitkit.load_pretrained(run)
    assert model.config.distilled and model.head_dist.weight.any()  # the distillation head trained
    g = torch.Generator().manual_seed(3)
    images, labels = torch.randint(0, 256, (12, 3, 8, 8), dtype=torch.uint8, generator=g), torch.arange(12) % 10
    measured = Distillation(model).evaluate(model.train(), [(images, labels)])  # what validation runs
    with torch.no_grad():  # both heads by hand, averaged
        tokens = model.eval().forward_features((images.float() / 255 - 0.5) / 0.5)
        logits = (model.head(tokens[:, 0]) + model.head_dist(tokens[:, 1])) / 2
    assert measured["top1"] == pytest.approx(float((logits.argmax(-1) == labels).float().mean()))
    assert measured["loss"] == pytest.approx(float(F.cross_entropy(logits, labels)), rel=1e-5)


def test_what_cannot_distil_is_one_line(vitkit_cmd, tiny_run, tmp_path):
    save_teacher(tmp_path / "teacher")
    done = vitkit_cmd("train", "--out", tmp_path / "a", *tiny_run, f"train.teacher={tmp_path / 'teacher'}")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "train.teacher: the student has no distillation token; add model.distilled=true" in done.stderr
    with pytest.raises(ConfigError, match="scores 10 classes and names none, the data has 3"):
        load_teacher(str(tmp_path / "teacher"), student().config, ["a", "b", "c"], "classification", "cpu")
    with pytest.raises(ConfigError, match="one label per image; train.objective is multi_label"):
        load_teacher(str(tmp_path / "teacher"), student().config, CLASSES, "multi_label", "cpu")
