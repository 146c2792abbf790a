"""recorder.Microphone and recorder.Tape on numpy blocks, without a sound card.

The Microphone is what `Recorder.open` yields: it pulls the audio thread's blocks from a
queue, resamples them, and hands out 512-sample windows; the watchdog and the stop event
turn into DeviceLost and Cancelled. Here the queue is filled by the test.
"""

from __future__ import annotations

import queue
import threading

import numpy as np
import pytest

from mcp_listen.audio.microphone import Microphone, Tape
from mcp_listen.contract.limits import WINDOW_SAMPLES as WINDOW
from mcp_listen.errors import Cancelled, DeviceLost


def counting_blocks(*sizes: int) -> queue.SimpleQueue:
    """Blocks of the given sizes holding 0, 1, 2, ... across block boundaries."""
    blocks: queue.SimpleQueue = queue.SimpleQueue()
    start = 0
    for size in sizes:
        blocks.put(np.arange(start, start + size, dtype=np.int16))
        start += size
    return blocks


class Doubling:
    """A stand-in resampler: every sample twice (a 2x rate change), so its use is visible."""

    def resample_chunk(self, block: np.ndarray) -> np.ndarray:
        return np.repeat(block, 2)


def pull(microphone: Microphone, count: int) -> list[np.ndarray]:
    windows = []
    for window in microphone:
        windows.append(window.copy())
        if len(windows) == count:
            break
    return windows


def test_blocks_of_any_size_become_contiguous_512_sample_windows():
    microphone = Microphone("dev", counting_blocks(300, 900, 100, 1, 2000), None, threading.Event())
    windows = pull(microphone, 6)
    assert [len(w) for w in windows] == [WINDOW] * 6
    assert np.array_equal(np.concatenate(windows), np.arange(6 * WINDOW, dtype=np.int16))


def test_the_resampler_runs_on_every_block_before_windowing():
    microphone = Microphone("dev", counting_blocks(256, 256, 256, 256), Doubling(), threading.Event())
    windows = pull(microphone, 4)
    assert np.array_equal(np.concatenate(windows), np.repeat(np.arange(1024, dtype=np.int16), 2))


def test_a_set_stop_event_cancels_the_iteration():
    stop = threading.Event()
    stop.set()
    with pytest.raises(Cancelled):
        pull(Microphone("dev", counting_blocks(512), None, stop), 1)


def test_no_blocks_is_a_lost_device_not_a_hang():
    with pytest.raises(DeviceLost, match="stopped delivering audio"):
        pull(Microphone("dev", counting_blocks(), None, threading.Event()), 1)


def test_audio_stopping_after_it_flowed_is_a_lost_device():
    microphone = Microphone("dev", counting_blocks(512, 512), None, threading.Event())
    with pytest.raises(DeviceLost):
        pull(microphone, 3)


def test_the_tape_keeps_whole_windows_and_cuts_at_the_ceiling():
    tape = Tape(1000)  # 1.95 windows
    assert tape.add(np.ones(WINDOW, dtype=np.int16)) is True and not tape.full
    assert tape.add(np.ones(WINDOW, dtype=np.int16)) is False and tape.full  # past the ceiling: not listened to
    recording = tape.recording("ceiling")
    assert len(recording.samples) == 1000 and recording.stopped_by == "ceiling"


def test_a_stop_reason_ends_the_tape_at_the_last_window():
    tape = Tape(16000)
    for _ in range(3):
        tape.add(np.ones(WINDOW, dtype=np.int16))
    recording = tape.recording("silence")
    assert len(recording.samples) == 3 * WINDOW and recording.stopped_by == "silence"
