"""The ListenError family: every failure a user can meet, with what to do next.

Each error has a stable machine-readable ``code`` (part of the public contract:
callers branch on it), the pipeline ``stage`` it belongs to (``capture``,
``transcription``, ``llm``, ``speak`` or ``None`` for argument and setup errors) and the
process exit code the CLI uses for it (sysexits.h values).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

EXIT_OK = 0
EXIT_USAGE = 64
EXIT_UNAVAILABLE = 69
EXIT_INTERNAL = 70
EXIT_CONFIG = 78
EXIT_INTERRUPTED = 130
EXIT_STDOUT_CLOSED = 141
"""The server's client closed the read end of our stdout: 128 + SIGPIPE, what a program killed by
the broken pipe returns (Python ignores SIGPIPE, so the server exits with it itself)."""


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
    server that way (there is no `mcp-listen` on PATH then, and the interpreter's path is a
    temporary cache that may be gone tomorrow), else this interpreter's full path. Each word is
    shell-quoted: a model name can be caller input."""
    return f"{_self_command()} {shlex.join(words)}"


@dataclass(frozen=True)
class Launcher:
    """How the temporary environment this process runs in was made, and so how to run it again."""

    runner: str
    """`pipx` or `uvx`."""
    command: str
    """What starts mcp-listen that way (`pipx run mcp-listen`, `uvx --from /x.whl mcp-listen`)."""
    install: str
    """What installs it for good (`pipx install mcp-listen`, `uv tool install mcp-listen`)."""


PACKAGE = "mcp-listen"
_UV_CACHE_BUCKET = re.compile(r"(archive|environments|builds)-v[0-9]+")
"""The folders of uv's cache that hold the environments `uvx` and `uv run --with` make."""


def temporary_launcher(prefix: Path | None = None) -> Launcher | None:
    """The pipx or uv cache environment `prefix` (default sys.prefix) is, or None for any other.

    `pipx run` makes a venv in its cache (`~/.cache/pipx/<hash>` since pipx 1.5, `$PIPX_HOME/.cache/<hash>`
    before or with PIPX_HOME set), holding pipx_metadata.json with the spec it was given; `pipx install`
    makes one in `venvs/NAME` with the same file, which is no cache. `uvx` makes one in uv's cache
    (`archive-v0/<hash>`), whose pyvenv.cfg names uv. Both caches are emptied at will: a path into
    them must never reach a remedy or a client's configuration.
    """
    prefix = Path(sys.prefix) if prefix is None else prefix
    if (prefix / "pipx_metadata.json").is_file() and prefix.parent.name != "venvs":
        spec = _pipx_spec(prefix)
        return Launcher("pipx", _with_spec("pipx run --spec", spec), f"pipx install {shlex.quote(spec)}")
    if _UV_CACHE_BUCKET.fullmatch(prefix.parent.name) and _made_by_uv(prefix):
        spec = _direct_url_spec(prefix)
        return Launcher("uvx", _with_spec("uvx --from", spec), f"uv tool install {shlex.quote(spec)}")
    return None


def _with_spec(run: str, spec: str) -> str:
    """`pipx run mcp-listen` for the package from the index, `pipx run --spec SPEC mcp-listen` else."""
    bare = run.rsplit(" ", 1)[0]
    return f"{bare} {PACKAGE}" if spec == PACKAGE else f"{run} {shlex.quote(spec)} {PACKAGE}"


def _pipx_spec(prefix: Path) -> str:
    """What `pipx run --spec` was given (a path, a wheel, `mcp-listen[speak]`), or the package name."""
    try:
        main = json.loads((prefix / "pipx_metadata.json").read_text(encoding="utf-8"))["main_package"]
        spec = main["package_or_url"]
    except (OSError, ValueError, KeyError, TypeError):
        return PACKAGE
    return spec if _plain(spec) else PACKAGE


def _made_by_uv(prefix: Path) -> bool:
    try:
        lines = (prefix / "pyvenv.cfg").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return False
    return any(line.split("=", 1)[0].strip() == "uv" for line in lines)


def _direct_url_spec(prefix: Path) -> str:
    """The path `uvx --from` was given, from the install's direct_url.json (PEP 610); the package name
    when it came from the index."""
    from urllib.request import url2pathname

    info = "site-packages/mcp_listen-*.dist-info/direct_url.json"
    found = sorted([*prefix.glob(f"lib/python*/{info}"), *prefix.glob(f"Lib/{info}")])
    try:
        url = json.loads(found[0].read_text(encoding="utf-8"))["url"] if found else ""
    except (OSError, ValueError, KeyError, TypeError):
        return PACKAGE
    if not isinstance(url, str) or not url.startswith("file://"):
        return PACKAGE
    path = url2pathname(urlparse(url).path)
    return path if _plain(path) else PACKAGE


def _plain(spec: object) -> bool:
    """A spec a remedy may print: short text without control characters."""
    return isinstance(spec, str) and 0 < len(spec) <= 1000 and all(ord(c) >= 0x20 and c != "\x7f" for c in spec)


@functools.lru_cache(maxsize=1)
def _self_command() -> str:
    launcher = temporary_launcher()
    if launcher is not None:
        return launcher.command
    script = Path(sys.prefix) / ("Scripts/mcp-listen.exe" if os.name == "nt" else "bin/mcp-listen")
    on_path = shutil.which("mcp-listen")
    if on_path and script.exists() and Path(on_path).resolve() == script.resolve():
        return "mcp-listen"
    if script.exists():
        return str(script)
    return f"{sys.executable} -m mcp_listen"
