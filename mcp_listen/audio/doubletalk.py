"""Double talk: how much of what the microphone hears the played speech does not explain.

Barge-in (engine/barge.py) must tell the user's voice from the agent's own echo while both sound. WebRTC's
AEC3 (audio/echo.py) removes the echo well, but its suppressor also damps the user during double talk,
and what it leaves of the echo still sounds like speech to Silero: in reverberant rooms the agent stopped
itself (bench/barge.py). So the decision rests on a linear model of the echo path instead: an adaptive
filter predicts the echo from the reference, and the user is what it fails to predict. Echo alone, the
prediction leaves 20-30 dB less than the microphone heard; a user as loud as the echo leaves only a few dB
less. The rise over the turn's own echo-alone baseline, not a fixed level, is the measure, so a filter
still learning (a fresh turn, a changing room) raises no alarm: it only delays the cut-in.

The filter is a partitioned-block frequency-domain adaptive filter (overlap-save, gradient-constrained:
the textbook form of Speex's and WebRTC's linear stages). No maintained PyPI package exposes one (the
WebRTC bindings offer only the whole canceller), hence these few lines of numpy. Its output, the
microphone less the predicted echo, keeps the user's voice whole: it is what Silero and whisper hear once
the user cuts in.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from mcp_listen.contract.models import SAMPLE_RATE, WINDOW_SAMPLES

BLOCK = WINDOW_SAMPLES // 2
"""The filter's block: half a window (16 ms), so each window is two updates."""
PARTITIONS = 10
"""Echo path modelled: 10 blocks, 160 ms past the reference (which leads the echo by ~10 ms once the
delay is measured, audio/echo.py). Twice as many modelled the reverberant tail no better and converged
slower (bench/barge.py's rooms: RT60 0.3 s)."""
STEP = 1.5
"""The adaptation step, normalised by the reference's power per bin and the partition count: 2.5 diverged
on the bench, 0.3-0.8 converged 2-3 times slower."""
STEP_IN_DOUBLE_TALK = 0.05
"""Share of STEP kept while the prediction leaves more than FREEZE_DB of the microphone: the filter must
not learn the user's voice as echo."""
FREEZE_DB = -6.0
WARM_BLOCKS = 60
"""Blocks (~1 s) of full-speed learning before a poor prediction can slow it."""
POWER_SMOOTHING = 0.9
BAND = (200, 4000)
"""The speech band (Hz) in which energies are compared: a room's hum and fans sit below it."""
HISTORY_WINDOWS = 60
"""The echo-alone baseline and the microphone's typical level: medians over the last ~2 s of windows in
which the agent's voice was playing."""
MIN_HISTORY = 10
PLAYING_ENERGY = 1e6
"""Band energy of the reference above which a window counts as the agent speaking (its quietest
consonants are ~100 times louder; silence between sentences is 0)."""


@dataclass(frozen=True)
class Explained:
    """One window: the part of the microphone the echo model leaves (dB, at most 0), the turn's baseline of
    it while the agent alone spoke (dB; 0 until known), and the leftover's level against the microphone's
    typical level while the agent speaks (dB)."""

    unexplained_db: float
    baseline_db: float
    level_db: float

    @property
    def rise_db(self) -> float:
        return self.unexplained_db - self.baseline_db


class EchoModel:
    """The adaptive linear echo filter of one turn, fed window by window from the microphone's thread."""

    def __init__(self) -> None:
        import numpy as np

        bins = BLOCK + 1
        self._np = np
        self._weights = np.zeros((PARTITIONS, bins), complex)
        self._spectra = np.zeros((PARTITIONS, bins), complex)
        self._previous = np.zeros(BLOCK)
        self._power = np.zeros(bins)
        self._mean_power = 1.0
        self._blocks = 0
        self._band = slice(BAND[0] * 2 * BLOCK // SAMPLE_RATE, BAND[1] * 2 * BLOCK // SAMPLE_RATE)
        self._ratios: deque[float] = deque(maxlen=HISTORY_WINDOWS)
        self._levels: deque[float] = deque(maxlen=HISTORY_WINDOWS)

    def reset(self) -> None:
        """Forget the echo path and what it left (the reference's alignment changed)."""
        self._weights[:] = 0
        self._spectra[:] = 0
        self._previous[:] = 0
        self._blocks = 0
        self._ratios.clear()
        self._levels.clear()

    def learn(self, near: Any, far: Any) -> None:
        """Adapt to a window heard earlier, measuring nothing: a fresh model is taught the second the delay
        was measured on (engine/barge.py), so that it knows the path when the user may first cut in."""
        np = self._np
        for start in (0, BLOCK):
            self._block(near[start : start + BLOCK].astype(np.float64), far[start : start + BLOCK].astype(np.float64))

    def process(self, near: Any, far: Any) -> tuple[Any, Explained]:
        """`near` (a window of the microphone) less the predicted echo of `far` (what was played then), and
        how much of it the prediction left."""
        np = self._np
        energies = np.zeros(4)
        out = []
        for start in (0, BLOCK):
            residual, block_energies = self._block(
                near[start : start + BLOCK].astype(np.float64), far[start : start + BLOCK].astype(np.float64)
            )
            out.append(residual)
            energies += block_energies
        near_e, left_e, far_e = (float(e) for e in energies[:3])
        explained = self._measure(near_e, left_e, far_e)
        return np.clip(np.rint(np.concatenate(out)), -32768, 32767).astype(np.int16), explained

    def _block(self, near: Any, far: Any) -> tuple[Any, Any]:
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
        band = self._band
        energies = np.array(
            [np.sum(np.abs(s[band]) ** 2) for s in (near_spectrum, error, spectrum)] + [0.0], dtype=np.float64
        )
        self._adapt(spectrum, error, 10 * np.log10((energies[1] + 1) / (energies[0] + 1)))
        return residual, energies

    def _adapt(self, spectrum: Any, error: Any, left_db: float) -> None:
        np = self._np
        self._power = POWER_SMOOTHING * self._power + (1 - POWER_SMOOTHING) * np.abs(spectrum) ** 2
        self._mean_power = 0.99 * self._mean_power + 0.01 * float(np.mean(np.abs(spectrum) ** 2))
        step = STEP if (self._blocks < WARM_BLOCKS or left_db < FREEZE_DB) else STEP * STEP_IN_DOUBLE_TALK
        normaliser = PARTITIONS * (self._power + 0.01 * self._mean_power) + 1e-6
        gradient = np.fft.irfft(self._spectra.conj() * error / normaliser, axis=1)
        gradient[:, BLOCK:] = 0  # the constraint: a linear (not circular) convolution
        self._weights += step * np.fft.rfft(gradient, axis=1)
        self._blocks += 1

    def _measure(self, near_e: float, left_e: float, far_e: float) -> Explained:
        np = self._np
        unexplained = min(0.0, 10 * float(np.log10((left_e + 1) / (near_e + 1))))
        baseline = float(np.median(self._ratios)) if len(self._ratios) >= MIN_HISTORY else 0.0
        typical = float(np.median(self._levels)) if len(self._levels) >= MIN_HISTORY else 1.0
        level = 10 * float(np.log10((left_e + 1) / (typical + 1)))
        if far_e > PLAYING_ENERGY:
            self._ratios.append(unexplained)
            self._levels.append(near_e)
        return Explained(unexplained, baseline, level)
