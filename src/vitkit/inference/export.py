"""Export a model for deployment: ONNX, OpenVINO IR, TorchScript or torch.export's ExportedProgram, batch dimension dynamic.

A ViT with `dynamic_img_size` exports with dynamic height and width too (ONNX, OpenVINO, ExportedProgram), each a
multiple of the patch size, where its position embedding is resampled by ops the graph can hold (`DYNAMIC_SIZE`).
Every export is checked against the PyTorch model on a batch size other than the one it was traced with (and, with a
dynamic size, on an image size other than the one it was traced at).
The deployment runtimes (ONNX Runtime, OpenVINO) run vitkit's own ONNX export: `runtime_session`.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import errno
import io
import json
import logging
import os
import re
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch

from vitkit.checkpoint.io import read_sidecar, sidecar_path
from vitkit.errors import ConfigError, VitkitError, first_line
from vitkit.files import WriteError, atomic_path, scratch_folder, sha256, write_json
from vitkit.inference.precision import quiet_torch_internals
from vitkit.kernels import swap
from vitkit.models import VisionTransformer

FORMATS = {"onnx": ".onnx", "openvino": ".xml", "torchscript": ".pt", "exported-program": ".pt2"}
RUNTIMES = {"onnxruntime": "onnx", "openvino": "openvino"}  # runtime -> the extra that installs it


def _example(model: VisionTransformer, batch_size: int, size: tuple[int, int] | None = None) -> torch.Tensor:
    c = model.config
    return torch.randn(batch_size, c.in_chans, *(size or c.image_size))


DYNAMIC_SIZE = ("learned", "learned_2d", "sincos2d", "relative", "none")  # position embeddings a graph resamples
MAX_GRID = 256  # patches along a side of an exported dynamic-size graph's input


def dynamic_size(model: torch.nn.Module) -> bool:
    """Whether `model`'s export takes any height and width (multiples of the patch size), not only its image size."""
    c = model.config
    return isinstance(model, VisionTransformer) and c.dynamic_img_size and c.pos_embed in DYNAMIC_SIZE


def input_dims(model: torch.nn.Module) -> dict:
    """torch.export's dynamic_shapes of the input: the batch, and height and width as patch multiples where
    `dynamic_size`."""
    dims = {0: torch.export.Dim("batch", min=1, max=4096)}
    if dynamic_size(model):
        (ph, pw), (gh, gw) = model.config.total_patch_size, model.config.grid_size
        dims[2] = ph * torch.export.Dim("grid_h", min=1, max=max(MAX_GRID, gh))
        dims[3] = pw * torch.export.Dim("grid_w", min=1, max=max(MAX_GRID, gw))
    return {"x": dims}


def other_size(model: torch.nn.Module) -> tuple[int, int] | None:
    """An image size other than the model's, to check a dynamic-size export at (one patch shorter, one wider)."""
    if not dynamic_size(model):
        return None
    (ph, pw), (gh, gw) = model.config.total_patch_size, model.config.grid_size
    return (max(gh - 1, 1) * ph if gh > 1 else 2 * ph, (gw + 1) * pw)


def preprocessing(model: VisionTransformer, metadata: dict | None = None) -> dict:
    """What a deployed model needs besides its graph: class names and how to prepare an image for it."""
    c, metadata = model.config, metadata or {}
    return {
        "class_names": metadata.get("class_names") or [str(i) for i in range(c.num_classes)],
        "input_size": [c.in_chans, *c.image_size],
        "mean": list(c.mean),
        "std": list(c.std),
        "rescale": 1 / 255,
        "resize": "keeping the aspect ratio, to cover input_size / crop_pct (bilinear; for a square input: the shorter side to size / crop_pct), then a centre crop of input_size",
        "crop_pct": metadata.get("preprocess", {}).get("crop_pct", 1.0),
        "channels": "grayscale (ITU-R 601 luma)" if c.in_chans == 1 else "RGB",
        # per channel in [0, 1], as mean and std: transparent pixels (RGBA, LA, palette) are composited on it first
        "background": list(c.background),
        "transparency": "composited on background (alpha over it) before the resize, as vitkit decodes images",
        "dynamic_size": dynamic_size(model),  # any height and width, multiples of the patch size
        # the outputs: a softmax over classes, or for multi_label_classification a sigmoid per class
        "problem_type": metadata.get("problem_type", "single_label_classification"),
    }


