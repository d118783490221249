"""Hugging Face Hub repositories through huggingface_hub's own cache: where the cache is, whether the network may be
used, and one snapshot of a repository's files (a model's or a dataset's), its errors one line each.

huggingface_hub finds the files (HF_HUB_CACHE, else HF_HOME/hub) and downloads what is missing; with HF_HUB_OFFLINE=1
it only reads the cache, and a repository not there is one error naming the cache and the variable."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from vitkit.errors import VitkitError, first_line

_OFF = {"", "0", "false", "no", "off"}


def cache_dir() -> tuple[Path, str]:
    """(huggingface_hub's cache folder, which variable set it), read now, as huggingface_hub reads them."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.path.expandvars(os.path.expanduser(os.environ[variable]))), f"set by {variable}"
    if os.environ.get("HF_HOME"):
        return Path(os.path.expandvars(os.path.expanduser(os.environ["HF_HOME"]))) / "hub", "set by HF_HOME"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "huggingface" / "hub", "the default; HF_HUB_CACHE or HF_HOME moves it"


def offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set: the cache only, no network."""
    return any(os.environ.get(v, "").strip().lower() not in _OFF for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def require(given: str, what: str, error: type[VitkitError]) -> None:
    """One `error` naming `given` (`what` it is) where huggingface_hub, which reads hub names, is not installed."""
    if importlib.util.find_spec("huggingface_hub") is None:
        raise error(f"{given}: {what}, and reading one needs huggingface_hub: pip install 'vitkit[hub]'")


def snapshot(
    given: str,
    repo: str,
    *,
    revision: str | None,
    patterns: list[str],
    error: type[VitkitError],
    repo_type: str = "model",
) -> Path:
    """huggingface_hub.snapshot_download of the files `patterns` match in repository `repo` (a `repo_type`) at
    `revision` (None: main), named `given` in errors of type `error`: each of its failures one line."""
    import huggingface_hub
    from huggingface_hub import errors

    cache, set_by = cache_dir()
    download = f"hf download {repo}" + (f" --repo-type {repo_type}" if repo_type != "model" else "")
    try:
        return Path(
            huggingface_hub.snapshot_download(
                repo,
                repo_type=repo_type,
                revision=revision,
                cache_dir=cache,
                allow_patterns=patterns,
                local_files_only=offline(),
                library_name="vitkit",
            )
        )
    except errors.RevisionNotFoundError:
        raise error(f"{given}: {repo} has no revision {revision!r}; check the @REVISION") from None
    except (errors.RepositoryNotFoundError, errors.GatedRepoError) as err:
        raise error(
            f"{given}: the hub has no {repo_type} repository {repo} that this account may read "
            f"({type(err).__name__}); check the name, or log in (hf auth login) for a private or gated one"
        ) from None
    except getattr(errors, "IncompleteSnapshotError", ()):  # huggingface_hub 1.x and later tell a partial download
        raise error(
            f"{given}: {repo} is only partly in the Hugging Face cache {cache} ({set_by}), as an interrupted "
            f"download leaves it; download it again ({download})"
        ) from None
    except errors.LocalEntryNotFoundError:
        how = (
            "HF_HUB_OFFLINE=1 forbids downloading it: unset HF_HUB_OFFLINE, or download it into that cache where "
            f"there is network ({download})"
            if offline()
            else f"the hub could not be reached: check the network, or copy the {repo_type} into that cache"
        )
        raise error(f"{given}: {repo} is not in the Hugging Face cache {cache} ({set_by}), and {how}") from None
    except Exception as err:  # a network or disk failure inside huggingface_hub: one line, never a traceback
        raise error(
            f"{given}: huggingface_hub could not fetch {repo} into {cache} ({type(err).__name__}: "
            f"{first_line(err)}); check the network and the cache ({set_by})"
        ) from None
