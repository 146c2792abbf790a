"""Phrase cutting and the background phrase worker, with plain data (no audio, no whisper)."""

from __future__ import annotations

import threading

import pytest

from mcp_listen.phrases import PhraseCutter, PhraseWorker

LOUD, QUIET, SOFT = 0.9, 0.05, 0.4


def feed(cutter: PhraseCutter, probabilities, speech_from: int = 0):
    cuts = []
    for i, p in enumerate(probabilities):
        cut = cutter.update(i, i >= speech_from, p)
        if cut:
            cuts.append(cut)
    return cuts


def test_cuts_inside_the_pause_once_the_phrase_is_long_enough():
    cutter = PhraseCutter(pause_ms=256, lead_ms=96, min_phrase_ms=2560)  # 8 / 3 / 80 windows
    probabilities = [LOUD] * 90 + [QUIET] * 20 + [LOUD] * 30
    assert feed(cutter, probabilities) == [(0, 93)]  # pause starts at 90, cut 3 windows in
    assert cutter.start_window == 93


def test_no_cut_for_a_short_phrase_or_a_short_pause():
    cutter = PhraseCutter(pause_ms=256, min_phrase_ms=2560)
    assert feed(cutter, [LOUD] * 40 + [QUIET] * 20 + [LOUD] * 10) == []  # phrase too short
    cutter = PhraseCutter(pause_ms=256, min_phrase_ms=640)
    assert feed(cutter, [LOUD] * 40 + [QUIET] * 7 + [LOUD] * 40) == []  # pause too short


def test_soft_windows_are_never_a_pause():
    cutter = PhraseCutter(pause_ms=256, min_phrase_ms=640)
    assert feed(cutter, [LOUD] * 40 + [SOFT] * 30 + [LOUD] * 10) == []


def test_one_cut_per_pause_and_several_phrases():
    cutter = PhraseCutter(pause_ms=256, lead_ms=96, min_phrase_ms=640)
    probabilities = ([LOUD] * 30 + [QUIET] * 40) * 3
    assert feed(cutter, probabilities) == [(0, 33), (33, 103), (103, 173)]


def test_nothing_is_cut_before_speech_is_confirmed():
    cutter = PhraseCutter(pause_ms=256, min_phrase_ms=320)
    assert feed(cutter, [LOUD] * 20 + [QUIET] * 20, speech_from=100) == []


def test_worker_keeps_order_and_joins_the_last_phrase():
    release = threading.Event()

    def slow_upper(audio):
        if audio == "first":
            release.wait(5)
        return audio.upper()

    worker = PhraseWorker(slow_upper)
    worker.submit("first")
    worker.submit("second")
    release.set()
    assert worker.finish("last") == "FIRST SECOND LAST"


def test_worker_reraises_a_failure_on_the_caller_thread():
    def fail(audio):
        raise RuntimeError(f"cannot transcribe {audio}")

    worker = PhraseWorker(fail)
    worker.submit("a")
    with pytest.raises(RuntimeError, match="cannot transcribe"):
        worker.finish(None)


def test_empty_texts_are_skipped():
    worker = PhraseWorker(lambda audio: "  " if audio == "blank" else audio)
    worker.submit("blank")
    assert worker.finish("words") == "words"
