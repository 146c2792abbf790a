"""The stdin ledger: every request read from the wire gets its answer before the server ends,
and every message written can be encoded.

mcp-free: server/app.py (the only module importing `mcp`) hands it the SDK's message classes.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MessageKinds:
    """The SDK's JSON-RPC message classes, its invalid-params and invalid-request error codes, and the
    `_meta` key whose presence on the first request opens the 2026-07-28 era (no initialize)."""

    request: Any
    notification: Any
    response: Any
    error: Any
    invalid_params: int
    invalid_request: int
    era_key: str


EOF_GRACE_S = 1.0
"""How long, after stdin closes, the server waits for answers to requests already read.
Recordings stop at EOF, so this only bounds a whisper.cpp call that cannot be interrupted;
lifecycle's exit deadline (2 s after EOF) must stay above it."""

NOT_INITIALIZED = "Not initialized: send initialize (then notifications/initialized) before {method}."
OVERSIZED_METHOD = "mcp-listen/oversized-message"
"""The method of the stand-in that server.stdio.BoundedLines reads in place of a request over its
size limit; its answer becomes TOO_LARGE."""
NOT_UNICODE_METHOD = "mcp-listen/not-unicode-message"
"""The stand-in read in place of a request whose strings hold a lone surrogate escape (`\\ud800`
without its pair): the SDK's JSON parser refuses such a line and drops it without a word, so the
caller would wait for ever. Its answer becomes NOT_UNICODE."""
NOT_UNICODE = (
    "Invalid message: a string in it holds a lone surrogate escape (\\u{escape}) at {where}, which is not valid "
    "Unicode (a surrogate escape must come in a high-low pair). Send the text as valid UTF-8, or drop that character."
)
TOO_LARGE = (
    "Message too large: {bytes} bytes, the limit is {limit} bytes (the longest valid call fits). Send a "
    "shorter prompt or arguments."
)


class Ledger:
    """Which requests read from the wire are still unanswered.

    mcp 2.3's JSON-RPC dispatcher cancels every handler in flight the moment its read
    stream ends (mcp/shared/jsonrpc_dispatcher.py, `run`: `tg.cancel_scope.cancel()`),
    so a client that pipelines requests and closes stdin lost the answers still being
    worked on (a `tools/call` written just before EOF went unanswered every time). The
    read side therefore ends only once every request read has been answered, or after
    EOF_GRACE_S. It also rewords the SDK's bare "Invalid request parameters" for a
    request sent before `initialize` into what the client must do. Only in the 2025 era:
    a connection whose first request carries the 2026-07-28 envelope has no handshake
    (mcp/server/runner.py, `serve_dual_era_loop`, decides the era on that request, as here),
    and its errors already say what is wrong (server/params.py).
    """

    def __init__(self, on_eof: Callable[[], None], kinds: MessageKinds) -> None:
        self.kinds = kinds
        self.open: set[Any] = set()
        self.early: dict[Any, str] = {}
        self.refused: dict[Any, str] = {}
        self.initialize_seen = False
        self.era: str | None = None
        """"2025" or "2026-07-28", from the first request read; None before it."""
        self.on_eof = on_eof

    def inbound(self, item: Any) -> None:
        message = getattr(item, "message", None)
        if isinstance(message, self.kinds.request):
            self.open.add(message.id)
            if self.era is None:
                self.era = "2026-07-28" if self._opens_modern(message) else "2025"
            if message.method == OVERSIZED_METHOD:
                self.refused[message.id] = TOO_LARGE.format_map(message.params or {})
            elif message.method == NOT_UNICODE_METHOD:
                self.refused[message.id] = NOT_UNICODE.format_map(message.params or {})
            elif message.method == "initialize":
                self.initialize_seen = True
            elif self.era == "2025" and not self.initialize_seen and message.method != "ping":
                self.early[message.id] = message.method
        elif isinstance(message, self.kinds.notification) and message.method == "notifications/cancelled":
            self.open.discard((message.params or {}).get("requestId"))  # a cancelled request gets no answer

    def _opens_modern(self, message: Any) -> bool:
        """The SDK's rule for the first request: any but initialize with the era's `_meta` key."""
        meta = (message.params or {}).get("_meta") if isinstance(message.params, dict) else None
        return message.method != "initialize" and isinstance(meta, dict) and self.kinds.era_key in meta

    def reword(self, item: Any) -> Any:
        """An answer on its way out: the init gate's error says what to do."""
        message = item.message
        too_large = self.refused.pop(getattr(message, "id", None), None)
        if too_large and isinstance(message, self.kinds.error):
            message.error.code, message.error.message, message.error.data = self.kinds.invalid_request, too_large, None
            return item
        method = self.early.pop(getattr(message, "id", None), None)
        if method and isinstance(message, self.kinds.error) and message.error.code == self.kinds.invalid_params:
            message.error.message = NOT_INITIALIZED.format(method=method)
        return item

    def answered(self, item: Any) -> None:
        """Called once the transport has taken the message: only then is a request answered."""
        if isinstance(item.message, (self.kinds.response, self.kinds.error)):
            self.open.discard(item.message.id)

    async def drain(self) -> None:
        """At EOF: stop the recordings, then wait (bounded) until every request read is answered."""
        self.on_eof()
        with anyio.move_on_after(EOF_GRACE_S):
            while self.open:
                await anyio.sleep(0.01)
        if self.open:
            log.warning("stdin closed; %d request(s) still unanswered after %.1f s", len(self.open), EOF_GRACE_S)


class LedgerReads:
    """The transport's read stream, recorded in the ledger; its end waits for the answers."""

    def __init__(self, inner: Any, ledger: Ledger) -> None:
        self.inner, self.ledger = inner, ledger

    @property
    def last_context(self) -> Any:  # the SDK restores each sender's contextvars from this
        return getattr(self.inner, "last_context", None)

    async def receive(self) -> Any:
        try:
            item = await self.inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            await self.ledger.drain()
            raise anyio.EndOfStream from None
        self.ledger.inbound(item)
        return item

    def __aiter__(self) -> LedgerReads:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> LedgerReads:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class LedgerWrites:
    """The transport's write stream; every answer is struck from the ledger as it goes out."""

    def __init__(self, inner: Any, ledger: Ledger) -> None:
        self.inner, self.ledger = inner, ledger

    async def send(self, item: Any) -> None:
        await self.inner.send(encodable(self.ledger.reword(item)))
        self.ledger.answered(item)

    def close(self) -> None:
        self.inner.close()

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> LedgerWrites:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def encodable(item: Any) -> Any:
    """`item` as the SDK's stdout writer can encode it: a string holding lone surrogates (bytes
    that were not UTF-8, from a file name or the environment) is sent with them escaped.

    The writer's `model_dump_json` raises on such a string, and that exception ends the whole
    session: no request is answered again. Settings refuse such values at start-up; this is
    the net for any other way one reaches a reply.
    """
    message = item.message
    try:
        message.model_dump_json(by_alias=True, exclude_unset=True)
    except ValueError:  # pydantic_core.PydanticSerializationError is a ValueError
        log.warning("an outgoing message held text that is not UTF-8; it is sent with the bytes escaped")
        data = _escaped(message.model_dump(by_alias=True, exclude_unset=True))
        return dataclasses.replace(item, message=type(message).model_validate(data))
    return item


def _escaped(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_escaped(k): _escaped(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_escaped(v) for v in value]
    return value