def refuse_folder(path: Path, format: str) -> None:
    """An export is a file (with companions beside it): a folder given as its path is one error, before any work."""
    if path.is_dir():
        raise ConfigError(
            f"--out {path}: is a folder; name the file to write in it, e.g. {path / ('model' + FORMATS[format])}"
        )


def refuse_replacing(out: Path, format: str) -> None:
    """An export replaces only an earlier export: `out`, its sidecar or (OpenVINO) its weights file holding anything
    else (a checkpoint's weights, its sidecar, a user's file) is one error before any work, and so is `out` inside a
    checkpoint directory, which its writers replace as a whole (`train --resume` replaced final/ with an export in it)."""
    from vitkit.checkpoint import detect_format, export_kind
    from vitkit.files import read_json

    out = Path(out)
    if out.parent.is_dir():
        try:
            kind = detect_format(out.parent)
        except (VitkitError, OSError):  # not a checkpoint directory (or a half-made one)
            kind = None
        if kind is not None:
            raise ConfigError(
                f"--out {out}: is inside the {kind} checkpoint {out.parent}, whose directory is replaced as a whole "
                "when it is written again (a resumed run's final/, a convert); write the export beside it"
            )
    side, weights = sidecar_path(out), out.with_suffix(".bin")

    def head(path: Path, size: int) -> bytes:  # the first bytes of a file (an export may be gigabytes)
        with open(path, "rb") as f:
            return f.read(size)

    def an_export(path: Path) -> bool:  # a part of an earlier export, which may be replaced
        if not path.is_file():
            return False
        if path == side:
            try:
                record = read_json(side)
            except (VitkitError, OSError):
                return False
            return isinstance(record, dict) and {"input_size", "resize", "class_names"} <= record.keys()
        if format == "openvino":  # an IR's .xml names its .bin
            return out.is_file() and b"<net" in head(out, 4096)
        if format == "onnx":  # a protobuf ModelProto: ir_version, field 1, first
            return head(path, 1) == b"\x08"
        return export_kind(path) is not None

    targets = [out, side, *([weights] if format == "openvino" else [])]
    foreign = [t for t in targets if os.path.lexists(t) and not an_export(t)]
    if foreign:
        raise ConfigError(
            f"--out {out}: {foreign[0].name} is there and is not part of an export (a checkpoint's weights or "
            "sidecar, or another file), and the export would replace it; write the export to another name "
            "(nothing was changed)"
        )


def format_of(path: Path, format: str | None) -> str:
    """The export format `path` names by its suffix (FORMATS), which `format`, where given, must be: an ONNX graph
    written as x.pt2 (or a model's weights file replaced by an export) is refused before any work."""
    named = next((f for f, suffix in FORMATS.items() if path.suffix.lower() == suffix), None)
    if format is None and named is None:
        raise ConfigError(
            f"--out {path}: name the file by its format ({', '.join(f'{s} {f}' for f, s in FORMATS.items())}), or give --format"
        )
    if format is not None and named != format:
        raise ConfigError(
            f"--out {path}: {format} exports are {FORMATS[format]} files; name it {path.stem}{FORMATS[format]}"
        )
    return named


@contextlib.contextmanager
def staged(out: Path) -> Iterator[Path]:
    """A path to build an export at, in a scratch folder beside `out`; when the block ends without an error, its files
    are moved into place (companions first, `out` last). An error or a rejected check leaves what `out` held as it
    was, and a write that fails (a full disk) is one WriteError naming `out`."""
    kept = "the export as it was is intact"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with scratch_folder(out) as scratch:
            path = scratch / out.name
            yield path
            moved = sorted(scratch.iterdir(), key=lambda p: p == path)
            for made in moved:
                os.replace(made, out.parent / made.name)
    except WriteError as err:
        raise WriteError(out, err.reason, then="export again", kept=kept) from None
    except OSError as err:
        reason = err.strerror or first_line(err) or type(err).__name__
        if err.errno is not None and err.errno not in (
            errno.ENOSPC,
            errno.EDQUOT,
            errno.EFBIG,
        ):  # not space: a folder that cannot hold it
            raise ConfigError(f"{out}: cannot be written ({reason}); {kept}; choose another --out") from None
        raise WriteError(out, reason, then="export again", kept=kept) from None
    for stale in _external_weights(out):  # an earlier, larger export's weights that the new graph does not name
        if stale.name not in {m.name for m in moved}:
            stale.unlink(missing_ok=True)


def output_name(model: torch.nn.Module) -> str:
    """What the exported graph's output is: "logits", or "features" for a model without a classification head."""
    return "features" if model.config.num_classes == 0 else "logits"


