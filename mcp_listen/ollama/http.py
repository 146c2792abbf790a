"""HTTP/1.1 to the local Ollama daemon: the address, bounded reads, no redirects, and the worker
that owns the chat's socket.

The request is plain HTTP/1.1 from the standard library (http.client), not the ollama client:
that client follows redirects (it would POST the transcript to wherever a 30x points), reads a
reply line without any size limit, and gives no handle on its socket. Here the chat streams in
a daemon worker thread that owns its connection; every read waits at most until the deadline
(the socket timeout is set to the time left before each read), a line may not exceed
MAX_LINE_BYTES and the reply text may not exceed MAX_REPLY_CHARS. `abandon` shuts the socket
down, which wakes the worker at once: no thread or socket outlives the call by more than a moment.

Failures are raised as the small exceptions below; ollama/client.py turns them into LLMErrors.
The host may carry `user:password@` (sent as basic auth); messages show it only redacted.
Nothing here logs the prompt, the text or the reply.

The bounded NDJSON reader of Ollama's streamed replies comes first.
"""

from __future__ import annotations

import json
import queue
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from mcp_listen import __version__
from mcp_listen.config.urls import normalize_ollama_host, redact_url
from mcp_listen.errors import LLMError

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


__all__ = [
    "MAX_REPLY_CHARS",
    "REDIRECTS",
    "ChatWorker",
    "ConnectFailed",
    "Deadline",
    "Status",
    "StreamEnded",
    "Target",
    "TooLarge",
    "get_json",
    "tls_context",
]

CONNECT_TIMEOUT_S = 10.0
READ_BYTES = 64 * 1024
MAX_ERROR_BODY = 64 * 1024
REDIRECTS = (301, 302, 303, 307, 308)
DEADLINE_GRACE_S = 0.05
"""A bounded GET's own reads stop at the deadline; its caller waits this much longer for the verdict."""


class StreamEnded(Exception):
    """The stream closed without Ollama's final `done` message."""


class Deadline(Exception):
    """The worker's own deadline passed before the reply was complete."""


class ConnectFailed(Exception):
    """No connection: refused, no route, name unknown, TLS refused, or connect timed out."""


@dataclass(frozen=True)
class Target:
    """Where and how to reach Ollama, from a normalized OLLAMA_HOST."""

    scheme: str
    host: str
    port: int
    prefix: str
    auth: str | None
    shown: str
    """The address as messages show it: credentials redacted."""

    @classmethod
    def parse(cls, host: str) -> Target:
        try:
            url = normalize_ollama_host(host)
            parts = urlsplit(url)
            port = parts.port or 11434
        except ValueError:
            raise LLMError(
                "The Ollama address is not valid. Set OLLAMA_HOST to host, host:port or http://host:port.",
                code="ollama_unreachable",
            ) from None
        auth = None
        if parts.username is not None:
            import base64

            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            auth = "Basic " + base64.b64encode(pair).decode("ascii")
        name = parts.hostname or "127.0.0.1"
        return cls(parts.scheme, name, port, parts.path.rstrip("/"), auth, redact_url(url))

    def connection(self, timeout: float) -> Any:
        import http.client

        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=tls_context())
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def headers(self, accept: str) -> dict[str, str]:
        headers = {"Accept": accept, "User-Agent": f"mcp-listen/{__version__}", "Accept-Encoding": "identity"}
        if self.auth:
            headers["Authorization"] = self.auth
        return headers


