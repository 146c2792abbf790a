"""The MCP adapter: the only module that imports `mcp`.

It declares the tools, validates arguments (contracts.py), hands the blocking work
to a worker thread (pipeline.Engine), bridges cancellation and progress, and turns
results and ListenErrors into CallToolResults: a success is structured content plus
one text block holding the same JSON; an error is two text blocks (see error_result).
It decides nothing about audio.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import anyio
import anyio.to_thread
from anyio.lowlevel import RunVar
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.dispatcher import coerce_request_id

from mcp_listen import __version__, contracts
from mcp_listen.errors import Cancelled, ListenError
from mcp_listen.pipeline import Engine

log = logging.getLogger(__name__)

READ_ONLY = types.ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
ACTS = types.ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True
)

INSTRUCTIONS = (
    "mcp-listen gives you the user's microphone on this machine. Use transcribe_voice to hear what the user "
    "says (ask them to speak first), capture_audio to get a WAV file, voice_query to have a local Ollama model "
    "answer the spoken question. Only one recording runs at a time; get_status shows it. An error result's "
    "first text says what went wrong and what to do; its second is JSON whose error.code is stable."
)


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    args: type[contracts._Args]
    result: type[contracts._Result]
    annotations: types.ToolAnnotations
    run: Callable[[Engine, Any, "Call"], Awaitable[Any]]
    text: Callable[[dict[str, Any]], Any] = lambda payload: payload

    def as_tool(self, defaults: contracts.Defaults) -> types.Tool:
        """The listed tool; its description and schema state the effective defaults."""
        return types.Tool(
            name=self.name,
            title=self.title,
            description=self.description.format_map(defaults.words()),
            input_schema=contracts.input_schema(self.args, defaults),
            output_schema=contracts.output_schema(self.result),
            annotations=self.annotations,
        )


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

    def progress(self, done: float, total: float | None, message: str) -> None:
        """Called from the worker thread; sends a notifications/progress when the client asked."""
        if not self.wants_progress or self.stop.is_set():
            return
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


async def _list_devices(engine: Engine, args: Any, call: Call) -> dict[str, Any]:
    return {"devices": await call.in_thread(engine.list_devices)}


async def _capture(engine: Engine, args: Any, call: Call) -> dict[str, Any]:
    return await call.in_thread(lambda: engine.capture(args, stop=call.stop, progress=call.progress))


async def _transcribe(engine: Engine, args: Any, call: Call) -> dict[str, Any]:
    return await call.in_thread(lambda: engine.transcribe_voice(args, stop=call.stop, progress=call.progress))


async def _voice_query(engine: Engine, args: Any, call: Call) -> dict[str, Any]:
    return await call.in_thread(lambda: engine.voice_query(args, stop=call.stop, progress=call.progress))


async def _status(engine: Engine, args: Any, call: Call) -> dict[str, Any]:
    return engine.status()


TOOLS = [
    ToolSpec(
        name="list_audio_devices",
        title="List microphones",
        description=(
            "List the microphones (audio input devices) on this machine. Each has an `index` and a stable "
            "`id`; pass the id as `device` to capture_audio, transcribe_voice or voice_query to choose a "
            "microphone (ids survive restarts, indexes change when devices come and go). `isDefault` marks "
            "the one used when no device is given. Returns a JSON array; an empty array means no microphone."
        ),
        args=contracts.ListDevicesArgs,
        result=contracts.DevicesResult,
        annotations=READ_ONLY,
        run=_list_devices,
        text=lambda payload: payload["devices"],
    ),
    ToolSpec(
        name="capture_audio",
        title="Record audio to a WAV file",
        description=(
            "Record from the microphone and save a 16 kHz mono 16-bit WAV file on this machine; returns its "
            "`path`, `duration_ms` and `size_bytes`. Records exactly duration_ms (default {capture_duration_ms}, max "
            "{max_duration_ms}), or "
            "with stop_on_silence: true until the speaker stops talking (duration_ms is then a maximum; the "
            "result adds `stopped_by` — silence, ceiling or no_speech_timeout — and `speech_detected`). Tell "
            "the user to speak before calling. For the user's words use transcribe_voice instead."
        ),
        args=contracts.CaptureArgs,
        result=contracts.CaptureResult,
        annotations=ACTS,
        run=_capture,
    ),
    ToolSpec(
        name="transcribe_voice",
        title="Hear what the user says",
        description=(
            "Listen to the user and return their words as text, transcribed on this machine with whisper.cpp "
            "(model {whisper_model}, language {language}; nothing leaves the machine). First ask the user to "
            "speak, then call this: it records until they "
            "stop talking (or exactly duration_ms with stop_on_silence: false) and returns `transcription`. "
            "If `transcription` is null, `speech_detected` says why: false = nobody spoke, true = speech too "
            "unclear to transcribe; ask the user to repeat. No audio file is kept."
        ),
        args=contracts.TranscribeArgs,
        result=contracts.TranscribeResult,
        annotations=ACTS,
        run=_transcribe,
    ),
    ToolSpec(
        name="voice_query",
        title="Ask a local model by voice",
        description=(
            "Record the user's spoken question, transcribe it on this machine (whisper.cpp), send it to the "
            "local Ollama daemon (model {model} unless `model` is given) and return `transcription` and the "
            "model's `response`. Ask the user to speak "
            "first; recording stops when they stop talking. transcription and response are null when nobody "
            "spoke (`speech_detected: false`) or the speech had no usable words (`speech_detected: true`): ask "
            "the user to repeat. An error result names the failing stage (capture, transcription or llm) and "
            "what to do, and keeps the transcription when only the llm stage failed. No audio file is kept."
        ),
        args=contracts.VoiceQueryArgs,
        result=contracts.VoiceQueryResult,
        annotations=ACTS,
        run=_voice_query,
    ),
    ToolSpec(
        name="get_status",
        title="Microphone status",
        description=(
            "What the microphone is doing now: whether a recording is in progress, for which tool, for how "
            "long and on which device, and which whisper model is loaded. Answers even during a recording."
        ),
        args=contracts.GetStatusArgs,
        result=contracts.StatusResult,
        annotations=READ_ONLY,
        run=_status,
    ),
]


def _text(value: Any) -> list[types.TextContent]:
    return [types.TextContent(type="text", text=json.dumps(value, ensure_ascii=False))]


def error_result(exc: ListenError) -> types.CallToolResult:
    """isError with two text blocks: "Error: <message>" for people and models, then the JSON
    `{"error": {stage, code, message}, **extra}` for programs (branch on `error.code`).

    No structuredContent: the TypeScript SDK 1.x client and MCP Inspector validate it against
    the tool's outputSchema even when isError is true, and throw a schema complaint instead of
    showing the error.
    """
    payload = {"error": exc.to_dict(), **exc.extra}
    sentence = types.TextContent(type="text", text=f"Error: {exc.message}")
    return types.CallToolResult(content=[sentence, *_text(payload)], is_error=True)


class InFlight:
    """Tool calls in flight by request id, so that notifications/cancelled reaches every one of them.

    The SDK (mcp 2.3) keeps one call per request id: a reused id replaces the entry, and the first
    call could no longer be cancelled. A cancel sets the stop event of every call with that id.
    """

    def __init__(self) -> None:
        self._calls: dict[Any, list[Call]] = {}

    def add(self, ctx: Any, call: Call) -> Callable[[], None]:
        """Track `call`; returns the function that forgets it."""
        key = coerce_request_id(ctx.request_id) if ctx.request_id is not None else None
        self._calls.setdefault(key, []).append(call)

        def forget() -> None:
            calls = self._calls.get(key, [])
            if call in calls:
                calls.remove(call)
            if not calls:
                self._calls.pop(key, None)

        return forget

    async def cancelled(self, ctx: Any, params: types.CancelledNotificationParams) -> None:
        if params.request_id is not None:
            for call in self._calls.get(coerce_request_id(params.request_id), []):
                call.stop.set()


def build_server(engine: Engine) -> Server:
    """The MCP server with its five tools bound to `engine`."""
    specs = {spec.name: spec for spec in TOOLS}
    listed = types.ListToolsResult(tools=[spec.as_tool(engine.settings.defaults) for spec in TOOLS])
    in_flight = InFlight()

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return listed

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        spec = specs.get(params.name)
        if spec is None:
            known = ", ".join(specs)
            return error_result(ListenError(f"Unknown tool '{params.name}'. Tools: {known}.", code="unknown_tool"))
        try:
            engine.settings.check()  # a misconfigured server still serves, and says what to fix
            args = contracts.parse_args(spec.args, params.arguments)
            call = Call(ctx)
            forget = in_flight.add(ctx, call)
            try:
                payload = await spec.run(engine, args, call)
            finally:
                forget()
        except ListenError as exc:
            if not isinstance(exc, Cancelled):
                log.info("%s failed: %s", spec.name, exc.code)
            return error_result(exc)
        except Exception:
            log.exception("%s failed unexpectedly", spec.name)
            return error_result(ListenError("Internal error in mcp-listen; the server log (stderr) has details."))
        return types.CallToolResult(content=_text(spec.text(payload)), structured_content=payload)

    server = Server(
        "mcp-listen",
        version=_package_version(),
        title="mcp-listen",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    server.add_notification_handler("notifications/cancelled", types.CancelledNotificationParams, in_flight.cancelled)
    return server


def _package_version() -> str:
    """serverInfo.version: the installed distribution's version, else the source tree's."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mcp-listen")
    except PackageNotFoundError:
        return __version__


