import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import vitkit
from vitkit.checkpoint import save_pretrained
from vitkit.errors import CheckpointError, ConfigError
from vitkit.inference.export import export, preprocessing, run_exported, verify


def _model():
    m = vitkit.create_model("vit_test", image_size=(16, 20)).eval()
    torch.nn.init.normal_(m.head.weight)
    return m


@pytest.fixture
def model():
    return _model()


@pytest.fixture(scope="module")
def onnx_export(tmp_path_factory):
    """One ONNX export, in a folder of its own, for the tests that only read it: (the model, the export's path)."""
    pytest.importorskip("onnxscript")
    pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    m = _model()
    return m, export(m, tmp_path_factory.mktemp("onnx") / "model.onnx", format="onnx")


@pytest.mark.numerics
@pytest.mark.parametrize("fmt", ["torchscript", "exported-program", "onnx", "openvino"])
def test_export_matches_pytorch_on_another_batch_size(model, tmp_path, fmt, request):
    if fmt in ("onnx", "openvino"):
        pytest.importorskip("onnxscript")
        pytest.importorskip("onnxruntime" if fmt == "onnx" else "openvino")
    if fmt == "onnx":  # the module's shared export, made alone in its folder
        model, path = request.getfixturevalue("onnx_export")
    else:
        path = export(model, tmp_path / ("model.xml" if fmt == "openvino" else f"model.{fmt}"), format=fmt)
    assert path.stat().st_size > 0
    # no scratch files left; ONNX is one file, OpenVINO's IR its graph (.xml) and weights (.bin); metadata sidecars
    assert {p.name for p in path.parent.iterdir()} <= {path.name, path.name + ".json", path.with_suffix(".bin").name}
    assert verify(model, path, fmt, batch_size=5) < 1e-4
    out = run_exported(path, fmt, torch.randn(1, 3, 16, 20))
    assert out.shape == (1, 10)
    # given where a checkpoint is asked for, an export is named for what it is (TorchScript's zip was taken for a
    # pickled state dict, "truncated or corrupt"; an IR's .bin for one holding Python objects)
    for exported in [path, *([path.with_suffix(".bin")] if fmt == "openvino" else [])]:
        with pytest.raises(
            CheckpointError, match=f"{exported.name}: .*a deployment file .* give the one it was exported from"
        ):
            vitkit.load_pretrained(exported)


def test_the_onnx_metadata_says_what_transparent_pixels_are_composited_on(vitkit_cmd, tmp_path):
    """The ONNX metadata said RGB and nothing of transparency: a deployment fed RGBA icons could not know that the model
    saw them on its background. It carries the model's background now (per channel in [0, 1], as mean and std)."""
    pytest.importorskip("onnxscript")
    onnx = pytest.importorskip("onnx")
    model = vitkit.create_model("vit_test", num_classes=3, background=(0.2, 0.4, 0.6)).eval()
    torch.nn.init.normal_(model.head.weight)
    save_pretrained(model, tmp_path / "ckpt")
    done = vitkit_cmd("export", tmp_path / "ckpt", "--out", tmp_path / "m.onnx")
    assert done.returncode == 0, done.stderr
    props = {p.key: json.loads(p.value) for p in onnx.load(str(tmp_path / "m.onnx")).metadata_props}
    assert props["background"] == pytest.approx([0.2, 0.4, 0.6]) and props["channels"] == "RGB"
    assert "composited on background" in props["transparency"]


def test_unknown_format(model, tmp_path):
    with pytest.raises(ConfigError, match="format"):
        export(model, tmp_path / "m", format="tflite")


