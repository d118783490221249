"""The one place vitkit opens and replaces files: bounded reads of regular files, atomic replacement of files and
directories under a lock per target, checksums, and sweeping the scratch left by a killed writer."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import pickle
import re
import shutil
import socket
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from safetensors import SafetensorError

from vitkit.errors import CheckpointError, VitkitError, first_line

# -- reading: regular files only, opened without waiting, read up to a limit --------------------------
# Every file vitkit reads goes through `regular_file` (a library that opens the path itself) or `open_regular` /
# `read_regular` (vitkit opens it). A device reads without end (/dev/zero), a FIFO's open waits for a writer that may
# never come: neither is a file a dataset or a checkpoint holds, so both are refused before a byte is read.
_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _check_regular(path: Path, status: os.stat_result, error: type[VitkitError]) -> None:
    """`error` naming what `path` is where it is no regular file; a directory is the IsADirectoryError open raises."""
    if stat.S_ISREG(status.st_mode):
        return
    if stat.S_ISDIR(status.st_mode):
        raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
    kind = next((name for test, name in _KINDS if test(status.st_mode)), "not a regular file")
    raise error(f"{path}: is {kind}, not a regular file; vitkit reads regular files only, so give the file itself")


def regular_file(path: str | os.PathLike, error: type[VitkitError] = CheckpointError) -> os.stat_result:
    """The status of `path` (symbolic links followed) where it is a regular file; else `error` saying what it is. A
    missing path raises FileNotFoundError, as open would. For a library that opens `path` itself."""
    status = os.stat(path)
    _check_regular(Path(path), status, error)
    return status


@contextmanager
def open_regular(
    path: str | os.PathLike, error: type[VitkitError] = CheckpointError, *, limit: int | None = None, what: str = ""
) -> Iterator[BinaryIO]:
    """`path` open for reading where it is a regular file of at most `limit` bytes (see `read_regular`). It is looked
    at before it is opened, and opened so that a FIFO put in its place meanwhile does not make the open wait."""
    path = Path(path)
    regular_file(path, error)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        status = os.fstat(fd)
        _check_regular(path, status, error)
        if limit is not None and status.st_size > limit:
            raise error(too_large(path, status.st_size, limit, what))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as f:
        yield f


def read_regular(
    path: str | os.PathLike, limit: int, error: type[VitkitError] = CheckpointError, *, what: str = "this kind of file"
) -> bytes:
    """The bytes of regular file `path`, at most `limit` (the most a valid file of its kind, `what`, can need): `error`
    naming it where it is larger (on disk, or grown while read), no regular file (`regular_file`), or a directory."""
    with open_regular(path, error, limit=limit, what=what) as f:
        data = f.read(os.fstat(f.fileno()).st_size + 1)  # the whole file (a read of `limit` would allocate that)
        while len(data) <= limit and (more := f.read(1 << 20)):  # a file that grew since
            data += more
    if len(data) > limit:
        raise error(too_large(path, len(data), limit, what))
    return data


def too_large(path: str | os.PathLike, size: int, limit: int, what: str) -> str:
    return f"{path}: {size:,} bytes is over the limit of {limit:,} for {what}; check that it is {what}"


@contextmanager
def naming(path: str | os.PathLike) -> Iterator[None]:
    """An OSError raised inside the block names `path` where it names no file: a write() that fails (a full disk, a
    quota) raises one without a name, and "a file: No space left on device" leaves the user to guess which."""
    try:
        yield
    except OSError as err:
        if err.filename is None:
            err.filename = str(path)
        raise


class WriteError(CheckpointError):
    """A write failed (full disk, quota, file-size limit); nothing was replaced."""

    def __init__(
        self,
        path: Path,
        reason: str,
        then: str = "run the command again",
        kept: str = "the file as it was and earlier checkpoints are intact",
    ):
        self.path, self.reason = path, reason
        super().__init__(
            f"{path}: cannot be written ({reason}; is the disk full?); nothing was replaced: {kept}; free some space, then {then}"
        )


def not_a_directory(path: str | os.PathLike) -> Path:
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(
            f"{path}: is a directory, and a file would replace it; remove it or write to another name"
        )
    _refuse_special(path)
    return path


def _refuse_special(path: Path) -> None:
    """A CheckpointError where `path` is a device, FIFO or socket: a write renamed a file over it (as root, over
    /dev/null), or, for a directory, hung reading a FIFO it meant to remove."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:  # nothing there (or unreadable: the write says why)
        return
    kind = (
        "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else None
    )
    if kind:
        raise CheckpointError(
            f"{path}: is {kind}, not a file or folder a checkpoint can replace; write to another name (nothing was changed)"
        )