class ChatWorker(threading.Thread):
    """Runs one streaming chat exchange and hands ("chunk"|"done"|"error", value) events over."""

    def __init__(self, target: Target, body: bytes, deadline: float) -> None:
        super().__init__(name="ollama-chat", daemon=True)
        self.target, self.body, self.deadline = target, body, deadline
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._lock = threading.Lock()
        self._abandoned = False
        self._sock: socket.socket | None = None

    def abandon(self) -> None:
        """Stop now: shut the socket down so a read blocked in the worker returns at once."""
        with self._lock:
            self._abandoned = True
            _shutdown(self._sock)

    def run(self) -> None:
        conn = None
        try:
            conn = self.target.connection(min(CONNECT_TIMEOUT_S, max(0.01, self._left())))
            self._connect(conn)
            conn.request(
                "POST",
                self.target.prefix + "/api/chat",
                self.body,
                {**self.target.headers("application/x-ndjson"), "Content-Type": "application/json"},
            )
            self._arm()
            response = conn.getresponse()
            _check_status(response, self._arm)
            self._stream(response)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, who maps it
            self.events.put(("error", exc))
        finally:
            if conn is not None:
                conn.close()

    def _connect(self, conn: Any) -> None:
        try:
            conn.connect()
        except (OSError, ValueError) as exc:
            raise ConnectFailed(type(exc).__name__) from exc
        with self._lock:
            self._sock = conn.sock
            if self._abandoned:
                _shutdown(self._sock)

    def _left(self) -> float:
        return self.deadline - time.monotonic()

    def _arm(self) -> None:
        """The next read may wait only until the deadline."""
        left = self._left()
        if left <= 0:
            raise Deadline()
        if self._sock is not None:
            self._sock.settimeout(left)

    def _stream(self, response: Any) -> None:
        lines = LineReader()
        total = 0
        while True:
            self._arm()
            data = response.read1(READ_BYTES)
            if not data or self._abandoned:
                raise StreamEnded()
            for line in lines.feed(data):
                content, done = parse_part(line)
                total += len(content)
                if total > MAX_REPLY_CHARS:
                    raise TooLarge()
                if content:
                    self.events.put(("chunk", content))
                if done:
                    self.events.put(("done", None))
                    return


def _check_status(response: Any, arm: Any) -> None:
    """Raise Status for anything but 2xx, with the start of the body; never follow a redirect."""
    if 200 <= response.status < 300:
        return
    body = b"" if response.status in REDIRECTS else _read_body(response, arm, MAX_ERROR_BODY)
    raise Status(response.status, response.getheader("Location") or "", body)


def _shutdown(sock: socket.socket | None) -> None:
    if sock is None:
        return
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the plain socket's, also under TLS
    except OSError:
        pass


_tls: Any = None


def tls_context() -> Any:
    """One verifying SSL context per process: loading the CA bundle costs ~20 ms."""
    global _tls
    if _tls is None:
        import ssl

        import certifi

        _tls = ssl.create_default_context(cafile=certifi.where())
    return _tls


def get_json(target: Target, path: str, deadline: float) -> dict[str, Any]:
    """GET one small JSON object by `deadline`, or raise Deadline.

    The exchange runs in a daemon thread because resolving a host name (getaddrinfo) cannot be
    given a timeout: a resolver that never answers holds it for the resolver's own timeouts
    (5 s x 2 attempts by default), and the caller must not wait that out. The thread ends when
    the resolver gives up; every read after that is bounded by `deadline` too.
    """
    outcome: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()

    def run() -> None:
        try:
            outcome.put((True, _get_json(target, path, deadline)))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, who raises it
            outcome.put((False, exc))

    threading.Thread(target=run, name="ollama-get", daemon=True).start()
    try:
        ok, value = outcome.get(timeout=max(0.0, deadline - time.monotonic()) + DEADLINE_GRACE_S)
    except queue.Empty:
        raise Deadline() from None
    if not ok:
        raise value
    return value


def _get_json(target: Target, path: str, deadline: float) -> dict[str, Any]:
    conn = target.connection(min(CONNECT_TIMEOUT_S, max(0.01, deadline - time.monotonic())))
    try:
        try:
            conn.connect()
        except (OSError, ValueError) as exc:
            raise ConnectFailed(type(exc).__name__) from exc

        def arm() -> None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Deadline()
            conn.sock.settimeout(left)

        conn.request("GET", target.prefix + path, headers=target.headers("application/json"))
        arm()
        response = conn.getresponse()
        _check_status(response, arm)
        body = _read_body(response, arm, MAX_LINE_BYTES)
        if len(body) > MAX_LINE_BYTES:
            raise TooLarge()
        parsed = json.loads(body)
        if not isinstance(parsed, dict):
            raise ValueError("not a JSON object")
        return parsed
    finally:
        conn.close()


def _read_body(response: Any, arm: Any, limit: int) -> bytes:
    """Up to `limit` + 1 bytes of the body (so a caller can tell it was longer), each read armed."""
    body = bytearray()
    while len(body) <= limit:
        arm()
        data = response.read1(min(READ_BYTES, limit + 1 - len(body)))
        if not data:
            break
        body += data
    return bytes(body)
