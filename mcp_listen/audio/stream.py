"""Opening one PortAudio input stream, on a thread of its own, bounded by a deadline.

The blocking PortAudio calls (find the device, open, start, close) run in the audio thread:
a frozen sound server can hold them for ~30 s and nothing interrupts them, so the caller
waits with a deadline and its stop event and can walk away. The stream's callback only
copies blocks into a queue; audio/microphone.py turns them into windows in the caller's thread.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from mcp_listen.audio.portaudio_lock import StreamLock
from mcp_listen.contract.limits import SAMPLE_RATE, WINDOW_SAMPLES
from mcp_listen.errors import Cancelled, CaptureError

log = logging.getLogger(__name__)

OPEN_TIMEOUT_S = 2.5
"""Patience for the sound system to open and start the microphone (it takes ~40 ms). A frozen sound
server holds PortAudio's open for ~30 s and nothing can interrupt it: past this the call fails with
device_unavailable, and the stuck open is finished and closed by its own thread later."""
PA_INVALID_SAMPLE_RATE = -9997
PA_INVALID_CHANNEL_COUNT = -9998
OPEN_HINT = "Check that it is connected and not held by another program, call list_audio_devices, then try again."
UNAVAILABLE_MESSAGE = (
    f"The microphone could not be opened within {OPEN_TIMEOUT_S:g} s: the sound system (PulseAudio, PipeWire "
    "or the audio driver) is not responding. Restart it (on Linux: systemctl --user restart pipewire "
    "pulseaudio), or reconnect the microphone, then try again."
)


class AudioThread:
    """One recording's blocking PortAudio calls (find the device, open, start, close), in a thread
    of their own: the caller waits for them with a deadline and its stop event, and can walk away
    from a call that hangs. The thread owns the PortAudio lock (taken by the caller) and releases
    it only when its stream is closed; a stream opened after the caller walked away is closed at once.
    """

    def __init__(self, portaudio: StreamLock, find_device: Callable[[], Any], blocks: queue.SimpleQueue) -> None:
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
        self.latency_s = 0.0
        """The open stream's input latency as PortAudio reports it."""
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
                self.latency_s = float(stream.latency)
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
            if rate == SAMPLE_RATE and is_rate_error(exc):
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


def is_rate_error(exc: Exception) -> bool:
    args: tuple[Any, ...] = getattr(exc, "args", ())
    return (len(args) > 1 and args[1] == PA_INVALID_SAMPLE_RATE) or "sample rate" in str(exc).lower()


def _is_channel_error(exc: Exception) -> bool:
    args: tuple[Any, ...] = getattr(exc, "args", ())
    return (len(args) > 1 and args[1] == PA_INVALID_CHANNEL_COUNT) or "channels" in str(exc).lower()


def _close_now(stream: Any) -> None:
    """Release the device (in the audio thread: it may hang as long as the sound server does)."""
    try:
        stream.abort(ignore_errors=True)
        stream.close(ignore_errors=True)
    except Exception as exc:  # noqa: BLE001 - closing a dead stream: nothing left to do
        log.debug("closing the stream failed: %s", exc)
