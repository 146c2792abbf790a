"""Microphone capture: 16 kHz mono int16, 512-sample windows, one recording at a time.

The PortAudio callback only copies blocks into a queue; everything else (VAD,
level meter, stop decisions) runs in the consuming thread, so a slow consumer can
never make the audio thread drop samples. Lengths are counted in samples, not
wall-clock time. A watchdog turns "callbacks stopped" (device unplugged, sound
server gone: PortAudio raises nothing) into an error instead of a hang.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional

from mcp_listen.contracts import SAMPLE_RATE, WINDOW_SAMPLES
from mcp_listen.errors import Cancelled, CaptureError, DeviceBusy, DeviceLost

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

OPEN_TIMEOUT_S = 2.5
"""Patience for the sound system to open and start the microphone (it takes ~40 ms). A frozen sound
server holds PortAudio's open for ~30 s and nothing can interrupt it: past this the call fails with
device_unavailable, and the stuck open is finished and closed by its own thread later."""
FIRST_BLOCK_TIMEOUT_S = 2.5
"""Patience for the first block (devices start in ~40 ms; Bluetooth can take a second or two).
Kept under 3 s so a device lost at any moment of a recording ends the call within 3 s."""
STALL_TIMEOUT_S = 2.0
"""Patience between blocks once audio flows; longer means the device or sound server is gone."""
CLOSE_WAIT_S = 1.0
"""How long a finished recording waits for its stream to close (normally a few ms)."""
RELEASE_WAIT_S = 1.0
"""How long a new call waits for a cancelled recording to let go of the microphone before `busy`."""
PA_INVALID_SAMPLE_RATE = -9997
PA_INVALID_CHANNEL_COUNT = -9998
OPEN_HINT = "Check that it is connected and not held by another program, call list_audio_devices, then try again."
UNAVAILABLE_MESSAGE = (
    f"The microphone could not be opened within {OPEN_TIMEOUT_S:g} s: the sound system (PulseAudio, PipeWire "
    "or the audio driver) is not responding. Restart it (on Linux: systemctl --user restart pipewire "
    "pulseaudio), or reconnect the microphone, then try again."
)

WindowHandler = Callable[["np.ndarray"], Optional[str]]


@dataclass
class Claim:
    """The microphone, held by one tool call until released."""

    tool: str
    started: float = field(default_factory=time.monotonic)
    device: str | None = None
    stop: Any = None
    """The call's stop event (anything with is_set): once set, the claim is about to be released."""

    @property
    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)

    @property
    def letting_go(self) -> bool:
        return self.stop is not None and self.stop.is_set()


@dataclass(frozen=True)
class Recording:
    samples: "np.ndarray"
    """int16 mono samples at 16 kHz, exactly as captured."""
    stopped_by: str
    """"ceiling" when the length limit was reached, else the reason the window handler gave."""


class Recorder:
    """Owns the one-recording-at-a-time rule for the whole process, and the PortAudio lock.

    Two locks, held by different threads on purpose. The claim belongs to the calling thread and
    is released as soon as the call ends (cancelled, failed or done). The PortAudio lock is held by
    the audio thread that makes the blocking PortAudio calls, from before the open until the
    stream is closed: a PortAudio call stuck on a hung sound server keeps PortAudio (nobody
    re-initialises it underneath), never the claim.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._claim: Claim | None = None
        self.portaudio = threading.Lock()
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
            raise DeviceBusy(
                "A recording is already in progress. Wait for it to finish, then call again.",
            )
        self._claim = Claim(tool, stop=stop)
        return self._claim

    def _after_letting_go(self) -> bool:
        """Take the lock once a cancelled holder lets go (bounded); False at once if it is still recording."""
        holder = self._claim
        if holder is None:  # released just now
            return self._lock.acquire(blocking=False)
        return holder.letting_go and self._lock.acquire(timeout=RELEASE_WAIT_S)

    def release(self, claim: Claim) -> None:
        if self._claim is claim:
            self._claim = None
            self._lock.release()

    def record(
        self,
        *,
        device_index: int | None = None,
        find_device: Callable[[], Any] | None = None,
        max_frames: int,
        on_window: WindowHandler | None = None,
        stop: Any = None,
        on_start: Callable[[Any], None] | None = None,
    ) -> Recording:
        """Record until `max_frames` samples or until `on_window` returns a stop reason.

        The device is `device_index`, or whatever `find_device()` returns (an object with `index`
        and `name`; it runs in the audio thread, as it may touch PortAudio). `on_start(device)`
        runs once the stream is running: from then on, sound is being captured.
        """
        stop = stop or threading.Event()
        deadline = time.monotonic() + OPEN_TIMEOUT_S
        self._take_portaudio(stop, deadline)
        blocks: queue.SimpleQueue = queue.SimpleQueue()
        audio = _AudioThread(self.portaudio, find_device or (lambda: _Index(device_index)), blocks)
        finished = False
        try:
            audio.start()
            audio.wait_started(stop, deadline)
            if on_start is not None:
                on_start(audio.device)
            recording = _consume(blocks, audio.resampler, max_frames, on_window, stop)
            finished = True
            return recording
        finally:
            audio.close(wait_s=CLOSE_WAIT_S if finished else 0)

    def _take_portaudio(self, stop: Any, deadline: float) -> None:
        """Wait (bounded, cancellable) for the previous stream's audio thread to let go of PortAudio."""
        while not self.portaudio.acquire(timeout=0.02):
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


