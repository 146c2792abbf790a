"""Phrase cutting and the background phrase worker, with plain data (no audio, no whisper)."""

from __future__ import annotations

import threading
import time

import pytest

from mcp_listen.speech.phrases import PhraseCutter, PhraseWorker, join_phrases

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


def test_a_long_phrase_ends_at_a_breath():
    """Past long_phrase_ms a short gap ends the phrase, so the last one stays short enough for
    whisper to finish within the silence window; before that, the same gap does not."""
    cutter = PhraseCutter(pause_ms=256, lead_ms=96, min_phrase_ms=2560, long_phrase_ms=4000, long_pause_ms=96)
    breath = [QUIET] * 3
    probabilities = [LOUD] * 100 + breath + [LOUD] * 30 + breath + [LOUD] * 40
    assert feed(cutter, probabilities) == [(0, 136)]  # 100 windows (3.2 s): no cut; 133 (4.3 s): cut
    assert cutter.start_window == 136


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


def worker_of(fn, language="en"):
    """A PhraseWorker around a plain text function: (audio) -> text, language unchanged."""
    return PhraseWorker(lambda audio, prompt, lang, abort: (fn(audio), lang), language)


def test_worker_keeps_order_and_joins_the_last_phrase():
    release = threading.Event()

    def slow_upper(audio):
        if audio == "first":
            release.wait(5)
        return audio.upper()

    worker = worker_of(slow_upper)
    worker.submit("first")
    worker.submit("second")
    release.set()
    assert worker.finish("last") == "FIRST SECOND LAST"


def test_worker_reraises_a_failure_on_the_caller_thread():
    def fail(audio):
        raise RuntimeError(f"cannot transcribe {audio}")

    worker = worker_of(fail)
    worker.submit("a")
    with pytest.raises(RuntimeError, match="cannot transcribe"):
        worker.finish(None)


def test_empty_texts_are_skipped():
    worker = worker_of(lambda audio: "  " if audio == "blank" else audio)
    worker.submit("blank")
    assert worker.finish("words") == "words"


def test_each_phrase_is_conditioned_on_the_text_before_it():
    prompts = []

    def transcribe(audio, prompt, lang, abort):
        prompts.append(prompt)
        return audio, lang

    worker = PhraseWorker(transcribe, "en")
    worker.submit("And so my fellow Americans.")
    worker.submit("ask not what your country can do for you.")
    text = worker.finish("ask what you can do for your country.")
    assert prompts == [
        "",
        "And so my fellow Americans",
        "And so my fellow Americans ask not what your country can do for you",
    ]
    assert (
        text
        == "And so my fellow Americans ask not what your country can do for you ask what you can do for your country."
    )


def test_auto_language_is_detected_once_and_kept():
    asked = []

    def transcribe(audio, prompt, lang, abort):
        asked.append(lang)
        return audio, ("pt" if lang == "auto" else lang)

    worker = PhraseWorker(transcribe, "auto")
    worker.submit("um")
    worker.submit("dois")
    assert worker.finish("três") == "um dois três"
    assert asked == ["auto", "pt", "pt"] and worker.language == "pt"


def test_a_speculation_that_matches_the_end_is_adopted_without_transcribing_again():
    calls = []

    def transcribe(audio, prompt, lang, abort):
        calls.append(audio)
        return audio.upper(), lang

    worker = PhraseWorker(transcribe, "en")
    worker.submit("first")
    worker.speculate("second", (100, 200))
    time.sleep(0.2)
    assert worker.finish("second", (100, 200)) == "FIRST SECOND"
    assert calls == ["first", "second"]


def test_a_speculation_overtaken_by_more_speech_is_dropped_and_aborted():
    started, aborted = threading.Event(), []

    def transcribe(audio, prompt, lang, abort):
        if audio == "guess":
            started.set()
            abort.wait(5)
            aborted.append(abort.is_set())
            raise RuntimeError("aborted mid-way")  # what a cancelled whisper run raises
        return audio, lang

    worker = PhraseWorker(transcribe, "en")
    worker.speculate("guess", (0, 100))
    assert started.wait(5)
    worker.speculate("guess and more", (0, 300))
    assert worker.finish("the whole phrase", (0, 400)) == "the whole phrase"
    assert aborted == [True]


