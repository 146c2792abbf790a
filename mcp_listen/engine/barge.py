"""One conversation turn with barge-in: the microphone stays live while the agent speaks, its windows echo-
cancelled with the played samples as the reference (audio/echo.py), and the user talking over the agent
stops the speech; their words from the first syllable on are the answer.

The rule for "the user talks" is stricter while the agent speaks than the listener's own onset, and rests on
what the echo cannot explain (audio/doubletalk.py): over the last ONSET_WINDOWS windows, the share of the
microphone a linear model of the echo path leaves must rise RISE_DB over the turn's own echo-alone baseline
(itself at least LEARNT_DB down: the model has learnt the path), that leftover must be about as loud as the
microphone usually is while the agent speaks (within LEVEL_DB: not the faint tail of a word), and Silero
must hear speech in it (ONSET_PROBABILITY on average, a session of this turn's own, apart from the
listener's). Nothing counts before the echo's delay is measured (the first second of speech); when that
search finds no echo (headphones), speech as loud as usual suffices. Then the speech stops, and the last
PRE_ROLL_WINDOWS windows go to the listener first: nothing the user said is lost. What the listener hears is
the microphone less the predicted echo, where the user's voice is whole (AEC3's suppressor damps it while
the agent still talks). A speech played out with nobody cutting in ends as the half-duplex turn does
(engine/turn.py): the windows until the echo has died away are dropped.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from mcp_listen.audio.doubletalk import EchoModel, Explained
from mcp_listen.audio.echo import ALIGNED_LEAD_S, Aligner, Canceller, FarEnd
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

    def process(self, near: Any, far: Any) -> tuple[Any, Explained]: ...

    def learn(self, near: Any, far: Any) -> None: ...

    def reset(self) -> None: ...


ONSET_WINDOWS = 2
"""The span (64 ms) over which the rule must hold: three windows caught the user ~20 ms later for no fewer
false barge-ins (bench/barge.py's four rooms, 30 recorded turns each)."""
ONSET_PROBABILITY = 0.6
"""Silero's average probability over ONSET_WINDOWS, on what the echo model leaves: at 0.5 the agent's own
voice stopped it once in 30 turns in the 120 ms reverberant room; 0.7 was ~10 ms slower for nothing."""
RISE_DB = 6.0
"""How far the unexplained share must rise over the echo-alone baseline: the echo alone leaves 20-30 dB
less than the microphone heard once learnt, a user as loud as the echo a few dB less (4-9 dB decided the
same on the bench)."""
LEARNT_DB = -6.0
"""The echo-alone baseline must be at least this far down: before, the model has not learnt the path and
a rise means nothing (the user is then missed rather than the agent stopping itself)."""
LEVEL_DB = -6.0
"""The leftover against the microphone's usual level while the agent speaks: the end of a word, where the
echo fades faster than the model follows, leaves a large share of very little sound. Without this, the
agent's own voice at full level stopped it in 5-12 of 20 runs; at -10 dB, once in 30 in a room."""
REPLAY_WINDOWS = 32
"""The windows (the last second) the echo model is taught again, REPLAY_PASSES times, once the delay is
measured on them: a fresh model learns a path in 2-3 s of speech, while the user may cut in from then on
(bench/barge.py, 10 runs per room: users missed 0 / 0 / 2 / 1 of 10 instead of 0 / 0 / 2 / 3)."""
REPLAY_PASSES = 3
PRE_ROLL_WINDOWS = 47
"""Windows handed to the listener when the user cuts in: the last 1.5 s. The user may have begun well before
the onset rule was met (the damped first words); the listener's own onset, in these windows, decides where
their speech starts, keeping up to 1 s before it as for every recording."""


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
        self._heard: deque[tuple[Any, float]] = deque(maxlen=REPLAY_WINDOWS)
        """The last windows and when each was heard, for teaching the echo model once the delay is known."""
        self._anchor: float | None = None
        self._count = 0
        self.aligner = Aligner()
        self.aligned_window: int | None = None
        """The window from which the reference is aligned with the echo (None until then): barge-in counts
        from it on."""
        self.barged_at: float | None = None
        """time.monotonic() when the user's speech stopped the agent's; None when it played out."""
        playback.on_open = self._tap

    def windows(self, microphone: WindowSource, on_listening: Callable[[], None]) -> Iterator[Any]:
        """Start the speech; while it plays, look for the user in the cleaned windows and stop it when
        they speak; then hand on every window (cleaned) from the start of their speech."""
        self._vad.reset()
        self.playback.start(self._text, self._speed)
        self._started = True
        latency = microphone.latency_s
        recent: deque[Any] = deque(maxlen=PRE_ROLL_WINDOWS)
        probabilities: deque[float] = deque(maxlen=ONSET_WINDOWS)
        measures: deque[Explained | None] = deque(maxlen=ONSET_WINDOWS)
        heard = iter(microphone)
        for window in heard:
            clean, left, explained = self._cleaned(window, latency)
            if self.playback.ended.is_set():
                yield from self._after_the_speech(clean, heard, latency, on_listening)
                return
            recent.append(left)
            probabilities.append(self._vad.hear(left)[0])
            measures.append(explained)
            if self.aligned_window is not None and _user_talks(probabilities, measures, self._echo_found()):
                self._cut_in(on_listening)
                yield from recent
                break
        for window in heard:
            yield self._cleaned(window, latency)[1]

    def _after_the_speech(
        self, clean: Any, heard: Iterator[Any], latency: float, on_listening: Callable[[], None]
    ) -> Iterator[Any]:
        """The speech played out: the half-duplex guard (the windows that may hold its echo are dropped),
        then the cleaned windows."""
        while self._still_echo(latency):
            window = next(heard, None)
            if window is None:
                return
            clean = self._cleaned(window, latency)[0]
        self._listening(on_listening)
        yield clean
        for window in heard:
            yield self._cleaned(window, latency)[0]

    def _tap(self, speaker: Speaker) -> None:
        """The speaker is open: every block it writes becomes the echo reference."""
        self._far = FarEnd(speaker.device_rate)
        speaker.tap = self._far.played

    def _cleaned(self, window: Any, input_latency_s: float) -> tuple[Any, Any, Explained | None]:
        """The stream's next window without the echo of what was played while it was heard: AEC3's output,
        the microphone less the linear echo model's prediction, and how much the model left unexplained
        (the window itself twice, and None, before anything was played).

        A window can only arrive late, never early, so the earliest arrival less the windows before it
        is the stream's start on this clock; window n was heard from start + (n - 1) windows - the input
        latency."""
        count, self._count = self._count, self._count + 1
        start = time.monotonic() - count * WINDOW_S
        self._anchor = start if self._anchor is None else min(self._anchor, start)
        far = self._far
        if far is None:
            return window, window, None
        heard_from = self._anchor + (count - 1) * WINDOW_S - input_latency_s
        reference = far.reference(heard_from, self.aligner.lead_s)
        if self.aligner.add(window, reference):
            self._canceller.reset()
            self._teach_echo_model(far)
            reference = far.reference(heard_from, self.aligner.lead_s)
            log.info("the echo's delay measured: the reference now leads it by %.0f ms", ALIGNED_LEAD_S * 1000)
        if self.aligned_window is None and self.aligner.done:
            self.aligned_window = count
        self._heard.append((window, heard_from))
        left, explained = self._echo.process(window, reference)
        return self._canceller.clean(window, reference), left, explained

    @property
    def cut_in_after_s(self) -> float | None:
        """From the speech's first sound to the user's voice stopping it; None when it played out."""
        far = self._far
        if self.barged_at is None or far is None or far.started_at is None:
            return None
        return self.barged_at - far.started_at

    def _teach_echo_model(self, far: FarEnd) -> None:
        """A fresh echo model, taught the last second again with the reference at the measured delay."""
        self._echo.reset()
        for _ in range(REPLAY_PASSES):
            for window, heard_from in self._heard:
                self._echo.learn(window, far.reference(heard_from, self.aligner.lead_s))

    def _echo_found(self) -> bool:
        """Whether the microphone hears the speech at all (False with headphones: the delay search found no
        echo), once the delay search is over."""
        return self.aligner.measured_lag_s is not None

    def _cut_in(self, on_listening: Callable[[], None]) -> None:
        self.barged_at = time.monotonic()
        self.playback.stop(STOP_WAIT_S)
        if self._far is not None:
            self._far.cut(time.monotonic())
        log.info("the user spoke over the speech: it stopped")
        self.listening_after_s = None
        on_listening()


def _user_talks(probabilities: deque[float], measures: deque[Explained | None], echo: bool) -> bool:
    """The onset rule during playback (the module's docstring): over the last ONSET_WINDOWS windows. With no
    echo to explain (headphones), speech as loud as the microphone usually is suffices."""
    if len(probabilities) < ONSET_WINDOWS or any(m is None for m in measures):
        return False
    known = [m for m in measures if m is not None]
    first = known[0]
    return (
        (not echo or first.baseline_db < LEARNT_DB)
        and (not echo or sum(m.unexplained_db for m in known) / len(known) - first.baseline_db > RISE_DB)
        and min(m.level_db for m in known) > LEVEL_DB
        and sum(probabilities) >= ONSET_PROBABILITY * ONSET_WINDOWS
    )
