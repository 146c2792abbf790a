"""Stop-on-silence decisions from a stream of per-window speech probabilities.

Pure logic (no audio, no numpy, no ONNX) so every stop rule can be tested with a
list of numbers. The listening loop feeds one Silero probability per 32 ms window, and
optionally the window's level in dBFS; the Endpointer answers "keep going" (None)
or why to stop. Time is counted in audio windows, never wall-clock, so a loaded
machine decides exactly as an idle one.

Silero decides *whether* there was speech; the level only sharpens *when* it ended.
Silero's probability stays high after the last loud sample (its recurrent state
decays): a median 96 ms on espeak-ng speech, 118 ms (p90 309, up to 371 ms) on real
voices, whose breath and room tails it still scores as speech; counting silence from
the probability alone stops that much late. When a silence run starts, the windows just before it
that were already quiet by level (20 dB under the loudest speech) are counted as silence too, at
most `decay_windows` (12) of them: the stop then lands `silence_ms` after the speech really ended.
Nearness to a loud room's floor is no proof the speech ended (the last syllable fades into the
noise's own window-to-window swing), so a loud room earns no credit and the stop waits for
Silero's own timing: later, never early. In a
noisy room the level also keeps the room from resuming speech: once a pause began, a window
Silero scores as speech but no louder than the noise floor only continues the pause (a crowd's
babble).

The level also says when Silero need not run at all (`needs_vad`): in a quiet room, a window
at the noise floor while nobody is speaking cannot be speech, and its probability could not
change any decision. Skipped windows are fed as probability 0. Replayed on 88 clips (11
sentences at 4 speech levels over -60 and -45 dBFS noise), the gate skipped 38 % of windows,
missed no speech, and moved the stop by 0.35 windows on average (at most 2).

Its settings and the VAD thresholds (their one home) come first; every duration there is audio
milliseconds, which the endpointer turns into windows.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from statistics import median

from mcp_listen.audio.levels import SILENT_DB
from mcp_listen.contract.limits import DEFAULT_SILENCE_MS, LISTEN_DURATION_MS, NO_SPEECH_TIMEOUT_MS, WINDOW_MS

SPEECH_THRESHOLD = 0.5
"""Silero probability at or above which a window is speech (Silero's reference threshold)."""

SILENCE_THRESHOLD = 0.35
"""Silero probability under which a window is silence; the band between the two is hysteresis."""


@dataclass(frozen=True)
class EndpointConfig:
    """When a recording stops; all durations are audio milliseconds."""

    silence_ms: int = DEFAULT_SILENCE_MS
    """Stop after this much continuous silence once speech has been confirmed."""

    max_ms: int = LISTEN_DURATION_MS
    """Hard ceiling: stop after this much audio whatever was heard."""

    no_speech_timeout_ms: int = NO_SPEECH_TIMEOUT_MS
    """Give up after this much audio if speech was never confirmed."""

    speech_threshold: float = SPEECH_THRESHOLD
    """A window at or above this probability is speech (Silero's reference threshold)."""

    silence_threshold: float = SILENCE_THRESHOLD
    """A window below this is silence; windows in between neither start nor break a silence run."""

    onset_ms: int = 250
    """Loud audio needed to confirm speech, so a click, knock or cough does not count."""

    onset_span_ms: int = 600
    """The loud windows for onset must fall within this much of the most recent audio."""

    window_ms: float = WINDOW_MS
    """Duration of one fed window (512 samples at 16 kHz)."""

    decay_windows: int = 12
    """At most this many quiet windows before a silence run count as silence (Silero's decay, <= 384 ms).

    On real voices Silero stays >= 0.5 up to 371 ms after the last loud sample (breath, room tail),
    and it scores the tails of 8 kHz telephone prompts as speech for up to 11 windows after the level
    fell 20 dB. Replayed (bench/endpoint_replay.py, 17 real recordings x 8 alignments): stop after
    silence_ms median 28.7 ms, p90 44.5 ms with 12; with 8 p90 80.5 ms, with 4 median 72 ms. The cost
    is bounded: a pause shorter than silence_ms - 32 ms x this can never end the recording."""

    quiet_below_peak_db: float = 20.0
    """A window at least this far under the loudest speech window is quiet (by level).

    20 dB is the benchmarks' own end of speech (a 10 ms envelope under 10 % of its peak); at 30 dB the
    tails of real voices (-20 to -35 dB, Silero still >= 0.9) counted as speech. Nearness to the room's
    floor is no proof: over brown noise at 5 dB SNR the last word's windows sit 4-6 dB over the floor,
    in the noise's own +-6 dB swing, and counting "within 6 dB of the floor" as quiet too stopped 21 of
    24 espeak replays early (median -35 ms, min -77 ms) and cut a word live. By the peak rule alone a
    loud room (floor over peak - 20 dB) earns no credit: 143-290 ms after silence_ms, never early.

    Left as it is: in a quiet room a last syllable's tail 20-30 dB under the peak still holds samples
    over -40 dBFS (up to 126 ms after the last loud sample of espeak sentences), and crediting it puts
    the stop up to 78 ms before silence_ms after the last such sample (46 of 88 replays). Refusing that
    credit (a -45 dBFS bound) moved real voices from 28.7 / 44.5 ms (median / p90) to 70.5 / 230.7 ms,
    live 39 -> 190 ms median: the recording then still holds the whole tail, so no word is lost."""

    resume_above_quiet_db: float = 12.0
    """In a pause, a window Silero scores as speech resumes speech only this far above the quietest
    window of the last second. In a crowd's babble Silero scores stray windows >= 0.5, at the room's
    own level (16 talkers: 99 % within 9 dB of their quietest window over 2 s); at 10 dB SNR they
    restarted the count and the stop came 616 ms late (488 ms with a 9 dB margin, in time with 11).
    The quietest window of the pause, not the level before speech: a recording that starts with
    speech has no room to measure, and a floor taken from speech made speech look like the room."""

    onset_above_room_db: float = 2.5
    """Before speech, a window Silero scores as speech is onset evidence only this far above the room's
    level. A crowd's babble has stray speech-like windows at its own level: in 72 replays of 16-talker
    babble alone (3 seeds, 8 alignments, 0/0.3/0.7 s of digital silence first) speech was confirmed
    32 times without this rule and 8 times with it, all in the first 0.5 s of babble starting out of
    digital silence, before ROOM_WINDOWS of the room were heard. Speech at 0 dB SNR over steady
    noise is still heard: 11 of 11 sentences (3 dB: 8, 6 dB: 0)."""

    gate_margin_db: float = 3.0
    """Silero is skipped for a window at most this far above the recent noise floor..."""

    gate_quiet_room_db: float = -40.0
    """...only when that floor is below this (in a loud room Silero always runs)..."""

    gate_after_silence_windows: int = 8
    """...and, once speech started, only after this many windows of silence (never mid-word)."""

    def __post_init__(self) -> None:
        for name in ("silence_ms", "max_ms", "no_speech_timeout_ms", "onset_ms", "onset_span_ms", "window_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{name} must be a number, got {type(value).__name__}.")
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}.")
        if self.onset_span_ms < self.onset_ms:
            raise ValueError("onset_span_ms must be >= onset_ms, or speech could never be confirmed.")
        for name in ("decay_windows", "gate_after_silence_windows"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}.")
        if not (0.0 < self.silence_threshold <= self.speech_threshold <= 1.0):
            raise ValueError("Thresholds must satisfy 0 < silence_threshold <= speech_threshold <= 1.")

    @property
    def onset_windows(self) -> int:
        """Loud windows needed to confirm speech (ceil(onset_ms / window_ms); 8 by default)."""
        return max(1, math.ceil(self.onset_ms / self.window_ms))

    @property
    def onset_span_windows(self) -> int:
        """How many recent windows are searched for onset evidence (19 by default)."""
        return max(self.onset_windows, math.ceil(self.onset_span_ms / self.window_ms))