def export(
    model: VisionTransformer,
    path: str | os.PathLike,
    *,
    format: str,
    metadata: dict | None = None,
    calibration: list[torch.Tensor] | None = None,
    preset: str = "transformer",
    preprocess=None,
) -> Path:
    """Write `model` (eval mode, CPU) to `path` in `format`, with a dynamic batch dimension (and height and width
    where `dynamic_size`).

    Class names and preprocessing go into the file where the format has a place (ONNX metadata_props),
    else into PATH.json beside it. With `calibration` (normalised image batches) an ONNX or OpenVINO export is
    quantized to int8 by NNCF (`quantize_int8`, with its `preset`), its activation ranges measured on those images.
    With `preprocess` (the checkpoint's `data.images.Crop`) an fp32 ONNX graph takes uint8 NHWC images and resizes,
    crops and normalises them itself (`onnx_preprocess`)."""
    _refuse_combination(format, calibration is not None, preprocess is not None)
    model = copy.deepcopy(model).eval().cpu()
    # the model's own modules, no speed path swapped in: torch's own ops, what every runtime knows
    swap.unswap(model)
    path = Path(path)
    refuse_folder(path, format)
    x = _example(model, 2)
    batch = input_dims(model)
    info = preprocessing(model, metadata)
    info["dynamic_size"] = info["dynamic_size"] and format != "torchscript"  # a trace keeps the size it ran at
    int8 = None if calibration is None else (calibration, preset)  # what quantize_int8 takes
    n = 0 if calibration is None else sum(len(b) for b in calibration)
    info["precision"] = (
        "fp32" if int8 is None else f"int8 (NNCF post-training quantization, {preset} preset, {n} calibration images)"
    )
    if format == "onnx":
        if preprocess is not None:
            from vitkit.inference.onnx_preprocess import describe

            info.update(describe(model.config, preprocess))
        _export_onnx(model, x, path, batch, info, int8, preprocess)
        return path
    if format == "openvino":
        _export_openvino(model, x, path, batch, info, int8)
        return path
    buffer = io.BytesIO()  # torch's C++ file writer aborts the process on a full disk: the file is written from Python
    with torch.no_grad():
        if format == "torchscript":
            # shape checks read as Python values: the trace is checked on another batch size after
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", torch.jit.TracerWarning)
                torch.jit.save(torch.jit.trace(model, x), buffer)
        else:
            program = torch.export.export(model, (x,), dynamic_shapes=batch)
            torch.export.save(_without_stack_traces(program), buffer)
    with atomic_path(path) as tmp:
        tmp.write_bytes(buffer.getbuffer())
    write_json(sidecar_path(path), info)
    return path


def _refuse_combination(format: str, int8: bool, preprocess: bool) -> None:
    """An unknown format, int8 outside ONNX and OpenVINO, preprocessing outside fp32 ONNX: one error each."""
    if format not in FORMATS:
        raise ConfigError(f"format: expected one of {', '.join(FORMATS)}, got {format!r}")
    if preprocess and (format != "onnx" or int8):
        raise ConfigError(f"--preprocess: an fp32 ONNX graph takes it, not {'int8' if format == 'onnx' else format}")
    if int8 and format not in ("onnx", "openvino"):
        raise ConfigError(
            f"format {format}: int8 exports are ONNX or OpenVINO IR (quantized by NNCF); export {format} in fp32"
        )


def _without_stack_traces(program):
    """A torch.export program without the stack traces its nodes carry: they name this machine's files (the absolute
    paths of the Python install), which an export is not to publish."""
    for module in program.graph_module.modules():
        graph = getattr(module, "graph", None)
        for node in graph.nodes if graph is not None else ():
            node.meta.pop("stack_trace", None)
    return program


def _onnx_without_stack_traces(proto) -> None:
    """The ONNX graph without the stack trace torch's exporter puts on each node (see `_without_stack_traces`)."""
    graphs = [proto.graph]
    nodes = [n for f in proto.functions for n in f.node]
    while graphs:
        graph = graphs.pop()
        nodes += graph.node
        graphs += [g for n in graph.node for a in n.attribute for g in (*([a.g] if a.HasField("g") else []), *a.graphs)]
    for node in nodes:
        kept = [p for p in node.metadata_props if not p.key.endswith("stack_trace")]
        del node.metadata_props[:]
        node.metadata_props.extend(kept)


