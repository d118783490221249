"""Bad input of every kind through the real `vitkit` entry point: one line on stderr, exit code 2, nothing lost.

Classes: two writers on one run directory; CLI values never parsed as YAML; NaN/inf and out-of-range values;
damaged files of every kind vitkit reads; permission errors; racing readers; signals late in a run."""

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from tiny_run import TINY_RUN

from vitkit.checkpoint import save_pretrained
from vitkit.cli import main
from vitkit.errors import ConfigError
from vitkit.files import write_json
from vitkit.models import VisionTransformer, get_config
from vitkit.train import find_checkpoint, resume_config, step_checkpoints, train
from vitkit.train.config import load_run_config

TINY = [*TINY_RUN, "train.log_every=1", "train.eval_every=100", "train.decay=constant"]


def _vitkit(*args) -> list[str]:
    return [str(Path(sys.executable).with_name("vitkit")), *map(str, args)]


def _one_line_exit_2(capsys, *argv) -> str:
    """Run vitkit in this process; it must exit 2 with exactly one line on stderr (returned)."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exit:  # argparse
        code = exit.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("ck") / "model"
    torch.manual_seed(0)
    save_pretrained(
        VisionTransformer(get_config("vit_test", depth=1, image_size=8, num_classes=3)),
        path,
        extra={"class_names": ["a", "b", "c"]},
    )
    image = path.parent / "x.png"
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(image)
    return path


@pytest.fixture(scope="module")
def _finished(tmp_path_factory):
    """A finished run of TINY with train.steps=2 (final/, its step checkpoint, figures), trained once."""
    out = tmp_path_factory.mktemp("finished") / "run"
    train(load_run_config(None, TINY + ["train.steps=2"]), out)
    return out


@pytest.fixture
def finished_run(_finished, tmp_path) -> Path:
    """The test's own copy of the finished 2-step run, at tmp_path/run."""
    return Path(shutil.copytree(_finished, tmp_path / "run"))


