"""The listening logic (mcp_listen/speech/listener.py) on numpy arrays, without a microphone.

Real Endpointer and PhraseCutter; the VAD is a fake that gives scripted probabilities, and the
phrase worker a fake that records what it is handed. Window i is filled with the value i, so
every piece of audio handed over says exactly which windows it came from.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from mcp_listen.audio.microphone import Recording
from mcp_listen.contract.limits import HOLDING_MESSAGE, PARTIAL_PREFIX, RESUMED_MESSAGE, partial_message
from mcp_listen.contract.limits import WINDOW_SAMPLES as WINDOW
from mcp_listen.speech.ending import NO_SIGNAL, SMART, TurnEnding, Verdict
from mcp_listen.speech.listener import TRAILING_KEEP_MS, Listener, Plan

ASK_AFTER_MS, PAUSE_HEARD_MS = SMART.ask_after_ms, SMART.pause_heard_ms
SPEECH, QUIET = 0.9, 0.05
PRE_ROLL = Listener.PRE_ROLL_WINDOWS
PLAIN = "silence"
"""The turn rule of the tests about phrases and progress: what they check does not depend on it, and
their fake worker has no guesses to judge (the smart cases below give one)."""


class ScriptedVAD:
    """Gives the next scripted probability per window (and a level that matches it)."""

    def __init__(self, probabilities: list[float]) -> None:
        self.probabilities = list(probabilities)
        self.heard = 0
        self.resets = 0

    def reset(self) -> None:
        self.resets += 1

    def hear(self, window, run=True) -> tuple[float, float]:
        probability = self.probabilities[self.heard] if self.heard < len(self.probabilities) else QUIET
        self.heard += 1
        return probability, -20.0 if probability >= 0.5 else -60.0


class FakeWorker:
    def __init__(self) -> None:
        self.submitted: list[np.ndarray] = []
        self.speculations: list[tuple[np.ndarray, tuple[int, int]]] = []
        self.detections: list[np.ndarray] = []
        self.so_far = ""

    def submit(self, audio) -> None:
        self.submitted.append(audio)

    def speculate(self, audio, key) -> None:
        self.speculations.append((audio, key))

    def detect(self, audio) -> None:
        self.detections.append(audio)


def script(*runs: tuple[float, int]) -> list[float]:
    return [p for p, n in runs for _ in range(n)]


def listen(probabilities, *, worker=None, silence_ms=1000, max_windows=2000, events=None):
    """Feed numbered windows until the listener says stop; return (listener, heard, reason)."""
    plan = Plan(max_ms=max_windows * 32, stop_on_silence=True, silence_ms=silence_ms, device=None, end_of_turn=PLAIN)
    vad = ScriptedVAD(probabilities)
    progress = (lambda done, total, message: events.append(message)) if events is not None else None
    on_speech = (lambda: events.append("on_speech")) if events is not None else None
    listener = Listener(plan, progress, None, worker, on_speech, vad=vad)
    windows, reason = [], None
    while reason is None and len(windows) < max_windows:
        windows.append(np.full(WINDOW, len(windows), dtype=np.int16))
        reason = listener.on_window(windows[-1])
    heard = listener.finished(Recording(np.concatenate(windows), reason or "ceiling"))
    assert vad.resets == 1
    return listener, heard, reason


def window_span(audio: np.ndarray) -> tuple[int, int]:
    """(first, end) window index of audio cut from numbered windows."""
    assert len(audio) % WINDOW == 0
    return int(audio[0]), int(audio[-1]) + 1


def test_speech_is_detected_and_the_pause_after_it_stops_the_recording():
    events: list[str] = []
    _, heard, reason = listen(script((QUIET, 40), (SPEECH, 20)), events=events)
    assert reason == "silence"
    assert heard.speech_detected is True
    assert heard.speech_end_frame == 60 * WINDOW
    assert heard.phrase_start_frame == (40 - PRE_ROLL) * WINDOW  # about 1 s of pre-roll
    assert events.count("on_speech") == 1
    assert events.index("on_speech") < events.index("Speech detected") < events.index("Silence detected")
    assert "Listening" in events


def test_silence_only_is_no_speech():
    _, heard, reason = listen([], silence_ms=1000, max_windows=400)
    assert reason == "no_speech_timeout"
    assert heard.speech_detected is False
    assert heard.speech_end_frame is None


def test_the_speculation_made_in_the_final_pause_is_what_remains_to_hear():
    worker = FakeWorker()
    _, heard, _ = listen(script((QUIET, 40), (SPEECH, 30)), worker=worker)
    assert worker.submitted == []  # under 2.5 s of speech: no phrase cut
    assert len(worker.speculations) == 1
    audio, key = worker.speculations[0]
    assert key == heard.remaining_key()
    assert np.array_equal(audio, heard.remaining_speech())
    assert key[0] == (40 - PRE_ROLL) * WINDOW


def test_a_long_phrase_is_cut_at_the_pause_and_handed_to_the_worker():
    worker = FakeWorker()
    probabilities = script((QUIET, 40), (SPEECH, 90), (QUIET, 8), (SPEECH, 20))
    _, heard, _ = listen(probabilities, worker=worker)
    assert len(worker.submitted) == 1
    first, end = window_span(worker.submitted[0])
    assert first == 40 - PRE_ROLL
    assert 130 < end <= 138  # inside the pause, never inside a word
    assert heard.phrase_start_frame == end * WINDOW
    assert worker.speculations[-1][1] == heard.remaining_key()
    assert heard.remaining_key()[0] == end * WINDOW


def test_a_short_pause_is_not_speculated_on():
    worker = FakeWorker()
    probabilities = script((QUIET, 40), (SPEECH, 20), (QUIET, 5), (SPEECH, 15))  # under 2.5 s: no cut
    _, heard, _ = listen(probabilities, worker=worker)
    assert worker.submitted == []
    assert heard.remaining_key() == ((40 - PRE_ROLL) * WINDOW, 80 * WINDOW + 4800)
    assert [key for _, key in worker.speculations] == [heard.remaining_key()]  # only the final pause


def test_a_guess_made_before_speech_resumed_is_not_the_remaining_audio():
    worker = FakeWorker()
    probabilities = script((QUIET, 40), (SPEECH, 20), (QUIET, 12), (SPEECH, 10))  # under 2.5 s: no cut
    _, heard, _ = listen(probabilities, worker=worker)
    assert worker.submitted == []
    keys = [key for _, key in worker.speculations]
    assert len(keys) == 2
    assert keys[0] != heard.remaining_key()
    assert keys[0] == ((40 - PRE_ROLL) * WINDOW, 60 * WINDOW + 4800)  # it ended in the pause
    assert keys[1] == heard.remaining_key()


def test_the_language_is_learned_from_the_speech_so_far_at_two_and_four_seconds():
    worker = FakeWorker()
    lead, speech = 40, 200  # 6.4 s of speech
    listener, heard, reason = listen(script((QUIET, lead), (SPEECH, speech), (QUIET, 60)), worker=worker)
    onset = listener.endpointer.speech_started_window
    assert [window_span(audio) for audio in worker.detections] == [
        (onset - PRE_ROLL, onset + 62),  # 62 windows of speech: 2 s
        (onset - PRE_ROLL, onset + 125),
    ]


def test_a_short_utterance_has_its_language_learned_only_once():
    worker = FakeWorker()
    listen(script((QUIET, 40), (SPEECH, 80), (QUIET, 60)), worker=worker)  # 2.6 s of speech
    assert len(worker.detections) == 1


def test_the_words_so_far_are_reported_once_each_time_they_change():
    worker, events = FakeWorker(), []
    words = {50: "I went", 60: "I went to the store", 70: "I went to the store"}

    class Telling(ScriptedVAD):
        def hear(self, window, run=True):
            worker.so_far = words.get(self.heard, worker.so_far)
            return super().hear(window, run)

    plan = Plan(max_ms=2000 * 32, stop_on_silence=True, silence_ms=1000, device=None, end_of_turn=PLAIN)
    listener = Listener(
        plan, lambda d, t, m: events.append(m), None, worker, vad=Telling(script((QUIET, 40), (SPEECH, 40)))
    )
    reason = None
    while reason is None:
        reason = listener.on_window(np.zeros(WINDOW, dtype=np.int16))
    partials = [m for m in events if m.startswith(PARTIAL_PREFIX)]
    assert partials == [partial_message("I went"), partial_message("I went to the store")]
    assert events.index(partials[0]) > events.index("Speech detected")


def test_ten_minutes_of_dictation_keep_no_more_audio_than_one_phrase_and_every_sample_is_handed_over():
    """Phrases of about 3 s with short pauses for 10 minutes: each is handed over as it ends, the
    audio kept stays within the phrase in progress and the last few seconds, and the phrases
    cover the speech without a gap or an overlap."""
    worker = FakeWorker()
    minutes = 10 * 60 * 1000 // 32
    probabilities = script((QUIET, 40), *[(SPEECH, 90), (QUIET, 12)] * (minutes // 102))
    plan = Plan(max_ms=minutes * 32, stop_on_silence=True, silence_ms=1000, device=None, end_of_turn=PLAIN)
    listener = Listener(plan, None, None, worker, vad=ScriptedVAD(probabilities))
    most_kept = 0
    for i in range(len(probabilities)):
        listener.on_window(np.full(WINDOW, i % 30000, dtype=np.int16))
        most_kept = max(most_kept, listener.windows * WINDOW - listener.kept_from_frame)
    assert len(worker.submitted) > 150
    assert most_kept <= (Listener.KEPT_WINDOWS + 1) * WINDOW
    spans = [window_span(audio) for audio in worker.submitted]
    assert all(end == next_first for (_, end), (next_first, _) in zip(spans, spans[1:]))
    assert spans[0][0] == 40 - PRE_ROLL


def test_a_tape_that_lets_go_keeps_counting_and_says_where_its_samples_start():
    from mcp_listen.audio.microphone import Tape

    tape = Tape(100 * WINDOW)
    for i in range(10):
        tape.add(np.full(WINDOW, i, dtype=np.int16))
        tape.forget_before((i - 2) * WINDOW + 5)  # mid-window: that window stays
    recording = tape.recording("silence")
    assert recording.frames == 10 * WINDOW and recording.start_frame == 7 * WINDOW
    assert [int(v) for v in recording.samples[::WINDOW]] == [7, 8, 9]


class Guessing(FakeWorker):
    """A worker whose guess at each pause is `words` (None: still transcribing)."""

    def __init__(self, words) -> None:
        super().__init__()
        self.words, self.language, self.asked = words, "en", []

    def words_at_pause(self, key):
        self.asked.append(key)
        return self.words


class Voice:
    """The audio model's answer at each pause, at once: NaN (no model) leaves the words to decide."""

    def __init__(self, probability=float("nan")) -> None:
        self.probability = probability

    def ask(self, pause, ms, samples, now=None) -> None:
        pass

    def answer(self, pause):
        return True, self.probability

    def early(self, pause, count):
        return self.probability


