"""The recordings folder: created private, held open, searched for free names, swept at start.

The folder is created 0700 whatever the umask, and one that other users could write to is
refused (the default folder, which is ours, is repaired instead). It is opened
(O_DIRECTORY | O_NOFOLLOW) before the recording starts and every file operation after it goes
through that descriptor (Folder.at), so the WAV lands in the folder that was checked: a symlink
swapped in meanwhile is never followed, and a folder moved away is an error, not a file elsewhere.

Names: a recording is `mcp-listen-<ms>.wav` (then <ms+1> ... and random suffixes, so a free name
is always found); a WAV being written is a hidden `.mcp-listen-<ms>-<hex>.partial`, flock-ed by
its writer (audio/wavfile.py). The start-up sweep removes partials no process holds locked at once and
our recordings after 24 hours; it deletes only regular files named exactly like ours: never a
symlink, never anything else in the folder.

Where the platform has no directory descriptors (Windows) the same steps run on paths.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import secrets
import shlex
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from mcp_listen.errors import StorageError
from mcp_listen.files import CLOEXEC, NOFOLLOW

try:
    import fcntl
except ImportError:  # Windows: an open file cannot be deleted there, which protects it the same way
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

NAME_PATTERN = re.compile(r"^mcp-listen-\d{10,16}(-[0-9a-f]{8})?\.wav$")
PARTIAL_PATTERN = re.compile(r"^\.mcp-listen-\d{10,16}-[0-9a-f]{8}\.partial$")
MAX_AGE_S = 24 * 3600
HEADER_BYTES = 44
"""A WAV's header: a recording no longer than this holds no audio."""
FOLDER_MODE = 0o700
NEXT_MS_NAMES = 10
"""Names tried after mcp-listen-<ms>.wav before random ones: <ms+1> ... <ms+9>."""
RANDOM_NAMES = 1000
"""Random 32-bit suffixes tried after that; all taken would need billions of planted names."""
_DIR_FD = os.open in os.supports_dir_fd and os.link in os.supports_dir_fd and hasattr(os, "O_DIRECTORY")


def recording_name(epoch_ms: int) -> str:
    return f"mcp-listen-{epoch_ms}.wav"


def final_names(epoch_ms: int) -> Iterator[str]:
    """Names for a recording made at `epoch_ms`, in the order tried until one is free."""
    for n in range(NEXT_MS_NAMES):
        yield recording_name(epoch_ms + n)
    for _ in range(RANDOM_NAMES):
        yield f"mcp-listen-{epoch_ms}-{secrets.token_hex(4)}.wav"


def folder_hint() -> str:
    return "Set MCP_LISTEN_RECORDINGS_DIR to a folder you own, or fix its permissions."


class Folder:
    """The recordings folder, held open from the check before recording to the write after it."""

    def __init__(self, path: Path, fd: int | None) -> None:
        self.path = path
        self.fd = fd
        """Directory descriptor (None where the platform has none: then paths are used)."""

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)

    def at(self, name: str) -> dict:
        """Arguments naming `name` inside the folder for os.open, os.unlink, os.stat ..."""
        if self.fd is None:
            return {"path": str(self.path / name)}
        return {"path": name, "dir_fd": self.fd}

    def check_unmoved(self) -> None:
        """The folder's path must still lead to the folder we hold (not a symlink swapped in)."""
        if self.fd is None:
            return
        try:
            now = os.stat(self.path, follow_symlinks=False)
        except OSError:
            now = None
        held = os.fstat(self.fd)
        if now is None or (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
            raise StorageError(
                "The recordings folder was moved or replaced during the recording, so nothing was saved. "
                + folder_hint()
            )


def open_folder(folder: Path, *, ours: bool = False) -> Folder:
    """Create (0700) and check the recordings folder, and hold it open for this recording.

    `ours` is the default folder in the shared temp dir: one another user made first (to read or
    plant recordings) is refused; wrong permissions on it are repaired to 0700.
    """
    _make_private(folder)
    if not _DIR_FD:
        _check_path(folder)
        return Folder(folder, None)
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW | CLOEXEC)
    except OSError as exc:
        raise StorageError(f"{_open_problem(folder, exc)} {folder_hint()}") from None
    try:
        _check_fd(folder, fd, ours)
    except BaseException:
        os.close(fd)
        raise
    return Folder(folder, fd)


def _open_problem(folder: Path, exc: OSError) -> str:
    if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and folder.is_symlink()):
        return "The recordings folder is a symbolic link; name the real folder."
    if exc.errno == errno.ENOTDIR:
        return "The recordings folder is not a folder."
    return f"Cannot open the recordings folder: {exc.strerror}."


