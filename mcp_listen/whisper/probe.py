"""The probe: load and run a whisper model once in a child process before this process does.

whisper.cpp answers many bad inputs with abort(); in the child (probe_child.py) that kills
the probe, not the server. Runs are kept per file (device, inode, size, mtime).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_listen.errors import TranscriptionError, command
from mcp_listen.whisper.memory import _rlimit_room
from mcp_listen.whisper.model_file import ModelKey, _ModelFile
from mcp_listen.whisper.names import short_name

log = logging.getLogger(__name__)

_exiting = threading.Event()
"""Set at interpreter exit (transcriber's exit hook): a running probe is killed, whisper.cpp aborts."""


def _whisper_module() -> Any:
    """pywhispercpp's raw bindings, imported on first use; a broken install is a named error."""
    try:
        import _pywhispercpp as pw
    except ImportError as exc:
        raise TranscriptionError(
            f"Cannot load whisper.cpp: pywhispercpp is not installed ({exc}). Reinstall mcp-listen.",
            code="model_load_failed",
        ) from exc
    return pw


PROBE_SCRIPT = Path(__file__).with_name("probe_child.py")
PROBE_EXIT_REFUSED = 3


@dataclass
class _ProbeRun:
    """One probe of one file: started ahead (while the user is still to speak) or by the load."""

    done: threading.Event = field(default_factory=threading.Event)
    error: str | None = None


_probes: dict[ModelKey, _ProbeRun] = {}
_probes_lock = threading.Lock()


def _probe(mf: _ModelFile) -> None:
    """Load and run the model once in a child process before this process does.

    whisper.cpp answers many bad inputs with abort(): a file our checks missed, or memory that
    ran out anyway, would kill the server with everything it was doing. The child opens the
    same file (the descriptor is passed down), keeps this process's memory headroom under its
    resource limits, loads, transcribes 1 s of silence and exits; its exit status is the
    verdict. A pass is remembered per file (device, inode, size, mtime); a failure is reported
    once, then forgotten (memory may be free next time).
    """
    run = _start_probe(mf)
    run.done.wait()
    if run.error is not None:
        with _probes_lock:
            if _probes.get(mf.key) is run:
                del _probes[mf.key]
        raise TranscriptionError(run.error, code="model_invalid")


def _probe_settled(key: ModelKey) -> None:
    """Wait for a probe of this file that is running (started ahead), if any."""
    with _probes_lock:
        run = _probes.get(key)
    if run is not None:
        run.done.wait()


def _start_probe(mf: _ModelFile) -> _ProbeRun:
    """The probe of this file: the one already running or passed, else a new one in a thread."""
    with _probes_lock:
        run = _probes.get(mf.key)
        if run is not None and run.error is None:
            return run
        run = _probes[mf.key] = _ProbeRun()
    own = _ModelFile(mf.path, os.dup(mf.fd), mf.st)  # the thread's own descriptor of the same file
    threading.Thread(target=_run_probe, args=(own, run), name="mcp-listen-probe", daemon=True).start()
    return run


def _run_probe(mf: _ModelFile, run: _ProbeRun) -> None:
    started = time.monotonic()
    try:
        _whisper_module()  # mapped here first, so the headroom handed down is what the load will have
        proc = subprocess.Popen(
            [sys.executable, "-I", str(PROBE_SCRIPT), str(mf.fd), mf.loader_path, *_probe_rooms()],
            stdin=subprocess.DEVNULL,  # never the server's stdin (the MCP wire)
            stdout=subprocess.DEVNULL,  # nor its stdout
            stderr=subprocess.PIPE,
            pass_fds=(mf.fd,),
        )
        err = _wait_probe(proc, timeout=PROBE_TIMEOUT_S + mf.st.st_size / PROBE_READ_BYTES_S)
        if proc.returncode != 0:
            run.error = _probe_message(mf.path, proc.returncode, err)
    except (OSError, TranscriptionError) as exc:
        run.error = f"Cannot test-load whisper model {mf.path}: {exc}"
    finally:
        os.close(mf.fd)
        log.debug("whisper probe of %s: %s after %.0f ms", mf.path.name, run.error or "ok", _ms_since(started))
        run.done.set()


PROBE_TIMEOUT_S = 30.0
PROBE_READ_BYTES_S = 20e6  # a 3 GB large model read from a slow disk still gets its time


def _probe_rooms() -> list[str]:
    """This process's headroom under RLIMIT_AS and RLIMIT_DATA, for the probe to keep ("-1": none)."""
    rooms = (_rlimit_room("RLIMIT_AS", "VmSize"), _rlimit_room("RLIMIT_DATA", "VmData"))
    return [str(-1 if room is None else max(room, 0)) for room in rooms]


def _wait_probe(proc: subprocess.Popen, timeout: float) -> str:
    """The probe's stderr once it ended; killed at the timeout or when this process exits."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            _, err = proc.communicate(timeout=0.1)
            return err.decode("utf-8", "replace")
        except subprocess.TimeoutExpired:
            if _exiting.is_set() or time.monotonic() > deadline:
                proc.kill()
                _, err = proc.communicate()
                return err.decode("utf-8", "replace") + "\n(stopped: took too long)"


def _probe_message(path: Path, status: int, err: str) -> str:
    lines = [line.strip() for line in err.splitlines() if line.strip()]
    detail = lines[-1][:300] if lines else "no message"
    pull = command("models", "pull", short_name(path.name))
    if status == PROBE_EXIT_REFUSED:
        return f"whisper.cpp cannot load {path}: {detail}. Replace it, or download one with: {pull}"
    signalled = status < 0 and -status in signal.valid_signals()
    how = f"signal {signal.Signals(-status).name}" if signalled else f"exit {status}"
    return (
        f"whisper.cpp crashed ({how}: {detail}) loading {path} in a test process, so this server did not "
        f"load it. If memory is short, free some or use a smaller model; else replace the file: {pull}"
    )


def _ms_since(started: float) -> float:
    return (time.monotonic() - started) * 1000
