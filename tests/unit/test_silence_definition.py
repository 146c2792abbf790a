"""What "silence" means for stop_on_silence, held to its definition on a real voice's tail.

The definition (docs/tools.md, "How a turn ends"): silence is counted in 32 ms windows from the end of
the last window whose level is within 20 dB of the loudest speech window of the recording; the turn
ends once silence_ms of it (rounded up to whole windows) has been heard. A fading tail quieter than
that counts as silence, however audible. This test fails if the stop ever comes earlier than that
point, whatever the endpointer's settings say.

The clip: librivox-0880 ("he was not an ill disposed young man", a LibriVox reader, public domain),
from the pocketsphinx 5.1.1 sdist on PyPI as bench/realspeech_data.py builds it; below, per 512-sample
window, what the bundled Silero VAD (speech/vad.py) scored and the window's level in dBFS. After it
comes digital silence, which Silero scores 0.007.
"""

from __future__ import annotations

import math

import pytest

from mcp_listen.audio.levels import SILENT_DB
from mcp_listen.contract.limits import WINDOW_MS
from mcp_listen.speech.endpoint import EndpointConfig, Endpointer

# fmt: off
PROBABILITIES = (
    0.024, 0.018, 0.013, 0.011, 0.009, 0.007, 0.005, 0.012, 0.707, 0.961, 0.984, 0.977, 0.989, 0.999, 0.999,
    1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.999, 0.999, 0.998, 0.998, 0.999, 0.991, 0.979, 0.856,
    0.387, 0.139, 0.223, 0.763, 0.762, 0.7, 0.899, 0.978, 0.998, 0.999, 0.999, 0.999, 0.999, 0.999, 1.0, 1.0,
    1.0, 1.0, 1.0, 0.997, 0.997, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.999, 1.0, 1.0, 1.0, 1.0,
    1.0, 1.0, 1.0, 1.0, 0.999, 0.999, 1.0, 1.0, 0.999, 0.999, 0.995, 0.997, 0.996, 0.998, 0.999, 0.998, 0.994,
    0.994, 0.989, 0.856, 0.255, 0.061, 0.025, 0.015,
)

LEVELS_DB = (
    -43.0, -43.7, -48.2, -46.9, -47.1, -48.5, -48.3, -46.7, -32.6, -26.9, -25.3, -30.2, -26.7, -23.2, -27.4,
    -28.0, -30.8, -39.3, -30.8, -24.3, -22.5, -22.5, -22.1, -23.6, -29.0, -28.3, -29.4, -36.9, -39.5, -35.6,
    -43.6, -44.3, -44.4, -54.1, -46.2, -43.4, -36.0, -30.9, -29.0, -28.2, -27.1, -25.4, -23.0, -23.5, -23.7,
    -27.8, -34.6, -36.4, -33.2, -26.7, -23.8, -22.5, -28.7, -50.5, -27.5, -23.1, -24.4, -22.6, -22.2, -21.8,
    -21.7, -22.1, -25.0, -33.1, -38.0, -34.8, -29.5, -24.4, -25.1, -26.0, -29.0, -30.8, -30.8, -29.7, -29.2,
    -24.3, -23.9, -24.4, -24.8, -24.0, -23.6, -24.3, -24.7, -29.8, -31.3, -33.5, -36.1, -40.4, -42.4, -46.7,
    -42.0, -46.8, -52.1,
)
# fmt: on

AFTER = (0.007, SILENT_DB)
"""A window of the digital silence after the clip."""

QUIET_UNDER_PEAK_DB = 20.0
"""The definition's own figure, stated here and not read from EndpointConfig: a change of the
endpointer's setting must fail this test, not move the definition with it."""


def end_of_speech_window() -> int:
    """The last window within QUIET_UNDER_PEAK_DB of the loudest speech window (Silero >= 0.5)."""
    peak = max(level for p, level in zip(PROBABILITIES, LEVELS_DB) if p >= 0.5)
    return max(i for i, level in enumerate(LEVELS_DB) if level >= peak - QUIET_UNDER_PEAK_DB)


def stop_window(silence_ms: int, *, gate: bool, levels: bool = True) -> int:
    """Feed the clip, then digital silence, as the listener does; the window whose feed said stop."""
    endpointer = Endpointer(EndpointConfig(silence_ms=silence_ms))
    pairs = [*zip(PROBABILITIES, LEVELS_DB), *[AFTER] * 400]
    for index, (probability, level) in enumerate(pairs):
        if gate and not endpointer.needs_vad(level):
            probability = 0.0  # the listener skips Silero for such a window and feeds 0
        if endpointer.feed(probability, level if levels else None) is not None:
            assert endpointer.stop_reason == "silence"
            return index
    raise AssertionError("no stop")


def test_the_clip_is_what_the_definition_is_measured_on():
    assert len(PROBABILITIES) == len(LEVELS_DB) == 93
    assert end_of_speech_window() == 87  # the fading "man": windows 84-87 are 10-19 dB under the peak


@pytest.mark.parametrize("silence_ms", [300, 700, 1000, 1500, 2500])
@pytest.mark.parametrize("gate", [True, False])
def test_the_stop_never_comes_before_silence_ms_after_the_end_of_speech(silence_ms, gate):
    heard_after = (stop_window(silence_ms, gate=gate) - end_of_speech_window()) * WINDOW_MS
    assert heard_after >= silence_ms
    assert heard_after == math.ceil(silence_ms / WINDOW_MS) * WINDOW_MS  # and no later: the tail is credited


def test_the_quiet_tail_is_why_the_stop_is_not_later():
    # Silero still scores window 88 as speech (0.856), at -42.4 dBFS, 20.7 dB under the peak: timed by
    # Silero alone the stop comes a window later; the level moves it to the definition's point, not past it.
    assert stop_window(1000, gate=False, levels=False) == stop_window(1000, gate=False) + 1
