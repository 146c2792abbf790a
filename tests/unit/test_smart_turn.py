"""The audio model of end_of_turn "smart" (speech/smart_turn.py) on real speech: the vendored Smart Turn
v3.2 ONNX, its whisper features computed with numpy, and the rule that joins it to the words
(speech/turns.py `judge`). Fixture: JFK's 11 s (tests/fixtures/turns/), whole (a finished turn) and cut
in two real word gaps mid-sentence, each followed by 300 ms of the recording's own noise floor (the pause
the listener lets the model hear: EndOfTurnConfig.pause_heard_ms)."""

from __future__ import annotations

import hashlib
import time
import wave
from pathlib import Path

import numpy as np
import pytest

from mcp_listen.speech import smart_turn
from mcp_listen.speech.ending import SMART
from mcp_listen.speech.smart_turn import AnswerBudget, VoiceAtPause, log_mel, shared_smart_turn
from mcp_listen.speech.turns import judge

ANSWERS_AT_ONCE, ANSWERS_PER_S, ASK_AFTER_MS = SMART.answers_saved, SMART.answers_per_s, SMART.ask_after_ms
PAUSE_HEARD_MS, VOICE_THRESHOLD = SMART.pause_heard_ms, SMART.voice_threshold

JFK = Path(__file__).resolve().parents[1] / "fixtures" / "turns" / "jfk.wav"
CUTS_S = {"ask not what your country can do for": 6.81, "ask what you can do for your": 9.67}
"""Mid-sentence cuts in JFK's speech, each in the middle of a real word gap (under 10 % of the peak)."""


def read(path) -> np.ndarray:
    with wave.open(str(path)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), np.int16)


