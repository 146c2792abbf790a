"""Decisions are data: barge-in's thresholds are a validated config passed in, the echo path's phases are
named and logged as they change, a cut-in is a CutIn record and the end of the user's turn a TurnEnd record,
each logged once at DEBUG as key=value fields and never with the user's words; on the wire, end_signal joins
end_reason and `spoken` says who cut a speech short and when the user cut in."""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
from collections import deque
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from mcp_listen.contract import limits
from mcp_listen.contract.results import Spoken, Transcribed, wire
from mcp_listen.duplex.config import DEFAULT, BargeInConfig, DelayConfig, EchoModelConfig
from mcp_listen.duplex.cut_in import CutIn, Rule, cut_in
from mcp_listen.duplex.doubletalk import Explained
from mcp_listen.duplex.path import Phase

# ---------------------------------------------------------------- the configs


@pytest.mark.parametrize(
    ("make", "field", "shown"),
    [
        (lambda: BargeInConfig(onset_windows=0), "BargeInConfig.onset_windows", "an integer >= 1; got 0"),
        (lambda: BargeInConfig(strict_probability=1.5), "BargeInConfig.strict_probability", "(0, 1]; got 1.5"),
        (lambda: BargeInConfig(settle_s=float("nan")), "BargeInConfig.settle_s", "> 0; got nan"),
        (lambda: BargeInConfig(rise_db=True), "BargeInConfig.rise_db", "a finite number; got True"),
        (lambda: DelayConfig(max_lag_s=-1), "DelayConfig.max_lag_s", "> 0; got -1"),
        (lambda: EchoModelConfig(step=2.5), "EchoModelConfig.step", "(0, 2), the stable range; got 2.5"),
        (lambda: EchoModelConfig(band_hz=(4000, 200)), "EchoModelConfig.band_hz", "got (4000, 200)"),
    ],
)
def test_a_threshold_out_of_its_range_is_refused_naming_the_field_the_range_and_the_value(make, field, shown):
    with pytest.raises(ValueError, match=re.escape(field) + ".*" + re.escape(shown)):
        make()


def test_the_config_is_frozen_and_a_changed_copy_is_how_a_threshold_is_tried():
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT.rise_db = 6.0  # type: ignore[misc]
    tried = dataclasses.replace(DEFAULT, rise_db=6.0, model=EchoModelConfig(step=1.5))
    assert (tried.rise_db, tried.model.step, DEFAULT.rise_db, DEFAULT.model.step) == (6.0, 1.5, 10.0, 0.7)


# ---------------------------------------------------------------- the cut-in rule


def _measures(*windows: tuple[float, float]) -> deque[Explained | None]:
    """(unexplained dB, level dB) of the last windows over a learnt echo-alone baseline of -25 dB."""
    return deque(Explained(unexplained, -25.0, level, learnt=True) for unexplained, level in windows)


def test_the_cut_in_rule_returns_which_rule_fired_in_which_phase_and_the_numbers_it_judged():
    measures = _measures((-5.0, -2.0), (-4.0, -1.0))
    cut = cut_in(DEFAULT, Phase.LEARNT, deque([0.9, 0.7]), measures, None)
    assert cut == CutIn(Rule.DOUBLE_TALK, Phase.LEARNT, pytest.approx(0.8), 2, 20.5, -2.0, True)
    alone = cut_in(DEFAULT, Phase.LEARNT, deque([0.9, 0.7]), _measures((-22.0, -3.0), (-21.0, -2.0)), None)
    assert alone is None  # the echo alone, explained as usual
    headphones = cut_in(DEFAULT, Phase.HEADPHONES, deque([0.9, 0.9]), deque([Explained(0.0, 0.0, -1.0)] * 2), None)
    assert headphones is not None and headphones.rule is Rule.NO_ECHO


