"""Hand freed memory back to the OS: a long-lived server should not keep its peak forever.

glibc keeps memory that whisper.cpp, onnxruntime and Python free in its heaps, and gives
every thread that allocates its own heap ("arena"). For a server whose calls spike (a whisper
pass, a 20 s recording) and then sit idle for minutes, both keep resident memory at the peak.
Measured on a voice_query server with tiny.en: two arenas instead of one per thread and a fixed
mmap threshold, -3 to -5 MB; malloc_trim after each call, -5 to -8 MB. Elsewhere than glibc
(macOS, musl) these are no-ops.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from functools import lru_cache
from typing import Any

M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
"""mallopt parameter numbers (glibc malloc.h)."""
ARENAS = 2
"""Enough for the two threads that allocate at once (recording + whisper) without contention."""
MMAP_THRESHOLD = 128 * 1024
"""glibc's initial value, kept fixed: allocations this big get their own mapping and go back to the
OS when freed (by default glibc raises the threshold after the first such free, up to 32 MB)."""


@lru_cache(maxsize=1)
def _libc() -> Any:
    """glibc, or None when the C library is another one (no mallopt/malloc_trim)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    if libc is None or not hasattr(libc, "malloc_trim") or not hasattr(libc, "mallopt"):
        return None
    return libc


def limit_arenas() -> bool:
    """Cap glibc's per-thread heaps and keep big buffers out of them; call before any thread starts."""
    libc = _libc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_ARENA_MAX, ARENAS) and libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def release_free_memory() -> bool:
    """Return free heap pages to the OS (malloc_trim); True when something was released."""
    libc = _libc()
    return bool(libc is not None and libc.malloc_trim(0))


def release_in_background() -> None:
    """release_free_memory() off the caller's thread: a tool's result is never delayed by it."""
    threading.Thread(target=release_free_memory, name="mcp-listen-trim", daemon=True).start()