def stop_after_speech_ms(
    words,
    end_of_turn,
    silence_ms=1000,
    max_pause_ms=3000,
    max_ms=20000,
    progress=None,
    voice=None,
    language="en",
    end_words=(),
):
    """Windows of quiet after 2 s of speech until the stop, in ms (and the worker, and the end_reason)."""
    worker = Guessing(words)
    worker.language = language
    plan = Plan(
        max_ms=max_ms, stop_on_silence=True, silence_ms=silence_ms, device=None, end_of_turn=end_of_turn,
        max_pause_ms=max_pause_ms, end_words=end_words,
    )  # fmt: skip
    vad = ScriptedVAD(script((QUIET, 40), (SPEECH, 62)))
    listener = Listener(plan, progress, None, worker, vad=vad, voice=voice or Voice())
    reason, windows = None, []
    while reason is None:
        windows.append(np.full(WINDOW, listener.windows, dtype=np.int16))
        reason = listener.on_window(windows[-1])
        reason = reason or ("ceiling" if listener.elapsed_ms >= max_ms else None)
    heard = listener.finished(Recording(np.concatenate(windows), reason))
    return (listener.windows - 102) * 32, worker, heard.end_reason


@pytest.mark.parametrize("words", ["I went to the store to buy some bread and.", "So I was thinking of", None])
def test_smart_end_of_turn_holds_an_unfinished_pause_until_max_pause_ms(words):
    smart, worker, why = stop_after_speech_ms(words, "smart")
    plain, _, plain_why = stop_after_speech_ms(words, "silence")
    assert plain <= 1100 and 2900 <= smart <= 3100, (plain, smart)
    assert (why, plain_why) == ("max_pause", "silence")
    assert worker.asked and all(key == worker.speculations[-1][1] for key in worker.asked if key is not None)
    shorter, _, _ = stop_after_speech_ms(words, "smart", max_pause_ms=1500)
    assert 1400 <= shorter <= 1600, shorter


