"""One conversation turn with barge-in: the microphone stays live while the agent speaks, its windows
echo-cancelled with the played samples as the reference (audio/echo.py), and the user talking over
the agent stops the speech; their words from the first syllable on are the answer.

The rule for "the user talks" is stricter while the agent speaks than the listener's own onset, and rests
on what the echo cannot explain (audio/doubletalk.py): over the last ONSET_WINDOWS windows, the share of
the microphone a linear model of the echo path leaves must rise RISE_DB over the turn's own echo-alone
baseline, that leftover must be about as loud as the microphone usually is while the agent speaks (within
LEVEL_DB, or CLEAR_LEVEL_DB after a rise of CLEAR_RISE_DB: not the faint tail of a word), and Silero must
hear speech in it (ONSET_PROBABILITY on average; a session of this turn's own, apart from the listener's).
That rule holds only while the model has learnt the path. Before (the first seconds) and whenever its
guard found it run away, the stricter rule on AEC3 alone decides: Silero on AEC3's output averaging
STRICT_PROBABILITY over STRICT_WINDOWS, counting only windows heard once SETTLE_S has passed since the
echo's delay was measured and AEC3 takes the echo CONVERGED_DB down. A model that stays unlearnt for
RELEARN_S, or that ran away once learnt, has the delay measured again beside the one in use (the echo
moved: a sound server's hiccup). Nothing counts before the delay is measured (the first second of speech,
or more while the microphone hears sound with no echo of it in); when that search finds no echo in a quiet
second (headphones), speech as loud as usual suffices. Then the speech stops, and the last
PRE_ROLL_WINDOWS windows go to the listener first: nothing the user said is lost. What
the listener hears is the microphone less the predicted echo while the model decides (the user's voice
whole: AEC3's suppressor damps it while the agent still talks), AEC3's output otherwise. A speech played
out with nobody cutting in ends as the half-duplex turn does (engine/turn.py): the windows until the echo
has died away are dropped."""

from __future__ import annotations

import logging
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from mcp_listen.audio.doubletalk import EchoModel, Explained
from mcp_listen.audio.echo import ALIGNED_LEAD_S, Aligner, Canceller, FarEnd
from mcp_listen.audio.levels import level_db
from mcp_listen.contract.limits import SAMPLE_RATE
from mcp_listen.engine.turn import STOP_WAIT_S, WINDOW_S, SpeechFirst

if TYPE_CHECKING:
    from mcp_listen.audio.speaker import Speaker
    from mcp_listen.engine.parts import WindowSource
    from mcp_listen.engine.playback import Playback
    from mcp_listen.speech.listener import VoiceDetector

log = logging.getLogger(__name__)


class Cleaning(Protocol):
    """An echo canceller (audio.echo.Canceller): a window and what was played meanwhile -> the window without it."""

    def clean(self, near: Any, far: Any) -> Any: ...

    def reset(self) -> None: ...


class Explaining(Protocol):
    """The linear echo model (audio.doubletalk.EchoModel): a window and what was played meanwhile -> the window
    less the predicted echo, and how much of it the prediction left."""

    resets: int

    def process(self, near: Any, far: Any) -> tuple[Any, Explained]: ...

    def learn(self, near: Any, far: Any) -> None: ...

    def reset(self) -> None: ...


