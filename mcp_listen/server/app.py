"""The MCP adapter: the only module that imports `mcp`.

It declares the tools, validates arguments (contract/arguments.py), hands the blocking work
to a worker thread (engine.Engine), bridges cancellation and progress, and turns
results and ListenErrors into CallToolResults: a success is structured content plus
one text block holding the same JSON; an error is two text blocks (see error_result).
It decides nothing about audio.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from mcp_listen import package_version
from mcp_listen.contract import arguments, limits, results
from mcp_listen.contract.limits import DEFAULT_DEVICE_KIND
from mcp_listen.contract.results import Tools, wire
from mcp_listen.errors import Cancelled, ListenError
from mcp_listen.server import params as params_words
from mcp_listen.server import prompts
from mcp_listen.server.calls import Call, InFlight
from mcp_listen.server.ledger import Ledger, LedgerReads, LedgerWrites, MessageKinds
from mcp_listen.voice import synth

__all__ = ["Call", "InFlight", "Ledger", "build_server", "error_result", "serve_stdio"]

log = logging.getLogger(__name__)

READ_ONLY = types.ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
ACTS = types.ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True)

INSTRUCTIONS = (
    "mcp-listen gives you the user's microphone on this machine. Use transcribe_voice to hear what the user "
    "says (ask them to speak first), capture_audio to get a WAV file, voice_query to have a local Ollama model "
    "answer the spoken question. Only one recording runs at a time; get_status shows it. An error result's "
    "first text says what went wrong and what to do; its second is JSON whose error.code is stable."
)
SPEAKING_INSTRUCTIONS = (
    " It also has a voice: speak_text says something aloud, and converse says something and then hears the "
    "user's answer in one call (use it for each turn of a spoken conversation; keep what you say short). "
    "By default the user can talk over you: the speech stops and converse returns what they said. stop_speaking "
    "silences a speech at once."
)
"""Added to INSTRUCTIONS where Piper is installed (the tools it names are listed only then)."""


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    args: type[arguments.ToolArgs]
    result: type[results.ToolResult]
    annotations: types.ToolAnnotations
    run: Callable[[Tools, Any, Call], Awaitable[dict[str, Any]]]
    text: Callable[[dict[str, Any]], Any] = lambda payload: payload

    def as_tool(self, defaults: limits.Defaults) -> types.Tool:
        """The listed tool; its description and schema state the effective defaults."""
        return types.Tool(
            name=self.name,
            title=self.title,
            description=self.description.format_map(defaults.words()),
            input_schema=arguments.input_schema(self.args, defaults),
            output_schema=results.output_schema(self.result),
            annotations=self.annotations,
        )


async def _list_devices(engine: Tools, args: Any, call: Call) -> dict[str, Any]:
    kind = args.kind or DEFAULT_DEVICE_KIND
    return wire(await call.in_thread(lambda: engine.list_devices(kind)))


async def _capture(engine: Tools, args: Any, call: Call) -> dict[str, Any]:
    return wire(await call.in_thread(lambda: engine.capture(args, stop=call.stop, progress=call.progress)))


async def _transcribe(engine: Tools, args: Any, call: Call) -> dict[str, Any]:
    return wire(await call.in_thread(lambda: engine.transcribe_voice(args, stop=call.stop, progress=call.progress)))


async def _voice_query(engine: Tools, args: Any, call: Call) -> dict[str, Any]:
    return wire(await call.in_thread(lambda: engine.voice_query(args, stop=call.stop, progress=call.progress)))


async def _speak(engine: Tools, args: Any, call: Call) -> dict[str, Any]:
    received = time.monotonic()
    return wire(await call.in_thread(lambda: engine.speak(args, stop=call.stop, received=received)))


async def _converse(engine: Tools, args: Any, call: Call) -> dict[str, Any]:
    received = time.monotonic()
    converse = lambda: engine.converse(args, stop=call.stop, progress=call.progress, received=received)  # noqa: E731
    return wire(await call.in_thread(converse))


async def _stop_speaking(engine: Tools, args: Any, call: Call) -> dict[str, Any]:
    # Marked as stopping here, on the event loop, before any await: a speak_text or converse read after this
    # request (the next line of the same write) finds the speech stopping and waits for it, not `busy`.
    stopped = engine.halt_speaking()
    return wire(await call.in_thread(stopped))


async def _status(engine: Tools, args: Any, call: Call) -> dict[str, Any]:
    return wire(engine.status())


TOOLS = [
    ToolSpec(
        name="list_audio_devices",
        title="List microphones",
        description=(
            "List the microphones (audio input devices) on this machine. Each has an `index` and a stable "
            "`id`; pass the id as `device` to capture_audio, transcribe_voice or voice_query to choose a "
            "microphone (ids survive restarts, indexes change when devices come and go). `isDefault` marks "
            "the one used when no device is given. Returns a JSON array; an empty array means no microphone. "
            'kind "output" lists speakers instead, "all" both; each device then also has `kind` '
            '("input", "output" or "both"), `maxOutputChannels` and `isDefaultOutput`.'
        ),
        args=arguments.ListDevicesArgs,
        result=results.DevicesResult,
        annotations=READ_ONLY,
        run=_list_devices,
        text=lambda payload: payload["devices"],
    ),
    ToolSpec(
        name="capture_audio",
        title="Record audio to a WAV file",
        description=(
            "Record from the microphone and save a {sample_rate_khz} kHz mono 16-bit WAV file on this machine; "
            "returns its "
            "`path`, `duration_ms` and `size_bytes`. Records exactly duration_ms (default {capture_duration_ms}, max "
            "{max_duration_ms}), or "
            "with stop_on_silence: true until the speaker stops talking (duration_ms is then a maximum; the "
            "result adds `stopped_by` — silence, ceiling or no_speech_timeout — and `speech_detected`). Tell "
            "the user to speak before calling. For the user's words use transcribe_voice instead."
        ),
        args=arguments.CaptureArgs,
        result=results.CaptureResult,
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
            "unclear to transcribe; ask the user to repeat. `end_reason` says how the turn ended: the signal that "
            "judged it finished (words+voice, voice, words), end_word (the user said one of end_words last), silence, "
            "max_pause (end_of_turn smart held the pause, the words or the voice sounding unfinished, until "
            "max_pause_ms) or duration. Names whisper may mishear (project and library names, "
            "identifiers, people's names) go in `vocabulary`, which voice_query and converse take too. "
            "No audio file is kept."
        ),
        args=arguments.TranscribeArgs,
        result=results.TranscribeResult,
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
        args=arguments.VoiceQueryArgs,
        result=results.VoiceQueryResult,
        annotations=ACTS,
        run=_voice_query,
    ),
    ToolSpec(
        name="speak_text",
        title="Say something aloud",
        description=(
            "Say `text` aloud on this machine's speaker with a local Piper voice (voice {voice} unless `voice` is "
            "given; nothing leaves the machine). Returns when it has been said (`duration_ms`, `first_audio_ms`), "
            "or with wait: false as soon as it starts, playing on in the background. The speaker and the "
            "microphone are one device here: while speech plays, capture_audio, transcribe_voice, voice_query, "
            "converse and a second speak_text are refused with `busy` (get_status shows `speaking: true`); right after "
            "stop_speaking they wait for the stopped speech instead. A missing "
            "voice is `voice_not_found`, naming the `mcp-listen voices pull` command that fetches it."
        ),
        args=arguments.SpeakArgs,
        result=results.SpeakResult,
        annotations=ACTS,
        run=_speak,
    ),
    ToolSpec(
        name="converse",
        title="Say something, then hear the answer",
        description=(
            "One turn of a spoken conversation: say `text` aloud (a local Piper voice, {voice} unless `voice` is "
            "given), then listen for the user's answer and return it transcribed on this machine (whisper.cpp, "
            "model {whisper_model}), exactly as transcribe_voice does: `transcription`, `speech_detected`, "
            "`stopped_by`, plus `spoken` (what was said: `voice`, `duration_ms`, `first_audio_ms`, "
            "`interrupted`). The microphone never takes your own voice for the user's. With barge_in (default "
            "{barge_in}) it listens while you speak, your voice taken out: when the user talks over you the "
            "speech pauses at once and stops once their words are heard; `transcription` is what they said from their "
            'first word, and `spoken` has `interrupted_by: "user"` and `cut_in_ms`. A clap, music or your own echo '
            "mostly only pauses it (`spoken.paused_ms`); another person talking counts as the user. With barge_in "
            "false what it hears while you speak, and until the sound has left the speaker, is dropped; listening "
            "starts right after. Keep `text` short (a sentence or two) and end it so the user knows it is their "
            "turn. `device` is the microphone, "
            "`output_device` the speaker. Nothing leaves the machine; no audio file is kept."
        ),
        args=arguments.ConverseArgs,
        result=results.ConverseResult,
        annotations=ACTS,
        run=_converse,
    ),
    ToolSpec(
        name="stop_speaking",
        title="Stop speaking now",
        description=(
            "Cut short the speech playing now: speak_text (also one started with wait: false) or converse "
            "before it listens. The call that started it returns `interrupted: true`; converse then listens "
            "for the user as usual. Returns `stopped` (false when there was nothing to stop: no speech, or "
            "converse already listening) and `played_ms`, how much of the speech had played. Use it when the user "
            "wants the agent to be quiet; to say something else instead, call speak_text right after it (it waits "
            "for the stopped speech to let go of the speaker)."
        ),
        args=arguments.StopSpeakingArgs,
        result=results.StopSpeakingResult,
        annotations=ACTS,
        run=_stop_speaking,
    ),
    ToolSpec(
        name="get_status",
        title="Microphone status",
        description=(
            "What the microphone is doing now: whether a recording is in progress, for which tool, for how "
            "long and on which device, and which whisper model is loaded. Answers even during a recording. "
            "While speech plays (speak_text, or converse before it listens), `recording` is false and `speaking` "
            "is true."
        ),
        args=arguments.GetStatusArgs,
        result=results.StatusResult,
        annotations=READ_ONLY,
        run=_status,
    ),
]


SPEAKS = frozenset({"speak_text", "converse", "stop_speaking"})
"""Listed only where Piper (the extra `speak`) is installed."""


def listed_specs() -> list[ToolSpec]:
    """The tools this installation serves: the speaking ones only when piper can be imported (not imported here)."""
    return [spec for spec in TOOLS if spec.name not in SPEAKS or synth.available()]


def listed_prompts() -> list[prompts.PromptSpec]:
    """The prompts this installation offers: `talk` only where converse is listed."""
    return [spec for spec in prompts.PROMPTS if not spec.speaks or synth.available()]


def _prompt(spec: prompts.PromptSpec) -> types.Prompt:
    argument = types.PromptArgument(name=spec.argument, description=spec.argument_description, required=False)
    return types.Prompt(name=spec.name, title=spec.title, description=spec.description, arguments=[argument])


def prompt_result(served: list[prompts.PromptSpec], params: types.GetPromptRequestParams) -> types.GetPromptResult:
    """The prompt's opening message, or INVALID_PARAMS naming what is wrong (an unknown name, a bad argument)."""
    try:
        spec = prompts.find(params.name)
        if spec not in served:
            raise ListenError(f"The prompt '{spec.name}' needs the speak extra: pipx install 'mcp-listen[speak]'.")
        text = spec.text((params.arguments or {}).get(spec.argument))
    except ListenError as exc:
        raise MCPError(types.INVALID_PARAMS, exc.message) from None
    message = types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))
    return types.GetPromptResult(description=spec.description, messages=[message])