def test_cli_export(run_cli, vitkit_cmd, model, tmp_path):
    save_pretrained(model, tmp_path / "ckpt")
    # in this process where only the output is checked; the real command where its stderr must hold no warning
    result = vitkit_cmd("export", tmp_path / "ckpt", "--format", "exported-program", "--out", tmp_path / "m.pt2")
    assert result.returncode == 0, result.stderr
    assert "max |export - pytorch|" in result.stdout and (tmp_path / "m.pt2").is_file()
    assert "m.pt2.json" in result.stdout and json.loads((tmp_path / "m.pt2.json").read_text())["input_size"] == [
        3,
        16,
        20,
    ]
    result = run_cli("export", tmp_path / "ckpt", "--format", "torchscript", "--out", tmp_path / "m.pt")
    assert result.returncode == 0 and "TracerWarning" not in result.stderr, (
        result.stderr
    )  # checked on another batch size instead
    if importlib.util.find_spec(
        "onnxscript"
    ):  # the ONNX path through torch.export: torch's notices stay out of the output
        result = run_cli("export", tmp_path / "ckpt", "--out", tmp_path / "m.onnx")
        assert result.returncode == 0 and "Warning" not in result.stderr, result.stderr


def test_an_export_never_replaces_its_checkpoint_nor_a_good_export_with_a_rejected_one(
    vitkit_cmd, model, tmp_path, monkeypatch
):
    """export --out of the checkpoint's own file replaced its weights with ONNX (exit 0); --format onnx --out x.pt2
    wrote ONNX under ExportedProgram's suffix; an export over --atol had already replaced the previous export."""
    save_pretrained(model, tmp_path / "ckpt")
    weights = tmp_path / "ckpt" / "model.safetensors"
    before = weights.read_bytes()
    for out in (weights, tmp_path / "x.safetensors"):
        done = vitkit_cmd("export", weights, "--out", out)
        assert (
            done.returncode == 2
            and "--out" in done.stderr
            and weights.read_bytes() == before
            and not (tmp_path / "x.safetensors").exists()
        )
    (tmp_path / "afile").write_text("")  # a folder --out cannot be made in: said before the export is built
    done = vitkit_cmd("export", weights, "--out", tmp_path / "afile" / "x.onnx")
    assert (
        done.returncode == 2
        and "cannot write the export there (" in done.stderr
        and "choose another --out" in done.stderr
    )
    done = vitkit_cmd("export", weights, "--format", "onnx", "--out", tmp_path / "x.pt2")
    assert (
        done.returncode == 2
        and "onnx exports are .onnx files; name it x.onnx" in done.stderr
        and not (tmp_path / "x.pt2").exists()
    )
    done = vitkit_cmd("export", tmp_path / "ckpt", "--out", tmp_path / "m.pt2")  # the suffix names the format
    assert done.returncode == 0 and "(exported-program, dynamic batch" in done.stdout, done.stderr
    good, files = (tmp_path / "m.pt2").read_bytes(), sorted(p.name for p in tmp_path.iterdir())
    import vitkit.cli.export  # noqa: F401

    monkeypatch.setattr("vitkit.inference.export.verify", lambda *args, **kwargs: 0.5)  # an export that fails its check
    done = vitkit_cmd("export", tmp_path / "ckpt", "--out", tmp_path / "m.pt2")
    assert done.returncode == 2 and "m.pt2: not written: the export differs from PyTorch by 5.00e-01" in done.stderr
    assert (
        "wrote" not in done.stdout
        and (tmp_path / "m.pt2").read_bytes() == good
        and sorted(p.name for p in tmp_path.iterdir()) == files
    )


