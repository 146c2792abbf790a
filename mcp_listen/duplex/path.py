"""The echo path of one barge-in exchange: each window the microphone hears, with what the speaker played
meanwhile as the reference, through WebRTC's AEC3 (echo.Canceller) and the linear echo model
(doubletalk.EchoModel); and the phase the path is in, which says which cut-in rule counts (cut_in.py).

The phases, in the order an exchange usually meets them (docs/turn-taking.md):

- `waiting`: nothing played yet; the windows pass through.
- `measuring`: the first second of speech measures the echo's delay (echo.Aligner); nothing counts.
- `headphones`: that second found no echo while the microphone was quiet: speech as loud as usual counts.
- `settling`: the delay is measured and the echo model taught that second, but neither the model nor
  AEC3 has learnt the path yet: nothing counts.
- `aec3_counts`: AEC3 takes the echo of loud speech `converged_db` down: the rule on AEC3 alone counts.
- `learnt`: the echo model has learnt the path: the double-talk rule counts.
- `measuring_again`: the model stayed unlearnt for `relearn_s`, ran away, or the speaker ran dry: the
  delay is measured again beside the one in use, which stays until a new one is found.
- `paused`: a cut-in paused the speech while the user's speech is confirmed (confirm.py); nothing counts.
- `cut_in`, `played_out`: the user stopped the speech, or it played to its end.

The phase is worked out from the path's state after every window and changed only in `_enter`, which
logs `old -> new` and why.
"""

from __future__ import annotations

import logging
import statistics
from collections import deque
from collections.abc import Callable
from enum import Enum
from typing import Any, NamedTuple, Protocol

from mcp_listen.audio.levels import level_db
from mcp_listen.contract.limits import SAMPLE_RATE, WINDOW_S
from mcp_listen.duplex.config import BargeInConfig
from mcp_listen.duplex.doubletalk import Explained
from mcp_listen.duplex.echo import Aligner, FarEnd

log = logging.getLogger(__name__)


class Phase(Enum):
    WAITING = "waiting"
    MEASURING = "measuring"
    HEADPHONES = "headphones"
    SETTLING = "settling"
    AEC3_COUNTS = "aec3_counts"
    LEARNT = "learnt"
    MEASURING_AGAIN = "measuring_again"
    PAUSED = "paused"
    CUT_IN = "cut_in"
    PLAYED_OUT = "played_out"


ENDED = (Phase.CUT_IN, Phase.PLAYED_OUT)


class Cleaned(NamedTuple):
    """One window without the echo: AEC3's output, the microphone less the echo model's prediction (the
    leftover), and how much the model left unexplained (None before anything was played)."""

    aec3: Any
    leftover: Any
    explained: Explained | None


class Cleaning(Protocol):
    """An echo canceller (echo.Canceller): a window and what was played meanwhile -> the window without it."""

    def clean(self, near: Any, far: Any) -> Any: ...

    def reset(self) -> None: ...


class Explaining(Protocol):
    """The linear echo model (doubletalk.EchoModel): a window and what was played meanwhile -> the window
    less the predicted echo, and how much of it the prediction left."""

    resets: int

    def process(self, near: Any, far: Any) -> tuple[Any, Explained]: ...

    def learn(self, near: Any, far: Any) -> None: ...

    def reset(self) -> None: ...


class Measuring(Protocol):
    """A measurement of the echo's delay (echo.Aligner)."""

    lead_s: float
    measured_lag_s: float | None
    done: bool

    @property
    def collected_windows(self) -> int: ...

    def restart(self) -> None: ...

    def add(self, near: Any, far: Any) -> bool: ...


class Tapped(Protocol):
    """The open speaker (audio.speaker.Speaker): its rate, and the tap each block it writes goes to."""

    device_rate: int
    tap: Any


