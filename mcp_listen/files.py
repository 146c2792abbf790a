"""How mcp-listen opens files it does not trust: the flag sets, one home for them.

Recordings, the CLI's `--out` file, a WAV to transcribe, whisper models and `models pull`
partials all open files whose names a caller, a user or another process chose. Pure: it
imports nothing of the package, so every layer may use it.
"""

from __future__ import annotations

import os

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BINARY = getattr(os, "O_BINARY", 0)

NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC | _BINARY
"""Create a file that must not exist yet: nothing already at the name (a planted symlink, a
leftover) is ever written through."""

READ_ANY_KIND = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | CLOEXEC | _BINARY
"""Open for reading without blocking whatever the name is (a FIFO or a device would block a
plain open forever); the caller then refuses anything but a regular file by `fstat`."""