def _text(value: Any) -> list[types.ContentBlock]:
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


def build_server(engine: Tools) -> Server:
    """The MCP server with its tools (five, eight with Piper) and prompts bound to `engine` (engine.Engine, or a
    fake in tests)."""
    served = listed_specs()
    offered = listed_prompts()
    prompt_list = types.ListPromptsResult(prompts=[_prompt(spec) for spec in offered])
    specs = {spec.name: spec for spec in served}
    listed = types.ListToolsResult(tools=[spec.as_tool(engine.settings.defaults) for spec in served])
    in_flight = InFlight(coerce_request_id)

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return listed

    async def list_prompts(ctx: Any, params: Any) -> types.ListPromptsResult:
        return prompt_list

    async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        return prompt_result(offered, params)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        spec = specs.get(params.name)
        if spec is None:
            known = ", ".join(specs)
            return error_result(ListenError(f"Unknown tool '{params.name}'. Tools: {known}.", code="unknown_tool"))
        try:
            engine.settings.check()  # a misconfigured server still serves, and says what to fix
            args = arguments.parse_args(spec.args, params.arguments)
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
        version=package_version(),
        title="mcp-listen",
        instructions=INSTRUCTIONS + (SPEAKING_INSTRUCTIONS if SPEAKS & set(specs) else ""),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )
    server.add_notification_handler("notifications/cancelled", types.CancelledNotificationParams, in_flight.cancelled)
    server.middleware.append(worded_params)
    return server


