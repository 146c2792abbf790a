"""Echo cancellation for barge-in: what the speaker played, kept on the clock the microphone's windows
arrive on (FarEnd), the delay between the two measured (Aligner), and WebRTC's AEC3 removing the echo
from each window (Canceller).

The canceller is pywebrtc-audio (Apache-2.0, part of the `speak` extra). AEC3 finds the delay between
the played samples and their echo by itself, but only when the reference leads the echo, and it is
slow to do so: measured offline on Piper speech, an echo 0 ms behind its reference is down 53 dB
within a second, one 80 ms behind only 17 dB after two (52 dB once it has converged, none past
~500 ms). So the reference is placed on the clock, not merely queued: sample k of the speech is
heard at the first write's time + k / rate (a blocking output stream plays what it is given back to
back), and a window is taken to hold what was heard at its arrival time minus the microphone's input
latency. What that estimate misses (the sound server's own buffering, the room) the Aligner measures
in the first second of speech by cross-correlation, and the reference is then handed in
ALIGNED_LEAD_S ahead of the echo.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from mcp_listen.audio.levels import level_db
from mcp_listen.config.libraries import installed
from mcp_listen.contract.limits import SAMPLE_RATE, WINDOW_SAMPLES

SEARCH_LEAD_S = 0.15
"""How far ahead of the window's estimated time the reference is taken until the delay is measured: the
echo then lags it by 0.15 s plus the sound server's own buffering (the estimate counts playback from
the first write, the earliest it can start), inside AEC3's reach. No more: the speaker has written
only ~0.2 s (its buffer) beyond what is being heard."""
ALIGNED_LEAD_S = 0.01
"""How far the reference leads the echo once the delay is measured: AEC3 converges at once near zero,
and must never see the echo before its reference."""
MAX_LAG_S = 0.5
"""The longest echo delay looked for, behind a reference taken SEARCH_LEAD_S ahead."""
ALIGN_SAMPLES = SAMPLE_RATE
"""Reference and microphone samples correlated to measure the delay: a second of played speech."""
GAP_MARGIN_S = 0.02
"""A block handed to the device after it ran dry is taken to follow a gap this much shorter than it seems:
the reference may lead the echo by a little more, never trail it. Without the gap the reference ran ahead
of the echo by the whole of it: on the test rig, when the first sentence took a second to render, the
reference was silent while the echo spoke, the delay was never measured, and the user was never heard
(tests/fixtures/echo)."""
EARLIEST_SHARE = 0.7
"""The echo's lag is the earliest lag whose correlation reaches this share of the peak, within EARLIEST_S
before it: in a reverberant room a reflection's cluster can correlate better than the direct path, and a
reference taken at a reflection trails the direct echo, which neither AEC3 nor the echo model can then
follow (bench/barge.py's noisy room: the peak 20-24 ms late in 3 of 18 offline measurements, in the
turn the model never learnt). An earlier pick leads the echo a little more, which both follow; at 0.5 a
pitch period's side peak was taken now and then (10 ms early on the rig's recording, tests/fixtures/echo)."""
EARLIEST_S = 0.03
"""How far before the peak the direct path is looked for: the reflections the bench found stronger than
it came 20-24 ms after it."""
MIN_CORRELATION = 0.3
"""The normalised cross-correlation peak below which no echo is found in a second (headphones, if the
microphone was quiet meanwhile: QUIET_DB): the search lead is kept."""
QUIET_DB = -45.0
"""The microphone's level over the measured second (dBFS) under which a second with no echo found is taken
for headphones (a room's noise floor lies at -60 to -50; the rig's headphones case at digital silence).
A louder second is no proof of headphones: it may hold the agent's own voice with its echo past the search
(a sound server that started playing late, or buffered afresh mid-second with no underflow reported), or
the user. Taken for headphones, such a room had speech as loud as usual count as the user, the agent's
voice among it, which then stopped itself at once; so the delay is measured again on the next second, and
until it is found (or a quiet second shows there is no echo) nothing stops the speech."""
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

    def __init__(self, voice_rate: int) -> None:
        self._voice_rate = voice_rate
        self._lock = threading.Lock()
        self._resampler: Any = None
        self._samples: Any = None
        """The speech so far at 16 kHz, in a buffer that doubles when full; `_length` of it are filled."""
        self._length = 0
        self.started_at: float | None = None
        self.gaps = 0
        """How often the device ran dry and played again: each time the sound server buffers afresh, and the
        echo's delay may have moved (engine/barge.py measures it again)."""

    def played(self, block: Any, at: float, ran_dry: bool) -> None:
        """`block` (int16 at the voice's rate) was handed to the device at `at` (time.monotonic()).

        A block the device ran dry before (it said so: Piper rendered the next sentence slower than the
        last was spoken) is heard from `at` on, as the first block was, and the gap is silence in the
        reference too. Any other block follows the one before back to back, however late it was handed
        over: the device's buffer (audio/speaker.py LATENCY_S) played on meanwhile. Judged by the clock
        alone, a writer thread a busy machine kept waiting 2-15 ms once the buffer had run low (no
        underflow) put gaps into the reference that the echo never had: it then trailed the echo by
        their sum, the delay was measured 17 ms long, the echo model never learnt the path, and the
        rule on AEC3 alone decided for the rest of the turn (the agent's own voice stopped it in 2
        of 6 first turns of a fresh server on two busy cores)."""
        import numpy as np

        if self._resampler is None:
            import soxr

            self._resampler = soxr.ResampleStream(self._voice_rate, SAMPLE_RATE, 1, dtype="int16", quality="MQ")
        resampled = np.asarray(self._resampler.resample_chunk(block), dtype=np.int16)
        with self._lock:
            if self.started_at is None:
                self.started_at = at
            gap_until = round((at - self.started_at - GAP_MARGIN_S) * SAMPLE_RATE) if ran_dry else 0
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

    def reference(self, heard_from: float, lead_s: float, samples: int = WINDOW_SAMPLES) -> Any:
        """The `samples` played from `heard_from` + `lead_s` on (zeros before the speech and after it)."""
        import numpy as np

        out = np.zeros(samples, dtype=np.int16)
        with self._lock:
            if self.started_at is None:
                return out
            start = round((heard_from + lead_s - self.started_at) * SAMPLE_RATE)
            first, last = max(start, 0), min(start + samples, self._length)
            if last > first:
                out[first - start : last - start] = self._samples[first:last]
        return out


