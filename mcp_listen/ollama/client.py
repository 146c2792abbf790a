"""Ask the local Ollama daemon one question, with a hard deadline, cancellation, a size cap,
and errors that say what to do.

The HTTP exchange itself (address, bounded reads, no redirects, the worker thread that owns the
socket) is ollama/http.py; this module is the question and answer: the messages sent, the wait
on the worker's events (checking the deadline and cancel event every 0.1 s, and abandoning the
worker on leaving), the doctor's probe, the pre-check before the microphone opens, and the
mapping of every failure to a stable LLMError code with a remedy.

Nothing here logs the prompt, the text or the reply.
"""

from __future__ import annotations

import json
import logging
import queue
import shlex
import threading
import time
from typing import Any

from mcp_listen.config.urls import redact_url
from mcp_listen.errors import Cancelled, LLMError
from mcp_listen.ollama.http import (
    MAX_REPLY_CHARS,
    REDIRECTS,
    ChatWorker,
    ConnectFailed,
    Deadline,
    Status,
    StreamEnded,
    Target,
    TooLarge,
    get_json,
    tls_context,
)

log = logging.getLogger(__name__)

POLL_S = 0.1
PROBE_TIMEOUT_S = 3.0
"""`doctor` waits this long for Ollama's version and model list together."""


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
    body = {
        "model": model,
        "stream": True,
        "messages": [{"role": "system", "content": system_prompt}, {"role": "user", "content": text}],
    }
    start = time.monotonic()
    worker = ChatWorker(target, json.dumps(body).encode(), start + timeout_s)
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


def _collect(worker: ChatWorker, target: Target, model: str, timeout_s: float, cancel: threading.Event | None) -> str:
    """Gather chunks until done, raising on cancel, deadline or a worker error."""
    parts: list[str] = []
    while True:
        if cancel is not None and cancel.is_set():
            raise Cancelled("The request to Ollama was cancelled.")
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


def warm_up() -> None:
    """Import the HTTP client and build the TLS context before the first question."""
    import http.client  # noqa: F401

    tls_context()


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
    if isinstance(exc, ConnectFailed):
        return LLMError(f"Ollama is not running at {where}. Start it with: ollama serve", code="ollama_unreachable")
    if isinstance(exc, Status):
        return _status_error(exc, target, model)
    if isinstance(exc, (Deadline, TimeoutError)):
        return _timeout(timeout_s, model)
    if isinstance(exc, TooLarge):
        return LLMError(
            f"Ollama at {where} sent a reply longer than {MAX_REPLY_CHARS // 1_000_000} MB of text; mcp-listen "
            "stopped reading it. Ask for a shorter answer (prompt), or use another model.",
            code="reply_too_large",
        )
    if isinstance(exc, (http.client.HTTPException, OSError, ValueError, StreamEnded)):
        return LLMError(
            f"Ollama at {where} sent an incomplete or invalid reply ({type(exc).__name__}). Try again; "
            "if it persists, check the Ollama server log.",
            code="bad_response",
        )
    log.debug("unexpected error talking to Ollama: %s", type(exc).__name__)
    return LLMError(f"The request to Ollama failed ({type(exc).__name__}).", code="llm_failed")


def _status_error(exc: Status, target: Target, model: str) -> LLMError:
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


def probe(host: str, model: str | None, timeout_s: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
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
        version = get_json(target, "/api/version", deadline)
        result["reachable"] = True
        result["version"] = version.get("version")
        if model:
            tags = get_json(target, "/api/tags", deadline)
            result["model_available"] = _has_model(tags.get("models") or [], model)
    except Exception as exc:  # noqa: BLE001 - a probe reports, it never raises
        result["error"] = _probe_error(exc, target, timeout_s)
    return result


def _probe_error(exc: BaseException, target: Target, timeout_s: float) -> str:
    where = target.shown
    if isinstance(exc, ConnectFailed):
        return f"Ollama is not running at {where}. Start it with: ollama serve"
    if isinstance(exc, (Deadline, TimeoutError)):
        return f"Ollama at {where} did not answer within {timeout_s:g} s."
    if isinstance(exc, Status) and exc.status in REDIRECTS:
        return _redirect_error(where, exc.status, exc.location).message
    if isinstance(exc, Status):
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
        tags = get_json(target, "/api/tags", time.monotonic() + timeout_s)
    except (ConnectFailed, Status) as exc:
        if isinstance(exc, ConnectFailed) or exc.status in REDIRECTS:
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
    return LLMError(
        f'Model "{model}" not found. Pull it with: ollama pull {shlex.quote(model)}', code="model_not_pulled"
    )