def test_smart_end_of_turn_stops_as_silence_does_after_a_finished_sentence():
    smart, _, why = stop_after_speech_ms("I went to the store.", "smart")
    plain, _, plain_why = stop_after_speech_ms("I went to the store.", "silence")
    assert smart == plain and (why, plain_why) == ("words", "silence")


@pytest.mark.parametrize("end_of_turn", ["silence", "smart"])
@pytest.mark.parametrize(
    ("words", "ends"),
    [
        ("Fix the bug in the parser, over.", True),
        ("Fix the bug in the parser. Send it!", True),
        ("So I was thinking of, over", True),  # the end word ends even words that trail off before it
        ("Game over is a good title.", False),  # mid-sentence: not an end
        ("Fix the bug in the parser.", False),
    ],
)
def test_an_end_word_said_last_ends_the_turn_at_once_in_either_mode(end_of_turn, words, ends):
    silence_ms = 2000
    heard, _, why = stop_after_speech_ms(
        words, end_of_turn, silence_ms=silence_ms, voice=Voice(0.6), end_words=("over", "send it")
    )
    if ends:
        assert heard <= TRAILING_KEEP_MS + 64 and why == "end_word", (heard, why)
    else:
        assert heard >= silence_ms and why != "end_word", (heard, why)


@pytest.mark.parametrize(
    ("words", "probability", "language", "at_once"),
    [
        ("I went to the store.", 0.9, "en", True),
        ("Where is the station?", 0.75, "en", True),
        ("I went to the store.", 0.6, "en", False),  # the voice finished, not surely: silence_ms
        ("I went to the store", 0.9, "en", False),  # no full stop: whisper heard no sentence end
        ("I went to the.", 0.9, "en", False),  # a trailing word holds, whatever the voice says
        ("Ik ging naar de winkel.", 0.9, "xx", False),  # a language whose words the rule does not know
    ],
)
def test_a_finished_turn_ends_at_once_only_when_the_words_and_the_voice_agree_surely(
    words, probability, language, at_once
):
    silence, _, _ = stop_after_speech_ms(words, "silence")
    smart, _, why = stop_after_speech_ms(words, "smart", voice=Voice(probability), language=language)
    if at_once:
        # as soon as the guess of the words is in: the word's tail recorded (TRAILING_KEEP_MS), not silence_ms
        assert smart <= TRAILING_KEEP_MS + 64 and why == "words+voice", (smart, why)
    else:
        assert smart >= silence, (smart, silence, why)  # silence_ms at least: ended there, or held longer


