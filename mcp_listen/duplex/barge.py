"""One converse exchange with barge-in: the microphone stays live while the agent speaks, each window cleaned
of the echo (path.py), and the user talking over the agent pauses the speech (cut_in.py), then stops it once
their speech is confirmed (confirm.py); their words from the first syllable on are the answer.

The loop: every window goes through the echo path; Silero (a session of this exchange's own, apart from the
listener's) hears what the echo model leaves while it has learnt the path, AEC3's output otherwise (its
span starts afresh when that changes); the cut-in rule judges the phase, those probabilities and the
model's measures. A cut-in pauses the speech: for `confirm_s` a fresh Silero hears the microphone itself (the
agent is quiet) and whisper, when the exchange has it, the words since the onset. Confirmed, the speech stops
and the last `handover_windows` before the pause go to the listener first (pre_roll), then the pause's, so
nothing the user said is lost; not confirmed, it plays on where it paused. After a cut-in the windows are the
leftover while the model decided (AEC3's suppressor damps the user while the agent still talks), AEC3's
output otherwise. A speech played out with nobody cutting in ends as the half-duplex exchange does
(exchange.py): the windows until its echo has died away are dropped, then the microphone itself is the user's."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from mcp_listen.duplex.config import DEFAULT, BargeInConfig
from mcp_listen.duplex.confirm import Verdict, judge
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
        words: Callable[[Any], str] | None = None,
    ) -> None:
        super().__init__(playback, text, speed, clock)
        self.config = config
        self._vad = vad
        self._words = words
        """whisper on int16 samples (converse); None: Silero alone confirms the user (speak_text)."""
        canceller = canceller or Canceller()
        self.path = EchoPath(config, clock, canceller, echo_model or EchoModel(config.model), aligners)
        self.barged_at: float | None = None
        """The clock's time when the user's speech stopped the agent's; None when it played out."""
        self.cut_in: CutIn | None = None
        """Why it stopped, when the user cut in."""
        self.pauses: list[Verdict] = []
        """Every pause and its verdict: the last one confirmed when the user cut in, the others played on."""
        self.paused_s = 0.0
        """How long the agent was quiet, in all, for pauses that were not the user."""
        self._recent: deque[tuple[Cleaned, float]] = deque(maxlen=config.handover_windows)
        self._probabilities: deque[float] = deque(maxlen=max(config.onset_windows, config.strict_windows))
        self._measures: deque[Explained | None] = deque(maxlen=config.onset_windows)
        self._by_model = False
        playback.on_open = self.path.tap

    def windows(self, microphone: Microphone, on_listening: Callable[[], None]) -> Iterator[Any]:
        """Start the speech; while it plays, look for the user in the cleaned windows, pause it when they seem
        to speak and stop it once that is confirmed; then hand on every window from the start of their speech."""
        self._vad.reset()
        self.playback.start(self._text, self._speed)
        self._started = True
        path = self.path
        path.latency_s = microphone.latency_s
        incoming = iter(microphone)
        handed: list[Any] | None = None
        for window in incoming:
            cleaned = path.clean(window)
            if self.playback.ended.is_set():
                path.end(Phase.PLAYED_OUT)
                yield from self._after_the_speech(window, incoming, microphone.latency_s, on_listening)
                return
            cut = self._judged(cleaned)
            if cut is not None:
                handed = self._paused_for(cut, incoming, on_listening)
                if handed is not None:
                    break
        if handed is None:
            return
        yield from handed
        for window in incoming:
            yield self._handed(path.clean(window))

    def _judged(self, cleaned: Cleaned) -> CutIn | None:
        """Silero on this window (the leftover while the echo model is learnt, AEC3's output otherwise: its
        span starts afresh when that changes), then the cut-in rule."""
        learnt = cleaned.explained is not None and cleaned.explained.learnt
        if learnt != self._by_model:
            self._by_model = learnt
            self._probabilities.clear()
        probability = self._vad.hear(cleaned.leftover if learnt else cleaned.aec3)[0]
        self._recent.append((cleaned, probability))
        self._probabilities.append(probability)
        self._measures.append(cleaned.explained)
        path = self.path
        return cut_in(self.config, path.phase, self._probabilities, self._measures, path.aec3_windows)

    def _paused_for(self, cut: CutIn, incoming: Iterator[Any], on_listening: Callable[[], None]) -> list[Any] | None:
        """Pause the speech, hear `confirm_s` more, and judge (confirm.py): the windows to hand on from the user's
        start when it was them (the speech stopped), None when it plays on."""
        config, path = self.config, self.path
        paused_at = self._clock()
        self.playback.pause()
        path.pause(paused_at)
        no_echo = path.aligner.measured_lag_s is None
        recent = list(self._recent)
        handed = pre_roll([cleaned for cleaned, _ in recent], self._by_model, no_echo, config)
        judged, speech = min(len(handed), cut.span_windows + config.confirm_lead_windows), 0
        self._vad.reset()  # the microphone itself from here: the agent is quiet, nothing to take out
        for count, window in enumerate(incoming):
            handed.append(self._handed(path.clean(window), no_echo))
            judged += 1
            probability = self._vad.hear(window)[0]
            speech += count >= config.confirm_settle_windows and probability >= config.confirm_probability
            if self._clock() - paused_at >= config.confirm_s or self.playback.ended.is_set():
                break
        heard = None if self._words is None else self._words(_joined(handed[-judged:]))
        verdict = judge(speech, heard, self.agent, config.confirm_speech_windows, config.confirm_words)
        verdict = replace(verdict, quiet_ms=round((self._clock() - paused_at) * 1000))
        self.pauses.append(verdict)
        log.debug("pause: %s %s", cut.fields(), verdict.fields())
        if verdict.confirmed:
            self._cut_in(cut, paused_at, on_listening)
            return handed
        self._play_on(verdict, paused_at)
        return None

    def _play_on(self, verdict: Verdict, paused_at: float) -> None:
        """Not the user: the speech plays on from where it paused, every span judged afresh."""
        self.playback.resume()
        self.paused_s += self._clock() - paused_at
        if verdict.words and verdict.own_words == verdict.words:
            self.path.not_headphones()
        self.path.resume(f"not the user ({verdict.reason}): playing on")
        log.info("a sound over the speech was not the user (%s): it plays on", verdict.reason)
        self._vad.reset()
        self._probabilities.clear()
        self._measures.clear()

    def _handed(self, cleaned: Cleaned, no_echo: bool | None = None) -> Any:
        """What the listener is given of a window once the user cut in: what the echo model leaves while it
        decided (or the microphone itself, with no echo), AEC3's output otherwise."""
        if no_echo is None:
            no_echo = self.path.aligner.measured_lag_s is None
        return cleaned.leftover if self._by_model or no_echo else cleaned.aec3

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

    def _cut_in(self, cut: CutIn, paused_at: float, on_listening: Callable[[], None]) -> None:
        """The user's speech is confirmed: the paused speech stops for good; they cut in when it went quiet."""
        self.barged_at = paused_at
        self.playback.stop(STOP_WAIT_S)
        self.path.end(Phase.CUT_IN, paused_at)
        after = self.cut_in_after_s
        self.cut_in = replace(cut, after_ms=None if after is None else round(after * 1000))
        log.info("the user spoke over the speech %.2f s in (by %s, confirmed): it stopped", after or 0.0, cut.rule.said)
        log.debug("cut-in: %s", self.cut_in.fields())
        self.listening_after_s = None
        on_listening()


def _joined(windows: list[Any]) -> Any:
    import numpy as np

    return np.concatenate(windows) if windows else np.zeros(0, np.int16)
