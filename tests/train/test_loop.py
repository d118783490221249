import json
import math
import types

import pytest
import torch
from tiny_run import TINY_RUN

from vitkit.checkpoint.io import read_safetensors
from vitkit.errors import CheckpointError, ConfigError
from vitkit.models import create_model
from vitkit.train import find_checkpoint, learning_rate, param_groups, train
from vitkit.train.config import load_run_config

TINY = TINY_RUN


def test_weight_decay_groups():
    model = create_model("vit_test")
    decay, no_decay = param_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    skipped = {names[id(p)] for p in no_decay["params"]}
    assert {"cls_token", "pos_embed", "norm.weight", "head.bias", "blocks.0.norm1.bias"} <= skipped
    assert {names[id(p)] for p in decay["params"]} >= {"patch_embed.weight", "blocks.0.attn.qkv.weight", "head.weight"}
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


def test_ema_averages_the_parameters_and_keeps_the_live_batchnorm_statistics():
    """update_ema lerps learned weights only: a conv stem's BatchNorm running statistics are the live model's (their
    average lags behind weights that shrink, and the averaged model normalised with the wrong variances)."""
    from vitkit.train.optim import update_ema

    model = create_model("vit_test", image_size=16, backbone={"convs": [8, 16]}, patch_size=1)
    ema = {k: v.detach().clone() for k, v in model.state_dict().items()}
    before = {k: v.clone() for k, v in ema.items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    model.train()
    model(torch.randn(4, 3, 16, 16))  # moves the running statistics
    update_ema(ema, model, 0.75)
    live = model.state_dict()
    stats = [k for k in live if "running_" in k]
    assert stats and all(torch.equal(ema[k], live[k]) for k in stats)
    assert not torch.equal(live[stats[0]], before[stats[0]])
    for name, p in model.named_parameters():
        assert torch.allclose(ema[name], before[name] + 0.25), name


def _layer_scale(name: str, depth: int, d: float) -> float:
    """The BEiT/MAE rule with timm's grouping, written out: head at lr, block i (1-based) at d^(L + 1 - i), the final
    norm with the last block (d^1), the embeddings (patch, position, class token, a hybrid's ResNet stem) at d^(L + 1)."""
    if name.startswith("blocks."):
        return d ** (depth + 1 - (int(name.split(".")[1]) + 1))
    if name.startswith("norm."):
        return d
    if name.startswith(("head.", "pre_logits.")):
        return 1.0
    return d ** (depth + 1)


def test_layer_decay_groups_follow_the_formula():
    """Every parameter's lr scale is the formula's, for a plain ViT (relative position biases, GAP) and a hybrid with a
    pre-logits layer; weight decay stays off norms, biases, position/class embeddings; the step's lr is scaled."""
    from vitkit.errors import ConfigError
    from vitkit.train.optim import set_learning_rate

    d = 0.65
    hybrid = dict(image_size=32, backbone={"layers": [1], "width": 32}, patch_size=1, representation_size=8)
    conv_stem = dict(image_size=16, backbone={"convs": [8, 16]}, patch_size=1)  # BatchNorm: a norm, no decay
    for extra in (dict(pos_embed="relative", classifier="gap"), conv_stem, hybrid):
        model = create_model("vit_test", depth=3, **extra)
        groups = param_groups(model, 0.05, layer_decay=d)
        scale = {id(p): g["lr_scale"] for g in groups for p in g["params"]}
        decay = {id(p): g["weight_decay"] for g in groups for p in g["params"]}
        for name, p in model.named_parameters():
            assert scale[id(p)] == pytest.approx(_layer_scale(name, 3, d)), name
            exempt = p.ndim <= 1 or name in ("cls_token", "pos_embed") or "position_bias" in name
            assert decay[id(p)] == (0.0 if exempt else 0.05), name
        assert len(scale) == len(list(model.parameters()))
        optimizer = types.SimpleNamespace(param_groups=groups)  # what set_learning_rate reads of an optimizer
        set_learning_rate(optimizer, 0.1)
        assert [g["lr"] for g in groups] == pytest.approx([0.1 * g["lr_scale"] for g in groups])
    assert {n for n, p in model.named_parameters() if scale[id(p)] == pytest.approx(d**4)} >= {
        "cls_token",
        "backbone.stem_conv.weight",
        "patch_embed.weight",
    }
    with pytest.raises(ConfigError, match="train.layer_decay"):
        param_groups(create_model("bit_r50x1", num_classes=2, layers=(1,), width=32), 0.0, layer_decay=d)


def test_schedule_warmup_then_decay():
    kw = dict(lr=1.0, warmup=10, total=110)
    assert learning_rate(0, decay="cosine", **kw) == pytest.approx(0.1)
    assert learning_rate(9, decay="cosine", **kw) == pytest.approx(1.0)
    assert learning_rate(60, decay="cosine", **kw) == pytest.approx(0.5)
    assert learning_rate(110, decay="cosine", **kw) == pytest.approx(0.0, abs=1e-12)
    assert learning_rate(60, decay="linear", **kw) == pytest.approx(0.5)
    assert learning_rate(35, decay="linear", end_ratio=0.2, **kw) == pytest.approx(1.0 - 0.8 * 0.25)
    assert learning_rate(100, decay="constant", **kw) == 1.0


@pytest.mark.numerics
def test_overfits_one_batch(tmp_path):
    config = load_run_config(
        None,
        TINY
        + [
            "data.synthetic_size=16",
            "train.steps=30",
            "train.lr=1e-2",
            "train.weight_decay=0",
            "augment.crop=none",
            "augment.hflip=0",
            "train.eval_every=30",
            "train.checkpoint_every=30",
            "train.log_every=1",
            "model.depth=2",
        ],
    )
    train(config, tmp_path / "run")
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if r["kind"] == "train"]
    assert losses[0] > 2.0 and losses[-1] < 0.1 * losses[0]


