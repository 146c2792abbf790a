"""Ollama's streamed chat reply, NDJSON, read with bounds: pure bytes in, text out, no sockets.

A peer may flood: no line may exceed MAX_LINE_BYTES and the reply text may not exceed
MAX_REPLY_CHARS (TooLarge, which llm.py reports as reply_too_large).
"""

from __future__ import annotations

import json

MAX_REPLY_CHARS = 1_000_000
"""Reply text beyond this is refused (reply_too_large): an answer to read aloud is far shorter."""
MAX_LINE_BYTES = MAX_REPLY_CHARS + 64 * 1024
"""One NDJSON line: a part's JSON around at most the whole reply text."""


class TooLarge(Exception):
    """The reply passed MAX_REPLY_CHARS of text, or one line passed MAX_LINE_BYTES."""


class Status(Exception):
    """A non-2xx answer (status 0: an error inside the stream), its Location and the body's start."""

    def __init__(self, status: int, location: str, body: bytes) -> None:
        super().__init__(status)
        self.status, self.location, self.body = status, location, body


class LineReader:
    """Splits a byte stream into NDJSON lines, refusing a line longer than MAX_LINE_BYTES."""

    def __init__(self) -> None:
        self._pending = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self._pending += data
        if b"\n" not in data:  # only new bytes can end a line: a drip costs no rescans
            if len(self._pending) > MAX_LINE_BYTES:
                raise TooLarge()
            return []
        *lines, rest = self._pending.split(b"\n")
        if len(rest) > MAX_LINE_BYTES or any(len(line) > MAX_LINE_BYTES for line in lines):
            raise TooLarge()
        self._pending = bytearray(rest)
        return [line for line in lines if line.strip()]


def parse_part(line: bytes) -> tuple[str, bool]:
    """(content, done) of one streamed part; an `error` field is Ollama failing mid-stream."""
    part = json.loads(line)
    if not isinstance(part, dict):
        raise ValueError("a streamed part is not a JSON object")
    if part.get("error"):
        raise Status(0, "", str(part["error"]).encode())
    message = part.get("message") or {}
    content = message.get("content") if isinstance(message, dict) else None
    return (content if isinstance(content, str) else ""), bool(part.get("done"))