@pytest.mark.parametrize(
    "pieces,joined",
    [
        (["we desire and crease.", "that thereby beauty's rose"], "we desire and crease that thereby beauty's rose"),
        (["It rained.", "Then it stopped."], "It rained. Then it stopped."),
        (["Is it?", "yes"], "Is it? yes"),
        (["for the...", "children"], "for the children"),
        (["Wait…", "and then"], "Wait and then"),
        (["It ended...", "Then more"], "It ended... Then more"),
        (["", "  words "], "words"),
    ],
)
def test_phrases_join_without_invented_sentence_breaks(pieces, joined):
    assert join_phrases(pieces) == joined


def test_a_language_detected_early_and_surely_is_used_by_every_phrase():
    asked, detected = [], []

    def transcribe(audio, prompt, lang, abort):
        asked.append(lang)
        return audio, lang

    def detect(audio, abort):
        detected.append(audio)
        return ("de", 0.95) if audio == "guten morgen" else ("en", 0.99)

    worker = PhraseWorker(transcribe, "auto", detect)
    worker.detect("guten morgen")
    worker.detect("guten morgen ich")  # already known: never runs
    worker.submit("guten morgen ich")
    assert worker.finish("möchte") == "guten morgen ich möchte"
    assert detected == ["guten morgen"] and asked == ["de", "de"] and worker.language == "de"


@pytest.mark.parametrize(
    "guesses",
    [
        pytest.param([("te", 0.66)], id="unsure"),
        # Measured (base, a Spanish voice): "it" 0.90 at 2 s of speech, "it" 0.59 at 4 s; the
        # first guess alone would have made every phrase Italian.
        pytest.param([("it", 0.90), ("it", 0.59)], id="confident-then-doubted"),
    ],
)
def test_an_early_guess_not_confirmed_leaves_the_language_to_the_first_phrase(guesses):
    asked, answers = [], iter(guesses)

    def transcribe(audio, prompt, lang, abort):
        asked.append(lang)
        return audio, ("es" if lang == "auto" else lang)

    worker = PhraseWorker(transcribe, "auto", lambda audio, abort: next(answers))
    for words in ("intentaré", "intentaré establecer")[: len(guesses)]:
        worker.detect(words)
    worker.submit("intentaré establecer")
    assert worker.finish("una conexión") == "intentaré establecer una conexión"
    assert asked == ["auto", "es"] and worker.language == "es"


def test_a_guess_short_of_sure_at_once_is_kept_when_the_next_detection_agrees():
    asked, guesses = [], iter([("es", 0.84), ("es", 0.81)])

    def transcribe(audio, prompt, lang, abort):
        asked.append(lang)
        return audio, lang

    worker = PhraseWorker(transcribe, "auto", lambda audio, abort: next(guesses))
    worker.detect("todos los")
    worker.detect("todos los representantes")
    worker.submit("todos los representantes")
    assert worker.finish("de la casa") == "todos los representantes de la casa"
    assert asked == ["es", "es"] and worker.language == "es"


def test_a_fixed_language_is_never_detected():
    worker = PhraseWorker(lambda audio, prompt, lang, abort: (audio, lang), "fr", lambda a, b: pytest.fail("detected"))
    worker.detect("bonjour")
    assert worker.finish("bonjour") == "bonjour" and worker.language == "fr"


def wait_for(condition, seconds=5.0):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_the_words_so_far_grow_with_each_phrase_and_guess():
    worker = worker_of(str.upper)
    assert worker.so_far == ""
    worker.submit("and so my fellow americans")
    assert wait_for(lambda: worker.so_far == "AND SO MY FELLOW AMERICANS")
    worker.speculate("ask not", (10, 20))
    assert wait_for(lambda: worker.so_far == "AND SO MY FELLOW AMERICANS ASK NOT")
    assert worker.finish("ask not", (10, 20)) == "AND SO MY FELLOW AMERICANS ASK NOT"


def test_an_aborted_guess_never_shows_as_words_so_far():
    started = threading.Event()

    def transcribe(audio, prompt, lang, abort):
        if audio == "guess":
            started.set()
            abort.wait(5)
            return "GUESSED", lang  # a whisper run that finished as it was aborted
        return audio, lang

    worker = PhraseWorker(transcribe, "en")
    worker.speculate("guess", (0, 100))
    assert started.wait(5)
    worker.retract()
    worker.submit("spoken")
    assert worker.finish(None) == "spoken"
    assert worker.so_far == "spoken"