@pytest.mark.openvino
def test_an_export_replaces_only_an_earlier_export_and_never_writes_into_a_checkpoint_directory(
    vitkit_cmd, model, tmp_path
):
    """export --out model.pt replaced a timm checkpoint (and its sidecar) with TorchScript, --out notes.onnx a text file,
    an OpenVINO IR's .bin the HF checkpoint's pytorch_model.bin beside it, and an export into RUN/final/ was deleted by
    the next `train --resume`; a FIFO as --out was replaced by a file."""
    import os

    from vitkit.checkpoint import save_checkpoint

    ckpt = save_pretrained(model, tmp_path / "ckpt")
    save_checkpoint(
        model,
        tmp_path / "model.pt",
        "timm",
        metadata={"class_names": [str(i) for i in range(model.config.num_classes)]},
    )
    (tmp_path / "notes.onnx").write_text("my notes")
    (tmp_path / "hf").mkdir()
    save_checkpoint(model, tmp_path / "hf", "hf")
    os.mkfifo(tmp_path / "pipe.onnx")
    before = {p: p.read_bytes() for p in (tmp_path / "model.pt", tmp_path / "model.pt.json", tmp_path / "notes.onnx")}
    for out, said in (
        (tmp_path / "model.pt", "model.pt is there and is not part of an export"),
        (tmp_path / "notes.onnx", "notes.onnx is there and is not part of an export"),
        (tmp_path / "hf" / "pytorch_model.xml", "is inside the hf checkpoint"),
        (ckpt / "model.onnx", "is inside the vitkit checkpoint"),
        (tmp_path / "pipe.onnx", "is a FIFO"),
    ):
        done = vitkit_cmd("export", ckpt, "--out", out)
        assert done.returncode == 2 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert {p: p.read_bytes() for p in before} == before and (tmp_path / "pipe.onnx").is_fifo()
    assert sorted(p.name for p in ckpt.iterdir()) == ["checksums.json", "config.json", "model.safetensors"]
    for _ in range(2):  # an earlier export is replaced
        assert vitkit_cmd("export", ckpt, "--out", tmp_path / "m.xml").returncode == 0


def test_a_checkpoint_is_never_written_over_a_device_fifo_or_symbolic_link(vitkit_cmd, model, tmp_path):
    """convert moved /dev/null aside (as root) and put a checkpoint directory in its place; over a FIFO it hung in
    rmtree, then left the FIFO replaced; over a symbolic link to a checkpoint it replaced the link."""
    import os

    ckpt = save_pretrained(model, tmp_path / "ckpt")
    os.mkfifo(tmp_path / "pipe")
    os.mkfifo(tmp_path / "pipe.npz")
    (tmp_path / "link").symlink_to(save_pretrained(model, tmp_path / "real"))
    for target, said in (("pipe", "is a FIFO"), ("pipe.npz", "is a FIFO"), ("link", "is a symbolic link")):
        done = vitkit_cmd("convert", ckpt, tmp_path / target)
        assert done.returncode == 2 and said in done.stderr and "nothing was changed" in done.stderr, done.stderr
    assert (tmp_path / "pipe").is_fifo() and (tmp_path / "pipe.npz").is_fifo() and (tmp_path / "link").is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "link", "pipe", "pipe.npz", "real"]
    if os.geteuid() == 0:  # a character device, as /dev/null is
        os.mknod(tmp_path / "null", 0o666 | __import__("stat").S_IFCHR, os.makedev(1, 3))
        done = vitkit_cmd("convert", ckpt, tmp_path / "null")
        assert done.returncode == 2 and "is a device" in done.stderr and (tmp_path / "null").is_char_device()


@pytest.mark.parametrize("fmt", ["torchscript", "exported-program"])
def test_an_export_that_meets_a_full_disk_is_one_error_and_leaves_nothing(model, tmp_path, fmt):
    """torch's C++ file writer aborted the process on a full disk (exit 134, a native backtrace, a .tmp file left)."""
    import resource

    save_pretrained(model, tmp_path / "ckpt")
    out = tmp_path / "out" / ("m.pt" if fmt == "torchscript" else "m.pt2")
    out.parent.mkdir()

    def small_files():  # every write past 20 kB fails with EFBIG, as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    done = subprocess.run(
        [sys.executable, "-m", "vitkit", "export", str(tmp_path / "ckpt"), "--format", fmt, "--out", str(out)],
        capture_output=True,
        text=True,
        preexec_fn=small_files,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and f"{out}: cannot be written (" in done.stderr
    assert "the export as it was is intact" in done.stderr and list(out.parent.iterdir()) == []


