"""Microphone capture: 16 kHz mono int16, 512-sample windows, one recording at a time.

The caller pulls windows, in sounddevice's generator shape:

    with recorder.claimed(tool, stop) as claim, recorder.open(find_device, stop=stop) as microphone:
        for window in microphone: ...

The PortAudio callback only copies blocks into a queue (audio/stream.py); windows are cut,
resampled and handed out in the caller's thread, so a slow consumer can never make the audio
thread drop samples. Lengths are counted in samples, not wall-clock time. A watchdog turns
"callbacks stopped" (device unplugged, sound server gone: PortAudio raises nothing) into an
error instead of a hang.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mcp_listen.audio.portaudio_lock import PortAudioLock, StreamLock
from mcp_listen.audio.stream import OPEN_TIMEOUT_S, UNAVAILABLE_MESSAGE, AudioThread
from mcp_listen.contract.limits import WINDOW_SAMPLES
from mcp_listen.errors import Cancelled, CaptureError, DeviceBusy, DeviceLost

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

FIRST_BLOCK_TIMEOUT_S = 2.5
"""Patience for the first block (devices start in ~40 ms; Bluetooth can take a second or two).
Kept under 3 s so a device lost at any moment of a recording ends the call within 3 s."""
STALL_TIMEOUT_S = 2.0
"""Patience between blocks once audio flows; longer means the device or sound server is gone."""
CLOSE_WAIT_S = 1.0
"""How long a finished recording waits for its stream to close (normally a few ms)."""
RELEASE_WAIT_S = 1.0
"""How long a new call waits for a cancelled recording to let go of the microphone before `busy`."""


@dataclass
class Claim:
    """The microphone, held by one tool call until released."""

    tool: str
    started: float = field(default_factory=time.monotonic)
    device: str | None = None
    stop: Any = None
    """The call's stop event (anything with is_set): once set, the claim is about to be released."""
    speaking: bool = False
    """The holder is playing speech (speak_text, or converse before it listens), not recording."""

    @property
    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)

    @property
    def letting_go(self) -> bool:
        return self.stop is not None and self.stop.is_set()


@dataclass(frozen=True)
class Recording:
    samples: np.ndarray
    """int16 mono samples at 16 kHz, exactly as captured, from `start_frame` to the end."""
    stopped_by: str
    """"ceiling" when the length limit was reached, else the reason the listener gave to stop."""
    start_frame: int = 0
    """Samples before this were let go while recording (Tape.forget_before); 0 for a whole recording."""

    @property
    def frames(self) -> int:
        """The length of the whole recording, forgotten samples included."""
        return self.start_frame + len(self.samples)


class Recorder:
    """Owns the one-recording-at-a-time rule for the whole process, and the PortAudio lock.

    Two locks, held by different threads on purpose. The claim belongs to the calling thread and
    is released as soon as the call ends (cancelled, failed or done). The PortAudio lock is held by
    the audio thread that makes the blocking PortAudio calls, from before the open until the
    stream is closed: a PortAudio call stuck on a hung sound server keeps PortAudio (nobody
    re-initialises it underneath), never the claim. At DEBUG, each claim is logged as it is taken
    and before it is let go, both while it is held: two claims' lines can never interleave, so the
    log tells two recordings one after the other from two at once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._claim: Claim | None = None
        self.portaudio = PortAudioLock()
        """Held while a stream is open or being opened or closed: PortAudio must not be re-initialised."""

    @property
    def active(self) -> Claim | None:
        return self._claim

    def claim(self, tool: str, stop: Any = None) -> Claim:
        """Take the microphone, or fail with `busy` if another call is recording.

        A recording that is letting go (its call was cancelled) is waited for, briefly: a client
        that cancels and calls again at once should get the microphone, not `busy`.
        """
        if not self._lock.acquire(blocking=False) and not self._after_letting_go():
            holder = self._claim
            if holder is not None and holder.speaking:
                raise DeviceBusy(f"{holder.tool} is playing speech. Wait for it to finish, then call again.")
            raise DeviceBusy(
                "A recording is already in progress. Wait for it to finish, then call again.",
            )
        self._claim = Claim(tool, stop=stop)
        log.debug("%s holds the microphone", tool)  # under the claim: the log orders the claims as they were taken
        return self._claim

    def _after_letting_go(self) -> bool:
        """Take the lock once a cancelled holder lets go (bounded); False at once if it is still recording."""
        holder = self._claim
        if holder is None:  # released just now
            return self._lock.acquire(blocking=False)
        return holder.letting_go and self._lock.acquire(timeout=RELEASE_WAIT_S)

    def release(self, claim: Claim) -> None:
        if self._claim is claim:
            log.debug("%s let go of the microphone after %d ms", claim.tool, claim.elapsed_ms)  # still held here
            self._claim = None
            self._lock.release()

    @contextmanager
    def claimed(self, tool: str, stop: Any = None) -> Iterator[Claim]:
        """The microphone for the whole of one call's recording: claimed here, released on leaving."""
        claim = self.claim(tool, stop=stop)
        try:
            yield claim
        finally:
            self.release(claim)

    @contextmanager
    def open(
        self,
        find_device: Callable[[], Any] | None = None,
        *,
        device_index: int | None = None,
        stop: Any = None,
        beside_speaker: bool = False,
    ) -> Iterator[Microphone]:
        """The running microphone, to iterate for windows; closed on leaving the block.

        The device is whatever `find_device()` returns (an object with `index` and `name`; it runs
        in the audio thread, as it may touch PortAudio), else `device_index`. Opening is bounded
        (OPEN_TIMEOUT_S) and cancellable; once inside the block, sound is being captured.
        `beside_speaker`: PortAudio is shared with a speaker opened while this runs (converse).
        """
        stop = stop or threading.Event()
        deadline = time.monotonic() + OPEN_TIMEOUT_S
        portaudio = self.portaudio.shared if beside_speaker else self.portaudio
        _take_portaudio(portaudio, stop, deadline)
        blocks: queue.SimpleQueue = queue.SimpleQueue()
        audio = AudioThread(portaudio, find_device or (lambda: _Index(device_index)), blocks)
        finished = False
        try:
            audio.start()
            audio.wait_started(stop, deadline)
            yield Microphone(audio.device, blocks, audio.resampler, stop, audio.latency_s)
            finished = True
        finally:
            audio.close(wait_s=CLOSE_WAIT_S if finished else 0)

    def record(self, *, device_index: int | None = None, max_frames: int, stop: Any = None) -> Recording:
        """Exactly `max_frames` samples from the device (doctor's audio check)."""
        tape = Tape(max_frames)
        with self.open(device_index=device_index, stop=stop) as microphone:
            for window in microphone:
                tape.add(window)
                if tape.full:
                    break
        return tape.recording("ceiling")