# -- two writers, one directory -------------------------------------------------------------------
def test_a_second_writer_fails_at_once_naming_the_holder(tmp_path, capsys):
    out = tmp_path / "run"
    first = subprocess.Popen(
        _vitkit("train", "--out", out, *TINY, "train.steps=100000", "train.checkpoint_every=1000"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (out / "run.yaml").is_file():
            assert first.poll() is None and time.monotonic() < deadline, (
                first.stderr.read() if first.poll() is not None else "slow"
            )
            time.sleep(0.05)
        started = time.monotonic()  # the second writer: this process
        line = _one_line_exit_2(capsys, "train", "--out", out, *TINY, "train.steps=4")
        assert f"in use by another vitkit process (pid {first.pid})" in line
        assert time.monotonic() - started < 60
    finally:
        first.kill()
        first.wait()
    assert (out / "run.yaml").is_file()  # the first run's directory is untouched by the refused ones


def test_a_new_run_never_replaces_a_finished_one(capsys, finished_run):
    out = finished_run
    shutil.rmtree(out / "checkpoints")  # only final/ is left
    before = (out / "final" / "model.safetensors").read_bytes()
    line = _one_line_exit_2(capsys, "train", "--out", out, *TINY, "train.steps=2")
    assert "already holds a run" in line and "--resume" in line
    assert (out / "final" / "model.safetensors").read_bytes() == before


def test_out_naming_a_file(tmp_path, capsys):
    (tmp_path / "file").write_text("keep")
    assert "is a file" in _one_line_exit_2(capsys, "train", "--out", tmp_path / "file", *TINY)
    assert (tmp_path / "file").read_text() == "keep"
    # a folder below the file: the error names the file, not the folder that does not exist
    assert _one_line_exit_2(capsys, "train", "--out", tmp_path / "file" / "sub", *TINY).startswith(
        f"vitkit train: error: {tmp_path / 'file'}: is a file"
    )


def test_out_naming_a_model_directory_is_refused_and_resume_of_a_model_says_how_to_train_from_it(tmp_path, capsys):
    """train --out DIR of a converted model wrote the run around it; `eval DIR` then scored the old model, not the run's."""
    model = save_pretrained(VisionTransformer(get_config("vit_test", depth=1, image_size=8)), tmp_path / "model")
    before = sorted(p.name for p in model.iterdir())
    line = _one_line_exit_2(capsys, "train", "--out", model, *TINY, "train.steps=2")
    assert "holds a model (config.json), not a run" in line and f"model.init={model}" in line
    assert sorted(p.name for p in model.iterdir()) == before
    line = _one_line_exit_2(capsys, "train", "--resume", model)
    assert "a model, not a vitkit run directory" in line and "--out NEW_DIR" in line and f"--out {model}" not in line


# -- CLI values are what they say -----------------------------------------------------------------
@pytest.mark.parametrize("value", ["#hash", "x #y", "1e3", "[a, b]", "{a: 1}", "yes", "a: b"])
def test_text_values_are_never_yaml(value):
    config = load_run_config(None, [f"data.path={value}", f"model.init={value}"])
    assert config.data.path == value and config.model["init"] == value
    assert load_run_config(None, ["data.path=null"]).data.path is None  # how a key=value override unsets a path
    assert load_run_config(None, [("data.path", "null")]).data.path == "null"  # --data null is a folder named null


def test_data_hash_is_a_path_not_fashion_mnist(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = _one_line_exit_2(capsys, "train", "--data", "#hash", "--out", tmp_path / "run", *TINY[:3])
    assert "#hash" in line and not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "override, key",
    [
        ("train.weight_decay=nan", "train.weight_decay"),
        ("augment.mixup=inf", "augment.mixup"),
        ("data.memory_mb=nan", "data.memory_mb"),
        ("train.lr=-inf", "train.lr"),
        ("train.betas=[0.9, .nan]", "train.betas"),
        ("model.mean=abc", "model.mean"),
        ("model.mean=[.nan]", "model.mean"),
        ("model.layer_norm_eps=nan", "model.layer_norm_eps"),
        ("train.seed=1e23", "train.seed"),
        ("train.seed=100000000000000000000000", "train.seed"),
        ("train.device=meta", "train.device"),
        ("model.backbone=5", "model.backbone"),
        ("model.num_classes=true", "model.num_classes"),
        ("train.steps=0", "train.steps"),
        ("model.image_size=[1,2,3]", "model.image_size"),
    ],
)
def test_bad_values_are_one_line_naming_the_key(tmp_path, capsys, override, key):
    out = tmp_path / "run"
    line = _one_line_exit_2(capsys, "train", "--out", out, *TINY, override)
    assert key in line
    assert not out.exists()  # refused before anything was written


@pytest.mark.parametrize(
    "argv, words",
    [
        (["eval", "{ck}", "--batch-size", "-5"], "--batch-size"),
        (["eval", "{ck}", "--batch-size", "0"], "--batch-size"),
        (["predict", "{ck}", "{img}", "--top", "-3"], "--top"),
        (["convert", "{ck}", "{tmp}/o", "--image-size", "1", "2", "3"], "--image-size"),
        (["eval", "{ck}", "--val-fraction", "nan"], "--val-fraction"),
        (["knn", "{ck}", "--temperature", "inf"], "--temperature"),
        (["eval", "{ck}", "--val-fraction", "1.5"], "expected a share from 0 to below 1"),
        (["knn", "{ck}", "--val-fraction", "1"], "--val-fraction"),
        # a flag the command lacks is named with the command, not as the top-level parser's
        (
            ["fewshot", "{ck}", "--no-progress"],
            "vitkit fewshot: error: unrecognized arguments: --no-progress (see vitkit fewshot --help)",
        ),
        (["train", "--bogus"], "vitkit train: error: unrecognized arguments: --bogus"),
    ],
)
def test_bad_flags_are_one_line(tmp_path, capsys, ckpt, argv, words):
    names = {"ck": ckpt, "img": ckpt.parent / "x.png", "tmp": tmp_path}
    assert words in _one_line_exit_2(capsys, *[a.format(**names) for a in argv])


def test_run_config_files_that_are_not_yaml_text(tmp_path, capsys):
    (tmp_path / "folder.yaml").mkdir()
    assert "is a folder" in _one_line_exit_2(
        capsys, "train", "--config", tmp_path / "folder.yaml", "--out", tmp_path / "r"
    )
    (tmp_path / "latin1.yaml").write_bytes("train:\n  lr: 1e-3 # \xe9t\xe9\n".encode("latin-1"))
    assert "not UTF-8" in _one_line_exit_2(
        capsys, "train", "--config", tmp_path / "latin1.yaml", "--out", tmp_path / "r"
    )
    (tmp_path / "deep.yaml").write_text("a: " + "[" * 5000 + "]" * 5000)
    assert "deep.yaml" in _one_line_exit_2(capsys, "train", "--config", tmp_path / "deep.yaml", "--out", tmp_path / "r")
    laughs = (
        "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
        + "".join(  # nine lines expand to 10^9 values when walked
            f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
        )
        + "model:\n  mean: *i\n"
    )
    (tmp_path / "laughs.yaml").write_text(laughs)
    assert "aliases" in _one_line_exit_2(capsys, "train", "--config", tmp_path / "laughs.yaml", "--out", tmp_path / "r")


def test_config_json_that_is_huge_or_deeply_nested(tmp_path, capsys, ckpt):
    for name, text in (
        ("deep", '{"format": "vitkit", "model": ' + "[" * 100_000 + "]" * 100_000 + "}"),
        ("long", '{"format": "vitkit", "model": {"mean": "' + "x" * 1_000_000 + '"}}'),
    ):
        copy = tmp_path / name
        shutil.copytree(ckpt, copy)
        (copy / "config.json").write_text(text)
        line = _one_line_exit_2(capsys, "info", copy)
        assert "config.json" in line and len(line) < 400


# -- config.json and weights ----------------------------------------------------------------------
def _edited(ckpt: Path, tmp_path: Path, edit) -> Path:
    copy = tmp_path / "edited"
    shutil.copytree(ckpt, copy)
    config = json.loads((copy / "config.json").read_text())
    edit(config)
    (copy / "config.json").write_text(json.dumps(config))
    return copy


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda c: c["model"].update(mean="abc"), "mean"),
        (lambda c: c["model"].update(backbone=5), "backbone"),
        (lambda c: c["model"].update(num_classes=True), "num_classes"),
        (lambda c: c.update(class_names=["a"]), "class_names"),
        (lambda c: c.update(preprocess={"crop_pct": 0}), "crop_pct"),
        (lambda c: c["model"].update(width="wide"), "width"),
        (lambda c: c.update(data={"val_fraction": "x"}), "data"),
        (lambda c: (c.pop("class_names"), c["model"].update(num_classes=20_000_000)), "head.weight"),
    ],
)
@pytest.mark.parametrize("command", ["predict", "info"])
def test_config_json_fields_of_the_wrong_type_or_range(tmp_path, capsys, ckpt, edit, words, command):
    bad = _edited(ckpt, tmp_path, edit)
    argv = ["predict", bad, ckpt.parent / "x.png"] if command == "predict" else ["info", bad]
    line = _one_line_exit_2(capsys, *argv)
    assert words in line and str(bad) in line