@pytest.mark.numerics
def test_run_directory_contents(tmp_path):
    out = tmp_path / "run"
    overrides = ["train.steps=6", "train.ema=0.9", "train.keep_checkpoints=2", "train.figures=true"]
    summary = train(load_run_config(None, TINY + overrides), out)
    for name in (
        "run.yaml",
        "metrics.jsonl",
        "summary.json",
        "loss.png",
        "accuracy.png",
        "lr.png",
        "confusion.png",
        "final/config.json",
        "final/model.safetensors",
    ):
        assert (out / name).is_file(), name
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_0000004", "step_0000006"]
    assert json.loads((out / "final" / "config.json").read_text())["class_names"][0] == "class_0"
    saved = json.loads((out / "summary.json").read_text())
    assert saved == summary and 0.0 <= saved["final_val_top1"] <= 1.0 and saved["steps"] == 6
    assert find_checkpoint(out) == out / "final"
    # with EMA the final weights are the average, not the last step's weights
    final = read_safetensors(out / "final" / "model.safetensors")
    last = read_safetensors(out / "checkpoints" / "step_0000006" / "model.safetensors")
    assert not torch.equal(final["head.weight"], last["head.weight"])


def test_a_run_without_figures_writes_everything_else(tmp_path):
    """train.figures=false (the suite's tiny run) draws no PNG; the run, its summary and model are whole."""
    out = tmp_path / "run"
    summary = train(load_run_config(None, TINY + ["train.steps=2", "train.figures=false"]), out)
    assert not list(out.glob("*.png"))
    assert (out / "final" / "model.safetensors").is_file() and summary["steps"] == 2