def _take_portaudio(portaudio: StreamLock, stop: Any, deadline: float) -> None:
    """Wait (bounded, cancellable) for the previous stream's audio thread to let go of PortAudio."""
    while not portaudio.acquire(timeout=0.02):
        if stop.is_set():
            raise Cancelled("The recording was cancelled.")
        if time.monotonic() > deadline:
            raise CaptureError(UNAVAILABLE_MESSAGE, code="device_unavailable")


@dataclass(frozen=True)
class _Index:
    index: int | None

    @property
    def name(self) -> str:
        return f"device {self.index}"


class Microphone:
    """One running input stream as an iterator of 512-sample int16 windows at 16 kHz.

    Iterating raises Cancelled when `stop` is set, DeviceLost when blocks stop arriving
    (the watchdog), and never ends by itself: the caller breaks out when it has enough.
    """

    def __init__(
        self, device: Any, blocks: queue.SimpleQueue, resampler: Any, stop: Any, latency_s: float = 0.0
    ) -> None:
        self.device = device
        """What was opened: `name` and `index`."""
        self.latency_s = latency_s
        """PortAudio's input latency: how long before a window arrives its sound reached the microphone."""
        self._blocks = blocks
        self._resampler = resampler
        self._stop = stop

    def __iter__(self) -> Iterator[np.ndarray]:
        import numpy as np

        pending = np.zeros(0, dtype=np.int16)
        last_block = time.monotonic()
        patience = FIRST_BLOCK_TIMEOUT_S
        while True:
            block = _next_block(self._blocks, self._stop, last_block, patience)
            if block is None:
                continue
            last_block, patience = time.monotonic(), STALL_TIMEOUT_S
            if self._resampler is not None:
                block = self._resampler.resample_chunk(block)
            pending = np.concatenate((pending, block)) if len(pending) else block
            while len(pending) >= WINDOW_SAMPLES:
                window, pending = pending[:WINDOW_SAMPLES], pending[WINDOW_SAMPLES:]
                yield window


class Tape:
    """The samples of one recording up to its ceiling of `max_frames`, window by window.

    A voice tool lets go of what its phrases no longer need (`forget_before`), so ten minutes of
    dictation hold no more memory than ten seconds; a recording that becomes a WAV keeps it all.
    """

    def __init__(self, max_frames: int) -> None:
        self.max_frames = max_frames
        self.frames = 0
        self._windows: deque[np.ndarray] = deque()
        self._first = 0
        """The frame the first kept window starts at."""

    def add(self, window: np.ndarray) -> bool:
        """Append a window; True when it lies wholly under the ceiling (then it is listened to)."""
        kept = min(self.max_frames + WINDOW_SAMPLES - self.frames, len(window))
        if kept > 0:
            self._windows.append(window[:kept].copy())
            self.frames += kept
        return self.frames <= self.max_frames

    def forget_before(self, frame: int) -> None:
        """Let go of the whole windows that end at or before `frame`."""
        while self._windows and self._first + len(self._windows[0]) <= frame:
            self._first += len(self._windows.popleft())

    @property
    def full(self) -> bool:
        return self.frames >= self.max_frames

    def recording(self, stopped_by: str) -> Recording:
        import numpy as np

        end = min(self.frames, self.max_frames) - self._first
        samples = np.concatenate(self._windows) if self._windows else np.zeros(0, dtype=np.int16)
        return Recording(samples[: max(0, end)], stopped_by, self._first)


def _next_block(blocks: queue.SimpleQueue, stop: Any, last_block: float, patience: float) -> Any:
    """The next captured block, None after a short wait; raises on cancel or when audio stops arriving."""
    try:
        block = blocks.get(timeout=0.02)
    except queue.Empty:
        block = None
    if stop.is_set():
        raise Cancelled("The recording was cancelled.")
    if block is None and time.monotonic() - last_block > patience:
        raise DeviceLost(
            f"The microphone stopped delivering audio (nothing for {patience:g} s): it was unplugged, "
            "or the sound server stopped. Reconnect it, then call list_audio_devices and try again.",
        )
    return block