def companions(path: str | os.PathLike) -> list[Path]:
    """The files an export wrote beside `path`: ONNX's external weights (PATH.<id>.data), the metadata sidecar (PATH.json)."""
    return [*_external_weights(Path(path)), *[p for p in (sidecar_path(path),) if p.is_file()]]


def _external_weights(path: Path) -> list[Path]:
    """Files beside `path` named as an ONNX export's external weights: PATH.data (older exports) or PATH.<12 hex>.data."""
    pattern = re.compile(re.escape(path.name) + r"(\.[0-9a-f]{12})?\.data")
    return sorted(p for p in path.parent.iterdir() if pattern.fullmatch(p.name)) if path.parent.is_dir() else []


ONNX_SINGLE_FILE_LIMIT = 2**31 - 2**26  # protobuf's 2 GB limit, with room for the graph


def _export_onnx(
    model: VisionTransformer,
    x: torch.Tensor,
    path: Path,
    batch: dict,
    info: dict,
    int8: tuple[list[torch.Tensor], str] | None = None,
    preprocess=None,
) -> None:
    """One .onnx file holding graph, weights and metadata_props (class names, preprocessing); a model over
    protobuf's 2 GB keeps its weights in PATH.<id>.data beside it, a name no earlier export used.

    Built in a scratch folder, then moved into place: the new weights first (replacing nothing), then the graph
    that names them (one rename replaces the old export), then earlier exports' weights are removed. A kill or
    a full disk at any point leaves the old export or the new one whole; a leftover is removed by the next export."""
    try:
        import onnxscript  # noqa: F401  (the dynamo ONNX exporter needs it)
    except ImportError:
        raise ConfigError("format onnx: install the onnx extra (pip install 'vitkit[onnx]')") from None
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)  # it lists the torchvision ops it skips
    quiet_torch_internals()  # torch.export's notices about its own internals
    path.parent.mkdir(parents=True, exist_ok=True)
    import onnx

    with scratch_folder(path) as scratch, torch.no_grad():
        graph = scratch / path.name
        torch.onnx.export(
            model,
            (x,),
            str(graph),
            dynamo=True,
            dynamic_shapes=batch,
            input_names=["images"],
            output_names=[output_name(model)],
            verbose=False,
        )
        proto = onnx.load(str(graph))  # with the external weights, if the exporter wrote any
        for produced in list(scratch.iterdir()):
            produced.unlink()
        if int8 is not None:
            proto = quantize_int8(proto, *int8, input_name="images")
        if preprocess is not None:  # uint8 images in: the resize, crop and normalisation in the graph
            from vitkit.inference.onnx_preprocess import join

            proto = join(proto, model.config, preprocess)
            del proto.metadata_props[:]
        _onnx_without_stack_traces(proto)
        for key, value in info.items():
            proto.metadata_props.add(key=key, value=json.dumps(value))
        small = sum(p.numel() * p.element_size() for p in model.parameters()) < ONNX_SINGLE_FILE_LIMIT
        weights = f"{path.name}.{uuid.uuid4().hex[:12]}.data"
        onnx.save_model(proto, str(graph), save_as_external_data=not small, location=weights)
        for produced in sorted(scratch.iterdir(), key=lambda p: p.name == path.name):  # the graph last
            os.replace(produced, path.parent / produced.name)
    for stale in _external_weights(path):
        if small or stale.name != weights:
            stale.unlink(missing_ok=True)


def _export_openvino(
    model: VisionTransformer,
    x: torch.Tensor,
    path: Path,
    batch: dict,
    info: dict,
    int8: tuple[list[torch.Tensor], str] | None = None,
) -> None:
    """OpenVINO IR (path .xml + its .bin weights) converted from vitkit's ONNX export, weights kept in fp32 (or
    quantized to int8 by NNCF, given `int8`: (calibration batches, preset)); class names, preprocessing and the .bin's sha256 in PATH.json beside it.

    The format ties the two names together (PATH.xml reads PATH.bin), so no order of renames replaces an IR at
    once: a kill between them leaves a new .bin beside an old .xml and sidecar. The sidecar, written last,
    names the weights it belongs to, and vitkit's runtimes refuse a pair it does not describe."""
    if path.suffix != ".xml":
        raise ConfigError(
            f"{path}: an OpenVINO IR is an .xml file (its weights go beside it in a .bin); name it {path.stem}.xml"
        )
    ov = _import_runtime("openvino")
    path.parent.mkdir(parents=True, exist_ok=True)
    with scratch_folder(path) as scratch:
        onnx_path = scratch / "model.onnx"
        _export_onnx(model, x, onnx_path, batch, info)
        xml = scratch / path.name
        converted = ov.convert_model(str(onnx_path))
        if int8 is not None:
            converted = quantize_int8(converted, *int8)
        ov.save_model(converted, str(xml), compress_to_fp16=False)
        os.replace(xml.with_suffix(".bin"), path.with_suffix(".bin"))
        os.replace(xml, path)
    write_json(sidecar_path(path), {**info, "weights_sha256": sha256(path.with_suffix(".bin"))})