def test_non_finite_weights_refuse_to_load_naming_the_tensor(tmp_path, capsys, ckpt):
    model = VisionTransformer(get_config("vit_test", depth=1, image_size=8, num_classes=3))
    with torch.no_grad():
        model.blocks[0].mlp.fc1.weight[0, 0] = float("nan")
    save_pretrained(model, tmp_path / "nan")
    for argv in (
        ["info", tmp_path / "nan"],
        ["predict", tmp_path / "nan", ckpt.parent / "x.png"],
        ["convert", tmp_path / "nan", tmp_path / "out.npz"],
    ):
        assert "'blocks.0.mlp.fc1.weight' holds 1 non-finite values" in _one_line_exit_2(capsys, *argv)
    assert not (tmp_path / "out.npz").exists()


def test_permission_denied_is_one_line_naming_the_file(tmp_path, ckpt):
    copy = tmp_path / "locked"
    shutil.copytree(ckpt, copy)
    (copy / "model.safetensors").chmod(0)
    prefix = []
    if os.geteuid() == 0:  # root reads anything: drop the capabilities that let it
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv")
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    (tmp_path / "readonly").mkdir()
    (tmp_path / "readonly").chmod(0o555)
    for argv, name in (
        (["info", copy], "model.safetensors"),
        (["convert", ckpt, tmp_path / "readonly" / "new"], "readonly"),
    ):
        result = subprocess.run(prefix + _vitkit(*argv), capture_output=True, text=True, timeout=120)
        assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
        assert name in result.stderr and "ermission denied" in result.stderr