@pytest.mark.numerics
@pytest.mark.parametrize(
    "extra",
    [
        [],
        [
            "train.micro_batch=8",
            "augment.mixup=0.8",
            "augment.cutmix=1.0",
            "augment.erase=0.5",
            "model.dropout=0.1",
            "train.ema=0.9",
            "model.backbone={convs: [8]}",  # a conv stem: BatchNorm's running statistics resume too
            "model.patch_size=2",
        ],
    ],
)
def test_interrupted_and_resumed_equals_straight(tmp_path, extra):
    """A run stopped at step 3 and resumed ends with the same weights as one that ran straight to step 7."""
    config = load_run_config(
        None, TINY + ["train.steps=7", "train.checkpoint_every=3", "augment.randaugment_ops=1"] + extra
    )
    train(config, tmp_path / "straight")
    stopped = train(config, tmp_path / "resumed", stop_at=3)
    assert stopped == {"stopped_at": 3, "steps": 7}
    assert not (tmp_path / "resumed" / "final").exists()
    train(config, tmp_path / "resumed", resume=True)
    a = read_safetensors(tmp_path / "straight" / "final" / "model.safetensors")
    b = read_safetensors(tmp_path / "resumed" / "final" / "model.safetensors")
    for key in a:
        torch.testing.assert_close(b[key], a[key], atol=1e-6, rtol=0, msg=key)

    def train_rows(run):
        rows = [json.loads(x) for x in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
        return [(r["step"], r["loss"]) for r in rows if r["kind"] == "train"]

    assert [s for s, _ in train_rows("resumed")] == [s for s, _ in train_rows("straight")]
    for (_, x), (_, y) in zip(train_rows("resumed"), train_rows("straight")):
        assert math.isclose(x, y, rel_tol=1e-5)


@pytest.mark.numerics
def test_summary_says_where_each_stretch_of_a_resumed_run_ran(tmp_path):
    """summary.json's device, processes and threads were those of the last stretch alone; segments lists each one."""
    from vitkit.train import resume_config

    out = tmp_path / "run"
    train(load_run_config(None, TINY + ["train.steps=4"]), out, stop_at=2)
    summary = train(resume_config(out, ["train.threads=2"]), out, resume=True)
    assert summary["segments"] == [
        {"steps": [0, 2], "device": "cpu", "processes": 1, "threads": 1},
        {"steps": [2, 4], "device": "cpu", "processes": 1, "threads": 2},
    ]
    assert json.loads((out / "summary.json").read_text())["segments"] == summary["segments"] and summary["threads"] == 2


def test_refuses_to_overwrite_a_run_and_to_resume_nothing(tmp_path):
    config = load_run_config(None, TINY + ["train.steps=2"])
    train(config, tmp_path / "run")
    with pytest.raises(ConfigError, match="--resume"):
        train(config, tmp_path / "run")
    with pytest.raises(ConfigError, match="train.seed"):  # another seed would change the data order
        train(load_run_config(None, TINY + ["train.steps=4", "train.seed=1"]), tmp_path / "run", resume=True)
    with pytest.raises(CheckpointError, match="no checkpoint"):
        train(config, tmp_path / "empty", resume=True)


def test_micro_batch_must_divide(tmp_path):
    with pytest.raises(ConfigError, match="micro_batch"):
        train(load_run_config(None, TINY + ["train.micro_batch=5"]), tmp_path / "run")


def test_the_plan_names_a_hybrid_and_its_resnet(tmp_path, capsys):
    config = load_run_config(
        None,
        TINY + ["train.steps=1", "model.image_size=16", "model.patch_size=1", "model.backbone={layers: [], width: 32}"],
    )
    train(config, tmp_path / "run")
    model_line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("model "))
    assert "hybrid ViT at 16x16" in model_line and "ResNet stem (width 32), patch 1 (16 tokens)" in model_line, (
        model_line
    )


def test_the_plan_names_mimetic_attention_init_only_where_the_weights_start_fresh(tmp_path, capsys):
    def model_line(*overrides):
        train(
            load_run_config(None, TINY + ["train.steps=1", *overrides]), tmp_path / str(len(list(tmp_path.iterdir())))
        )
        return next(line for line in capsys.readouterr().out.splitlines() if line.startswith("model "))

    assert "depth 1, mimetic attention init:" in model_line("model.attention_init=mimetic")
    assert "mimetic" not in model_line()
    assert "mimetic" not in model_line("model.attention_init=mimetic", f"model.init={tmp_path / '0'}")  # read weights
    cnn = ["model.attention_init=mimetic", "model.depth=0", "model.backbone={convs: [8]}", "model.classifier=gap"]
    assert "mimetic" not in model_line(*cnn, "model.patch_size=1")  # no attention to start