INT8_PRESETS = ("transformer", "default")


def quantize_int8(
    graph, calibration: list[torch.Tensor], preset: str = "transformer", *, input_name: str | None = None
):
    """An ONNX ModelProto or OpenVINO model quantized to int8 by NNCF's post-training flow, its activation ranges
    measured on the normalised image batches `calibration`, fed one image at a time. preset "transformer": NNCF's
    model type for transformers (SmoothQuant, int8 matmuls, sensitive ops left in float); "default": NNCF's plain
    flow. ONNX graphs take named inputs (`input_name`)."""
    if preset not in INT8_PRESETS:
        raise ConfigError(f"int8 preset: expected one of {', '.join(INT8_PRESETS)}, got {preset!r}")
    # NNCF's switch for its usage telemetry: vitkit sends nothing over the network
    os.environ.setdefault("NNCF_CI", "1")
    try:
        import nncf
    except ImportError:
        raise ConfigError(
            "int8 exports: NNCF is not installed; install the nncf extra (pip install 'vitkit[nncf]')"
        ) from None
    nncf.set_log_level(logging.ERROR)
    images = [image[None].numpy() for batch in calibration for image in batch]
    if not images:
        raise ConfigError("int8 export: no calibration images")
    items = [{input_name: image} for image in images] if input_name else images
    with _quiet_progress():
        kind = {"model_type": nncf.ModelType.TRANSFORMER} if preset == "transformer" else {}
        return nncf.quantize(graph, nncf.Dataset(items), subset_size=len(items), **kind)


@contextlib.contextmanager
def _quiet_progress():
    """NNCF draws progress bars; a command's output is its own."""
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        yield


def _check_ir_pair(path: Path) -> None:
    """An OpenVINO IR whose .bin is not the one its sidecar names is a half-replaced export: one clear error."""
    recorded = (read_sidecar(path) if sidecar_path(path).is_file() else {}).get("weights_sha256")
    if recorded is not None and sha256(path.with_suffix(".bin")) != recorded:
        raise ConfigError(
            f"{path}: its weights {path.with_suffix('.bin').name} are not the ones exported with it "
            "(an export was interrupted between its files); export it again"
        )


def _import_runtime(name: str):
    try:
        return __import__(name)
    except ImportError:
        extra = RUNTIMES[name]
        raise ConfigError(
            f"{name} is not installed; install the {extra} extra (pip install 'vitkit[{extra}]')"
        ) from None


def runtime_session(runtime: str, path: str | os.PathLike, *, precision: str = "fp32", threads: int | None = None):
    """A function running the ONNX or OpenVINO file `path` in `runtime` ("onnxruntime" or "openvino") on a batch.

    threads: the runtime's thread count (default: torch's); ONNX Runtime's pool is told not to spin while idle, so it
    does not slow whatever runs beside it (OpenVINO has no such switch; its workers sleep when idle). precision: fp32
    for both; OpenVINO also bf16 (its inference precision hint: bf16 matmuls where the CPU has them); int8 for a file
    quantized by `export(..., calibration=...)` (run as it is: int8 where the graph says, the runtime's default elsewhere).
    """
    threads = threads or torch.get_num_threads()
    if runtime == "onnxruntime":
        ort = _import_runtime("onnxruntime")
        if precision not in ("fp32", "int8"):
            raise ConfigError(
                f"onnxruntime {precision}: vitkit runs ONNX Runtime in fp32 or int8 (its CPU provider has no bf16 matmuls)"
            )
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        return lambda x: torch.from_numpy(session.run(None, {name: x.numpy()})[0])
    if runtime == "openvino":
        ov = _import_runtime("openvino")
        if precision not in ("fp32", "bf16", "int8"):
            raise ConfigError(f"openvino {precision}: vitkit runs OpenVINO in fp32, bf16 or int8")
        _check_ir_pair(Path(path))
        options = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"}
        if precision != "int8":
            options["INFERENCE_PRECISION_HINT"] = {"fp32": "f32", "bf16": "bf16"}[precision]
        compiled = ov.Core().compile_model(str(path), "CPU", options)
        request = compiled.create_infer_request()
        return lambda x: torch.from_numpy(request.infer([x.numpy()])[0].copy())
    raise ConfigError(f"unknown runtime {runtime!r}; choose from {', '.join(RUNTIMES)}")