@pytest.mark.parametrize("phase", [Phase.WAITING, Phase.MEASURING, Phase.SETTLING])
def test_nothing_counts_while_the_delay_is_measured_or_aec3_settles(phase):
    assert cut_in(DEFAULT, phase, deque([1.0] * 8), _measures((-5.0, -2.0), (-4.0, -1.0)), None) is None


def test_the_rule_on_aec3_alone_counts_only_a_full_span_heard_since_aec3_counts():
    speech = deque([0.9] * DEFAULT.strict_windows)
    for phase in (Phase.AEC3_COUNTS, Phase.MEASURING_AGAIN):
        assert cut_in(DEFAULT, phase, speech, deque([None, None]), DEFAULT.strict_windows - 1) is None
        cut = cut_in(DEFAULT, phase, speech, deque([None, None]), DEFAULT.strict_windows)
        assert cut == CutIn(Rule.AEC3_ALONE, phase, pytest.approx(0.9), DEFAULT.strict_windows)
    assert cut_in(DEFAULT, Phase.MEASURING_AGAIN, speech, deque([None, None]), None) is None


def test_a_config_passed_in_changes_the_rule():
    measures = _measures((-17.0, -2.0), (-16.0, -1.0))  # a rise of 8.5 dB
    assert cut_in(DEFAULT, Phase.LEARNT, deque([0.9, 0.9]), measures, None) is None
    assert cut_in(dataclasses.replace(DEFAULT, rise_db=6.0), Phase.LEARNT, deque([0.9, 0.9]), measures, None)


# ---------------------------------------------------------------- a turn: its phases and its record


class Speech:
    """The agent's speech as the turn drives it; `stop` ends it."""

    def __init__(self) -> None:
        self.ended, self.error, self.played, self.on_open, self.stopped = threading.Event(), None, None, None, False

    def start(self, text: str, speed: float) -> None: ...

    def stop(self, wait_s: float) -> None:
        self.stopped = True
        self.ended.set()

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False


class Mic:
    latency_s = 0.02

    def __init__(self, count: int, during: Any) -> None:
        self.count, self.during = count, during

    def __iter__(self):
        for i in range(self.count):
            self.during(i)
            yield np.full(512, i, dtype=np.int16)


class TalksFrom:
    """A VAD that hears speech from window `onset` on."""

    def __init__(self, onset: int) -> None:
        self.onset = onset

    def reset(self) -> None: ...

    def hear(self, window: Any, run: bool = True) -> tuple[float, float]:
        return (1.0 if int(window[0]) >= self.onset else 0.0), -30.0


class KeepsNear:
    def clean(self, near: Any, far: Any) -> Any:
        return near

    def reset(self) -> None: ...


class LearntFrom:
    """An echo model learnt from window `learnt` on, the user unexplained from `user` on."""

    resets = 0

    def __init__(self, learnt: int, user: int) -> None:
        self.learnt, self.user = learnt, user

    def process(self, near: Any, far: Any) -> tuple[Any, Explained]:
        i = int(near[0])
        return near, Explained(-2.0 if i >= self.user else -25.0, -25.0, 0.0, i >= self.learnt)

    def learn(self, near: Any, far: Any) -> None: ...

    def reset(self) -> None: ...


class FoundAt:
    """A delay measurement that finds the echo in window `at`."""

    def __init__(self, at: int) -> None:
        self.at, self.lead_s, self.measured_lag_s, self.done = at, 0.15, None, False

    @property
    def collected_windows(self) -> int:
        return 0

    def restart(self) -> None: ...

    def add(self, near: Any, far: Any) -> bool:
        if self.done or int(near[0]) < self.at:
            return False
        self.done, self.measured_lag_s = True, 0.05
        return True


class HearsIn:
    """A VAD that hears speech in the windows numbered in `speech`."""

    def __init__(self, speech: set[int]) -> None:
        self.speech = speech

    def reset(self) -> None: ...

    def hear(self, window: Any, run: bool = True) -> tuple[float, float]:
        return (1.0 if int(window[0]) in self.speech else 0.0), -30.0


