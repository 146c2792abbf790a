"""Stop-on-silence decisions from a stream of per-window speech probabilities.

Pure logic (no audio, no numpy, no ONNX) so every stop rule can be tested with a
list of numbers. The recorder feeds one Silero probability per 32 ms window; the
Endpointer answers "keep going" (None) or why to stop. Time is counted in audio
windows, never wall-clock, so a loaded machine decides exactly as an idle one.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

SILENCE = "silence"
CEILING = "ceiling"
NO_SPEECH_TIMEOUT = "no_speech_timeout"

SPEECH_START = "speech_start"
SILENCE_START = "silence_start"
SPEECH_RESUME = "speech_resume"


@dataclass(frozen=True)
class EndpointConfig:
    """When a recording stops; all durations are audio milliseconds."""

    silence_ms: int = 1000
    """Stop after this much continuous silence once speech has been confirmed."""

    max_ms: int = 15000
    """Hard ceiling: stop after this much audio whatever was heard."""

    no_speech_timeout_ms: int = 10000
    """Give up after this much audio if speech was never confirmed."""

    speech_threshold: float = 0.5
    """A window at or above this probability is speech (Silero's reference threshold)."""

    silence_threshold: float = 0.35
    """A window below this is silence; windows in between neither start nor break a silence run."""

    onset_ms: int = 250
    """Loud audio needed to confirm speech, so a click, knock or cough does not count."""

    onset_span_ms: int = 600
    """The loud windows for onset must fall within this much of the most recent audio."""

    window_ms: float = 32.0
    """Duration of one fed window (512 samples at 16 kHz)."""

    def __post_init__(self) -> None:
        for name in ("silence_ms", "max_ms", "no_speech_timeout_ms", "onset_ms", "onset_span_ms", "window_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{name} must be a number, got {type(value).__name__}.")
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}.")
        if self.onset_span_ms < self.onset_ms:
            raise ValueError("onset_span_ms must be >= onset_ms, or speech could never be confirmed.")
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


class Endpointer:
    """Feed one probability per window; `feed` returns None or the stop reason.

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

    @property
    def elapsed_ms(self) -> float:
        """Audio fed so far."""
        return self.windows * self.config.window_ms

    @property
    def silence_ms(self) -> float:
        """Length of the silence run currently counting toward a stop (0 when none)."""
        return self._silence_run * self.config.window_ms

    def feed(self, probability: float) -> str | None:
        """Account for one more window; return "silence", "ceiling", "no_speech_timeout" or None."""
        if self.stop_reason is not None:
            raise RuntimeError("This Endpointer already stopped; start a new one for the next recording.")
        if not (0.0 <= probability <= 1.0):
            raise ValueError(f"probability must be within [0, 1], got {probability!r}.")
        index = self.windows
        self.windows += 1
        self.event = None
        if self.speech_detected:
            self._track_silence(index, probability)
        else:
            self._track_onset(index, probability)
        self.stop_reason = self._stop_reason()
        return self.stop_reason

    def _track_onset(self, index: int, probability: float) -> None:
        """Confirm speech once enough loud windows fall within the onset span."""
        config = self.config
        recent = self._recent_loud
        if probability >= config.speech_threshold:
            recent.append(index)
        while recent and recent[0] <= index - config.onset_span_windows:
            recent.popleft()
        if len(recent) >= config.onset_windows:
            self.speech_detected = True
            self.speech_started_window = recent[0]
            self.last_speech_window = index
            self.event = SPEECH_START
            recent.clear()

    def _track_silence(self, index: int, probability: float) -> None:
        """Hysteresis: below silence_threshold counts, speech resets, in-between only continues."""
        config = self.config
        if probability >= config.speech_threshold:
            if self._silence_run:
                self.event = SPEECH_RESUME
            self._silence_run = 0
            self.last_speech_window = index
        elif probability < config.silence_threshold:
            if not self._silence_run:
                self.event = SILENCE_START
            self._silence_run += 1
        elif self._silence_run:
            self._silence_run += 1

    def _stop_reason(self) -> str | None:
        config = self.config
        if self.speech_detected and self._silence_run * config.window_ms >= config.silence_ms:
            return SILENCE
        if self.elapsed_ms >= config.max_ms:
            return CEILING
        if not self.speech_detected and self.elapsed_ms >= config.no_speech_timeout_ms:
            return NO_SPEECH_TIMEOUT
        return None
