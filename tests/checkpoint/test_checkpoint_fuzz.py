"""Fuzzing checkpoint reading with hypothesis: damaged files of every format give a model or a CheckpointError."""

import shutil

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vitkit
from vitkit.checkpoint import read_checkpoint, save_checkpoint
from vitkit.errors import CheckpointError

# format -> (what save_checkpoint writes, the file inside it that gets damaged)
LAYOUTS = {
    "vitkit": ("ckpt", "model.safetensors"),
    "vitkit-config": ("ckpt", "config.json"),
    "npz": ("m.npz", ""),
    "timm": ("m.safetensors", ""),
    "pth": ("m.pth", ""),
    "hf": ("hf", "model.safetensors"),
    "hf-config": ("hf", "config.json"),
}


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
    root = tmp_path_factory.mktemp("originals")
    model = vitkit.create_model("vit_test", depth=1, mlp_act="gelu_tanh")
    for name, (path, _) in LAYOUTS.items():
        fmt = {"vitkit-config": "vitkit", "hf-config": "hf", "pth": "timm"}.get(name, name)
        if not (root / path).exists():
            save_checkpoint(model, root / path, fmt)
    return root


@st.composite
def damage(draw, size: int) -> list[tuple[str, int, bytes]]:
    edits = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["truncate", "overwrite", "insert"]))
        at = draw(st.one_of(st.integers(0, min(size, 200)), st.integers(0, size)))  # headers are where formats differ
        edits.append((kind, at, draw(st.binary(min_size=1, max_size=12))))
    return edits


def _apply(data: bytes, edits) -> bytes:
    data = bytearray(data)
    for kind, at, chunk in edits:
        if kind == "truncate":
            data = data[:at]
        elif kind == "overwrite":
            data[at : at + len(chunk)] = chunk
        else:
            data[at:at] = chunk
    return bytes(data)


@settings(
    max_examples=5 * settings.default.max_examples // 2,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(layout=st.sampled_from(list(LAYOUTS)), data=st.data())
def test_damaged_checkpoints_load_or_raise_checkpoint_error(originals, tmp_path_factory, layout, data):
    path, inner = LAYOUTS[layout]
    work = tmp_path_factory.mktemp("fuzz") / path
    (shutil.copytree if (originals / path).is_dir() else shutil.copy)(originals / path, work)
    if layout in ("vitkit", "vitkit-config"):
        (work / "checksums.json").unlink()  # let the damage reach the readers themselves, not only the checksum
    target = work / inner if inner else work
    original = target.read_bytes()
    target.write_bytes(_apply(original, data.draw(damage(len(original)))))
    try:
        model = vitkit.load_pretrained(work)
    except CheckpointError as err:
        assert "\n" not in str(err) and str(err).startswith(str(work))
    else:
        assert isinstance(model, vitkit.VisionTransformer)
    try:
        read_checkpoint(work)  # what vitkit info does
    except CheckpointError:
        pass


@pytest.mark.parametrize("size", [0, 1, 8, 9, 64])
def test_random_bytes_under_every_suffix(tmp_path, size):
    for suffix in (".npz", ".safetensors", ".pth", ".bin", ".pt"):
        path = tmp_path / f"x{suffix}"
        path.write_bytes(
            torch.randint(0, 256, (size,), generator=torch.Generator().manual_seed(size), dtype=torch.uint8)
            .numpy()
            .tobytes()
        )
        with pytest.raises(CheckpointError, match=rf"x\{suffix}"):
            vitkit.load_pretrained(path)


# what a longer random search (700 x 7 damaged files) once found escaping, kept as fixed cases
def test_npz_with_a_garbled_array_header(originals, tmp_path):
    data = (originals / "m.npz").read_bytes()
    at = data.index(b"'shape': (") + len(b"'shape': (")
    (tmp_path / "m.npz").write_bytes(data[:at] + b"\xa2Y,\xa1S" + data[at + 5 :])  # numpy's header parser: a TokenError
    with pytest.raises(CheckpointError, match=r"m\.npz: cannot read as \.npz"):
        vitkit.load_pretrained(tmp_path / "m.npz")


def test_zip_with_an_undecodable_member_name(tmp_path):
    import zipfile

    with zipfile.ZipFile(tmp_path / "m.pth", "w") as archive:
        archive.writestr("\u00e9/data.pkl", b"x")  # a non-ASCII name: stored as UTF-8, flagged as such
    data = (tmp_path / "m.pth").read_bytes().replace("\u00e9".encode(), b"\xc3\x28")  # no longer valid UTF-8
    (tmp_path / "m.pth").write_bytes(data)
    with pytest.raises(CheckpointError, match=r"m\.pth: cannot load as a PyTorch weights file"):
        vitkit.load_pretrained(tmp_path / "m.pth")
