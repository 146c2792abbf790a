"""The parts of converse that need no device: PortAudio shared by two streams, and the half-duplex
rule that drops every window that may hold the agent's own voice."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from mcp_listen.audio.portaudio_lock import PortAudioLock
from mcp_listen.engine.turn import ECHO_TAIL_S, WINDOW_S, SpeechFirst
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

    turn = SpeechFirst(playback, "Hello.", 1.0)  # type: ignore[arg-type]
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
        list(SpeechFirst(playback, "Hello.", 1.0).windows(Mic(5, during), lambda: None))  # type: ignore[arg-type]


def test_leaving_the_turn_early_stops_the_speech_and_never_one_that_did_not_start():
    playback = FakePlayback()
    turn = SpeechFirst(playback, "Hello.", 1.0)  # type: ignore[arg-type]
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


def _speaking_for(playback: FakePlayback, seconds: float) -> Any:
    """The speaker opens: `playback.on_open` taps it, and its first block was played `seconds` ago."""
    import numpy as np

    speaker = SimpleNamespace(device_rate=16000, tap=None)
    playback.on_open(speaker)  # type: ignore[attr-defined]
    speaker.tap(np.ones(16000 * 5, dtype=np.int16), time.monotonic() - seconds)
    return speaker


def _settled_window() -> int:
    """The first window from which a barge-in counts when every reference holds sound: a second's worth
    to measure the delay, then SETTLE_S."""
    from mcp_listen.audio.echo import ALIGN_SAMPLES
    from mcp_listen.engine.barge import SETTLE_S

    return -(-ALIGN_SAMPLES // 512) + round(SETTLE_S / WINDOW_S)


def test_the_user_talking_over_the_speech_stops_it_and_their_words_come_first_with_the_pre_roll():
    from mcp_listen.engine.barge import ONSET_WINDOWS, PRE_ROLL_WINDOWS, BargeIn

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
    cut_at = onset + ONSET_WINDOWS // 2 - 1  # half the span in speech: the average reaches 0.5
    assert playback.stopped and live == [1]
    assert heard == list(range(cut_at - PRE_ROLL_WINDOWS + 1, onset + 40))  # from before the first syllable on
    assert turn.cut_in_after_s is not None and turn.cut_in_after_s >= 1.0
    assert canceller.resets == 0  # constant windows: no echo found, the search lead is kept


def test_a_short_sound_while_speaking_or_a_long_one_in_the_first_moments_does_not_stop_the_speech():
    from mcp_listen.engine.barge import ONSET_WINDOWS, BargeIn

    playback = FakePlayback()
    settled = _settled_window()
    early = set(range(5, 5 + ONSET_WINDOWS + 5)) | set(range(settled - 20, settled - ONSET_WINDOWS))
    short = ONSET_WINDOWS // 2 - 1  # under half the span: a syllable of residual echo, a cough
    blips = set(range(settled + 5, settled + 5 + short)) | set(range(settled + 20, settled + 20 + short))
    end = settled + 40

    def during(i: int) -> None:
        if i == 0:
            _speaking_for(playback, 0.0)
        if i == end:
            playback.end(time.monotonic() - 1.0)

    turn = BargeIn(playback, "Hello.", 1.0, MarkedSpeech(early | blips), KeepsNear())  # type: ignore[arg-type]
    heard = [int(w[0]) for w in turn.windows(Windows(end + 5, during), lambda: None)]
    assert not playback.stopped and turn.cut_in_after_s is None
    assert heard == list(range(end, end + 5))  # played out: the half-duplex guard was long over


def test_the_delay_of_an_echo_is_measured_and_the_reference_then_leads_it_just_enough():
    import numpy as np

    from mcp_listen.audio.echo import ALIGN_SAMPLES, ALIGNED_LEAD_S, SEARCH_LEAD_S, Aligner, echo_lag_s

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


def test_the_reference_is_what_was_played_when_the_window_was_heard_led_by_the_lead():
    import numpy as np

    from mcp_listen.audio.echo import FarEnd

    lead = 0.08
    far = FarEnd(16000)
    assert not far.reference(time.monotonic(), lead).any()  # nothing played yet: silence
    start = time.monotonic()
    far.played(np.arange(16000, dtype=np.int16), start)
    far.played(np.arange(16000, 32000, dtype=np.int16), start + 1.0)
    ref = far.reference(start + 0.5 - lead, lead)
    assert abs(int(ref[0]) - 8000) <= 40 and len(ref) == 512  # the resampler's delay, nothing more
    ahead = far.reference(start - lead - 0.01, lead)
    assert not ahead[:150].any() and ahead[-100:].any()
    assert not far.reference(start + 10, lead).any()  # after the speech: silence


def test_a_stopped_speech_leaves_no_reference_beyond_what_was_heard():
    import numpy as np

    from mcp_listen.audio.echo import FarEnd

    far = FarEnd(16000)
    start = time.monotonic()
    far.played(np.full(32000, 1000, dtype=np.int16), start)  # 2 s handed to the device
    far.cut(start + 0.5)  # stopped half a second in: the rest sat in its buffer
    assert far.reference(start + 0.4, 0.0).any()
    assert not far.reference(start + 0.6, 0.0).any()
