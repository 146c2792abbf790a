"""The tools' arguments as pydantic models: validation, the messages that name what is wrong, and
each tool's inputSchema.

The models forbid extra keys (`additionalProperties: false` in the schema) and are strict: a
string or boolean where a number goes, a fraction where an integer goes, an empty device id:
each is rejected with a message that names the argument, the accepted range and the value
received. `null` means "use the default". The numbers they state (ranges, defaults, the audio
format) live in contract/limits.py.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, ClassVar, Literal, Optional, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    ValidationError,
)

from mcp_listen.contract import end_words, languages
from mcp_listen.contract.limits import (
    ACCEPTED,
    DEVICE_KINDS,
    MAX_DEVICE_CHARS,
    MAX_DICTATION_MS,
    MAX_DURATION_MS,
    MAX_END_WORD_CHARS,
    MAX_END_WORDS,
    MAX_LLM_MODEL_CHARS,
    MAX_MAX_PAUSE_MS,
    MAX_PROMPT_CHARS,
    MAX_SILENCE_MS,
    MAX_SPEAK_CHARS,
    MAX_SPEED,
    MAX_VOCABULARY_CHARS,
    MAX_VOICE_CHARS,
    MAX_WHISPER_MODEL_CHARS,
    MAX_WORD_CHARS,
    MIN_DURATION_MS,
    MIN_MAX_PAUSE_MS,
    MIN_SILENCE_MS,
    MIN_SPEED,
    UNSPACED_LETTERS,
    Defaults,
    has_control_characters,
)
from mcp_listen.errors import InvalidArgument


def _integral_float_to_int(value: Any) -> Any:
    """JSON has one number type: accept 5000.0 as 5000, but never a bool, NaN or a fraction."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


def _empty_is_default(value: Any) -> Any:
    """`""` (what a form or the Node edition's callers send for "nothing") means the default."""
    if isinstance(value, str) and not value.strip():
        return None
    return value


def _language(value: str) -> str:
    return languages.normalize(value)


def _no_control_characters(value: str) -> str:
    if has_control_characters(value):
        raise ValueError("control characters")
    return value


def _speakable(value: str) -> str:
    """Words to say: newlines and tabs are layout; any other control character (ESC, NUL, CR...)
    is refused, and so is text without a letter or digit (spaces, emoji or punctuation alone: Piper
    says nothing or reads out symbol names) and text that is not valid Unicode (a lone surrogate,
    which JSON's \\ud800 can carry, cannot be encoded for the phonemizer)."""
    if has_control_characters(value.replace("\n", "").replace("\t", "")):
        raise ValueError("control characters")
    if any("\ud800" <= ch <= "\udfff" for ch in value):
        raise ValueError("a lone surrogate")
    if not any(ch.isalnum() for ch in value):
        raise ValueError("nothing to say")
    if any(len(word) > MAX_WORD_CHARS for word in _WORD_RUN.findall(value)):
        raise ValueError("a word too long to say")
    return value


_WORD_RUN = re.compile(f"[^\\W{UNSPACED_LETTERS}]+")
"""What Piper renders as one word: letters and digits, up to a space or punctuation; not a run of a script
written without spaces (Chinese, Thai...), which is cut between its letters (voice/pieces.py)."""