ONSET_WINDOWS = 2
"""The span (64 ms) over which the double-talk rule must hold: three windows caught the user ~20 ms later for
no fewer false barge-ins (bench/barge.py's four rooms, 30 recorded turns each)."""
ONSET_PROBABILITY = 0.6
"""Silero's average probability over ONSET_WINDOWS, on what the echo model leaves: at 0.5 the agent's own
voice stopped it once in 30 turns in the 120 ms reverberant room; 0.7 was ~10 ms slower for nothing."""
RISE_DB = 10.0
"""How far the unexplained share must rise over the echo-alone baseline: the echo alone leaves 20-30 dB
less than the microphone heard once learnt, a user as loud as the echo a few dB less. At 6 dB the agent's
own voice stopped it in 3 of 60 turns alone (the 120 ms and the noisy rooms: rises of 7.5-9 dB at loud
sentence onsets and just after the model learnt), at 10 dB in 1 of 60, the users caught as fast."""
LEVEL_DB = -6.0
"""The leftover against the microphone's usual level while the agent speaks: the end of a word, where the
echo fades faster than the model follows, leaves a large share of very little sound. Without this, the
agent's own voice at full level stopped it in 5-12 of 20 runs; at -10 dB, once in 30 in a room."""
CLEAR_RISE_DB = 15.0
CLEAR_LEVEL_DB = -10.0
"""A rise of CLEAR_RISE_DB needs the leftover only this loud: where the echo and its reverberation are louder
than the user (the bench's 120 ms 0 dB room), the user's first syllables stay under LEVEL_DB for 100-300 ms
though the model can explain none of them (bench/barge.py's turns traced, 40 a room, with `adds_sound`'s
1 dB margin: the 120 ms room's reaction p90 807 -> 651 ms, no false stop, no user missed). Only where every
window left less than the microphone heard: a leftover a fraction of a dB over it is a user far louder than
the echo, or a prediction gone wrong (tests/fixtures/echo/crept.wav), and only the user is then loud too."""
STRICT_WINDOWS = 8
"""The span (256 ms) of the rule on AEC3 alone, while the echo model has not learnt the path."""
STRICT_PROBABILITY = 0.8
"""Silero's average over STRICT_WINDOWS of AEC3's output: at 0.5 over six windows the agent's own voice,
left over by AEC3 in reverberant rooms, stopped it in 4-8 runs of 20 (bench/README.md)."""
SETTLE_S = 1.0
"""Listening after the echo's delay was measured (audio/echo.py: Aligner, the first second of speech)
before the rule on AEC3 alone counts: the fresh canceller's first estimate of the echo path. With 0.3 s
the agent's own voice at full level stopped it now and then in its first second."""
CONVERGED_DB = 10.0
"""How far under the microphone AEC3's output must be (the median of the last CONVERGED_WINDOWS windows of
loud played speech) before the rule on AEC3 alone counts, and from then on only on windows heard after it:
SETTLE_S of time is no proof that AEC3 has learnt the path, and until it has, it leaves the agent's own voice,
which Silero hears as speech. With time alone, and barge-in on by default, full test runs on a busy machine
had the agent's own voice stop a short speech at double speed in 3 of 8 runs, each 2.0-2.6 s into it: about
as SETTLE_S ran out, when the span's average could already hold windows heard before. Once AEC3 has learnt
the path it takes the echo 16-43 dB down (bench/barge.py's ERLE, the agent alone: a median of 24-31 dB)."""
CONVERGED_WINDOWS = 16
"""The windows (0.5 s) of loud played speech AEC3's suppression is judged over."""
LOUD_REFERENCE_DB = -45.0
"""A window's reference (dBFS) from which it counts as loud played speech: not a pause between words, where the
microphone holds only the room and AEC3 has nothing to take out."""
RELEARN_S = 3.0
"""Speech heard with the echo model unlearnt, after the delay was measured, before the delay is measured
again: taught the measured second, the model learns a path at once, so an echo it still cannot explain
has moved (or lies past the 160 ms it models)."""
REPLAY_WINDOWS = 32
"""The windows (the last second) the echo model is taught again, REPLAY_PASSES times, once the delay is
measured on them: a fresh model learns a path in 2-3 s of speech, while the user may cut in from then on
(bench/barge.py, 10 runs per room: users missed 0 / 0 / 2 / 1 of 10 instead of 0 / 0 / 2 / 3)."""
REPLAY_PASSES = 3
PRE_ROLL_WINDOWS = 47
"""Windows handed to the listener when the user cuts in: the last 1.5 s. The user may have begun well before
the onset rule was met (the damped first words); the listener's own onset, in these windows, decides where
their speech starts, keeping up to 1 s before it as for every recording."""