def _turn(
    caplog: pytest.LogCaptureFixture,
    onset: int,
    windows: int = 120,
    speech: set[int] | None = None,
    words: Any = None,
    text: str = "Hello.",
    aligner: Any = None,
    learnt: int = 60,
) -> tuple[Any, Speech, list[int]]:
    """A turn whose echo model has learnt the path from window 60, the user (whom the model cannot explain)
    from `onset` on; Silero hears speech from `onset` on, or in the windows of `speech`."""
    from mcp_listen.duplex.barge import BargeIn

    clock = SimpleNamespace(now=1000.0)
    playback = Speech()

    def during(i: int) -> None:
        clock.now = 1000.0 + (i + 1) * 0.032
        if i == 5:  # the speaker opens: 20 s of speech handed over now
            speaker = SimpleNamespace(device_rate=16000, tap=None)
            playback.on_open(speaker)  # type: ignore[misc]
            speaker.tap(np.full(16000 * 20, 1000, dtype=np.int16), clock.now, False)

    turn = BargeIn(
        playback,  # type: ignore[arg-type]
        text,
        1.0,
        TalksFrom(onset) if speech is None else HearsIn(speech),  # type: ignore[arg-type]
        KeepsNear(),
        LearntFrom(learnt=learnt, user=onset),
        clock=lambda: clock.now,
        aligners=aligner or (lambda: FoundAt(40)),
        words=words,
    )
    with caplog.at_level(logging.DEBUG, logger="mcp_listen.duplex"):
        heard = [int(w[0]) for w in turn.windows(Mic(windows, during), lambda: None)]
    return turn, playback, heard


def test_a_turn_logs_each_phase_it_enters_and_its_cut_in_once_as_fields(caplog):
    turn, playback, heard = _turn(caplog, onset=100)
    cut_at = 101  # the user's second window brings Silero's average over the span to the bar
    assert playback.stopped and heard[0] == cut_at - DEFAULT.handover_windows + 1
    changes = [r.getMessage() for r in caplog.records if r.getMessage().startswith("echo path:")]
    phases = [re.match(r"echo path: (\w+) -> (\w+)", m).groups() for m in changes]  # type: ignore[union-attr]
    assert phases == [
        ("waiting", "measuring"),
        ("measuring", "settling"),
        ("settling", "learnt"),
        ("learnt", "paused"),
        ("paused", "cut_in"),
    ]
    assert "delay measured, 50 ms" in changes[1], changes
    cut = turn.cut_in
    assert cut.rule is Rule.DOUBLE_TALK and cut.phase is Phase.LEARNT and cut.span_windows == DEFAULT.onset_windows
    assert cut.after_ms == (cut_at - 5) * 32  # the speaker opened at window 5
    records = [r for r in caplog.records if r.getMessage().startswith("cut-in:")]
    assert len(records) == 1 and records[0].levelno == logging.DEBUG
    assert records[0].getMessage() == (
        "cut-in: rule=double_talk after_ms=3072 phase=learnt probability=1.0 span_windows=2 rise_db=23.0 "
        "level_db=0.0 clear=True"
    )


def test_who_ended_a_speech_is_the_user_when_they_cut_in_and_the_playback_s_own_reason_otherwise(caplog):
    from mcp_listen.engine.speaking import ended_by

    turn, _, _ = _turn(caplog, onset=100)
    assert ended_by(SimpleNamespace(interrupted_by="cancel"), turn, True) == ("user", 3072)  # type: ignore[arg-type]
    played_out, _, _ = _turn(caplog, onset=30000)
    assert played_out.cut_in is None
    assert ended_by(SimpleNamespace(interrupted_by=None), played_out, False) == (None, None)  # type: ignore[arg-type]
    stopped = SimpleNamespace(interrupted_by="stop_speaking")
    assert ended_by(stopped, played_out, True) == ("stop_speaking", None)  # type: ignore[arg-type]


