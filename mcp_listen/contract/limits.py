"""The contract's numbers: the audio format, each argument's range, the defaults, and the
phrases that state them.

One home for every value a tool description, a CLI help line, an error message or the
listening code repeats, so the prose the model reads cannot drift from what the code does.
Pure and free of pydantic: the audio modules and the CLI's parser import it without the
argument models (contract/arguments.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from mcp_listen.contract import languages

SAMPLE_RATE = 16000
"""The one audio format inside mcp-listen: 16 kHz mono int16 (whisper's and Silero's rate)."""
WINDOW_SAMPLES = 512
"""One window of the listening loop: what Silero VAD takes at 16 kHz (32 ms)."""
SAMPLE_RATE_KHZ = f"{SAMPLE_RATE / 1000:g}"
"""The rate as prose says it (`16` kHz)."""
WINDOW_MS = WINDOW_SAMPLES * 1000 / SAMPLE_RATE
WINDOW_S = WINDOW_SAMPLES / SAMPLE_RATE
CHANNELS = 1
NO_SPEECH_TIMEOUT_MS = 10000
"""stop_on_silence gives up when nobody has spoken for this long (Node edition: 10 s)."""
OTHER_SPEECH_WAIT_S = 10.0
"""A listening call that starts while another mcp-listen speaks on the same sound server waits this long
for that speech to end, then records; still speaking then, the call is `busy` (audio/owner.py)."""
MIN_DURATION_MS, MAX_DURATION_MS = 100, 30000
MAX_DICTATION_MS = 600_000
"""transcribe_voice records up to 10 minutes (dictation); capture_audio and voice_query keep the
Node edition's MAX_DURATION_MS."""
MIN_SILENCE_MS, MAX_SILENCE_MS = 100, 10000
CAPTURE_DURATION_MS = 5000
"""Default length of a fixed recording (and of a voice tool's with stop_on_silence: false)."""
LISTEN_DURATION_MS = 15000
"""Default ceiling of a voice tool's recording while it stops on silence."""
DEFAULT_SILENCE_MS = 1000
END_OF_TURN_MODES = ("silence", "smart")
"""silence: the turn ends after silence_ms of silence; smart: later while the words sound unfinished."""
DEFAULT_END_OF_TURN = "smart"
"""transcribe_voice's, voice_query's and converse's end_of_turn (MCP_LISTEN_END_OF_TURN); capture_audio
always ends on silence."""
MIN_MAX_PAUSE_MS, MAX_MAX_PAUSE_MS = MIN_SILENCE_MS, 30000
DEFAULT_MAX_PAUSE_MS = 3000
"""With end_of_turn "smart", the longest pause after the last word that holds the turn while the words
sound unfinished: then it ends (end_reason max_pause). Never less than silence_ms (the larger one holds)."""
END_REASONS = ("silence", "words", "voice", "words+voice", "end_word", "max_pause", "duration", "cancelled")
"""Why a turn ended: silence_ms of silence (end_of_turn silence, or smart with nothing to judge the
words by); smart judged the words finished, by the signal that decided (the words, the voice, both:
speech/turns.py); the user said one of their end_words last; smart held until max_pause_ms ran out;
duration_ms; the caller cancelled."""
END_SIGNALS = ("words", "voice", "words+voice", "silence", "unjudged")
"""end_of_turn "smart", where end_reason does not name the signal: beside max_pause, what held it (the
trailing word, the voice (Smart Turn), both; unjudged when the words or the voice were not in yet);
beside silence, silence (no signal covers the language)."""
INTERRUPTED_BY = ("user", "stop_speaking", "cancel")
"""Who cut a speech short (`interrupted: true`): the user talking over it (barge-in), stop_speaking, or a
cancel (the call's, or the server shutting down)."""
DEFAULT_WHISPER_MODEL = "ggml-base.en.bin"
DEFAULT_LANGUAGE = "en"
DEFAULT_LLM_MODEL = "llama3.2"
DEFAULT_PROMPT = "You are a helpful assistant."
MAX_PROMPT_CHARS = 100_000
"""System prompts up to this length are accepted (the Node edition's users pass 32,000+)."""
MAX_WHISPER_MODEL_CHARS = 1024
MAX_VOCABULARY_CHARS = 150
"""Longest `vocabulary` (MCP_LISTEN_VOCABULARY): the names and terms whisper is told to prefer, the start of its
prompt. Whisper keeps at most 224 prompt tokens (whisper.cpp: n_text_ctx / 2), and the vocabulary should take at
most about a third of them (~75), leaving the rest to the text said before. Names and identifiers cut into short
tokens: lists such as "mcp-listen, pywhispercpp, Siobhan, kubectl" measured 2.0-2.6 characters per token with
tiny.en's and base's tokenizers (English prose 4.7), so 150 characters are 58-75 tokens. A script written with a
token or more per letter (Greek, Chinese) takes more; whisper then drops the prompt's start, never its end."""
MAX_LLM_MODEL_CHARS = 200
MAX_END_WORDS = 10
"""Most `end_words` (MCP_LISTEN_END_WORDS): the words or short phrases that end the user's turn when said last.
A handful is what anyone uses ("over", "send it", "that's all"); each one more is one more way for a sentence's
last words to end the turn by chance."""
MAX_END_WORD_CHARS = 40
"""Longest end word or phrase, as given: "thank you, that will be all" is 27 characters; "ありがとうございました" 11."""
MAX_END_WORD_WORDS = 4
"""Most words (separated by spaces) in one end phrase: a phrase is said in one breath at the end of the turn; a
longer one is a sentence, and whisper seldom writes a sentence the same way twice."""
MAX_DEVICE_CHARS = 512
MAX_VOICE_CHARS = 1024
"""Longest voice argument (a Piper voice name, file name or path), as for whisper_model."""
DEFAULT_VOICE = "en_US-lessac-medium"
"""speak_text's voice when none is given (MCP_LISTEN_VOICE): Piper's own documentation's example voice."""
MAX_SPEAK_CHARS = 10_000
"""Longest text speak_text says in one call (about ten minutes of speech)."""
MAX_WORD_CHARS = 200
"""The longest run of letters and digits speak_text says: Piper renders a word as one piece before any of
it sounds, ~2 ms per character here, so a 10,000-character word would be silence for 20 s, then a minute
of babble. The longest words of any language are far shorter; a longer one is data to show, not say."""
UNSPACED_LETTERS = (
    "\u0e00-\u0eff\u0f00-\u0fff\u1000-\u109f\u1780-\u17ff\u1980-\u19ff\u1a20-\u1aaf\u2e80-\u2fdf"
    "\u3005-\u3007\u3021-\u3029\u3031-\u3035\u303b\u303c\u3040-\u30ff\u3100-\u312f\u3190-\u31bf"
    "\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\ua000-\ua4cf\ua9e0-\ua9ff\uaa60-\uaadf\uf900-\ufaff"
    "\uff66-\uff9f\U00020000-\U000323af"
)
"""The letters (a regex class's ranges) of the scripts written without spaces between words: Thai, Lao, Tibetan,
Myanmar, Khmer, the Tai scripts, Chinese, Japanese kana, Bopomofo, Yi. A run of them is not one word, so
MAX_WORD_CHARS does not apply to it; voice/pieces.py cuts it between its letters."""
SPELLED_PHONEMES_PER_LETTER = 6.0
"""Past this many phonemes per letter, a voice is reading a script's letters out one by one by name ("arabic
alif", "chinese letter"): 9 to 19 measured with an English voice for Arabic, Hebrew, Chinese, Japanese and Thai,
against 1 to 4.7 where a voice reads its own script (Chinese with espeak's cmn, the densest). Such a text would
take many times as long to say as to read, and say nothing (voice/spelled.py)."""
MAX_SPELLED_LETTERS = 8
"""The most letters of a script its voice reads letter by letter that a text may hold (a name quoted in its own
script, "Beijing (北京)", ~1 s per letter); more is refused, naming the script."""
MIN_SPEED, MAX_SPEED, DEFAULT_SPEED = 0.5, 2.0, 1.0
"""speak_text's speed: 2.0 says it in half the time (Piper's length_scale is the voice's divided by it)."""
BARGE_IN_BY_DEFAULT = True
"""Whether converse and speak_text (with wait true) let the user talk over the speech when the call does not
say (MCP_LISTEN_BARGE_IN sets it for a user); on by what the bench measured (bench/README.md, "Barge-in's
thresholds"). Without the echo canceller, or a microphone beside the speaker, the call falls back to
speaking without listening and says so in its `warning`."""
DEVICE_KINDS = ("input", "output", "all")
"""What list_audio_devices lists: microphones (the default, the Node edition's result), speakers, or both."""
DEFAULT_DEVICE_KIND = "input"
PARTIAL_TEXT_CHARS = 200
"""The transcript so far in a progress message holds at most this many characters (its end)."""
PARTIAL_PREFIX = "Partial transcript: "
"""How a progress message carrying the words heard so far begins: a client can tell it from the phases."""
HOLDING_MESSAGE = "Holding: mid-sentence"
"""The progress message once a pause passes silence_ms and end_of_turn smart holds the turn (the words
sound unfinished): the CLI's live line shows it while the user thinks."""
RESUMED_MESSAGE = "Speech resumed"
"""The progress message when the user speaks again in a pause that was held."""


