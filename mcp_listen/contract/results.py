"""What the engine returns, typed, and the one place that turns it into the contract's JSON.

engine.Engine answers in these frozen dataclasses and knows nothing of the wire; the
adapters (server/app.py for the tools, cli/commands.py for the CLI) call `wire()` and get exactly
the result dicts the contract and the Node edition define. The result models below give each tool
its `outputSchema`; they are dumped with `exclude_unset`, so a field is present exactly when the
contract says so. `Tools` is what
an adapter needs of an engine, so the MCP adapter can run in memory against a fake one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Optional, Protocol

from pydantic import BaseModel, ConfigDict

from mcp_listen.contract import limits

NO_SPEECH_MESSAGE = "No speech was detected. Ask the user to repeat, or check that the correct microphone is selected."
NO_WORDS_MESSAGE = (
    "Speech was detected but could not be transcribed. It may have been too quiet, too brief, or unclear. "
    "Ask the user to repeat, a little louder and closer to the microphone."
)

DIGITAL_SILENCE_PROGRESS = "No sound at all: the microphone delivers only zeros (muted, or no permission?)"
MICROPHONE_ACCESS_HINT = (
    "allow microphone access for the app that runs mcp-listen (macOS: System Settings > Privacy & Security > "
    "Microphone, then restart the app; Windows: Settings > Privacy & security > Microphone, 'Let desktop apps "
    "access your microphone'; Linux: unmute the input in the sound settings, or pactl set-source-mute "
    "@DEFAULT_SOURCE@ 0)"
)
"""Where microphone access is granted per platform: the dead-microphone warning and doctor say it."""
DIGITAL_SILENCE_WARNING = (
    "The microphone delivered digital silence (every sample exactly 0), which a working microphone never does, "
    f"even in a quiet room: it is muted, blocked or disconnected. To fix it, {MICROPHONE_ACCESS_HINT}, switch "
    "off a hardware mute key or switch, or choose another device from list_audio_devices."
)
"""In a result's `warning` when every sample of a recording of at least a second was 0."""

Progress = Callable[[float, Optional[float], str], None]


class Cancel(Protocol):
    """What every blocking step polls to stop early: a threading.Event, or several linked (AnyOf)."""

    def is_set(self) -> bool: ...


class AnyOf:
    """Set when any of the given events is set: a call's cancel, the process's shutdown, a
    phrase's own abort. Quacks like threading.Event for `is_set`."""

    def __init__(self, *events: Cancel | None) -> None:
        self._events = [e for e in events if e is not None]

    def is_set(self) -> bool:
        return any(e.is_set() for e in self._events)


class Configured(Protocol):
    """What an adapter reads of the engine's settings (config.Settings): the tools' defaults, to
    describe each tool, and the check that names a misconfigured variable in every call."""

    @property
    def defaults(self) -> limits.Defaults: ...

    def check(self) -> None: ...


@dataclass(frozen=True)
class Devices:
    devices: Sequence[Any]
    """devices.InputDevice or devices.AudioDevice (anything with `public()`), in PortAudio's order."""


@dataclass(frozen=True)
class Captured:
    path: str
    duration_ms: int
    sample_rate: int
    channels: int
    size_bytes: int
    stopped_by: str | None = None
    """None for a fixed-length recording: the result then carries neither this nor speech_detected."""
    speech_detected: bool | None = None
    warning: str | None = None
    """Set (DIGITAL_SILENCE_WARNING) when the microphone delivered only zeros: a result says so."""
    end_reason: str | None = None
    """Why the turn ended (limits.END_REASONS); on the wire only with stopped_by, and not after the
    no-speech timeout (None: nobody spoke)."""


@dataclass(frozen=True)
class Transcribed:
    text: str | None
    """The usable words; None when nobody spoke or nothing usable came out (see speech_detected)."""
    duration_ms: int
    language: str
    """The language whisper transcribed in (the detected one for `auto`)."""
    speech_detected: bool
    stopped_by: str | None = None
    """Why the recording ended; None for a fixed length (stop_on_silence false)."""
    warning: str | None = None
    """Set (DIGITAL_SILENCE_WARNING) when the microphone delivered only zeros."""
    end_reason: str | None = None
    """Why the user's turn ended (limits.END_REASONS); None when nobody spoke before the no-speech timeout."""
    end_signal: str | None = None
    """end_of_turn "smart", where end_reason does not name the signal (limits.END_SIGNALS); None otherwise."""


