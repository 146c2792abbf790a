"""The parts of converse that need no device: PortAudio shared by two streams, and the half-duplex
rule that drops every window that may hold the agent's own voice."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from mcp_listen.audio.portaudio_lock import PortAudioLock
from mcp_listen.contract.limits import WINDOW_S
from mcp_listen.duplex.config import DEFAULT as CONFIG
from mcp_listen.duplex.exchange import ECHO_TAIL_S, HalfDuplex
from mcp_listen.errors import DeviceLost


def test_one_stream_alone_keeps_out_every_other_and_a_rescan():
    lock = PortAudioLock()
    assert lock.acquire(timeout=0.1)
    assert not lock.acquire(blocking=False)
    assert not lock.shared.acquire(timeout=0.05)
    lock.release()
    assert not lock.locked() and lock.acquire(blocking=False)
    lock.release()


def test_shared_streams_open_together_and_keep_out_a_rescan_until_both_closed():
    lock = PortAudioLock()
    assert lock.shared.acquire(timeout=0.1) and lock.shared.acquire(timeout=0.1)
    assert not lock.acquire(blocking=False)  # a device rescan is skipped meanwhile
    lock.shared.release()
    assert not lock.acquire(blocking=False)
    lock.shared.release()
    assert lock.acquire(blocking=False)
    lock.release()
    with pytest.raises(RuntimeError):
        lock.release()


def test_a_lone_stream_waits_for_the_shared_ones_to_close():
    lock = PortAudioLock()
    lock.shared.acquire()
    threading.Timer(0.1, lock.shared.release).start()
    started = time.monotonic()
    assert lock.acquire(timeout=2)
    assert time.monotonic() - started >= 0.09
    lock.release()


class FakePlayback:
    """Ends when told to, like engine.playback.Playback: `ended`, `error`, `played.ended_at`."""

    def __init__(self) -> None:
        self.ended = threading.Event()
        self.error: BaseException | None = None
        self.played: Any = None
        self.started = self.stopped = False

    def start(self, text: str, speed: float) -> None:
        self.started = True

    def stop(self, wait_s: float) -> None:
        self.stopped = True
        self.ended.set()

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    def end(self, at: float) -> None:
        self.played = SimpleNamespace(ended_at=at)
        self.ended.set()


class Mic:
    """Windows numbered 0.. ; `during(i)` runs before window i is handed out."""

    latency_s = 0.02

    def __init__(self, count: int, during: Any) -> None:
        self.count, self.during = count, during

    def __iter__(self):
        for i in range(self.count):
            self.during(i)
            yield i


def test_windows_are_dropped_while_speaking_and_until_the_echo_has_died_away():
    playback = FakePlayback()
    guard = Mic.latency_s + WINDOW_S + ECHO_TAIL_S

    def during(i: int) -> None:
        if i == 3:
            playback.end(time.monotonic())
        if i == 4:
            time.sleep(guard / 2)  # still within the guard: its sound may be the speech's last
        if i == 5:
            time.sleep(guard)

    turn = HalfDuplex(playback, "Hello.", 1.0)  # type: ignore[arg-type]
    live: list[int] = []
    heard = list(turn.windows(Mic(8, during), lambda: live.append(1)))
    assert playback.started and heard == [5, 6, 7] and live == [1]
    assert turn.listening_after_s is not None and turn.listening_after_s >= guard


def test_a_speech_that_failed_ends_the_turn_with_its_error():
    playback = FakePlayback()

    def during(i: int) -> None:
        if i == 2:
            playback.error = DeviceLost("The speaker stopped taking audio.")
            playback.ended.set()

    with pytest.raises(DeviceLost):
        list(HalfDuplex(playback, "Hello.", 1.0).windows(Mic(5, during), lambda: None))  # type: ignore[arg-type]


def test_leaving_the_turn_early_stops_the_speech_and_never_one_that_did_not_start():
    playback = FakePlayback()
    turn = HalfDuplex(playback, "Hello.", 1.0)  # type: ignore[arg-type]
    turn.close()
    assert not playback.stopped
    windows = turn.windows(Mic(5, lambda i: None), lambda: None)
    assert not playback.started  # a generator: nothing runs until the first window is asked for
    with pytest.raises(StopIteration):
        next(windows)  # every window was the speech's: it never ended
    turn.close()
    assert playback.started and playback.stopped


# ---------------------------------------------------------------- barge-in


class Windows(Mic):
    """Mic's numbered windows as int16 samples (every sample is the number)."""

    def __iter__(self):
        import numpy as np

        for i in super().__iter__():
            yield np.full(512, i, dtype=np.int16)