def partial_message(text: str) -> str:
    """The progress message for the transcript so far: its latest PARTIAL_TEXT_CHARS characters."""
    text = " ".join(text.split())
    if len(text) > PARTIAL_TEXT_CHARS:
        text = "…" + text[-(PARTIAL_TEXT_CHARS - 1) :].lstrip()
    return PARTIAL_PREFIX + text


def has_control_characters(text: str) -> bool:
    """True if `text` holds a C0 or C1 control character (CR, LF, ESC...): no model name has one,
    and one would go raw into messages, logs and the commands they suggest."""
    return any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in text)


@dataclass(frozen=True)
class Defaults:
    """The effective defaults of the optional arguments: the contract's, or the user's
    (MCP_LISTEN_* in the client config). Tool descriptions and schemas state these values."""

    whisper_model: str = DEFAULT_WHISPER_MODEL
    language: str = DEFAULT_LANGUAGE
    model: str = DEFAULT_LLM_MODEL
    prompt: str = DEFAULT_PROMPT
    silence_ms: int = DEFAULT_SILENCE_MS
    end_of_turn: str = DEFAULT_END_OF_TURN
    max_pause_ms: int = DEFAULT_MAX_PAUSE_MS
    voice: str = DEFAULT_VOICE
    barge_in: bool = BARGE_IN_BY_DEFAULT
    vocabulary: str = ""
    """No vocabulary unless MCP_LISTEN_VOCABULARY names one."""
    end_words: tuple[str, ...] = ()
    """No end words unless MCP_LISTEN_END_WORDS names some."""

    def words(self) -> dict[str, Any]:
        """Values for the `{name}` placeholders of descriptions (all constants, plus these); a boolean as JSON
        writes it (`true`), the way the caller passes it."""
        mine = {name: str(value).lower() if isinstance(value, bool) else value for name, value in asdict(self).items()}
        return {**CONSTANTS, **mine}