def test_timing_passes_leave_batchnorm_statistics_weights_and_random_state_as_they_were():
    """The plan's time estimate and train.precision=auto's measurement run the model itself in training mode."""
    from vitkit.train.plan import _time_step

    model = create_model("vit_test", backbone={"convs": [8]}, patch_size=2, image_size=16, num_classes=3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    draw = torch.get_rng_state()
    seconds, _ = _time_step(model, 4, torch.device("cpu"), None)
    assert seconds > 0 and model.backbone.convs[1].num_batches_tracked == 0
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert torch.equal(torch.get_rng_state(), draw) and all(p.grad is None for p in model.parameters())


def test_the_time_estimate_probes_a_gpu_with_a_real_batch_and_the_runs_precision(monkeypatch):
    """A 1-image fp32 probe on a GPU measured kernel launches, not work: the plan block estimated 5:55 for a
    ViT-B/16 run that trained in 9 s on an H200."""
    from vitkit.models import get_config
    from vitkit.train.plan import TIMED_PASSES, _time_step, probe_images

    vit_b = get_config("vit_b16")
    assert probe_images(vit_b, 256, torch.device("cpu")) == 1  # ~2e10 FLOPs on a CPU: one image of ViT-B/16
    assert probe_images(vit_b, 256, torch.device("cuda")) == 64  # a GPU takes a real batch
    assert probe_images(vit_b, 16, torch.device("cuda")) == 16  # never more than the run's micro-batch
    model = create_model("vit_test")
    seen = []
    forward = model.forward
    monkeypatch.setattr(
        model,
        "forward",
        lambda x: (
            seen.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None) or forward(x)
        ),
    )
    seconds, probe = _time_step(model, 8, torch.device("cpu"), torch.bfloat16)
    assert seconds > 0 and probe == 8
    passes = 1 + TIMED_PASSES  # a warm-up, then the timed passes
    assert seen == [torch.bfloat16] * passes  # the probe runs in the run's autocast dtype
    assert all(p.grad is None for p in model.parameters())  # and leaves no gradients behind
    _time_step(model, 8, torch.device("cpu"), None)
    assert seen[passes:] == [None] * passes


def test_init_from_a_head_that_never_trained_says_so(tmp_path):
    """finetune's start (init/, a new zero head for the data's classes) was announced as "its head scores the same 3
    classes", as if a trained head were kept."""
    from vitkit.checkpoint import save_pretrained
    from vitkit.train.init import init_from as _init_from

    names = ["ant", "bee", "cat"]
    save_pretrained(create_model("vit_test", num_classes=3), tmp_path / "zero", extra={"class_names": names})
    assert "all zeros (not trained yet)" in _init_from(
        create_model("vit_test", num_classes=3), tmp_path / "zero", names
    )
    trained = create_model("vit_test", num_classes=3)
    torch.nn.init.normal_(trained.head.weight)
    save_pretrained(trained, tmp_path / "trained", extra={"class_names": names})
    assert "its head scores the same 3 classes" in _init_from(
        create_model("vit_test", num_classes=3), tmp_path / "trained", names
    )


