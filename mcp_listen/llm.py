"""Ask the local Ollama daemon one question, with a hard deadline, cancellation, and errors that
say what to do.

The ollama client has no total timeout (its httpx timeout is per read, so a server that trickles
tokens never times out) and a blocking read cannot be interrupted. So the request streams in a
daemon worker thread and the caller waits on a queue, checking its deadline and cancel event
every 0.1 s: `ask` returns within ~0.1 s of either, whatever the server does. An abandoned worker
stops at its next chunk, or when its read timeout (timeout_s) fires.

Nothing here logs the prompt, the text or the reply.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from typing import Any

from mcp_listen.config import normalize_ollama_host
from mcp_listen.errors import LLMError

log = logging.getLogger(__name__)

POLL_S = 0.1


class _StreamEnded(Exception):
    """The stream closed without Ollama's final `done` message."""


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
    base = _base_url(host)
    messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": text}]
    worker = _ChatWorker(base, model, messages, timeout_s)
    worker.start()
    try:
        reply = _collect(worker, base, model, timeout_s, cancel)
    finally:
        worker.abandon()
    if not reply:
        raise LLMError(
            f'Model "{model}" returned an empty response. Try again or use another model.', code="empty_response"
        )
    return reply


def _collect(worker: _ChatWorker, host: str, model: str, timeout_s: float, cancel: threading.Event | None) -> str:
    """Gather chunks until done, raising on cancel, deadline or a worker error."""
    deadline = time.monotonic() + timeout_s
    parts: list[str] = []
    while True:
        if cancel is not None and cancel.is_set():
            raise LLMError("The request to Ollama was cancelled.", code="cancelled")
        remaining = deadline - time.monotonic()
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
            raise _map_error(value, host, model, timeout_s)


class _ChatWorker(threading.Thread):
    """Runs the streaming chat call and hands ("chunk"|"done"|"error", value) events over."""

    def __init__(self, host: str, model: str, messages: list[dict[str, str]], timeout_s: float) -> None:
        super().__init__(name="ollama-chat", daemon=True)
        self.host, self.model, self.messages, self.timeout_s = host, model, messages, timeout_s
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._abandoned = threading.Event()

    def abandon(self) -> None:
        self._abandoned.set()

    def run(self) -> None:
        try:
            self._stream()
        except BaseException as exc:  # handed to the caller, who maps it
            self.events.put(("error", exc))

    def _stream(self) -> None:
        import httpx
        from ollama import Client

        timeout = httpx.Timeout(self.timeout_s, connect=min(self.timeout_s, 10.0))
        with Client(host=self.host, timeout=timeout, trust_env=False, verify=_tls_context()) as client:
            parts = client.chat(model=self.model, messages=self.messages, stream=True)
            try:
                for part in parts:
                    if self._abandoned.is_set():
                        return
                    content = part.message.content if part.message is not None else None
                    if content:
                        self.events.put(("chunk", content))
                    if part.done:
                        self.events.put(("done", None))
                        return
                raise _StreamEnded()
            finally:
                parts.close()


def warm_up() -> None:
    """Import the client and build the TLS context before the first question (~0.2 s on a first call)."""
    import ollama  # noqa: F401

    _tls_context()


_tls: Any = None


def _tls_context() -> Any:
    """One verifying SSL context per process: httpx would load the CA bundle for every client (~20 ms)."""
    global _tls
    if _tls is None:
        import ssl

        import certifi

        _tls = ssl.create_default_context(cafile=certifi.where())
    return _tls


def _base_url(host: str) -> str:
    try:
        return normalize_ollama_host(host)
    except ValueError:
        raise LLMError(
            "The Ollama address is not valid. Set OLLAMA_HOST to host, host:port or http://host:port.",
            code="ollama_unreachable",
        ) from None


def _timeout(timeout_s: float, model: str) -> LLMError:
    return LLMError(
        f'Ollama did not answer within {timeout_s:g} s (model "{model}"). Raise the limit with '
        "MCP_LISTEN_OLLAMA_TIMEOUT_S, or use a smaller model.",
        code="timeout",
    )


