"""Export a model for deployment: ONNX, TorchScript or torch.export's ExportedProgram, batch dimension dynamic.

Every export is checked against the PyTorch model on a batch size other than the one it was traced with.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import torch

from vitkit.checkpoint.io import atomic_path
from vitkit.errors import ConfigError
from vitkit.models import VisionTransformer

FORMATS = {"onnx": ".onnx", "torchscript": ".pt", "exported-program": ".pt2"}


def _example(model: VisionTransformer, batch_size: int) -> torch.Tensor:
    c = model.config
    return torch.randn(batch_size, c.in_chans, *c.image_size)


def export(model: VisionTransformer, path: str | os.PathLike, *, format: str) -> Path:
    """Write `model` (eval mode, CPU) to `path` in `format`, with a dynamic batch dimension."""
    if format not in FORMATS:
        raise ConfigError(f"format: expected one of {', '.join(FORMATS)}, got {format!r}")
    model = model.eval().cpu()
    path = Path(path)
    x = _example(model, 2)
    batch = torch.export.Dim("batch", min=1, max=4096)
    if format == "onnx":
        _export_onnx(model, x, path, batch)
        return path
    with atomic_path(path) as tmp, torch.no_grad():
        if format == "torchscript":
            torch.jit.save(torch.jit.trace(model, x), str(tmp))
        else:
            program = torch.export.export(model, (x,), dynamic_shapes={"x": {0: batch}})
            torch.export.save(program, str(tmp))
    return path


def _export_onnx(model: VisionTransformer, x: torch.Tensor, path: Path, batch: torch.export.Dim) -> None:
    """ONNX may write its weights beside the graph (path.data): build both in a scratch folder, then move them."""
    try:
        import onnxscript  # noqa: F401  (the dynamo ONNX exporter needs it)
    except ImportError:
        raise ConfigError("format onnx: install the onnx extra (pip install 'vitkit[onnx]')") from None
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)  # it lists the torchvision ops it skips
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.name}.") as scratch, torch.no_grad():
        torch.onnx.export(model, (x,), str(Path(scratch) / path.name), dynamo=True, dynamic_shapes={"x": {0: batch}},
                          input_names=["images"], output_names=["logits"], verbose=False)
        for produced in sorted(Path(scratch).iterdir(), key=lambda p: p.name == path.name):  # the graph last
            os.replace(produced, path.parent / produced.name)


def run_exported(path: str | os.PathLike, format: str, x: torch.Tensor) -> torch.Tensor:
    """Run an exported file on `x` with the runtime of its format (onnxruntime for ONNX)."""
    path = str(path)
    if format == "torchscript":
        return torch.jit.load(path)(x)
    if format == "exported-program":
        return torch.export.load(path).module()(x)
    try:
        import onnxruntime
    except ImportError:
        raise ConfigError("checking an ONNX export needs onnxruntime (pip install 'vitkit[onnx]')") from None
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return torch.from_numpy(session.run(None, {name: x.numpy()})[0])


def verify(model: VisionTransformer, path: str | os.PathLike, format: str, *, batch_size: int = 3) -> float:
    """Largest absolute difference between the export and the PyTorch model on a fresh batch size."""
    model = model.eval().cpu()
    x = _example(model, batch_size)
    with torch.no_grad():
        expected = model(x)
        got = run_exported(path, format, x)
    if got.shape != expected.shape:
        raise ConfigError(f"{path}: export gives shape {tuple(got.shape)}, PyTorch {tuple(expected.shape)}")
    return (got - expected).abs().max().item()
