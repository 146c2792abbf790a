"""Recording files: names, exclusive 0600 WAV writes, and the 24-hour sweep.

A recording is written completely before its path is returned, into a file
created exclusively (never overwriting anything), and a failure removes what
was written. The sweep deletes only regular files named exactly like our
recordings: never a symlink, never anything else in the folder.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
import time
import wave
from pathlib import Path
from typing import TYPE_CHECKING

from mcp_listen.errors import StorageError

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

NAME_PATTERN = re.compile(r"^mcp-listen-\d{10,16}\.wav$")
MAX_AGE_S = 24 * 3600
HEADER_BYTES = 44


def recording_name(epoch_ms: int) -> str:
    return f"mcp-listen-{epoch_ms}.wav"


def wav_size(frames: int) -> int:
    """Bytes of a 16-bit mono WAV with `frames` samples (the 44-byte header included)."""
    return HEADER_BYTES + 2 * frames


def ensure_folder(folder: Path, *, must_own: bool = False) -> Path:
    """Create the recordings folder (0700) if needed and check it is a writable folder we can use.

    `must_own` is for the default folder in the shared temp dir: one another user made first
    (to read or plant recordings) is refused.
    """
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"Cannot create the recordings folder: {exc.strerror}. {_folder_hint()}") from None
    if folder.is_symlink() or not folder.is_dir():
        raise StorageError(f"The recordings folder is not a folder. {_folder_hint()}")
    if must_own and hasattr(os, "getuid") and folder.stat().st_uid != os.getuid():
        raise StorageError(f"The recordings folder belongs to another user. {_folder_hint()}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise StorageError(f"The recordings folder is not writable. {_folder_hint()}")
    return folder


def _folder_hint() -> str:
    return "Set MCP_LISTEN_RECORDINGS_DIR to a folder you own, or fix its permissions."


def write_recording(folder: Path, samples: "np.ndarray", sample_rate: int) -> Path:
    """Write int16 mono `samples` to a new mcp-listen-<epoch-ms>.wav in `folder`, exclusively, mode 0600."""
    epoch_ms = int(time.time() * 1000)
    for attempt in range(1000):
        path = folder / recording_name(epoch_ms + attempt)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except FileExistsError:
            continue
        except OSError as exc:
            raise StorageError(f"Cannot create a recording file: {exc.strerror}. {_folder_hint()}") from None
        _write_fd(fd, path, samples, sample_rate)
        return path
    raise StorageError("Could not find a free recording file name after 1000 tries.")


def write_to(path: Path, samples: "np.ndarray", sample_rate: int) -> Path:
    """Write to a path the user chose (CLI --out): through a temporary name, renamed when complete."""
    partial = path.with_name(path.name + ".partial")
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError as exc:
        raise StorageError(f"Cannot write {path}: {exc.strerror}.") from None
    _write_fd(fd, partial, samples, sample_rate)
    os.replace(partial, path)
    return path


def _write_fd(fd: int, path: Path, samples: "np.ndarray", sample_rate: int) -> None:
    """Write the whole WAV through `fd`; on any failure remove the file and raise StorageError."""
    try:
        with os.fdopen(fd, "wb") as raw, wave.open(raw, "wb") as wav:
            wav.setnchannels(1)
            wav.setsampwidth(2)
            wav.setframerate(sample_rate)
            wav.writeframes(samples.astype("<i2", copy=False).tobytes())
    except OSError as exc:
        _unlink_quietly(path)
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        reason = "the disk is full" if full else (exc.strerror or str(exc))
        raise StorageError(f"Could not write the recording: {reason}. {_folder_hint()}") from None
    except BaseException:
        _unlink_quietly(path)
        raise


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def sweep(folder: Path, *, now: float | None = None, max_age_s: float = MAX_AGE_S) -> int:
    """Delete our recordings older than `max_age_s`; returns how many were removed."""
    now = time.time() if now is None else now
    removed = 0
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    for entry in entries:
        if not NAME_PATTERN.match(entry.name):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode) or now - info.st_mtime <= max_age_s:
            continue
        try:
            os.unlink(entry.path)
            removed += 1
        except OSError as exc:
            log.debug("could not sweep an old recording: %s", exc.strerror)
    if removed:
        log.info("removed %d recording(s) older than 24 h", removed)
    return removed


def remove(path: Path | None) -> None:
    """Delete a recording this process owns (voice_query, cancelled captures); missing is fine."""
    if path is not None:
        _unlink_quietly(path)