class EchoPath:
    """The reference, the delay, AEC3 and the echo model of one exchange, fed from the microphone's thread."""

    def __init__(
        self,
        config: BargeInConfig,
        clock: Callable[[], float],
        canceller: Cleaning,
        echo_model: Explaining,
        aligners: Callable[[], Measuring] | None = None,
    ) -> None:
        self.config = config
        self._clock = clock
        self._canceller = canceller
        self._echo = echo_model
        self._new_aligner: Callable[[], Measuring] = aligners or (lambda: Aligner(config.delay))
        self.far: FarEnd | None = None
        self.latency_s = 0.0
        """The microphone's input latency (set as the exchange starts): a window arrives that long after it
        was heard."""
        self.count = 0
        """Windows cleaned so far."""
        self._recent: deque[tuple[Any, int]] = deque(maxlen=config.replay_windows)
        """The last windows and their numbers: measured again on a moved clock, taught to a fresh model."""
        self._anchor: float | None = None
        """The stream's start on the clock (see clean)."""
        self.aligner: Measuring = self._new_aligner()
        """The delay in use: measured in the first second of speech, or since measured again."""
        self._again: Measuring | None = None
        """The delay being measured again, beside the one in use."""
        self.aligned_window: int | None = None
        """The window from which the reference is aligned with the echo (None until then)."""
        self.realigned = 0
        """How often the delay was measured again because of the echo model (unlearnt, or ran away)."""
        self._gaps = 0
        """The speaker's gaps (FarEnd.gaps) already followed."""
        self._resets = self._unlearnt = 0
        self._was_learnt = self._learnt = False
        self._suppression: deque[float] = deque(maxlen=config.converged_windows)
        """AEC3's output against the microphone (dB) over the last windows of loud speech."""
        self._strict_from: int | None = None
        """The first window the rule on AEC3 alone counts (AEC3 has learnt the path); None until then."""
        self.phase = Phase.WAITING
        self._paused = False
        self._own_words_heard = False
        """A pause heard the agent's own words with no echo found: no quiet second is taken for headphones again."""
        self._why: list[str] = []
        """What happened since the phase last changed, for its log line."""

    def tap(self, speaker: Tapped) -> None:
        """The speaker is open: every block it writes becomes the echo reference."""
        self.far = FarEnd(speaker.device_rate, self.config.delay)
        speaker.tap = self.far.played

    @property
    def aec3_windows(self) -> int | None:
        """Windows heard since the rule on AEC3 alone began to count; None while it does not."""
        return None if self._strict_from is None else self.count - self._strict_from

    def clean(self, window: Any) -> Cleaned:
        """The stream's next window without the echo of what was played while it was heard (the window
        itself twice before anything was played).

        A window can only arrive late, never early, so the earliest arrival less the windows before it is
        the stream's start on this clock; window n was heard from start + (n - 1) windows - the input
        latency. Once the delay is measured that start is kept: it ties the microphone's samples to the
        speaker's, and a start that crept under a learnt path made its prediction add sound."""
        count, self.count = self.count, self.count + 1
        start = self._clock() - count * WINDOW_S
        anchor = start if self._anchor is None else min(self._anchor, start)
        moved = self._anchor is not None and self._anchor - anchor >= 1 / SAMPLE_RATE
        if self._anchor is None or not self.aligner.done:
            self._anchor = anchor
        far = self.far
        if far is None:
            return Cleaned(window, window, None)
        captured_at = self._captured_at(count)
        if far.gaps != self._gaps:
            self._gaps = far.gaps
            self._after_a_gap()
        measured = moved and not self.aligner.done and self._measure_on_the_moved_clock(far)
        reference = far.reference(captured_at, self.aligner.lead_s)
        if measured or self.aligner.add(window, reference) or self._measured_again(window, captured_at, far):
            self._canceller.reset()
            self._suppression.clear()
            self._strict_from = None
            self._teach_echo_model(far)
            self.aligned_window = count
            reference = far.reference(captured_at, self.aligner.lead_s)
            lag = self.aligner.measured_lag_s or 0.0
            self._why.append(f"the echo's delay measured, {lag * 1000:.0f} ms behind the search reference")
        if self.aligned_window is None and self.aligner.done and self._own_words_heard:
            self.aligner = self._new_aligner()  # a quiet second proves no headphones: the echo comes later
        if self.aligned_window is None and self.aligner.done:
            self.aligned_window = count
            quiet = getattr(self.aligner, "microphone_db", None)
            self._why.append("no echo, the microphone quiet" + ("" if quiet is None else f" ({quiet:.0f} dBFS)"))
        self._recent.append((window, count))
        left, explained = self._echo.process(window, reference)
        self._watch(explained, reference)
        clean = self._canceller.clean(window, reference)
        self._follow_aec3(window, clean, reference)
        self._learnt = explained.learnt
        self._enter(self._phase_now())
        return Cleaned(clean, left, explained)

    def end(self, phase: Phase, at: float | None = None) -> None:
        """The speech is over: the user cut in at `at` (what the speaker held beyond it was never heard), or
        it played out."""
        if at is not None and self.far is not None:
            self.far.cut(at)
        self._enter(phase)

    def pause(self, at: float) -> None:
        """A cut-in paused the speech at `at`: what the speaker held beyond it is played again on a resume."""
        if self.far is not None:
            self.far.cut(at)
        self._paused = True
        self._enter(Phase.PAUSED)

    def resume(self, why: str) -> None:
        """The pause was not the user: the speech plays on (the reference follows it as after a gap)."""
        self._paused = False
        self._why.append(why)
        self._enter(self._phase_now())

    def not_headphones(self) -> None:
        """The microphone heard the agent's own words although the first second found no echo (one later than
        the delay is looked for: Bluetooth, HDMI, network sinks): the delay is measured afresh, nothing counting
        meanwhile, instead of taking its voice for the user's at every pause."""
        if self.aligned_window is not None and self.aligner.measured_lag_s is None:
            self._why.append("the agent's own words heard: measuring the echo's delay again")
            self.aligner, self.aligned_window, self._own_words_heard = self._new_aligner(), None, True

    def _phase_now(self) -> Phase:
        """The phase the path's state puts it in (the module's docstring)."""
        if self.phase in ENDED:
            return self.phase
        if self._paused:
            return Phase.PAUSED
        if self.far is None:
            return Phase.WAITING
        if self.aligned_window is None:
            return Phase.MEASURING
        if self._learnt:
            return Phase.LEARNT
        if self.aligner.measured_lag_s is None:
            return Phase.HEADPHONES
        if self._again is not None:
            return Phase.MEASURING_AGAIN
        return Phase.SETTLING if self._strict_from is None else Phase.AEC3_COUNTS

    def _enter(self, phase: Phase) -> None:
        """The one place the phase changes: logs `old -> new` and what led to it (or what happened meanwhile)."""
        why, self._why = "; ".join(self._why), []
        if phase is not self.phase or why:
            log.info("echo path: %s -> %s%s", self.phase.value, phase.value, f" ({why})" if why else "")
        self.phase = phase

    def _captured_at(self, count: int) -> float:
        """When window `count` began to be heard, on the stream's clock as it stands (see clean)."""
        return (self._anchor or 0.0) + (count - 1) * WINDOW_S - self.latency_s

    def _measure_on_the_moved_clock(self, far: FarEnd) -> bool:
        """The stream's clock moved while the delay was being measured (a window came in earlier against its
        number than any before it): the references collected were taken a few ms off, and a second holding
        two delays teaches the model neither. So the measurement starts again on the windows it had
        collected (no older ones), their references taken on the moved clock. True when that completed it."""
        collected = self.aligner.collected_windows
        self.aligner.restart()
        lead = self.aligner.lead_s
        sounding = [(w, r) for w, c in self._recent if (r := far.reference(self._captured_at(c), lead)).any()]
        return any(self.aligner.add(w, r) for w, r in sounding[max(0, len(sounding) - collected) :])

    def _follow_aec3(self, window: Any, clean: Any, reference: Any) -> None:
        """Once AEC3 takes the echo of loud speech `converged_db` down and `settle_s` has passed since the
        delay was measured, the rule on AEC3 alone counts from the next window on (until it is measured again)."""
        aligned, config = self.aligned_window, self.config
        if aligned is None or self._strict_from is not None:
            return
        if level_db(reference) > config.loud_reference_db:
            self._suppression.append(level_db(clean) - level_db(window))
        if len(self._suppression) < config.converged_windows or (self.count - aligned) * WINDOW_S < config.settle_s:
            return
        down = -statistics.median(self._suppression)
        if down >= config.converged_db:
            self._strict_from = self.count
            self._why.append(f"AEC3 takes the echo {down:.0f} dB down")

    def _after_a_gap(self) -> None:
        """The speaker ran dry and plays again: the sound server buffered afresh, and the echo may lag the
        reference by another delay. A delay still being measured starts again on sound after the gap (a
        second that straddles it holds two delays); one measured is measured again beside it."""
        if not self.aligner.done:
            self.aligner = self._new_aligner()
        elif self._again is None:
            self._why.append("the speaker ran dry: measuring the echo's delay again")
            self._again = self._new_aligner()

    def _measured_again(self, window: Any, captured_at: float, far: FarEnd) -> bool:
        """Feed the delay being measured again (its own search reference: the canceller and the model keep
        theirs meanwhile); True once it found the echo and became the delay in use."""
        again = self._again
        if again is None:
            return False
        found = again.add(window, far.reference(captured_at, again.lead_s))
        if again.done:
            self._again = None
            if found:
                self.aligner, self._was_learnt, self._unlearnt = again, False, 0
        return found

    def _watch(self, explained: Explained, reference: Any) -> None:
        """Measure the delay again when the echo model, once learnt, ran away (its guard reset it), or when it
        stays unlearnt for `relearn_s` of speech after the delay was measured (once an exchange): the echo has
        moved. Until a new delay is found the one in use stays."""
        ran_away = self._echo.resets != self._resets
        self._resets = self._echo.resets
        if self.aligned_window is None or self.aligner.measured_lag_s is None or self._again is not None:
            return
        self._was_learnt = self._was_learnt or explained.learnt
        self._unlearnt = 0 if explained.learnt else self._unlearnt + bool(reference.any())
        never = self._unlearnt * WINDOW_S >= self.config.relearn_s and not self.realigned
        if (ran_away and self._was_learnt) or never:
            self._why.append(f"the echo model {'never learnt' if never else 'ran away'}: measuring the delay again")
            self._again, self._was_learnt, self._unlearnt = self._new_aligner(), False, 0
            self.realigned += 1

    def _teach_echo_model(self, far: FarEnd) -> None:
        """A fresh echo model, taught the last second again with the reference at the measured delay."""
        self._echo.reset()
        for _ in range(self.config.replay_passes):
            for window, count in self._recent:
                self._echo.learn(window, far.reference(self._captured_at(count), self.aligner.lead_s))
