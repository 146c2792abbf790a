"""Recording files: complete-or-nothing WAV writes into the held recordings folder, or to a path.

A WAV is written under a hidden temporary name (recordings' PARTIAL_PATTERN, 0600, created
with O_EXCL | O_NOFOLLOW and flock-ed while written) and gets its final name only when complete,
by a hard link that never replaces an existing file; a free name is always found. A process
killed mid-write therefore leaves no short `.wav`, only a partial that no process holds locked,
and the next start removes those at once (recordings.sweep).

The folder itself (creating, checking, holding it open, the names, the sweep) is audio/recordings.py.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import time
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from mcp_listen.audio.recordings import HEADER_BYTES, RANDOM_NAMES, Folder, final_names, folder_hint
from mcp_listen.errors import InvalidArgument, StorageError
from mcp_listen.files import NEW_FILE, READ_ANY_KIND

if TYPE_CHECKING:
    import numpy as np

try:
    import fcntl
except ImportError:  # Windows: an open file cannot be deleted there, which protects it the same way
    fcntl = None  # type: ignore[assignment]

FILE_MODE = 0o600


def wav_size(frames: int) -> int:
    """Bytes of a 16-bit mono WAV with `frames` samples (the 44-byte header included)."""
    return HEADER_BYTES + 2 * frames


def write_recording(folder: Folder, samples: np.ndarray, sample_rate: int) -> Path:
    """Write int16 mono `samples` as a new mcp-listen-<epoch-ms>.wav in `folder`, mode 0600.

    The file appears under its name only complete; nothing existing is ever replaced.
    """
    folder.check_unmoved()
    partial, fd = _create_partial(folder)
    try:
        _write_fd(fd, samples, sample_rate)
        name = _publish(folder, partial)
    except BaseException:
        _unlink_quietly(folder, partial)
        raise
    finally:
        os.close(fd)  # after the final name exists: the sweep never sees an unlocked partial mid-write
    return folder.path / name


def _create_partial(folder: Folder) -> tuple[str, int]:
    """A new, empty, locked temporary file in `folder`: (name, descriptor)."""
    for _ in range(RANDOM_NAMES):
        name = f".mcp-listen-{int(time.time() * 1000)}-{secrets.token_hex(4)}.partial"
        try:
            fd = os.open(flags=NEW_FILE, mode=FILE_MODE, **folder.at(name))
        except FileExistsError:
            continue
        except OSError as exc:
            raise StorageError(f"Cannot create a recording file: {exc.strerror}. {folder_hint()}") from None
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_nlink == 0:  # a starting server swept it before we locked it
                os.close(fd)
                continue
        return name, fd
    raise StorageError("Could not create a temporary recording file.")


def _write_fd(fd: int, samples: np.ndarray, sample_rate: int) -> None:
    """Write the whole WAV through `fd` (left open); a failure becomes StorageError."""
    try:
        with os.fdopen(fd, "wb", closefd=False) as raw, wave.open(raw, "wb") as wav:
            wav.setnchannels(1)
            wav.setsampwidth(2)
            wav.setframerate(sample_rate)
            wav.writeframes(samples.astype("<i2", copy=False).tobytes())
    except OSError as exc:
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        reason = "the disk is full" if full else (exc.strerror or str(exc))
        raise StorageError(f"Could not write the recording: {reason}. {folder_hint()}") from None


def _publish(folder: Folder, partial: str) -> str:
    """Give the complete file its final name: the first free one, never replacing a file."""
    for name in final_names(int(time.time() * 1000)):
        try:
            _link(folder, partial, name)
        except FileExistsError:
            continue
        except OSError as exc:
            raise StorageError(f"Could not save the recording: {exc.strerror}. {folder_hint()}") from None
        _unlink_quietly(folder, partial)
        return name
    raise StorageError("Could not find a free recording file name.")


def _link(folder: Folder, partial: str, name: str) -> None:
    """Hard-link `name` to `partial` (fails if `name` exists); rename where hard links do not exist."""
    source, target = folder.at(partial), folder.at(name)
    try:
        if folder.fd is None:
            os.link(source["path"], target["path"])
        else:
            os.link(partial, name, src_dir_fd=folder.fd, dst_dir_fd=folder.fd, follow_symlinks=False)
        return
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV):
            raise
    if os.path.lexists(target["path"]) if folder.fd is None else _exists(folder, name):
        raise FileExistsError(name)
    if folder.fd is None:
        os.rename(source["path"], target["path"])
    else:
        os.rename(partial, name, src_dir_fd=folder.fd, dst_dir_fd=folder.fd)


def _exists(folder: Folder, name: str) -> bool:
    try:
        os.stat(follow_symlinks=False, **folder.at(name))
    except FileNotFoundError:
        return False
    return True


@dataclass(frozen=True)
class UserFile:
    """A WAV path the user chose (CLI `capture --out`, `say --save`), with whether an existing file may go.

    capture_audio's files never replace anything, and neither does this: an existing path is
    refused unless `replace`, and even then only a regular file is ever replaced, never a
    folder, a FIFO, a device node or a symlink. `check` runs before the microphone opens, so a
    bad path costs no recording; the write goes through a fresh hidden file beside the target
    (O_EXCL | O_NOFOLLOW, so nothing planted there is written through) that is removed on any
    failure.
    """

    path: Path
    replace: bool = False
    option: str = "--out"
    """The CLI option that named the path (`capture --out`, `say --save`): messages name it."""

    def check(self) -> None:
        """Raise InvalidArgument if this path cannot or may not take the recording."""
        path = self.path
        if not path.parent.is_dir():
            raise InvalidArgument(
                f"{self.option} {path}: the folder {path.parent} does not exist; create it or choose another."
            )
        kind = _kind_at(path, self.option)
        if kind == "folder":
            raise InvalidArgument(
                f"{self.option} {path} is a folder; give a file name, e.g. {self.option} {path / 'recording.wav'}"
            )
        if kind not in (None, "file"):
            raise InvalidArgument(
                f"{self.option} {path} is a {kind}, not a regular file; mcp-listen writes only regular files."
            )
        if kind == "file" and not self.replace:
            raise InvalidArgument(
                f"{self.option} {path} already exists; pass --force to replace it, or choose another name."
            )

    def write(self, samples: np.ndarray, sample_rate: int) -> Path:
        """Write the WAV under a hidden name beside the target, then give it the target's name."""
        self.check()  # again: the path may have changed while we recorded
        partial = self.path.with_name(f".{self.path.name}.{secrets.token_hex(4)}.partial")
        try:
            fd = os.open(partial, NEW_FILE, FILE_MODE)
        except OSError as exc:
            raise StorageError(f"Cannot write {self.path}: {exc.strerror}.") from None
        try:
            try:
                _write_fd(fd, samples, sample_rate)
            finally:
                os.close(fd)
            self._publish(partial)
        finally:
            partial.unlink(missing_ok=True)
        return self.path

    def _publish(self, partial: Path) -> None:
        try:
            if self.replace:
                os.replace(partial, self.path)  # check() made sure it is a regular file or nothing
            else:
                os.link(partial, self.path)  # fails if a file appeared meanwhile: nothing is replaced
        except FileExistsError:
            raise InvalidArgument(
                f"{self.option} {self.path} appeared meanwhile; pass --force to replace it."
            ) from None
        except OSError as exc:
            raise StorageError(f"Cannot write {self.path}: {exc.strerror}.") from None


def _kind_at(path: Path, option: str) -> str | None:
    """What is at `path` without following a symlink: None, "file", "folder" or what else it is."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InvalidArgument(f"{option} {path}: {exc.strerror}.") from None
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "folder"
    kinds = {stat.S_ISLNK: "symlink", stat.S_ISFIFO: "FIFO", stat.S_ISCHR: "device", stat.S_ISBLK: "device"}
    return next((name for test, name in kinds.items() if test(mode)), "special file")


def open_regular(path: Path) -> BinaryIO:
    """Open a WAV the user named for reading, only if it is a regular file: a FIFO would block
    the open forever and a device may be endless (the server opens model files the same way)."""
    fd = os.open(path, READ_ANY_KIND)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
            raise OSError(errno.EINVAL, f"it is {kind}")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _unlink_quietly(folder: Folder, name: str) -> None:
    try:
        os.unlink(**folder.at(name))
    except OSError:
        pass


def remove(path: Path | None) -> None:
    """Delete a recording this process owns (voice_query, cancelled captures); missing is fine."""
    if path is not None:
        try:
            path.unlink()
        except OSError:
            pass