class _AudioThread:
    """One recording's blocking PortAudio calls (find the device, open, start, close), in a thread
    of their own: the caller waits for them with a deadline and its stop event, and can walk away
    from a call that hangs. The thread owns the PortAudio lock (taken by the caller) and releases
    it only when its stream is closed; a stream opened after the caller walked away is closed at once.
    """

    def __init__(self, portaudio: threading.Lock, find_device: Callable[[], Any], blocks: queue.SimpleQueue) -> None:
        self._portaudio = portaudio
        self._find_device = find_device
        self._blocks = blocks
        self._opened = threading.Event()
        self._closing = threading.Event()
        self._closed = threading.Event()
        self._walked_away = False
        self._guard = threading.Lock()
        self.device: Any = None
        self.resampler: Any = None
        self.error: BaseException | None = None

    def start(self) -> None:
        try:
            threading.Thread(target=self._run, name="mcp-listen-audio", daemon=True).start()
        except BaseException:
            self._portaudio.release()
            raise

    def _run(self) -> None:
        stream = None
        try:
            try:
                self.device = self._find_device()
                stream, self.resampler = _open_stream(self.device.index, self._blocks)
                stream.start()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, who raises it
                self.error = exc
            with self._guard:
                self._opened.set()
                keep = not self._walked_away and self.error is None
            if keep:
                self._closing.wait()
            if stream is not None:
                _close_now(stream)
        finally:
            self._closed.set()
            self._portaudio.release()

    def wait_started(self, stop: Any, deadline: float) -> None:
        """Return once the stream runs; raise its error, Cancelled, or device_unavailable at the deadline."""
        while not self._opened.wait(0.02):
            if stop.is_set() or time.monotonic() > deadline:
                with self._guard:
                    if not self._opened.is_set():
                        self._walked_away = True
                        if stop.is_set():
                            raise Cancelled("The recording was cancelled.")
                        log.warning("the sound system did not open the microphone within %g s", OPEN_TIMEOUT_S)
                        raise CaptureError(UNAVAILABLE_MESSAGE, code="device_unavailable")
        if self.error is not None:
            raise self.error

    def close(self, wait_s: float) -> None:
        """Ask the thread to close the stream; wait up to `wait_s` for it (never when it hangs)."""
        self._closing.set()
        if wait_s and not self._closed.wait(wait_s):
            log.warning("the audio device did not close within %g s; continuing without it", wait_s)


