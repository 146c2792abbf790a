"""The public contract: tool arguments and results as pydantic models.

Argument models forbid extra keys (`additionalProperties: false` in the schema)
and are strict: a string or boolean where a number goes, a fraction where an
integer goes, an empty device id — each is rejected with a message that names the
argument, the accepted range and the value received. `null` means "use the
default". Result models give each tool its `outputSchema`; results are dumped
with `exclude_unset`, so a field is present exactly when the contract says so.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictStr, ValidationError

from mcp_listen.errors import InvalidArgument

SAMPLE_RATE = 16000
CHANNELS = 1
NO_SPEECH_TIMEOUT_MS = 10000
DEFAULT_WHISPER_MODEL = "ggml-base.en.bin"
DEFAULT_LLM_MODEL = "llama3.2"
DEFAULT_PROMPT = "You are a helpful assistant."


def _integral_float_to_int(value: Any) -> Any:
    """JSON has one number type: accept 5000.0 as 5000, but never a bool, NaN or a fraction."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value




def _whole(low: int, high: int | None = None) -> Any:
    """A strict integer in [low, high]; the constraint sits first so the schema says minimum/maximum."""
    return Annotated[int, Field(strict=True, ge=low, le=high), BeforeValidator(_integral_float_to_int)]


DurationMs = _whole(100, 30000)
SilenceMs = _whole(100, 10000)
DeviceRef = Union[_whole(0), Annotated[StrictStr, Field(min_length=1, max_length=512)]]

ACCEPTED = {
    "duration_ms": "an integer from 100 to 30000 (milliseconds)",
    "silence_ms": "an integer from 100 to 10000 (milliseconds)",
    "device": "a non-negative integer index or a non-empty string id from list_audio_devices",
    "stop_on_silence": "a boolean",
    "whisper_model": "a model file name, a model name such as base.en, or a path (1 to 1024 characters)",
    "language": "a language code such as en, de or auto (2 to 16 letters)",
    "model": "an Ollama model name (1 to 200 characters)",
    "prompt": "a system prompt of at most 8000 characters",
}


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _duration(description: str) -> Any:
    return Field(default=None, description=description)


_DEVICE = Field(
    default=None,
    description="Device to record from: the stable `id` string from list_audio_devices (preferred) "
    "or its integer `index`. Default: the system default input.",
)
_SILENCE = Field(
    default=None,
    description="Continuous silence in ms that ends a stop_on_silence recording (100-10000, default 1000). "
    "Requires stop_on_silence: true.",
)


class ListDevicesArgs(_Args):
    """list_audio_devices takes no arguments."""


class CaptureArgs(_Args):
    duration_ms: Optional[DurationMs] = _duration(
        "Recording length in ms (100-30000, default 5000). A maximum, not an exact length, "
        "when stop_on_silence is true."
    )
    device: Optional[DeviceRef] = _DEVICE
    stop_on_silence: Optional[StrictBool] = Field(
        default=None,
        description="Stop when the speaker stops talking (Silero VAD on this machine). Default false.",
    )
    silence_ms: Optional[SilenceMs] = _SILENCE


class TranscribeArgs(_Args):
    duration_ms: Optional[DurationMs] = _duration(
        "Maximum recording length in ms (100-30000). Default 15000 while stopping on silence, 5000 otherwise."
    )
    device: Optional[DeviceRef] = _DEVICE
    stop_on_silence: Optional[StrictBool] = Field(
        default=None,
        description="Stop when the speaker stops talking (default true). Pass false to record exactly duration_ms.",
    )
    silence_ms: Optional[SilenceMs] = _SILENCE
    whisper_model: Optional[Annotated[StrictStr, Field(min_length=1, max_length=1024)]] = Field(
        default=None,
        description=f"Whisper GGML model: file name, name such as base.en, or path. Default {DEFAULT_WHISPER_MODEL}.",
    )
    language: Optional[Annotated[StrictStr, Field(pattern=r"^[A-Za-z]{2,3}([-_][A-Za-z]{2,4})?$|^auto$")]] = Field(
        default=None, description="Spoken language code (default en); auto detects it."
    )