# ---------------------------------------------------------------- the pause, then the verdict


def test_a_sound_that_stops_sounding_like_speech_pauses_the_agent_who_then_plays_on(caplog):
    """A clap over the echo fires the 64 ms onset rule; once the agent is quiet it no longer sounds like speech,
    so the speech plays on where it paused, and the result can say for how long it was quiet."""
    turn, playback, heard = _turn(caplog, onset=100, windows=150, speech={100, 101})
    assert not playback.stopped and playback.paused is False and turn.cut_in is None
    (verdict,) = turn.pauses
    assert not verdict.confirmed and verdict.speech_windows == 0 and verdict.words is None
    assert turn.paused_s == pytest.approx(DEFAULT.confirm_s, abs=0.04)
    assert heard == [], "nothing is handed on while the speech plays"
    phases = [m for r in caplog.records if (m := r.getMessage()).startswith("echo path:")]
    assert any(m.startswith("echo path: paused -> learnt (not the user (Silero heard speech in 0") for m in phases)


def test_the_agents_own_words_or_noise_never_confirm_a_pause_and_the_users_words_do(caplog):
    """Silero hears speech all through the pause in each case; only whisper's words tell the agent's own voice
    (an echo later than the canceller looks, the agent's text read by another voice) from the user's."""
    text = "The meeting moved to Thursday evening."
    heard_as = {"own": "the meeting moved to thursday", "noise": "[Music] Thank you.", "user": "Wait, not Thursday."}
    verdicts = {}
    for name, said in heard_as.items():
        turn, playback, _ = _turn(caplog, onset=100, windows=140, words=lambda samples, said=said: said, text=text)
        verdicts[name] = (playback.stopped, turn.pauses[0].confirmed, turn.pauses[0].own_words)
    assert verdicts == {"own": (False, False, 5), "noise": (False, False, 2), "user": (True, True, 1)}
    assert not any("Thursday" in r.getMessage() or "Wait" in r.getMessage() for r in caplog.records)


class NoEchoFound(FoundAt):
    """A delay measurement that finds no echo in a quiet second (headphones, it would seem)."""

    def add(self, near: Any, far: Any) -> bool:
        self.done = self.done or int(near[0]) >= self.at
        return False


def test_the_agents_own_words_heard_with_headphones_make_the_path_measure_its_delay_again(caplog):
    """An echo later than the delay is looked for (a Bluetooth speaker) leaves the first second quiet: it looks
    like headphones, where speech as loud as usual counts. Once a pause hears the agent's own words, the delay is
    measured again and nothing counts meanwhile, instead of a pause at every sentence."""
    text = "The meeting moved to Thursday evening."
    turn, playback, _ = _turn(
        caplog, onset=10**6, windows=200, speech=set(range(100, 200)), words=lambda samples: "the meeting moved",
        text=text, aligner=lambda: NoEchoFound(40), learnt=10**6,
    )  # fmt: skip
    assert len(turn.pauses) == 1 and not playback.stopped, "one pause, then no rule counts while it measures"
    changes = [m for r in caplog.records if (m := r.getMessage()).startswith("echo path:")]
    assert any("headphones -> paused" in m for m in changes), changes
    assert any(m.startswith("echo path: paused -> measuring (the agent's own words heard") for m in changes), changes


