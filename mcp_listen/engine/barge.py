"""One conversation turn with barge-in: the microphone stays live while the agent speaks, its windows
echo-cancelled with the played samples as the reference (audio/echo.py), and the user talking over
the agent stops the speech; their words from the first syllable on are the answer.

The rule for "the user talks" is stricter while the agent speaks than the listener's own onset:
Silero's probability (a session of this turn's own, apart from the listener's) averaged over the
last ONSET_WINDOWS cleaned windows reaching ONSET_PROBABILITY, and only once the echo's delay is
measured (the first second of speech) and the canceller has had SETTLE_S to learn the echo path: a
user cannot cut in during the speech's first ~2 s. Then the speech stops, and the last
PRE_ROLL_WINDOWS windows go to the listener first: nothing the user said is lost. A speech played
out with nobody cutting in ends as the half-duplex turn does (engine/turn.py): the windows until the
echo has died away are dropped.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

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


ONSET_WINDOWS = 6
"""The span over which the cleaned signal must sound like speech: 192 ms. An average over it, not a run of
windows each over a bar: the canceller damps the user's voice while the agent talks over it, and Silero's
probability dips within a word (bench/barge.py: a run of five windows over 0.6 caught the user later and
missed more often, for no fewer false barge-ins)."""
ONSET_PROBABILITY = 0.5
"""The average probability over ONSET_WINDOWS from which the user is taken to talk over the agent."""
SETTLE_S = 1.0
"""Listening after the echo's delay was measured (audio/echo.py: Aligner, the first second of speech)
before a barge-in counts: the fresh canceller's first estimate of the echo path. With 0.3 s the agent's
own voice at full level stopped it now and then in its first second (bench/barge.py: 0 of 12 with 1.0 s;
on the test rig, 1 of ~10 live runs)."""
PRE_ROLL_WINDOWS = 47
"""Windows handed to the listener when the user cuts in: the last 1.5 s. The user may have begun well before
the onset rule was met (the damped first words); the listener's own onset, in these windows, decides where
their speech starts, keeping up to 1 s before it as for every recording."""


class BargeIn(SpeechFirst):
    """converse with barge_in: the agent's speech, which the user's own speech stops."""

    def __init__(
        self, playback: Playback, text: str, speed: float, vad: VoiceDetector, canceller: Cleaning | None = None
    ) -> None:
        super().__init__(playback, text, speed)
        self._vad = vad
        self._far: FarEnd | None = None
        self._canceller: Cleaning = canceller or Canceller()
        self._anchor: float | None = None
        self._count = 0
        self.aligner = Aligner()
        self.aligned_window: int | None = None
        """The window from which the reference is aligned with the echo (None until then): barge-in counts
        SETTLE_S after it."""
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
        heard = iter(microphone)
        for window in heard:
            clean = self._cleaned(window, latency)
            if self.playback.ended.is_set():
                yield from self._after_the_speech(clean, heard, latency, on_listening)
                return
            recent.append(clean)
            probabilities.append(self._vad.hear(clean)[0])
            if (
                len(probabilities) == ONSET_WINDOWS
                and sum(probabilities) >= ONSET_PROBABILITY * ONSET_WINDOWS
                and self._settled()
            ):
                self._cut_in(on_listening)
                yield from recent
                break
        for window in heard:
            yield self._cleaned(window, latency)

    def _after_the_speech(
        self, clean: Any, heard: Iterator[Any], latency: float, on_listening: Callable[[], None]
    ) -> Iterator[Any]:
        """The speech played out: the half-duplex guard (the windows that may hold its echo are dropped),
        then the cleaned windows."""
        while self._still_echo(latency):
            window = next(heard, None)
            if window is None:
                return
            clean = self._cleaned(window, latency)
        self._listening(on_listening)
        yield clean
        for window in heard:
            yield self._cleaned(window, latency)

    def _tap(self, speaker: Speaker) -> None:
        """The speaker is open: every block it writes becomes the echo reference."""
        self._far = FarEnd(speaker.device_rate)
        speaker.tap = self._far.played

    def _cleaned(self, window: Any, input_latency_s: float) -> Any:
        """The stream's next window without the echo of what was played while it was heard.

        A window can only arrive late, never early, so the earliest arrival less the windows before it
        is the stream's start on this clock; window n was heard from start + (n - 1) windows - the input
        latency."""
        count, self._count = self._count, self._count + 1
        start = time.monotonic() - count * WINDOW_S
        self._anchor = start if self._anchor is None else min(self._anchor, start)
        far = self._far
        if far is None:
            return window
        heard_from = self._anchor + (count - 1) * WINDOW_S - input_latency_s
        reference = far.reference(heard_from, self.aligner.lead_s)
        if self.aligner.add(window, reference):
            self._canceller.reset()
            log.info("the echo's delay measured: the reference now leads it by %.0f ms", ALIGNED_LEAD_S * 1000)
        if self.aligned_window is None and self.aligner.done:
            self.aligned_window = count
        return self._canceller.clean(window, reference)

    @property
    def cut_in_after_s(self) -> float | None:
        """From the speech's first sound to the user's voice stopping it; None when it played out."""
        far = self._far
        if self.barged_at is None or far is None or far.started_at is None:
            return None
        return self.barged_at - far.started_at

    def _settled(self) -> bool:
        """Whether the canceller has had time to learn the echo path since the delay was measured (or
        found to be no echo at all: headphones)."""
        aligned = self.aligned_window
        return aligned is not None and (self._count - aligned) * WINDOW_S >= SETTLE_S

    def _cut_in(self, on_listening: Callable[[], None]) -> None:
        self.barged_at = time.monotonic()
        self.playback.stop(STOP_WAIT_S)
        if self._far is not None:
            self._far.cut(time.monotonic())
        log.info("the user spoke over the speech: it stopped")
        self.listening_after_s = None
        on_listening()
