"""When a recording stops: the endpointer's settings and the VAD thresholds (their one home).

Every duration is audio milliseconds; endpoint.py turns them into windows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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

    decay_windows: int = 8
    """At most this many windows before a silence run may count as silence (Silero's decay, <= 256 ms).

    On real voices Silero stays >= 0.5 up to 371 ms after the last loud sample (breath, room
    tail); with 4 the stop came a median 72 ms (p90 251 ms) after silence_ms on 17 real recordings,
    with 8 (and quiet_below_peak_db 20) 30 ms (p90 81 ms). The cost is bounded: a pause shorter than
    silence_ms - 32 ms x the larger of this and under_peak_decay_windows can never end the
    recording, however it is scored."""

    under_peak_decay_windows: int = 12
    """At most this many such windows count when they are quiet by the peak rule (quiet_below_peak_db
    under the loudest speech window), not merely near a loud room's floor (<= 384 ms).

    Silero scores the tails of 8 kHz telephone prompts as speech for up to 11 windows after the level
    fell 20 dB (an Asterisk prompt: probability 0.65 at 319 ms); with decay_windows alone the stop
    came 119 ms late there. Replayed (bench/endpoint_replay.py, 17 real recordings x 8 alignments):
    stop after silence_ms p90 80.5 -> 44.5 ms, max 167 -> 51 ms. Near the floor the credit stays at
    decay_windows: at 10 dB SNR babble, "kitchen"'s last syllable is within room_margin_db of the
    room, and 10 windows of credit cut a 950 ms pause in 1 replay of 80 (2 with 12)."""

    quiet_below_peak_db: float = 20.0
    """A window at least this far under the loudest speech window is quiet (by level)...

    20 dB is the benchmarks' own end of speech (a 10 ms envelope under 10 % of its peak); at 30 dB
    the tails of real voices (-20 to -35 dB, Silero still >= 0.9) counted as speech."""

    room_margin_db: float = 6.0
    """...and so is one less than this above the noise floor heard before speech (a noisy room).

    It was 10 dB:
    at 10 dB SNR the last words then counted as quiet and the stop came 56 ms before silence_ms."""

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
        for name in ("decay_windows", "under_peak_decay_windows", "gate_after_silence_windows"):
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