_WHOLE = BeforeValidator(_integral_float_to_int)
"""Strict integers whose constraint sits first, so the schema says minimum/maximum."""
DurationMs = Annotated[int, Field(strict=True, ge=MIN_DURATION_MS, le=MAX_DURATION_MS), _WHOLE]
DictationMs = Annotated[int, Field(strict=True, ge=MIN_DURATION_MS, le=MAX_DICTATION_MS), _WHOLE]
SilenceMs = Annotated[int, Field(strict=True, ge=MIN_SILENCE_MS, le=MAX_SILENCE_MS), _WHOLE]
MaxPauseMs = Annotated[int, Field(strict=True, ge=MIN_MAX_PAUSE_MS, le=MAX_MAX_PAUSE_MS), _WHOLE]
DeviceIndex = Annotated[int, Field(strict=True, ge=0), _WHOLE]
DeviceRef = Union[DeviceIndex, Annotated[StrictStr, Field(min_length=1, max_length=MAX_DEVICE_CHARS)]]
_NAME = AfterValidator(_no_control_characters)
_DEFAULT_IF_EMPTY = BeforeValidator(_empty_is_default)
WhisperModelName = Annotated[
    Optional[Annotated[StrictStr, Field(min_length=1, max_length=MAX_WHISPER_MODEL_CHARS), _NAME]], _DEFAULT_IF_EMPTY
]
"""An optional name of 1..max characters without control characters; an empty string means the default."""
LLMModelName = Annotated[
    Optional[Annotated[StrictStr, Field(min_length=1, max_length=MAX_LLM_MODEL_CHARS), _NAME]], _DEFAULT_IF_EMPTY
]
Vocabulary = Annotated[StrictStr, Field(max_length=MAX_VOCABULARY_CHARS), _NAME]
"""Names whisper should prefer: at most max characters, no control characters; "" means none (not the default)."""
EndWords = Annotated[
    tuple[Annotated[StrictStr, Field(min_length=1, max_length=MAX_END_WORD_CHARS)], ...],
    Field(max_length=MAX_END_WORDS),
    BeforeValidator(end_words.parse_argument),
]
"""The words or short phrases that end the turn when said last: contract/end_words.py checks every entry first
(its refusal names the entry's problem, never the words), so the schema's bounds only state them."""
Language = Annotated[
    Optional[Annotated[StrictStr, Field(min_length=1, max_length=32), AfterValidator(_language)]],
    BeforeValidator(_empty_is_default),
]


class ToolArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _duration(description: str) -> Any:
    return Field(default=None, description=description)


_DEVICE = Field(
    default=None,
    description="Device to record from: the stable `id` string from list_audio_devices (preferred), its "
    "integer `index`, or its name (or a unique part of it). Default: the system default input.",
)
_SILENCE = Field(
    default=None,
    description="Continuous silence in ms that ends a stop_on_silence recording ({min_silence_ms}-{max_silence_ms}, "
    "default {silence_ms}). Requires stop_on_silence: true.",
)


DeviceKind = Literal[DEVICE_KINDS]  # type: ignore[valid-type]


class ListDevicesArgs(ToolArgs):
    kind: Optional[DeviceKind] = Field(
        default=None,
        description='Which devices: "input" (microphones, the default), "output" (speakers and headphones) '
        'or "all". With "output" or "all" each device also carries `kind` ("input", "output" or "both"), '
        "`maxOutputChannels` and `isDefaultOutput`; `isDefault` always marks the default input.",
    )


class CaptureArgs(ToolArgs):
    duration_ms: Optional[DurationMs] = _duration(
        "Recording length in ms ({min_duration_ms}-{max_duration_ms}, default {capture_duration_ms}). "
        "A maximum, not an exact length, when stop_on_silence is true."
    )
    device: Optional[DeviceRef] = _DEVICE
    stop_on_silence: Optional[StrictBool] = Field(
        default=None,
        description="Stop when the speaker stops talking (Silero VAD on this machine). Default false.",
    )
    silence_ms: Optional[SilenceMs] = _SILENCE


