"""Ask the local Ollama daemon one question, with a hard deadline, cancellation, a size cap,
and errors that say what to do.

The request is plain HTTP/1.1 from the standard library (http.client), not the ollama client:
that client follows redirects (it would POST the transcript to wherever a 30x points), reads a
reply line without any size limit, and gives no handle on its socket. Here the chat streams in
a daemon worker thread that owns its connection; every read waits at most until the deadline
(the socket timeout is set to the time left before each read), a line may not exceed
MAX_LINE_BYTES and the reply text may not exceed MAX_REPLY_CHARS. The caller waits on a queue,
checking its deadline and cancel event every 0.1 s, and on leaving shuts the socket down, which
wakes the worker at once: no thread or socket outlives the call by more than a moment.

The host may carry `user:password@` (sent as basic auth); messages show it only redacted.
Nothing here logs the prompt, the text or the reply.
"""

from __future__ import annotations

import json
import logging
import queue
import shlex
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from mcp_listen import __version__
from mcp_listen.config import normalize_ollama_host, redact_url
from mcp_listen.errors import LLMError

log = logging.getLogger(__name__)

POLL_S = 0.1
CONNECT_TIMEOUT_S = 10.0
MAX_REPLY_CHARS = 1_000_000
"""Reply text beyond this is refused (reply_too_large): an answer to read aloud is far shorter."""
MAX_LINE_BYTES = MAX_REPLY_CHARS + 64 * 1024
"""One NDJSON line: a part's JSON around at most the whole reply text."""
READ_BYTES = 64 * 1024
MAX_ERROR_BODY = 64 * 1024
REDIRECTS = (301, 302, 303, 307, 308)


class _StreamEnded(Exception):
    """The stream closed without Ollama's final `done` message."""


class _TooLarge(Exception):
    """The reply passed MAX_REPLY_CHARS of text, or one line passed MAX_LINE_BYTES."""


class _Deadline(Exception):
    """The worker's own deadline passed before the reply was complete."""


class _ConnectFailed(Exception):
    """No connection: refused, no route, name unknown, TLS refused, or connect timed out."""


class _Status(Exception):
    """A non-2xx answer (status 0: an error inside the stream), its Location and the body's start."""

    def __init__(self, status: int, location: str, body: bytes) -> None:
        super().__init__(status)
        self.status, self.location, self.body = status, location, body


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
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=_tls_context())
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def headers(self, accept: str) -> dict[str, str]:
        headers = {"Accept": accept, "User-Agent": f"mcp-listen/{__version__}", "Accept-Encoding": "identity"}
        if self.auth:
            headers["Authorization"] = self.auth
        return headers


def ask(
    *,
    text: str,
    model: str,
    system_prompt: str,
    host: str,
    timeout_s: float,
    cancel: threading.Event | None = None,
) -> str:
    """Send `text` with `system_prompt` to `model` via /api/chat; return the reply, stripped."""
    target = Target.parse(host)
    body = {"model": model, "stream": True,
            "messages": [{"role": "system", "content": system_prompt}, {"role": "user", "content": text}]}
    start = time.monotonic()
    worker = _ChatWorker(target, json.dumps(body).encode(), start + timeout_s)
    worker.start()
    try:
        reply = _collect(worker, target, model, timeout_s, cancel)
    except LLMError as exc:
        log.debug("Ollama at %s: %s after %.2f s", target.shown, exc.code, time.monotonic() - start)
        raise
    finally:
        worker.abandon()
    log.debug("Ollama at %s answered %d characters in %.2f s", target.shown, len(reply), time.monotonic() - start)
    if not reply:
        raise LLMError(
            f'Model "{model}" returned an empty response. Try again or use another model.', code="empty_response"
        )
    return reply


def _collect(worker: _ChatWorker, target: Target, model: str, timeout_s: float,
             cancel: threading.Event | None) -> str:
    """Gather chunks until done, raising on cancel, deadline or a worker error."""
    parts: list[str] = []
    while True:
        if cancel is not None and cancel.is_set():
            raise LLMError("The request to Ollama was cancelled.", code="cancelled")
        remaining = worker.deadline - time.monotonic()
        if remaining <= 0:
            raise _timeout(timeout_s, model)
        try:
            kind, value = worker.events.get(timeout=min(POLL_S, remaining))
        except queue.Empty:
            continue
        if kind == "chunk":
            parts.append(value)
        elif kind == "done":
            return "".join(parts).strip()
        else:
            raise _map_error(value, target, model, timeout_s)


