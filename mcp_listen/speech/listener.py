"""Listening to one utterance: VAD, endpointer, phrase cutting, pre-roll, speculation, progress.

The engine owns the microphone and the recording; this module owns what is decided per
32 ms window while it runs. Its collaborators (the VAD, the endpointer, the phrase worker)
are small protocols with the real parts as defaults, so the logic runs on numpy arrays with
a fake VAD (tests/test_listening_unit.py). numpy is imported on first use only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Protocol

from mcp_listen.audio.levels import level_db
from mcp_listen.contract.arguments import CaptureArgs, TranscribeArgs
from mcp_listen.contract.end_words import chosen as chosen_end_words
from mcp_listen.contract.limits import (
    CAPTURE_DURATION_MS,
    DEFAULT_END_OF_TURN,
    DEFAULT_MAX_PAUSE_MS,
    LISTEN_DURATION_MS,
    NO_SPEECH_TIMEOUT_MS,
    SAMPLE_RATE,
    WINDOW_MS,
    Defaults,
    partial_message,
)
from mcp_listen.contract.limits import WINDOW_SAMPLES as WINDOW
from mcp_listen.contract.results import DIGITAL_SILENCE_PROGRESS, DIGITAL_SILENCE_WARNING
from mcp_listen.speech.ending import SMART, EndOfTurnConfig, TurnEnd, TurnEnding, max_pause_ms
from mcp_listen.speech.endpoint import SPEECH_THRESHOLD, EndpointConfig, Endpointer
from mcp_listen.speech.pause import PauseJudge, Voice
from mcp_listen.speech.phrases import PhraseCutter
from mcp_listen.speech.vad import shared_vad

if TYPE_CHECKING:
    import numpy as np


class Recording(Protocol):
    """What the listener reads of a finished recording (audio.microphone.Recording); named here
    because speech sees only the levels of audio, never the microphone itself."""

    @property
    def frames(self) -> int: ...
    @property
    def start_frame(self) -> int: ...
    @property
    def samples(self) -> np.ndarray: ...
    @property
    def stopped_by(self) -> str | None: ...


Progress = Callable[[float, Optional[float], str], None]
"""progress(done, total or None, message): called from the worker thread at meaningful moments."""

Meter = Callable[[Any, bool], None]
"""meter(window, speaking): the CLI's level display."""

TRAILING_KEEP_MS = 300
"""Audio kept after the last speech window when feeding whisper: the word's tail, not the silence."""

LANGUAGE_AFTER_MS = (2000, 4000)
"""Speech heard (from the onset) when the language is detected for `auto`: early enough that a
short utterance is not left to pay for detection after the stop, again later when unsure."""


class VoiceDetector(Protocol):
    """What the listener needs of a VAD (vad.SileroVAD by default)."""

    def reset(self) -> None: ...

    def hear(self, window: Any, run: bool = True) -> tuple[float, float]: ...


class EndpointDecider(Protocol):
    """What the listener needs of an endpointer (endpoint.Endpointer by default)."""

    speech_detected: bool
    event: str | None
    speech_started_window: int | None
    last_speech_window: int | None

    @property
    def silence_ms(self) -> float: ...

    def needs_vad(self, level_db: float) -> bool: ...

    def feed(
        self, probability: float, level_db: float | None = None, silence_ms: float | None = None
    ) -> str | None: ...


class PhraseSink(Protocol):
    """What the listener hands finished phrases and guesses to (phrases.PhraseWorker)."""

    def submit(self, audio: Any) -> None: ...

    def speculate(self, audio: Any, key: tuple[int, int]) -> None: ...

    def detect(self, audio: Any) -> None: ...

    def words_at_pause(self, key: tuple[int, int] | None) -> str | None: ...

    language: str
    """The language asked for, or the one heard."""

    @property
    def so_far(self) -> str:
        """The words transcribed so far (phrases done, then the latest guess)."""
        ...