class TranscribeArgs(ToolArgs):
    ACCEPTED_HERE: ClassVar[dict[str, str]] = {"duration_ms": ACCEPTED["dictation_ms"]}
    """What this tool accepts where it differs from the shared ACCEPTED (dictation: 10 minutes)."""

    duration_ms: Optional[DictationMs] = _duration(
        "Maximum recording length in ms ({min_duration_ms}-{max_dictation_ms}: up to 10 minutes of dictation). "
        "Default {listen_duration_ms} while stopping on silence, {capture_duration_ms} otherwise."
    )
    device: Optional[DeviceRef] = _DEVICE
    stop_on_silence: Optional[StrictBool] = Field(
        default=None,
        description="Stop when the speaker stops talking (default true). Pass false to record exactly duration_ms.",
    )
    silence_ms: Optional[SilenceMs] = _SILENCE
    end_of_turn: Optional[Literal["silence", "smart"]] = Field(
        default=None,
        description='When the user\'s turn ends: "smart" waits longer (up to max_pause_ms after the last word) '
        'while the words or the voice sound unfinished (a trailing "and", "the", "um"...), so a thinking pause '
        "does not cut the user off, and ends a turn both call finished at once, without waiting out silence_ms; "
        '"silence" ends every turn after silence_ms of silence. The result\'s end_reason says what ended it. '
        "Default {end_of_turn}. Requires stop_on_silence: true.",
    )
    max_pause_ms: Optional[MaxPauseMs] = Field(
        default=None,
        description='With end_of_turn "smart": the longest pause after the last word that still holds the turn '
        "while the words sound unfinished; then it ends (end_reason max_pause). {min_max_pause_ms}-"
        "{max_max_pause_ms}, at least silence_ms, default {max_pause_ms}. Requires stop_on_silence: true.",
    )
    whisper_model: WhisperModelName = Field(
        default=None,
        description="Whisper GGML model: file name, name such as base.en, or path. Default {whisper_model}.",
    )
    language: Language = Field(
        default=None,
        description="Spoken language: a code (en, pt, de, ...) or name (english, portuguese); auto detects it "
        "(the result's `language` says which was heard). Default {language}.",
    )
    translate: Optional[StrictBool] = Field(
        default=None,
        description="Return English text whatever language was spoken (whisper's translate task; needs a "
        "multilingual model). Default false.",
    )
    vocabulary: Optional[Vocabulary] = Field(
        default=None,
        description="Names and terms whisper should prefer, separated by commas: project and library names, "
        'identifiers, people\'s names ("mcp-listen, pywhispercpp, Siobhan, kubectl"), up to {max_vocabulary_chars} '
        "characters. Whisper reads them as the start of its prompt, so it spells them this way when they are said. "
        '"" means none; a vocabulary given replaces the default, MCP_LISTEN_VOCABULARY (none when unset). '
        "Never logged or returned.",
    )
    end_words: Optional[EndWords] = Field(
        default=None,
        description='Words or short phrases the user says last to end their turn at once ("over", "send it", '
        '"c\'est tout"), instead of waiting out silence_ms: up to {max_end_words}, each 1-{max_end_word_words} words '
        'and at most {max_end_word_chars} characters. Only the last words count ("game over is a good title" '
        "goes on); case, punctuation, accents and whisper's spelling are forgiven. The end word is taken out of "
        "the transcription. [] means none; end_words given replace the default, MCP_LISTEN_END_WORDS (none when "
        "unset). Works with either end_of_turn. Requires stop_on_silence: true. Never logged or returned.",
    )


class VoiceQueryArgs(TranscribeArgs):
    ACCEPTED_HERE: ClassVar[dict[str, str]] = {}

    # narrower than transcribe_voice: a question, not dictation
    duration_ms: Optional[DurationMs] = _duration(
        "Maximum recording length in ms ({min_duration_ms}-{max_duration_ms}). Default {listen_duration_ms} "
        "while stopping on silence, {capture_duration_ms} otherwise."
    )
    model: LLMModelName = Field(default=None, description="Ollama model name. Default {model}.")
    prompt: Optional[Annotated[StrictStr, Field(max_length=MAX_PROMPT_CHARS)]] = Field(
        default=None,
        description='System prompt for the model (up to {max_prompt_chars} characters). Default "{prompt}"',
    )


