"""The `end_words` argument and MCP_LISTEN_END_WORDS: the words or short phrases the user says last to end
their turn ("over", "send it", "c'est tout"), checked as hostile input before anything opens.

A refusal says what is wrong with which entry (its number, its length, the count), never the words: they are
the user's own, and a message can end up in a log line. Pure: no pydantic here (contract/arguments.py builds
the argument's type on `parse_argument`), so config/values.py reads the variable with the same rules.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from mcp_listen.contract.limits import (
    MAX_END_WORD_CHARS,
    MAX_END_WORD_WORDS,
    MAX_END_WORDS,
    Defaults,
    has_control_characters,
)


class Refused(ValueError):
    """What is wrong with a list of end words, in words that never hold them (safe to show and to log)."""


def chosen(args: Any, defaults: Defaults) -> tuple[str, ...]:
    """The end words a call listens for: its `end_words` argument (`[]` for none), else the default
    (MCP_LISTEN_END_WORDS); none for a tool that does not take them (capture_audio)."""
    if not hasattr(args, "end_words"):
        return ()
    return defaults.end_words if args.end_words is None else tuple(args.end_words)


def parse_argument(value: Any) -> Any:
    """The tool argument: a JSON array of strings (`null` is left to mean the default), as a tuple of the
    phrases with their spaces tidied, duplicates dropped. `[]` means none."""
    if value is None:
        return None
    if isinstance(value, str):
        raise Refused(f'a string of {len(value)} characters (pass an array of strings, such as ["over"])')
    if not isinstance(value, (list, tuple)):
        raise Refused(_kind(value))
    return phrases(value)


def parse_setting(raw: str) -> tuple[str, ...]:
    """MCP_LISTEN_END_WORDS: the phrases separated by commas ("over, send it"), checked."""
    return phrases(split(raw))


def split(raw: str) -> list[str]:
    """Phrases written in one string (MCP_LISTEN_END_WORDS, the CLI's --end-words), separated by commas and not
    yet checked; a trailing comma is allowed, and "" is none."""
    entries = raw.split(",")
    return entries[:-1] if not entries[-1].strip() else entries


def phrases(entries: list[Any] | tuple[Any, ...]) -> tuple[str, ...]:
    """Each entry checked (a string of 1 to MAX_END_WORD_WORDS words, at most MAX_END_WORD_CHARS characters,
    a letter in it, no control characters, valid Unicode), its runs of spaces made one; in order, once each."""
    if len(entries) > MAX_END_WORDS:
        raise Refused(f"{len(entries)} entries")
    kept: list[str] = []
    for number, entry in enumerate(entries, 1):
        phrase = _phrase(entry, number)
        if phrase not in kept:
            kept.append(phrase)
    return tuple(kept)


def _phrase(entry: Any, number: int) -> str:
    where = f"entry {number}"
    if not isinstance(entry, str):
        raise Refused(f"{_kind(entry)} as {where}, not a string")
    if len(entry) > MAX_END_WORD_CHARS:
        raise Refused(f"{len(entry)} characters in {where}")
    if has_control_characters(entry):
        raise Refused(f"a control character in {where}")
    if any("\ud800" <= ch <= "\udfff" for ch in entry):
        raise Refused(f"a lone surrogate (not valid Unicode) in {where}")
    words = entry.split()
    if not words:
        raise Refused(f"an empty {where}")
    if len(words) > MAX_END_WORD_WORDS:
        raise Refused(f"{len(words)} words in {where}")
    if not any(unicodedata.category(ch).startswith("L") for ch in entry):
        raise Refused(f"no letter in {where}")
    return " ".join(words)


def _kind(value: Any) -> str:
    """What a JSON value is, as the caller wrote it ("an integer", "an object"), never the value itself."""
    names = {"bool": "boolean", "int": "integer", "float": "number", "dict": "object", "NoneType": "null"}
    kind = names.get(type(value).__name__, type(value).__name__)
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"