@dataclass(frozen=True)
class Answered:
    question: Transcribed
    model: str
    response: str | None
    """None only when the question had no words (the model was not asked)."""


@dataclass(frozen=True)
class Status:
    recording: bool
    tool: str | None = None
    elapsed_ms: int | None = None
    device: str | None = None
    whisper_model_loaded: str | None = None
    speaking: bool = False
    """speak_text holds the device (recording is then False): the result says `speaking: true`."""


@dataclass(frozen=True)
class Spoken:
    voice: str
    duration_ms: int | None
    """Of the speech played; None when the call returned while it was still playing (wait: false)."""
    first_audio_ms: int | None
    """Call received -> first samples handed to the sound device; None when nothing was played."""
    interrupted: bool = False
    played_ms: int | None = None
    """converse with barge_in only: what the user heard of the speech."""
    warning: str | None = None
    """speak_text with barge_in but no echo canceller: it played without listening."""
    interrupted_by: str | None = None
    """Who cut it short (limits.INTERRUPTED_BY); None when it played out."""
    cut_in_ms: int | None = None
    """The user cut in (barge-in): from the speech's first sound to their voice stopping it."""
    paused_ms: int | None = None
    """barge-in paused the speech for sounds that were not the user and it played on: how long it was quiet."""
    pauses: int | None = None
    """How often it paused so; None when it never did."""


@dataclass(frozen=True)
class Stopped:
    stopped: bool
    """True when a speech was playing and is now cut short; false when nothing was playing."""
    played_ms: int | None
    """How much of the stopped speech had been handed to the device; None when nothing was playing."""


@dataclass(frozen=True)
class Conversed:
    answer: Transcribed
    """The user's answer, heard once the speech was over."""
    spoken: Spoken
    """What was said first (its duration_ms is never None: converse waits for the speech to end)."""
    listening_after_s: float | None = None
    """From the last sample leaving the speaker to the microphone taken as the user's (not on the wire)."""
    cut_in_after_s: float | None = None
    """barge_in: from the speech's first sound to the user's voice stopping it; None when it played out
    (not on the wire: the CLI says it)."""


class Tools(Protocol):
    """What an adapter needs of an engine (engine.Engine)."""

    @property
    def settings(self) -> Configured: ...

    shutdown: threading.Event

    def list_devices(self, kind: str = "input") -> Devices: ...

    def capture(self, args: Any, *, stop: Any = None, progress: Progress | None = None) -> Captured: ...

    def transcribe_voice(self, args: Any, *, stop: Any = None, progress: Progress | None = None) -> Transcribed: ...

    def voice_query(self, args: Any, *, stop: Any = None, progress: Progress | None = None) -> Answered: ...

    def speak(self, args: Any, *, stop: Any = None, received: float | None = None) -> Spoken: ...

    def converse(
        self, args: Any, *, stop: Any = None, progress: Progress | None = None, received: float | None = None
    ) -> Conversed: ...

    def halt_speaking(self) -> Callable[[], Stopped]:
        """stop_speaking's first half, at once (the adapter calls it on its event loop, before the calls
        read after it run): the speech playing now is marked as stopping; the function returned waits,
        blocking, until the device let go, and says what was stopped."""
        ...

    def status(self) -> Status: ...


# ---------------------------------------------------------------- the wire's result models


class ToolResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def public(self) -> dict[str, Any]:
        """The wire form: exactly the fields that were set, nulls included."""
        return self.model_dump(mode="json", exclude_unset=True)


class Device(ToolResult):
    index: int
    name: str
    id: str
    maxInputChannels: int
    defaultSampleRate: float
    isDefault: bool
    """The default input (the microphone used when no device is given), whatever `kind` was asked."""
    kind: Optional[Literal["input", "output", "both"]] = None
    """Only with kind "output" or "all": what the device does (a headset's one device may do both)."""
    maxOutputChannels: Optional[int] = None
    isDefaultOutput: Optional[bool] = None


class DevicesResult(ToolResult):
    devices: list[Device]


StoppedBy = Literal["silence", "ceiling", "no_speech_timeout"]
EndReason = Literal[limits.END_REASONS]  # type: ignore[valid-type]
"""Why the user's turn ended: silence, complete, max_pause, duration or cancelled (docs/tools.md)."""
EndSignal = Literal[limits.END_SIGNALS]  # type: ignore[valid-type]
InterruptedBy = Literal[limits.INTERRUPTED_BY]  # type: ignore[valid-type]