def run_exported(path: str | os.PathLike, format: str, x: torch.Tensor) -> torch.Tensor:
    """Run an exported file on `x` with the runtime of its format (onnxruntime for ONNX, openvino for its IR)."""
    path = str(path)
    if format == "torchscript":
        return torch.jit.load(path)(x)
    if format == "exported-program":
        return torch.export.load(path).module()(x)
    return runtime_session("onnxruntime" if format == "onnx" else "openvino", path)(x)


def openvino_default(
    model: VisionTransformer, path: str | os.PathLike, *, batch_size: int = 3
) -> tuple[str, float] | None:
    """(the precision OpenVINO runs an IR at when compiled without a hint, its largest difference from PyTorch) where
    that is not f32 (bf16 on a CPU with AVX512_BF16 or AMX): what a user's plain compile_model gets. None where f32."""
    ov = _import_runtime("openvino")
    compiled = ov.Core().compile_model(str(path), "CPU")
    precision = str(compiled.get_property("INFERENCE_PRECISION_HINT"))
    if precision in ("f32", "<Type: 'float32'>"):
        return None
    x, expected = _reference(model, batch_size)
    got = torch.from_numpy(compiled([x.numpy()])[0].copy())
    return precision.replace("<Type: '", "").replace("'>", ""), (got - expected).abs().max().item()