class MarkedSpeech:
    """A VAD that hears speech in the windows numbered in `speech`."""

    def __init__(self, speech: set[int]) -> None:
        self.speech = speech

    def reset(self) -> None: ...

    def hear(self, window: Any, run: bool = True) -> tuple[float, float]:
        return (1.0 if int(window[0]) in self.speech else 0.0), -30.0


class KeepsNear:
    """A canceller that takes nothing out and remembers each reference it was handed."""

    def __init__(self) -> None:
        self.references: list[Any] = []
        self.resets = 0

    def clean(self, near: Any, far: Any) -> Any:
        self.references.append(far)
        return near

    def reset(self) -> None:
        self.resets += 1


def _speaking_for(playback: FakePlayback, seconds: float, level: int = 1) -> Any:
    """The speaker opens: `playback.on_open` taps it, and its first block (every sample `level`) was played
    `seconds` ago."""
    import numpy as np

    speaker = SimpleNamespace(device_rate=16000, tap=None)
    playback.on_open(speaker)  # type: ignore[attr-defined]
    speaker.tap(np.full(16000 * 5, level, dtype=np.int16), time.monotonic() - seconds, False)
    return speaker


def _speaks_until(playback: FakePlayback, end: int, level: int = 1) -> Callable[[int], None]:
    """The windows' hook: the speaker opens at window 0 (its samples at `level`), and the speech ends (a second
    ago) at window `end`."""

    def at(i: int) -> None:
        if i == 0:
            _speaking_for(playback, 0.0, level)
        if i == end:
            playback.end(time.monotonic() - 1.0)

    return at