def test_a_model_whose_head_never_trained_is_not_exported(vitkit_cmd, model, tmp_path):
    """A masked-patch checkpoint exported with exit 0: a file whose outputs are the same for every image (its zero head),
    with class names in its metadata; eval and predict refuse it."""
    save_pretrained(
        model,
        tmp_path / "ckpt",
        extra={"objective": "masked_patch", "class_names": [str(i) for i in range(model.config.num_classes)]},
    )
    done = vitkit_cmd("export", tmp_path / "ckpt", "--format", "exported-program", "--out", tmp_path / "m.pt2")
    assert (
        done.returncode == 2
        and "classification head never trained" in done.stderr
        and not (tmp_path / "m.pt2").exists()
    )


def test_export_to_a_folder_is_refused_first_and_a_backbone_exports_its_features(vitkit_cmd, model, tmp_path):
    """--out DIR failed after the whole export with ".DIR.x1y2z3/DIR -> DIR: Is a directory"; a model without a head
    was exported with its features named "logits"."""
    save_pretrained(model, tmp_path / "ckpt")
    (tmp_path / "folder").mkdir()
    done = vitkit_cmd("export", tmp_path / "ckpt", "--format", "exported-program", "--out", tmp_path / "folder")
    assert done.returncode == 2 and "is a folder; name the file to write in it, e.g." in done.stderr
    assert list((tmp_path / "folder").iterdir()) == [] and not list(tmp_path.glob(".folder*"))
    if importlib.util.find_spec("onnxscript") and importlib.util.find_spec("onnxruntime"):
        import onnx

        save_pretrained(vitkit.create_model("vit_test", num_classes=0), tmp_path / "backbone")
        done = vitkit_cmd("export", tmp_path / "backbone", "--out", tmp_path / "b.onnx")
        assert done.returncode == 0 and "no classification head" in done.stdout, done.stderr
        assert [o.name for o in onnx.load(str(tmp_path / "b.onnx")).graph.output] == ["features"]


def test_an_openvino_export_says_what_openvino_runs_it_at_by_default(vitkit_cmd, model, tmp_path):
    """The check runs the IR with an f32 hint; a plain compile_model on a CPU with bf16 runs it in bf16, 1e-3 away."""
    pytest.importorskip("onnxscript")
    pytest.importorskip("openvino")
    from vitkit.inference.export import openvino_default

    save_pretrained(model, tmp_path / "ckpt")
    done = vitkit_cmd("export", tmp_path / "ckpt", "--format", "openvino", "--out", tmp_path / "m.xml")
    assert done.returncode == 0, done.stderr
    default = openvino_default(model, tmp_path / "m.xml")
    if default is None:  # a CPU without bf16: f32 is OpenVINO's default
        assert "note: OpenVINO runs" not in done.stdout
    else:
        assert (
            f"note: OpenVINO runs this IR in {default[0]} on this CPU unless compiled with INFERENCE_PRECISION_HINT=f32"
            in done.stdout
        )
        assert default[1] > 0


def test_onnx_export_is_one_file_with_class_names_and_preprocessing(model, tmp_path):
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    names = [f"class {i}" for i in range(10)]
    path = export(
        model, tmp_path / "m.onnx", format="onnx", metadata={"class_names": names, "preprocess": {"crop_pct": 0.875}}
    )
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]  # no unmentioned m.onnx.data
    props = {p.key: json.loads(p.value) for p in onnx.load(str(path)).metadata_props}
    assert props["class_names"] == names and props["crop_pct"] == 0.875 and props["input_size"] == [3, 16, 20]
    assert props["mean"] == [0.5, 0.5, 0.5] and props["problem_type"] == "single_label_classification"
    multi = preprocessing(model, {"problem_type": "multi_label_classification"})  # a sigmoid per class
    assert multi["problem_type"] == "multi_label_classification"


@pytest.mark.numerics
@pytest.mark.openvino
def test_runtimes_run_the_onnx_export_alike(onnx_export):
    from vitkit.inference.export import runtime_session

    model, path = onnx_export
    x = torch.randn(4, 3, 16, 20)
    expected = model(x).detach()
    for runtime in ("onnxruntime", "openvino"):
        pytest.importorskip(runtime)
        got = runtime_session(runtime, path, threads=1)(x)
        assert (got - expected).abs().max() < 1e-4, runtime
    with pytest.raises(ConfigError, match="in fp32 or int8"):
        runtime_session("onnxruntime", path, precision="bf16")


