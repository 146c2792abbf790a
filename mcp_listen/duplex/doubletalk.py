"""Double talk: how much of what the microphone hears the played speech does not explain, from a linear
echo model that cannot run away.

Barge-in must tell the user's voice from the agent's own echo while both sound. AEC3 (echo.py) removes
the echo well, but its suppressor also damps the user during double talk, and what it leaves of the echo
still sounds like speech to Silero. So the double-talk rule (cut_in.py) rests on a linear model of the
echo path: an adaptive filter predicts the echo from the reference, and the user is what it fails to
predict. Echo alone, the prediction leaves 20-30 dB less than the microphone heard; a user as loud as
the echo only a few dB less: the rise over the exchange's own echo-alone baseline is the measure.

The filter is a partitioned-block frequency-domain adaptive filter (overlap-save, gradient-constrained:
the textbook form of Speex's and WebRTC's linear stages), its step normalised per frequency bin by the
reference's power over the whole filter length (NLMS, stable for any step below 2). A guard stands
behind it: when the residual is louder than the microphone through most of ~0.3 s, or the filter's
energy jumps, the model starts afresh and reports itself unlearnt until its baseline is known again
(the echo path then measures the delay again). Both energies are measured above the room's noise floor
(NoiseFloor), and each bin's step is regularised by it, so that a noisy room's leftover does not keep the
model unlearnt nor teach it the noise as echo. Its output, the microphone less the predicted echo, keeps
the user's voice whole: it is what Silero and whisper hear once the user cuts in. The thresholds are
EchoModelConfig's (config.py); why the filter is built so: bench/README.md, "Barge-in's thresholds".
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from mcp_listen.contract.limits import SAMPLE_RATE, WINDOW_SAMPLES
from mcp_listen.duplex.config import EchoModelConfig

BLOCK = WINDOW_SAMPLES // 2
"""The filter's block: half a window (16 ms), so each window is two updates."""


class NoiseFloor:
    """The room's noise under the echo model's leftover, per frequency bin: the minimum of its smoothed power,
    followed down at once and up at `floor_rise_db_per_s`. Where noise fills the leftover, the echo
    alone would leave only a little less than the microphone, and the model would never count as learnt."""

    def __init__(self, bins: int, config: EchoModelConfig) -> None:
        import numpy as np

        self._np = np
        self._smoothed: Any = None
        self.level: Any = np.zeros(bins)
        self._keep = float(np.exp(-BLOCK / SAMPLE_RATE / config.floor_smoothing_s))
        self._rise = 10 ** (config.floor_rise_db_per_s * BLOCK / SAMPLE_RATE / 10)
        self._margin = 10 ** (config.floor_margin_db / 10)
        self._kept = config.floor_kept

    def follow(self, power: Any) -> None:
        """One block's leftover power per bin."""
        if self._smoothed is None:
            self._smoothed, self.level = power.copy(), power.copy()
            return
        self._smoothed = self._keep * self._smoothed + (1 - self._keep) * power
        self.level = self._np.minimum(self._smoothed, self.level * self._rise)

    def above(self, power: Any, band: slice) -> float:
        """The energy in `band` that exceeds the floor by `floor_margin_db`, and `floor_kept` of the floor."""
        np = self._np
        floor = self.level[band]
        return float(np.sum(np.maximum(power[band] - self._margin * floor, 0.0)) + self._kept * np.sum(floor))


@dataclass(frozen=True)
class Explained:
    """One window: the part of the microphone the echo model leaves (dB; above 0 when its prediction added
    sound instead of taking the echo out: a path it has not learnt), the exchange's baseline of
    it while the agent alone spoke (dB; 0 until known), the leftover's level against the microphone's
    typical level while the agent speaks (dB), and whether the model has learnt the path (and has not
    been reset since)."""

    unexplained_db: float
    baseline_db: float
    level_db: float
    learnt: bool = False
    clipped: bool = False
    """The microphone reached full scale in the window with the predicted echo past `clipping_echo`: the
    echo clipped, which no linear model can explain."""

    @property
    def rise_db(self) -> float:
        return self.unexplained_db - self.baseline_db

    def adds_sound(self, louder_db: float) -> bool:
        """The leftover is `louder_db` louder than the microphone: the prediction added sound of its own (a
        path it has not learnt, or one that moved), which a voice over the echo never does. A voice much
        louder than the echo leaves about as much as the microphone heard, a fraction of a dB either side."""
        return self.unexplained_db >= louder_db