def _settled_window() -> int:
    """The first window from which a barge-in counts when every reference holds sound: a second's worth
    to measure the delay, then SETTLE_S."""
    ALIGN_SAMPLES, SETTLE_S = CONFIG.delay.align_samples, CONFIG.settle_s

    return -(-ALIGN_SAMPLES // 512) + round(SETTLE_S / WINDOW_S)


def test_the_user_talking_over_the_speech_stops_it_and_their_words_come_first_with_the_pre_roll():
    import math

    from mcp_listen.duplex.barge import BargeIn

    ONSET_PROBABILITY, ONSET_WINDOWS, PRE_ROLL_WINDOWS = (
        CONFIG.onset_probability,
        CONFIG.onset_windows,
        CONFIG.handover_windows,
    )

    playback = FakePlayback()
    onset = _settled_window() + 20
    speech = set(range(onset, onset + 30))

    def during(i: int) -> None:
        if i == 0:
            _speaking_for(playback, 1.0)

    canceller = KeepsNear()
    turn = BargeIn(playback, "Hello.", 1.0, MarkedSpeech(speech), canceller)  # type: ignore[arg-type]
    live: list[int] = []
    heard = [int(w[0]) for w in turn.windows(Windows(onset + 40, during), lambda: live.append(1))]
    # no echo (headphones): stopped once enough of the span is speech for the average to reach the bar
    cut_at = onset + math.ceil(ONSET_PROBABILITY * ONSET_WINDOWS) - 1
    assert playback.stopped and live == [1]
    assert heard == list(range(cut_at - PRE_ROLL_WINDOWS + 1, onset + 40))  # from before the first syllable on
    assert turn.cut_in_after_s is not None and turn.cut_in_after_s >= 1.0
    assert canceller.resets == 0  # constant windows: no echo found, the search lead is kept


def test_a_short_sound_while_speaking_or_a_long_one_in_the_first_moments_does_not_stop_the_speech():
    from mcp_listen.duplex.barge import BargeIn

    ALIGN_SAMPLES, ONSET_WINDOWS = CONFIG.delay.align_samples, CONFIG.onset_windows

    playback = FakePlayback()
    aligned = -(-ALIGN_SAMPLES // 512)  # the delay search's second: nothing counts before its end
    settled = _settled_window()
    early = set(range(5, aligned - 1))
    short = ONSET_WINDOWS - 1  # under the span: a syllable of residual echo, a cough
    blips = set(range(settled + 5, settled + 5 + short)) | set(range(settled + 20, settled + 20 + short))
    end = settled + 40

    during = _speaks_until(playback, end)
    turn = BargeIn(playback, "Hello.", 1.0, MarkedSpeech(early | blips), KeepsNear())  # type: ignore[arg-type]
    heard = [int(w[0]) for w in turn.windows(Windows(end + 5, during), lambda: None)]
    assert not playback.stopped and turn.cut_in_after_s is None
    assert heard == list(range(end, end + 5))  # played out: the half-duplex guard was long over


class ModelledEcho:
    """An echo model that takes nothing out and says the windows numbered in `user` are what the echo does not
    explain (the user talking over it); every other window is the echo alone. Learnt from window `learnt_from`
    on; `runs_away_at` windows make its guard reset it."""

    def __init__(
        self, user: set[int] = frozenset(), learnt_from: int = 0, runs_away_at: set[int] = frozenset()
    ) -> None:  # type: ignore[assignment]
        self.user, self.learnt_from, self.runs_away_at, self.resets = user, learnt_from, runs_away_at, 0

    def process(self, near: Any, far: Any) -> tuple[Any, Any]:
        from mcp_listen.duplex.doubletalk import Explained

        i = int(near[0])
        self.resets += i in self.runs_away_at
        learnt = i >= self.learnt_from and not any(i - 20 < r <= i for r in self.runs_away_at)
        return near, Explained(-2.0 if i in self.user else -25.0, -25.0, 0.0, learnt)

    def learn(self, near: Any, far: Any) -> None: ...

    def reset(self) -> None: ...


class FoundEcho:
    """An Aligner that finds an echo once it has had `windows` windows (the constant test windows hold none a
    correlation could find). Here windows come faster than real time, so the stream's clock moves at each
    and the turn restarts the measurement on the windows it kept (duplex/path.py): this one measures
    nothing, so it keeps counting, each window once."""

    made = 0

    def __init__(self, windows: int) -> None:
        SEARCH_LEAD_S = CONFIG.delay.search_lead_s

        self.lead_s, self.measured_lag_s, self.done, self._windows = SEARCH_LEAD_S, None, False, windows
        self._seen: set[int] = set()
        FoundEcho.made += 1

    @property
    def collected_windows(self) -> int:
        return len(self._seen)

    def restart(self) -> None: ...

    def add(self, near: Any, far: Any) -> bool:
        if self.done:
            return False
        self._seen.add(int(near[0]))
        if len(self._seen) == self._windows:
            self.done, self.measured_lag_s = True, 0.05
            return True
        return False


LOUD = 3000
"""Played samples loud enough to count as speech for AEC3's suppression (BargeInConfig.loud_reference_db)."""


class TakesOutTheAgent(KeepsNear):
    """A canceller that has learnt the path from the start: it keeps only every window's first sample (its
    number; 27 dB down), but those numbered in `user` (the user talking over the agent, left whole)."""

    def __init__(self, user: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        super().__init__()
        self.user = user

    def clean(self, near: Any, far: Any) -> Any:
        super().clean(near, far)
        if int(near[0]) in self.user:
            return near
        out = near.copy()
        out[1:] = 0
        return out


def _turn_with_echo(
    playback: FakePlayback,
    speech: set[int],
    model: ModelledEcho,
    windows: int,
    canceller: Any = None,
    again: Callable[[], Any] = lambda: FoundEcho(10**6),
) -> Any:
    """The turn, its first delay measurement done after `windows` windows, those measured again made by `again`."""
    from mcp_listen.duplex.barge import BargeIn

    canceller = canceller or KeepsNear()
    first = iter([FoundEcho(windows)])
    aligners = lambda: next(first, None) or again()  # noqa: E731
    return BargeIn(playback, "Hello.", 1.0, MarkedSpeech(speech), canceller, model, aligners=aligners)  # type: ignore[arg-type]


def test_speech_the_echo_model_explains_does_not_stop_the_speech_and_the_user_it_cannot_explain_does():
    """Silero hears speech all along (the agent's own voice, left over by the canceller): the learnt model
    explains it, so it plays on. Then the user, whom the model cannot explain: it stops at once."""
    settled = _settled_window()
    end = settled + 60
    speech = set(range(end + 5))

    playback = FakePlayback()
    echo_only = _turn_with_echo(playback, speech, ModelledEcho(set(range(10, 20))), settled)
    heard = [int(w[0]) for w in echo_only.windows(Windows(end + 5, _speaks_until(playback, end)), lambda: None)]
    assert not playback.stopped and echo_only.cut_in_after_s is None and echo_only.realigned == 0
    assert heard == list(range(end, end + 5))

    playback = FakePlayback()
    user = set(range(settled + 30, settled + 40))
    user_talks = _turn_with_echo(playback, speech, ModelledEcho(user), settled)
    heard = [int(w[0]) for w in user_talks.windows(Windows(end + 5, _speaks_until(playback, end)), lambda: None)]
    cut_at = settled + 30  # the first window the model cannot explain lifts the average rise over the bar
    assert playback.stopped and heard == list(range(cut_at - CONFIG.handover_windows + 1, end + 5))


class Silences(KeepsNear):
    """A canceller that takes everything out."""

    def clean(self, near: Any, far: Any) -> Any:
        super().clean(near, far)
        return near * 0


def test_after_a_speech_nobody_cut_into_the_answer_is_the_microphone_itself_not_the_canceller_s_output():
    """Played out: the echo's windows are dropped, then every window is the microphone's own, as in the
    half-duplex turn (nothing is left to cancel, and the canceller would still change the voice)."""
    from mcp_listen.duplex.barge import BargeIn

    end = 40
    playback = FakePlayback()

    during = _speaks_until(playback, end)
    turn = BargeIn(
        playback, "Hello.", 1.0, MarkedSpeech(set()), Silences(), ModelledEcho(), aligners=lambda: FoundEcho(10**6)
    )  # type: ignore[arg-type]
    heard = [int(w[0]) for w in turn.windows(Windows(end + 5, during), lambda: None)]
    assert heard == list(range(end, end + 5)) and not playback.stopped


def test_until_the_model_has_learnt_or_after_it_ran_away_only_the_stricter_rule_on_aec3_alone_decides():
    """The model is unlearnt, or runs away once learnt and the delay is measured again: speech AEC3 leaves
    that the double-talk rule would take (ONSET_WINDOWS long) stops nothing, a stretch past STRICT_WINDOWS
    does."""
    import math

    settled = _settled_window()
    end = settled + 200

    def run(speech: set[int], model: ModelledEcho, canceller: Any = None) -> tuple[FakePlayback, Any, list[int]]:
        playback = FakePlayback()

        during = _speaks_until(playback, end, LOUD)
        again = lambda: FoundEcho(32)  # noqa: E731
        turn = _turn_with_echo(playback, speech, model, 32, canceller or TakesOutTheAgent(speech), again)
        return playback, turn, [int(w[0]) for w in turn.windows(Windows(end + 5, during), lambda: None)]

    short = set(range(settled + 5, settled + 5 + CONFIG.strict_windows - 2))
    playback, turn, _ = run(short, ModelledEcho(short, learnt_from=10**6))
    assert not playback.stopped and turn.realigned >= 1  # never learnt: the delay measured again

    ran_away = settled + 100
    after = set(range(ran_away + 2, ran_away + 2 + CONFIG.onset_windows + 2))
    playback, turn, _ = run(after, ModelledEcho(after, runs_away_at={ran_away}))
    assert not playback.stopped and turn.realigned == 1  # measured again, the rule on AEC3 alone meanwhile

    long = set(range(settled + 5, settled + 5 + CONFIG.strict_windows + 10))  # the user goes on through the pause
    playback, turn, heard = run(long, ModelledEcho(long, learnt_from=10**6))
    assert playback.stopped and heard[-1] == end + 4
    cut_at = settled + 5 + math.ceil(CONFIG.strict_probability * CONFIG.strict_windows) - 1
    assert heard[0] == cut_at - CONFIG.handover_windows + 1

    playback, turn, _ = run(long, ModelledEcho(long, learnt_from=10**6), KeepsNear())
    assert not playback.stopped  # AEC3 never took the agent's voice out: its output proves nothing


def test_the_rule_on_aec3_alone_counts_only_windows_heard_once_aec3_has_learnt_the_path():
    """Silero heard speech in AEC3's output from the delay's measurement on (the agent's own voice, before AEC3
    learnt the path) up to well past SETTLE_S: the speech plays on. Speech that begins once AEC3 takes the echo
    out stops it when the span of STRICT_WINDOWS after that point holds enough of it, not before."""
    import math

    settled = _settled_window()
    end = settled + 200
    unlearnt = ModelledEcho(learnt_from=10**6)

    def run(speech: set[int], canceller: Any) -> tuple[FakePlayback, list[int]]:
        playback = FakePlayback()
        turn = _turn_with_echo(playback, speech, unlearnt, 32, canceller, lambda: FoundEcho(32))
        during = _speaks_until(playback, end, LOUD)
        return playback, [int(w[0]) for w in turn.windows(Windows(end + 5, during), lambda: None)]

    agent_left = set(range(32, settled + 3))  # AEC3 left the agent's voice until just before SETTLE_S ran out
    playback, _ = run(agent_left, TakesOutTheAgent(agent_left))
    assert not playback.stopped

    user = set(range(settled + 20, settled + 40))
    playback, heard = run(user, TakesOutTheAgent(user))
    assert playback.stopped
    assert (
        heard[0]
        == settled + 20 + math.ceil(CONFIG.strict_probability * CONFIG.strict_windows) - CONFIG.handover_windows
    )


def test_the_delay_of_an_echo_is_measured_and_the_reference_then_leads_it_just_enough():
    import numpy as np

    from mcp_listen.duplex.echo import Aligner, echo_lag_s

    ALIGN_SAMPLES, ALIGNED_LEAD_S, SEARCH_LEAD_S = (
        CONFIG.delay.align_samples,
        CONFIG.delay.aligned_lead_s,
        CONFIG.delay.search_lead_s,
    )

    rng = np.random.default_rng(7)
    played = (rng.standard_normal(3 * ALIGN_SAMPLES) * 3000).astype(np.int16)
    lag = 1600  # the echo 100 ms behind the reference taken SEARCH_LEAD_S ahead
    near = np.concatenate([np.zeros(lag, np.int16), played[:-lag]]) // 2
    assert echo_lag_s(near[:ALIGN_SAMPLES], played[:ALIGN_SAMPLES]) == lag / 16000
    aligner, changed = Aligner(), []
    for start in range(0, 2 * ALIGN_SAMPLES, 512):
        changed.append(aligner.add(near[start : start + 512], played[start : start + 512]))
    assert changed.count(True) == 1 and aligner.done
    assert abs(aligner.lead_s - (SEARCH_LEAD_S + ALIGNED_LEAD_S - 0.1)) < 1e-9
    quiet = Aligner()  # headphones: no echo in what the microphone hears
    for start in range(0, 2 * ALIGN_SAMPLES, 512):
        quiet.add(rng.integers(-50, 50, 512).astype(np.int16), played[start : start + 512])
    assert quiet.done and quiet.measured_lag_s is None and quiet.lead_s == SEARCH_LEAD_S


def test_a_second_with_no_echo_found_is_taken_for_headphones_only_when_the_microphone_was_quiet():
    """Sound the speech's echo cannot be found in (its delay past the search, or the user) is no proof of
    headphones: the delay is measured again on the next second, and the echo is then found."""
    import numpy as np

    from mcp_listen.audio.levels import level_db
    from mcp_listen.duplex.echo import Aligner

    ALIGN_SAMPLES, QUIET_DB = CONFIG.delay.align_samples, CONFIG.delay.quiet_db

    rng = np.random.default_rng(11)
    played = (rng.standard_normal(4 * ALIGN_SAMPLES) * 3000).astype(np.int16)
    unrelated = (rng.standard_normal(ALIGN_SAMPLES) * 3000).astype(np.int16)
    assert level_db(unrelated) > QUIET_DB
    lag = 800
    echo = np.concatenate([np.zeros(lag, np.int16), played[:-lag]]) // 2
    near = np.concatenate([unrelated, echo[ALIGN_SAMPLES:]])
    aligner, changed = Aligner(), []
    for start in range(0, ALIGN_SAMPLES, 512):
        changed.append(aligner.add(near[start : start + 512], played[start : start + 512]))
    assert not aligner.done and aligner.measured_lag_s is None and not any(changed)  # loud, no echo: not decided
    for start in range(ALIGN_SAMPLES, 3 * ALIGN_SAMPLES, 512):
        changed.append(aligner.add(near[start : start + 512], played[start : start + 512]))
    assert aligner.done and aligner.measured_lag_s == lag / 16000 and changed.count(True) == 1


def test_the_reference_is_what_was_played_when_the_window_was_heard_led_by_the_lead():
    import numpy as np

    from mcp_listen.duplex.echo import FarEnd

    lead = 0.08
    far = FarEnd(16000)
    assert not far.reference(time.monotonic(), lead).any()  # nothing played yet: silence
    start = time.monotonic()
    far.played(np.arange(16000, dtype=np.int16), start, False)
    far.played(np.arange(16000, 32000, dtype=np.int16), start + 1.0, False)
    ref = far.reference(start + 0.5 - lead, lead)
    assert abs(int(ref[0]) - 8000) <= 40 and len(ref) == 512  # the resampler's delay, nothing more
    ahead = far.reference(start - lead - 0.01, lead)
    assert not ahead[:150].any() and ahead[-100:].any()
    assert not far.reference(start + 10, lead).any()  # after the speech: silence


def test_a_block_handed_over_after_the_device_ran_dry_is_heard_after_the_gap():
    """Piper took a second over the next sentence: the device played nothing meanwhile, so the next block is
    heard from when it was handed over (less GAP_MARGIN_S), not right after the first piece; blocks handed
    over while the device still held sound follow back to back."""
    import numpy as np

    from mcp_listen.duplex.echo import FarEnd

    GAP_MARGIN_S = CONFIG.delay.gap_margin_s

    far = FarEnd(16000)
    start = time.monotonic()
    far.played(np.full(8000, 1000, dtype=np.int16), start, False)  # the first piece, 0.5 s
    far.played(np.full(8000, 2000, dtype=np.int16), start + 1.5, True)  # a second of silence before it
    far.played(np.full(8000, 3000, dtype=np.int16), start + 1.7, False)  # handed over while the device was busy
    assert not far.reference(start + 0.6, 0.0).any() and not far.reference(start + 1.4, 0.0).any()
    second = start + 1.5 - GAP_MARGIN_S
    assert abs(int(np.median(far.reference(second + 0.1, 0.0))) - 2000) <= 40
    assert abs(int(np.median(far.reference(second + 0.6, 0.0))) - 3000) <= 40


def test_a_block_handed_over_late_while_the_device_still_played_follows_back_to_back():
    """A busy machine kept the speaker's writer waiting past the end of what it had handed over, but the
    device's buffer played on (no underflow): the next block is heard right after the last, and the
    reference holds no gap the echo never had (one did: it trailed the echo and the model never learnt)."""
    import numpy as np

    from mcp_listen.duplex.echo import FarEnd

    far = FarEnd(16000)
    start = time.monotonic()
    far.played(np.full(8000, 1000, dtype=np.int16), start, False)  # 0.5 s
    far.played(np.full(8000, 2000, dtype=np.int16), start + 0.55, False)  # the writer 50 ms late
    assert abs(int(np.median(far.reference(start + 0.5, 0.0, 256))) - 2000) <= 40
    assert abs(int(np.median(far.reference(start + 0.99, 0.0, 160))) - 2000) <= 40
    assert not far.reference(start + 1.01, 0.0).any()  # nothing after the second second's end
    assert far.gaps == 0
    far.played(np.full(8000, 3000, dtype=np.int16), start + 1.5, True)  # the device ran dry: a gap, counted
    assert far.gaps == 1 and not far.reference(start + 1.1, 0.0).any()


def test_a_gap_in_the_speech_has_the_echo_s_delay_measured_afresh():
    """The device ran dry and plays again (the sound server buffers afresh: the echo's delay moved). Before the
    delay is measured, the measurement starts over on sound after the gap; once measured, it is measured
    again beside the one in use. A late block the device did not run dry before changes nothing."""
    import numpy as np

    from mcp_listen.duplex.barge import BargeIn

    clock = SimpleNamespace(now=1000.0)
    parts = {"aligners": lambda: FoundEcho(20), "clock": lambda: clock.now}

    def aligners_made(dry: bool) -> int:
        playback, speaker = FakePlayback(), SimpleNamespace(device_rate=16000, tap=None)
        block = np.arange(1600, dtype=np.int16) % 3000 + 1  # 0.1 s

        def during(i: int) -> None:
            clock.now = 1000.0 + (i + 1) * WINDOW_S
            if i == 0:
                playback.on_open(speaker)  # type: ignore[attr-defined]
            if i in (0, 10, 40):  # each block handed over after the last one ended
                speaker.tap(np.tile(block, 30 if i == 40 else 1), clock.now, dry and i > 0)

        FoundEcho.made = 0
        turn = BargeIn(playback, "Hello.", 1.0, MarkedSpeech(set()), KeepsNear(), ModelledEcho(), **parts)  # type: ignore[arg-type]
        list(turn.windows(Windows(80, during), lambda: None))
        return FoundEcho.made

    assert aligners_made(dry=False) == 1
    assert aligners_made(dry=True) == 3  # the first, afresh after the gap at window 10, again after window 40


def test_once_the_delay_is_measured_an_earlier_window_arrival_no_longer_moves_the_reference():
    """On the test rig the earliest arrival of a window still crept by a fraction of a millisecond through a
    turn: each creep shifted the reference under a learnt echo path. Measured, the clock stays."""
    import numpy as np

    from mcp_listen.duplex.barge import BargeIn

    clock = SimpleNamespace(now=1000.0)
    parts = {"aligners": lambda: FoundEcho(20), "clock": lambda: clock.now}

    def references(early_at: int) -> list[Any]:
        playback = FakePlayback()

        def during(i: int) -> None:
            clock.now = 1000.0 + (i + 1) * WINDOW_S + (0.0 if i == early_at else 0.002)
            if i == 0:
                speaker = SimpleNamespace(device_rate=16000, tap=None)
                playback.on_open(speaker)  # type: ignore[attr-defined]
                speaker.tap(np.arange(16000 * 3, dtype=np.int16) % 3000, clock.now, False)

        canceller = KeepsNear()
        turn = BargeIn(playback, "Hello.", 1.0, MarkedSpeech(set()), canceller, ModelledEcho(), **parts)  # type: ignore[arg-type]
        list(turn.windows(Windows(60, during), lambda: None))
        return canceller.references

    steady, crept = references(early_at=10**6), references(early_at=40)
    assert all(np.array_equal(a, b) for a, b in zip(steady, crept, strict=True))
    assert not np.array_equal(references(early_at=10)[15], steady[15])  # before it is measured, the clock moves


class TaughtEcho(ModelledEcho):
    """ModelledEcho that keeps what it is taught: (the window, its reference) pairs."""

    def __init__(self) -> None:
        super().__init__()
        self.taught: list[tuple[Any, Any]] = []

    def learn(self, near: Any, far: Any) -> None:
        self.taught.append((near, far))


def test_a_window_clock_that_moves_while_the_delay_is_measured_leaves_one_delay_in_what_is_measured_and_taught():
    """On a busy machine the first windows come late, and the stream's clock moves (1-8 ms on the test rig)
    when one first comes on time, about 0.6 s into the speech. The references collected before were taken on
    the old clock: the delay is measured on the windows kept, their references taken on the moved clock, and
    the echo model is taught every window of the second at that one delay."""
    import numpy as np
    import soxr

    from mcp_listen.duplex.barge import BargeIn

    ALIGNED_LEAD_S = CONFIG.delay.aligned_lead_s
    clock = SimpleNamespace(now=1000.0)
    played = (np.random.default_rng(5).standard_normal(16000 * 4) * 3000).astype(np.int16)
    heard = np.asarray(soxr.ResampleStream(16000, 16000, 1, dtype="int16", quality="MQ").resample_chunk(played))
    delay = 640  # the echo 40 ms behind the speech
    echo = np.concatenate([np.zeros(delay, np.int16), heard])
    playback, model = FakePlayback(), TaughtEcho()

    class EchoWindows(Mic):
        def __iter__(self):
            for i in range(self.count):
                late = 0.003 if i < 20 else 0.0  # the clock moves at window 20
                clock.now = 1000.0 + (i + 1) * WINDOW_S + Mic.latency_s + late
                if i == 0:
                    speaker = SimpleNamespace(device_rate=16000, tap=None)
                    playback.on_open(speaker)  # type: ignore[attr-defined]
                    speaker.tap(played, 1000.0, False)  # heard from the stream's first sample on
                yield echo[i * 512 : (i + 1) * 512]

    turn = BargeIn(playback, "Hello.", 1.0, MarkedSpeech(set()), KeepsNear(), model, clock=lambda: clock.now)  # type: ignore[arg-type]
    list(turn.windows(EchoWindows(40, lambda i: None), lambda: None))

    assert turn.path.aligner.measured_lag_s is not None and turn.aligned_window is not None
    lead = round(ALIGNED_LEAD_S * 16000)
    taught = [(near, far) for near, far in model.taught[: len(model.taught) // CONFIG.replay_passes] if near.any()]
    assert len(taught) >= 25  # the second before the delay was measured, the clock's move inside it
    lags = {int(np.argmax(np.correlate(near.astype(float), far.astype(float), "full"))) - 511 for near, far in taught}
    assert lags == {lead}, lags  # every taught window's echo just behind its reference


class KeptWindows:
    """An Aligner that never finds the echo and keeps the numbers of the windows of its measurement under way."""

    def __init__(self) -> None:
        SEARCH_LEAD_S = CONFIG.delay.search_lead_s

        self.lead_s, self.measured_lag_s, self.done, self.kept = SEARCH_LEAD_S, None, False, []

    @property
    def collected_windows(self) -> int:
        return len(self.kept)

    def restart(self) -> None:
        self.kept = []

    def add(self, near: Any, far: Any) -> bool:
        if far.any():
            self.kept.append(int(near[0]))
        return False


def test_a_measurement_begun_afresh_after_a_gap_takes_no_window_from_before_it_when_the_clock_moves():
    """The device ran dry at window 10 (the echo's delay may have moved), so the delay is measured afresh from
    there; when the clock then moves (window 15 comes on time, those before it 3 ms late), the measurement
    starts again on its own windows, 10 on, their references on the moved clock, and none from before the gap."""
    import numpy as np

    from mcp_listen.duplex.barge import BargeIn

    made: list[KeptWindows] = []
    clock = SimpleNamespace(now=1000.0)
    parts = {"aligners": lambda: made.append(KeptWindows()) or made[-1], "clock": lambda: clock.now}
    playback, speaker = FakePlayback(), SimpleNamespace(device_rate=16000, tap=None)

    def during(i: int) -> None:
        clock.now = 1000.0 + (i + 1) * WINDOW_S + (0.003 if i < 15 else 0.0)
        if i == 0:
            playback.on_open(speaker)  # type: ignore[attr-defined]
        if i in (0, 10):
            speaker.tap(np.full(1600 if i == 0 else 48000, 500, dtype=np.int16), clock.now, i == 10)  # 0.1 s, 3 s

    turn = BargeIn(playback, "Hello.", 1.0, MarkedSpeech(set()), KeepsNear(), ModelledEcho(), **parts)  # type: ignore[arg-type]
    list(turn.windows(Windows(20, during), lambda: None))
    assert len(made) == 2  # the first measurement, and the one begun afresh after the gap
    assert made[-1].kept and min(made[-1].kept) >= 10 and made[-1].kept[-1] == 19, made[-1].kept


def test_a_stopped_speech_leaves_no_reference_beyond_what_was_heard():
    import numpy as np

    from mcp_listen.duplex.echo import FarEnd

    far = FarEnd(16000)
    start = time.monotonic()
    far.played(np.full(32000, 1000, dtype=np.int16), start, False)  # 2 s handed to the device
    far.cut(start + 0.5)  # stopped half a second in: the rest sat in its buffer
    assert far.reference(start + 0.4, 0.0).any()
    assert not far.reference(start + 0.6, 0.0).any()


@pytest.mark.parametrize(
    ("windows", "user"),
    [
        ([(-22.0, -3.0), (-21.0, -2.0)], False),  # the echo alone, explained as usual
        ([(-5.0, -2.0), (-4.0, -1.0)], True),  # a user as loud as the echo
        ([(0.4, 3.0), (-0.6, 2.0)], True),  # a user far louder than the echo: about what the microphone heard
        ([(-6.0, -8.5), (-5.0, -7.5)], True),  # a user beginning softly under an echo louder than them
        ([(-12.0, -8.5), (-11.0, -7.5)], False),  # the faint end of a word: a smaller rise, as quiet
        ([(0.2, -1.3), (-1.8, -7.3)], False),  # a prediction gone wrong (crept.wav): as much as the microphone
        ([(2.4, 7.4), (-5.0, -1.0)], False),  # a prediction adding sound of its own
    ],
)
def test_the_double_talk_rule_takes_a_voice_the_echo_model_cannot_explain_and_nothing_else(windows, user):
    """(unexplained dB, level dB) of two windows over a learnt echo-alone baseline of -25 dB, Silero hearing
    speech in both."""
    from collections import deque

    from mcp_listen.duplex.cut_in import talks_over_the_echo
    from mcp_listen.duplex.doubletalk import Explained

    measures = deque(Explained(unexplained, -25.0, level, learnt=True) for unexplained, level in windows)
    assert talks_over_the_echo(deque([0.9, 0.9]), measures, echo=True) is user
