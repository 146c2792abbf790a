"""`validate_model_file`: prove whisper.cpp can load and run a model file here, before it sees it.

The file is opened as a regular file only (whisper/model_file.py), walked the way this build's loader
reads it (whisper/ggml.py, cached per file), its memory need checked against the room now
(whisper/memory.py), and on request test-loaded ahead in a child process (whisper/probe.py).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from mcp_listen.errors import TranscriptionError, command
from mcp_listen.whisper import ggml
from mcp_listen.whisper.memory import _check_memory, _instances, _is_resident
from mcp_listen.whisper.model_file import ModelKey, _ModelFile, _opened, _os_error
from mcp_listen.whisper.names import short_name
from mcp_listen.whisper.probe import _start_probe

_walked: dict[ModelKey, ggml.Model] = {}
_walked_lock = threading.Lock()


def validate_model_file(path: Path, threads: int | None = None, *, probe_ahead: bool = False) -> None:
    """Raise TranscriptionError unless this whisper.cpp build can load and run `path` here.

    The file must be a regular file holding a whole, well-typed whisper model (whisper/ggml.py: a few
    ms of seeks for any size, cached by device, inode, size and mtime, so a re-downloaded file
    is checked again), and the memory it needs must be available now (never cached).
    `probe_ahead` also starts the test load (_probe) in the background, for a caller that is
    about to record: it then runs while nobody has spoken yet, not after.
    """
    with _opened(Path(path).expanduser()) as mf:
        _check(mf, threads)
        if probe_ahead and not _is_resident(mf.key):
            _start_probe(mf)


def _check(mf: _ModelFile, threads: int | None) -> ggml.Model:
    model = _walk(mf)
    _check_memory(mf, model, threads or _default_threads())
    return model


def _walk(mf: _ModelFile) -> ggml.Model:
    with _walked_lock:
        known = _walked.get(mf.key)
    if known is not None:
        return known
    try:
        with open(mf.fd, "rb", closefd=False) as f:
            f.seek(0)
            model = ggml.read_model(f, mf.st.st_size)
    except ggml.Invalid as exc:
        raise TranscriptionError(_invalid_message(mf.path, str(exc)), code="model_invalid") from None
    except OSError as exc:
        raise _os_error(mf.path, exc) from None
    with _walked_lock:
        if len(_walked) > 64:
            _walked.clear()
        _walked[mf.key] = model
    return model


def _invalid_message(path: Path, why: str) -> str:
    pull = command("models", "pull", short_name(path.name))
    if why.startswith("truncated"):
        return f"Whisper model {path} is {why}: re-download it with: {pull}"
    return f"{path} is not a usable whisper model: {why}. Replace it, or download one with: {pull}"


def _default_threads() -> int:
    """Threads the estimate assumes when the caller does not say: the resident Transcriber's."""
    live = [tr.threads for tr in list(_instances)]
    return max(live) if live else max(1, min(4, os.cpu_count() or 1))
