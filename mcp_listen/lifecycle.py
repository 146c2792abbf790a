"""Serving over stdio with a clean shutdown.

stdin closing ends the server with exit 0. SIGINT or SIGTERM stop every
recording in flight (the microphone is released, nothing is left on disk) and
exit within 2 s with 130 or 143; a second signal exits at once. A stuck native
call (a whisper.cpp transcription cannot be interrupted) never holds the
process: after the grace period it exits anyway.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from typing import Any

from mcp_listen.config import Settings

log = logging.getLogger(__name__)

GRACE_S = 1.5


def serve(settings: Settings) -> int:
    import anyio

    from mcp_listen.pipeline import Engine
    from mcp_listen.server import serve_stdio

    if sys.stdin.isatty():
        from mcp_listen.cli import WAITING_HINT

        print(WAITING_HINT, file=sys.stderr, flush=True)
    engine = Engine(settings)
    threading.Thread(target=_sweep, args=(settings,), name="mcp-listen-sweep", daemon=True).start()
    _install_signal_handlers(engine)
    try:
        anyio.run(serve_stdio, engine)
    except KeyboardInterrupt:
        _exit_after_cleanup(engine, 128 + signal.SIGINT)
    _exit_after_cleanup(engine, 0)
    return 0


def _sweep(settings: Settings) -> None:
    from mcp_listen import wavfile

    wavfile.sweep(settings.recordings_dir)


def _install_signal_handlers(engine: Any) -> None:
    received: list[int] = []

    def handle(signum: int, frame: Any) -> None:
        if received:
            os._exit(128 + signum)
        received.append(signum)
        log.info("received signal %d: stopping", signum)
        threading.Thread(target=_exit_after_cleanup, args=(engine, 128 + signum), daemon=True).start()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handle)


def _exit_after_cleanup(engine: Any, code: int) -> None:
    """Stop recordings, wait (bounded) for the microphone to be released, then exit with `code`."""
    engine.shutdown.set()
    deadline = time.monotonic() + GRACE_S
    while engine.recorder.active is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - the pipe may be gone; exiting anyway
            pass
    os._exit(code)
