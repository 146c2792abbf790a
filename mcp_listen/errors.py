"""The ListenError family: every failure a user can meet, with what to do next.

Each error has a stable machine-readable ``code`` (part of the public contract:
callers branch on it), the pipeline ``stage`` it belongs to (``capture``,
``transcription``, ``llm``, ``speak`` or ``None`` for argument and setup errors) and the
process exit code the CLI uses for it (sysexits.h values).
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import sys
from pathlib import Path

EXIT_OK = 0
EXIT_USAGE = 64
EXIT_UNAVAILABLE = 69
EXIT_INTERNAL = 70
EXIT_CONFIG = 78
EXIT_INTERRUPTED = 130


class ListenError(Exception):
    """Base of every error mcp-listen reports to a user; the message says what to do."""

    code = "internal_error"
    stage: str | None = None
    exit_code = EXIT_INTERNAL

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        stage: str | None = None,
        extra: dict[str, object] | None = None,
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        if stage is not None:
            self.stage = stage
        self.extra = dict(extra or {})
        """Result fields the contract carries beside the error (e.g. the transcription of an empty reply)."""

    @property
    def message(self) -> str:
        return str(self)

    def to_dict(self) -> dict[str, str | None]:
        """The machine-readable form carried in a tool result's structured content."""
        return {"stage": self.stage, "code": self.code, "message": self.message}


class InvalidArgument(ListenError):
    """A tool argument or CLI option is out of its accepted range; nothing was recorded."""

    code = "invalid_argument"
    exit_code = EXIT_USAGE


class ConfigError(ListenError):
    """An environment variable holds a value mcp-listen cannot use; the server refuses to start."""

    code = "invalid_config"
    exit_code = EXIT_CONFIG


class CaptureError(ListenError):
    """The microphone could not be opened, stopped delivering audio, or the WAV could not be written."""

    code = "capture_failed"
    stage = "capture"
    exit_code = EXIT_UNAVAILABLE


class PortAudioMissing(CaptureError):
    code = "portaudio_missing"


class DeviceNotFound(CaptureError):
    code = "device_not_found"


class DeviceBusy(CaptureError):
    """Only one recording at a time: the microphone is already open for another call."""

    code = "busy"


class DeviceLost(CaptureError):
    code = "device_lost"


class StorageError(CaptureError):
    code = "storage_error"


class VADError(CaptureError):
    """The bundled Silero VAD model is missing, unreadable or not the network mcp-listen expects:
    stop-on-silence cannot decide when speech ends (a client sees this code, not "Internal error")."""

    code = "vad_unavailable"


class TranscriptionError(ListenError):
    """The whisper model is missing, invalid, failed to load, or transcription failed."""

    code = "transcription_failed"
    stage = "transcription"
    exit_code = EXIT_UNAVAILABLE


class LLMError(ListenError):
    """Ollama is unreachable, lacks the model, answered with an error, timed out or replied empty."""

    code = "llm_failed"
    stage = "llm"
    exit_code = EXIT_UNAVAILABLE


class VoiceError(ListenError):
    """A Piper voice is missing, invalid (a hostile or broken .onnx / .onnx.json), or could not be pulled."""

    code = "voice_failed"
    stage = "speak"
    exit_code = EXIT_UNAVAILABLE


class Cancelled(ListenError):
    """The caller cancelled the call (MCP notifications/cancelled, Ctrl-C, shutdown)."""

    code = "cancelled"
    exit_code = EXIT_INTERRUPTED


def command(*words: str) -> str:
    """A remedy's command line, in the form the user can run: `mcp-listen models pull base.en`
    after an install, `pipx run mcp-listen ...` / `uvx mcp-listen ...` when the client starts the
    server that way (there is no `mcp-listen` on PATH then), else this interpreter's full path.
    Each word is shell-quoted: a model name can be caller input."""
    return f"{_self_command()} {shlex.join(words)}"


@functools.lru_cache(maxsize=1)
def _self_command() -> str:
    prefix = Path(sys.prefix).as_posix()
    if "/pipx/.cache/" in prefix or "/pipx/cache/" in prefix:
        return "pipx run mcp-listen"
    if "/uv/archive-v" in prefix or "/uv/environments-v" in prefix or "/uv/builds-v" in prefix:
        return "uvx mcp-listen"
    script = Path(sys.prefix) / ("Scripts/mcp-listen.exe" if os.name == "nt" else "bin/mcp-listen")
    on_path = shutil.which("mcp-listen")
    if on_path and script.exists() and Path(on_path).resolve() == script.resolve():
        return "mcp-listen"
    if script.exists():
        return str(script)
    return f"{sys.executable} -m mcp_listen"