def scratch_prefix(path: Path) -> str:
    """The start of a scratch file's or folder's name beside `path`: ".NAME.HOST-PID.", saying whose it is, so that
    one left by a process killed mid-write (kill -9, the OOM killer, a preempted job) is swept by the next write."""
    return f".{path.name}.{_host()}-{os.getpid()}."


def sweep_scratch(path: Path) -> None:
    """Remove the scratch files and folders beside `path` left by processes of this host that are gone. Another host's
    (a shared file system) and a live process's are left alone: they may still be writing."""
    mine = re.compile(re.escape(f".{path.name}.{_host()}-") + r"(\d+)\.")
    try:
        entries = list(os.scandir(path.parent))
    except OSError:  # no folder yet, or one that cannot be listed: nothing to sweep
        return
    for entry in entries:
        if (found := mine.match(entry.name)) and not _alive(int(found.group(1))):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


@contextmanager
def scratch_folder(path: Path) -> Iterator[Path]:
    """A temporary folder beside `path` (removed when the block ends), after sweeping dead processes' ones."""
    sweep_scratch(path)
    with tempfile.TemporaryDirectory(prefix=scratch_prefix(path), dir=path.parent) as scratch:
        yield Path(scratch)


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname()) or "host"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: it exists
        return True
    return True


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success fsync it and rename it over `path`.

    A crash (or kill -9) at any point leaves the previous file intact; no partial file is ever
    visible under the final name. A write that fails (a full disk, a quota) is one CheckpointError.
    """
    path = not_a_directory(path)
    _mkdir(path.parent)
    with target_lock(path):
        yield from _replace_file(path)


def _replace_file(path: Path) -> Iterator[Path]:
    sweep_scratch(path)
    fd, tmp = tempfile.mkstemp(prefix=scratch_prefix(path), suffix=f".tmp{path.suffix}", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual mode
        with open(tmp_path, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp_path, path)
        _fsync_dir(path.parent)
    except (
        OSError,
        RuntimeError,
        SafetensorError,
    ) as err:  # what json, torch.save and safetensors raise when a write fails
        tmp_path.unlink(missing_ok=True)
        if isinstance(err, RuntimeError):  # torch.save's messages name C++ internals, not the cause
            reason = "torch.save could not write the whole file"
        else:
            reason = getattr(err, "strerror", None) or first_line(err)
        raise WriteError(path, reason) from None
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


class TargetBusy(CheckpointError):
    """Another process holds the lock of the file being written."""


_HELD: dict[Path, int] = {}  # the file targets whose lock this process holds, with how many blocks hold each


def lock_name(path: Path) -> Path:
    """The lock file of a file target: beside it, there only while a writer holds it."""
    return path.parent / f".{path.name}.lock"


@contextmanager
def target_lock(path: str | os.PathLike) -> Iterator[None]:
    """One writer at a time for the file `path` (as `begin_replacement` for a folder): an flock on `lock_name(path)`,
    a CheckpointError naming the file while another process holds it. Held again by the same process, it nests. The
    lock file is removed by its holder; one who locked a removed file sees it is not the one in place and tries again."""
    path = Path(path)
    key = path.absolute()
    if key in _HELD:
        _HELD[key] += 1
        try:
            yield
        finally:
            _HELD[key] -= 1
        return
    _mkdir(path.parent)  # the lock lives beside the file: its folder first, as the write would make it
    fd = _lock_file(path)
    _HELD[key] = 1
    try:
        yield
    finally:
        del _HELD[key]
        with contextlib.suppress(OSError):
            os.unlink(lock_name(path))
        os.close(fd)


def _lock_file(path: Path) -> int:
    lock = lock_name(path)
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as err:
            raise CheckpointError(f"{path}: cannot be written ({err.strerror}); nothing was changed") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise TargetBusy(
                f"{path}: another vitkit process is writing it now ({lock.name} is locked); wait for it to finish"
            ) from None
        try:
            if os.path.samestat(os.fstat(fd), os.stat(lock)):
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # its holder removed it as we opened it: lock the one in place now


def writable(path: str | os.PathLike, what: str, then: str) -> None:
    """A CheckpointError naming `what` and saying `then` where `path` cannot be written (its folder cannot be made, is
    read-only, `path` is a folder): checked before a long job, so that it does not fail at its last step."""
    path = Path(path)
    try:
        not_a_directory(path)
    except CheckpointError as err:
        raise CheckpointError(f"{path}: cannot write {what} there ({first_line(err)}); {then}") from None
    writable_folder(path.parent, what, then, named=path)


def writable_folder(folder: str | os.PathLike, what: str, then: str, *, named: str | os.PathLike | None = None) -> None:
    """As `writable`, for a folder that `what` will be written into. Nothing is made: a missing folder's nearest
    existing parent must be a folder that takes a file (a refused command leaves no empty --out behind)."""
    folder = Path(folder).absolute()
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    try:
        if not existing.is_dir():
            raise CheckpointError(f"{existing}: is a file, not a directory; remove it or choose another name")
        tempfile.TemporaryFile(dir=existing).close()
    except (CheckpointError, OSError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else first_line(err)
        raise CheckpointError(f"{named or folder}: cannot write {what} there ({reason}); {then}") from None


def _mkdir(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocking = next((p for p in (directory, *directory.parents) if p.exists() and not p.is_dir()), directory)
        raise CheckpointError(f"{blocking}: is a file, not a directory; remove it or choose another name") from None


# -- whole directories: built under a temporary name, then renamed into place -----------------------
# Replacing `NAME` is two renames: NAME -> .NAME.old, then the complete .NAME.tmp -> NAME. The writer
# holds an flock on .NAME.tmp from its creation to the last rename, so a reader that finds NAME missing
# can tell a live writer between its renames (wait) from a killed one (finish the replacement).
def staging(target: Path) -> tuple[Path, Path]:
    """The temporary names a replacement of `target` uses: the new directory, the one it replaces."""
    return target.parent / f".{target.name}.tmp", target.parent / f".{target.name}.old"


def _try_lock(path: Path) -> int | None:
    """An fd of `path` holding its exclusive flock, or None when another process holds it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def between_renames(target: Path) -> bool:
    """A replacement of `target` is between its two renames (or was cut there by a kill): no `target`, both
    staging names."""
    tmp, old = staging(target)
    return not target.exists() and old.is_dir() and tmp.is_dir()