def then_quiet(samples: np.ndarray, cut: int | None = None) -> np.ndarray:
    """The speech up to `cut`, then 300 ms of noise at the RMS of the recording's quietest 100 ms."""
    frames = samples[: len(samples) // 1600 * 1600].astype(np.float64).reshape(-1, 1600)
    rms = float(np.sqrt((frames**2).mean(axis=1)).min())
    noise = np.random.default_rng(1).normal(0, max(rms, 1.0), 4800).astype(np.int16)
    return np.concatenate([samples[:cut], noise])


def test_the_model_is_the_pinned_file():
    data = (smart_turn.model_folder() / smart_turn.MODEL_FILE).read_bytes()
    assert hashlib.sha256(data).hexdigest() == smart_turn.MODEL_SHA256
    assert (smart_turn.model_folder() / "LICENSE-smart-turn").read_text().startswith("BSD 2-Clause License")


def test_the_features_are_whisper_s_log_mel():
    """Pinned against the reference extractor (pipecat's vendored transformers recipe, same input:
    the last 8 s of JFK; equal to the last float32 bit when this was written)."""
    features = log_mel(read(JFK))
    assert features.shape == (80, 800) and features.dtype == np.float32
    assert features[0, 0] == pytest.approx(0.82086754, abs=1e-5)
    assert features[40, 700] == pytest.approx(0.5267038, abs=1e-5)
    assert features[79, 799] == pytest.approx(-0.10787901, abs=1e-5)
    assert features[10, 123] == pytest.approx(1.0873002, abs=1e-5)
    assert float(features.mean()) == pytest.approx(0.57772094, abs=1e-5)


def test_short_audio_is_padded_at_the_front_as_the_model_was_trained():
    samples = (np.sin(np.arange(16000) / 5) * 8000).astype(np.int16)
    features = log_mel(samples)
    assert features.shape == (80, 800)
    assert features[:, :650].std() < 1e-3  # the 7 s of padding before the 1 s of sound are all alike
    assert features[:, 700:].std() > 0.01


def least_answer(samples: np.ndarray) -> float:
    """What the listener's VoiceAtPause gets for `samples` (the speech, then 300 ms of pause): the least
    of the model's answers with each of PAUSE_HEARD_MS of the pause."""
    speech_end, model = len(samples) - max(PAUSE_HEARD_MS) * 16, shared_smart_turn()
    return min(model.probability(samples[: speech_end + ms * 16]) for ms in PAUSE_HEARD_MS)


def test_a_finished_sentence_sounds_finished():
    assert least_answer(then_quiet(read(JFK))) >= VOICE_THRESHOLD


@pytest.mark.parametrize("words", sorted(CUTS_S))
def test_a_sentence_cut_mid_way_does_not(words):
    samples = read(JFK)
    probability = least_answer(then_quiet(samples, round(CUTS_S[words] * 16000)))
    assert probability < VOICE_THRESHOLD
    assert not judge(f"{words}.", "en", probability).finished  # the words alone say as much here


def test_the_voice_decides_where_the_words_say_nothing():
    samples = read(JFK)
    held = judge(
        "Ask not what your country can do.", "en", shared_smart_turn().probability(then_quiet(samples, 7 * 16000))
    )
    ended = judge("Ask what you can do for your country.", "en", shared_smart_turn().probability(then_quiet(samples)))
    assert (held.finished, held.by) == (False, "words+voice")
    assert (ended.finished, ended.by) == (True, "words+voice")


def answered(voice: VoiceAtPause, pause: int) -> tuple[bool, float | None]:
    deadline = time.monotonic() + 60
    while not voice.answer(pause)[0] and time.monotonic() < deadline:
        time.sleep(0.01)
    return voice.answer(pause)


def test_the_listener_s_asker_answers_with_the_least_sure_of_its_answers_once_all_are_in():
    samples = then_quiet(read(JFK))
    speech_end = len(samples) - max(PAUSE_HEARD_MS) * 16
    answers = [shared_smart_turn().probability(samples[: speech_end + ms * 16]) for ms in PAUSE_HEARD_MS]
    assert len(set(answers)) == len(PAUSE_HEARD_MS)  # each end heard: no two answers alike (0.69-0.82 here)
    voice = VoiceAtPause(VOICE_THRESHOLD)
    assert voice.answer(speech_end) == (False, None)
    for ms in PAUSE_HEARD_MS[:-1]:
        voice.ask(speech_end, ms, lambda ms=ms: samples[: speech_end + ms * 16])
        voice.ask(speech_end, ms, lambda: pytest.fail("asked twice"))
    time.sleep(1)
    assert voice.answer(speech_end) == (False, None)  # the last part of the pause is not heard yet
    voice.ask(speech_end, PAUSE_HEARD_MS[-1], lambda: samples)
    done, probability = answered(voice, speech_end)
    assert done and probability == pytest.approx(min(answers), abs=1e-6)
    assert probability < answers[-1]  # not the answer with the whole pause alone
    assert voice.answer(speech_end + 1) == (False, None)  # another pause: not asked
    voice.ask(speech_end + 1, 0, lambda: samples[:speech_end])
    assert voice.answer(speech_end) == (False, None)  # a new pause forgets the one before


def test_one_answer_under_the_threshold_holds_the_pause_and_the_rest_are_not_worked_out():
    samples = then_quiet(read(JFK), round(CUTS_S["ask what you can do for your"] * 16000))
    speech_end = len(samples) - max(PAUSE_HEARD_MS) * 16
    voice = VoiceAtPause(VOICE_THRESHOLD)
    voice.ask(speech_end, 0, lambda: samples[:speech_end])
    done, probability = answered(voice, speech_end)  # in with one answer of four
    assert done and probability is not None and probability < VOICE_THRESHOLD
    for ms in PAUSE_HEARD_MS[1:]:
        voice.ask(speech_end, ms, lambda: pytest.fail("worked out after the pause was held"))
    assert voice.answer(speech_end) == (True, probability)


def test_choppy_audio_asks_the_model_at_most_its_budget_per_second_of_audio():
    """200 ms of speech, 200 ms of silence, for 60 s: every pause reaches ASK_AFTER_MS, and without a
    budget each asked two answers (~300, ~90 ms of CPU each: listening cost twice "silence"). The
    listener's asks, window by window, are counted against the budget."""
    budget = AnswerBudget()
    granted = 0
    window = 512
    for pause_start in range(int(0.2 * 16000), 60 * 16000, int(0.4 * 16000)):
        for recorded in range(pause_start, pause_start + int(0.2 * 16000), window):
            for ms in PAUSE_HEARD_MS:
                if pause_start + ms * 16 <= recorded and recorded - pause_start >= ASK_AFTER_MS * 16:
                    granted += budget.take(recorded)
                    break  # the listener's VoiceAtPause keeps one ask per ms; one try per window here
    assert granted <= 60 * ANSWERS_PER_S + ANSWERS_AT_ONCE, granted
    assert granted >= 60 * ANSWERS_PER_S - 1  # the budget is spent, not refused for good


def test_an_answer_over_the_budget_waits_until_the_audio_has_earned_it():
    samples = then_quiet(read(JFK))
    speech_end = len(samples) - max(PAUSE_HEARD_MS) * 16
    voice = VoiceAtPause(VOICE_THRESHOLD, AnswerBudget(per_s=1.0, saved=1))
    voice.ask(speech_end, 0, lambda: samples[:speech_end], now=speech_end)
    voice.ask(speech_end, 100, lambda: pytest.fail("over the budget"), now=speech_end + 1600)
    assert voice.budget.spent == 1
    voice.ask(speech_end, 100, lambda: samples[: speech_end + 1600], now=speech_end + 16000)  # a second later
    assert voice.budget.spent == 2
