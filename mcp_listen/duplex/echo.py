"""Echo cancellation for barge-in: what the speaker played, kept on the clock the microphone's windows
arrive on (FarEnd), the delay between the two measured (Aligner), and WebRTC's AEC3 removing the echo
from each window (Canceller).

The canceller is pywebrtc-audio (Apache-2.0, part of the `speak` extra). AEC3 finds the delay between
the played samples and their echo by itself, but only when the reference leads the echo, and slowly.
So the reference is placed on the clock, not merely queued: sample k of the speech is heard at the
first write's time + k / rate (a blocking output stream plays what it is given back to back), and a
window holds what was heard at its arrival time minus the microphone's input latency. What that
estimate misses (the sound server's own buffering, the room) the Aligner measures in the first second
of speech by cross-correlation; the reference is then handed in `aligned_lead_s` ahead of the echo.
The thresholds are DelayConfig's (config.py); the measurements behind them are in bench/README.md.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from mcp_listen.audio.levels import level_db
from mcp_listen.config.libraries import installed
from mcp_listen.contract.limits import SAMPLE_RATE, WINDOW_SAMPLES
from mcp_listen.duplex.config import DelayConfig

ECHO_UNAVAILABLE = (
    "Barge-in needs the echo canceller (pywebrtc-audio, part of the speak extra), which is not installed: "
    "this turn listened after the speech instead. Install it: pip install 'mcp-listen[speak]'."
)


ECHO_UNAVAILABLE_SPEAK = (
    "barge_in needs the echo canceller (pywebrtc-audio, part of the speak extra), which is not installed: the "
    "speech played without listening. Install it: pip install 'mcp-listen[speak]'."
)

log = logging.getLogger(__name__)


def available() -> bool:
    """Whether the canceller can be imported; imports nothing."""
    return installed("pywebrtc_audio")


class FarEnd:
    """The speech as played, resampled to the microphone's 16 kHz, with the time its first sample was
    handed to the device. Fed by the speaker's writer thread, read by the microphone's."""

    def __init__(self, voice_rate: int, config: DelayConfig | None = None) -> None:
        self._voice_rate = voice_rate
        self._gap_margin_s = (config or DelayConfig()).gap_margin_s
        self._lock = threading.Lock()
        self._resampler: Any = None
        self._samples: Any = None
        """The speech so far at 16 kHz, in a buffer that doubles when full; `_length` of it are filled."""
        self._length = 0
        self.started_at: float | None = None
        self.gaps = 0
        """How often the device ran dry and played again: each time the sound server buffers afresh, and the
        echo's delay may have moved (path.py measures it again)."""

    def played(self, block: Any, at: float, ran_dry: bool) -> None:
        """`block` (int16 at the voice's rate) was handed to the device at `at` (time.monotonic()).

        A block the device ran dry before (it said so: Piper rendered the next sentence slower than the
        last was spoken) is heard from `at` on, as the first block was, and the gap is silence in the
        reference too. Any other block follows the one before back to back, however late it was handed
        over: the device's buffer (audio/speaker.py LATENCY_S) played on meanwhile. Judged by the clock
        alone, a writer thread kept waiting on a busy machine put gaps into the reference that the echo
        never had (bench/README.md, "Barge-in's thresholds")."""
        import numpy as np

        if self._resampler is None:
            import soxr

            self._resampler = soxr.ResampleStream(self._voice_rate, SAMPLE_RATE, 1, dtype="int16", quality="MQ")
        resampled = np.asarray(self._resampler.resample_chunk(block), dtype=np.int16)
        with self._lock:
            if self.started_at is None:
                self.started_at = at
            gap_until = round((at - self.started_at - self._gap_margin_s) * SAMPLE_RATE) if ran_dry else 0
            begin = max(self._length, gap_until)
            self.gaps += begin > self._length
            end = begin + len(resampled)
            if self._samples is None or end > len(self._samples):
                grown = np.zeros(
                    max(end, 2 * (0 if self._samples is None else len(self._samples)), SAMPLE_RATE), np.int16
                )
                if self._samples is not None:
                    grown[: self._length] = self._samples[: self._length]
                self._samples = grown
            self._samples[self._length : begin] = 0  # the gap (or what a cut left there) is silence
            self._samples[begin:end] = resampled
            self._length = end

    def cut(self, at: float) -> None:
        """The speech was stopped at `at`: what the speaker held beyond it (its buffer, dropped by the abort)
        was never heard, and a reference that still held it would make the canceller damp the user."""
        with self._lock:
            if self.started_at is not None:
                self._length = max(0, min(self._length, round((at - self.started_at) * SAMPLE_RATE)))

    def reference(self, captured_at: float, lead_s: float, samples: int = WINDOW_SAMPLES) -> Any:
        """The `samples` played from `captured_at` + `lead_s` on (zeros before the speech and after it)."""
        import numpy as np

        out = np.zeros(samples, dtype=np.int16)
        with self._lock:
            if self.started_at is None:
                return out
            start = round((captured_at + lead_s - self.started_at) * SAMPLE_RATE)
            first, last = max(start, 0), min(start + samples, self._length)
            if last > first:
                out[first - start : last - start] = self._samples[first:last]
        return out


