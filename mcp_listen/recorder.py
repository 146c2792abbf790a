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

from mcp_listen.errors import Cancelled, CaptureError, DeviceBusy, DeviceLost

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000
WINDOW = 512
FIRST_BLOCK_TIMEOUT_S = 2.5
"""Patience for the first block (devices start in ~40 ms; Bluetooth can take a second or two).
Kept under 3 s so a device lost at any moment of a recording ends the call within 3 s."""
STALL_TIMEOUT_S = 2.0
"""Patience between blocks once audio flows; longer means the device or sound server is gone."""
PA_INVALID_SAMPLE_RATE = -9997
OPEN_HINT = "Check that it is connected and not held by another program, call list_audio_devices, then try again."

WindowHandler = Callable[["np.ndarray"], Optional[str]]


@dataclass
class Claim:
    """The microphone, held by one tool call until released."""

    tool: str
    started: float = field(default_factory=time.monotonic)
    device: str | None = None

    @property
    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)


@dataclass(frozen=True)
class Recording:
    samples: "np.ndarray"
    """int16 mono samples at 16 kHz, exactly as captured."""
    stopped_by: str
    """"ceiling" when the length limit was reached, else the reason the window handler gave."""


class Recorder:
    """Owns the one-recording-at-a-time rule for the whole process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._claim: Claim | None = None

    @property
    def active(self) -> Claim | None:
        return self._claim

    def claim(self, tool: str) -> Claim:
        """Take the microphone now or fail at once; never waits, so concurrent calls cannot both win."""
        if not self._lock.acquire(blocking=False):
            raise DeviceBusy(
                "A recording is already in progress. Wait for it to finish, then call again.",
            )
        self._claim = Claim(tool)
        return self._claim

    def release(self, claim: Claim) -> None:
        if self._claim is claim:
            self._claim = None
            self._lock.release()

    def record(
        self,
        *,
        device_index: int,
        max_frames: int,
        on_window: WindowHandler | None = None,
        stop: threading.Event | None = None,
        on_start: Callable[[], None] | None = None,
    ) -> Recording:
        """Record until `max_frames` samples or until `on_window` returns a stop reason.

        `on_start` runs once the stream is running: from then on, sound is being captured.
        """
        stop = stop or threading.Event()
        blocks: queue.SimpleQueue = queue.SimpleQueue()
        stream, resampler = _open_stream(device_index, blocks)
        try:
            stream.start()
            if on_start is not None:
                on_start()
            return _consume(blocks, resampler, max_frames, on_window, stop)
        finally:
            _close(stream)


def _open_stream(device_index: int, blocks: queue.SimpleQueue) -> tuple[Any, Any]:
    """Open at 16 kHz; when the device refuses that rate, open at its own rate and resample."""
    import sounddevice as sd

    def callback(indata: Any, frames: int, when: Any, status: Any) -> None:
        blocks.put(indata[:, 0].copy())

    try:
        return _input_stream(sd, device_index, SAMPLE_RATE, callback), None
    except sd.PortAudioError as exc:
        if not _is_rate_error(exc):
            raise CaptureError(f"Could not open the microphone: {exc}. {OPEN_HINT}") from None
    rate = int(sd.query_devices(device_index)["default_samplerate"])
    log.info("device cannot record at 16 kHz; recording at %d Hz and resampling", rate)
    try:
        stream = _input_stream(sd, device_index, rate, callback)
    except sd.PortAudioError as exc:
        raise CaptureError(f"Could not open the microphone: {exc}. {OPEN_HINT}") from None
    import soxr

    return stream, soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="int16", quality="HQ")


def _input_stream(sd: Any, device_index: int, rate: int, callback: Any) -> Any:
    blocksize = WINDOW if rate == SAMPLE_RATE else int(rate * WINDOW / SAMPLE_RATE)
    return sd.InputStream(
        samplerate=rate, channels=1, dtype="int16", blocksize=blocksize, device=device_index, callback=callback
    )


def _is_rate_error(exc: Exception) -> bool:
    args = getattr(exc, "args", ())
    return (len(args) > 1 and args[1] == PA_INVALID_SAMPLE_RATE) or "sample rate" in str(exc).lower()


def _consume(
    blocks: queue.SimpleQueue,
    resampler: Any,
    max_frames: int,
    on_window: WindowHandler | None,
    stop: threading.Event,
) -> Recording:
    import numpy as np

    buffer = np.zeros(max_frames + 8 * WINDOW, dtype=np.int16)
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
        while on_window is not None and (windows + 1) * WINDOW <= min(total, max_frames):
            reason = on_window(buffer[windows * WINDOW : (windows + 1) * WINDOW])
            windows += 1
            if reason is not None:
                end = min(windows * WINDOW, max_frames)
                return Recording(buffer[:end].copy(), reason)
        if total >= max_frames:
            return Recording(buffer[:max_frames].copy(), "ceiling")


def _next_block(blocks: queue.SimpleQueue, stop: threading.Event, last_block: float, patience: float) -> Any:
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


def _close(stream: Any) -> None:
    """Release the device; a stream whose sound server vanished must not hang the call."""

    def close() -> None:
        try:
            stream.abort(ignore_errors=True)
            stream.close(ignore_errors=True)
        except Exception as exc:  # noqa: BLE001 - closing a dead stream: nothing left to do
            log.debug("closing the stream failed: %s", exc)

    closer = threading.Thread(target=close, name="mcp-listen-close", daemon=True)
    closer.start()
    closer.join(timeout=1.0)
    if closer.is_alive():
        log.warning("the audio device did not close within 1 s; continuing without it")
