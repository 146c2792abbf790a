"""One speaker per user and sound server across processes, and no speech while another listens.

Each MCP client starts an mcp-listen of its own, and the sound server mixes what they play: two
agents' speak_text at once would talk over each other, and one listening would hear the other's
voice as its user's words. Within a process the device claim (audio/microphone.py) keeps the
sound devices to one call; between processes a lock does, a readers-writer rule: a speaker holds
it exclusively while its output stream is open, a listening call (capture_audio, transcribe_voice,
voice_query, converse) holds it shared while its microphone records. A speech that starts while
another process holds it either way is refused at once with `busy` naming that process's pid
(never queued: an agent that waits without knowing why looks hung); a listening call that starts
while another process speaks waits for that speech to end (bounded, with progress), then records,
or answers `busy` naming the speaker.

The lock is a POSIX record lock (fcntl) on one byte of one file per user, the byte chosen by the
sound server (the variables that choose it: PULSE_SERVER, PULSE_RUNTIME_PATH, PIPEWIRE_REMOTE):
programs on another sound server play elsewhere, and one file serves them all, so lock files never
pile up. Record locks belong to the process, not to an open file, so a process never waits on its
own hold (converse listens while it speaks); the lock's holder is the kernel's answer to F_GETLK,
so nothing is ever written to the file. The cost of record locks: closing any descriptor of the
file drops every hold of the process on it, so each process keeps exactly one open (`_Holds`).

The file lives in a folder only the user can write: the runtime folder (XDG_RUNTIME_DIR) when it is
private (ours, a real folder, no group or other write), else the user's own 0700 folder in the temp
folder (config.default_recordings_dir: the recordings' default folder, so the temp folder holds one
entry of ours). Both are checked on every open, through the open folder, and so is the file: opened
without following a link or blocking on a FIFO, then kept only if it is a regular file of ours with
one link. When the folder or the file is not safe (planted by someone else), the rule cannot hold:
speech goes on without it and the result's `warning` says so, as `doctor` does.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
import stat
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mcp_listen.config import default_recordings_dir
from mcp_listen.contract.limits import OTHER_SPEECH_WAIT_S
from mcp_listen.errors import Cancelled, DeviceBusy
from mcp_listen.files import CLOEXEC, NOFOLLOW

try:
    import fcntl
except ImportError:  # Windows: no record locks; the device claim still keeps one speech per process
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

LOCK_NAME = "speaker.lock"
FOLDER_MODE = 0o700
FILE_MODE = 0o600
SOUND_SERVER_VARS = ("PULSE_SERVER", "PULSE_RUNTIME_PATH", "PIPEWIRE_REMOTE")
"""What picks the sound server a program plays on: the same values, the same speakers."""
POLL_S = 0.05
"""How often a listening call looks whether another process's speech has ended."""
WAIT_NOTE_S = 1.0
"""How often a waiting listening call says so (progress)."""
_OPEN = os.O_RDWR | os.O_CREAT | NOFOLLOW | CLOEXEC | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
REMEDY = "Set XDG_RUNTIME_DIR to a folder of your own with mode 0700, or remove what is at {path}."
Waiting = Callable[[str], None]
"""Told, about once a second, why a listening call has not started recording yet."""


class Unsafe(Exception):
    """The folder or the file at `path` cannot carry the rule (`what` is wrong with it); str() is the warning."""

    def __init__(self, path: Path, what: str) -> None:
        self.path, self.what, self.remedy = path, what, REMEDY.format(path=path)
        super().__init__(
            f"The one-speaker rule between mcp-listen servers is off: {path} {what}. Another client's mcp-listen "
            f"may speak at the same time, or hear this speech as its user's words. {self.remedy}"
        )


def sound_server_key() -> str:
    """The sound server this process plays on, as the variables that choose it name it."""
    chosen = "\0".join(os.environ.get(name, "") for name in SOUND_SERVER_VARS)
    return hashlib.sha256(chosen.encode("utf-8", "surrogateescape")).hexdigest()[:12]


def _byte(key: str) -> int:
    """The byte of the lock file that stands for the sound server `key` (within 31 bits everywhere)."""
    return 1 + int(key, 16) % (2**31 - 2)


