"""Playing speech: one int16 mono output stream per call, fed from a queue by its writer thread.

The caller (the engine, synthesising sentence after sentence) hands arrays to `feed` as they
come; the writer thread writes them into one PortAudio stream opened once at the voice's
sample rate, so consecutive pieces join without a seam. It writes in blocks of BLOCK_MS and
looks at the stop event between blocks: a cancel silences the device within about a block
(the stream is aborted, its buffer dropped). A pause (barge-in, while it finds out whether the user
really spoke) silences it the same way, keeps what the buffer held unheard, and a resume plays on
from there. As with the microphone (audio/microphone.py), the
thread that makes the blocking PortAudio calls holds the Recorder's PortAudio lock from before
the open until the stream is closed.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from mcp_listen.audio.owner import speaker_owned
from mcp_listen.audio.portaudio_lock import StreamLock
from mcp_listen.audio.stream import OPEN_TIMEOUT_S, is_rate_error
from mcp_listen.contract.results import Cancel
from mcp_listen.errors import Cancelled, CaptureError, DeviceLost

log = logging.getLogger(__name__)

BLOCK_MS = 40
"""One write: the longest the writer goes without looking at the stop event (the brief: <= 50 ms)."""
STALL_S = 2.0
"""How long one write (or the final drain) may block before the device counts as lost: a write waits
for room in the device's buffer, BLOCK_MS at a time, and a dead sound server never makes any. Under
3 s, so a speaker lost at any moment of a speech ends the call within 3 s (as for microphones)."""
CLOSE_WAIT_S = 1.0
MAX_DRAIN_S = 1.0
"""The longest output latency believed: PortAudio's JACK host reports 89,478 s for a client that sets no
port latency (an unsigned wrap), and the drain would wait that long. Bluetooth speakers report ~0.3 s."""
AHEAD_S = 3.0
"""The most audio `feed` queues ahead of what has been written: more than the longest sentence takes to
synthesise on a busy machine (~0.5 s for MAX_RUN_WORDS words), so the speaker never waits for Piper,
while a long text is synthesised as it is spoken rather than all at once."""
LATENCY_S = 0.2
"""The device's buffer: room for scheduling jitter while the next sentence is synthesised on a busy
machine (with PortAudio's "low", 40 ms, a long text underflowed 1-3 times on two busy cores). It costs
a cancel nothing: abort drops what is buffered."""
SPEAKER_UNAVAILABLE = (
    f"The speaker could not be opened within {OPEN_TIMEOUT_S:g} s: the sound system (PulseAudio, PipeWire or the "
    "audio driver) is not responding. Restart it, or reconnect the device, then try again."
)
LOST_REMEDY = (
    'it was unplugged, or the sound server stopped. Reconnect it, then call list_audio_devices with kind "output" '
    "and try again."
)
_END = None


@dataclass(frozen=True)
class Played:
    """What reached the device."""

    frames: int
    """All that was fed; cut short, what the device had played when the stop dropped what its buffer held."""
    sample_rate: int
    first_audio_at: float | None
    """time.monotonic() when the first block was handed to PortAudio; None when nothing was."""
    interrupted: bool
    ended_at: float | None = None
    """time.monotonic() when the last sample had left the device (PortAudio's stop returned after
    playing out its buffer), or when a cut-short stream was aborted; None when nothing was opened."""

    @property
    def duration_ms(self) -> int:
        return round(self.frames * 1000 / self.sample_rate)


OpenStream = Callable[[int, int], tuple[Any, int]]
"""(device index, voice rate) -> (an unstarted output stream, the rate it runs at)."""


class Speaker:
    """One output stream and its writer thread: `feed` arrays, then `finish` for what was played."""

    def __init__(
        self,
        portaudio: StreamLock,
        device_index: int,
        sample_rate: int,
        stop: Cancel,
        open_stream: OpenStream | None = None,
    ) -> None:
        self._open_stream = open_stream or open_output_stream
        """Opens the device's stream (index, rate) -> (stream, the rate it runs at); a test hands in its own."""
        self._portaudio = portaudio
        self._device = device_index
        self.sample_rate = sample_rate
        """The voice's rate: what `feed` takes."""
        self.device_rate = sample_rate
        """The rate the stream runs at: the voice's, or the device's own when it refuses that one."""
        self._resampler: Any = None
        self._stop = stop
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._opened = threading.Event()
        self._done = threading.Event()
        self._abandoned = threading.Event()
        self.first_audio = threading.Event()
        """Set once the first samples went to the device (a background call returns then)."""
        self.first_audio_at: float | None = None
        self._frames = 0
        self._fed = 0
        self._plays_until = 0.0
        """time.monotonic() when the last block handed to the device will have played: each plays from when it
        was handed, or from the end of the one before if that is later (a device plays in order, and silence
        while it has nothing: a gap)."""
        self._interrupted = False
        self._blocked_since: float | None = None
        self._stalled = False
        """When the write (or drain) in progress began; None between writes."""
        self.ended_at: float | None = None
        self.underflows = 0
        """Writes during which the device ran dry (synthesis slower than speech: a gap was heard)."""
        self.error: BaseException | None = None
        self.tap: Callable[[Any, float, bool], None] | None = None
        """Called in the writer thread with every block (at device_rate), the time.monotonic() it was handed
        to the device, and whether the device had run dry before it (a gap was heard): barge-in's echo
        reference (duplex/echo.py). Set before the first feed."""
        self.warning: str | None = None
        """Why the one-speaker rule between mcp-listen servers does not hold for this speech (audio/owner.py)."""
        self._pause = threading.Event()
        self._written: deque[Any] = deque(maxlen=round((MAX_DRAIN_S + LATENCY_S) * 1000 / BLOCK_MS) + 2)
        """The last blocks written: a pause takes back what of them the device had not played yet."""
        self._after_pause = False
        self.paused_s = 0.0
        """How long the speech was paused, in all."""

    # ------------------------------------------------------------------ the caller's side

    def pause(self) -> None:
        """Go quiet within a block, the speech kept where it was heard up to (`resume` plays on from there)."""
        self._pause.set()

    def resume(self) -> None:
        """Play on from where the pause cut the speech."""
        self._pause.clear()

    def open(self) -> None:
        """Take PortAudio, open the stream in the writer thread; bounded by OPEN_TIMEOUT_S and the stop event."""
        deadline = time.monotonic() + OPEN_TIMEOUT_S
        while not self._portaudio.acquire(timeout=0.02):
            self._give_up_if(deadline)
        try:
            threading.Thread(target=self._run, name="mcp-listen-speaker", daemon=True).start()
        except BaseException:
            self._portaudio.release()
            raise
        while not self._opened.wait(0.02):
            try:
                self._give_up_if(deadline)
            except BaseException:
                self._abandoned.set()  # a late open is closed at once by the writer
                raise
        if self.error is not None:
            raise self.error

    def feed(self, samples: Any) -> None:
        """Queue int16 mono samples behind what is already playing, once less than AHEAD_S is queued;
        raises if the device is gone. Returns at once, dropping them, when the stop event is set."""
        self._raise_if_lost()
        while self._fed - self._frames > AHEAD_S * self.device_rate and not self._done.is_set():
            if self._stop.is_set():
                return
            time.sleep(0.02)
            self._raise_if_lost()
        if self._resampler is not None:
            samples = self._resampler.resample_chunk(samples)
        self._fed += len(samples)
        self._queue.put(samples)

    def finish(self) -> Played:
        """Wait until everything fed has played (or the stop event cut it short); what was played."""
        if self._resampler is not None:
            self._queue.put(self._resampler.resample_chunk(_no_samples(), last=True))
        self._queue.put(_END)
        while not self._done.wait(0.02):
            self._raise_if_lost()
        if self.error is not None:
            raise self.error
        return Played(self._frames, self.device_rate, self.first_audio_at, self._interrupted, self.ended_at)

    @property
    def played_ms(self) -> int:
        """How much has been handed to the device so far: what a lost speaker's error reports."""
        return round(self._frames * 1000 / self.device_rate)

    def abandon(self) -> None:
        """Stop playing now (the caller failed): the writer aborts the stream and lets go of the device."""
        self._abandoned.set()
        self._queue.put(_END)
        if not self._stalled and not self._done.wait(CLOSE_WAIT_S):
            log.warning("the speaker did not close within %g s; continuing without it", CLOSE_WAIT_S)

    def _raise_if_lost(self) -> None:
        """A write that failed, or one blocked past STALL_S (a frozen sound server raises nothing)."""
        if self.error is not None and self._done.is_set():
            raise self.error
        since = self._blocked_since
        if since is not None and time.monotonic() - since > STALL_S:
            self._stalled = True  # its writer is stuck in PortAudio: nobody waits for it to close
            self._abandoned.set()
            raise DeviceLost(f"The speaker stopped taking audio (nothing for {STALL_S:g} s): {LOST_REMEDY}")

    def _give_up_if(self, deadline: float) -> None:
        if self._stop.is_set():
            raise Cancelled("The speech was cancelled.")
        if time.monotonic() > deadline:
            raise CaptureError(SPEAKER_UNAVAILABLE, code="device_unavailable")

    # ------------------------------------------------------------------ the writer thread

    def _run(self) -> None:
        stream = None
        try:
            try:
                stream, self.device_rate = self._open_stream(self._device, self.sample_rate)
                self._resampler = _resampler(self.sample_rate, self.device_rate)
                stream.start()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, who raises it
                self.error = _open_error(exc)
            self._opened.set()
            if stream is not None and self.error is None and not self._abandoned.is_set():
                self._write_all(stream)
                self._drain(stream)
                log.debug("played %d frames, %d underflow(s)", self._frames, self.underflows)
        except BaseException as exc:  # noqa: BLE001 - a write failing mid-way (device gone)
            self.error = DeviceLost(f"The speaker failed while playing ({exc}): {LOST_REMEDY}")
        finally:
            if stream is not None:
                _close_now(stream)
            if self.ended_at is None:
                self.ended_at = time.monotonic()
            self._done.set()
            self._portaudio.release()

    def _stopping(self) -> bool:
        if self._stop.is_set() or self._abandoned.is_set():
            if not self._interrupted:
                # what sits in the device's buffer is dropped by the abort: count only what was heard. Not the
                # time since the first sound: after a gap (synthesis slower than the speech) it counts silence
                unplayed = max(0.0, self._plays_until - time.monotonic())
                self._frames = max(0, self._frames - round(unplayed * self.device_rate))
            self._interrupted = True
            return True
        return False

    def _write_all(self, stream: Any) -> None:
        """Write what is fed, block by block, until the end mark or the stop event."""
        block = max(1, self.device_rate * BLOCK_MS // 1000)
        while True:
            try:
                samples = self._queue.get(timeout=0.02)
            except queue.Empty:
                if self._stopping() or not self._played_on_after_a_pause(stream):
                    return
                continue
            if samples is _END:
                return
            for start in range(0, len(samples), block):
                if self._stopping() or not self._played_on_after_a_pause(stream):
                    return
                self._play(stream, samples[start : start + block])

    def _play(self, stream: Any, piece: Any) -> None:
        """Write one block, hand it to the tap, count it."""
        handed_at = time.monotonic()
        self._plays_until = max(self._plays_until, handed_at) + len(piece) / self.device_rate
        ran_dry = self._write(stream, piece) and self._frames > 0
        self.underflows += ran_dry
        if self.tap is not None:  # after a pause the device starts afresh: a gap, as after running dry
            self.tap(piece, handed_at, ran_dry or self._after_pause)
        self._after_pause = False
        self._written.append(piece)
        if self.first_audio_at is None:
            self.first_audio_at = time.monotonic()
            self.first_audio.set()
        self._frames += len(piece)

    def _played_on_after_a_pause(self, stream: Any) -> bool:
        """When a pause is asked: abort the stream (its buffer is dropped: quiet at once), wait for the resume,
        start the stream again and write first what the abort dropped. False when stopped meanwhile."""
        if not self._pause.is_set():
            return True
        paused_at = time.monotonic()
        stream.abort(ignore_errors=True)
        unheard = self._take_back(round(max(0.0, self._plays_until - paused_at) * self.device_rate))
        self._plays_until = 0.0
        while self._pause.is_set():
            if self._stopping():
                return False
            time.sleep(0.01)
        self.paused_s += time.monotonic() - paused_at
        stream.start()
        self._after_pause = True
        for piece in unheard:
            if self._stopping():
                return False
            self._play(stream, piece)
        return True

    def _take_back(self, frames: int) -> list[Any]:
        """The last `frames` written (the device's buffer the abort dropped), uncounted, as blocks to write again."""
        taken: list[Any] = []
        while frames > 0 and self._written:
            piece = self._written.pop()
            if len(piece) > frames:
                self._written.append(piece[: len(piece) - frames])
                piece = piece[len(piece) - frames :]
            taken.insert(0, piece)
            frames -= len(piece)
            self._frames -= len(piece)
        return taken

    def _write(self, stream: Any, block: Any) -> bool:
        """One blocking write, timed for the caller's watchdog; True when the device had run dry."""
        self._blocked_since = time.monotonic()
        try:
            return bool(stream.write(block.reshape(-1, 1)))
        finally:
            self._blocked_since = None

    def _drain(self, stream: Any) -> None:
        """Let the device play what sits in its buffer (its output latency), still listening for stop."""
        if self._interrupted:
            return
        latency = min(float(getattr(stream, "latency", 0.1) or 0.1), MAX_DRAIN_S)
        until = time.monotonic() + latency + BLOCK_MS / 1000
        while time.monotonic() < until:
            if self._stopping():
                return
            if self._pause.is_set():
                if not self._played_on_after_a_pause(stream):
                    return
                until = time.monotonic() + latency + BLOCK_MS / 1000
            time.sleep(0.01)
        self._blocked_since = time.monotonic()
        stream.stop()  # returns once the buffer has played out: the speech has left the device
        self.ended_at = time.monotonic()
        self._blocked_since = None


@contextmanager
def speaker(
    portaudio: StreamLock, device_index: int, sample_rate: int, stop: Cancel, open_stream: OpenStream | None = None
) -> Iterator[Speaker]:
    """An open Speaker; left early (an error, a cancel), it stops playing at once and frees the device.

    On the real device (no `open_stream` of a test's) it is this process's for as long as it is
    open: another mcp-listen speaking or listening on the same sound server gets `busy` (audio/owner.py).
    Where that rule cannot hold (its lock's folder planted by someone else), the speaker's `warning` says so."""
    owned = speaker_owned() if open_stream is None else nullcontext()
    with owned as unguarded:
        out = Speaker(portaudio, device_index, sample_rate, stop, open_stream)
        out.warning = unguarded
        out.open()
        try:
            yield out
        finally:
            if not out._done.is_set():
                out.abandon()


def open_output_stream(device_index: int, sample_rate: int) -> tuple[Any, int]:
    """Mono at the voice's rate; a device that refuses it (an ALSA hw device that runs only at 48 kHz) at its
    own default rate, the voice resampled to it. Returns the stream and the rate it runs at."""
    import sounddevice as sd

    def opened(rate: int) -> Any:
        return sd.OutputStream(samplerate=rate, channels=1, dtype="int16", device=device_index, latency=LATENCY_S)

    try:
        return opened(sample_rate), sample_rate
    except sd.PortAudioError as exc:
        own = int(sd.query_devices(device_index)["default_samplerate"])
        if not is_rate_error(exc) or own == sample_rate:
            raise
    log.info("speaker plays at %d Hz; resampling the voice from %d Hz", own, sample_rate)
    return opened(own), own


def _resampler(voice_rate: int, device_rate: int) -> Any:
    if voice_rate == device_rate:
        return None
    import soxr

    return soxr.ResampleStream(voice_rate, device_rate, 1, dtype="int16", quality="HQ")


def _no_samples() -> Any:
    import numpy as np

    return np.zeros(0, dtype=np.int16)


def _open_error(exc: BaseException) -> BaseException:
    """PortAudio's refusal as a named error; anything else (a cancel) as it is."""
    if isinstance(exc, Exception) and type(exc).__name__ == "PortAudioError":
        return CaptureError(
            f"Could not open the speaker: {exc}. Check that it is connected, call list_audio_devices with kind "
            '"output", then try again.',
            code="device_unavailable",
        )
    return exc


def _close_now(stream: Any) -> None:
    """Abort (drop what is buffered: a cancel is silent at once) and close; never raises."""
    try:
        stream.abort(ignore_errors=True)
        stream.close(ignore_errors=True)
    except Exception as exc:  # noqa: BLE001 - closing a dead stream: nothing left to do
        log.debug("closing the speaker failed: %s", exc)