class CaptureResult(ToolResult):
    path: str
    duration_ms: int
    sample_rate: int
    channels: int
    size_bytes: int
    stopped_by: Optional[StoppedBy] = None
    speech_detected: Optional[bool] = None
    end_reason: Optional[EndReason] = None
    """With stop_on_silence, beside stopped_by: silence or duration (absent after the no-speech timeout)."""
    warning: Optional[str] = None


class TranscribeResult(ToolResult):
    transcription: Optional[str]
    stopped_by: Optional[StoppedBy] = None
    duration_ms: Optional[int] = None
    language: Optional[str] = None
    speech_detected: Optional[bool] = None
    end_reason: Optional[EndReason] = None
    """Why the user's turn ended: silence; the signal that judged it finished under end_of_turn smart
    (words+voice, voice, words); end_word; max_pause (smart held the pause until max_pause_ms); duration;
    absent when nobody spoke before the no-speech timeout."""
    end_signal: Optional[EndSignal] = None
    """end_of_turn smart only, where end_reason does not name the signal: what held a max_pause (words, voice,
    words+voice; unjudged when they were not in yet); silence beside a silence (none covers the language)."""
    message: Optional[str] = None
    warning: Optional[str] = None


class VoiceQueryResult(ToolResult):
    transcription: Optional[str]
    response: Optional[str]
    model: Optional[str] = None
    speech_detected: Optional[bool] = None
    stopped_by: Optional[StoppedBy] = None
    end_reason: Optional[EndReason] = None
    """As transcribe_voice's, for the question."""
    end_signal: Optional[EndSignal] = None
    """As transcribe_voice's, for the question."""
    message: Optional[str] = None
    warning: Optional[str] = None


class SpokenPart(ToolResult):
    voice: str
    """The Piper voice that spoke (its name)."""
    duration_ms: int
    """Length of the speech played before listening began."""
    first_audio_ms: Optional[int]
    """From the call's arrival to the first samples handed to the sound device; null if none were."""
    interrupted: bool
    """True when the speech was cut short."""
    played_ms: Optional[int] = None
    """Only with barge_in: how much of the speech the user heard before the speech stopped (all of it
    when nobody cut in); duration_ms is the same figure."""
    interrupted_by: Optional[InterruptedBy] = None
    """Only when interrupted: who cut it short (user, stop_speaking, cancel)."""
    cut_in_ms: Optional[int] = None
    """Only when the user cut in: from the speech's first sound to their voice stopping it."""
    paused_ms: Optional[int] = None
    """Only when barge-in paused the speech for a sound that was not the user's speech (a clap, music, its
    own echo) and it played on where it paused: how long it was quiet, in all."""
    pauses: Optional[int] = None
    """Only with paused_ms: how many times it paused so."""


class StopSpeakingResult(ToolResult):
    stopped: bool
    """True when speech was playing (speak_text, or converse before it listens) and is now cut short; the
    call that started it returns `interrupted: true`. False when nothing was playing."""
    played_ms: Optional[int]
    """How much of the stopped speech had played; null when nothing was playing."""


class ConverseResult(TranscribeResult):
    spoken: SpokenPart
    """What the agent said first; the other fields are transcribe_voice's, for the user's answer."""


class StatusResult(ToolResult):
    recording: bool
    tool: Optional[str]
    elapsed_ms: Optional[int]
    device: Optional[str]
    whisper_model_loaded: Optional[str]
    speaking: Optional[bool] = None
    """Present (true) only while speak_text plays; `recording` is then false and `tool` is speak_text."""


class SpeakResult(ToolResult):
    voice: str
    """The Piper voice that spoke (its name)."""
    duration_ms: Optional[int]
    """Length of the speech played; null with wait: false (the rest is still being played)."""
    first_audio_ms: Optional[int]
    """From the call's arrival to the first samples handed to the sound device; null if none were."""
    interrupted: bool
    """True when the call was cancelled (or the server stopped), or with barge_in the user talked over it,
    before the speech was over."""
    interrupted_by: Optional[InterruptedBy] = None
    """Only when interrupted: who cut it short (user, stop_speaking, cancel)."""
    cut_in_ms: Optional[int] = None
    """Only when the user cut in: from the speech's first sound to their voice stopping it."""
    paused_ms: Optional[int] = None
    """Only when barge-in paused the speech for a sound that was not the user's speech (a clap, music, its
    own echo) and it played on where it paused: how long it was quiet, in all."""
    pauses: Optional[int] = None
    """Only with paused_ms: how many times it paused so."""
    warning: Optional[str] = None
    """barge_in asked for but the echo canceller is missing: the speech played without listening."""