@dataclass(frozen=True)
class Plan:
    """What one recording will do, resolved from a tool's arguments and its defaults."""

    max_ms: int
    stop_on_silence: bool
    silence_ms: int
    device: int | str | None
    end_of_turn: str = DEFAULT_END_OF_TURN
    """"smart": a pause after words that sound unfinished is held (speech/ending.py)."""
    max_pause_ms: int = DEFAULT_MAX_PAUSE_MS
    """"smart": the longest pause after the last word that holds the turn."""
    end_words: tuple[str, ...] = field(default=(), repr=False)
    """The words or short phrases that end the turn when said last (speech/end_words.py); the user's own, so
    out of the repr: a plan logged never shows them."""

    @property
    def max_frames(self) -> int:
        return self.max_ms * SAMPLE_RATE // 1000

    @classmethod
    def from_args(cls, args: CaptureArgs | TranscribeArgs, defaults: Defaults, *, stop_default: bool) -> Plan:
        stop = stop_default if args.stop_on_silence is None else args.stop_on_silence
        default_ms = LISTEN_DURATION_MS if stop and stop_default else CAPTURE_DURATION_MS
        silence_ms = args.silence_ms if args.silence_ms is not None else defaults.silence_ms
        judged = stop_default and stop  # a fixed length never ends on a pause: smart's model would only cost there
        return cls(
            max_ms=args.duration_ms if args.duration_ms is not None else default_ms,
            stop_on_silence=stop,
            silence_ms=silence_ms,
            device=args.device,
            end_of_turn=(getattr(args, "end_of_turn", None) or defaults.end_of_turn) if judged else "silence",
            max_pause_ms=max_pause_ms(getattr(args, "max_pause_ms", None), defaults.max_pause_ms, silence_ms),
            end_words=chosen_end_words(args, defaults) if stop else (),
        )


@dataclass(frozen=True)
class Heard:
    """A finished recording and what the endpointer learned about it."""

    recording: Recording
    speech_detected: bool | None
    speech_end_frame: int | None
    """Sample just after the last speech window (None without VAD)."""
    phrase_start_frame: int = 0
    """Where the speech not yet handed to the phrase worker begins."""
    warning: str | None = None
    """Why the result should not be trusted as "nobody spoke": a dead microphone (digital silence)."""
    end_reason: str | None = None
    """Why the turn ended (contract.limits.END_REASONS), None when nobody spoke before the no-speech timeout."""
    end_signal: str | None = None
    """end_of_turn "smart": the signal that decided (contract.limits.END_SIGNALS); None otherwise."""

    @property
    def duration_ms(self) -> int:
        return self.recording.frames * 1000 // SAMPLE_RATE

    def remaining_key(self) -> tuple[int, int] | None:
        """(first, end) sample of the audio whisper still has to hear, None when there is none.

        From the last phrase cut to shortly after the speech: trailing silence is left out (it
        only costs time); the WAV itself is never changed.
        """
        end = self.recording.frames
        if self.speech_end_frame is not None:
            if self.speech_end_frame <= self.phrase_start_frame:
                return None  # the last word is in a phrase already cut: only silence is left
            end = min(end, speech_tail_end(self.speech_end_frame))
        if end <= self.phrase_start_frame:
            return None
        return self.phrase_start_frame, end

    def remaining_speech(self) -> np.ndarray | None:
        key = self.remaining_key()
        if key is None:
            return None
        start = self.recording.start_frame
        return self.recording.samples[key[0] - start : key[1] - start]


def speech_tail_end(speech_end_frame: int) -> int:
    """Where the audio fed to whisper ends: the last speech window plus the word's tail."""
    return speech_end_frame + TRAILING_KEEP_MS * SAMPLE_RATE // 1000


def endpoint_config(plan: Plan) -> EndpointConfig:
    """Stop on silence, or (fixed length, voice tools) only watch for speech and never stop."""
    if plan.stop_on_silence:
        return EndpointConfig(silence_ms=plan.silence_ms, max_ms=plan.max_ms, no_speech_timeout_ms=NO_SPEECH_TIMEOUT_MS)
    never = 10**9
    return EndpointConfig(silence_ms=never, max_ms=never, no_speech_timeout_ms=never)