ACCEPTED = {
    "duration_ms": f"an integer from {MIN_DURATION_MS} to {MAX_DURATION_MS} (milliseconds)",
    "dictation_ms": f"an integer from {MIN_DURATION_MS} to {MAX_DICTATION_MS} (milliseconds; up to 10 minutes)",
    "silence_ms": f"an integer from {MIN_SILENCE_MS} to {MAX_SILENCE_MS} (milliseconds)",
    "device": "a non-negative integer index or a non-empty string id (or device name) from list_audio_devices",
    "stop_on_silence": "a boolean",
    "barge_in": 'a boolean ("true" or "false")',
    "kind": 'one of "input" (microphones, the default), "output" (speakers) or "all"',
    "end_of_turn": 'one of "silence" (the turn ends after silence_ms) or "smart" (later when the words sound '
    "unfinished)",
    "max_pause_ms": f"an integer from {MIN_MAX_PAUSE_MS} to {MAX_MAX_PAUSE_MS} (milliseconds), at least silence_ms",
    "translate": "a boolean",
    "whisper_model": f"a model file name, a model name such as base.en, or a path (1 to {MAX_WHISPER_MODEL_CHARS} "
    "characters, no control characters; empty means the default)",
    "language": languages.ACCEPTED,
    "vocabulary": f'names and terms whisper should prefer, separated by commas ("mcp-listen, pywhispercpp, Siobhan, '
    f'kubectl"): at most {MAX_VOCABULARY_CHARS} characters, no control characters; "" means none. Keep the names '
    "whisper mishears and leave out common words",
    "end_words": f"an array of at most {MAX_END_WORDS} words or short phrases that end the turn when said last "
    f'(["over", "send it"]), each 1 to {MAX_END_WORD_WORDS} words and at most {MAX_END_WORD_CHARS} characters with a '
    "letter, no control characters; [] means none",
    "model": f"an Ollama model name (1 to {MAX_LLM_MODEL_CHARS} characters, no control characters; empty means "
    "the default)",
    "prompt": f"a system prompt of at most {MAX_PROMPT_CHARS} characters",
    "text": f"the text to say: 1 to {MAX_SPEAK_CHARS} characters (split a longer text into several calls) with at "
    "least one letter or digit (emoji and punctuation alone are not said), valid Unicode (no lone surrogates), no "
    f"control characters other than newline and tab, no word longer than {MAX_WORD_CHARS} characters (show long "
    "codes, URLs and data as text instead; a run of Chinese, Japanese or Thai, written without spaces, is not one "
    "word)",
    "voice": f"a Piper voice name such as {DEFAULT_VOICE}, a file name or a path (1 to {MAX_VOICE_CHARS} "
    "characters, no control characters; empty means the default)",
    "speed": f"a number from {MIN_SPEED:g} to {MAX_SPEED:g} (1 is the voice's own pace)",
    "wait": "a boolean",
    "output_device": "a non-negative integer index or a non-empty string id (or device name) from "
    'list_audio_devices with kind "output"',
}
"""What each argument accepts, as error messages and the config check say it."""

