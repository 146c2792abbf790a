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