class _ChatWorker(threading.Thread):
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
            conn.request("POST", self.target.prefix + "/api/chat", self.body,
                          {**self.target.headers("application/x-ndjson"), "Content-Type": "application/json"})
            self._arm()
            response = conn.getresponse()
            _check_status(response, self._arm)
            self._stream(response)
        except BaseException as exc:  # handed to the caller, who maps it
            self.events.put(("error", exc))
        finally:
            if conn is not None:
                conn.close()

    def _connect(self, conn: Any) -> None:
        try:
            conn.connect()
        except (OSError, ValueError) as exc:
            raise _ConnectFailed(type(exc).__name__) from exc
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
            raise _Deadline()
        if self._sock is not None:
            self._sock.settimeout(left)

    def _stream(self, response: Any) -> None:
        lines = _LineReader()
        total = 0
        while True:
            self._arm()
            data = response.read1(READ_BYTES)
            if not data or self._abandoned:
                raise _StreamEnded()
            for line in lines.feed(data):
                content, done = _parse_part(line)
                total += len(content)
                if total > MAX_REPLY_CHARS:
                    raise _TooLarge()
                if content:
                    self.events.put(("chunk", content))
                if done:
                    self.events.put(("done", None))
                    return


class _LineReader:
    """Splits a byte stream into NDJSON lines, refusing a line longer than MAX_LINE_BYTES."""

    def __init__(self) -> None:
        self._pending = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self._pending += data
        if b"\n" not in data:  # only new bytes can end a line: a drip costs no rescans
            if len(self._pending) > MAX_LINE_BYTES:
                raise _TooLarge()
            return []
        *lines, rest = self._pending.split(b"\n")
        if len(rest) > MAX_LINE_BYTES or any(len(line) > MAX_LINE_BYTES for line in lines):
            raise _TooLarge()
        self._pending = bytearray(rest)
        return [line for line in lines if line.strip()]


def _parse_part(line: bytes) -> tuple[str, bool]:
    """(content, done) of one streamed part; an `error` field is Ollama failing mid-stream."""
    part = json.loads(line)
    if not isinstance(part, dict):
        raise ValueError("a streamed part is not a JSON object")
    if part.get("error"):
        raise _Status(0, "", str(part["error"]).encode())
    message = part.get("message") or {}
    content = message.get("content") if isinstance(message, dict) else None
    return (content if isinstance(content, str) else ""), bool(part.get("done"))


def _check_status(response: Any, arm: Any) -> None:
    """Raise _Status for anything but 2xx, with the start of the body; never follow a redirect."""
    if 200 <= response.status < 300:
        return
    body = b"" if response.status in REDIRECTS else _read_body(response, arm, MAX_ERROR_BODY)
    raise _Status(response.status, response.getheader("Location") or "", body)


def _shutdown(sock: socket.socket | None) -> None:
    if sock is None:
        return
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the plain socket's, also under TLS
    except OSError:
        pass


def warm_up() -> None:
    """Import the HTTP client and build the TLS context before the first question."""
    import http.client  # noqa: F401

    _tls_context()


_tls: Any = None


def _tls_context() -> Any:
    """One verifying SSL context per process: loading the CA bundle costs ~20 ms."""
    global _tls
    if _tls is None:
        import ssl

        import certifi

        _tls = ssl.create_default_context(cafile=certifi.where())
    return _tls


def _timeout(timeout_s: float, model: str) -> LLMError:
    return LLMError(
        f'Ollama did not answer within {timeout_s:g} s (model "{model}"). Raise the limit with '
        "MCP_LISTEN_OLLAMA_TIMEOUT_S, or use a smaller model.",
        code="timeout",
    )


def _map_error(exc: BaseException, target: Target, model: str, timeout_s: float) -> LLMError:
    """Translate transport and protocol failures into the stable LLMError codes."""
    import http.client

    where = target.shown
    if isinstance(exc, _ConnectFailed):
        return LLMError(f"Ollama is not running at {where}. Start it with: ollama serve", code="ollama_unreachable")
    if isinstance(exc, _Status):
        return _status_error(exc, target, model)
    if isinstance(exc, (_Deadline, TimeoutError)):
        return _timeout(timeout_s, model)
    if isinstance(exc, _TooLarge):
        return LLMError(
            f"Ollama at {where} sent a reply longer than {MAX_REPLY_CHARS // 1_000_000} MB of text; mcp-listen "
            "stopped reading it. Ask for a shorter answer (prompt), or use another model.",
            code="reply_too_large",
        )
    if isinstance(exc, (http.client.HTTPException, OSError, ValueError, _StreamEnded)):
        return LLMError(
            f"Ollama at {where} sent an incomplete or invalid reply ({type(exc).__name__}). Try again; "
            "if it persists, check the Ollama server log.",
            code="bad_response",
        )
    log.debug("unexpected error talking to Ollama: %s", type(exc).__name__)
    return LLMError(f"The request to Ollama failed ({type(exc).__name__}).", code="llm_failed")


def _status_error(exc: _Status, target: Target, model: str) -> LLMError:
    if exc.status in REDIRECTS:
        return _redirect_error(target.shown, exc.status, exc.location)
    if exc.status == 404:
        return _model_missing(model)
    detail = _error_text(exc.body)
    where = f"HTTP {exc.status}" if exc.status > 0 else "an error in its reply stream"
    return LLMError(f"Ollama answered with {where}: {detail}", code="http_error")


def _redirect_error(where: str, status: int, location: str) -> LLMError:
    to = f" to {redact_url(location)[:200]}" if location else ""
    return LLMError(
        f"Ollama at {where} answered with a redirect (HTTP {status}){to}. mcp-listen never follows "
        "redirects, so the transcript goes nowhere you did not name: set OLLAMA_HOST to the address "
        "Ollama itself listens on.",
        code="ollama_redirect",
    )