class Listener:
    """Per-window bookkeeping: VAD + endpointer when stopping on silence, progress, level meter.

    `on_window` takes each window the engine pulls: it returns a stop reason or None. With a phrase
    worker, finished phrases are cut and handed over while the speaker goes on, and what was
    said since the last cut is transcribed speculatively as soon as they pause.
    """

    PERIOD_WINDOWS = 31
    """About one progress tick per second of audio (31 x 32 ms)."""

    DEAD_AFTER_WINDOWS = math.ceil(1000 / WINDOW_MS)
    """Windows of nothing but zeros from the start (the first second) that name a dead microphone.
    A real room's noise floor is never exactly zero; a denied permission (macOS), a mute switch
    or a disconnected virtual device deliver zeros."""

    PRE_ROLL_WINDOWS = 31
    """Audio kept before confirmed speech (about 1 s): soft first syllables come before the onset."""

    KEPT_WINDOWS = round((max(LANGUAGE_AFTER_MS) + 1000) / WINDOW_MS) + PRE_ROLL_WINDOWS
    """Recent audio always kept (about 6 s), beside the phrase not yet cut: what the language
    detection and the pre-roll reach back to. Older audio is let go (`kept_from_frame`)."""

    def __init__(
        self,
        plan: Plan,
        progress: Progress | None,
        meter: Meter | None,
        phrases: PhraseSink | None = None,
        on_speech: Callable[[], None] | None = None,
        *,
        vad: VoiceDetector | None = None,
        endpointer: EndpointDecider | None = None,
        voice: Voice | None = None,
        end_of_turn: EndOfTurnConfig = SMART,
    ) -> None:
        self.plan = plan
        self.on_speech = on_speech
        self.progress = progress
        self.meter = meter
        self.phrases = phrases
        self.windows = 0
        self.speech_detected: bool | None = None
        self.speech_end_frame: int | None = None
        self.phrase_start_frame = 0
        self._kept: list[Any] = []
        self._kept_from = 0
        """Window index of _kept[0]: windows before it were let go."""
        self._speculated: tuple[int, int] | None = None
        self._told = ""
        """The transcript so far as last reported."""
        self._zero_windows = 0
        """Windows of only zeros since the stream opened, until the first sound."""
        self._sound_arrived = False
        self._cutter = PhraseCutter() if phrases is not None else None
        self._language_marks = {round(ms / WINDOW_MS) for ms in LANGUAGE_AFTER_MS}
        """Windows after the onset at which the language is detected."""
        self.vad: VoiceDetector | None = None
        self.endpointer: EndpointDecider | None = None
        if plan.stop_on_silence or phrases is not None:
            self.vad = vad if vad is not None else shared_vad()
            self.vad.reset()
            self.endpointer = endpointer if endpointer is not None else Endpointer(endpoint_config(plan))
            self.speech_detected = False
        ending = TurnEnding(plan.end_of_turn, endpoint_config(plan).silence_ms, plan.max_pause_ms)
        self.pause = PauseJudge(ending, voice, end_of_turn, plan.end_words)
        self._target_ms: float = ending.silence_ms
        """The pause that ends the turn, as last fed to the endpointer."""

    def on_window(self, window: np.ndarray) -> str | None:
        self.windows += 1
        self._check_for_sound(window)
        reason = None
        speaking = False
        vad, endpointer = self.vad, self.endpointer
        if vad is not None and endpointer is not None:
            probability, level = vad.hear(window, run=endpointer.needs_vad(level_db(window)))
            self._target_ms = self._turn_silence_ms()
            reason = endpointer.feed(probability, level, self._target_ms)
            speaking = endpointer.speech_detected and probability >= SPEECH_THRESHOLD
            self._note_events(endpointer)
            held = self.pause.hold_message(endpointer.silence_ms, reason)
            if held is not None and self.progress:
                self.progress(self.elapsed_ms, self.plan.max_ms, held)
            if self._cutter is not None and self.phrases is not None:
                self._keep(window, probability, endpointer, self._cutter, self.phrases)
                self._detect_language(endpointer, self.phrases)
        if self.meter is not None:
            self.meter(window, speaking)
        if self.progress and reason is None:
            if self.windows % self.PERIOD_WINDOWS == 0:
                self.progress(self.elapsed_ms, self.plan.max_ms, "Listening")
            self._report_words(self.progress)
        return reason

    def _turn_silence_ms(self) -> float:
        """The pause that ends the turn now: silence_ms; at once after an end word; ("smart") at once, or up to
        max_pause_ms, as turns.judge says."""
        judged = self.pause.ending.smart or self.plan.end_words
        if not judged or self.phrases is None or self.speech_end_frame is None:
            return self.pause.ending.silence_ms  # a fixed length's is the endpointer's own: it never stops on silence
        words = self._words_at_pause(self.phrases, self.speech_end_frame)
        return self.pause.target_ms(words, self.phrases.language, self.speech_end_frame)

    def _words_at_pause(self, phrases: PhraseSink, speech_end: int) -> str | None:
        """The words this pause follows, None until in: the guess for the speech since the last cut, or the
        phrases so far when the last word is in a phrase already cut."""
        if speech_end <= self.phrase_start_frame:
            return phrases.words_at_pause(None)
        key = (self.phrase_start_frame, speech_tail_end(speech_end))
        return phrases.words_at_pause(key) if self._speculated == key else None

    def _report_words(self, progress: Progress) -> None:
        """The transcript so far, each time it changed (a phrase or a guess transcribed): the user
        sees the words while still speaking. Read from the worker here, so one thread reports."""
        so_far = self.phrases.so_far if self.phrases is not None else ""
        if so_far and so_far != self._told:
            self._told = so_far
            progress(self.elapsed_ms, self.plan.max_ms, partial_message(so_far))

    def _check_for_sound(self, window: np.ndarray) -> None:
        """Count the zeros a dead microphone delivers, and say so as soon as a second of them is in."""
        if self._sound_arrived:
            return
        if window.any():
            self._sound_arrived = True
            return
        self._zero_windows += 1
        if self._zero_windows == self.DEAD_AFTER_WINDOWS and self.progress:
            self.progress(self.elapsed_ms, self.plan.max_ms, DIGITAL_SILENCE_PROGRESS)

    @property
    def dead_microphone(self) -> bool:
        """Every sample so far was zero, for at least the first second: no sound ever arrived."""
        return not self._sound_arrived and self._zero_windows >= self.DEAD_AFTER_WINDOWS

    @property
    def elapsed_ms(self) -> int:
        return self.windows * WINDOW * 1000 // SAMPLE_RATE

    def _note_events(self, endpointer: EndpointDecider) -> None:
        event = endpointer.event
        if event == "speech_start" and endpointer.speech_started_window is not None:
            self.speech_detected = True
            start = max(0, endpointer.speech_started_window - self.PRE_ROLL_WINDOWS)
            self.phrase_start_frame = start * WINDOW
            if self._cutter is not None:
                self._cutter.start_window = start
            if self.on_speech is not None:
                self.on_speech()
            if self.progress:
                self.progress(self.elapsed_ms, self.plan.max_ms, "Speech detected")
        elif event == "silence_start" and self.progress:
            self.progress(self.elapsed_ms, self.plan.max_ms, "Silence detected")
        last = endpointer.last_speech_window
        if last is not None:
            self.speech_end_frame = (last + 1) * WINDOW

    def _keep(
        self,
        window: np.ndarray,
        probability: float,
        endpointer: EndpointDecider,
        cutter: PhraseCutter,
        phrases: PhraseSink,
    ) -> None:
        """Keep the audio for phrase cuts; hand each finished phrase to the worker, and what
        was said since the last cut as soon as the speaker pauses (it may be the end)."""
        self._kept.append(window.copy())
        cut = cutter.update(self.windows - 1, endpointer.speech_detected, probability)
        if cut is not None:
            start, end = cut
            phrases.submit(self._audio(start * WINDOW, end * WINDOW))
            self.phrase_start_frame = end * WINDOW
        self._speculate(endpointer, phrases)
        recorded = (self._kept_from + len(self._kept)) * WINDOW
        self.pause.ask_the_voice(self.speech_end_frame, endpointer.silence_ms, recorded, self._audio_from)
        self._let_go()

    @property
    def kept_from_frame(self) -> int:
        """The first sample any later phrase, guess or detection can need: the phrase not yet cut
        (or, before speech, the pre-roll) and the last KEPT_WINDOWS. Memory stays flat however
        long the dictation."""
        recent = max(0, self.windows - self.KEPT_WINDOWS)
        if not self.speech_detected:
            return recent * WINDOW
        return min(self.phrase_start_frame, recent * WINDOW)

    def _let_go(self) -> None:
        drop = self.kept_from_frame // WINDOW - self._kept_from
        if drop > 0:
            del self._kept[:drop]
            self._kept_from += drop

    def _detect_language(self, endpointer: EndpointDecider, phrases: PhraseSink) -> None:
        """At set lengths of speech, hand what was said so far to learn the language from."""
        onset = endpointer.speech_started_window
        if onset is None or not self.speech_detected:
            return
        if self.windows - onset in self._language_marks:
            start = max(self._kept_from, onset - self.PRE_ROLL_WINDOWS) * WINDOW
            phrases.detect(self._audio(start, self.windows * WINDOW))

    def _speculate(self, endpointer: EndpointDecider, phrases: PhraseSink) -> None:
        """In a pause, once the word's tail is recorded: transcribe now, in case this is the end. The key
        is the span `Heard.remaining_key` will give if the stop comes before more speech; speech that
        resumes moves the span, the next pause replaces the guess."""
        end = self.speech_end_frame
        key = (self.phrase_start_frame, speech_tail_end(end or 0))
        if end is None or endpointer.silence_ms <= 0 or (self._kept_from + len(self._kept)) * WINDOW < key[1]:
            return
        if key != self._speculated and end > self.phrase_start_frame:
            self._speculated = key
            phrases.speculate(self._audio(*key), key)

    def _audio_from(self, first: int, end: int) -> np.ndarray:
        """Samples [first, end) of the recording, from the first one still kept on."""
        return self._audio(max(self._kept_from * WINDOW, first), end)

    def _audio(self, first: int, end: int) -> np.ndarray:
        """Samples [first, end) of the recording so far, from the kept windows."""
        import numpy as np

        windows = self._kept[first // WINDOW - self._kept_from : -(-end // WINDOW) - self._kept_from]
        offset = first - (first // WINDOW) * WINDOW
        return np.concatenate(windows)[offset : offset + end - first]

    def finished(self, recording: Recording) -> Heard:
        """Report the end (logged once at DEBUG: ending.TurnEnd) and return what was heard."""
        pause_ms = self.endpointer.silence_ms if self.endpointer is not None else 0.0
        end: TurnEnd = self.pause.finished(recording.stopped_by, pause_ms, self._target_ms)
        if self.progress:
            seconds = recording.frames / SAMPLE_RATE
            message = f"Recording finished ({seconds:.1f} s, {self.pause.ending.describe(recording.stopped_by)})"
            self.progress(self.elapsed_ms, self.plan.max_ms, message)
        warning = DIGITAL_SILENCE_WARNING if self.dead_microphone else None
        start, speech = self.phrase_start_frame, self.speech_end_frame
        return Heard(recording, self.speech_detected, speech, start, warning, end.end_reason, end.end_signal)