def finish_replacement(target: Path, wait_s: float = 5.0) -> bool:
    """Complete a replacement of `target` that a kill -9 cut between its two renames.

    `.NAME.old` exists only after the new directory `.NAME.tmp` was complete, so with `target` missing
    the new one takes its place; without `.old`, a `.tmp` may be half written and is left alone. A live
    writer between its renames (its lock on `.tmp` held) is waited for, up to `wait_s`. Without write
    access to the parent, a reader only waits. False when it gave up, the replacement still between its renames.
    """
    target = Path(target)
    tmp, old = staging(target)
    deadline = time.monotonic() + wait_s
    while between_renames(target):
        try:
            fd = _try_lock(tmp)
        except FileNotFoundError:
            continue  # the writer has just renamed it into place
        if fd is None:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)  # a live writer between its two renames
            continue
        try:  # the lock is ours: is it still the unrenamed `.tmp`, not one a writer renamed and released since?
            if not target.exists() and os.path.samestat(os.fstat(fd), os.stat(tmp)):
                os.replace(tmp, target)
        except FileNotFoundError:
            pass  # renamed meanwhile: the loop looks again
        except PermissionError:
            return False
        finally:
            os.close(fd)
    if target.exists() and old.is_dir() and not tmp.is_dir():
        shutil.rmtree(old, ignore_errors=True)
    return True