ONSET_LOOKBACK_WINDOWS = 32
"""How far before the cut-in (1 s) the user's first rise over the echo is looked for (pre_roll)."""


class BargeIn(SpeechFirst):
    """converse with barge_in: the agent's speech, which the user's own speech stops."""

    def __init__(
        self,
        playback: Playback,
        text: str,
        speed: float,
        vad: VoiceDetector,
        canceller: Cleaning | None = None,
        echo_model: Explaining | None = None,
    ) -> None:
        super().__init__(playback, text, speed)
        self._vad = vad
        self._far: FarEnd | None = None
        self._canceller: Cleaning = canceller or Canceller()
        self._echo: Explaining = echo_model or EchoModel()
        self._heard: deque[tuple[Any, int]] = deque(maxlen=REPLAY_WINDOWS)
        """The last windows and their numbers, for measuring the delay again on a moved clock and for teaching
        the echo model once the delay is known."""
        self._anchor: float | None = None
        self._latency_s = 0.0
        """The microphone's input latency (set as the turn starts): a window is heard that long before it arrives."""
        self._count = 0
        self._unlearnt = 0
        self._resets = 0
        self._was_learnt = False
        self.aligner = Aligner()
        """The delay in use: measured in the first second of speech, or since measured again."""
        self._again: Aligner | None = None
        """The delay being measured again, beside the one in use (which stays until a new one is found)."""
        self.aligned_window: int | None = None
        """The window from which the reference is aligned with the echo (None until then)."""
        self.realigned = 0
        """How often the delay was measured again (the echo model stayed unlearnt, or ran away)."""
        self._gaps = 0
        """The speaker's gaps (FarEnd.gaps) already followed."""
        self._suppression: deque[float] = deque(maxlen=CONVERGED_WINDOWS)
        """AEC3's output against the microphone (dB) in the last windows of loud speech since the delay was measured."""
        self._strict_from: int | None = None
        """The first window the rule on AEC3 alone counts (AEC3 has learnt the path); None until then."""
        self.barged_at: float | None = None
        """time.monotonic() when the user's speech stopped the agent's; None when it played out."""
        playback.on_open = self._tap

    def windows(self, microphone: WindowSource, on_listening: Callable[[], None]) -> Iterator[Any]:
        """Start the speech; while it plays, look for the user in the cleaned windows and stop it when
        they speak; then hand on every window from the start of their speech."""
        self._vad.reset()
        self.playback.start(self._text, self._speed)
        self._started = True
        latency = self._latency_s = microphone.latency_s
        recent: deque[tuple[Any, Any, Explained | None]] = deque(maxlen=PRE_ROLL_WINDOWS)
        probabilities: deque[float] = deque(maxlen=max(ONSET_WINDOWS, STRICT_WINDOWS))
        measures: deque[Explained | None] = deque(maxlen=ONSET_WINDOWS)
        heard = iter(microphone)
        by_model = no_echo = False
        for window in heard:
            clean, left, explained = self._cleaned(window)
            if self.playback.ended.is_set():
                yield from self._after_the_speech(window, heard, latency, on_listening)
                return
            learnt = explained is not None and explained.learnt
            if learnt != by_model:  # Silero's span starts afresh on the other signal
                by_model = learnt
                probabilities.clear()
            recent.append((clean, left, explained))
            probabilities.append(self._vad.hear(left if by_model else clean)[0])
            measures.append(explained)
            if self._user_talks(probabilities, measures, by_model):
                no_echo = self.aligner.measured_lag_s is None
                self._cut_in(on_listening, "the echo model" if by_model else "no echo" if no_echo else "AEC3 alone")
                yield from pre_roll(list(recent), by_model, no_echo)
                break
        for window in heard:
            clean, left, _ = self._cleaned(window)
            yield left if by_model or no_echo else clean

    def _user_talks(self, probabilities: deque[float], measures: deque[Explained | None], by_model: bool) -> bool:
        """The onset rule during playback (the module's docstring)."""
        if self.aligned_window is None:
            return False
        if by_model or self.aligner.measured_lag_s is None:
            return talks_over_the_echo(probabilities, measures, echo=by_model)
        strict = list(probabilities)[-STRICT_WINDOWS:]
        counts = self._strict_from is not None and self._count - self._strict_from >= STRICT_WINDOWS
        return counts and len(strict) == STRICT_WINDOWS and sum(strict) >= STRICT_PROBABILITY * STRICT_WINDOWS

    def _after_the_speech(
        self, window: Any, heard: Iterator[Any], latency: float, on_listening: Callable[[], None]
    ) -> Iterator[Any]:
        """The speech played out: the half-duplex guard (the windows that may hold its echo are dropped),
        then the microphone itself, as the half-duplex turn hands it on. With no echo left there is nothing
        to cancel, while AEC3's output still differs from what it was given (the test clip 1.2 dB quieter
        after a speech, nothing played): with it here, a full test run heard the answer after a speech as
        "life-has keeper" for "lighthouse keeper"."""
        while self._still_echo(latency):
            next_window = next(heard, None)
            if next_window is None:
                return
            window = next_window
        self._listening(on_listening)
        yield window
        yield from heard

    def _tap(self, speaker: Speaker) -> None:
        """The speaker is open: every block it writes becomes the echo reference."""
        self._far = FarEnd(speaker.device_rate)
        speaker.tap = self._far.played

    def _cleaned(self, window: Any) -> tuple[Any, Any, Explained | None]:
        """The stream's next window without the echo of what was played while it was heard: AEC3's output,
        the microphone less the linear echo model's prediction, and how much the model left unexplained
        (the window itself twice, and None, before anything was played).

        A window can only arrive late, never early, so the earliest arrival less the windows before it
        is the stream's start on this clock; window n was heard from start + (n - 1) windows - the input
        latency. Once the delay is measured that start is kept: the measurement ties the microphone's
        samples to the speaker's, and on the test rig the earliest arrival still crept by 0.1-3 ms now
        and then through a turn, each creep shifting the reference under a learnt echo path (its
        prediction then added sound instead of taking the echo out: tests/fixtures/echo)."""
        count, self._count = self._count, self._count + 1
        start = time.monotonic() - count * WINDOW_S
        anchor = start if self._anchor is None else min(self._anchor, start)
        moved = self._anchor is not None and self._anchor - anchor >= 1 / SAMPLE_RATE
        if self._anchor is None or not self.aligner.done:
            self._anchor = anchor
        far = self._far
        if far is None:
            return window, window, None
        heard_from = self._heard_from(count)
        if far.gaps != self._gaps:
            self._gaps = far.gaps
            self._after_a_gap()
        measured = moved and not self.aligner.done and self._measure_on_the_moved_clock(far)
        reference = far.reference(heard_from, self.aligner.lead_s)
        if measured or self.aligner.add(window, reference) or self._measured_again(window, heard_from, far):
            self._canceller.reset()
            self._suppression.clear()
            self._strict_from = None
            self._teach_echo_model(far)
            self.aligned_window = count
            reference = far.reference(heard_from, self.aligner.lead_s)
            log.info("the echo's delay measured: the reference now leads it by %.0f ms", ALIGNED_LEAD_S * 1000)
        if self.aligned_window is None and self.aligner.done:
            self.aligned_window = count
            log.info("no echo, the microphone quiet (%.0f dBFS): taken for headphones", self.aligner.heard_db)
        self._heard.append((window, count))
        left, explained = self._echo.process(window, reference)
        self._watch(explained, reference)
        clean = self._canceller.clean(window, reference)
        self._follow_aec3(window, clean, reference)
        return clean, left, explained

    def _heard_from(self, count: int) -> float:
        """When window `count` began to be heard, on the stream's clock as it stands (see _cleaned)."""
        return (self._anchor or 0.0) + (count - 1) * WINDOW_S - self._latency_s

    def _measure_on_the_moved_clock(self, far: FarEnd) -> bool:
        """The stream's clock moved while the delay was being measured: a window came in earlier against its
        number than any before it, so those had come late, and the references collected were taken up to a
        few ms off. On the test rig, with another program busy on a core, the clock moved 1-8 ms within the
        second measured in 37 of 67 turns, most often about 0.6 s into the speech. That second then held
        two delays, and the echo model, taught it, explained the echo by -3 dB (median; +3 to -23), where a
        turn whose clock held still was taught to -28 dB (-19 to -34); moves under 1 ms did as much harm.
        The model then counted as learnt only 2.5-3 s later, or not before the user cut in, and the rule on
        AEC3 alone missed them in 4 of 14 turns. So the measurement starts again on the windows it had
        collected (no older ones: one begun afresh after a gap, or after a second with no echo found, stays
        so), their references taken on the moved clock: 20 of 20 such turns were then taught to -15 to
        -32 dB and caught the user by the echo model. True when that completed the measurement."""
        collected = self.aligner.collected_windows
        self.aligner.restart()
        lead = self.aligner.lead_s
        sounding = [(w, r) for w, c in self._heard if (r := far.reference(self._heard_from(c), lead)).any()]
        return any(self.aligner.add(w, r) for w, r in sounding[max(0, len(sounding) - collected) :])

    def _follow_aec3(self, window: Any, clean: Any, reference: Any) -> None:
        """Whether AEC3 has learnt the echo path since the delay was measured: once it takes the echo of loud
        speech CONVERGED_DB down and SETTLE_S has passed, the rule on AEC3 alone counts from the next window
        on (until the delay is measured again)."""
        aligned = self.aligned_window
        if aligned is None or self._strict_from is not None:
            return
        if level_db(reference) > LOUD_REFERENCE_DB:
            self._suppression.append(level_db(clean) - level_db(window))
        if len(self._suppression) < CONVERGED_WINDOWS or (self._count - aligned) * WINDOW_S < SETTLE_S:
            return
        down = -statistics.median(self._suppression)
        if down >= CONVERGED_DB:
            self._strict_from = self._count
            log.info("AEC3 takes the echo %.0f dB down: the rule on AEC3 alone counts", down)

    def _after_a_gap(self) -> None:
        """The speaker ran dry (Piper rendered slower than it spoke, on a busy machine) and plays again: the
        sound server buffered afresh, and the echo now lags the reference by another delay (30-40 ms more
        on the test rig). A delay still being measured starts again on sound after the gap (a second that
        straddles it holds two delays: once none was found, and the agent's own voice, taken for a room
        without echo, stopped it); one measured is measured again beside it, as after a runaway."""
        if not self.aligner.done:
            self.aligner = Aligner()
        elif self._again is None:
            log.info("the speaker ran dry: measuring the echo's delay again")
            self._again = Aligner()

    def _measured_again(self, window: Any, heard_from: float, far: FarEnd) -> bool:
        """Feed the delay being measured again (its own search reference: the canceller and the model keep
        theirs meanwhile); True once it found the echo and became the delay in use."""
        again = self._again
        if again is None:
            return False
        found = again.add(window, far.reference(heard_from, again.lead_s))
        if again.done:
            self._again = None
            if found:
                self.aligner, self._was_learnt, self._unlearnt = again, False, 0
        return found

    def _watch(self, explained: Explained, reference: Any) -> None:
        """Measure the delay again when the echo model, once learnt, ran away (its guard reset it), or when it
        stays unlearnt for RELEARN_S of speech after the delay was measured (once a turn): the echo has
        moved. Until a new delay is found the one in use stays, and the rule on AEC3 alone decides."""
        ran_away = self._echo.resets != self._resets
        self._resets = self._echo.resets
        if self.aligned_window is None or self.aligner.measured_lag_s is None or self._again is not None:
            return
        self._was_learnt = self._was_learnt or explained.learnt
        self._unlearnt = 0 if explained.learnt else self._unlearnt + bool(reference.any())
        never = self._unlearnt * WINDOW_S >= RELEARN_S and not self.realigned
        if (ran_away and self._was_learnt) or never:
            log.info("the echo model %s: measuring the echo's delay again", "never learnt" if never else "ran away")
            self._again, self._was_learnt, self._unlearnt = Aligner(), False, 0
            self.realigned += 1

    def _teach_echo_model(self, far: FarEnd) -> None:
        """A fresh echo model, taught the last second again with the reference at the measured delay."""
        self._echo.reset()
        for _ in range(REPLAY_PASSES):
            for window, count in self._heard:
                self._echo.learn(window, far.reference(self._heard_from(count), self.aligner.lead_s))

    @property
    def cut_in_after_s(self) -> float | None:
        """From the speech's first sound to the user's voice stopping it; None when it played out."""
        far = self._far
        if self.barged_at is None or far is None or far.started_at is None:
            return None
        return self.barged_at - far.started_at

    def _cut_in(self, on_listening: Callable[[], None], rule: str) -> None:
        self.barged_at = time.monotonic()
        self.playback.stop(STOP_WAIT_S)
        if self._far is not None:
            self._far.cut(time.monotonic())
        log.info("the user spoke over the speech %.2f s in (by %s): it stopped", self.cut_in_after_s or 0.0, rule)
        self.listening_after_s = None
        on_listening()