async def serve_stdio(engine: Engine, stdin: Any = None) -> None:
    """Serve over stdio; `stdin` (async iterable of lines) replaces the SDK's unbounded line reader."""
    from mcp.server.stdio import stdio_server

    server = build_server(engine)
    async with stdio_server(stdin=stdin) as (read_stream, write_stream):
        ledger = Ledger(on_eof=engine.shutdown.set)
        reads, writes = LedgerReads(read_stream, ledger), LedgerWrites(write_stream, ledger)
        await server.run(reads, writes, server.create_initialization_options())


EOF_GRACE_S = 1.0
"""How long, after stdin closes, the server waits for answers to requests already read.
Recordings stop at EOF, so this only bounds a whisper.cpp call that cannot be interrupted;
lifecycle's exit deadline (2 s after EOF) must stay above it."""

NOT_INITIALIZED = "Not initialized: send initialize (then notifications/initialized) before {method}."


class Ledger:
    """Which requests read from the wire are still unanswered.

    mcp 2.3's JSON-RPC dispatcher cancels every handler in flight the moment its read
    stream ends (mcp/shared/jsonrpc_dispatcher.py, `run`: `tg.cancel_scope.cancel()`),
    so a client that pipelines requests and closes stdin lost the answers still being
    worked on (a `tools/call` written just before EOF went unanswered every time). The
    read side therefore ends only once every request read has been answered, or after
    EOF_GRACE_S. It also rewords the SDK's bare "Invalid request parameters" for a
    request sent before `initialize` into what the client must do.
    """

    def __init__(self, on_eof: Callable[[], None]) -> None:
        self.open: set[Any] = set()
        self.early: dict[Any, str] = {}
        self.initialize_seen = False
        self.on_eof = on_eof

    def inbound(self, item: Any) -> None:
        message = getattr(item, "message", None)
        if isinstance(message, types.JSONRPCRequest):
            self.open.add(message.id)
            if message.method == "initialize":
                self.initialize_seen = True
            elif not self.initialize_seen and message.method != "ping":
                self.early[message.id] = message.method
        elif isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled":
            self.open.discard((message.params or {}).get("requestId"))  # a cancelled request gets no answer

    def reword(self, item: Any) -> Any:
        """An answer on its way out: the init gate's error says what to do."""
        message = item.message
        method = self.early.pop(getattr(message, "id", None), None)
        if method and isinstance(message, types.JSONRPCError) and message.error.code == types.INVALID_PARAMS:
            message.error.message = NOT_INITIALIZED.format(method=method)
        return item

    def answered(self, item: Any) -> None:
        """Called once the transport has taken the message: only then is a request answered."""
        if isinstance(item.message, (types.JSONRPCResponse, types.JSONRPCError)):
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

    def __aiter__(self) -> "LedgerReads":
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> "LedgerReads":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class LedgerWrites:
    """The transport's write stream; every answer is struck from the ledger as it goes out."""

    def __init__(self, inner: Any, ledger: Ledger) -> None:
        self.inner, self.ledger = inner, ledger

    async def send(self, item: Any) -> None:
        await self.inner.send(self.ledger.reword(item))
        self.ledger.answered(item)

    def close(self) -> None:
        self.inner.close()

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> "LedgerWrites":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