def identity(path: Path) -> tuple[int, int, int] | None:
    """Which directory `path` is now; with its ctime, as a replaced directory's inode number can be reused by a later one."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_dev, stat.st_ino, stat.st_ctime_ns


def _replaced_since(path: Path, before: tuple[int, int, int] | None) -> bool:
    """Whether `path` may have been replaced since its identity was `before`: it is another directory now, or it was
    missing then and a replacement is between its renames or has ended since (looked at in that order, so a rename
    in between is seen by one of the two)."""
    if before is not None:
        return identity(path) != before
    return between_renames(path) or identity(path) is not None


def read_stable(path: str | os.PathLike, read, tries: int = 20):
    """`read(path)` of a directory as it is between replacements (see `atomic_dir`), never a mix of two.

    A read counts when the directory it started on is still in place at its end. A reader racing a
    replacement may see half the old and half the new directory, or none (between the two renames);
    that is not damage: it waits for a replacement in flight to end (`finish_replacement`) and reads
    again, as often as the directory is replaced under it (up to `tries` reads). A failure with the
    directory unchanged and no replacement in flight is the reader's own error, raised at once; a read
    costs two stats more.
    """
    path = Path(path)
    for _ in range(tries):
        before = identity(path)
        try:
            result = read(path)
        except (CheckpointError, FileNotFoundError):  # a file renamed away under the reader is missing, not damaged
            if not _replaced_since(path, before):
                raise
        else:
            if identity(path) == before:
                return result
        if not finish_replacement(path):
            raise CheckpointError(
                f"{path}: a replacement by another process is between its two renames and has not "
                f"ended; run the command again (with write access to {path.parent} if that process "
                "was killed)"
            )
    raise CheckpointError(
        f"{path}: replaced by another process {tries} times while being read; run the command again once "
        "it is written less often"
    )


class Snapshot(NamedTuple):
    """A JSON file of a directory as read once, with which directory it was read from (`identity`), so that a later
    read of the same directory can use it instead of reading it again while the directory is still that one."""

    directory: Path
    identity: tuple[int, int, int] | None
    data: Any  # None where the file is missing, damaged or not JSON


def snapshot_json(directory: str | os.PathLike, name: str) -> Snapshot:
    """`directory`/`name` as a `Snapshot`, read once. Asked of a directory being replaced, the answer is about the one
    in place before or after, never the moment between the two renames (see `read_stable`)."""

    def read(path: Path) -> Snapshot:
        now = identity(path)
        if now is None:  # gone: between the renames of a replacement, which read_stable waits out
            raise CheckpointError(f"{path}: no such directory")
        try:
            data = read_json(path / name) if (path / name).is_file() else None
        except CheckpointError:  # damaged: says nothing (the reader of the format says what is wrong)
            data = None
        return Snapshot(path, now, data)

    try:
        return read_stable(directory, read)
    except CheckpointError:
        return Snapshot(Path(directory), None, None)


def says(data: Any, key: str, value: Any) -> bool:
    """`data` (a parsed JSON file) is an object whose `key` is `value`."""
    return isinstance(data, dict) and data.get(key) == value


def begin_replacement(target: Path) -> tuple[Path, int]:
    """An empty `.NAME.tmp` to build the new `target` in, and the fd holding its lock (see `commit_replacement`)."""
    target = Path(target)
    if target.name in ("", ".", ".."):
        raise CheckpointError(
            f"{target}: name a new or existing checkpoint directory (e.g. {target / 'model'}), not this folder itself"
        )
    if target.is_symlink():  # the replacement would put a directory in the link's place, beside what it points to
        raise CheckpointError(
            f"{target}: is a symbolic link; write to the directory it points to ({target.resolve()}) or to "
            "another name (nothing was changed)"
        )
    _refuse_special(target)
    if target.is_file():
        raise CheckpointError(
            f"{target}: is a file, and a directory would replace it; remove it or write to another name"
        )
    _mkdir(target.parent)
    finish_replacement(target)
    tmp, fd = _lock_staging(target)
    for child in tmp.iterdir():  # what a killed writer left
        shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    return tmp, fd


def _lock_staging(target: Path) -> tuple[Path, int]:
    """`.NAME.tmp` made where missing and locked; a CheckpointError while another process holds it. A writer that has
    just renamed its own into place (and released it) leaves that one locked under the target's name: made again."""
    tmp, _ = staging(target)
    while True:
        tmp.mkdir(exist_ok=True)
        try:
            fd = _try_lock(tmp)
        except FileNotFoundError:
            continue  # renamed into place between the two calls
        if fd is None:
            raise CheckpointError(
                f"{target}: another vitkit process is writing it now ({tmp} is locked); wait for it to finish"
            )
        try:
            if os.path.samestat(os.fstat(fd), os.stat(tmp)):
                return tmp, fd
        except FileNotFoundError:
            pass
        os.close(fd)


