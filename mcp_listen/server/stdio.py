"""Serving over stdio with a clean shutdown and a bounded inbound line size.

stdin closing ends the server with exit 0. SIGINT, SIGTERM or SIGHUP (a closing
terminal) stop every recording in flight (the microphone is released, nothing is
left on disk) and exit within 2 s with 130, 143 or 129; a second signal exits at
once. A stuck native call (a whisper.cpp transcription cannot be interrupted) never
holds the process: after the grace period it exits anyway. A client that closes
the read end of our stdout can never be answered again: the server stops the same
way, at once (not when stdin closes), and exits 141 (errors.EXIT_STDOUT_CLOSED)
with one line on stderr instead of a BrokenPipeError traceback.

The MCP SDK reads stdin a whole line at a time with no size limit, so one huge
line costs several times its size in memory (measured: a 64 MiB line raised the
peak RSS by 226 MB). `BoundedLines` reads the wire instead: a line longer than
MAX_LINE_BYTES is read through in small pieces and dropped with a warning, and the
server keeps serving. A dropped request whose id can be read from the line's first
or last bytes (where every SDK writes it) is answered with an error naming the limit
(ledger.OVERSIZED_METHOD). A request holding a lone surrogate escape, which the SDK's parser
drops just as silently, is answered with an error naming where it is (ledger.NOT_UNICODE_METHOD).

At start a background sweep (recordings.sweep) removes our recordings older than 24 h and, at
once, the partial files of a write a killed process left behind.

The SDK's own loggers stay at INFO or above: at DEBUG they echo inbound frames they drop,
and a frame can hold a prompt.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import sys
import threading
import time
from typing import Any, BinaryIO

from mcp_listen.config import Settings
from mcp_listen.config.values import is_text
from mcp_listen.contract import limits
from mcp_listen.errors import EXIT_STDOUT_CLOSED
from mcp_listen.server.ledger import NOT_UNICODE_METHOD, OVERSIZED_METHOD

log = logging.getLogger(__name__)

WAITING_HINT = (
    "mcp-listen is an MCP server and is now waiting for a client on stdin. Add it to your client instead, "
    "e.g.: claude mcp add mcp-listen -- pipx run mcp-listen  (mcp-listen --help lists the debugging commands)"
)
"""Said on stderr when a person starts the server on a terminal."""
GRACE_S = 1.5
_ESCAPED_CHAR_BYTES = 12
"""The most a character costs on the wire: an emoji as two `\\uXXXX` escapes (Python's json.dumps default)."""
LARGEST_VALID_CALL_BYTES = _ESCAPED_CHAR_BYTES * (
    limits.MAX_PROMPT_CHARS + limits.MAX_LLM_MODEL_CHARS + limits.MAX_WHISPER_MODEL_CHARS + limits.MAX_DEVICE_CHARS
) + (64 << 10)
"""A voice_query with every string argument at its longest, each character escaped, plus room for
the envelope and `_meta`."""
MAX_LINE_BYTES = 2 << 20
"""Largest inbound JSON-RPC message accepted (2 MiB): above LARGEST_VALID_CALL_BYTES (1.3 MB)."""
_READ_PIECE = 1 << 16
_TAIL_BYTES = 4096
_ID = rb'(-?[0-9]{1,18}|"(?:[^"\\]|\\.){0,256}")'
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
"""A JSON escape of a UTF-16 surrogate: the only way a lone one reaches a string (bytes that are
not UTF-8 were replaced when the line was decoded)."""
SURROGATES = ("\ud800", "\udfff")
"""The range of UTF-16 surrogates: in a Python string read from JSON, only an unpaired one is left."""
_HEAD_ID = re.compile(rb'\A\s*\{(?:\s*"jsonrpc"\s*:\s*"2\.0"\s*,)?\s*"id"\s*:\s*' + _ID)
_TAIL_ID = re.compile(rb'"id"\s*:\s*' + _ID + rb'\s*(?:,\s*"jsonrpc"\s*:\s*"2\.0"\s*)?\}\s*\Z')
"""A request's id where SDKs write it: the first member (Python, after `jsonrpc`) or the last
(TypeScript: `{method, params, jsonrpc, id}`); an "id" inside `params` matches neither."""


def serve(settings: Settings) -> int:
    import anyio

    from mcp_listen.engine import memory
    from mcp_listen.engine.engine import Engine
    from mcp_listen.server.app import serve_stdio

    memory.limit_arenas()  # before any thread: the server lives long, its heaps should not sprawl
    if sys.stdin is not None and sys.stdin.isatty():
        print(WAITING_HINT, file=sys.stderr, flush=True)
    _keep_frames_out_of_logs()
    engine = Engine(settings)
    threading.Thread(target=_sweep, args=(settings,), name="mcp-listen-sweep", daemon=True).start()
    _install_signal_handlers(engine)
    stdin = BoundedLines(claim_stdin())
    try:
        anyio.run(serve_stdio, engine, stdin)
    except KeyboardInterrupt:
        _exit_after_cleanup(engine, 128 + signal.SIGINT)
    except Exception as exc:
        if not broken_pipe(exc):
            raise
        log.warning("stdout was closed by the client: no answer can reach it; stopping (exit %d)", EXIT_STDOUT_CLOSED)
        _exit_after_cleanup(engine, EXIT_STDOUT_CLOSED)
    _exit_after_cleanup(engine, 0)
    return 0


def broken_pipe(exc: BaseException) -> bool:
    """Whether `exc` (the SDK's stdout writer failing, inside anyio's exception groups) is a write
    to a pipe whose reader is gone."""
    if isinstance(exc, BrokenPipeError):
        return True
    return any(broken_pipe(inner) for inner in getattr(exc, "exceptions", ()))


def _keep_frames_out_of_logs() -> None:
    """The SDK logs inbound frames it drops (unparseable, or sent before initialize) at DEBUG, and a
    frame can hold a prompt: its loggers stay at INFO or above even when mcp-listen logs DEBUG."""
    sdk = logging.getLogger("mcp")
    if sdk.getEffectiveLevel() < logging.INFO:
        sdk.setLevel(logging.INFO)


def claim_stdin() -> BinaryIO:
    """The wire as a private duplicate of fd 0; fd 0 itself then reads /dev/null.

    The SDK does the same for the streams it opens itself: nothing else in the
    process (a library, a child process) can ever consume the client's bytes.
    """
    try:
        wire = os.dup(0)
    except OSError:  # no stdin at all: serve an empty input, i.e. exit at once
        return open(os.devnull, "rb")
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
    except OSError as exc:  # still readable through `wire`; only the isolation is lost
        log.debug("could not point fd 0 at %s: %s", os.devnull, exc.strerror)
    return os.fdopen(wire, "rb", buffering=_READ_PIECE)


class BoundedLines:
    """stdin as an async iterator of text lines, none longer than `limit` bytes.

    Quacks like the `anyio.AsyncFile` that `mcp.server.stdio.stdio_server` iterates.
    Memory for a line is bounded by `limit` whatever the client sends.
    """

    def __init__(self, raw: BinaryIO, limit: int = MAX_LINE_BYTES) -> None:
        self._raw = raw
        self.limit = limit
        self.dropped = 0

    def __aiter__(self) -> BoundedLines:
        return self

    async def __anext__(self) -> str:
        import anyio.to_thread

        # Abandoned on cancel: when the SDK's stdout writer fails (the client closed our stdout), its
        # task group is cancelled, and a reader thread it waited for would hold the server until stdin closed.
        line = await anyio.to_thread.run_sync(self.read_line, abandon_on_cancel=True)
        if line is None:
            raise StopAsyncIteration
        return line

    def read_line(self) -> str | None:
        """The next line of at most `limit` bytes (blocking); None at end of input."""
        while True:
            line = self._raw.readline(self.limit + 1)
            if not line:
                return None
            if len(line) <= self.limit:
                text = line.decode("utf-8", errors="replace")
                if not _SURROGATE_ESCAPE.search(text):
                    return text
                refused = _lone_surrogate_request(text)
                if refused is None:
                    return text
                if refused:
                    return refused
                continue  # a notification: no id to answer, and the SDK would drop it anyway
            size, tail, ended = self._discard_rest(line)
            if not ended:
                return None
            request_id = _request_id(line[:_TAIL_BYTES], tail)
            log.warning(
                "dropped an inbound message of %d bytes: the limit is %d bytes (%s)",
                size,
                self.limit,
                "answered with an error" if request_id else "no id, so no reply",
            )
            if request_id is not None:
                return _oversized_request(request_id, size, self.limit)

    def _discard_rest(self, head: bytes) -> tuple[int, bytes, bool]:
        """Read the oversized line to its end keeping only its last bytes: (size, tail, ended)."""
        size, tail = len(head), head[-_TAIL_BYTES:]
        ended = head.endswith(b"\n")
        while not ended:
            piece = self._raw.readline(_READ_PIECE)
            if not piece:
                break
            size += len(piece)
            tail = (tail + piece)[-_TAIL_BYTES:]
            ended = piece.endswith(b"\n")
        self.dropped += 1
        return size, tail, ended


def _request_id(head: bytes, tail: bytes) -> bytes | None:
    """The JSON text of a dropped request's id, if one stands where SDKs write it."""
    found = _HEAD_ID.search(head) or _TAIL_ID.search(tail)
    return found.group(1) if found else None


def _lone_surrogate_request(text: str) -> str | None:
    """None when every surrogate escape in the line is paired (or the line is not JSON: the SDK
    answers that itself); else the stand-in request answered with NOT_UNICODE, or "" for a
    message without an id."""
    try:
        message = json.loads(text)
    except ValueError:
        return None
    found = _first_lone_surrogate(message, "")
    if found is None:
        return None
    where, escape = found
    log.warning("refused an inbound message: a lone surrogate escape at %s", where)
    if not isinstance(message, dict) or "id" not in message or isinstance(message.get("id"), (dict, list)):
        return ""
    params = {"where": where or "the message", "escape": escape}
    return json.dumps({"jsonrpc": "2.0", "id": message["id"], "method": NOT_UNICODE_METHOD, "params": params}) + "\n"


def _first_lone_surrogate(value: Any, where: str) -> tuple[str, str] | None:
    """(the JSON path, the escape's hex digits) of the first string holding a lone surrogate, keys
    included."""
    if isinstance(value, str):
        if is_text(value):
            return None
        lone = next(char for char in value if SURROGATES[0] <= char <= SURROGATES[1])
        return where, f"{ord(lone):04x}"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(key, str):
            in_key = _first_lone_surrogate(key, f"a key of {where or 'the message'}")
            if in_key is not None:
                return in_key
        step = (f"{where}.{key}" if where else key) if isinstance(key, str) else f"{where}[{key}]"
        found = _first_lone_surrogate(item, step)
        if found is not None:
            return found
    return None


def _oversized_request(request_id: bytes, size: int, limit: int) -> str:
    """A stand-in request with the dropped one's id: the SDK answers it, and the ledger words
    that answer as the limit the request broke."""
    params = {"bytes": size, "limit": limit}
    return (
        f'{{"jsonrpc":"2.0","id":{request_id.decode("utf-8", "replace")},"method":"{OVERSIZED_METHOD}",'
        f'"params":{json.dumps(params)}}}\n'
    )


def _sweep(settings: Settings) -> None:
    from mcp_listen.audio import recordings

    recordings.sweep(settings.recordings_dir)


def _install_signal_handlers(engine: Any) -> None:
    received: list[int] = []

    def handle(signum: int, frame: Any) -> None:
        if received:
            os._exit(128 + signum)
        received.append(signum)
        log.info("received signal %d: stopping", signum)
        threading.Thread(target=_exit_after_cleanup, args=(engine, 128 + signum), daemon=True).start()

    hangup = getattr(signal, "SIGHUP", None)  # a closing terminal; there is none on Windows
    for sig in (signal.SIGINT, signal.SIGTERM, *([hangup] if hangup is not None else [])):
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