__all__ = [
    "CEILING",
    "NO_SPEECH_TIMEOUT",
    "SILENCE",
    "SILENCE_THRESHOLD",
    "SPEECH_THRESHOLD",
    "EndpointConfig",
    "Endpointer",
]

SILENCE = "silence"
CEILING = "ceiling"
NO_SPEECH_TIMEOUT = "no_speech_timeout"

SPEECH_START = "speech_start"
SILENCE_START = "silence_start"
SPEECH_RESUME = "speech_resume"


FLOOR_WINDOWS = 62
"""Pre-speech windows (about 2 s) whose median level is the noise floor."""

GATE_WINDOWS = 31
"""Recent windows (about 1 s) whose quietest level is the floor the VAD gate compares against."""

ROOM_WINDOWS = 8
"""Windows of sound (not digital silence) under the silence threshold before the room's level is trusted."""


class Endpointer:
    """Feed one probability (and optionally a level) per window; `feed` returns None or the stop reason.

    Not thread-safe: one Endpointer per recording, fed from one thread.
    """

    def __init__(self, config: EndpointConfig | None = None) -> None:
        self.config = config or EndpointConfig()
        self.windows = 0
        """Windows fed so far."""
        self.speech_detected = False
        """True once onset evidence confirmed speech."""
        self.speech_started_window: int | None = None
        """Index of the first loud window of the run that confirmed speech."""
        self.last_speech_window: int | None = None
        """Index of the latest window >= speech_threshold since speech was confirmed."""
        self.event: str | None = None
        """What the last feed changed, for progress reports: speech_start, silence_start, speech_resume or None."""
        self.stop_reason: str | None = None
        """The reason feed returned, once it returned one."""
        self._recent_loud: deque[int] = deque()
        self._silence_run = 0
        self._peak_db = SILENT_DB
        self._floor_levels: deque[float] = deque(maxlen=FLOOR_WINDOWS)
        self._quiet_run = 0
        """Consecutive most recent windows that were quiet by level (`_quiet_below`)."""
        self._recent_levels: deque[float] = deque(maxlen=GATE_WINDOWS)

    @property
    def elapsed_ms(self) -> float:
        """Audio fed so far."""
        return self.windows * self.config.window_ms

    @property
    def silence_ms(self) -> float:
        """Length of the silence run currently counting toward a stop (0 when none)."""
        return self._silence_run * self.config.window_ms

    def feed(self, probability: float, level_db: float | None = None, silence_ms: float | None = None) -> str | None:
        """Account for one more window; return "silence", "ceiling", "no_speech_timeout" or None.

        `level_db` is the window's mean power in dBFS; without it the stop is timed by the
        probability alone (Silero's decay included). `silence_ms` is the silence that ends the pause
        in progress when the end of turn holds it longer than the config's (end_of_turn "smart").
        """
        if self.stop_reason is not None:
            raise RuntimeError("This Endpointer already stopped; start a new one for the next recording.")
        if not (0.0 <= probability <= 1.0):
            raise ValueError(f"probability must be within [0, 1], got {probability!r}.")
        if level_db is not None and not level_db <= 0.0:  # also rejects NaN
            raise ValueError(f"level_db must be <= 0 dBFS, got {level_db!r}.")
        index = self.windows
        self.windows += 1
        self.event = None
        level = None if level_db is None else max(level_db, SILENT_DB)
        if self.speech_detected:
            self._track_silence(index, probability, level)
        else:
            self._track_onset(index, probability, level)
        if level is not None:
            self._track_level(probability, level)
        self.stop_reason = self._stop_reason(self.config.silence_ms if silence_ms is None else silence_ms)
        return self.stop_reason

    def needs_vad(self, level_db: float) -> bool:
        """Whether the next window (of this level) must go through Silero; if not, feed it probability 0.

        Skipped: a window within gate_margin_db of the quietest of the last ~1 s, in a room quieter
        than gate_quiet_room_db, while no speech is under way (none confirmed and no loud window
        pending, or a silence run of gate_after_silence_windows already). Anything louder, any
        onset in progress, and the first windows of a recording always run.
        """
        config = self.config
        recent = self._recent_levels
        if len(recent) < config.gate_after_silence_windows:
            return True
        floor = min(recent)
        if floor > config.gate_quiet_room_db or max(level_db, SILENT_DB) > floor + config.gate_margin_db:
            return True
        if self.speech_detected:
            return self._silence_run < config.gate_after_silence_windows
        return bool(self._recent_loud)

    def _track_level(self, probability: float, level_db: float) -> None:
        """Noise floor before speech (windows under the silence threshold), loudest speech window,
        and the run of quiet windows."""
        config = self.config
        self._recent_levels.append(level_db)
        if probability >= config.speech_threshold:
            self._peak_db = max(self._peak_db, level_db)
        if not self.speech_detected:
            if probability < config.silence_threshold:
                self._floor_levels.append(level_db)
            return
        self._quiet_run = self._quiet_run + 1 if level_db < self._quiet_below() else 0

    def _quiet_below(self) -> float:
        """The level under which a window counts as quiet: quiet_below_peak_db under the loudest
        speech window (EndpointConfig documents why nearness to the floor does not count)."""
        return self._peak_db - self.config.quiet_below_peak_db

    def _track_onset(self, index: int, probability: float, level: float | None) -> None:
        """Confirm speech once enough loud windows fall within the onset span.

        A window Silero scores as speech counts only if it is louder than the room (onset_above_room_db
        over its level): a crowd's babble has stray speech-like windows, at the room's own level."""
        config = self.config
        recent = self._recent_loud
        if probability >= config.speech_threshold and not self._below_onset(level):
            recent.append(index)
        while recent and recent[0] <= index - config.onset_span_windows:
            recent.popleft()
        if len(recent) >= config.onset_windows:
            self.speech_detected = True
            self.speech_started_window = recent[0]
            self.last_speech_window = index
            self.event = SPEECH_START
            recent.clear()

    def _track_silence(self, index: int, probability: float, level: float | None) -> None:
        """Hysteresis: below silence_threshold counts, speech resets, in-between only continues.

        In a pause, a speech window at the room's own level (babble) only continues the run."""
        config = self.config
        if probability >= config.speech_threshold and not (self._silence_run and self._at_floor(level)):
            if self._silence_run:
                self.event = SPEECH_RESUME
            self._silence_run = 0
            self.last_speech_window = index
        elif probability < config.silence_threshold:
            if not self._silence_run:
                self.event = SILENCE_START
                self._silence_run = self._decay_credit()
            self._silence_run += 1
        elif self._silence_run:
            self._silence_run += 1

    def _decay_credit(self) -> int:
        """How many windows just before a silence run count as silence: Silero's decay, heard as
        quiet by level (the consecutive quiet windows just before it, at most decay_windows)."""
        return min(self._quiet_run, self.config.decay_windows)

    def _room_db(self) -> float | None:
        """The room's level before speech: the median of the windows under the silence threshold,
        once ROOM_WINDOWS of them were sound (digital silence, as a virtual microphone delivers
        before the room, is not the room; and at the very start of a recording the few windows
        Silero has not yet scored high may be the first word). None until then."""
        sounding = [level for level in self._floor_levels if level > SILENT_DB]
        return median(sounding) if len(sounding) >= ROOM_WINDOWS else None

    def _below_onset(self, level: float | None) -> bool:
        """Whether a window is too close to the room's level to be onset evidence."""
        if level is None:
            return False
        room = self._room_db()
        return room is not None and level < room + self.config.onset_above_room_db

    def _at_floor(self, level: float | None) -> bool:
        """Whether a window in a pause is no louder than the room: under the quietest window of the
        last second (the pause itself, so speech heard before cannot inflate it) + resume_above_quiet_db."""
        recent = self._recent_levels
        return level is not None and len(recent) > 0 and level < min(recent) + self.config.resume_above_quiet_db

    def _stop_reason(self, silence_ms: float) -> str | None:
        config = self.config
        if self.speech_detected and self._silence_run * config.window_ms >= silence_ms:
            return SILENCE
        if self.elapsed_ms >= config.max_ms:
            return CEILING
        if not self.speech_detected and self.elapsed_ms >= config.no_speech_timeout_ms:
            return NO_SPEECH_TIMEOUT
        return None