CHECKPOINT_SUFFIXES = (".json", ".safetensors", ".pt")  # what vitkit's and Hugging Face's checkpoint directories hold
CHECKPOINT_DIRS = ("sharded",)  # an FSDP run's step checkpoint
CHECKPOINT_NAMES = ("README.md",)  # the model card of a Hugging Face or timm export


def refuse_foreign(target: Path, advice: str = "write to a new or empty directory") -> None:
    """A CheckpointError where `target` is a directory holding more than a checkpoint: the checkpoint writers replace
    their directory as a whole (`atomic_dir`), so someone's notes or a git clone's .git there would be lost (a README.md is
    an export's model card, written again with it)."""
    target = Path(target)
    try:
        entries = sorted(target.iterdir()) if target.is_dir() else []
    except OSError:
        return  # unreadable: the write says why
    foreign = [
        e
        for e in entries
        if not (
            e.name in CHECKPOINT_DIRS
            and e.is_dir()
            or e.is_file()
            and (e.suffix in CHECKPOINT_SUFFIXES or e.name in CHECKPOINT_NAMES)
        )
    ]
    if foreign:
        raise CheckpointError(
            f"{target}: holds {foreign[0].name}{f' and {len(foreign) - 1} more' if len(foreign) > 1 else ''}, "
            f"which is not part of a checkpoint, and writing here replaces the whole directory; {advice} "
            "(nothing was changed)"
        )


def commit_replacement(target: Path, tmp: Path, fd: int) -> None:
    """Rename the complete `tmp` over `target` (the old one moved aside first, then removed); releases the lock."""
    target = Path(target)
    _, old = staging(target)
    try:
        _fsync_dir(tmp)
        if target.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(target, old)
            os.replace(tmp, target)
            _fsync_dir(target.parent)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
            _fsync_dir(target.parent)
    finally:
        os.close(fd)


def remove_dir(directory: Path) -> None:
    """Delete a directory so that no reader ever sees it half deleted: renamed to `.NAME.old` first."""
    _, old = staging(directory)
    shutil.rmtree(old, ignore_errors=True)
    os.replace(directory, old)
    shutil.rmtree(old, ignore_errors=True)


# -- pins: a reader's shared flock on a directory that a writer deletes (a run's rotated step checkpoints) -------------
# The reader opens the directory and takes a shared flock on it; the remover takes an exclusive one without waiting,
# and leaves a directory it cannot lock in place for a later removal. A flock belongs to the open directory, so a
# reader killed mid-read leaves no pin behind.
def pin_dir(directory: Path) -> int | None:
    """An fd of `directory` holding a shared flock (close it to unpin), or None where it is gone or being removed."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except (FileNotFoundError, NotADirectoryError):
        return None
    fcntl.flock(fd, fcntl.LOCK_SH)  # a remover holds its lock only while it renames and deletes
    try:
        if os.path.samestat(os.fstat(fd), os.stat(directory)):
            return fd
    except FileNotFoundError:
        pass  # removed while we waited for the lock
    os.close(fd)
    return None


_PINS: dict[Path, tuple[Path, int]] = {}  # what a pin is for (a run directory) -> (the directory pinned, the fd)
_HOLDING: list[bool] = []  # non-empty inside holding_pins


def pin(key: Path, directory: Path) -> bool:
    """`directory` pinned as `key`'s (the one pinned for it before let go); False where it is gone."""
    if key in _PINS and _PINS[key][0] == directory:
        return True
    fd = pin_dir(directory)
    if fd is None:
        return False
    _unpin(key)
    _PINS[key] = (directory, fd)
    return True


def held_pin(key: Path) -> Path | None:
    """Inside `holding_pins`, the directory pinned for `key` (None outside, or where none is)."""
    return _PINS[key][0] if _HOLDING and key in _PINS else None


def _unpin(key: Path) -> None:
    held = _PINS.pop(key, None)
    if held is not None:
        os.close(held[1])