class VoiceQueryArgs(TranscribeArgs):
    model: Optional[Annotated[StrictStr, Field(min_length=1, max_length=200)]] = Field(
        default=None, description=f"Ollama model name. Default {DEFAULT_LLM_MODEL}."
    )
    prompt: Optional[Annotated[StrictStr, Field(max_length=8000)]] = Field(
        default=None, description=f'System prompt for the model. Default "{DEFAULT_PROMPT}"'
    )


class GetStatusArgs(_Args):
    """get_status takes no arguments."""


# ---------------------------------------------------------------- results


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def public(self) -> dict[str, Any]:
        """The wire form: exactly the fields that were set, nulls included."""
        return self.model_dump(mode="json", exclude_unset=True)


class Device(_Result):
    index: int
    name: str
    id: str
    maxInputChannels: int
    defaultSampleRate: float
    isDefault: bool


class DevicesResult(_Result):
    devices: list[Device]


StoppedBy = Literal["silence", "ceiling", "no_speech_timeout"]


class CaptureResult(_Result):
    path: str
    duration_ms: int
    sample_rate: int
    channels: int
    size_bytes: int
    stopped_by: Optional[StoppedBy] = None
    speech_detected: Optional[bool] = None


class TranscribeResult(_Result):
    transcription: Optional[str]
    stopped_by: Optional[StoppedBy] = None
    duration_ms: Optional[int] = None
    language: Optional[str] = None
    speech_detected: Optional[bool] = None
    message: Optional[str] = None


class VoiceQueryResult(_Result):
    transcription: Optional[str]
    response: Optional[str]
    model: Optional[str] = None
    speech_detected: Optional[bool] = None
    stopped_by: Optional[StoppedBy] = None
    message: Optional[str] = None


class StatusResult(_Result):
    recording: bool
    tool: Optional[str]
    elapsed_ms: Optional[int]
    device: Optional[str]
    whisper_model_loaded: Optional[str]


# ---------------------------------------------------------------- validation


def parse_args(model: type[_Args], arguments: dict[str, Any] | None) -> Any:
    """Validate raw tool arguments into `model`, or raise InvalidArgument naming the argument."""
    raw = dict(arguments or {})
    try:
        args = model.model_validate(raw)
    except ValidationError as exc:
        raise InvalidArgument(_describe(model, exc, raw)) from None
    check_silence_requires_stop(args, raw)
    return args


def check_silence_requires_stop(args: Any, raw: dict[str, Any]) -> None:
    """A silence_ms that cannot take effect is a mistake, rejected like an unknown argument."""
    silence = getattr(args, "silence_ms", None)
    if silence is None:
        return
    stop = args.stop_on_silence
    stops = stop if stop is not None else isinstance(args, TranscribeArgs)
    if not stops:
        raise InvalidArgument("silence_ms requires stop_on_silence: true")


def _describe(model: type[_Args], exc: ValidationError, raw: dict[str, Any]) -> str:
    accepted = ", ".join(model.model_fields) or "none"
    for err in exc.errors():
        name = str(err["loc"][0]) if err["loc"] else "arguments"
        if err["type"] == "extra_forbidden":
            return f"Unknown argument '{name}'. Accepted arguments: {accepted}."
    err = exc.errors()[0]
    name = str(err["loc"][0]) if err["loc"] else "arguments"
    return f"Invalid {name}: expected {ACCEPTED.get(name, 'a valid value')}; got {_show(raw.get(name))}."


def _show(value: Any) -> str:
    """Echo a rejected value, kept short: it is the caller's own data."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    kind = type(value).__name__
    names = {"str": "string", "bool": "boolean", "int": "integer", "float": "number", "NoneType": "null"}
    return f"{text} ({names.get(kind, kind)})"


def input_schema(model: type[_Args]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    schema.pop("description", None)
    schema["additionalProperties"] = False
    return schema


def output_schema(model: type[_Result]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    return schema
