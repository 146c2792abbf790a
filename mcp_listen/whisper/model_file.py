"""The model file, opened only if it is a regular file; every check, the probe and the load read it.

A FIFO would block the open forever, /proc/self/fd/0 is the server's own stdin, a device may be
endless: `_opened` refuses all of them before reading a byte, and hands out one descriptor
(`_ModelFile`) so a name swapped between the check and the load changes nothing.
"""

from __future__ import annotations

import os
import stat
import struct
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from mcp_listen.errors import TranscriptionError, command
from mcp_listen.files import READ_ANY_KIND
from mcp_listen.whisper.names import short_name

_PROC_FD = sys.platform.startswith("linux") and os.path.isdir("/proc/self/fd")
_NOT_A_FILE = [
    (stat.S_ISFIFO, "a pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
]
ModelKey = tuple[int, int, int, int]


@dataclass(frozen=True)
class _ModelFile:
    """A model file held open: every check, the probe and the load read this one file.

    On Linux whisper.cpp opens /proc/self/fd/N, the very file we checked, so swapping the
    name (a symlink, a rename) between the check and the load changes nothing.
    """

    path: Path
    fd: int
    st: os.stat_result

    @property
    def key(self) -> ModelKey:
        return (self.st.st_dev, self.st.st_ino, self.st.st_size, self.st.st_mtime_ns)

    @property
    def loader_path(self) -> str:
        return f"/proc/self/fd/{self.fd}" if _PROC_FD else str(self.path)

    def still_named(self) -> bool:
        """Where whisper.cpp opens by name (no /proc): is the name still this file?"""
        if _PROC_FD:
            return True
        try:
            now = os.stat(self.path)
        except OSError:
            return False
        return (now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns) == self.key


@contextmanager
def _opened(path: Path) -> Iterator[_ModelFile]:
    """Open `path` if, and only if, it is a regular file; never blocks, never reads anything else.

    A FIFO would block the open (and every read) forever, /proc/self/fd/0 is the server's own
    stdin, a device may be endless: the type is checked by name first (so a device is not even
    opened) and again on the open descriptor, which is what counts.
    """
    try:
        _refuse_special(path, os.stat(path))
        fd = os.open(path, READ_ANY_KIND)
    except OSError as exc:
        raise _os_error(path, exc) from None
    try:
        st = os.fstat(fd)
        _refuse_special(path, st)
        yield _ModelFile(path, fd, st)
    finally:
        os.close(fd)


def _refuse_special(path: Path, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise TranscriptionError(
            f"{path} is a folder, not a whisper model file. Point to a ggml-*.bin file.", code="model_invalid"
        )
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _NOT_A_FILE if test(st.st_mode)), "not a regular file")
        raise TranscriptionError(
            f"{path} is {kind}, not a whisper model file; it was not read. "
            f"whisper_model must name a regular ggml-*.bin file.",
            code="model_invalid",
        )


def _os_error(path: Path, exc: OSError) -> TranscriptionError:
    if isinstance(exc, FileNotFoundError):
        return TranscriptionError(
            f"Whisper model file {path} does not exist. Download it with: "
            f"{command('models', 'pull', short_name(path.name))}",
            code="model_not_found",
        )
    hint = " Make it readable by this user, or use another model." if isinstance(exc, PermissionError) else ""
    return TranscriptionError(f"Cannot read whisper model {path}: {exc.strerror}.{hint}", code="model_invalid")


ENGLISH_ONLY_VOCAB = 51864
"""Tokens of an English-only whisper model (`*.en`); multilingual ones have more."""


def english_only_remedy(path: Path) -> str | None:
    """None for a multilingual model; for an English-only one, what to use instead.

    Read from the GGML header (n_vocab follows the magic), not the name: a renamed file counts.
    Call after `validate_model_file`.
    """
    with _opened(path) as model:
        head = os.pread(model.fd, 8, 0)
    if len(head) < 8 or struct.unpack("<i", head[4:8])[0] > ENGLISH_ONLY_VOCAB:
        return None
    short = short_name(path.name)
    multilingual = short[:-3] if short.endswith(".en") else "base"
    return (
        f"Use a multilingual model: {command('models', 'pull', multilingual)}, then pass "
        f'whisper_model: "{multilingual}" (or set MCP_LISTEN_WHISPER_MODEL={multilingual}).'
    )