def _make_private(folder: Path) -> None:
    """Create the missing folders of `folder`, each 0700 whatever the umask (mkdir's mode is masked)."""
    missing = []
    path = folder
    while not os.path.lexists(path) and path != path.parent:
        missing.append(path)
        path = path.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, FOLDER_MODE)
        except FileExistsError:
            continue  # made by someone else meanwhile: checked, not changed
        except OSError as exc:
            raise StorageError(f"Cannot create the recordings folder: {exc.strerror}. {folder_hint()}") from None
        _chmod_created(path)


def _chmod_created(path: Path) -> None:
    if not _DIR_FD:
        os.chmod(path, FOLDER_MODE)
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW | CLOEXEC)
    except OSError:
        return  # replaced right after we made it: open_folder's checks decide
    try:
        os.fchmod(fd, FOLDER_MODE)
    finally:
        os.close(fd)


def _check_fd(folder: Path, fd: int, ours: bool) -> None:
    info = os.fstat(fd)
    if ours and info.st_uid != os.getuid():
        raise StorageError(f"The recordings folder belongs to another user. {folder_hint()}")
    mode = stat.S_IMODE(info.st_mode)
    if ours and mode != FOLDER_MODE:
        log.warning("the recordings folder had mode %04o; set it back to %04o", mode, FOLDER_MODE)
        os.fchmod(fd, FOLDER_MODE)
    elif mode & 0o022:
        raise StorageError(
            f"The recordings folder can be written by other users (mode {mode:04o}): they could read, "
            f"replace or plant recordings. Run: chmod go-w {shlex.quote(str(folder))} "
            "(or set MCP_LISTEN_RECORDINGS_DIR to a private folder)."
        )
    if not os.access(".", os.W_OK | os.X_OK, dir_fd=fd):
        raise StorageError(f"The recordings folder is not writable. {folder_hint()}")


def _check_path(folder: Path) -> None:
    if folder.is_symlink() or not folder.is_dir():
        raise StorageError(f"The recordings folder is not a folder. {folder_hint()}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise StorageError(f"The recordings folder is not writable. {folder_hint()}")


# ------------------------------------------------------------------------------------------ sweep


def sweep(folder: Path, *, now: float | None = None, max_age_s: float = MAX_AGE_S) -> int:
    """At start: delete our recordings older than `max_age_s` and, at once, our incomplete files
    (partials no process is writing, and header-only `.wav`s older versions left). Returns the count."""
    now = time.time() if now is None else now
    try:
        held = open_folder(folder) if _DIR_FD and folder.is_dir() else Folder(folder, None)
    except StorageError:
        return 0
    with held:
        removed = sum(_sweep_one(held, entry, now, max_age_s) for entry in _entries(held))
    if removed:
        log.info("removed %d old or incomplete recording file(s)", removed)
    return removed


def _entries(folder: Folder) -> list[os.DirEntry]:
    try:
        with os.scandir(folder.fd if folder.fd is not None else folder.path) as found:
            return [e for e in found if NAME_PATTERN.match(e.name) or PARTIAL_PATTERN.match(e.name)]
    except OSError:
        return []


def _sweep_one(folder: Folder, entry: os.DirEntry, now: float, max_age_s: float) -> int:
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:
        return 0
    if not stat.S_ISREG(info.st_mode) or (hasattr(os, "getuid") and info.st_uid != os.getuid()):
        return 0
    if PARTIAL_PATTERN.match(entry.name):
        return _remove_abandoned(folder, entry.name)
    incomplete = info.st_size <= HEADER_BYTES and now - info.st_mtime > 60
    if not incomplete and now - info.st_mtime <= max_age_s:
        return 0
    try:
        os.unlink(**folder.at(entry.name))
        return 1
    except OSError as exc:
        log.debug("could not sweep an old recording: %s", exc.strerror)
        return 0


def _remove_abandoned(folder: Folder, name: str) -> int:
    """Remove a partial WAV unless a live writer holds its lock."""
    if fcntl is None:
        return _unlink_counted(folder, name)  # Windows refuses to delete a file still open
    try:
        fd = os.open(flags=os.O_RDONLY | NOFOLLOW | CLOEXEC | getattr(os, "O_NONBLOCK", 0), **folder.at(name))
    except OSError:
        return 0
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return 0  # being written right now
    try:
        return _unlink_counted(folder, name)
    finally:
        os.close(fd)


def _unlink_counted(folder: Folder, name: str) -> int:
    try:
        os.unlink(**folder.at(name))
        return 1
    except OSError:
        return 0