def _reference(
    model: VisionTransformer, batch_size: int, size: tuple[int, int] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(a fresh example batch, the PyTorch model's output on it): what an export is checked against."""
    model = model.eval().cpu()
    x = _example(model, batch_size, size)
    with torch.no_grad():
        return x, model(x)


def verify(model: VisionTransformer, path: str | os.PathLike, format: str, *, batch_size: int = 3) -> float:
    """Largest absolute difference between the export and the PyTorch model on a fresh batch size (and, for a
    dynamic-size export other than TorchScript's trace, at another image size too)."""
    sizes = [None] + ([other_size(model)] if other_size(model) and format != "torchscript" else [])
    worst = 0.0
    for size in sizes:
        x, expected = _reference(model, batch_size, size)
        with torch.no_grad():
            got = run_exported(path, format, x)
        if got.shape != expected.shape:
            raise ConfigError(f"{path}: export gives shape {tuple(got.shape)}, PyTorch {tuple(expected.shape)}")
        worst = max(worst, (got - expected).abs().max().item())
    return worst


def verify_preprocessed(model: VisionTransformer, path, crop, problem_type: str) -> float:
    """Largest difference between the joined graph at `path` and vitkit's own reading (PIL, then the PyTorch model) on
    `onnx_preprocess.check_images`: in probabilities (softmax, or a sigmoid per class for multi-label), in features for a model
    without a head."""
    import numpy as np
    import torch
    from PIL import Image

    from vitkit.data.images import image_pixels
    from vitkit.inference.onnx_preprocess import check_images

    c = model.config
    run = runtime_session("onnxruntime", path)
    mean, std = torch.tensor(c.mean).view(1, -1, 1, 1), torch.tensor(c.std).view(1, -1, 1, 1)

    def outputs(logits: torch.Tensor) -> torch.Tensor:
        if not c.num_classes:
            return logits
        return logits.sigmoid() if problem_type == "multi_label_classification" else logits.softmax(-1)

    worst = 0.0
    for pixels in check_images(c.in_chans):
        image = Image.fromarray(pixels[..., 0] if pixels.shape[-1] == 1 else pixels)
        ours = torch.from_numpy(image_pixels(image, c.in_chans, c.image_size, crop, background=c.background))
        with torch.no_grad():
            expected = outputs(model.eval().cpu()((ours[None].float() / 255.0 - mean) / std))
        got = outputs(run(torch.from_numpy(np.ascontiguousarray(pixels[None]))))
        worst = max(worst, (got - expected).abs().max().item())
    return worst


def export_checkpoint(
    checkpoint: Path,
    out: Path | None = None,
    format: str | None = None,
    *,
    precision: str = "fp32",
    atol: float | None = None,
    threads: int = 0,
    calibration: int = 256,
    check_images: int = 500,
    min_agreement: float = 0.99,
    data: str | None = None,
    preprocess: bool = False,
) -> dict:
    """Export a checkpoint (`vitkit export`): to `out` (default: beside it, named by `format` and `precision`) in
    `format` (default: what `out`'s suffix names, else onnx), checked against PyTorch before it replaces an earlier
    export. fp32: within `atol` (default 1e-4) on a batch of 3; with `preprocess` (ONNX), a graph taking uint8 images,
    within `atol` (default `onnx_preprocess.TOLERANCE`) of `vitkit predict`'s probabilities on images of odd sizes; int8 (`export_int8`): calibrated on `calibration` training images of
    `data` (default: the checkpoint's), then agreeing on top-1 on `check_images` held-out images by `min_agreement`.
    What was written, as a record."""
    from vitkit.checkpoint import load_with_metadata, refuse_untrained_head

    if threads:
        torch.set_num_threads(threads)
    out, format = _named_target(checkpoint, out, format)
    if not 0 <= min_agreement <= 1:
        raise ConfigError(f"--min-agreement: expected a fraction from 0 to 1 (0.99 = 99%), got {min_agreement}")
    model, metadata = load_with_metadata(checkpoint)
    # a head that never trained would export as uniform probabilities; a backbone exports features
    if model.config.num_classes:
        refuse_untrained_head(metadata, checkpoint, model)
    suffix = (".int8" if precision == "int8" else "") + FORMATS[format]  # int8 never takes its fp32 export's name
    out = _checked_target(out or checkpoint.with_name(checkpoint.name.rstrip("/") + suffix), format)
    if preprocess and (format != "onnx" or precision != "fp32"):
        raise ConfigError(
            f"--preprocess: an fp32 ONNX graph takes it, not {format} {precision}; export to .onnx in fp32"
        )
    if precision == "int8":
        check = Int8Check(calibration, check_images, min_agreement, data)
        return export_int8(model, metadata, out, format, checkpoint=checkpoint, check=check)
    return _export_fp32(model, metadata, out, format, atol, preprocess)


def _named_target(checkpoint: Path, out: Path | None, format: str | None) -> tuple[Path | None, str]:
    """(--out, the format): a given `out` is a file, of `format` where given, and not the checkpoint itself."""
    if out is not None:
        refuse_folder(out, format or "onnx")
        format = format_of(out, format)
        if out.resolve() == checkpoint.resolve():
            raise ConfigError(f"--out {out}: is the checkpoint being exported; write the export to another file")
    return out, format or "onnx"


def _checked_target(out: Path, format: str) -> Path:
    """`out`, refused before any work where it is a folder, cannot be written, or holds something not an export."""
    from vitkit.files import writable

    refuse_folder(Path(out), format)
    writable(out, "the export", "choose another --out")  # before the work, not at its end
    refuse_replacing(Path(out), format)
    return out


def _export_fp32(
    model: VisionTransformer, metadata: dict, out: Path, format: str, atol: float | None, preprocess: bool = False
) -> dict:
    """`model` exported to `out` in fp32, within `atol` of PyTorch (with `preprocess`: of `vitkit predict`'s
    probabilities, on uint8 images); the record of what was written."""
    from vitkit.data.images import crop_of
    from vitkit.inference import onnx_preprocess

    crop = crop_of(metadata) if preprocess else None
    with staged(out) as path:  # checked before it replaces an earlier export
        export(model, path, format=format, metadata=metadata, preprocess=crop)
        if crop is None:
            diff, atol, checked = verify(model, path, format), 1e-4 if atol is None else atol, "a batch of 3"
        else:
            problem = metadata.get("problem_type", "single_label_classification")
            diff, checked = verify_preprocessed(model, path, crop, problem), "images of odd sizes"
            atol = onnx_preprocess.TOLERANCE if atol is None else atol
        if not diff <= atol:
            raise VitkitError(
                f"{out}: not written: the export differs from {'PyTorch' if crop is None else 'vitkit predict'} by "
                f"{diff:.2e} on {checked}, over --atol {atol}; what --out held is unchanged (a larger --atol accepts it)"
            )
    return {
        "out": out,
        "format": format,
        "precision": "fp32",
        "companions": [p.name for p in companions(out)],
        "class_names": len(metadata.get("class_names") or []),
        "head": bool(model.config.num_classes),
        "diff": diff,
        "dynamic_size": dynamic_size(model) and format != "torchscript",
        "preprocess": crop is not None,
        "openvino_default": openvino_default(model, out) if format == "openvino" else None,
    }


ONE_BY_ONE = 32  # int8 check images also run one at a time


@dataclasses.dataclass(frozen=True)
class Int8Check:
    """How an int8 export is calibrated and checked: on `calibration` training images, then its top-1 agreeing with
    PyTorch fp32 on `check_images` validation (else test) images by at least `min_agreement`; `data`: the images
    (default: the data the checkpoint was trained on)."""

    calibration: int = 256
    check_images: int = 500
    min_agreement: float = 0.99
    data: str | None = None


def export_int8(
    model: VisionTransformer, metadata: dict, out: Path, format: str, *, checkpoint: Path, check: Int8Check
) -> dict:
    """Calibrate on training images, export quantized (NNCF's presets in turn, until one passes), then check top-1
    against PyTorch fp32 on held-out images; the record of what was written."""
    if format not in ("onnx", "openvino"):
        raise ConfigError(f"--precision int8: exports ONNX or OpenVINO IR (quantized by NNCF); not --format {format}")
    if check.calibration <= 0 or check.check_images <= 0:
        raise ConfigError("--calibration and --check-images: expected positive image counts")
    spec, split, calibration, checks = _int8_images(model, metadata, checkpoint, check)
    with torch.inference_mode():
        expected = [model(x).argmax(-1) for x in checks]
    tried, total, singles = [], sum(len(x) for x in checks), min(len(checks[0]), ONE_BY_ONE)
    with staged(out) as path:  # built and checked beside --out: a rejected export never replaces what --out holds
        for preset in INT8_PRESETS:  # NNCF's transformer preset first; its plain flow where that one fails the check
            export(model, path, format=format, metadata=metadata, calibration=calibration, preset=preset)
            run = runtime_session("onnxruntime" if format == "onnx" else "openvino", path, precision="int8")
            agreement = _agreement(run, checks, expected, singles)
            tried.append(f"{preset} preset {agreement:.2%}")
            if agreement >= check.min_agreement:
                break
        if agreement < check.min_agreement:
            raise VitkitError(
                f"{out}: not written: int8 top-1 agrees with PyTorch fp32 on too few of {total} {split} images of "
                f"{spec.where} ({'; '.join(tried)}), under --min-agreement {check.min_agreement:.2%}; calibrate on more "
                "images (--calibration) or export fp32"
            )
    return {
        "out": out,
        "format": format,
        "precision": "int8",
        "companions": [p.name for p in companions(out)],
        "class_names": len(metadata.get("class_names") or []),
        "preset": preset,
        "tried": tried,
        "calibration_images": sum(len(b) for b in calibration),
        "data": spec.where,
        "checked": {
            "split": split,
            "images": total,
            "batches": sorted({len(x) for x in checks}),
            "one_by_one": singles,
        },
        "agreement": agreement,
    }


def _int8_images(model: VisionTransformer, metadata: dict, checkpoint: Path, check: Int8Check):
    """(the data, the held-out split checked on, calibration batches from train, check batches from that split)."""
    from vitkit.data import DataSpec
    from vitkit.data.sources import MissingSplit
    from vitkit.inference.predict import calibration_images

    c = model.config
    crop_pct = metadata.get("preprocess", {}).get("crop_pct", 1.0)
    spec = DataSpec.from_checkpoint(metadata, checkpoint, data=check.data)
    train = spec.open("train", channels=c.in_chans, image_size=c.image_size[0])
    try:
        held, split = spec.open("val", channels=c.in_chans, image_size=c.image_size[0]), "val"
    except MissingSplit:
        held, split = spec.open("test", channels=c.in_chans, image_size=c.image_size[0]), "test"
    calibration = calibration_images(train, model, n=check.calibration, crop_pct=crop_pct)
    checks = calibration_images(held, model, n=check.check_images, crop_pct=crop_pct, seed=1)
    return spec, split, calibration, checks


def _agreement(run, checks: list[torch.Tensor], expected: list[torch.Tensor], singles: int) -> float:
    """Top-1 agreement of `run` with `expected`: the lower of that in the check's batches and that of the first
    `singles` images one at a time (runtimes pick kernels by batch)."""
    total = sum(len(x) for x in checks)
    with torch.inference_mode():
        batched = sum(int((run(x).argmax(-1) == y).sum()) for x, y in zip(checks, expected)) / total
        alone = sum(int(run(checks[0][i : i + 1]).argmax(-1) == expected[0][i]) for i in range(singles)) / singles
    return min(batched, alone)