def _export_cut_before_the_graph(path, fmt, monkeypatch):
    """Export another model over `path`, failing as a full disk would at the rename that puts the graph in place;
    returns that other model."""
    from vitkit.inference import export as export_module

    other = vitkit.create_model("vit_test", image_size=(16, 20)).eval()
    torch.nn.init.normal_(other.head.weight)
    real_replace = os.replace

    def die_before_the_graph(src, dst):
        if str(dst) == str(path):
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(export_module.os, "replace", die_before_the_graph)
    with pytest.raises(OSError):
        export(other, path, format=fmt)
    monkeypatch.setattr(export_module.os, "replace", real_replace)
    return other


def test_an_onnx_export_with_external_weights_is_replaced_whole(model, tmp_path, monkeypatch):
    """Over protobuf's 2 GB the weights go beside the graph; replacing such an export must never pair the old graph
    with the new weights (or the reverse), even when the process dies between the renames."""
    pytest.importorskip("onnxscript")
    pytest.importorskip("onnxruntime")
    from vitkit.inference import export as export_module

    monkeypatch.setattr(export_module, "ONNX_SINGLE_FILE_LIMIT", 0)  # every model counts as large
    x = torch.randn(2, 3, 16, 20)
    path = export(model, tmp_path / "m.onnx", format="onnx")
    old_weights = export_module.companions(path)
    assert len(old_weights) == 1 and old_weights[0].name.endswith(".data")
    old_out = run_exported(path, "onnx", x)

    other = _export_cut_before_the_graph(path, "onnx", monkeypatch)
    torch.testing.assert_close(run_exported(path, "onnx", x), old_out)  # the old export, whole

    export(other, path, format="onnx")
    with torch.no_grad():
        torch.testing.assert_close(run_exported(path, "onnx", x), other(x), atol=1e-4, rtol=1e-4)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert (
        left == sorted(["m.onnx", *(p.name for p in export_module.companions(path))]) and len(left) == 2
    )  # leftovers removed


def test_an_openvino_ir_cut_between_its_two_files_is_refused_in_one_line(model, tmp_path, monkeypatch):
    """PATH.xml always reads PATH.bin, so a kill between the two renames leaves a new .bin beside the old .xml
    and sidecar (old class names): vitkit's runtime refuses that pair instead of running it."""
    pytest.importorskip("onnxscript")
    pytest.importorskip("openvino")
    from vitkit.inference.export import runtime_session

    path = export(model, tmp_path / "m.xml", format="openvino")
    x = torch.randn(2, 3, 16, 20)
    old_out = runtime_session("openvino", path)(x)
    other = _export_cut_before_the_graph(path, "openvino", monkeypatch)
    with pytest.raises(ConfigError, match="export it again"):
        runtime_session("openvino", path)
    export(other, path, format="openvino")
    with torch.no_grad():
        torch.testing.assert_close(runtime_session("openvino", path)(x), other(x), atol=1e-4, rtol=1e-4)
    assert not torch.allclose(old_out, other(x).detach(), atol=1e-3)