def lock_folder() -> Path:
    """This user's private folder for the lock: the runtime folder when it is private, else our temp folder."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime) and fcntl is not None:
        try:
            info = os.lstat(runtime)
        except OSError:
            info = None
        if info is not None and _folder_problem(info) is None:
            return Path(runtime)
    return default_recordings_dir()


def lock_path() -> Path:
    return lock_folder() / LOCK_NAME


def _folder_problem(info: os.stat_result) -> str | None:
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a folder"
    if info.st_uid != os.getuid():
        return "belongs to another user"
    if stat.S_IMODE(info.st_mode) & 0o022:
        return f"can be written by other users (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def _file_problem(info: os.stat_result) -> str | None:
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if info.st_uid != os.getuid():
        return "belongs to another user"
    if info.st_nlink != 1:
        return f"has {info.st_nlink} links (another name leads to it)"
    return None


def _open_folder(folder: Path, ours: bool) -> int:
    """The folder, open and checked; `ours` (the temp folder's, by our name) is created 0700 when missing and
    set back to 0700 when its mode is looser, as the recordings' (audio/recordings.py)."""
    if ours:
        try:
            os.mkdir(folder, FOLDER_MODE)
        except FileExistsError:
            pass  # there already, or made by someone else meanwhile: checked below, never trusted by its name
        except OSError as exc:
            raise Unsafe(folder, f"cannot be created ({exc.strerror})") from None
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW | CLOEXEC)
    except OSError as exc:
        raise Unsafe(folder, _why(_lstat(folder), _folder_problem, exc)) from None
    info = os.fstat(fd)
    if ours and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) != FOLDER_MODE:
        log.warning("the speaker lock's folder had mode %04o; set it to %04o", stat.S_IMODE(info.st_mode), FOLDER_MODE)
        os.fchmod(fd, FOLDER_MODE)
        info = os.fstat(fd)
    problem = _folder_problem(info)
    if problem is not None:
        os.close(fd)
        raise Unsafe(folder, problem)
    return fd


def _open_lock(folder: Path) -> int:
    """The lock file, open read-write, ours, regular, one link; nothing is written to it, ever."""
    folder_fd = _open_folder(folder, ours=folder == default_recordings_dir())
    try:
        try:
            fd = os.open(LOCK_NAME, _OPEN, FILE_MODE, dir_fd=folder_fd)
        except OSError as exc:
            raise Unsafe(folder / LOCK_NAME, _why(_lstat(LOCK_NAME, folder_fd), _file_problem, exc)) from None
    finally:
        os.close(folder_fd)
    info = os.fstat(fd)
    problem = _file_problem(info)
    if problem is not None:
        os.close(fd)
        raise Unsafe(folder / LOCK_NAME, problem)
    if stat.S_IMODE(info.st_mode) != FILE_MODE:
        os.fchmod(fd, FILE_MODE)  # ours with one link: a umask of 077 or a hand's chmod, nobody else's file
    return fd


def _lstat(name: Any, dir_fd: int | None = None) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None


def _why(found: os.stat_result | None, check: Callable[[os.stat_result], str | None], exc: OSError) -> str:
    """What is wrong with what an open refused: what is there, else the system's reason."""
    return (check(found) if found is not None else None) or f"cannot be opened ({exc.strerror})"


def problem(folder: Path | None = None) -> Unsafe | None:
    """Why the rule cannot hold here (doctor), or None: looked at, nothing created or changed."""
    if fcntl is None:
        return None
    folder = folder or lock_folder()
    found = _lstat(folder)
    if found is None:
        return None  # made 0700 on first use
    trouble = _folder_problem(found)
    ours = folder == default_recordings_dir() and found.st_uid == os.getuid() and stat.S_ISDIR(found.st_mode)
    if trouble is not None and not ours:  # our own temp folder's loose mode is set back on first use
        return Unsafe(folder, trouble)
    lock = _lstat(folder / LOCK_NAME)
    trouble = _file_problem(lock) if lock is not None else None
    return None if trouble is None else Unsafe(folder / LOCK_NAME, trouble)


# ---------------------------------------------------------------------------------- this process's holds