def output_schema(model: type[ToolResult]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    return schema


def wire(result: Devices | Captured | Transcribed | Answered | Status | Spoken | Conversed | Stopped) -> dict[str, Any]:
    """The contract's result dict: exactly the fields the tool's result carries, nulls included."""
    if isinstance(result, Devices):
        return {"devices": [device.public() for device in result.devices]}
    if isinstance(result, Captured):
        return _captured(result)
    if isinstance(result, Transcribed):
        fields: dict[str, Any] = dict(
            transcription=result.text, stopped_by=result.stopped_by, duration_ms=result.duration_ms
        )
        fields["language"] = result.language
        if result.text is None:
            fields.update(_silence(result))
        return TranscribeResult(
            **fields, **_end_reason(result.end_reason, result.end_signal), **_warning(result.warning)
        ).public()
    if isinstance(result, Answered):
        question = result.question
        warning = {**_end_reason(question.end_reason, question.end_signal), **_warning(question.warning)}
        if not question.text:  # no words; or only an end word, nothing to ask
            return VoiceQueryResult(transcription=None, response=None, **_silence(question), **warning).public()
        answer: dict[str, Any] = dict(transcription=question.text, response=result.response, model=result.model)
        return VoiceQueryResult(**answer, **warning).public()
    if isinstance(result, Status):
        status: dict[str, Any] = {name: value for name, value in vars(result).items() if name != "speaking"}
        if result.speaking:  # only then: the result is the Node edition's exactly while nothing speaks
            status["speaking"] = True
        return StatusResult(**status).public()
    if isinstance(result, Spoken):
        return SpeakResult(**_spoken(result)).public()
    if isinstance(result, Stopped):
        return StopSpeakingResult(stopped=result.stopped, played_ms=result.played_ms).public()
    if isinstance(result, Conversed):
        return ConverseResult(**wire(result.answer), spoken=SpokenPart(**_spoken(result.spoken))).public()
    raise TypeError(f"not an engine result: {type(result).__name__}")


def _captured(result: Captured) -> dict[str, Any]:
    fields = {name: getattr(result, name) for name in ("path", "duration_ms", "sample_rate", "channels", "size_bytes")}
    if result.stopped_by is not None:
        fields.update(stopped_by=result.stopped_by, speech_detected=result.speech_detected)
        fields.update(_end_reason(result.end_reason))
    return CaptureResult(**fields, **_warning(result.warning)).public()


def _spoken(spoken: Spoken) -> dict[str, Any]:
    """Spoken's fields; `played_ms`, `warning`, `interrupted_by`, `cut_in_ms` and the pauses only when set."""
    optional = ("played_ms", "warning", "interrupted_by", "cut_in_ms", "paused_ms", "pauses")
    return {k: v for k, v in vars(spoken).items() if v is not None or k not in optional}


def _end_reason(reason: str | None, signal: str | None = None) -> dict[str, Any]:
    """`end_reason` only when there was a turn to end: after the no-speech timeout the result is the
    Node edition's exactly; `end_signal` beside it only where it adds to it (ending.TurnEnding.signal)."""
    if reason is None:
        return {}
    return {"end_reason": reason} if signal is None else {"end_reason": reason, "end_signal": signal}


def _warning(warning: str | None) -> dict[str, Any]:
    """`warning` only when there is one: a result without it is exactly the Node edition's."""
    return {} if warning is None else {"warning": warning}


def _silence(heard: Transcribed) -> dict[str, Any]:
    """The two no-words outcomes differ only in speech_detected: the caller branches on it.

    With a fixed length the contract leaves speech_detected and stopped_by out (as the Node
    edition does); the message still says what the VAD heard.
    """
    fields: dict[str, Any] = {}
    if heard.stopped_by is not None:
        fields.update(speech_detected=heard.speech_detected, stopped_by=heard.stopped_by)
    fields["message"] = NO_WORDS_MESSAGE if heard.speech_detected else NO_SPEECH_MESSAGE
    return fields