class EchoModel:
    """The adaptive linear echo filter of one exchange, fed window by window from the microphone's thread."""

    def __init__(self, config: EchoModelConfig | None = None) -> None:
        import numpy as np

        self.config = config = config or EchoModelConfig()
        bins = BLOCK + 1
        self._np = np
        self._weights = np.zeros((config.partitions, bins), complex)
        self._spectra = np.zeros((config.partitions, bins), complex)
        self._previous = np.zeros(BLOCK)
        self._blocks = 0
        low, high = config.band_hz
        self._band = slice(low * 2 * BLOCK // SAMPLE_RATE, high * 2 * BLOCK // SAMPLE_RATE)
        self._quiet = config.partitions * BLOCK * (32768 * 10 ** (config.quiet_dbfs / 20)) ** 2
        self._louder_by = 10 ** (config.louder_db / 10)
        self._ratios: deque[float] = deque(maxlen=config.history_windows)
        self._levels: deque[float] = deque(maxlen=config.history_windows)
        self._louder: deque[bool] = deque(maxlen=config.diverged_windows)
        self._energy = 0.0
        self._floor = NoiseFloor(bins, config)
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
        was measured on (path.py), so that it knows the path when the user may first cut in."""
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
            explained = replace(explained, clipped=float(np.max(np.abs(predicted))) > self.config.clipping_echo)
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
        np, config = self._np, self.config
        power = np.sum(np.abs(self._spectra) ** 2, axis=0)
        mean = float(np.mean(power))
        if mean < self._quiet:
            return
        step = config.step
        if self._blocks >= config.warm_blocks and left_db >= config.freeze_db:
            step *= config.step_in_double_talk
        noise = config.floor_regularisation * config.partitions * self._floor.level
        gradient = np.fft.irfft(self._spectra.conj() * error / (power + config.regularisation * mean + noise), axis=1)
        gradient[:, BLOCK:] = 0  # the constraint: a linear (not circular) convolution
        self._weights += step * np.fft.rfft(gradient, axis=1)
        self._blocks += 1

    def _measure(self, near_e: float, left_e: float, far_e: float) -> Explained:
        np, config = self._np, self.config
        unexplained = 10 * float(np.log10((left_e + 1) / (near_e + 1)))
        known = len(self._ratios) >= config.min_history
        baseline = float(np.median(self._ratios)) if known else 0.0
        typical = float(np.median(self._levels)) if len(self._levels) >= config.min_history else 1.0
        level = 10 * float(np.log10((left_e + 1) / (typical + 1)))
        if far_e > config.playing_energy:
            self._ratios.append(unexplained)
            self._levels.append(near_e)
        return Explained(unexplained, baseline, level, known and baseline < config.learnt_db)

    def _guard(self, near_e: float, left_e: float, far_e: float, clipped: bool) -> None:
        """Start afresh when the model has run away: its residual louder than the microphone through most of
        `diverged_windows` while the agent speaks, or its energy past `max_gain_db` or up `jump_db` in one
        window. A clipped window does not count: the microphone lost the peaks the prediction still holds."""
        np, config = self._np, self.config
        if far_e > config.playing_energy and not clipped:
            self._louder.append(left_e > near_e * self._louder_by + 1)
        energy = float(np.sum(np.fft.irfft(self._weights, axis=1) ** 2))  # 1: an echo as loud as what played
        jumped = self._energy > 1e-3 and energy > self._energy * 10 ** (config.jump_db / 10)
        self._energy = energy
        louder = sum(self._louder) >= config.louder_share * config.diverged_windows
        if louder or energy > 10 ** (config.max_gain_db / 10) or jumped:
            self.resets += 1
            self.reset()


def saturated(samples: Any) -> bool:
    """Whether the microphone reached full scale: what it heard past it is lost, so no linear model explains
    the block. The filter does not learn from it, the noise floor does not follow it, and the guard does not
    count it (the leftover of a clipped echo can be louder than what the microphone kept)."""
    return bool(samples.max() >= 32767 or samples.min() <= -32768)