@pytest.mark.parametrize(
    ("heard", "agent", "words", "own"),
    [
        ("(applause) ♪", "Hello there.", 0, 0),
        ("Okay, Thurzday evening", "Okay, Thursday evening.", 3, 3),  # whisper's spelling is still the agent's
        ("No. Stop!", "Thursday evening.", 2, 0),
        ("you", "Thursday evening.", 1, 1),
        ("Amen with us.", "A man with a small brown dog.", 3, 3),  # its words cut off at the pause's edges
        ("Okay.", "Thursday evening.", 1, 1),  # a backchannel, or whisper on a sound that is no speech
        ("Mm-hmm, yeah.", "Thursday evening.", 3, 3),
        ("Hey, hold on a second.", "Hold on to the rail a second.", 5, 4),
    ],
)
def test_a_verdict_counts_the_words_heard_and_which_were_the_agents_or_noise(heard, agent, words, own):
    from mcp_listen.duplex.confirm import AgentWords, judge

    verdict = judge(10, heard, AgentWords(agent), 6, 1)
    assert (verdict.words, verdict.own_words, verdict.confirmed) == (words, own, words - own >= 1)
    assert not judge(5, "No. Stop!", AgentWords(agent), 6, 1).confirmed, "Silero's windows are needed too"


def test_the_agents_echo_is_taken_off_the_front_of_an_answer_and_nothing_else():
    from mcp_listen.duplex.confirm import AgentWords

    agent = AgentWords("Shall I move the meeting to Thursday evening?")
    assert agent.taken_off("Thursday evening? No, Friday.") == "No, Friday."
    assert agent.taken_off("Thursday is fine.") == "Thursday is fine.", "one word of the agent's may be the user's"
    assert agent.taken_off("No, Thursday evening.") == "No, Thursday evening."
    assert agent.taken_off("evening.") == "" and agent.taken_off("Thursday evening?") == "", "its late echo alone"
    assert agent.taken_off("Thursday.") == "Thursday.", "not its last word: the user's answer"


# ---------------------------------------------------------------- the wire


def test_end_signal_joins_end_reason_only_where_it_adds_to_it():
    smart = Transcribed("So I", 900, "en", True, "silence", end_reason="max_pause", end_signal="words")
    plain = Transcribed("Hi.", 900, "en", True, "silence", end_reason="silence")
    assert (wire(smart)["end_reason"], wire(smart)["end_signal"]) == ("max_pause", "words")
    assert "end_signal" not in wire(plain) and wire(plain)["end_reason"] == "silence"


def test_spoken_says_who_cut_it_short_and_when_the_user_cut_in_only_when_they_did():
    cut = wire(Spoken("v", 2410, 160, True, interrupted_by="user", cut_in_ms=2380))
    assert (cut["interrupted_by"], cut["cut_in_ms"]) == ("user", 2380)
    stopped = wire(Spoken("v", 900, 160, True, interrupted_by="stop_speaking"))
    assert stopped["interrupted_by"] == "stop_speaking" and "cut_in_ms" not in stopped
    assert list(wire(Spoken("v", 3000, 160, False))) == ["voice", "duration_ms", "first_audio_ms", "interrupted"]
    assert set(limits.INTERRUPTED_BY) == {"user", "stop_speaking", "cancel"}


@pytest.mark.parametrize(
    ("end_of_turn", "verdict", "stopped_by", "reason", "signal"),
    [
        ("smart", ("finished", "words+voice"), "silence", "words+voice", None),  # end_reason names it
        ("smart", ("finished", "voice"), "silence", "voice", None),
        ("smart", ("unfinished", "words"), "silence", "max_pause", "words"),
        ("smart", None, "silence", "max_pause", "unjudged"),
        ("smart", ("finished", "silence"), "silence", "silence", "silence"),
        ("smart", ("finished", "voice"), "ceiling", "duration", None),
        ("silence", ("finished", "words"), "silence", "silence", None),
    ],
)
def test_the_end_signal_is_the_verdict_s_signal_under_smart_and_one_of_the_contract_s(
    end_of_turn, verdict, stopped_by, reason, signal
):
    from mcp_listen.speech.ending import TurnEnding, Verdict

    ending = TurnEnding(end_of_turn, 1000, 3000)
    ending.silence_for(None if verdict is None else Verdict(verdict[0] == "finished", verdict[1]))
    assert (ending.reason(stopped_by), ending.signal(stopped_by)) == (reason, signal)
    assert signal is None or signal in limits.END_SIGNALS