# -- int8 exports (NNCF) ----------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["onnx", "openvino"])
def test_an_int8_export_is_quantized_by_nncf_and_stays_close_to_pytorch(model, tmp_path, fmt):
    pytest.importorskip("nncf")
    pytest.importorskip("onnxscript")
    pytest.importorskip("onnxruntime" if fmt == "onnx" else "openvino")
    from vitkit.checkpoint.io import read_sidecar
    from vitkit.inference.export import runtime_session

    calibration = [torch.randn(6, 3, 16, 20), torch.randn(4, 3, 16, 20)]
    path = export(model, tmp_path / ("m.xml" if fmt == "openvino" else "m.onnx"), format=fmt, calibration=calibration)
    if fmt == "onnx":
        onnx = pytest.importorskip("onnx")
        proto = onnx.load(str(path))
        ops = {node.op_type for node in proto.graph.node}
        info = {p.key: json.loads(p.value) for p in proto.metadata_props}
        assert "QuantizeLinear" in ops and "DequantizeLinear" in ops
    else:
        assert "FakeQuantize" in path.read_text()
        info = read_sidecar(path)
    assert info["precision"] == "int8 (NNCF post-training quantization, transformer preset, 10 calibration images)"
    assert info["input_size"] == [3, 16, 20]
    x = torch.randn(32, 3, 16, 20)
    with torch.no_grad():
        ref = model(x)
    out = runtime_session("onnxruntime" if fmt == "onnx" else "openvino", path, precision="int8")(x)
    assert out.shape == ref.shape and not torch.equal(out, ref)  # quantized: close, not equal
    # random weights and noise images: int8 moves the logits a little (~20% in norm), never scrambles them
    assert torch.nn.functional.cosine_similarity(out.flatten(), ref.flatten(), dim=0) > 0.9


def test_an_int8_export_of_a_format_nncf_cannot_quantize_is_refused(model, tmp_path):
    with pytest.raises(ConfigError, match="int8 exports are ONNX or OpenVINO IR"):
        export(model, tmp_path / "m.pt", format="torchscript", calibration=[torch.randn(2, 3, 16, 20)])


def _class_folders(root, n=6):
    from PIL import Image

    for split in ("train", "val"):
        for k, name in enumerate(("dark", "light")):
            (root / split / name).mkdir(parents=True)
            for i in range(n):
                Image.new("RGB", (16, 16), (200 * k + 5 * i, 30, 30)).save(root / split / name / f"{i}.png")


def test_cli_int8_export_is_calibrated_on_training_images_and_checked_on_held_out_ones(
    vitkit_cmd, tmp_path, monkeypatch, capsys
):
    pytest.importorskip("nncf")
    pytest.importorskip("onnxruntime")
    m = vitkit.create_model("vit_test", num_classes=2).eval()
    torch.nn.init.normal_(m.head.weight)
    save_pretrained(m, tmp_path / "ckpt", extra={"class_names": ["dark", "light"]})
    _class_folders(tmp_path / "data")
    base = (
        "export",
        tmp_path / "ckpt",
        "--format",
        "onnx",
        "--precision",
        "int8",
        "--data",
        tmp_path / "data",
        "--calibration",
        8,
    )
    result = vitkit_cmd(
        *base, "--min-agreement", 0
    )  # without --out: beside the checkpoint, never over its fp32 export's name
    assert result.returncode == 0, result.stderr
    assert (
        "onnx int8 by NNCF, transformer preset, 8 calibration images of" in result.stdout
        and "on 12 val images of" in result.stdout
    )
    assert (tmp_path / "ckpt.int8.onnx").is_file() and not (tmp_path / "ckpt.onnx").exists()
    (tmp_path / "ckpt.int8.onnx").rename(tmp_path / "m.onnx")
    good, files = (tmp_path / "m.onnx").read_bytes(), sorted(p.name for p in tmp_path.iterdir())
    impossible = vitkit_cmd(*base, "--out", tmp_path / "m.onnx", "--min-agreement", 1.01)  # refused before any work
    assert impossible.returncode == 2 and "--min-agreement: expected a fraction from 0 to 1" in impossible.stderr
    from vitkit.cli import main
    from vitkit.inference import export as exporting

    real = exporting.runtime_session  # a runtime whose every answer is another class: no preset can pass
    monkeypatch.setattr(exporting, "runtime_session", lambda *a, **k: lambda x, run=real(*a, **k): -run(x))
    capsys.readouterr()
    assert main([str(v) for v in (*base, "--out", tmp_path / "m.onnx", "--min-agreement", 0.5)]) == 2
    refused = capsys.readouterr()
    assert len(refused.err.strip().splitlines()) == 1 and "under --min-agreement" in refused.err
    assert "transformer preset" in refused.err and "default preset" in refused.err  # both NNCF flows were tried
    # a rejected export is not written: the good file at --out stays, nothing is left beside it, no "wrote" line
    assert (tmp_path / "m.onnx").read_bytes() == good and "wrote" not in refused.out and "not written" in refused.err
    assert sorted(p.name for p in tmp_path.iterdir()) == files
    wrong = vitkit_cmd(
        "export", tmp_path / "ckpt", "--format", "torchscript", "--precision", "int8", "--data", tmp_path / "data"
    )
    assert wrong.returncode == 2 and "--precision int8: exports ONNX or OpenVINO IR" in wrong.stderr