class Aligner:
    """The lead to take the reference with: SEARCH_LEAD_S until a second of played speech and what the
    microphone heard meanwhile show how far the echo lags it, then just enough to lead the echo. A second
    with no echo found ends the search only when the microphone was quiet in it (QUIET_DB): headphones."""

    def __init__(self) -> None:
        self.lead_s = SEARCH_LEAD_S
        self.measured_lag_s: float | None = None
        """The echo's lag behind the search reference; None until measured (or when there is no echo)."""
        self._near: list[Any] = []
        self._far: list[Any] = []
        self._collected = 0
        self.done = False
        self.heard_db: float | None = None
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
        if self._collected >= ALIGN_SAMPLES:
            near = _joined(self._near)
            lag = echo_lag_s(near, _joined(self._far))
            self.restart()
            self.heard_db = level_db(near)
            if lag is None and self.heard_db > QUIET_DB:
                log.info("no echo of the speech found, the microphone at %.0f dBFS: measuring again", self.heard_db)
                return False
            self.done = True
            if lag is not None:
                self.measured_lag_s = lag
                self.lead_s = SEARCH_LEAD_S + ALIGNED_LEAD_S - lag  # negative: the echo comes later than estimated
                return True
        return False


def echo_lag_s(near: Any, far: Any) -> float | None:
    """How far `near` lags `far` (0 to MAX_LAG_S), by the peak of their normalised cross-correlation;
    None when no peak reaches MIN_CORRELATION (no echo to speak of)."""
    import numpy as np

    n = len(near)
    x, y = near.astype(np.float64), far.astype(np.float64)
    x -= x.mean()
    y -= y.mean()
    size = 1 << (2 * n - 1).bit_length()
    correlation = np.fft.irfft(np.fft.rfft(x, size) * np.conj(np.fft.rfft(y, size)), size)
    max_lag = min(int(MAX_LAG_S * SAMPLE_RATE), n - 1)
    lags = correlation[: max_lag + 1]
    scale = float(np.sqrt(np.dot(x, x) * np.dot(y, y)))
    if scale == 0.0:
        return None
    best = int(np.argmax(lags))
    if lags[best] / scale < MIN_CORRELATION:
        return None
    first = max(0, best - int(EARLIEST_S * SAMPLE_RATE))
    return (first + int(np.flatnonzero(lags[first : best + 1] >= EARLIEST_SHARE * lags[best])[0])) / SAMPLE_RATE


def _joined(windows: list[Any]) -> Any:
    import numpy as np

    return np.concatenate(windows)


class Canceller:
    """AEC3 on 16 kHz mono windows, one instance per turn (it is not thread-safe: the microphone's
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
