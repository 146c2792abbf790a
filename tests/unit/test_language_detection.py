"""Reading whisper's language probability from its log (whisper/transcriber.py: detection goes through
whisper_full, which reports the probability only in its log line)."""

from __future__ import annotations

from mcp_listen.whisper.transcriber import detected_probability


def test_the_probability_comes_from_whispers_detection_line():
    lines = [
        (2, "whisper_full_with_state: something else (p = 0.5)\n"),
        (2, "whisper_full_with_state: auto-detected language: es (p = 0.990283)\n"),
    ]
    assert detected_probability(lines) == 0.990283


def test_the_last_detection_counts():
    lines = [
        (2, "whisper_full_with_state: auto-detected language: en (p = 0.517921)\n"),
        (2, "whisper_full_with_state: auto-detected language: de (p = 0.870000)\n"),
    ]
    assert detected_probability(lines) == 0.87


def test_no_detection_line_is_unsure():
    assert detected_probability([]) == 0.0
    assert detected_probability([(4, "whisper_full_with_state: failed to encode\n")]) == 0.0
