"""The MCP adapter (server.py) in memory against a fake engine: no microphone, no model.

The fake implements results.Tools and answers with typed results or raises ListenErrors;
the SDK's own in-memory client calls the tools. Every expected payload is written out here,
in wire order, so a change to a field name, a value or the order of keys fails a test.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest

from mcp_listen.audio.devices import InputDevice
from mcp_listen.config import Settings
from mcp_listen.contract.results import Answered, Captured, Devices, Status, Transcribed
from mcp_listen.errors import Cancelled, CaptureError, DeviceBusy, LLMError, TranscriptionError

pytestmark = pytest.mark.anyio

NO_SPEECH = "No speech was detected. Ask the user to repeat, or check that the correct microphone is selected."
NO_WORDS = (
    "Speech was detected but could not be transcribed. It may have been too quiet, too brief, or unclear. "
    "Ask the user to repeat, a little louder and closer to the microphone."
)


@dataclass
class FakeEngine:
    """Answers each tool with what `answers[tool]` holds: a typed result, or an exception to raise."""

    answers: dict[str, Any]
    settings: Settings = field(default_factory=Settings)
    shutdown: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def _answer(self, tool: str, args: Any = None) -> Any:
        self.calls.append((tool, args))
        answer = self.answers[tool]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def list_devices(self, kind: str = "input") -> Devices:
        return self._answer("list_audio_devices")

    def capture(self, args: Any, *, stop: Any = None, progress: Any = None) -> Captured:
        return self._answer("capture_audio", args)

    def transcribe_voice(self, args: Any, *, stop: Any = None, progress: Any = None) -> Transcribed:
        return self._answer("transcribe_voice", args)

    def voice_query(self, args: Any, *, stop: Any = None, progress: Any = None) -> Answered:
        return self._answer("voice_query", args)

    def status(self) -> Status:
        return self._answer("get_status")


async def call(engine: FakeEngine, tool: str, args: dict[str, Any] | None = None) -> Any:
    from mcp import Client

    from mcp_listen.server.app import build_server

    async with Client(build_server(engine)) as client:
        return await client.call_tool(tool, args or {})


def success(result: Any) -> Any:
    """The structured content, after checking the one text block is the same JSON, byte for byte."""
    assert not result.is_error, result.content
    assert len(result.content) == 1 and result.content[0].type == "text"
    return result.structured_content


def failure(result: Any) -> tuple[str, dict[str, Any]]:
    """(first text, parsed JSON of the second) of an error result, which has no structured content."""
    assert result.is_error
    assert result.structured_content is None
    assert [block.type for block in result.content] == ["text", "text"]
    return result.content[0].text, json.loads(result.content[1].text)


def same_bytes(result: Any, expected: Any) -> None:
    assert result.content[-1].text == json.dumps(expected, ensure_ascii=False)


MIC = InputDevice(3, "USB Mic", "alsa:usb-mic", 2, 48000.0, True)
HEARD = Transcribed("what time is it", 2400, "en", True, "silence")


async def test_list_devices_wire_shape():
    result = await call(FakeEngine({"list_audio_devices": Devices([MIC])}), "list_audio_devices")
    device = {
        "index": 3,
        "name": "USB Mic",
        "id": "alsa:usb-mic",
        "maxInputChannels": 2,
        "defaultSampleRate": 48000.0,
        "isDefault": True,
    }
    assert success(result) == {"devices": [device]}
    same_bytes(result, [device])  # the text block is the bare array, as the Node edition's


@pytest.mark.parametrize(
    "captured, expected",
    [
        (
            Captured("/r/a.wav", 5000, 16000, 1, 160044),
            {"path": "/r/a.wav", "duration_ms": 5000, "sample_rate": 16000, "channels": 1, "size_bytes": 160044},
        ),
        (
            Captured("/r/b.wav", 1200, 16000, 1, 38444, stopped_by="silence", speech_detected=True),
            {
                "path": "/r/b.wav",
                "duration_ms": 1200,
                "sample_rate": 16000,
                "channels": 1,
                "size_bytes": 38444,
                "stopped_by": "silence",
                "speech_detected": True,
            },
        ),
        (
            Captured(
                "/r/c.wav", 5000, 16000, 1, 160044, stopped_by="ceiling", speech_detected=True, end_reason="duration"
            ),
            {
                "path": "/r/c.wav",
                "duration_ms": 5000,
                "sample_rate": 16000,
                "channels": 1,
                "size_bytes": 160044,
                "stopped_by": "ceiling",
                "speech_detected": True,
                "end_reason": "duration",
            },
        ),
    ],
)
async def test_capture_wire_shape(captured, expected):
    engine = FakeEngine({"capture_audio": captured})
    result = await call(engine, "capture_audio", {"duration_ms": 5000})
    assert success(result) == expected
    same_bytes(result, expected)
    assert engine.calls[0][1].duration_ms == 5000  # the parsed arguments reach the engine


@pytest.mark.parametrize(
    "heard, expected",
    [
        (HEARD, {"transcription": "what time is it", "stopped_by": "silence", "duration_ms": 2400, "language": "en"}),
        (
            Transcribed(None, 10000, "en", False, "no_speech_timeout"),
            {
                "transcription": None,
                "stopped_by": "no_speech_timeout",
                "duration_ms": 10000,
                "language": "en",
                "speech_detected": False,
                "message": NO_SPEECH,
            },
        ),
        (
            Transcribed(None, 3000, "de", True, None),  # fixed length: stopped_by null, no speech_detected
            {"transcription": None, "stopped_by": None, "duration_ms": 3000, "language": "de", "message": NO_WORDS},
        ),
        (
            Transcribed("so I was thinking", 6100, "en", True, "silence", end_reason="max_pause"),
            {
                "transcription": "so I was thinking",
                "stopped_by": "silence",
                "duration_ms": 6100,
                "language": "en",
                "end_reason": "max_pause",
            },
        ),
        (
            Transcribed(None, 3000, "en", True, None, end_reason="duration"),
            {
                "transcription": None,
                "stopped_by": None,
                "duration_ms": 3000,
                "language": "en",
                "end_reason": "duration",
                "message": NO_WORDS,
            },
        ),
    ],
)
async def test_transcribe_wire_shape(heard, expected):
    result = await call(FakeEngine({"transcribe_voice": heard}), "transcribe_voice")
    assert success(result) == expected
    same_bytes(result, expected)


@pytest.mark.parametrize(
    "answered, expected",
    [
        (
            Answered(HEARD, "llama3.2", "Noon."),
            {"transcription": "what time is it", "response": "Noon.", "model": "llama3.2"},
        ),
        (
            Answered(
                Transcribed("what time is it", 2400, "en", True, "silence", end_reason="words+voice"), "m", "Noon."
            ),
            {"transcription": "what time is it", "response": "Noon.", "model": "m", "end_reason": "words+voice"},
        ),
        (
            Answered(Transcribed(None, 1500, "en", True, "silence"), "llama3.2", None),
            {
                "transcription": None,
                "response": None,
                "speech_detected": True,
                "stopped_by": "silence",
                "message": NO_WORDS,
            },
        ),
    ],
)
async def test_voice_query_wire_shape(answered, expected):
    result = await call(FakeEngine({"voice_query": answered}), "voice_query")
    assert success(result) == expected
    same_bytes(result, expected)


@pytest.mark.parametrize(
    "status, expected",
    [
        (
            Status(False),
            {"recording": False, "tool": None, "elapsed_ms": None, "device": None, "whisper_model_loaded": None},
        ),
        (
            Status(True, "voice_query", 812, "USB Mic", "/m/ggml-base.en.bin"),
            {
                "recording": True,
                "tool": "voice_query",
                "elapsed_ms": 812,
                "device": "USB Mic",
                "whisper_model_loaded": "/m/ggml-base.en.bin",
            },
        ),
    ],
)
async def test_status_wire_shape(status, expected):
    result = await call(FakeEngine({"get_status": status}), "get_status")
    assert success(result) == expected
    same_bytes(result, expected)


LLM_DOWN = LLMError(
    "Ollama is not running. Start it: ollama serve",
    code="ollama_unreachable",
    extra={
        "transcription": "what time is it",
        "response": None,
        "model": "llama3.2",
        "message": "Ollama is not running. Start it: ollama serve",
    },
)


@pytest.mark.parametrize(
    "tool, error, expected",
    [
        (
            "capture_audio",
            CaptureError("The microphone is gone."),
            {"error": {"stage": "capture", "code": "capture_failed", "message": "The microphone is gone."}},
        ),
        (
            "transcribe_voice",
            DeviceBusy("A recording is already in progress."),
            {"error": {"stage": "capture", "code": "busy", "message": "A recording is already in progress."}},
        ),
        (
            "transcribe_voice",
            TranscriptionError("No model.", code="model_not_found"),
            {"error": {"stage": "transcription", "code": "model_not_found", "message": "No model."}},
        ),
        (
            "voice_query",
            LLM_DOWN,
            {
                "error": {"stage": "llm", "code": "ollama_unreachable", "message": LLM_DOWN.message},
                "transcription": "what time is it",
                "response": None,
                "model": "llama3.2",
                "message": LLM_DOWN.message,
            },
        ),
        (
            "voice_query",
            Cancelled("The recording was cancelled."),
            {"error": {"stage": None, "code": "cancelled", "message": "The recording was cancelled."}},
        ),
        (
            "get_status",
            RuntimeError("a bug"),
            {
                "error": {
                    "stage": None,
                    "code": "internal_error",
                    "message": "Internal error in mcp-listen; the server log (stderr) has details.",
                }
            },
        ),
    ],
)
async def test_error_stages_wire_shape(tool, error, expected):
    result = await call(FakeEngine({tool: error}), tool)
    sentence, payload = failure(result)
    assert payload == expected
    assert sentence == f"Error: {expected['error']['message']}"
    same_bytes(result, expected)


async def test_invalid_arguments_never_reach_the_engine():
    engine = FakeEngine({"capture_audio": Captured("/r/a.wav", 5000, 16000, 1, 160044)})
    sentence, payload = failure(await call(engine, "capture_audio", {"duration_ms": "long"}))
    assert payload["error"]["code"] == "invalid_argument" and payload["error"]["stage"] is None
    assert "duration_ms" in sentence
    assert engine.calls == []


async def test_unknown_tool():
    sentence, payload = failure(await call(FakeEngine({}), "record_everything"))
    assert payload["error"]["code"] == "unknown_tool"
    assert "capture_audio" in sentence


def test_an_outgoing_message_with_text_that_is_not_utf8_is_sent_escaped():
    """The net under every reply: the SDK's writer dies on a lone surrogate, ending the session."""
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    from mcp_listen.server.ledger import encodable

    path = b"/tmp/caf\xe9/x.wav".decode("utf-8", "surrogateescape")
    reply = types.JSONRPCResponse(jsonrpc="2.0", id=3, result={"structuredContent": {"path": path}})
    sent = encodable(SessionMessage(reply)).message.model_dump_json(by_alias=True, exclude_unset=True)
    assert '"path":"/tmp/caf\\\\udce9/x.wav"' in sent
    plain = SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=4, result={"a": "café"}))
    assert encodable(plain) is plain


def test_progress_sent_always_increases_even_when_the_engine_repeats_a_value():
    """MCP wants each notification's progress above the last: "Speech detected" and
    "Listening" can fall on one window, and the phases after listening repeat its length."""
    import anyio
    import anyio.to_thread

    from mcp_listen.server.calls import Call

    sent: list[float] = []

    class Session:
        async def report_progress(self, done: float, total: float | None, message: str) -> None:
            sent.append(done)

    class Context:
        meta = {"progressToken": "t"}
        session = Session()

    call = Call(Context())

    def engine() -> None:
        for done in (0, 992, 992, 2016, 2016, 2016):  # listening..., transcribing, asking
            call.progress(done, None, "phase")

    anyio.run(anyio.to_thread.run_sync, engine)
    assert sent == [0, 992, 993, 2016, 2017, 2018]
