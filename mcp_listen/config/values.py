"""How a setting's value is written and read: plain ASCII decimals, absolute folders, URLs,
bounded names. Each parser raises ValueError for a value it refuses; `read` turns that into a
ConfigError that names the variable and what it accepts (and what is wrong, for a `Refused` that
says it without the value), never the value (it may be a secret or a private path)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from mcp_listen.contract import limits
from mcp_listen.contract.end_words import Refused
from mcp_listen.errors import ConfigError

T = TypeVar("T")

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
MIN_TIMEOUT_S, MAX_TIMEOUT_S = 0.1, 86400
MAX_THREADS = 64


def read(env: Mapping[str, str], name: str, parse: Callable[[str], T], accepted: str) -> T | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    if not is_text(raw):
        raise ConfigError(f"Environment variable {name} is invalid: {NOT_TEXT}; expected {accepted}.")
    try:
        return parse(raw.strip())
    except Refused as exc:  # what is wrong, in words that never hold the value
        raise ConfigError(f"Environment variable {name} is invalid ({exc}): expected {accepted}.") from None
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


def decimal(raw: str, low: float, high: float) -> float:
    if not _DECIMAL.fullmatch(raw):
        raise ValueError(raw)
    value = float(raw)
    if not (low <= value <= high):
        raise ValueError(raw)
    return value


def timeout_s(raw: str) -> float:
    return decimal(raw, MIN_TIMEOUT_S, MAX_TIMEOUT_S)


def whole(raw: str, low: int, high: int) -> int:
    if "." in raw:
        raise ValueError(raw)
    return int(decimal(raw, low, high))


def thread_count(raw: str) -> int:
    return whole(raw, 1, MAX_THREADS)


def folder(raw: str) -> Path:
    """A folder as an absolute path, `~` expanded, fixed at start-up: a relative or `~` path used
    literally made a folder named `~` in the server's working directory and returned paths an
    agent resolves elsewhere."""
    path = os.path.expanduser(raw)
    if path.startswith("~"):  # ~someone who does not exist
        raise ValueError(raw)
    return Path(os.path.abspath(path))


def folders(raw: str) -> tuple[Path, ...]:
    """A search path: folders separated by os.pathsep, each as `folder` takes it; empty entries
    (a trailing `:`) are skipped, and none at all is invalid."""
    folders = tuple(folder(part) for part in raw.split(os.pathsep) if part.strip())
    if not folders:
        raise ValueError(raw)
    return folders


def log_level(raw: str) -> str:
    level = raw.upper()
    if level not in LOG_LEVELS:
        raise ValueError(raw)
    return level


def url(raw: str) -> str:
    if not raw.startswith(("http://", "https://")):
        raise ValueError(raw)
    return raw.rstrip("/")


def length(limit: int) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if len(raw) > limit:
            raise ValueError(raw)
        return raw

    return parse


def silence_ms(raw: str) -> int:
    return whole(raw, limits.MIN_SILENCE_MS, limits.MAX_SILENCE_MS)


def max_pause_ms(raw: str) -> int:
    return whole(raw, limits.MIN_MAX_PAUSE_MS, limits.MAX_MAX_PAUSE_MS)


def boolean(raw: str) -> bool:
    if raw.strip().lower() not in ("true", "false"):
        raise ValueError(raw)
    return raw.strip().lower() == "true"


def end_of_turn(raw: str) -> str:
    if raw not in limits.END_OF_TURN_MODES:
        raise ValueError(raw)
    return raw


def name(limit: int) -> Callable[[str], str]:
    """A model name: bounded, and free of control characters (a CR/LF would go raw into messages
    and into the `ollama pull` command they suggest)."""
    bounded = length(limit)

    def parse(raw: str) -> str:
        if limits.has_control_characters(raw):
            raise ValueError(raw)
        return bounded(raw)

    return parse