def test_the_plan_names_every_augmentation_with_its_strength_and_the_eta_follows_the_running_rate():
    from vitkit.data.augment import AugmentConfig
    from vitkit.train.plan import augment_lines, running_step_time

    a = AugmentConfig(crop="rrc", rrc_scale=(0.05, 1.0), randaugment_ops=2, mixup=0.8, cutmix=1.0, erase=0.25)
    lines = augment_lines(a, 224, 10)
    assert lines[0].startswith("augment    Inception crop of 5%-100% of the image's area")
    named = {line.split()[0] for line in lines[1:]}
    assert named == {"hflip", "randaug", "mixup", "cutmix", "erase", "off"}
    assert lines[-1] == "  off      label smoothing (augment.label_smoothing=0.1)"  # and the one that is off
    assert "2 ops at magnitude 9/10" in lines[2] and "0.25 of images lose a rectangle of 2%-33%" in lines[-2]
    quiet = augment_lines(AugmentConfig(crop="none", hflip=0.0), 32, 10)
    assert quiet[0].startswith("augment    no crop") and quiet[1].startswith(
        "  off      hflip (augment.hflip=0.5 for photos"
    )
    # the ETA's step time: an exponential moving average of the logged windows, not the estimate made at start
    step_s = running_step_time(None, 10.0, 10)  # 1 s a step
    assert step_s == 1.0 and running_step_time(step_s, 30.0, 10) == 2.0  # halfway to a slower 3 s a step
    assert running_step_time(step_s, 5.0, 0) == 1.0  # a window without steps changes nothing


def test_compiled_cpu_training_follows_eager_and_the_plan_says_it_compiled(tmp_path, capsys):
    """The demo configs train compiled on the CPU (train.compile=true): the same run eager and compiled lands on the
    same weights to rounding, and the plan says it compiles."""
    overrides = [*TINY, "train.steps=3", "train.eval_every=3", "train.precision=fp32"]  # auto may pick bf16 compiled
    eager = train(load_run_config(None, overrides), tmp_path / "eager")
    capsys.readouterr()
    compiled = train(load_run_config(None, [*overrides, "train.compile=true"]), tmp_path / "compiled")
    plan = capsys.readouterr().out
    assert "compile    torch.compile (train.compile=true)" in plan, plan
    a = read_safetensors(tmp_path / "eager" / "final" / "model.safetensors")
    b = read_safetensors(tmp_path / "compiled" / "final" / "model.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-4, atol=1e-5, msg=name)
    assert compiled["final_val_top1"] == pytest.approx(eager["final_val_top1"], abs=1 / 16)


def test_without_a_cpp_compiler_train_compile_trains_eager_and_the_plan_says_why(tmp_path, capsys, monkeypatch):
    """torch.compile builds CPU code with a C++ compiler; without one its first call failed deep in the step. The run
    trains eager and the plan names the missing compiler."""
    from vitkit.train import plan

    monkeypatch.setattr(plan, "cpu_compiler", lambda: None)
    monkeypatch.setattr(torch, "compile", lambda *a, **k: pytest.fail("compiled without a C++ compiler"))
    summary = train(load_run_config(None, [*TINY, "train.steps=2", "train.compile=true"]), tmp_path / "run")
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("compile "))
    assert "needs a C++ compiler and none is on PATH" in line and "training eager" in line, line
    assert summary["steps"] == 2


def test_cpu_compiler_reads_cxx_then_inductors_candidates(monkeypatch, tmp_path):
    from torch._inductor import config as inductor

    from vitkit.devices import cpu_compiler

    compiler = tmp_path / "my-c++"
    compiler.write_text("#!/bin/sh\n")
    compiler.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with inductor.patch({"cpp.cxx": (None, "g++")}):  # torch's config, restored on leaving
        monkeypatch.setenv("CXX", "my-c++")
        assert cpu_compiler() == "my-c++"
        monkeypatch.delenv("CXX")
        assert cpu_compiler() is None
    assert inductor.cpp.cxx


def test_the_plan_says_masked_patch_training_runs_eager_under_train_compile(tmp_path, capsys):
    """Masked patch prediction never compiles; the plan said it did."""
    train(
        load_run_config(None, [*TINY, "train.steps=1", "train.objective=masked_patch", "train.compile=true"]),
        tmp_path / "run",
    )
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("compile "))
    assert "off: the masked_patch objective trains eager" in line, line