def _error_text(body: bytes) -> str:
    """Ollama's `{"error": "..."}` text, else the body's start; at most 500 characters."""
    text = body.decode("utf-8", "replace")
    try:
        parsed = json.loads(text)
        if isinstance(parsed, dict) and parsed.get("error"):
            text = str(parsed["error"])
    except ValueError:
        pass
    return text.strip()[:500]


def probe(host: str, model: str | None, timeout_s: float = 3) -> dict[str, Any]:
    """For `doctor`: is Ollama up, which version, is `model` pulled? Never raises.

    Same rules as `ask`: one deadline for the whole probe, no redirects, bounded replies.
    """
    result: dict[str, Any] = {"reachable": False, "version": None, "model_available": None, "error": None}
    try:
        target = Target.parse(host)
    except LLMError as exc:
        result["error"] = exc.message
        return result
    deadline = time.monotonic() + timeout_s
    try:
        version = _get_json(target, "/api/version", deadline)
        result["reachable"] = True
        result["version"] = version.get("version")
        if model:
            tags = _get_json(target, "/api/tags", deadline)
            result["model_available"] = _has_model(tags.get("models") or [], model)
    except Exception as exc:  # noqa: BLE001 - a probe reports, it never raises
        result["error"] = _probe_error(exc, target, timeout_s)
    return result


def _get_json(target: Target, path: str, deadline: float) -> dict[str, Any]:
    """GET one small JSON object, every read bounded by `deadline`."""
    conn = target.connection(min(CONNECT_TIMEOUT_S, max(0.01, deadline - time.monotonic())))
    try:
        try:
            conn.connect()
        except (OSError, ValueError) as exc:
            raise _ConnectFailed(type(exc).__name__) from exc

        def arm() -> None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Deadline()
            conn.sock.settimeout(left)

        conn.request("GET", target.prefix + path, headers=target.headers("application/json"))
        arm()
        response = conn.getresponse()
        _check_status(response, arm)
        body = _read_body(response, arm, MAX_LINE_BYTES)
        if len(body) > MAX_LINE_BYTES:
            raise _TooLarge()
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


def _probe_error(exc: BaseException, target: Target, timeout_s: float) -> str:
    where = target.shown
    if isinstance(exc, _ConnectFailed):
        return f"Ollama is not running at {where}. Start it with: ollama serve"
    if isinstance(exc, (_Deadline, TimeoutError)):
        return f"Ollama at {where} did not answer within {timeout_s:g} s."
    if isinstance(exc, _Status) and exc.status in REDIRECTS:
        return _redirect_error(where, exc.status, exc.location).message
    if isinstance(exc, _Status):
        return f"Ollama at {where} answered HTTP {exc.status}."
    return f"Ollama at {where} sent an unexpected reply ({type(exc).__name__})."


def _has_model(models: list[dict[str, Any]], wanted: str) -> bool:
    """Ollama treats `name` and `name:latest` as the same model."""
    def canon(name: str) -> str:
        return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"

    names = {canon(str(m.get("name") or m.get("model") or "")) for m in models}
    return canon(wanted) in names


PREFLIGHT_TIMEOUT_S = 0.3
"""voice_query checks Ollama before the microphone opens; a user waits this long at most for it."""
PREFLIGHT_CACHE_S = 30.0
"""A positive check is trusted this long: back-to-back questions do not each pay for it."""

_ready: dict[tuple[str, str], float] = {}


def preflight(host: str, model: str, timeout_s: float = PREFLIGHT_TIMEOUT_S) -> None:
    """Raise the LLMError `ask` would raise if Ollama is down, redirects, or lacks `model`, before
    anyone speaks.

    One GET /api/tags, bounded by `timeout_s`, under the same rules as `ask` (no redirects,
    bounded reply). A daemon that is merely slow to answer, or answers something this check
    cannot judge, is not refused here: the question itself has its own deadline, and the
    transcript survives its failure.
    """
    target = Target.parse(host)
    if time.monotonic() - _ready.get((target.shown, model), -PREFLIGHT_CACHE_S) < PREFLIGHT_CACHE_S:
        return
    try:
        tags = _get_json(target, "/api/tags", time.monotonic() + timeout_s)
    except (_ConnectFailed, _Status) as exc:
        if isinstance(exc, _ConnectFailed) or exc.status in REDIRECTS:
            raise _map_error(exc, target, model, timeout_s) from None
        log.debug("Ollama pre-check answered HTTP %s", exc.status)
        return
    except Exception as exc:  # noqa: BLE001 - inconclusive: the question will tell
        log.debug("Ollama pre-check inconclusive: %s", type(exc).__name__)
        return
    if not _has_model(tags.get("models") or [], model):
        raise _model_missing(model)
    _ready[(target.shown, model)] = time.monotonic()


def _model_missing(model: str) -> LLMError:
    return LLMError(f'Model "{model}" not found. Pull it with: ollama pull {shlex.quote(model)}', code="model_not_pulled")