async def worded_params(ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
    """Middleware: a request's invalid params are answered naming the field, what it must be and
    the value (server/params.py); the SDK alone says "Invalid request parameters" and nothing more.
    A legal progress token the SDK's type refuses (1.5) is dropped and the call goes ahead."""
    if ctx.request_id is None:  # a notification: the SDK drops a malformed one, there is no one to answer
        return await call_next(ctx)
    refused, drop = params_words.token_problem(ctx.method, ctx.params)
    if refused:
        raise MCPError(types.INVALID_PARAMS, refused)
    if drop:
        ctx = dataclasses.replace(ctx, params=params_words.without_token(ctx.params))
    try:
        return await call_next(ctx)
    except ValidationError as exc:
        words = params_words.problem(ctx.method, exc.errors(include_url=False), ctx.params)
        raise MCPError(types.INVALID_PARAMS, words) from None


async def serve_stdio(engine: Tools, stdin: Any = None) -> None:
    """Serve over stdio; `stdin` (async iterable of lines) replaces the SDK's unbounded line reader."""
    from mcp.server.stdio import stdio_server

    server = build_server(engine)
    async with stdio_server(stdin=stdin) as (read_stream, write_stream):
        ledger = Ledger(on_eof=engine.shutdown.set, kinds=MESSAGE_KINDS)
        reads, writes = LedgerReads(read_stream, ledger), LedgerWrites(write_stream, ledger)
        await server.run(reads, writes, server.create_initialization_options())


MESSAGE_KINDS = MessageKinds(
    request=types.JSONRPCRequest,
    notification=types.JSONRPCNotification,
    response=types.JSONRPCResponse,
    error=types.JSONRPCError,
    invalid_params=types.INVALID_PARAMS,
    invalid_request=types.INVALID_REQUEST,
    era_key=types.PROTOCOL_VERSION_META_KEY,
)
"""What the stdin ledger (ledger.py, mcp-free) needs to tell the SDK's messages apart."""