CONSTANTS = {
    "sample_rate_khz": SAMPLE_RATE_KHZ,
    "min_duration_ms": MIN_DURATION_MS,
    "max_duration_ms": MAX_DURATION_MS,
    "max_dictation_ms": MAX_DICTATION_MS,
    "min_silence_ms": MIN_SILENCE_MS,
    "max_silence_ms": MAX_SILENCE_MS,
    "capture_duration_ms": CAPTURE_DURATION_MS,
    "listen_duration_ms": LISTEN_DURATION_MS,
    "no_speech_timeout_s": NO_SPEECH_TIMEOUT_MS // 1000,
    "max_prompt_chars": MAX_PROMPT_CHARS,
    "max_vocabulary_chars": MAX_VOCABULARY_CHARS,
    "max_end_words": MAX_END_WORDS,
    "max_end_word_chars": MAX_END_WORD_CHARS,
    "max_end_word_words": MAX_END_WORD_WORDS,
    "min_max_pause_ms": MIN_MAX_PAUSE_MS,
    "max_max_pause_ms": MAX_MAX_PAUSE_MS,
    "max_speak_chars": MAX_SPEAK_CHARS,
    "min_speed": f"{MIN_SPEED:g}",
    "max_speed": f"{MAX_SPEED:g}",
}
"""The `{name}` placeholders every description may use, whatever the user's defaults."""