@contextmanager
def holding_pins() -> Iterator[None]:
    """Inside: a pin stays what it was first (`held_pin`), so a command reading a live run twice reads one checkpoint.
    At the end every pin is let go."""
    _HOLDING.append(True)
    try:
        yield
    finally:
        _HOLDING.pop()
        if not _HOLDING:
            for key in list(_PINS):
                _unpin(key)


def remove_unpinned(directory: Path) -> bool:
    """`remove_dir`, unless a reader pins `directory` (`pin_dir`): then it stays, and False says so."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    try:
        remove_dir(directory)
    finally:
        os.close(fd)
    return True


def abort_replacement(tmp: Path, fd: int) -> None:
    """Drop a half-built `tmp` (the target stays as it was)."""
    shutil.rmtree(tmp, ignore_errors=True)
    os.close(fd)


@contextmanager
def atomic_dir(target: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary directory beside `target`; when the block succeeds it replaces `target` as a whole.

    A kill at any point leaves the old directory or the new one (the next reader finishes a replacement
    cut between its renames, see `finish_replacement`); a failed write leaves the old one and says so.
    """
    target = Path(target)
    tmp, fd = begin_replacement(target)
    try:
        yield tmp
    except WriteError as err:  # named after the target: the temporary directory is gone
        abort_replacement(tmp, fd)
        raise WriteError(target, f"{err.path.name}: {err.reason}") from None
    except BaseException:
        abort_replacement(tmp, fd)
        raise
    try:
        commit_replacement(target, tmp, fd)
    except OSError as err:
        raise WriteError(target, err.strerror or first_line(err)) from None


# -- one writer per run directory -----------------------------------------------------------------
LOCK_NAME = ".lock"


@contextmanager
def exclusive(
    directory: str | os.PathLike, *, advice: str = "wait for it to end, or choose another --out"
) -> Iterator[None]:
    """Hold an exclusive OS lock (flock) on `directory`/.lock: one writer at a time, released when the process dies."""
    directory = Path(directory)
    _mkdir(directory)
    fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise CheckpointError(f"{directory}: in use by another vitkit process (pid {holder}); {advice}") from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- checksums: a sha256 per weights file, in a manifest written last ------------------------------
# Binary files (weights, optimizer state) are listed; JSON files are not: their readers check every
# key and value, and a user may edit them (e.g. class names) without making the checkpoint "damaged".
CHECKSUMS_NAME = "checksums.json"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_checksums(directory: str | os.PathLike, names: list[str]) -> None:
    """checksums.json in `directory`: size and sha256 of each named file (written after them)."""
    directory = Path(directory)
    files = {
        name: {"bytes": (directory / name).stat().st_size, "sha256": sha256(directory / name)} for name in sorted(names)
    }
    write_json(directory / CHECKSUMS_NAME, {"algorithm": "sha256", "files": files})


def update_checksums(directory: str | os.PathLike) -> None:
    """Extend checksums.json to every file of `directory` and of its checkpoint folders (sharded/: each file as
    "sharded/NAME"), hashing only those it does not list yet."""
    directory = Path(directory)
    listed = _read_checksums(directory) or {}
    names = sorted(p.name for p in directory.iterdir() if p.is_file() and p.suffix != ".json")
    names += _tree_files(directory, CHECKPOINT_DIRS)
    if set(names) == set(listed):
        return
    files = {
        n: listed.get(n) or {"bytes": (directory / n).stat().st_size, "sha256": sha256(directory / n)} for n in names
    }
    write_json(directory / CHECKSUMS_NAME, {"algorithm": "sha256", "files": files})


def _tree_files(directory: Path, folders: tuple[str, ...]) -> list[str]:
    """Every file under `directory`/FOLDER for each of `folders`, as a name relative to `directory` (a/b)."""
    found = []
    for folder in folders:
        if (directory / folder).is_dir() and not (directory / folder).is_symlink():
            found += [p.relative_to(directory).as_posix() for p in (directory / folder).rglob("*") if not p.is_dir()]
    return sorted(found)


def _read_checksums(directory: Path) -> dict[str, dict] | None:
    if not (directory / CHECKSUMS_NAME).is_file():
        return None
    data = read_json(directory / CHECKSUMS_NAME)
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict) or not all(
        isinstance(v, dict) and isinstance(v.get("sha256"), str) and _inside(k) for k, v in files.items()
    ):
        raise CheckpointError(f"{directory / CHECKSUMS_NAME}: not a vitkit checksum list; the file is damaged")
    return files


