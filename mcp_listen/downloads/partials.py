"""A download's `.partial` file, from its creation to its rename or removal, and the sweep of those
that downloads which never finished left behind.

A download streams into NAME.partial beside its target. Ctrl-C, SIGTERM and SIGHUP remove it
(downloads.exit_on_signals), but what no handler sees (SIGKILL, SIGUSR1, a power cut) leaves it,
and the folder would keep up to gigabytes of half a model until the same pull ran again. So each
pull first sweeps its folder (`sweep`). A partial being written is known by its lock: the process
that created it holds an flock on it until it is renamed (`install`) or removed (`remove`), and the
kernel lets go of the lock when that process dies, however it dies. A sweep removes only what the
caller names as its own, only regular files (a link is neither followed nor removed), and nothing
a live download holds locked. Windows has no flock: there a file another process has open cannot
be deleted, which keeps a live download's partial just the same.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from mcp_listen.files import NEW_FILE, NOFOLLOW, READ_ANY_KIND

try:
    import fcntl
except ImportError:  # Windows (see the module doc)
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

_HELD: dict[Path, int] = {}
"""The partials this process is writing, each with a descriptor holding its lock until it is renamed
or removed (the writer's own descriptor closes once the last byte is written, before the checks)."""
CREATE_TRIES = 3


class Busy(Exception):
    """Another process is writing this partial: a second download of one file would spoil both."""


def create(partial: Path) -> int:
    """Create the partial afresh (0600), locked as this process's; return a descriptor to write to.

    A leftover (a killed download's, or a symlink planted so the download overwrites its target) is
    unlinked first, which removes a link itself, never what it points at; O_EXCL then refuses
    whatever reappears in between, O_NOFOLLOW a link in its place. Raises Busy when a live download
    holds the partial, OSError when it cannot be made.
    """
    if _locked_by_another(partial):
        raise Busy(str(partial))
    for _ in range(CREATE_TRIES):
        _unlink(partial)
        fd = os.open(partial, NEW_FILE, 0o600)
        if _hold(partial, fd):
            return fd
        os.close(fd)  # a sweep took it for a leftover in the instant before the lock: make it again
    raise OSError(0, "something else keeps removing it", str(partial))


def install(partial: Path, final: Path) -> None:
    """Rename a verified partial to its final name, then let go of its lock."""
    os.replace(partial, final)
    _release(partial)


def remove(partial: Path) -> None:
    """Unlink this process's partial (a link itself, not its target) and let go of its lock.

    What is at the name but is not this process's (a download that failed before its partial was
    made) is left when another live download holds it. Quiet when there is none; logged, not
    raised, when it cannot go (a directory in its place): the error being cleaned up after is the
    one to report.
    """
    lock = _HELD.get(partial)
    if lock is None:
        if not _locked_by_another(partial):
            _unlink(partial)
        return
    if _identity(partial) == _identity(lock):
        _unlink(partial)
    _release(partial)


def sweep(folder: Path, ours: Callable[[str], bool]) -> list[str]:
    """Remove what downloads that never finished left in `folder`: names ending in `.partial` that
    `ours` accepts, regular files only, none a live download holds. Each removal is logged at
    WARNING (the user learns where the space went); returns the names removed, in order."""
    removed: list[str] = []
    try:
        names = sorted(entry.name for entry in os.scandir(folder))
    except OSError:
        return removed
    for name in names:
        path = folder / name
        if not name.endswith(".partial") or not ours(name) or path in _HELD:
            continue
        with _lock(path) as fd:
            if fd is None or _identity(path) != _identity(fd):
                continue
            try:
                os.unlink(path)
            except OSError as exc:  # Windows: the file of a live download cannot be deleted
                log.debug("kept %s: %s", path, exc.strerror)
                continue
        removed.append(name)
        log.warning("removed %s: a download that did not finish left it", path)
    return removed


def _hold(partial: Path, fd: int) -> bool:
    """Lock the partial just made; False if by then it is no longer at its name (a sweep that opened
    it in the instant before the lock removed it)."""
    if fcntl is None:
        return True
    lock = os.dup(fd)
    fcntl.flock(lock, fcntl.LOCK_EX)  # a sweep holds it for an instant at most
    if _identity(partial) != _identity(lock):
        os.close(lock)
        return False
    _HELD[partial] = lock
    return True


def _release(partial: Path) -> None:
    lock = _HELD.pop(partial, None)
    if lock is not None:
        os.close(lock)


def _locked_by_another(partial: Path) -> bool:
    """A regular file at `partial` whose lock another process holds: a download in progress."""
    if fcntl is None or partial in _HELD:
        return False
    with _lock(partial, busy=True) as fd:
        return fd == BUSY


BUSY = -1


@contextlib.contextmanager
def _lock(path: Path, *, busy: bool = False) -> Iterator[int | None]:
    """A descriptor on the regular file at `path` (opened without following a link, without blocking,
    and only once `lstat` said it is a regular file: opening a device can act on it) holding its lock;
    None when there is none or it is no regular file, and None (BUSY with `busy`) when another process
    holds the lock."""
    st = _lstat(path)
    if st is None or not stat.S_ISREG(st.st_mode):
        yield None
        return
    try:
        fd = os.open(path, READ_ANY_KIND | NOFOLLOW)
    except OSError:
        yield None
        return
    try:
        if _identity(fd) != (st.st_dev, st.st_ino):
            yield None
            return
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                yield BUSY if busy else None
                return
        yield fd
    finally:
        os.close(fd)


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def _identity(what: Path | int) -> tuple[int, int] | None:
    """(device, inode) of a name (not followed) or of a descriptor; None for a name with nothing there."""
    st = os.fstat(what) if isinstance(what, int) else _lstat(what)
    return None if st is None else (st.st_dev, st.st_ino)


def _unlink(partial: Path) -> None:
    try:
        os.unlink(partial)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("cannot remove %s: %s", partial, exc.strerror)
