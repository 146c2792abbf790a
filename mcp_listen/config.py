"""Settings read once from the environment at startup, validated, then frozen.

An invalid variable never stops the MCP server: a client such as Claude Code would show only
"Failed to connect". The variable falls back to its default, the problem is kept in
`Settings.problems`, logged once on stderr, and every tool call and `doctor` report it with
the fix. The CLI's other commands stop with exit 78. Messages name the variable and never
echo the value, which may be a secret or a private path.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from mcp_listen.contract import languages, limits
from mcp_listen.errors import ConfigError

log = logging.getLogger(__name__)

DEFAULT_OLLAMA_HOST = "http://127.0.0.1:11434"
DEFAULT_MODELS_URL = "https://huggingface.co/ggerganov/whisper.cpp/resolve/main"
DEFAULT_VOICES_URL = "https://huggingface.co/rhasspy/piper-voices/resolve/main"
"""The official Piper voices repository; a voice is at {lang family}/{lang code}/{dataset}/{quality}/NAME.onnx."""
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
MIN_TIMEOUT_S, MAX_TIMEOUT_S = 0.1, 86400
MAX_THREADS = 64
USERINFO_SAFE = ":%!$&'()*+,;=-._~"
"""What `user:password@` keeps unencoded in a URL (RFC 3986 userinfo); `%` keeps what is encoded already."""

T = TypeVar("T")


@dataclass(frozen=True)
class Settings:
    """Everything mcp-listen reads from its environment."""

    recordings_dir: Path = field(default_factory=lambda: default_recordings_dir())
    """Where capture_audio writes WAV files (MCP_LISTEN_RECORDINGS_DIR; default: a private 0700
    folder `mcp-listen-<user>` in the system temp dir, so other users cannot read recordings)."""

    log_level: str = "WARNING"
    """stderr log level (MCP_LISTEN_LOG_LEVEL or --log-level)."""

    whisper_model_dir: Path | None = None
    """First folder searched for whisper models (WHISPER_MODEL_PATH)."""

    models_dir: Path = field(default_factory=lambda: Path(os.path.abspath(Path.home() / ".mcp-listen" / "models")))
    """Per-user whisper model folder, searched second and used by `models pull`."""

    models_url: str = DEFAULT_MODELS_URL
    """Base URL `models pull` downloads ggml-NAME.bin from (MCP_LISTEN_MODELS_URL, for mirrors)."""

    voices_dirs: tuple[Path, ...] = field(
        default_factory=lambda: (Path(os.path.abspath(Path.home() / ".mcp-listen" / "voices")),)
    )
    """Folders searched for Piper voices, in order (MCP_LISTEN_VOICES_PATH, separated by the system's
    path separator, `:` on Linux and macOS); `voices pull` writes into the first."""

    voices_url: str = DEFAULT_VOICES_URL
    """Base URL `voices pull` downloads from (MCP_LISTEN_VOICES_URL, for mirrors), in the Piper
    voices repository's layout."""

    ollama_host: str = DEFAULT_OLLAMA_HOST
    """Ollama daemon address (OLLAMA_HOST; `host`, `host:port` and URLs accepted)."""

    ollama_timeout_s: float = 120.0
    """Seconds to wait for Ollama's reply before giving up (MCP_LISTEN_OLLAMA_TIMEOUT_S)."""

    whisper_threads: int | None = None
    """CPU threads whisper.cpp uses (MCP_LISTEN_WHISPER_THREADS); None: chosen per pass from the
    CPUs free at the time (whisper/threads.py)."""

    defaults: limits.Defaults = limits.Defaults()
    """Defaults of the tools' optional arguments (MCP_LISTEN_WHISPER_MODEL, MCP_LISTEN_LANGUAGE,
    MCP_LISTEN_OLLAMA_MODEL, MCP_LISTEN_SYSTEM_PROMPT, MCP_LISTEN_SILENCE_MS, MCP_LISTEN_VOICE): set once in the
    client's config instead of in every call."""

    problems: tuple[str, ...] = ()
    """What is wrong with the environment, one sentence per variable; empty when all is well."""

    def check(self) -> None:
        """Raise ConfigError naming every invalid variable and how to fix it."""
        if self.problems:
            raise ConfigError(
                " ".join(self.problems) + " Fix the server's environment (the `env` of mcp-listen in the MCP "
                "client's configuration), then restart the server."
            )

    @property
    def model_search_dirs(self) -> list[Path]:
        """Folders searched for a whisper model name, in order."""
        dirs = [self.whisper_model_dir] if self.whisper_model_dir else []
        return [*dirs, self.models_dir]