def _open_stream(device_index: int, blocks: queue.SimpleQueue) -> tuple[Any, Any]:
    """Open at 16 kHz mono. A device that refuses that rate (JACK opens only at the server's rate)
    is opened at its own rate and resampled; one that refuses mono at its channel count and
    downmixed. Up to three tries: (16 kHz, 1) -> rate or channels fixed -> both fixed."""
    import sounddevice as sd

    rate, channels = SAMPLE_RATE, 1
    for _ in range(3):
        try:
            stream = _input_stream(sd, device_index, rate, channels, _callback(blocks, channels))
            break
        except sd.PortAudioError as exc:
            info = sd.query_devices(device_index)
            if rate == SAMPLE_RATE and _is_rate_error(exc):
                rate = int(info["default_samplerate"])
            elif channels == 1 and _is_channel_error(exc) and info["max_input_channels"] > 1:
                channels = int(info["max_input_channels"])
            else:
                raise CaptureError(f"Could not open the microphone: {exc}. {OPEN_HINT}") from None
    else:  # a device whose own default rate is refused too
        raise CaptureError(f"Could not open the microphone at 16 kHz nor at {rate} Hz. {OPEN_HINT}")
    if (rate, channels) != (SAMPLE_RATE, 1):
        log.info("device records at %d Hz, %d channel(s); converting to 16 kHz mono", rate, channels)
    if rate == SAMPLE_RATE:
        return stream, None
    import soxr

    return stream, soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="int16", quality="HQ")


def _callback(blocks: queue.SimpleQueue, channels: int) -> Callable[..., None]:
    """The PortAudio callback: queue a copy of the block, mono (the mean of the channels, computed in
    float32 so that two loud channels cannot overflow int16) for a device that only records more."""
    if channels == 1:

        def mono(indata: Any, frames: int, when: Any, status: Any) -> None:
            blocks.put(indata[:, 0].copy())

        return mono
    import numpy as np

    def downmix(indata: Any, frames: int, when: Any, status: Any) -> None:
        blocks.put(np.rint(indata.mean(axis=1, dtype=np.float32)).astype(np.int16))

    return downmix


def _input_stream(sd: Any, device_index: int, rate: int, channels: int, callback: Any) -> Any:
    blocksize = WINDOW_SAMPLES if rate == SAMPLE_RATE else int(rate * WINDOW_SAMPLES / SAMPLE_RATE)
    return sd.InputStream(
        samplerate=rate, channels=channels, dtype="int16", blocksize=blocksize, device=device_index, callback=callback
    )


def _is_rate_error(exc: Exception) -> bool:
    args = getattr(exc, "args", ())
    return (len(args) > 1 and args[1] == PA_INVALID_SAMPLE_RATE) or "sample rate" in str(exc).lower()


def _is_channel_error(exc: Exception) -> bool:
    args = getattr(exc, "args", ())
    return (len(args) > 1 and args[1] == PA_INVALID_CHANNEL_COUNT) or "channels" in str(exc).lower()


def _consume(
    blocks: queue.SimpleQueue,
    resampler: Any,
    max_frames: int,
    on_window: WindowHandler | None,
    stop: Any,
) -> Recording:
    import numpy as np

    buffer = np.zeros(max_frames + 8 * WINDOW_SAMPLES, dtype=np.int16)
    total = 0
    windows = 0
    last_block = time.monotonic()
    patience = FIRST_BLOCK_TIMEOUT_S
    while True:
        block = _next_block(blocks, stop, last_block, patience)
        if block is None:
            continue
        last_block, patience = time.monotonic(), STALL_TIMEOUT_S
        if resampler is not None:
            block = resampler.resample_chunk(block)
        room = len(buffer) - total
        buffer[total : total + min(room, len(block))] = block[:room]
        total += min(room, len(block))
        while on_window is not None and (windows + 1) * WINDOW_SAMPLES <= min(total, max_frames):
            reason = on_window(buffer[windows * WINDOW_SAMPLES : (windows + 1) * WINDOW_SAMPLES])
            windows += 1
            if reason is not None:
                end = min(windows * WINDOW_SAMPLES, max_frames)
                return Recording(buffer[:end].copy(), reason)
        if total >= max_frames:
            return Recording(buffer[:max_frames].copy(), "ceiling")


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


def _close_now(stream: Any) -> None:
    """Release the device (in the audio thread: it may hang as long as the sound server does)."""
    try:
        stream.abort(ignore_errors=True)
        stream.close(ignore_errors=True)
    except Exception as exc:  # noqa: BLE001 - closing a dead stream: nothing left to do
        log.debug("closing the stream failed: %s", exc)
