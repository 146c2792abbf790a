"""One tool call's link to its client, and the calls in flight: mcp-free, used by server/app.py.

`Call` runs a call's blocking work in a worker thread of its own budget, and carries its
stop event and progress reports; `InFlight` finds every call a notifications/cancelled names.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
from anyio.lowlevel import RunVar

log = logging.getLogger(__name__)


class Call:
    """One tool call's link to its client: cancellation and progress for the worker thread.

    Tool work runs on its own budget of worker threads (THREADS). anyio's default budget (40)
    also serves the stdin reader: when 39 calls were stuck (a FIFO as whisper_model once was),
    the server could no longer read a request, not even end of input.
    """

    THREADS = 8
    """Tool calls in worker threads at once; more wait for a free slot (and can be cancelled)."""
    _limiter: RunVar[anyio.CapacityLimiter] = RunVar("mcp_listen_tool_threads")

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.stop = threading.Event()
        meta = ctx.meta or {}
        self.wants_progress = meta.get("progress_token", meta.get("progressToken")) is not None
        self._last: float | None = None

    def progress(self, done: float, total: float | None, message: str) -> None:
        """Called from the worker thread; sends a notifications/progress when the client asked.

        `done` is the audio heard so far in ms, and the phases after listening (transcribing,
        asking) report the recording's length again. MCP wants every notification's progress
        above the last one, so the counter sent is kept strictly increasing here, 1 above the
        last where the engine's value would repeat it; the engine pads nothing.
        """
        if not self.wants_progress or self.stop.is_set():
            return
        done = done if self._last is None or done > self._last else self._last + 1
        self._last = done
        try:
            anyio.from_thread.run(self.ctx.session.report_progress, done, total, message)
        except Exception as exc:  # noqa: BLE001 - progress is best effort, never fatal
            log.debug("progress notification not sent: %s", type(exc).__name__)

    async def in_thread(self, fn: Callable[[], Any]) -> Any:
        """Run blocking work in a thread; on cancel, stop it and wait (briefly) until it let go."""
        finished = threading.Event()

        def work() -> Any:
            try:
                return fn()
            finally:
                finished.set()

        try:
            return await anyio.to_thread.run_sync(work, abandon_on_cancel=True, limiter=self._threads())
        except anyio.get_cancelled_exc_class():
            self.stop.set()
            with anyio.CancelScope(shield=True):
                with anyio.move_on_after(2.0):
                    while not finished.is_set():
                        await anyio.sleep(0.01)
            raise

    @classmethod
    def _threads(cls) -> anyio.CapacityLimiter:
        """This event loop's tool-thread limiter (a RunVar: one per loop, made on first use)."""
        try:
            return cls._limiter.get()
        except LookupError:
            limiter = anyio.CapacityLimiter(cls.THREADS)
            cls._limiter.set(limiter)
            return limiter


class InFlight:
    """Tool calls in flight by request id, so that notifications/cancelled reaches every one of them.

    The SDK (mcp 2.3) keeps one call per request id: a reused id replaces the entry, and the first
    call could no longer be cancelled. A cancel sets the stop event of every call with that id.
    """

    def __init__(self, request_key: Callable[[Any], Any] = lambda request_id: request_id) -> None:
        self._calls: dict[Any, list[Call]] = {}
        self._key = request_key
        """The SDK's request-id normaliser (1 and "1" may name one request), given by server/app.py."""

    def add(self, ctx: Any, call: Call) -> Callable[[], None]:
        """Track `call`; returns the function that forgets it."""
        key = self._key(ctx.request_id) if ctx.request_id is not None else None
        self._calls.setdefault(key, []).append(call)

        def forget() -> None:
            calls = self._calls.get(key, [])
            if call in calls:
                calls.remove(call)
            if not calls:
                self._calls.pop(key, None)

        return forget

    async def cancelled(self, ctx: Any, params: Any) -> None:
        """The notifications/cancelled handler: stop every call with that request id."""
        if params.request_id is not None:
            for call in self._calls.get(self._key(params.request_id), []):
                call.stop.set()
