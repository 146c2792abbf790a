"""One speaker owner per user and sound server, across processes.

Each MCP client starts an mcp-listen of its own, and the sound server mixes what they play: two
agents' speak_text at once would talk over each other, and the one listening next would hear the
other. Within a process the device claim (audio/microphone.py) keeps speech to one call; between
processes an exclusive `flock` on one lock file per user and sound server does, taken while the
output stream is open. The sound server is told by the variables that choose it (PULSE_SERVER,
PULSE_RUNTIME_PATH, PIPEWIRE_REMOTE): programs on another sound server play elsewhere. The
second process's call is refused at once with `busy` naming the owner's pid, never queued: an
agent that waits without knowing why looks hung.

The lock file lives in the user's private runtime folder (XDG_RUNTIME_DIR, 0700) or else in the
temp folder; it is opened without following symlinks, and one that another user owns is not used
(that user could hold it for ever): speech then goes on without the cross-process rule.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mcp_listen.errors import DeviceBusy
from mcp_listen.files import CLOEXEC, NOFOLLOW

try:
    import fcntl
except ImportError:  # Windows: no flock; the device claim still keeps one speech per process
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

LOCK_NAME = "mcp-listen-{uid}-speaker-{server}.lock"
SOUND_SERVER_VARS = ("PULSE_SERVER", "PULSE_RUNTIME_PATH", "PIPEWIRE_REMOTE")
"""What picks the sound server a program plays on: the same values, the same speakers."""


def lock_path() -> Path:
    """Where this user's speaker lock for this sound server lives: the private runtime folder
    when there is one."""
    chosen = "\0".join(os.environ.get(name, "") for name in SOUND_SERVER_VARS)
    server = hashlib.sha256(chosen.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    folder = Path(runtime) if runtime and os.path.isdir(runtime) else Path(tempfile.gettempdir())
    return folder / LOCK_NAME.format(uid=os.getuid(), server=server)


@contextmanager
def speaker_owned(path: Path | None = None) -> Iterator[None]:
    """Hold the speaker for this process while the block runs; DeviceBusy at once when another
    process holds it."""
    fd = None if fcntl is None else _open(path or lock_path())
    if fd is None:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DeviceBusy(
                f"Another mcp-listen (pid {_owner(fd)}) is speaking on this machine, for another client. Wait for "
                "it to finish, then call again."
            ) from None
        _write_owner(fd)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _open(path: Path) -> int | None:
    """The lock file, ours and a regular file; None when it cannot be used."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | NOFOLLOW | CLOEXEC, 0o600)
    except OSError as exc:
        log.warning("speaker lock unusable (%s): speaking without the one-owner rule", type(exc).__name__)
        return None
    info = os.fstat(fd)
    if info.st_uid != os.getuid() or not stat.S_ISREG(info.st_mode):
        os.close(fd)
        log.warning("speaker lock belongs to another user or is not a file: speaking without the one-owner rule")
        return None
    return fd


def _write_owner(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)


def _owner(fd: int) -> str:
    """The pid the holder wrote, or "unknown" (it may still be writing it)."""
    text = os.pread(fd, 16, 0).decode("ascii", "replace").strip()
    return text if text.isdigit() else "unknown"