def test_a_file_of_no_checkpoint_format_names_the_commands_that_take_a_format(vitkit_cmd, tmp_path):
    """export of a PNG said "pass format= (--from)", an option export does not have."""
    from PIL import Image

    Image.new("RGB", (8, 8)).save(tmp_path / "cat.png")
    done = vitkit_cmd("export", tmp_path / "cat.png", "--out", tmp_path / "z.onnx")
    assert done.returncode == 2 and "unknown checkpoint format" in done.stderr
    assert (
        "(vitkit convert or info --from FORMAT; format= in Python)" in done.stderr
        and not (tmp_path / "z.onnx").exists()
    )


def test_a_dynamic_size_model_exports_to_onnx_with_dynamic_height_and_width(tmp_path):
    """A conv-stem hybrid (its BatchNorm in eval mode): 4x4-pixel tokens as vit_test's, from a 2x2 patch of the stem's
    stride-2 map."""
    pytest.importorskip("onnxscript")
    pytest.importorskip("onnxruntime")
    import onnx

    model = vitkit.create_model(
        "vit_test", image_size=(16, 20), dynamic_img_size=True, backbone={"convs": [8]}, patch_size=2
    )
    model(torch.randn(4, 3, 16, 20))  # training mode: BatchNorm's running statistics move off their start
    model.eval()
    torch.nn.init.normal_(model.head.weight)
    path = export(model, tmp_path / "model.onnx", format="onnx")
    assert verify(model, path, "onnx") < 1e-4  # checks a second image size as well
    for size in [(16, 20), (8, 32)]:  # the traced size and another grid (2 x 8 patches instead of 4 x 5)
        x = torch.randn(2, 3, *size)
        with torch.no_grad():
            torch.testing.assert_close(run_exported(path, "onnx", x), model(x), rtol=1e-4, atol=1e-5)
    meta = {p.key: json.loads(p.value) for p in onnx.load(str(path)).metadata_props}
    assert meta["dynamic_size"] is True and meta["input_size"] == [3, 16, 20]