class _Holds:
    """This process's holds on one lock file, by byte: listening (shared) and speaking (exclusive) calls."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.fd = -1
        self.users = 0
        """Calls holding or waiting: the file stays open while there is one (closing it drops every hold)."""
        self.listening: dict[int, int] = {}
        self.speaking: dict[int, int] = {}

    def enter(self) -> None:
        if self.users == 0:
            self.fd = _open_lock(self.folder)  # checked on every open
        self.users += 1

    def leave(self) -> None:
        self.users -= 1
        if self.users == 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def take(self, kind: int, byte: int) -> bool:
        """Set this process's lock on `byte` to `kind` at once; False when another process's hold is in the way
        (then this process's hold stays as it was: record locks change all or nothing)."""
        try:
            fcntl.lockf(self.fd, kind if kind == fcntl.LOCK_UN else kind | fcntl.LOCK_NB, 1, byte, os.SEEK_SET)
            return True
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                return False
            raise

    def settle(self, byte: int) -> None:
        """After a call let go: the byte's lock as the calls left hold it (a downgrade or an unlock never waits)."""
        if not self.speaking.get(byte):
            self.take(fcntl.LOCK_SH if self.listening.get(byte) else fcntl.LOCK_UN, byte)

    def holder(self, byte: int, wanted: int) -> tuple[str | None, bool]:
        return _holder(self.fd, byte, wanted)


_HOLDS: dict[Path, _Holds] = {}
_MUTEX = threading.Lock()
_SWEPT: list[Path] = []


def _enter(folder: Path | None) -> _Holds:
    """This process's holds in `folder` (by default the chosen one, where earlier versions' files are swept
    once), the file open and checked: Unsafe when it cannot be."""
    chosen = folder or lock_folder()
    if folder is None and chosen not in _SWEPT:  # where earlier versions put theirs: the temp or runtime folder
        _SWEPT.append(chosen)
        _sweep_old(Path(tempfile.gettempdir()) if chosen == default_recordings_dir() else chosen)
    held = _HOLDS.setdefault(chosen, _Holds(chosen))
    held.enter()
    return held


@contextmanager
def speaker_owned(folder: Path | None = None) -> Iterator[str | None]:
    """Hold the speaker for this process while the block runs; yields None, or the warning when the rule
    cannot hold here. DeviceBusy at once when another process speaks or listens on this sound server."""
    if fcntl is None:
        yield None
        return
    byte = _byte(sound_server_key())
    with _MUTEX:
        held, warning = _enter_or_warning(folder, "speaking")
        if held is not None:
            if not held.speaking.get(byte):
                _exclusive(held, byte)
            held.speaking[byte] = held.speaking.get(byte, 0) + 1
    try:
        yield warning
    finally:
        if held is not None:
            with _MUTEX:
                held.speaking[byte] -= 1
                held.settle(byte)
                held.leave()


def _enter_or_warning(folder: Path | None, doing: str) -> tuple[_Holds | None, str | None]:
    """This process's holds in the lock folder, or (None, the warning) when the folder or file is not safe
    and `doing` goes on without the rule. Called under _MUTEX."""
    try:
        return _enter(folder), None
    except Unsafe as exc:
        log.warning("speaker lock unusable: %s without the one-speaker rule", doing)
        return None, str(exc)


def _exclusive(held: _Holds, byte: int) -> None:
    """Take the byte exclusively, or leave and raise DeviceBusy naming who is in the way."""
    for _ in range(3):  # the holder may let go between the try and the question: then try again
        if held.take(fcntl.LOCK_EX, byte):
            return
        pid, speaks = held.holder(byte, fcntl.F_WRLCK)
        if pid is not None:
            held.leave()
            raise DeviceBusy(_refusal(pid, speaks))
    held.leave()
    raise DeviceBusy(_refusal("unknown", True))


@contextmanager
def listening(
    folder: Path | None = None,
    *,
    stop: Any = None,
    waiting: Waiting | None = None,
    wait_s: float = OTHER_SPEECH_WAIT_S,
) -> Iterator[str | None]:
    """Hold off other processes' speech while the block records; first wait, at most `wait_s`, for one
    that speaks now to end (`waiting` told why about once a second; `stop` cancels), else DeviceBusy
    naming it. Yields None, or the warning when the rule cannot hold here (then nothing is waited for)."""
    if fcntl is None:
        yield None
        return
    byte = _byte(sound_server_key())
    with _MUTEX:
        held, warning = _enter_or_warning(folder, "listening")
    if held is not None:
        try:
            _shared(held, byte, stop, waiting, wait_s)
        except BaseException:
            with _MUTEX:
                held.leave()
            raise
    try:
        yield warning
    finally:
        if held is not None:
            with _MUTEX:
                held.listening[byte] -= 1
                held.settle(byte)
                held.leave()


def _shared(held: _Holds, byte: int, stop: Any, waiting: Waiting | None, wait_s: float) -> None:
    """Take the byte shared: at once when no other process speaks (or this one holds it already), else once
    its speech ends, waiting at most `wait_s`."""
    deadline = time.monotonic() + wait_s
    noted = 0.0
    while True:
        with _MUTEX:
            if held.listening.get(byte) or held.speaking.get(byte) or held.take(fcntl.LOCK_SH, byte):
                held.listening[byte] = held.listening.get(byte, 0) + 1
                return
            pid, _ = held.holder(byte, fcntl.F_RDLCK)
        if stop is not None and stop.is_set():
            raise Cancelled("The recording was cancelled.")
        now = time.monotonic()
        if pid is not None and now >= deadline:
            raise DeviceBusy(_still_speaking(pid, wait_s))
        if pid is not None and waiting is not None and now >= noted:
            noted = now + WAIT_NOTE_S
            waiting(f"Waiting for another mcp-listen (pid {pid}) to finish speaking (up to {wait_s:g} s)")
        time.sleep(POLL_S)


def _refusal(pid: str, speaks: bool) -> str:
    if speaks:
        return (
            f"Another mcp-listen (pid {pid}) is speaking on this sound server, for another client. Wait for it to "
            "finish, then call again."
        )
    return (
        f"Another mcp-listen (pid {pid}) is listening on this sound server, for another client: speech now would be "
        "recorded as its user's words. Wait for it to finish, then call again."
    )


def _still_speaking(pid: str, wait_s: float) -> str:
    return (
        f"Another mcp-listen (pid {pid}) is speaking on this sound server, for another client, and went on for the "
        f"{wait_s:g} s this call waited: recording now would take its voice for the user's words. Wait for it to "
        "finish (or stop it there with stop_speaking), then call again."
    )


# ---------------------------------------------------------------------------------- the holder's pid


def _holder(fd: int, byte: int, wanted: int) -> tuple[str | None, bool]:
    """The pid of a process whose hold on `byte` conflicts with `wanted` (F_GETLK: the kernel's answer, nothing
    read from the file; "unknown" where the platform's struct flock is not known here, None when there is none
    any more), and whether it is speaking (an exclusive hold)."""
    linux = sys.platform.startswith("linux")
    if not linux and not (sys.platform == "darwin" or "bsd" in sys.platform):
        return "unknown", True
    if linux:  # short l_type, l_whence; off_t l_start, l_len; pid_t l_pid
        shape, asked = "hhqqi", (wanted, os.SEEK_SET, byte, 1, 0)
    else:  # off_t l_start, l_len; pid_t l_pid; short l_type, l_whence
        shape, asked = "qqihh", (byte, 1, 0, wanted, os.SEEK_SET)
    try:
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack(shape, *asked) + bytes(64))
    except OSError:
        return "unknown", True
    found = struct.unpack(shape, answer[: struct.calcsize(shape)])
    kind, pid = (found[0], found[4]) if linux else (found[3], found[2])
    if kind == fcntl.F_UNLCK:
        return None, False
    return (str(pid) if pid > 0 else "unknown"), kind == fcntl.F_WRLCK


# ---------------------------------------------------------------------------------- earlier versions' files


def _sweep_old(folder: Path) -> None:
    """Remove the lock files earlier versions left in the temp or runtime folder, one per sound server
    (regular files of ours with one link, named exactly so): the folder keeps one entry of ours at most."""
    old = re.compile(rf"^mcp-listen-{os.getuid()}-speaker-[0-9a-f]{{12}}\.lock$")
    try:
        with os.scandir(folder) as entries:
            names = [e.name for e in entries if old.match(e.name)]
    except OSError:
        return
    for name in names:
        found = _lstat(folder / name)
        if found is None or _file_problem(found) is not None:
            continue
        try:
            os.unlink(folder / name)
        except OSError as exc:
            log.debug("could not remove an old speaker lock: %s", exc.strerror)