class Aligner:
    """The lead to take the reference with: `search_lead_s` until a second of played speech and what the
    microphone heard meanwhile show how far the echo lags it, then just enough to lead the echo. A second
    with no echo found ends the search only when the microphone was quiet in it (`quiet_db`): headphones."""

    def __init__(self, config: DelayConfig | None = None) -> None:
        self.config = config = config or DelayConfig()
        self.lead_s = config.search_lead_s
        self.measured_lag_s: float | None = None
        """The echo's lag behind the search reference; None until measured (or when there is no echo)."""
        self._near: list[Any] = []
        self._far: list[Any] = []
        self._collected = 0
        self.done = False
        self.microphone_db: float | None = None
        """The microphone's level over the last second measured."""

    @property
    def collected_windows(self) -> int:
        """The windows of the measurement under way (those whose reference held sound, since it began)."""
        return len(self._near)

    def restart(self) -> None:
        """Drop the windows collected so far (their references were taken on a clock that has since moved)."""
        self._near, self._far, self._collected = [], [], 0

    def add(self, near: Any, far: Any) -> bool:
        """One window and the reference it was cleaned with; True when the lead just changed (the
        canceller starts afresh then: measured, AEC3 adapted to one delay takes seconds to follow a
        new one, while a fresh one at the right delay converges within a second)."""
        if self.done or not far.any():
            return False
        self._near.append(near)
        self._far.append(far)
        self._collected += len(far)
        config = self.config
        if self._collected >= config.align_samples:
            near = _joined(self._near)
            lag = echo_lag_s(near, _joined(self._far), config)
            self.restart()
            self.microphone_db = level = level_db(near)
            if lag is None and level > config.quiet_db:
                log.info("no echo of the speech found, the microphone at %.0f dBFS: measuring again", level)
                return False
            self.done = True
            if lag is not None:
                self.measured_lag_s = lag
                self.lead_s = config.search_lead_s + config.aligned_lead_s - lag  # negative: the echo is later
                return True
        return False


def echo_lag_s(near: Any, far: Any, config: DelayConfig | None = None) -> float | None:
    """How far `near` lags `far` (0 to `max_lag_s`), by the peak of their normalised cross-correlation;
    None when no peak reaches `min_correlation` (no echo to speak of)."""
    import numpy as np

    config = config or DelayConfig()
    n = len(near)
    x, y = near.astype(np.float64), far.astype(np.float64)
    x -= x.mean()
    y -= y.mean()
    size = 1 << (2 * n - 1).bit_length()
    correlation = np.fft.irfft(np.fft.rfft(x, size) * np.conj(np.fft.rfft(y, size)), size)
    max_lag = min(int(config.max_lag_s * SAMPLE_RATE), n - 1)
    lags = correlation[: max_lag + 1]
    scale = float(np.sqrt(np.dot(x, x) * np.dot(y, y)))
    if scale == 0.0:
        return None
    best = int(np.argmax(lags))
    if lags[best] / scale < config.min_correlation:
        return None
    first = max(0, best - int(config.earliest_s * SAMPLE_RATE))
    earliest = np.flatnonzero(lags[first : best + 1] >= config.earliest_share * lags[best])[0]
    return (first + int(earliest)) / SAMPLE_RATE


def _joined(windows: list[Any]) -> Any:
    import numpy as np

    return np.concatenate(windows)


class Canceller:
    """AEC3 on 16 kHz mono windows, one instance per exchange (it is not thread-safe: the microphone's
    thread alone calls it)."""

    def __init__(self) -> None:
        from pywebrtc_audio import EchoCanceller

        self._aec = EchoCanceller(SAMPLE_RATE, 1)

    def clean(self, near: Any, far: Any) -> Any:
        """`near` (what the microphone heard) without the echo of `far` (what was played then)."""
        return self._aec.process(near, far)

    def reset(self) -> None:
        """Forget the echo path learnt so far (the reference's alignment changed)."""
        self._aec.reset()