def default_recordings_dir() -> Path:
    uid = os.getuid() if hasattr(os, "getuid") else os.getpid()
    try:
        import getpass

        owner = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in this environment: the uid will do
        owner = str(uid)
    return Path(tempfile.gettempdir()) / f"mcp-listen-{owner}"


def _read(env: Mapping[str, str], name: str, parse: Callable[[str], T], accepted: str) -> T | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    if not is_text(raw):
        raise ConfigError(f"Environment variable {name} is invalid: {NOT_TEXT}; expected {accepted}.")
    try:
        return parse(raw.strip())
    except (ValueError, TypeError):
        raise ConfigError(f"Environment variable {name} is invalid: expected {accepted}.") from None


NOT_TEXT = "it holds bytes that are not UTF-8 text (a name written in another encoding)"

_DECIMAL = re.compile(r"[0-9]{1,9}(\.[0-9]{1,9})?")
"""How every number in a setting is written: plain ASCII digits. Python's own parsers also take
`1e-300`, `1_0` and non-ASCII digits such as `٣`, which nobody means in a config file."""


def is_text(value: str) -> bool:
    """False for a string holding lone surrogates: bytes that were not UTF-8, which Python's
    `surrogateescape` carried from the environment or a file name. Such a string cannot be
    written to the wire (the SDK's stdout writer dies on it), so it never becomes a setting."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _decimal(raw: str, low: float, high: float) -> float:
    if not _DECIMAL.fullmatch(raw):
        raise ValueError(raw)
    value = float(raw)
    if not (low <= value <= high):
        raise ValueError(raw)
    return value


def _timeout_s(raw: str) -> float:
    return _decimal(raw, MIN_TIMEOUT_S, MAX_TIMEOUT_S)


def _whole(raw: str, low: int, high: int) -> int:
    if "." in raw:
        raise ValueError(raw)
    return int(_decimal(raw, low, high))


def _thread_count(raw: str) -> int:
    return _whole(raw, 1, MAX_THREADS)


def _folder(raw: str) -> Path:
    """A folder as an absolute path, `~` expanded, fixed at start-up: a relative or `~` path used
    literally made a folder named `~` in the server's working directory and returned paths an
    agent resolves elsewhere."""
    path = os.path.expanduser(raw)
    if path.startswith("~"):  # ~someone who does not exist
        raise ValueError(raw)
    return Path(os.path.abspath(path))


def _folders(raw: str) -> tuple[Path, ...]:
    """A search path: folders separated by os.pathsep, each as `_folder` takes it; empty entries
    (a trailing `:`) are skipped, and none at all is invalid."""
    folders = tuple(_folder(part) for part in raw.split(os.pathsep) if part.strip())
    if not folders:
        raise ValueError(raw)
    return folders


def _log_level(raw: str) -> str:
    level = raw.upper()
    if level not in LOG_LEVELS:
        raise ValueError(raw)
    return level


def _url(raw: str) -> str:
    if not raw.startswith(("http://", "https://")):
        raise ValueError(raw)
    return raw.rstrip("/")


def _length(limit: int) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if len(raw) > limit:
            raise ValueError(raw)
        return raw

    return parse


def _silence_ms(raw: str) -> int:
    return _whole(raw, limits.MIN_SILENCE_MS, limits.MAX_SILENCE_MS)


def _boolean(raw: str) -> bool:
    if raw.strip().lower() not in ("true", "false"):
        raise ValueError(raw)
    return raw.strip().lower() == "true"


def _end_of_turn(raw: str) -> str:
    if raw not in limits.END_OF_TURN_MODES:
        raise ValueError(raw)
    return raw


def _name(limit: int) -> Callable[[str], str]:
    """A model name: bounded, and free of control characters (a CR/LF would go raw into messages
    and into the `ollama pull` command they suggest)."""
    bounded = _length(limit)

    def parse(raw: str) -> str:
        if limits.has_control_characters(raw):
            raise ValueError(raw)
        return bounded(raw)

    return parse


def normalize_ollama_host(raw: str) -> str:
    """Accept the forms Ollama accepts: `host`, `host:port`, `:port`, or a URL.

    `user:password@` before the host is kept (ollama/http.py sends it as HTTP basic auth, for an Ollama
    behind a reverse proxy); show the result to people only through `redact_url`.
    """
    host = raw.strip()
    if not host:
        return DEFAULT_OLLAMA_HOST
    scheme = "http"
    if "://" in host:
        scheme, host = host.split("://", 1)
        if scheme not in ("http", "https"):
            raise ValueError(raw)
    if any(c in host for c in "?# \t"):
        raise ValueError(raw)
    userinfo, at, host = host.rpartition("@")  # first: a password may hold an unencoded "/"
    host, _, path = host.partition("/")
    if host.startswith(":"):
        host = "127.0.0.1" + host
    if host.startswith("["):
        has_port = "]:" in host
    else:
        has_port = ":" in host
    if not has_port:
        host += ":443" if scheme == "https" and "://" in raw else ":11434"
    name, _, port = host.rpartition(":")
    if not name or not port.isdigit() or not (0 < int(port) < 65536):
        raise ValueError(raw)
    if name == "0.0.0.0":
        name = "127.0.0.1"
    credentials = f"{quote(userinfo, safe=USERINFO_SAFE)}@" if at else ""  # "/" and "@" encoded, as URLs need
    return f"{scheme}://{credentials}{name}:{port}" + (f"/{path}".rstrip("/") if path else "")


def redact_url(url: str) -> str:
    """`url` as it may appear in a message or a log: `user:password@` replaced by `***@`.

    OLLAMA_HOST may hold credentials; an error result travels to the calling model and into its
    transcript, and logs get copied into bug reports, so neither may carry them.
    """
    scheme, sep, rest = url.partition("://")
    rest = rest if sep else url
    userinfo, at, rest = rest.rpartition("@")  # the last "@": a password may hold "/" or "@"
    shown = f"***@{rest}" if at else rest
    return f"{scheme}{sep}{shown}" if sep else shown


ORT_TELEMETRY_VAR = "ORT_DISABLE_TELEMETRY"


def _disable_onnxruntime_telemetry() -> bool:
    """Set ORT_DISABLE_TELEMETRY=1 for this process and its children; True if it already was.

    Written, never read as a setting (so not in server.json): onnxruntime 1.32 reads it when it
    is imported, and it is the only switch that stops its telemetry (see import_onnxruntime).
    It lives here because this module is the one that touches the environment.
    """
    was_off = os.environ.get(ORT_TELEMETRY_VAR) == "1"
    os.environ[ORT_TELEMETRY_VAR] = "1"
    return was_off


def installed(module: str) -> bool:
    """Whether `module` (an optional extra's) can be imported, found without importing it."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def import_onnxruntime() -> Any:
    """Import onnxruntime with its telemetry off: the only way this package imports it (the VAD
    directly, the voice before Piper imports it).

    onnxruntime 1.32 (Linux) starts Microsoft's 1DS telemetry when the module is imported, not
    when a session is created: it writes a device id and an event database under
    ~/.cache/Microsoft/DeveloperTools/.onnxruntime/, a `.ses` file in the temp folder, and looks
    up mobile.events.data.microsoft.com every few seconds. `disable_telemetry_events()` alone
    stops none of that (measured); only ORT_DISABLE_TELEMETRY set in the environment before the
    import does. We force it ("audio and words never leave the machine" admits no opt-in here)
    and still call disable_telemetry_events() for builds that honour only that.
    """
    imported_before = "onnxruntime" in sys.modules
    if not _disable_onnxruntime_telemetry() and imported_before:
        log.warning("onnxruntime was imported before mcp-listen could turn its telemetry off")
    import onnxruntime

    onnxruntime.disable_telemetry_events()
    return onnxruntime


_SETTINGS = {
    "recordings_dir": ("MCP_LISTEN_RECORDINGS_DIR", _folder, "a folder path"),
    "log_level": ("MCP_LISTEN_LOG_LEVEL", _log_level, "one of " + ", ".join(LOG_LEVELS)),
    "whisper_model_dir": ("WHISPER_MODEL_PATH", _folder, "a folder path"),
    "models_url": ("MCP_LISTEN_MODELS_URL", _url, "an http:// or https:// URL"),
    "voices_dirs": ("MCP_LISTEN_VOICES_PATH", _folders, f"folder paths separated by {os.pathsep!r}"),
    "voices_url": ("MCP_LISTEN_VOICES_URL", _url, "an http:// or https:// URL"),
    "ollama_host": ("OLLAMA_HOST", normalize_ollama_host, "host, host:port or http://host:port"),
    "ollama_timeout_s": (
        "MCP_LISTEN_OLLAMA_TIMEOUT_S",
        _timeout_s,
        f"seconds, a decimal number from {MIN_TIMEOUT_S} to {MAX_TIMEOUT_S}",
    ),
    "whisper_threads": ("MCP_LISTEN_WHISPER_THREADS", _thread_count, f"an integer from 1 to {MAX_THREADS}"),
}

_DEFAULTS = {
    "whisper_model": (
        "MCP_LISTEN_WHISPER_MODEL",
        _name(limits.MAX_WHISPER_MODEL_CHARS),
        "a whisper model name, file name or path",
    ),
    "language": ("MCP_LISTEN_LANGUAGE", languages.normalize, languages.ACCEPTED),
    "model": ("MCP_LISTEN_OLLAMA_MODEL", _name(limits.MAX_LLM_MODEL_CHARS), "an Ollama model name"),
    "prompt": ("MCP_LISTEN_SYSTEM_PROMPT", _length(limits.MAX_PROMPT_CHARS), "a system prompt"),
    "silence_ms": ("MCP_LISTEN_SILENCE_MS", _silence_ms, limits.ACCEPTED["silence_ms"]),
    "end_of_turn": ("MCP_LISTEN_END_OF_TURN", _end_of_turn, limits.ACCEPTED["end_of_turn"]),
    "voice": ("MCP_LISTEN_VOICE", _name(limits.MAX_VOICE_CHARS), "a Piper voice name, file name or path"),
    "barge_in": ("MCP_LISTEN_BARGE_IN", _boolean, limits.ACCEPTED["barge_in"]),
}


def load_settings(env: Mapping[str, str] | None = None, **overrides: object) -> Settings:
    """Read and validate the environment; `overrides` (from CLI flags) win over it.

    An invalid variable keeps its default and adds a sentence to `problems` (see the module doc).
    """
    env = os.environ if env is None else env
    problems: list[str] = []
    values = _read_all(env, _SETTINGS, problems)
    values.update({k: v for k, v in overrides.items() if v is not None})
    defaults = limits.Defaults(**_read_all(env, _DEFAULTS, problems))  # type: ignore[arg-type]
    settings = Settings(**values, defaults=defaults)  # type: ignore[arg-type]
    problems += _derived_folder_problems(settings)
    return replace(settings, problems=tuple(problems))


_DERIVED_FOLDERS = {
    "recordings_dir": "The system temp folder (TMPDIR), where recordings go, has a name that is not UTF-8 text; "
    "set MCP_LISTEN_RECORDINGS_DIR to a folder whose name is.",
    "models_dir": "The home folder (HOME), where whisper models go, has a name that is not UTF-8 text; "
    "set HOME to a folder whose name is.",
    "voices_dirs": "The home folder (HOME), where Piper voices go, has a name that is not UTF-8 text; "
    "set HOME to a folder whose name is, or MCP_LISTEN_VOICES_PATH.",
}


def _derived_folder_problems(settings: Settings) -> list[str]:
    """Folders derived from TMPDIR and HOME: a result or a message names them, so a name that is
    not text would kill the session the moment it is sent (see `is_text`)."""
    return [problem for attr, problem in _DERIVED_FOLDERS.items() if not is_text(str(getattr(settings, attr)))]


def _read_all(env: Mapping[str, str], table: dict[str, tuple], problems: list[str]) -> dict[str, object]:
    values: dict[str, object] = {}
    for attr, (name, parse, accepted) in table.items():
        try:
            value = _read(env, name, parse, accepted)
        except ConfigError as exc:
            problems.append(exc.message)
            continue
        if value is not None:
            values[attr] = value
    return values
