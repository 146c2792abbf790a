"""Double talk: how much of what the microphone hears the played speech does not explain, from a linear
echo model that cannot run away.

Barge-in (engine/barge.py) must tell the user's voice from the agent's own echo while both sound. WebRTC's
AEC3 (audio/echo.py) removes the echo well, but its suppressor also damps the user during double talk,
and what it leaves of the echo still sounds like speech to Silero: in reverberant rooms the agent stopped
itself (bench/barge.py). So the decision rests on a linear model of the echo path: an adaptive filter
predicts the echo from the reference, and the user is what it fails to predict. Echo alone, the prediction
leaves 20-30 dB less than the microphone heard; a user as loud as the echo leaves only a few dB less. The
rise over the turn's own echo-alone baseline, not a fixed level, is the measure.

The filter is a partitioned-block frequency-domain adaptive filter (overlap-save, gradient-constrained:
the textbook form of Speex's and WebRTC's linear stages). Its step is normalised, per frequency bin, by
the reference's power summed over every partition, that is over the whole filter length (textbook NLMS,
stable for any step below 2), where a first version took the newest block's smoothed power alone. That
first version's leftover stayed as loud as the microphone on the live rig in about one turn in three.
Recorded (tests/fixtures/echo), those turns showed the reference going wrong under the filter more than
the step: silent while the echo spoke (the device ran dry while Piper rendered a sentence: audio/echo.py
now keeps the gap), creeping a fraction of a millisecond against the echo (engine/barge.py now keeps the
clock it measured), or falling 195 ms behind it, past the path modelled. So a guard stands behind the
normaliser: when the residual is louder than the microphone through most of ~0.3 s, or the filter's
energy jumps, the model starts afresh and reports itself unlearnt until its echo-alone baseline is
known again; engine/barge.py then decides by the stricter rule on AEC3 alone and measures the delay
again.

In a noisy room the leftover is mostly the room's noise, which no model of the echo can explain: the echo
alone then left only 5-12 dB less than the microphone, and the model never counted as learnt. So both
energies are measured above a noise floor (NoiseFloor: minimum statistics of the leftover per frequency
bin), and the step of each bin is regularised by it, so that the model does not learn the room's noise
as echo. In the bench's noisy room the echo alone now leaves 20-27 dB less, as in a quiet room.

No maintained PyPI package exposes such a filter (the WebRTC bindings offer only the whole canceller, and
Speex's wheels are unmaintained or source-only: bench/README.md), hence these lines of numpy. Its output,
the microphone less the predicted echo, keeps the user's voice whole: it is what Silero and whisper hear
once the user cuts in.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from mcp_listen.contract.limits import SAMPLE_RATE, WINDOW_SAMPLES

BLOCK = WINDOW_SAMPLES // 2
"""The filter's block: half a window (16 ms), so each window is two updates."""
PARTITIONS = 10
"""Echo path modelled: 10 blocks, 160 ms past the reference (which leads the echo by ~10 ms once the
delay is measured, audio/echo.py). Twice as many modelled the reverberant tail no better and converged
slower (bench/barge.py's rooms: RT60 0.3 s)."""
STEP = 0.7
"""The adaptation step of the whole-filter normalised update (stable below 2)."""
STEP_IN_DOUBLE_TALK = 0.05
"""Share of STEP kept while the prediction leaves more than FREEZE_DB of the microphone: the filter must
not learn the user's voice as echo."""
FREEZE_DB = -6.0
WARM_BLOCKS = 60
"""Blocks (~1 s) of full-speed learning before a poor prediction can slow it."""
REGULARISATION = 1e-3
"""Added to each bin's power, as a share of the mean bin's: bins the reference leaves empty learn slowly
instead of by leaps."""
QUIET_DBFS = -60.0
"""A reference quieter than this over the whole filter length (its dither between sentences) teaches
nothing: the update would be the microphone over almost nothing."""
BAND = (200, 4000)
"""The speech band (Hz) in which energies are compared: a room's hum and fans sit below it."""
HISTORY_WINDOWS = 60
"""The echo-alone baseline and the microphone's typical level: medians over the last ~2 s of windows in
which the agent's voice was playing."""
MIN_HISTORY = 10
PLAYING_ENERGY = 1e6
"""Band energy of the reference above which a window counts as the agent speaking (its quietest
consonants are ~100 times louder; silence between sentences is 0)."""
LEARNT_DB = -12.0
"""The echo-alone baseline must be at least this far down before the model's measure means anything, and
its rule decides. Where a reverberant tail past the 160 ms modelled leaves more, a rise of RISE_DB is
within the leftover's own swings: at -6 dB the agent's own voice stopped it in 7 of 20 runs in the bench's
noisy room (then at -7 to -12 dB, before the noise floor: bench/README.md), and the rule on AEC3 alone
decides instead."""
DIVERGED_WINDOWS = 10
LOUDER_SHARE = 0.7
"""The model has run away (or the path changed under it: the echo shifted against the reference) when its
residual is louder than the microphone in LOUDER_SHARE of the last DIVERGED_WINDOWS windows (~0.3 s) in
which the agent spoke; it then starts afresh. A user talking over a learnt model leaves less than the
microphone, or about as much when far louder than the echo, never LOUDER_DB more. A share, not a run: on the
test rig a shifted path left a window or two a little quieter now and then."""
LOUDER_DB = 1.0
"""Louder means 1 dB louder, both measured above the noise floor: where noise fills a window, the two are
within a fraction of a dB, and their order a coin's toss (the guard then reset a sound model 4-16 times a
turn in the bench's noisy room, which never counted as learnt)."""
LOUDER = 10 ** (LOUDER_DB / 10)
MAX_GAIN_DB = 20.0
"""The filter's energy (the echo path's gain) past which it has run away: no loudspeaker path makes the
echo 20 dB louder than what was played."""
JUMP_DB = 10.0
"""A rise of the filter's energy within one window past which it has run away (a learning filter grows
by a few dB a window at most)."""
CLIPPING_ECHO = 24576.0
"""The predicted echo's peak (three quarters of full scale) past which a clipped window is taken to be the echo's
doing: in the bench's 120 ms 0 dB room the loudest onsets of the agent's speech clipped the microphone
(predicted peaks near full scale), while a user as loud as -20 dBFS over a quieter echo clips it too,
and must still be heard (tests/fixtures/echo/noisy.wav: its user, over a predicted peak of 17,759, 4 windows
later at half of full scale)."""
FLOOR_SMOOTHING_S = 0.15
"""The leftover's power per bin is smoothed over this long before its minimum is taken (minimum statistics):
long enough to ride over one block's swings, short enough to find the gaps between the agent's words."""
FLOOR_RISE_DB_PER_S = 3.0
"""How fast the noise floor may rise: it follows the leftover down at once, up only this fast, so the
echo's and the user's words never become floor while a room that gets louder is followed within seconds."""
FLOOR_MARGIN_DB = 12.0
"""Only what exceeds the floor by this much counts in the energies compared (the leftover's and the
microphone's): the minimum of a smoothed noise power sits several dB under its mean, and noise swings."""
FLOOR_KEPT = 0.1
"""Share of the floor added back to each energy, so that a window of noise alone is a little over
nothing on both sides (its ratio then near 0 dB, not a quotient of two vanishing remainders)."""
FLOOR_REGULARISATION = 1.0
"""Each bin's step is normalised by the reference's power there plus this many times the noise floor (per
partition): the textbook regularisation of NLMS in noise. Without it, a model taught the same noisy
second three times (engine/barge.py's replay) learnt that second's noise as echo, ran away, and in the
bench's noisy room never counted as learnt in 4 of 6 turns; with it, each counted as learnt 1.3 s into
the speech, as in a quiet room, its echo-alone baseline -20 to -27 dB (4.0 did the same)."""