# -- resuming -------------------------------------------------------------------------------------
def test_damaged_run_files_on_resume(tmp_path, capsys):
    out = tmp_path / "run"
    train(load_run_config(None, TINY + ["train.steps=4"]), out, stop_at=2)
    state = step_checkpoints(out)[-1] / "train_state.json"
    good = state.read_text()
    for damage in ('{"step": "two"}', "[]", json.dumps({**json.loads(good), "micro_batch": 0})):
        state.write_text(damage)
        assert "train_state.json" in _one_line_exit_2(capsys, "train", "--resume", out)
    state.write_text(good)
    write_json(out / "bad_files.json", {"files": 5})
    assert "bad_files.json: damaged" in _one_line_exit_2(capsys, "train", "--resume", out)
    (out / "bad_files.json").unlink()
    with open(out / "metrics.jsonl", "a") as log:
        log.write("{not json\n[1, 2]\n")
    assert main(["train", "--resume", str(out)]) == 0
    assert "2 damaged line(s) ignored" in capsys.readouterr().err
    assert json.loads((out / "summary.json").read_text())["steps"] == 4


def test_an_extended_run_stopped_again_resumes_to_the_new_step_count(finished_run):
    out = finished_run
    train(resume_config(out, ["train.steps=6"]), out, resume=True, stop_at=4)  # as SIGTERM at step 4 does
    assert resume_config(out).train.steps == 6  # what `vitkit train --resume RUN` (the printed command) reads
    assert main(["train", "--resume", str(out)]) == 0
    assert json.loads((out / "summary.json").read_text())["steps"] == 6


def test_a_kill_during_pruning_is_cleaned_up_by_resume(tmp_path):
    out = tmp_path / "run"
    train(load_run_config(None, TINY + ["train.steps=6"]), out, stop_at=4)
    junk = out / "checkpoints" / "step_0000001"
    junk.mkdir()
    (junk / "config.json").write_text("{}")  # what a kill in the middle of deleting a checkpoint leaves
    (out / "checkpoints" / ".step_0000002.old").mkdir()
    train(resume_config(out), out, resume=True)
    assert not junk.exists() and not (out / "checkpoints" / ".step_0000002.old").exists()


def test_eval_of_a_step_checkpoint_never_writes_into_it(tmp_path, capsys):
    """A live run prunes its step folders; eval's confusion PNG goes beside the run, so it never recreates one."""
    out = tmp_path / "run"
    train(load_run_config(None, TINY + ["train.steps=4"]), out, stop_at=2)
    step = step_checkpoints(out)[-1]
    before = sorted(p.name for p in step.iterdir())
    data = tmp_path / "list.csv"
    for i in range(4):
        Image.fromarray(np.full((8, 8, 3), 60 * i, np.uint8)).save(tmp_path / f"{i}.png")
    data.write_text("".join(f"{i}.png,class_{i % 2}\n" for i in range(4)))  # named as the model's classes
    assert main(["eval", str(out), "--data", str(data), "--split", "val", "--val-fraction", "0.5"]) == 0
    assert sorted(p.name for p in step.iterdir()) == before
    assert list(out.glob("**/confusion_val*.png")) and not list(
        step.glob("*.png")
    )  # beside the run, not in the step folder


def test_resuming_a_finished_run_with_changes_and_no_step_left_is_refused_and_run_yaml_kept(finished_run):
    """--resume RUN train.lr=1e-4 of a finished run trained nothing, exit 0, but wrote lr 1e-4 into run.yaml, which a
    later --resume RUN train.steps=N then trained at."""
    out = finished_run
    before = (out / "run.yaml").read_text()
    with pytest.raises(
        ConfigError, match=r"train.lr: .* already finished at step 2 of 2, so no step would train with it"
    ):
        train(resume_config(out, ["train.lr=1e-4"]), out, resume=True)
    assert (out / "run.yaml").read_text() == before
    with pytest.raises(ConfigError, match=r"train.steps: .* is at step 2, past train.steps=1, so no step would train"):
        train(resume_config(out, ["train.steps=1"]), out, resume=True)  # it said "already finished at step 2 of 1"
    train(
        resume_config(out, ["train.progress=true"]), out, resume=True
    )  # a display setting, or nothing: finishes as before
    longer = train(resume_config(out, ["train.lr=1e-4", "train.steps=3"]), out, resume=True)  # with steps left: trains
    assert longer["steps"] == 3 and "lr: 0.0001" in (out / "run.yaml").read_text()


