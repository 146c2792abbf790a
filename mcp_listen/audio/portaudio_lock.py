"""Who may touch PortAudio: one stream at a time as a rule, two that share it for a conversation turn,
and a device rescan only when no stream is open.

A rescan re-initialises PortAudio (the only way to see a hot-plugged device), which would pull the
library out from under an open stream; so a stream holds this lock from before its open until it is
closed, in the thread that makes the blocking PortAudio calls, and a rescan only tries it. Opening a
stream normally takes the lock alone (a new recording waits for the previous stream to close, as it
always did). `converse` opens the microphone and then the speaker, both held at once: each takes the
`shared` side, which admits other shared holders but no lone one and no rescan.
"""

from __future__ import annotations

import threading
from typing import Protocol


class StreamLock(Protocol):
    """What a stream's opener takes and its audio thread releases: a threading.Lock's shape."""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool: ...

    def release(self) -> None: ...


class PortAudioLock:
    """Held alone by one stream (acquire/release, like threading.Lock), or by several through `shared`."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._alone = False
        self._sharing = 0
        self.shared: StreamLock = _Shared(self)
        """The side that a stream open beside another one (converse's microphone and speaker) takes."""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Take PortAudio alone: once no stream and no rescan holds it (a rescan uses blocking=False)."""
        return self._take(lambda: not self._alone and not self._sharing, blocking, timeout, alone=True)

    def release(self) -> None:
        with self._changed:
            if self._alone:
                self._alone = False
            elif self._sharing:
                self._sharing -= 1
            else:
                raise RuntimeError("release of an unheld PortAudio lock")
            self._changed.notify_all()

    def locked(self) -> bool:
        return self._alone or self._sharing > 0

    def __enter__(self) -> PortAudioLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def _take_shared(self, blocking: bool, timeout: float) -> bool:
        return self._take(lambda: not self._alone, blocking, timeout, alone=False)

    def _take(self, free: _Free, blocking: bool, timeout: float, *, alone: bool) -> bool:
        with self._changed:
            if not blocking:
                taken = free()
            else:
                taken = self._changed.wait_for(free, None if timeout < 0 else timeout)
            if taken:
                if alone:
                    self._alone = True
                else:
                    self._sharing += 1
            return taken


class _Free(Protocol):
    def __call__(self) -> bool: ...


class _Shared:
    """PortAudioLock's shared side, in threading.Lock's shape for the stream openers."""

    def __init__(self, lock: PortAudioLock) -> None:
        self._lock = lock

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock._take_shared(blocking, timeout)

    def release(self) -> None:
        self._lock.release()