class NoiseFloor:
    """The room's noise under the echo model's leftover, per frequency bin: the minimum of its smoothed power,
    followed down at once and up at FLOOR_RISE_DB_PER_S. Where noise fills the leftover, the echo alone
    leaves only 5-12 dB less than the microphone and the model never counts as learnt (the bench's noisy
    room); measured above this floor, it leaves 20-30 dB less, as in a quiet room."""

    def __init__(self, bins: int) -> None:
        import numpy as np

        self._np = np
        self._smoothed: Any = None
        self.level: Any = np.zeros(bins)
        self._keep = float(np.exp(-BLOCK / SAMPLE_RATE / FLOOR_SMOOTHING_S))
        self._rise = 10 ** (FLOOR_RISE_DB_PER_S * BLOCK / SAMPLE_RATE / 10)
        self._margin = 10 ** (FLOOR_MARGIN_DB / 10)

    def follow(self, power: Any) -> None:
        """One block's leftover power per bin."""
        if self._smoothed is None:
            self._smoothed, self.level = power.copy(), power.copy()
            return
        self._smoothed = self._keep * self._smoothed + (1 - self._keep) * power
        self.level = self._np.minimum(self._smoothed, self.level * self._rise)

    def above(self, power: Any, band: slice) -> float:
        """The energy in `band` that exceeds the floor by FLOOR_MARGIN_DB, and FLOOR_KEPT of the floor."""
        np = self._np
        floor = self.level[band]
        return float(np.sum(np.maximum(power[band] - self._margin * floor, 0.0)) + FLOOR_KEPT * np.sum(floor))