def pre_roll(recent: list[tuple[Any, Any, Explained | None]], by_model: bool, no_echo: bool = False) -> list[Any]:
    """The windows handed to the listener on a cut-in: what the echo model leaves while it decided, AEC3's
    output otherwise. With the model deciding, the windows before the user's first rise (the first of the
    last ONSET_LOOKBACK_WINDOWS whose unexplained share rose RISE_DB over the baseline) are AEC3's output:
    there the model leaves the agent's echo 20-30 dB down, which whisper still heard as words, while AEC3's
    suppressor leaves next to nothing. With no echo found (headphones) every window is the leftover, the
    microphone itself: AEC3 damps a voice over the reference 14-45 dB even with no echo path, and the live
    headphones case then lost the user's words in 3 of 8 turns ("Or" for a 9-word sentence)."""
    if no_echo:
        return [left for _, left, _ in recent]
    if not by_model:
        return [clean for clean, _, _ in recent]
    lookback = len(recent) - ONSET_LOOKBACK_WINDOWS
    rises = [i for i, (_, _, m) in enumerate(recent) if i >= lookback and m is not None and m.rise_db > RISE_DB]
    first = rises[0] if rises else 0
    return [clean if i < first else left for i, (clean, left, _) in enumerate(recent)]


def talks_over_the_echo(probabilities: deque[float], measures: deque[Explained | None], echo: bool) -> bool:
    """The double-talk rule over the last ONSET_WINDOWS windows. A window whose leftover is louder than the
    microphone (by LOUDER_DB: `adds_sound`) is never the user: a voice over the echo adds to both, while a
    prediction of a path that has changed adds sound of its own (on the test rig, when the sound server's
    buffering shifted the echo, before the guard reset the model). With no echo to explain (headphones),
    speech as loud as the microphone usually is suffices. Nor is a window in which the microphone clipped:
    the leftover of a clipped echo rose 9 dB over the baseline in the 120 ms 0 dB room at the loudest
    onsets of the agent's speech, and stopped it once in 12 turns (bench/barge.py's cases, before this
    check)."""
    recent = list(probabilities)[-ONSET_WINDOWS:]
    if len(recent) < ONSET_WINDOWS or any(m is None for m in measures):
        return False
    known = [m for m in measures if m is not None]
    rise = sum(m.unexplained_db for m in known) / len(known) - known[0].baseline_db
    level = min(m.level_db for m in known)
    under_the_microphone = all(m.unexplained_db < 0.0 for m in known)
    clear = echo and rise > CLEAR_RISE_DB and level > CLEAR_LEVEL_DB and under_the_microphone
    return (
        (not echo or rise > RISE_DB)
        and (not echo or not any(m.adds_sound for m in known))
        and (not echo or not any(m.clipped for m in known))
        and (level > LEVEL_DB or clear)
        and sum(recent) >= ONSET_PROBABILITY * ONSET_WINDOWS
    )