class Listening(Voice):
    """An audio model that keeps what it was asked to hear: (pause, ms, the samples, the window it came in)."""

    def __init__(self, probability=float("nan")) -> None:
        super().__init__(probability)
        self.heard: list = []
        self.windows = 0

    def ask(self, pause, ms, samples, now=None) -> None:
        if (pause, ms) not in [(p, m) for p, m, _, _ in self.heard]:
            self.heard.append((pause, ms, samples(), self.windows))  # as VoiceAtPause: once per pause and ms


class LateGuess(Guessing):
    """A guess of `words` that is in from window `ready` on (whisper still transcribing before it)."""

    def __init__(self, words, ready: int) -> None:
        super().__init__(words)
        self.ready, self.window = ready, 0

    def words_at_pause(self, key):
        self.asked.append(key)
        return self.words if self.window >= self.ready else None


@pytest.mark.parametrize("guess_in_ms", [400, 900])
def test_the_audio_model_hears_the_speech_with_each_part_of_the_pause_as_soon_as_it_is_recorded(guess_in_ms):
    # speech/smart_turn.py takes its least sure answer with 0-300 ms of the pause. The first at_once_answers
    # are asked in the window that records them (none before ASK_AFTER_MS of pause); the later ones once
    # whisper's guess is in too, so they do not slow it. The recording is under 8 s: heard whole.
    voice = Listening()
    plan = Plan(max_ms=20000, stop_on_silence=True, silence_ms=1000, device=None, end_of_turn="smart")
    vad = ScriptedVAD(script((QUIET, 40), (SPEECH, 62)))
    speech_end = 102 * WINDOW
    guess = LateGuess("So I was", ready=-(-(speech_end + guess_in_ms * 16) // WINDOW))
    listener = Listener(plan, None, None, guess, vad=vad, voice=voice)
    while listener.on_window(np.full(WINDOW, listener.windows, dtype=np.int16)) is None:
        voice.windows = guess.window = listener.windows
    last = [(ms, samples, window) for pause, ms, samples, window in voice.heard if pause == speech_end]
    assert [ms for ms, _, _ in last] == list(PAUSE_HEARD_MS)
    for i, (ms, samples, window) in enumerate(last):
        assert len(samples) == speech_end + ms * 16
        assert int(samples[-1]) == (speech_end + ms * 16 - 1) // WINDOW  # the recording's own samples
        asked_from = max(ms, ASK_AFTER_MS) if i < SMART.at_once_answers else max(ms, guess_in_ms)
        recorded_in = -(-(speech_end + asked_from * 16) // WINDOW) - 1  # the window that records it
        assert window in (recorded_in, recorded_in + 1), (ms, window, recorded_in)  # (+1: the pause counts windows)


def test_a_held_pause_never_passes_the_recording_s_ceiling_and_then_ends_by_duration():
    after, _, why = stop_after_speech_ms("So I was thinking of", "smart", max_ms=4000)
    assert why == "duration" and after < 3000, after


@pytest.mark.parametrize("end_of_turn", ["silence", "smart"])
def test_a_fixed_length_never_stops_on_silence_and_ends_by_duration(end_of_turn):
    # Speech, then quiet: with stop_on_silence false the phrase worker still cuts and guesses, but the
    # recording lasts its whole duration_ms (it once stopped 1 s after the speech).
    plan = Plan(max_ms=6000, stop_on_silence=False, silence_ms=1000, device=None, end_of_turn=end_of_turn)
    listener = Listener(plan, None, None, Guessing("So I was"), vad=ScriptedVAD(script((QUIET, 40), (SPEECH, 62))))
    windows = []
    while listener.elapsed_ms < 6000:
        windows.append(np.full(WINDOW, listener.windows, dtype=np.int16))
        assert listener.on_window(windows[-1]) is None, listener.elapsed_ms
    assert listener.finished(Recording(np.concatenate(windows), "ceiling")).end_reason == "duration"


def test_the_holding_message_comes_once_per_held_pause_and_only_after_silence_ms():
    seen: list[tuple[int, str]] = []
    stop_after_speech_ms("So I was thinking of", "smart", progress=lambda done, total, m: seen.append((done, m)))
    holds = [done for done, message in seen if message == HOLDING_MESSAGE]
    assert len(holds) == 1 and holds[0] >= (102 * 32 + 1000) - 32 * 13, seen  # the decay credit, at most 12 windows
    finished = [m for _, m in seen if m.startswith("Recording finished")]
    assert finished == [finished[0]] and finished[0].endswith("silence; max_pause by words)"), finished
    seen.clear()
    stop_after_speech_ms("I went to the store.", "smart", progress=lambda done, total, m: seen.append((done, m)))
    assert HOLDING_MESSAGE not in [m for _, m in seen]


class Late(Guessing):
    """A worker whose guess comes in only after `late` asks (a busy machine: the model still loading)."""

    def __init__(self, words, late) -> None:
        super().__init__(words)
        self.late = late

    def words_at_pause(self, key):
        self.asked.append(key)
        return self.words if len(self.asked) > self.late else None


def late_verdict(late: int) -> list[str]:
    """The progress messages of a smart turn whose words are judged unfinished only after `late` asks."""
    seen: list[str] = []
    plan = Plan(max_ms=20000, stop_on_silence=True, silence_ms=1000, device=None, end_of_turn="smart",
                max_pause_ms=3000)  # fmt: skip
    progress = lambda done, total, message: seen.append(message)  # noqa: E731
    vad = ScriptedVAD(script((QUIET, 40), (SPEECH, 62)))
    listener = Listener(plan, progress, None, Late("So I was thinking of", late), vad=vad, voice=Voice())
    reason, windows = None, []
    while reason is None:
        windows.append(np.full(WINDOW, listener.windows, dtype=np.int16))
        reason = listener.on_window(windows[-1])
    assert listener.finished(Recording(np.concatenate(windows), reason)).end_reason == "max_pause"
    return seen


def test_an_unfinished_verdict_that_comes_in_late_is_still_said_before_the_turn_ends():
    """However late the words are judged (up to the very window max_pause_ms runs out in), the holding
    message comes once, before "Recording finished", whenever the words decided; never when they did not."""
    by_words = 0
    for late in range(70, 100):
        seen = late_verdict(late)
        finished = next(m for m in seen if m.startswith("Recording finished"))
        decided = finished.endswith("max_pause by words)")
        by_words += decided
        assert seen.count(HOLDING_MESSAGE) == decided, (late, seen)
        assert not decided or seen.index(HOLDING_MESSAGE) < seen.index(finished), (late, seen)
    assert 0 < by_words < 30, by_words  # some verdicts came in time, some too late


def test_speech_after_a_held_pause_says_so_and_the_next_pause_is_held_again():
    seen: list[str] = []
    plan = Plan(max_ms=20000, stop_on_silence=True, silence_ms=1000, device=None, end_of_turn="smart")
    probabilities = script((QUIET, 40), (SPEECH, 40), (QUIET, 50), (SPEECH, 30))
    progress = lambda done, total, message: seen.append(message)  # noqa: E731
    listener = Listener(plan, progress, None, Guessing("and then the"), vad=ScriptedVAD(probabilities))
    reason = None
    while reason is None:
        reason = listener.on_window(np.full(WINDOW, listener.windows, dtype=np.int16))
    turns = [m for m in seen if m in (HOLDING_MESSAGE, RESUMED_MESSAGE)]
    assert turns == [HOLDING_MESSAGE, RESUMED_MESSAGE, HOLDING_MESSAGE], seen


def test_max_pause_shorter_than_silence_is_refused_when_asked_and_raised_when_defaulted():
    from mcp_listen.contract.arguments import TranscribeArgs, parse_args
    from mcp_listen.contract.limits import Defaults
    from mcp_listen.errors import InvalidArgument

    args = parse_args(TranscribeArgs, {"silence_ms": 1500, "max_pause_ms": 1200, "end_of_turn": "smart"})
    with pytest.raises(InvalidArgument, match=r"max_pause_ms: expected at least silence_ms \(1500\).*got 1200"):
        Plan.from_args(args, Defaults(), stop_default=True)
    args = parse_args(TranscribeArgs, {"max_pause_ms": 1200})
    with pytest.raises(InvalidArgument, match=r"at least silence_ms \(2000\)"):  # the user's default silence
        Plan.from_args(args, Defaults(silence_ms=2000), stop_default=True)
    plan = Plan.from_args(parse_args(TranscribeArgs, {"silence_ms": 5000}), Defaults(), stop_default=True)
    assert plan.max_pause_ms == 5000  # the default 3000 would be shorter: nothing is held past silence_ms
    plan = Plan.from_args(parse_args(TranscribeArgs, {}), Defaults(max_pause_ms=4200), stop_default=True)
    assert plan.max_pause_ms == 4200


def test_a_verdict_without_a_signal_for_the_language_ends_the_turn_as_silence_does():
    ending = TurnEnding("smart", 1000, 3000)
    assert ending.silence_for(None) == 3000 and ending.reason("silence") == "max_pause"
    assert not ending.holding(1500)  # held while the words are still being judged, but not said to be
    assert ending.silence_for(Verdict(False, "words")) == 3000
    assert ending.silence_for(Verdict(True, "words+voice")) == 1000 and ending.reason("silence") == "words+voice"
    assert ending.silence_for(Verdict(True, "words+voice", at_once=True)) == SMART.ask_after_ms and ending.at_once
    assert ending.reason("silence") == "words+voice" and ending.describe("silence") == "silence; words+voice at once"
    assert ending.silence_for(Verdict(False, NO_SIGNAL)) == 1000 and ending.reason("silence") == "silence"
    assert not ending.holding(5000)
    assert ending.reason("ceiling") == "duration" and ending.reason("no_speech_timeout") is None
    plain = TurnEnding("silence", 1000, 3000)
    assert plain.silence_for(Verdict(False, "words")) == 1000 and plain.reason("silence") == "silence"


@pytest.mark.parametrize(
    ("words", "fields"),
    [
        ("So I was thinking of", "end_reason=max_pause end_signal=words words=unfinished voice=nan"),
        ("I went to the store.", "end_reason=words end_signal=None words=open voice=nan"),
    ],
)
def test_the_end_of_a_smart_turn_is_logged_once_at_debug_with_its_signals_and_never_the_words(caplog, words, fields):
    """The TurnEnd record: the signal that decided, the class of the last word (not the words), the voice's
    answer (NaN: no model here), the pause when it ended and the target then in force."""
    with caplog.at_level(logging.DEBUG, logger="mcp_listen.speech"):
        stop_after_speech_ms(words, "smart")
    ends = [r for r in caplog.records if r.getMessage().startswith("turn end:")]
    assert len(ends) == 1 and ends[0].levelno == logging.DEBUG, caplog.records
    message = ends[0].getMessage()
    assert f"stopped_by=silence {fields}" in message, message
    target = 3000 if "max_pause" in fields else 1000
    pause = int(message.split("pause_ms=")[1].split()[0])
    assert message.endswith(f"target_ms={target}") and target <= pause < target + 64, message
    assert not any(word in message for word in ("thinking", "store", "went")), message
