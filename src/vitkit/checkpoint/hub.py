"""Model hub names, resolved through huggingface_hub's own cache.

    hf-hub:google/vit-base-patch16-224          a Hugging Face repository (transformers or timm layout)
    hf-hub:google/vit-base-patch16-224@REV      at a branch, tag or commit
    vit_base_patch16_224.augreg2_in21k_ft_in1k  timm's MODEL.TAG: the repository timm/MODEL.TAG

A local path that exists always wins over a hub name: `./NAME` forces the file, `hf-hub:ORG/NAME` the hub.
huggingface_hub finds the files (HF_HUB_CACHE, else HF_HOME/hub) and downloads what is missing; with
HF_HUB_OFFLINE=1 it only reads the cache, and a model not there is one error naming the cache and the variable.
Only the files a reader needs are fetched: the JSON configs and the safetensors weights (PyTorch's .bin where a
repository has no safetensors).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

from vitkit.errors import CheckpointError, first_line
from vitkit.hfcache import cache_dir, offline, require, snapshot

PREFIX = "hf-hub:"
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
_TIMM = re.compile(r"[a-z][a-z0-9_]*\.[a-z0-9_]+")  # vit_base_patch16_224.augreg2_in21k_ft_in1k
# a file name with one of these suffixes is a file that is not there, never a timm MODEL.TAG
_FILE_SUFFIXES = {"npz", "safetensors", "pth", "pt", "bin", "json", "yaml", "yml", "onnx", "xml", "ckpt", "h5", "zip"}
CONFIGS = ["config.json", "preprocessor_config.json"]
SAFE_WEIGHTS = ["model.safetensors", "model.safetensors.index.json", "model-*-of-*.safetensors"]
TORCH_WEIGHTS = ["pytorch_model.bin", "pytorch_model.bin.index.json", "pytorch_model-*-of-*.bin"]


class HubName(NamedTuple):
    """A model hub name as given, and the repository and revision it names."""

    given: str
    repo: str
    revision: str | None = None

    def __str__(self) -> str:
        return self.given


def parse(given: str | os.PathLike) -> HubName | None:
    """The hub model `given` names (hf-hub:ORG/NAME[@REV], or timm's MODEL.TAG), else None; a malformed hf-hub: name
    is an error."""
    text = os.fspath(given)
    if text.startswith(PREFIX):
        repo, at, revision = text[len(PREFIX) :].partition("@")
        if not _REPO.fullmatch(repo) or (at and not revision):
            raise CheckpointError(
                f"{text}: not a hub name; write hf-hub:ORG/NAME or hf-hub:ORG/NAME@REVISION (a branch, tag or commit)"
            )
        return HubName(text, repo, revision or None)
    if _TIMM.fullmatch(text) and text.rsplit(".", 1)[1] not in _FILE_SUFFIXES:
        return HubName(text, f"timm/{text}")
    return None


def hub_name(given: str | os.PathLike) -> HubName | None:
    """`parse(given)` where no local path `given` exists (a local path always wins)."""
    name = parse(given)
    return None if name is None or Path(given).exists() else name


def cached() -> dict[str, Path]:
    """{hub name: snapshot folder at main} of the models in huggingface_hub's cache, read without huggingface_hub:
    timm's repositories as MODEL.TAG, others as hf-hub:ORG/NAME."""
    root, _ = cache_dir()
    found = {}
    for folder in sorted(root.glob("models--*--*")):
        org, _, name = folder.name.removeprefix("models--").partition("--")
        try:
            snapshot = folder / "snapshots" / (folder / "refs" / "main").read_text().strip()
        except OSError:  # no main branch cached (a revision alone), or not readable: not listed
            continue
        if snapshot.is_dir() and _REPO.fullmatch(f"{org}/{name}"):
            found[name if org == "timm" and _TIMM.fullmatch(name) else f"{PREFIX}{org}/{name}"] = snapshot
    return found


def where(given: str | os.PathLike) -> Path:
    """The local folder of hub name `given` (fetched into the cache where online and missing), else `given` as a
    path."""
    name = hub_name(given)
    return Path(given) if name is None else fetch(name)


def fetch(name: HubName) -> Path:
    """The snapshot folder of `name` in huggingface_hub's cache, with its configs and weights."""
    require(str(name), "a model hub name", CheckpointError)
    try:
        folder = _snapshot(name, [*CONFIGS, *SAFE_WEIGHTS])
        if not any(folder.glob("*.safetensors")) and not offline():  # an older repository: PyTorch's .bin
            folder = _snapshot(name, [*CONFIGS, *TORCH_WEIGHTS])
    except CheckpointError as err:
        if name.given.startswith(PREFIX):
            raise
        raise CheckpointError(f"{err} (read as timm's MODEL.TAG, as no file or folder {name.given} is here)") from None
    return folder


def _snapshot(name: HubName, patterns: list[str]) -> Path:
    """huggingface_hub.snapshot_download of the files `patterns` match; its errors as one line each."""
    return snapshot(str(name), name.repo, revision=name.revision, patterns=patterns, error=CheckpointError)


def push(folder: str | os.PathLike, repo: str, *, private: bool = False, message: str | None = None) -> str:
    """Upload an export folder (Hugging Face's or timm's layout, as `vitkit convert --to hf|timm` writes them) to the
    hub repository `repo` (ORG/NAME, created where missing) through huggingface_hub.upload_folder, with the token of
    Hugging Face's own login (`hf auth login`) or HF_TOKEN; returns the commit's address. Offline, a name that is no
    repository's or a folder of another kind is one error before anything is sent."""
    if offline():
        raise CheckpointError(
            "HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set, so nothing can be uploaded; unset it to push (nothing "
            "was sent)"
        )
    if not _REPO.fullmatch(repo):
        raise CheckpointError(f"{repo}: not a hub repository; write ORG/NAME (your user or organisation, then a name)")
    kind = export_folder_kind(Path(folder))
    import huggingface_hub

    try:
        huggingface_hub.create_repo(repo, private=private, exist_ok=True)
        commit = huggingface_hub.upload_folder(
            repo_id=repo, folder_path=str(folder), commit_message=message or f"Upload a {kind} export of vitkit"
        )
    except Exception as err:  # huggingface_hub's HTTP, login and validation errors: one line, the folder unchanged
        raise CheckpointError(
            f"{repo}: the upload failed ({first_line(err)}); log in with `hf auth login` (or set HF_TOKEN) with a "
            "token that may write there"
        ) from None
    return str(getattr(commit, "commit_url", commit))


def export_folder_kind(folder: Path) -> str:
    """ "hf" or "timm": the layout of an export folder that a hub repository serves as it is; anything else (a vitkit
    checkpoint, a run, a file) is one error saying how to make one."""
    from . import hf, timm

    if folder.is_dir() and hf.is_hf(folder):
        return "hf"
    if timm.is_timm_dir(folder):
        return "timm"
    raise CheckpointError(
        f'{folder}: not a Hugging Face or timm export folder (config.json with "model_type": "vit", or timm\'s '
        '"architecture", beside model.safetensors); write one with vitkit convert CHECKPOINT --to hf DIR (or --to '
        "timm DIR), then push DIR"
    )