def test_export_preprocess_takes_decoded_images_of_any_size_and_gives_predict_s_probabilities(
    vitkit_cmd, tmp_path, capsys
):
    """An ONNX export took normalised float NCHW at the model's size: a deployment wrote the resize, crop and
    normalisation by hand. With --preprocess it takes uint8 NHWC images as decoded (RGB, or RGBA composited on the
    model's background) of any size; on real PNGs of odd sizes, onnxruntime's probabilities are `vitkit predict`'s
    within 1e-2 (PIL rounds its resize in fixed point, the graph in float)."""
    pytest.importorskip("onnxscript")
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from PIL import Image

    from vitkit.inference.onnx_preprocess import check_images

    model = vitkit.create_model("vit_test", num_classes=3, image_size=(16, 20), background=(0.2, 0.4, 0.6)).eval()
    torch.nn.init.normal_(model.head.weight, std=0.3)
    names, preprocess = ["ant", "bee", "cat"], {"crop_pct": 0.875, "interpolation": "bicubic"}
    save_pretrained(model, tmp_path / "ckpt", extra={"class_names": names, "preprocess": preprocess})
    done = vitkit_cmd("export", tmp_path / "ckpt", "--preprocess", "--out", tmp_path / "m.onnx")
    assert done.returncode == 0, done.stderr
    assert "uint8 NHWC images of any size in" in done.stdout and "vitkit predict| in probabilities" in done.stdout
    files = []
    for i, pixels in enumerate([*check_images(3, seed=1), np.full((31, 8, 3), 200, np.uint8)]):
        files.append(tmp_path / f"image_{i}_{pixels.shape[0]}x{pixels.shape[1]}.png")
        Image.fromarray(pixels).save(files[-1])  # the third one RGBA
    done = vitkit_cmd("predict", tmp_path / "ckpt", *files, "--json", "--top", "3")
    assert done.returncode == 0, done.stderr
    predicted = [{row["label"]: row["prob"] for row in json.loads(line)["top"]} for line in done.stdout.splitlines()]
    session = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    assert [(i.name, i.type) for i in session.get_inputs()] == [("images", "tensor(uint8)")]
    for file, expected in zip(files, predicted):
        pixels = np.asarray(Image.open(file))  # (H, W, 3 or 4) uint8, as decoded
        logits = session.run(None, {"images": pixels[None]})[0][0]
        probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
        assert np.abs(probs - [expected[n] for n in names]).max() <= 1e-2, file.name
    props = {p.key: json.loads(p.value) for p in onnx.load(str(tmp_path / "m.onnx")).metadata_props}
    assert props["input"].startswith("uint8 NHWC") and "centre crop" in props["preprocess_in_graph"]
    # the docs' onnxruntime example, as written, on the RGBA image: predict's top two
    docs = (Path(__file__).resolve().parents[2] / "docs" / "performance.md").read_text()
    example = docs.split("## Images in: `--preprocess`", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    example = example.replace('"clothes.onnx"', repr(str(tmp_path / "m.onnx"))).replace(
        '"shirt.png"', repr(str(files[2]))
    )
    exec(compile(example, "docs/performance.md", "exec"), {})
    top = sorted(predicted[2].items(), key=lambda item: -item[1])[:2]
    printed = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert [name for _, name in printed] == [name for name, _ in top]
    assert [float(p.rstrip("%")) / 100 for p, _ in printed] == pytest.approx([p for _, p in top], abs=1e-2)
    done = vitkit_cmd("export", tmp_path / "ckpt", "--preprocess", "--out", tmp_path / "m.pt2")
    assert done.returncode == 2 and "--preprocess: an fp32 ONNX graph takes it" in done.stderr


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
@pytest.mark.parametrize("mode", ["center", "squash"])
@pytest.mark.parametrize("channels", [3, 1])
def test_the_preprocessing_graph_gives_the_pixels_vitkit_reads(interpolation, mode, channels):
    """The graph's pixels against vitkit's reader (PIL) on images of odd sizes, larger and smaller than the input,
    with and without alpha: the same geometry, a few levels apart at most (PIL's fixed-point passes, in an order of
    its choosing for some sizes), a third of a level on average."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper
    from PIL import Image

    from vitkit.data.images import Crop, image_pixels
    from vitkit.inference import onnx_preprocess

    config = vitkit.create_model(
        "vit_test",
        image_size=(16, 20),
        in_chans=channels,
        background=(0.2, 0.4, 0.6)[:channels],
        mean=(0.0,) * channels,
        std=(1 / 255,) * channels,
    ).config  # fmt: skip  (normalised to 0-255 levels)
    crop = Crop(0.875, mode, interpolation)
    graph = helper.make_graph(
        onnx_preprocess._nodes(config, crop),
        "preprocess",
        [helper.make_tensor_value_info("images", TensorProto.UINT8, ["b", "h", "w", "c"])],
        [helper.make_tensor_value_info(onnx_preprocess._PIXELS, TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for pixels in onnx_preprocess.check_images(channels, seed=2):
        image = Image.fromarray(pixels[..., 0] if pixels.shape[-1] == 1 else pixels)
        expected = image_pixels(image, channels, config.image_size, crop, background=config.background)
        got = session.run(None, {"images": pixels[None]})[0][0]
        assert got.shape == expected.shape
        off = np.abs(got - expected)
        assert off.max() <= 4 + 1e-3 and off.mean() <= 0.35, (pixels.shape, off.max(), off.mean())
