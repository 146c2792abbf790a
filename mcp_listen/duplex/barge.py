"""One converse exchange with barge-in: the microphone stays live while the agent speaks, each window cleaned
of the echo (path.py), and the user talking over the agent stops the speech (cut_in.py); their words
from the first syllable on are the answer.

The loop: every window goes through the echo path; Silero (a session of this exchange's own, apart from the
listener's) hears what the echo model leaves while it has learnt the path, AEC3's output otherwise (its
span starts afresh when that changes); the cut-in rule judges the phase, those probabilities and the
model's measures. On a cut-in the speech stops and the last `handover_windows` go to the listener first
(pre_roll), so nothing the user said is lost; the windows after it are the leftover while the model
decided (AEC3's suppressor damps the user while the agent still talks), AEC3's output otherwise. A speech
played out with nobody cutting in ends as the half-duplex exchange does (exchange.py): the windows until its
echo has died away are dropped, then the microphone itself is the user's."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from mcp_listen.duplex.config import DEFAULT, BargeInConfig
from mcp_listen.duplex.cut_in import CutIn, cut_in, pre_roll
from mcp_listen.duplex.doubletalk import EchoModel, Explained
from mcp_listen.duplex.echo import Canceller
from mcp_listen.duplex.exchange import STOP_WAIT_S, Clock, HalfDuplex, Microphone, Speech
from mcp_listen.duplex.path import Cleaned, Cleaning, EchoPath, Explaining, Measuring, Phase

if TYPE_CHECKING:
    from mcp_listen.speech.listener import VoiceDetector

log = logging.getLogger(__name__)


class BargeIn(HalfDuplex):
    """converse with barge_in: the agent's speech, which the user's own speech stops."""

    def __init__(
        self,
        playback: Speech,
        text: str,
        speed: float,
        vad: VoiceDetector,
        canceller: Cleaning | None = None,
        echo_model: Explaining | None = None,
        *,
        config: BargeInConfig = DEFAULT,
        clock: Clock = time.monotonic,
        aligners: Callable[[], Measuring] | None = None,
    ) -> None:
        super().__init__(playback, text, speed, clock)
        self.config = config
        self._vad = vad
        canceller = canceller or Canceller()
        self.path = EchoPath(config, clock, canceller, echo_model or EchoModel(config.model), aligners)
        self.barged_at: float | None = None
        """The clock's time when the user's speech stopped the agent's; None when it played out."""
        self.cut_in: CutIn | None = None
        """Why it stopped, when the user cut in."""
        playback.on_open = self.path.tap

    def windows(self, microphone: Microphone, on_listening: Callable[[], None]) -> Iterator[Any]:
        """Start the speech; while it plays, look for the user in the cleaned windows and stop it when
        they speak; then hand on every window from the start of their speech."""
        self._vad.reset()
        self.playback.start(self._text, self._speed)
        self._started = True
        path, config = self.path, self.config
        path.latency_s = microphone.latency_s
        recent: deque[Cleaned] = deque(maxlen=config.handover_windows)
        probabilities: deque[float] = deque(maxlen=max(config.onset_windows, config.strict_windows))
        measures: deque[Explained | None] = deque(maxlen=config.onset_windows)
        incoming = iter(microphone)
        by_model = no_echo = False
        for window in incoming:
            cleaned = path.clean(window)
            if self.playback.ended.is_set():
                path.end(Phase.PLAYED_OUT)
                yield from self._after_the_speech(window, incoming, microphone.latency_s, on_listening)
                return
            learnt = cleaned.explained is not None and cleaned.explained.learnt
            if learnt != by_model:  # Silero's span starts afresh on the other signal
                by_model = learnt
                probabilities.clear()
            recent.append(cleaned)
            probabilities.append(self._vad.hear(cleaned.leftover if by_model else cleaned.aec3)[0])
            measures.append(cleaned.explained)
            cut = cut_in(config, path.phase, probabilities, measures, path.aec3_windows)
            if cut is not None:
                no_echo = path.aligner.measured_lag_s is None
                self._cut_in(cut, on_listening)
                yield from pre_roll(list(recent), by_model, no_echo, config)
                break
        for window in incoming:
            cleaned = path.clean(window)
            yield cleaned.leftover if by_model or no_echo else cleaned.aec3

    def _after_the_speech(
        self, window: Any, incoming: Iterator[Any], latency: float, on_listening: Callable[[], None]
    ) -> Iterator[Any]:
        """The speech played out: the half-duplex guard (the windows that may hold its echo are dropped),
        then the microphone itself, as the half-duplex exchange hands it on: with no echo left there is nothing
        to cancel, while AEC3's output still changes the voice."""
        while self._still_echo(latency):
            next_window = next(incoming, None)
            if next_window is None:
                return
            window = next_window
        self._listening(on_listening)
        yield window
        yield from incoming

    @property
    def aligned_window(self) -> int | None:
        """The window from which the reference is aligned with the echo (None until then)."""
        return self.path.aligned_window

    @property
    def realigned(self) -> int:
        """How often the echo's delay was measured again because of the echo model."""
        return self.path.realigned

    @property
    def cut_in_after_s(self) -> float | None:
        """From the speech's first sound to the user's voice stopping it; None when it played out."""
        far = self.path.far
        if self.barged_at is None or far is None or far.started_at is None:
            return None
        return self.barged_at - far.started_at

    def _cut_in(self, cut: CutIn, on_listening: Callable[[], None]) -> None:
        self.barged_at = self._clock()
        self.playback.stop(STOP_WAIT_S)
        self.path.end(Phase.CUT_IN, self._clock())
        after = self.cut_in_after_s
        self.cut_in = replace(cut, after_ms=None if after is None else round(after * 1000))
        log.info("the user spoke over the speech %.2f s in (by %s): it stopped", after or 0.0, cut.rule.said)
        log.debug("cut-in: %s", self.cut_in.fields())
        self.listening_after_s = None
        on_listening()