def _map_error(exc: BaseException, host: str, model: str, timeout_s: float) -> LLMError:
    """Translate client/transport failures into the stable LLMError codes."""
    import httpx
    from ollama import ResponseError

    if isinstance(exc, (ConnectionError, httpx.ConnectError, httpx.ConnectTimeout)):
        return LLMError(f"Ollama is not running at {host}. Start it with: ollama serve", code="ollama_unreachable")
    if isinstance(exc, ResponseError):
        return _response_error(exc, model)
    if isinstance(exc, httpx.TimeoutException):
        return _timeout(timeout_s, model)
    if isinstance(exc, (httpx.TransportError, httpx.DecodingError, json.JSONDecodeError, _StreamEnded, ValueError)):
        return LLMError(
            f"Ollama at {host} sent an incomplete or invalid reply ({type(exc).__name__}). Try again; "
            "if it persists, check the Ollama server log.",
            code="bad_response",
        )
    log.debug("unexpected error from the ollama client: %s", type(exc).__name__)
    return LLMError(f"The request to Ollama failed: {type(exc).__name__}: {exc}", code="llm_failed")


def _response_error(exc: Any, model: str) -> LLMError:
    status = exc.status_code
    if status == 404:
        return _model_missing(model)
    detail = str(exc.error).strip()[:500]
    where = f"HTTP {status}" if status and status > 0 else "an error in its reply stream"
    return LLMError(f"Ollama answered with {where}: {detail}", code="http_error")


def probe(host: str, model: str | None, timeout_s: float = 3) -> dict[str, Any]:
    """For `doctor`: is Ollama up, which version, is `model` pulled? Never raises."""
    import httpx

    result: dict[str, Any] = {"reachable": False, "version": None, "model_available": None, "error": None}
    try:
        base = _base_url(host)
        with httpx.Client(base_url=base, timeout=timeout_s, trust_env=False) as client:
            response = client.get("/api/version")
            response.raise_for_status()
            result["reachable"] = True
            result["version"] = response.json().get("version")
            if model:
                tags = client.get("/api/tags")
                tags.raise_for_status()
                result["model_available"] = _has_model(tags.json().get("models") or [], model)
    except LLMError as exc:
        result["error"] = exc.message
    except (httpx.ConnectError, httpx.ConnectTimeout):
        result["error"] = f"Ollama is not running at {host}. Start it with: ollama serve"
    except httpx.TimeoutException:
        result["error"] = f"Ollama at {host} did not answer within {timeout_s:g} s."
    except httpx.HTTPStatusError as exc:
        result["error"] = f"Ollama at {host} answered HTTP {exc.response.status_code}."
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        result["error"] = f"Ollama at {host} sent an unexpected reply ({type(exc).__name__})."
    return result


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
    """Raise the LLMError `ask` would raise if Ollama is down or lacks `model`, before anyone speaks.

    One GET /api/tags, bounded by `timeout_s`. A daemon that is merely slow to answer is not
    refused here (the question itself has its own deadline, and the transcript survives it);
    only a refused connection, a redirect or a missing model is.
    """
    import httpx

    base = _base_url(host)
    if time.monotonic() - _ready.get((base, model), -PREFLIGHT_CACHE_S) < PREFLIGHT_CACHE_S:
        return
    try:
        with httpx.Client(base_url=base, timeout=timeout_s, trust_env=False, follow_redirects=False) as client:
            response = client.get("/api/tags")
    except (httpx.ConnectError, httpx.ConnectTimeout, ConnectionError) as exc:
        raise _map_error(exc, base, model, timeout_s) from None
    except httpx.HTTPError as exc:
        log.debug("Ollama pre-check inconclusive: %s", type(exc).__name__)
        return
    _check_tags(response, base, model)
    _ready[(base, model)] = time.monotonic()


def _check_tags(response: Any, base: str, model: str) -> None:
    if response.is_redirect or not response.is_success:
        log.debug("Ollama pre-check answered HTTP %s", response.status_code)
        return  # not an Ollama we can judge: let the question itself report what happens
    try:
        models = response.json().get("models") or []
    except (ValueError, AttributeError):
        return
    if not _has_model(models, model):
        raise _model_missing(model)


def _model_missing(model: str) -> LLMError:
    return LLMError(f'Model "{model}" not found. Pull it with: ollama pull {model}', code="model_not_pulled")