VoiceName = Annotated[
    Optional[Annotated[StrictStr, Field(min_length=1, max_length=MAX_VOICE_CHARS), _NAME]], _DEFAULT_IF_EMPTY
]
Speed = Annotated[float, Field(strict=True, ge=MIN_SPEED, le=MAX_SPEED, allow_inf_nan=False)]
SpeakableText = Annotated[StrictStr, Field(min_length=1, max_length=MAX_SPEAK_CHARS), AfterValidator(_speakable)]
_VOICE = Field(
    default=None,
    description="Piper voice: a name such as en_US-lessac-medium, a file name or a path (in the voices folders, "
    "MCP_LISTEN_VOICES_PATH). Default {voice}.",
)
_SPEED = Field(
    default=None,
    description="Speaking rate, {min_speed}-{max_speed}: 2 says it in half the time, 0.5 in twice. Default 1.",
)


class SpeakArgs(ToolArgs):
    text: SpeakableText = Field(
        description="What to say, 1-{max_speak_chars} characters (newlines and tabs allowed, no other control "
        "characters)."
    )
    voice: VoiceName = _VOICE
    speed: Optional[Speed] = _SPEED
    device: Optional[DeviceRef] = Field(
        default=None,
        description='Device to play on: the stable `id` from list_audio_devices with kind "output" (preferred), '
        "its integer `index`, or its name (or a unique part of it). Default: the system default output.",
    )
    wait: Optional[StrictBool] = Field(
        default=None,
        description="true (the default): return once the speech has been played. false: return as soon as it "
        "starts playing and play the rest in the background (get_status then shows `speaking: true`).",
    )
    barge_in: Optional[StrictBool] = Field(
        default=None,
        description="true: the default microphone listens while the speech plays (its echo cancelled) and the "
        "speech stops as soon as the user talks over it; the call then returns at once with interrupted true "
        "(call transcribe_voice next for their words, or use converse, which keeps them). Needs wait true. "
        "Default {barge_in} with wait true (MCP_LISTEN_BARGE_IN); with wait false it never listens. Without the "
        "echo canceller or a microphone, the speech plays without listening and `warning` says so.",
    )


class ConverseArgs(TranscribeArgs):
    """speak_text's arguments (its `device` is `output_device` here) and every transcribe_voice argument."""

    ACCEPTED_HERE: ClassVar[dict[str, str]] = TranscribeArgs.ACCEPTED_HERE

    text: SpeakableText = Field(
        description="What to say before listening, 1-{max_speak_chars} characters (newlines and tabs allowed, no "
        "other control characters). Keep it short: the user answers when it ends."
    )
    voice: VoiceName = _VOICE
    speed: Optional[Speed] = _SPEED
    output_device: Optional[DeviceRef] = Field(
        default=None,
        description='Device to speak on: the stable `id` from list_audio_devices with kind "output" (preferred), '
        "its integer `index`, or its name. Default: the system default output. `device` is the microphone.",
    )
    barge_in: Optional[StrictBool] = Field(
        default=None,
        description="Let the user talk over the speech: the microphone listens while it plays (its echo "
        "cancelled), the speech stops when the user speaks, and what they said from their first word is the "
        "answer (spoken.interrupted true, spoken.played_ms how much they heard). false: listen only after the "
        "speech. Default {barge_in} (MCP_LISTEN_BARGE_IN). Without the echo canceller the turn listens only after "
        "the speech and `warning` says so.",
    )


class GetStatusArgs(ToolArgs):
    """get_status takes no arguments."""


class StopSpeakingArgs(ToolArgs):
    """stop_speaking takes no arguments."""


def parse_args(model: type[ToolArgs], arguments: dict[str, Any] | None) -> Any:
    """Validate raw tool arguments into `model`, or raise InvalidArgument naming the argument."""
    raw = dict(arguments or {})
    try:
        args = model.model_validate(raw)
    except ValidationError as exc:
        raise InvalidArgument(_describe(model, exc, raw)) from None
    check_silence_requires_stop(args, raw)
    return args


