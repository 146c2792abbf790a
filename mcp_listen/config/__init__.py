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
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from mcp_listen.config import values
from mcp_listen.config.urls import DEFAULT_OLLAMA_HOST, normalize_ollama_host
from mcp_listen.contract import end_words, languages, limits
from mcp_listen.errors import ConfigError

log = logging.getLogger(__name__)

DEFAULT_MODELS_URL = "https://huggingface.co/ggerganov/whisper.cpp/resolve/main"
DEFAULT_VOICES_URL = "https://huggingface.co/rhasspy/piper-voices/resolve/main"
"""The official Piper voices repository; a voice is at {lang family}/{lang code}/{dataset}/{quality}/NAME.onnx."""


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
    MCP_LISTEN_OLLAMA_MODEL, MCP_LISTEN_SYSTEM_PROMPT, MCP_LISTEN_SILENCE_MS, MCP_LISTEN_END_OF_TURN,
    MCP_LISTEN_MAX_PAUSE_MS, MCP_LISTEN_VOICE, MCP_LISTEN_BARGE_IN, MCP_LISTEN_VOCABULARY,
    MCP_LISTEN_END_WORDS): set once in the client's config instead of in every call."""

    user_defaults: frozenset[str] = frozenset()
    """The `defaults` the environment set (their field names): MCP_LISTEN_VOICE set means that voice
    even when it is missing, unset lets the voices installed stand in (voice/store.py's default_voice)."""

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


_SETTINGS = {
    "recordings_dir": ("MCP_LISTEN_RECORDINGS_DIR", values.folder, "a folder path"),
    "log_level": ("MCP_LISTEN_LOG_LEVEL", values.log_level, "one of " + ", ".join(values.LOG_LEVELS)),
    "whisper_model_dir": ("WHISPER_MODEL_PATH", values.folder, "a folder path"),
    "models_url": ("MCP_LISTEN_MODELS_URL", values.url, "an http:// or https:// URL"),
    "voices_dirs": ("MCP_LISTEN_VOICES_PATH", values.folders, f"folder paths separated by {os.pathsep!r}"),
    "voices_url": ("MCP_LISTEN_VOICES_URL", values.url, "an http:// or https:// URL"),
    "ollama_host": ("OLLAMA_HOST", normalize_ollama_host, "host, host:port or http://host:port"),
    "ollama_timeout_s": (
        "MCP_LISTEN_OLLAMA_TIMEOUT_S",
        values.timeout_s,
        f"seconds, a decimal number from {values.MIN_TIMEOUT_S} to {values.MAX_TIMEOUT_S}",
    ),
    "whisper_threads": (
        "MCP_LISTEN_WHISPER_THREADS",
        values.thread_count,
        f"an integer from 1 to {values.MAX_THREADS}",
    ),
}

_DEFAULTS = {
    "whisper_model": (
        "MCP_LISTEN_WHISPER_MODEL",
        values.name(limits.MAX_WHISPER_MODEL_CHARS),
        "a whisper model name, file name or path",
    ),
    "language": ("MCP_LISTEN_LANGUAGE", languages.normalize, languages.ACCEPTED),
    "model": ("MCP_LISTEN_OLLAMA_MODEL", values.name(limits.MAX_LLM_MODEL_CHARS), "an Ollama model name"),
    "prompt": ("MCP_LISTEN_SYSTEM_PROMPT", values.length(limits.MAX_PROMPT_CHARS), "a system prompt"),
    "silence_ms": ("MCP_LISTEN_SILENCE_MS", values.silence_ms, limits.ACCEPTED["silence_ms"]),
    "end_of_turn": ("MCP_LISTEN_END_OF_TURN", values.end_of_turn, limits.ACCEPTED["end_of_turn"]),
    "max_pause_ms": ("MCP_LISTEN_MAX_PAUSE_MS", values.max_pause_ms, limits.ACCEPTED["max_pause_ms"]),
    "voice": ("MCP_LISTEN_VOICE", values.name(limits.MAX_VOICE_CHARS), "a Piper voice name, file name or path"),
    "barge_in": ("MCP_LISTEN_BARGE_IN", values.boolean, limits.ACCEPTED["barge_in"]),
    "vocabulary": (
        "MCP_LISTEN_VOCABULARY",
        values.name(limits.MAX_VOCABULARY_CHARS),
        limits.ACCEPTED["vocabulary"],
    ),
    "end_words": (
        "MCP_LISTEN_END_WORDS",
        end_words.parse_setting,
        f'words or short phrases that end the turn when said last, separated by commas ("over, send it"): at most '
        f"{limits.MAX_END_WORDS}, each 1 to {limits.MAX_END_WORD_WORDS} words and at most "
        f"{limits.MAX_END_WORD_CHARS} characters with a letter, no control characters",
    ),
}


def load_settings(env: Mapping[str, str] | None = None, **overrides: object) -> Settings:
    """Read and validate the environment; `overrides` (from CLI flags) win over it.

    An invalid variable keeps its default and adds a sentence to `problems` (see the module doc).
    """
    env = os.environ if env is None else env
    problems: list[str] = []
    found = _read_all(env, _SETTINGS, problems)
    found.update({k: v for k, v in overrides.items() if v is not None})
    chosen = _read_all(env, _DEFAULTS, problems)
    defaults = limits.Defaults(**chosen)  # type: ignore[arg-type]
    if defaults.max_pause_ms < defaults.silence_ms:
        problems.append(_PAUSE_UNDER_SILENCE)
        defaults = replace(defaults, max_pause_ms=max(limits.DEFAULT_MAX_PAUSE_MS, defaults.silence_ms))
    settings = Settings(**found, defaults=defaults, user_defaults=frozenset(chosen))  # type: ignore[arg-type]
    problems += _derived_folder_problems(settings)
    return replace(settings, problems=tuple(problems))


_PAUSE_UNDER_SILENCE = (
    "MCP_LISTEN_MAX_PAUSE_MS is shorter than MCP_LISTEN_SILENCE_MS: the longest pause end_of_turn smart holds "
    "must be at least the silence that ends a turn. Raise MCP_LISTEN_MAX_PAUSE_MS or lower MCP_LISTEN_SILENCE_MS."
)


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
    return [problem for attr, problem in _DERIVED_FOLDERS.items() if not values.is_text(str(getattr(settings, attr)))]


def _read_all(env: Mapping[str, str], table: dict[str, tuple], problems: list[str]) -> dict[str, object]:
    found: dict[str, object] = {}
    for attr, (name, parse, accepted) in table.items():
        try:
            value = values.read(env, name, parse, accepted)
        except ConfigError as exc:
            problems.append(exc.message)
            continue
        if value is not None:
            found[attr] = value
    return found