def _inside(name: str) -> bool:
    """A checksum list's file name stays inside its directory: relative, no "..", no empty part."""
    parts = name.split("/")
    return bool(name) and not name.startswith("/") and all(part not in ("", ".", "..") for part in parts)


def verify_checksums(directory: str | os.PathLike, *, complete: str | None = None) -> None:
    """Check every file listed in `directory`/checksums.json; raise naming the first missing or damaged one.

    A directory without checksums.json (older or foreign checkpoints) passes, unless `complete` names a folder of it
    whose files are about to be deserialized by a reader that may run code (DCP's pickles): then each of its files
    must be listed, and match, first.
    """
    directory = Path(directory)
    advice = "restore it, or remove this checkpoint directory to use an older one"
    listed = _read_checksums(directory) or {}
    if complete is not None:
        unlisted = [n for n in _tree_files(directory, (complete,)) if n not in listed]
        if unlisted:
            raise CheckpointError(
                f"{directory / unlisted[0]}: has no digest in {directory / CHECKSUMS_NAME}, so it is not read (its "
                "reader could run code); resume from a checkpoint vitkit wrote whole, or start a new run from this one"
            )
    for name, want in listed.items():
        path = directory / name
        if not path.is_file():
            raise CheckpointError(f"{path}: missing, but listed in {CHECKSUMS_NAME}; {advice}")
        size = path.stat().st_size
        if size != want.get("bytes", size):
            raise CheckpointError(
                f"{path}: {size} bytes, {want['bytes']} when written: the file is truncated or corrupt; {advice}"
            )
        if sha256(path) != want["sha256"]:
            raise CheckpointError(f"{path}: corrupt (its sha256 differs from the one in {CHECKSUMS_NAME}); {advice}")


def write_json(path: str | os.PathLike, data: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")


def write_text(path: str | os.PathLike, text: str) -> None:
    """`text` as UTF-8 at `path`, written atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


MAX_JSON_BYTES = 256 << 20  # config.json, train_state.json, checksums.json, bad_files.json: far smaller when intact


def read_json(path: str | os.PathLike, *, damaged: str = "the file is damaged or not a config") -> Any:
    """The JSON in `path`; a CheckpointError naming it, ending in `damaged` (what to do), where it is too large or bad."""
    path = Path(path)
    try:
        text = read_regular(path, MAX_JSON_BYTES, CheckpointError, what="a vitkit JSON file")
        return json.loads(text.decode("utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise CheckpointError(f"{path}: is a directory, not a JSON file") from None
    except (ValueError, RecursionError) as err:  # bad JSON, bad UTF-8, nesting too deep for the parser
        raise CheckpointError(f"{path}: not valid JSON ({first_line(err)}); {damaged}") from None


# -- pickles a library writes: read building only the types allowed, never calling anything else ----------------
class _AllowedTypes(pickle.Unpickler):
    def __init__(self, file, allowed, path: Path, what: str, advice: str):
        super().__init__(file)
        self.allowed, self.path, self.what, self.advice = allowed, path, what, advice

    def find_class(self, module: str, name: str) -> Any:
        if not self.allowed(module, name):
            raise CheckpointError(f"{self.path}: names {module}.{name}, which is not {self.what}; {self.advice}")
        return super().find_class(module, name)


def read_pickle_of(path: str | os.PathLike, allowed, what: str, advice: str) -> Any:
    """The pickle in `path`, as long as every type it names passes `allowed(module, name)`: a data format some library
    writes as a pickle (DCP's .metadata), read without letting the file call anything else. A CheckpointError naming
    the file, saying it is not `what` and `advice`, otherwise."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            return _AllowedTypes(f, allowed, path, what, advice).load()
    except CheckpointError:
        raise
    except OSError as err:
        raise CheckpointError(f"{path}: cannot be read ({err.strerror or first_line(err)}); {advice}") from None
    except Exception as err:  # a damaged pickle fails in many ways, each of them "not `what`"
        raise CheckpointError(f"{path}: not {what} ({first_line(err)}); {advice}") from None