def test_eval_of_a_step_checkpoint_keeps_the_final_models_figure_and_names_the_step(tmp_path, capsys):
    """eval RUN/checkpoints/step_N wrote RUN/eval/confusion_val.png over the final model's; eval of a run without
    final/ scored its newest step checkpoint and called the figure RUN's."""
    out = tmp_path / "run"
    train(load_run_config(None, TINY + ["train.steps=4", "train.checkpoint_every=2"]), out, stop_at=2)
    assert main(["eval", str(out), "--split", "val", "--json"]) == 0  # no final/ yet: step 2 stands in
    printed = capsys.readouterr().out
    assert f"{out} (step_0000002: no final/ yet) on val" in printed and '"step_checkpoint": "step_0000002"' in printed
    assert (out / "eval" / "confusion_val_step_0000002.png").is_file()
    train(resume_config(out, []), out, resume=True)
    assert main(["eval", str(out), "--split", "val"]) == 0
    final = (out / "eval" / "confusion_val.png").read_bytes()
    assert f"{out} on val" in capsys.readouterr().out
    assert main(["eval", str(step_checkpoints(out)[0]), "--split", "val"]) == 0
    assert (out / "eval" / "confusion_val.png").read_bytes() == final
    assert (out / "eval" / "confusion_val_step_0000002.png").is_file()