def check_silence_requires_stop(args: Any, raw: dict[str, Any]) -> None:
    """A silence_ms, end_of_turn or max_pause_ms that cannot take effect is a mistake, rejected like an
    unknown argument. What depends on the configured defaults is checked by speech.listener.Plan."""
    if not hasattr(args, "stop_on_silence"):
        return
    stop = args.stop_on_silence
    stops = stop if stop is not None else isinstance(args, TranscribeArgs)
    for name in ("silence_ms", "end_of_turn", "max_pause_ms"):
        if getattr(args, name, None) is not None and not stops:
            raise InvalidArgument(f"{name} requires stop_on_silence: true")
    if getattr(args, "end_words", None) and not stops:  # [] (none) takes effect anywhere: it turns the default off
        raise InvalidArgument(
            "end_words requires stop_on_silence: true (a fixed-length recording cannot end on a word); "
            "drop stop_on_silence: false, or pass end_words: []"
        )
    if getattr(args, "max_pause_ms", None) is not None and getattr(args, "end_of_turn", None) == "silence":
        raise InvalidArgument('max_pause_ms requires end_of_turn: "smart" (with "silence" no pause is held)')


def _describe(model: type[ToolArgs], exc: ValidationError, raw: dict[str, Any]) -> str:
    accepted = ", ".join(model.model_fields) or "none"
    for err in exc.errors():
        name = str(err["loc"][0]) if err["loc"] else "arguments"
        if err["type"] == "extra_forbidden":
            return f"Unknown argument '{name}'. Accepted arguments: {accepted}."
    err = exc.errors()[0]
    name = str(err["loc"][0]) if err["loc"] else "arguments"
    accepted_here = getattr(model, "ACCEPTED_HERE", {}).get(name) or ACCEPTED.get(name, "a valid value")
    if name in UNSHOWN:
        problem = err.get("ctx", {}).get("error") if err["type"] == "value_error" else None
        shown = str(problem) if isinstance(problem, end_words.Refused) else _length_of(raw.get(name))
    else:
        shown = _show(raw.get(name))
    return f"Invalid {name}: expected {accepted_here}; got {shown}."


UNSHOWN = frozenset({"vocabulary", "end_words"})
"""Arguments whose rejected value is described, never echoed: the user's names and end words go into no message
(and so into no log line that carries one)."""


def _length_of(value: Any) -> str:
    if isinstance(value, str):
        return f"a string of {len(value)} characters"
    return _show(value) if isinstance(value, (bool, int, float)) or value is None else f"a {type(value).__name__}"


def _show(value: Any) -> str:
    """Echo a rejected value, kept short: it is the caller's own data."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    kind = type(value).__name__
    names = {"str": "string", "bool": "boolean", "int": "integer", "float": "number", "NoneType": "null"}
    return f"{text} ({names.get(kind, kind)})"


STATED_DEFAULTS = (
    "whisper_model",
    "language",
    "model",
    "prompt",
    "silence_ms",
    "end_of_turn",
    "max_pause_ms",
    "voice",
    "barge_in",
)
"""The arguments whose schema states a `default`: the ones the user can set (MCP_LISTEN_*). Not `vocabulary`:
the user's names (and `end_words`) stay out of tools/list as out of every result."""


def input_schema(model: type[ToolArgs], defaults: Defaults = Defaults()) -> dict[str, Any]:
    """The tool's inputSchema, its descriptions and `default`s stating the effective defaults."""
    schema = model.model_json_schema()
    schema.pop("title", None)
    schema.pop("description", None)
    schema["additionalProperties"] = False
    words = defaults.words()
    for name, prop in schema.get("properties", {}).items():
        if "description" in prop:
            prop["description"] = prop["description"].format_map(words)
        if name in STATED_DEFAULTS:
            prop["default"] = getattr(defaults, name)  # typed as the caller passes it (a boolean, not "true")
        else:
            prop.pop("default", None)
    return schema