@dataclass(frozen=True)
class Explained:
    """One window: the part of the microphone the echo model leaves (dB; above 0 when its prediction added
    sound instead of taking the echo out: a path it has not learnt), the turn's baseline of
    it while the agent alone spoke (dB; 0 until known), the leftover's level against the microphone's
    typical level while the agent speaks (dB), and whether the model has learnt the path (and has not
    been reset since)."""

    unexplained_db: float
    baseline_db: float
    level_db: float
    learnt: bool = False
    clipped: bool = False
    """The microphone reached full scale in the window with the predicted echo past CLIPPING_ECHO: the echo
    clipped, which no linear model can explain."""

    @property
    def rise_db(self) -> float:
        return self.unexplained_db - self.baseline_db

    @property
    def adds_sound(self) -> bool:
        """The leftover is LOUDER_DB louder than the microphone: the prediction added sound of its own (a path it
        has not learnt, or one that moved), which a voice over the echo never does. A voice much louder than
        the echo leaves about as much as the microphone heard, a fraction of a dB either side."""
        return self.unexplained_db >= LOUDER_DB


class EchoModel:
    """The adaptive linear echo filter of one turn, fed window by window from the microphone's thread."""

    def __init__(self) -> None:
        import numpy as np

        bins = BLOCK + 1
        self._np = np
        self._weights = np.zeros((PARTITIONS, bins), complex)
        self._spectra = np.zeros((PARTITIONS, bins), complex)
        self._previous = np.zeros(BLOCK)
        self._blocks = 0
        self._band = slice(BAND[0] * 2 * BLOCK // SAMPLE_RATE, BAND[1] * 2 * BLOCK // SAMPLE_RATE)
        self._quiet = PARTITIONS * BLOCK * (32768 * 10 ** (QUIET_DBFS / 20)) ** 2
        self._ratios: deque[float] = deque(maxlen=HISTORY_WINDOWS)
        self._levels: deque[float] = deque(maxlen=HISTORY_WINDOWS)
        self._louder: deque[bool] = deque(maxlen=DIVERGED_WINDOWS)
        self._energy = 0.0
        self._floor = NoiseFloor(bins)
        """Kept through reset() and untouched by learn(): the room's noise does not change with the path."""
        self.resets = 0
        """How often the guard found the model run away and started it afresh."""

    def reset(self) -> None:
        """Forget the echo path and what it left (the reference's alignment changed, or the guard fired)."""
        self._weights[:] = 0
        self._spectra[:] = 0
        self._previous[:] = 0
        self._blocks = 0
        self._ratios.clear()
        self._levels.clear()
        self._louder.clear()
        self._energy = 0.0

    def learn(self, near: Any, far: Any) -> None:
        """Adapt to a window heard earlier, measuring nothing: a fresh model is taught the second the delay
        was measured on (engine/barge.py), so that it knows the path when the user may first cut in."""
        for near_block, far_block in self._halves(near, far):
            self._block(near_block, far_block, measuring=False)

    def process(self, near: Any, far: Any) -> tuple[Any, Explained]:
        """`near` (a window of the microphone) less the predicted echo of `far` (what was played then), and
        how much of it the prediction left."""
        np = self._np
        energies = np.zeros(3)
        out = []
        for near_block, far_block in self._halves(near, far):
            residual, block_energies = self._block(near_block, far_block)
            out.append(residual)
            energies += block_energies
        near_e, left_e, far_e = (float(e) for e in energies)
        explained = self._measure(near_e, left_e, far_e)
        clipped = saturated(near)
        self._guard(near_e, left_e, far_e, clipped)
        left = np.concatenate(out)
        if clipped:  # by the echo itself?
            predicted = near.astype(np.float64) - left
            explained = replace(explained, clipped=float(np.max(np.abs(predicted))) > CLIPPING_ECHO)
        return np.clip(np.rint(left), -32768, 32767).astype(np.int16), explained

    def _halves(self, near: Any, far: Any) -> Iterator[tuple[Any, Any]]:
        """A window's two blocks of the microphone and of the reference, as floats: the filter's unit."""
        floats = self._np.float64
        for start in (0, BLOCK):
            yield near[start : start + BLOCK].astype(floats), far[start : start + BLOCK].astype(floats)

    def _block(self, near: Any, far: Any, measuring: bool = True) -> tuple[Any, Any]:
        """One block through the filter: the residual, and the band's energies (the microphone's and the
        leftover's above the noise floor, and the reference's)."""
        np = self._np
        spectrum = np.fft.rfft(np.concatenate([self._previous, far]))
        self._previous = far
        self._spectra = np.roll(self._spectra, 1, axis=0)
        self._spectra[0] = spectrum
        predicted = np.fft.irfft(np.sum(self._weights * self._spectra, axis=0))[BLOCK:]
        residual = near - predicted
        zeros = np.zeros(BLOCK)
        error = np.fft.rfft(np.concatenate([zeros, residual]))
        near_spectrum = np.fft.rfft(np.concatenate([zeros, near]))
        band, floor = self._band, self._floor
        left_power, near_power = np.abs(error) ** 2, np.abs(near_spectrum) ** 2
        clipped = saturated(near)
        if measuring and not clipped:
            floor.follow(left_power)
        far_e = float(np.sum(np.abs(spectrum[band]) ** 2))
        energies = np.array([floor.above(near_power, band), floor.above(left_power, band), far_e])
        if not clipped:
            self._adapt(error, 10 * np.log10((energies[1] + 1) / (energies[0] + 1)))
        return residual, energies

    def _adapt(self, error: Any, left_db: float) -> None:
        """One normalised step: each bin's update over the reference's power in that bin summed over every
        partition (the whole filter length), so no step can outgrow what the filter holds, and over the
        noise floor there: a bin where the room's noise outweighs the reference learns slowly."""
        np = self._np
        power = np.sum(np.abs(self._spectra) ** 2, axis=0)
        mean = float(np.mean(power))
        if mean < self._quiet:
            return
        step = STEP if (self._blocks < WARM_BLOCKS or left_db < FREEZE_DB) else STEP * STEP_IN_DOUBLE_TALK
        noise = FLOOR_REGULARISATION * PARTITIONS * self._floor.level
        gradient = np.fft.irfft(self._spectra.conj() * error / (power + REGULARISATION * mean + noise), axis=1)
        gradient[:, BLOCK:] = 0  # the constraint: a linear (not circular) convolution
        self._weights += step * np.fft.rfft(gradient, axis=1)
        self._blocks += 1

    def _measure(self, near_e: float, left_e: float, far_e: float) -> Explained:
        np = self._np
        unexplained = 10 * float(np.log10((left_e + 1) / (near_e + 1)))
        known = len(self._ratios) >= MIN_HISTORY
        baseline = float(np.median(self._ratios)) if known else 0.0
        typical = float(np.median(self._levels)) if len(self._levels) >= MIN_HISTORY else 1.0
        level = 10 * float(np.log10((left_e + 1) / (typical + 1)))
        if far_e > PLAYING_ENERGY:
            self._ratios.append(unexplained)
            self._levels.append(near_e)
        return Explained(unexplained, baseline, level, known and baseline < LEARNT_DB)

    def _guard(self, near_e: float, left_e: float, far_e: float, clipped: bool) -> None:
        """Start afresh when the model has run away: its residual louder than the microphone through most of
        DIVERGED_WINDOWS while the agent speaks, or its energy past MAX_GAIN_DB or up JUMP_DB in one window.
        A clipped window does not count: the microphone lost the peaks the prediction still holds."""
        np = self._np
        if far_e > PLAYING_ENERGY and not clipped:
            self._louder.append(left_e > near_e * LOUDER + 1)
        energy = float(np.sum(np.fft.irfft(self._weights, axis=1) ** 2))  # 1: an echo as loud as what played
        jumped = self._energy > 1e-3 and energy > self._energy * 10 ** (JUMP_DB / 10)
        self._energy = energy
        if sum(self._louder) >= LOUDER_SHARE * DIVERGED_WINDOWS or energy > 10 ** (MAX_GAIN_DB / 10) or jumped:
            self.resets += 1
            self.reset()


def saturated(samples: Any) -> bool:
    """Whether the microphone reached full scale: what it heard past it is lost, so no linear model explains
    the block. The filter does not learn from it (a learnt model fed 0.6 s of clipped sound left -7 dB of the
    echo afterwards instead of -63: tests/unit/test_doubletalk.py), the noise floor does not follow it, and the
    guard does not count it (the leftover of a clipped echo can be louder than what the microphone kept). In
    the bench's 120 ms 0 dB room the loudest onsets of the agent's speech clip the microphone."""
    return bool(samples.max() >= 32767 or samples.min() <= -32768)