@pytest.mark.int8
def test_eval_at_another_precision_keeps_the_fp32_figure(capsys, monkeypatch, finished_run):
    """eval --precision int8-dynamic wrote RUN/eval/confusion_val.png over the fp32 one."""
    from vitkit import plots

    out = finished_run
    titles = {}
    save = plots._save
    monkeypatch.setattr(
        plots, "_save", lambda fig, path: titles.setdefault(path.name, fig.axes[0].get_title()) and save(fig, path)
    )
    assert main(["eval", str(out), "--split", "val"]) == 0
    fp32 = (out / "eval" / "confusion_val.png").read_bytes()
    assert main(["eval", str(out), "--split", "val", "--precision", "int8-dynamic", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (out / "eval" / "confusion_val.png").read_bytes() == fp32
    assert (
        Path(result["confusion_png"]) == out / "eval" / "confusion_val_int8-dynamic.png"
        and Path(result["confusion_png"]).is_file()
    )
    assert "images; fp32" in titles["confusion_val.png"]  # the figure says what computed it
    assert titles["confusion_val_int8-dynamic.png"].endswith(f"images; {result['precision']}")


def test_eval_into_a_folder_that_cannot_be_written_fails_before_scoring(capsys, monkeypatch, finished_run):
    """A run whose eval/ could not be written was scored in full before the PNG failed, with no hint to write it
    elsewhere."""
    from vitkit.evaluate import metrics as evaluation

    out = finished_run
    # a file where eval/ goes stands for a folder that cannot be written (tests run as root, for whom modes do not)
    (out / "eval").write_text("")
    scored = []
    monkeypatch.setattr(evaluation, "evaluate", lambda *a, **k: scored.append(1))
    line = _one_line_exit_2(capsys, "eval", str(out), "--split", "val")
    assert "confusion matrix" in line and "--confusion PATH" in line and not scored


def test_loads_racing_a_replacement_never_report_corrupt(finished_run):
    out = finished_run
    from vitkit.checkpoint.native import load_native, write_pretrained
    from vitkit.train.state import write_dir as _write_dir

    model, extra = load_native(out / "final")
    other = VisionTransformer(model.config)  # two models in turn: a read mixing them fails its checksums
    stop, errors = threading.Event(), []

    def replace_again_and_again():
        while not stop.is_set():
            for m in (model, other):
                _write_dir(out / "final", lambda tmp: write_pretrained(m, tmp, extra=extra))

    writer = threading.Thread(target=replace_again_and_again)
    writer.start()
    try:
        for _ in range(60):
            try:
                load_native(find_checkpoint(out))
            except Exception as err:
                errors.append(err)
    finally:
        stop.set()
        writer.join()
    assert not errors, errors[:3]


def test_a_late_second_sigterm_exits_130(tmp_path):
    """The first SIGTERM stops the loop (a checkpoint, exit 0); a second one after the loop ended must still mean 'interrupted'."""
    script = (
        "import os, signal, sys, vitkit.train as t, vitkit.train.faults as f\n"
        "skip = f.NonFinite.skip\n"
        "def first(self, *a):\n"
        "    if not f.stop_requested():\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"  # first: inside the training loop
        "    return skip(self, *a)\n"
        "f.NonFinite.skip = first\n"
        "real = t.train\n"
        "def train(*a, **k):\n"
        "    result = real(*a, **k)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"  # second: the run has returned, the CLI is finishing
        "    return result\n"
        "t.train = train\n"
        "from vitkit.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, "train", "--out", str(tmp_path / "run"), *TINY, "train.steps=50"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 130, result.stderr
    assert "interrupted" in result.stderr and step_checkpoints(tmp_path / "run")
    # the first signal's checkpoint is there: the line says how to go on from it
    assert (
        f"interrupted; continue from its last checkpoint with vitkit train --resume {tmp_path / 'run'}" in result.stderr
    )


def test_a_second_sigterm_after_the_command_returned_exits_130(tmp_path):
    """A second SIGTERM that came while the interpreter shut down (0.5-1 s after the first: DataLoader workers, threads)
    met the default handler and ended the process with 143, where docs/reliability.md says 130."""
    script = (
        "import os, signal, sys, vitkit.train.faults as f\n"
        "skip = f.NonFinite.skip\n"
        "def first(self, *a):\n"
        "    if not f.stop_requested():\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "    return skip(self, *a)\n"
        "f.NonFinite.skip = first\n"
        "from vitkit.cli import main\n"
        "code = main()\n"  # the process's own command line, as the `vitkit` script calls it
        "os.kill(os.getpid(), signal.SIGTERM)\n"  # second: main() has returned, the process is ending
        "sys.exit(code)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, "train", "--out", str(tmp_path / "run"), *TINY, "train.steps=50"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 130, (result.returncode, result.stderr)
    assert "stopped at step" in result.stdout and "interrupted" in result.stderr and step_checkpoints(tmp_path / "run")


@pytest.mark.parametrize(
    "name, text, words",
    [
        ("list.csv", "a.png," + "x" * 200_000 + "\n", "list.csv:1"),  # over csv's field limit
        ("list.csv", "a.png,--5\nb.png,\x00\n", "list.csv:2"),  # a NUL byte
        ("list.csv", "a.png,\n", "list.csv:1"),  # no label
        ("list.jsonl", "[" * 100_000 + "]" * 100_000 + "\n", "list.jsonl:1"),  # nesting too deep for the parser
        ("list.jsonl", '{"path": "a.png", "label": [1, 2]}\n', "list.jsonl:1"),  # a label that is no label
        ("list.jsonl", '{"path": 5, "label": 1}\n', "list.jsonl:1"),
        ("list.csv", "\xff\xfe".encode("latin-1").decode("latin-1") + "a.png,1\n", "cannot read the list"),
        (
            "list.jsonl",
            '{"path": "a.png", "label": 1}\n{"path": "b.png" "label": 2}\n',
            "list.jsonl:2: not valid JSON",
        ),  # a lost comma
        # not data at all: one image, a checkpoint (they read as "cannot read the list (utf-8 ...)" and "a zip archive: unzip it")
        ("photo.jpg", "\xff\xd8\xff\xe0 JFIF", "one image, not data"),
        ("model.npz", "PK\x03\x04 zip of arrays", "a model checkpoint (.npz), not data"),
    ],
)
def test_image_lists_with_odd_labels_huge_fields_or_deep_nesting(tmp_path, capsys, name, text, words):
    (tmp_path / name).write_bytes(text.encode("latin-1") if "\xff" in text or "\x03" in text else text.encode())
    line = _one_line_exit_2(capsys, "train", "--data", tmp_path / name, "--out", tmp_path / "run", *TINY[:3])
    assert words in line and len(line) < 400
    assert not (tmp_path / "run").exists()


def test_eval_prints_its_scores_when_the_confusion_png_meets_a_full_disk(capsys, monkeypatch, finished_run):
    """A full disk at the confusion PNG, after every image was scored: no score was printed, only the error."""
    from vitkit import plots
    from vitkit.files import WriteError

    out = finished_run

    def full(fig, path):
        raise WriteError(path, "No space left on device")

    monkeypatch.setattr(plots, "_save", full)
    assert main(["eval", str(out), "--split", "val", "--json"]) == 2
    printed = capsys.readouterr()
    result = json.loads(printed.out.strip().splitlines()[-1])
    assert result["n"] > 0 and result["top1"] is not None and result["confusion_png"] is None
    assert "confusion matrix: not written" in printed.out
    assert (
        len(printed.err.strip().splitlines()) == 1
        and "the scores above are complete" in printed.err
        and "--confusion PATH" in printed.err
    )
