"""One speech's playing: Piper's sentences fed to the speaker as they come, in the caller's thread
(speak_text, wait: true) or a thread of its own (`start`): speak_text with wait: false, which holds
the device until the speech ends, and converse, which listens meanwhile (duplex/exchange.py).

Synthesis runs in a thread of its own ("mcp-listen-synth") while the speaker's writer thread plays
what came before: the first, short piece (voice/pieces.py) sounds while the next sentence is being
synthesised. It runs at most one sentence ahead of what the speaker holds (the speaker itself keeps
no more than audio/speaker.py's AHEAD_S queued), so a long text is not rendered all at once, and a
cancel frees the device without waiting for the sentence Piper is still rendering: that sentence
is finished in the background and dropped.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from mcp_listen.contract.results import AnyOf, Cancel
from mcp_listen.errors import ListenError

if TYPE_CHECKING:
    from mcp_listen.audio.portaudio_lock import StreamLock
    from mcp_listen.audio.speaker import Played, Speaker
    from mcp_listen.engine.parts import Speakers, Speaking
    from mcp_listen.voice.check import VoiceInfo

log = logging.getLogger(__name__)

POLL_S = 0.01
"""How often a wait for the next sentence (or for room for it) looks at the cancel event."""
FIRST_SOUND_WAIT_S = 0.5
"""The longest the next sentence waits for the first to be handed to the device (it takes ~1 ms)."""
_DONE = object()


class Playback:
    """The synthesis of `text` in `voice`, played on one output device."""

    def __init__(
        self,
        voices: Speaking,
        speakers: Speakers,
        portaudio: StreamLock,
        voice: VoiceInfo,
        device_index: int,
        cancel: Cancel,
    ) -> None:
        self._voices = voices
        self._speakers = speakers
        self._portaudio = portaudio
        self.voice = voice
        self._device = device_index
        self._halt = threading.Event()
        self._halted_by: str | None = None
        self._cancel = AnyOf(cancel, self._halt)
        self._speaker: Speaker | None = None
        self.ended = threading.Event()
        """Set once the speech is over: played out, cut short, or failed (`error`)."""
        self.error: BaseException | None = None
        self.played: Played | None = None
        """What reached the device, once it ended without an error."""
        self.on_open: Callable[[Speaker], None] | None = None
        """Called with the open speaker before anything is fed to it (barge-in taps what it plays)."""
        self.warning: str | None = None
        """Once the speaker is open: why the one-speaker rule between servers does not hold (audio/owner.py)."""

    def run(self, text: str, speed: float) -> Played:
        """Synthesise and play it all; returns what reached the device (interrupted on a cancel)."""
        try:
            self._voices.prepare(self.voice)
            with self._speakers(self._portaudio, self._device, self.voice.sample_rate, self._cancel) as out:
                self._speaker = out
                self.warning = getattr(out, "warning", None)  # a test's speaker may carry none
                if self.on_open is not None:
                    self.on_open(out)
                sentences = self._voices.synthesize(self.voice, text, speed, self._cancel)
                for samples in ahead(sentences, self._cancel, out.first_audio):
                    out.feed(samples)
                self.played = out.finish()
                return self.played
        except BaseException as exc:
            if isinstance(exc, ListenError) and self._speaker is not None:
                exc.extra.setdefault("played_ms", self._speaker.played_ms)  # a lost speaker: what was heard
            self.error = exc
            raise
        finally:
            self.ended.set()

    def start(self, text: str, speed: float, then: Callable[[], None] | None = None) -> None:
        """Play in a thread of its own, which calls `then` when done; `ended`, `error` and `played`
        say how it went (no caller is left to raise to)."""

        def play() -> None:
            try:
                self.run(text, speed)
            except BaseException as exc:  # noqa: BLE001 - kept in `error` for whoever waits on it
                log.info("speech ended early: %s", type(exc).__name__)
            finally:
                if then is not None:
                    then()

        threading.Thread(target=play, name="mcp-listen-speak", daemon=True).start()

    def stop(self, wait_s: float) -> None:
        """Stop the speech now (the call it belongs to is over, or the user cut in: the exchange says which) and
        wait, bounded, until it let go."""
        self.halt("cancel")
        self.ended.wait(wait_s)

    def pause(self) -> None:
        """Go quiet now, keeping the rest (barge-in, while it finds out whether the user really spoke)."""
        if self._speaker is not None:
            self._speaker.pause()

    def resume(self) -> None:
        """Play on from where `pause` cut the speech."""
        if self._speaker is not None:
            self._speaker.resume()

    def halt(self, by: str = "stop_speaking") -> None:
        """Stop the speech without waiting (stop_speaking marks it so at once; `ended` says when it let go)."""
        if self._halted_by is None:
            self._halted_by = by
        self._halt.set()

    @property
    def halted(self) -> bool:
        """Whether someone stopped it (stop_speaking, or the call it belongs to ending early)."""
        return self._halt.is_set()

    @property
    def interrupted_by(self) -> str | None:
        """Who stopped it first (limits.INTERRUPTED_BY: stop_speaking, or cancel: the call over early or
        cancelled, the server shutting down); None while nobody did."""
        if self._halted_by is not None:
            return self._halted_by
        return "cancel" if self._cancel.is_set() else None

    def in_background(self, text: str, speed: float, release: Callable[[], None]) -> float | None:
        """Play in a thread of its own, which calls `release` (the device claim) when done; return
        once the first sound is playing, with its time.monotonic(). What fails before that
        (the device, the voice) is raised here, to the caller."""
        self.start(text, speed, then=release)
        while not self.ended.wait(0.01):
            speaker = self._speaker
            if speaker is not None and speaker.first_audio.is_set():
                return speaker.first_audio_at
        if self.error is not None:
            raise self.error
        speaker = self._speaker
        return speaker.first_audio_at if speaker is not None else None


def ahead(sentences: Iterator[Any], cancel: Cancel, started: threading.Event | None = None) -> Iterator[Any]:
    """`sentences` produced in a thread of its own, at most one ahead of the consumer; ends at once on a
    cancel (the producer finishes the item in hand, then stops), and re-raises the producer's error.

    With `started` (the speaker's first_audio) the producer waits, at most FIRST_SOUND_WAIT_S, for the first
    item to be playing before it asks for the second: Piper phonemizes the whole rest of the text then,
    holding the GIL, and the speaker's first write would wait for it (measured: first audio 13 ms later
    for 20 sentences than for one)."""
    handoff: queue.Queue[Any] = queue.Queue(maxsize=1)
    failure: list[BaseException] = []

    def produce() -> None:
        try:
            for number, item in enumerate(sentences):
                if not _put(handoff, item, cancel):
                    return
                if number == 0 and started is not None:
                    started.wait(FIRST_SOUND_WAIT_S)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer's thread
            failure.append(exc)
        _put(handoff, _DONE, cancel)

    threading.Thread(target=produce, name="mcp-listen-synth", daemon=True).start()
    while not cancel.is_set():
        try:
            item = handoff.get(timeout=POLL_S)
        except queue.Empty:
            continue
        if item is _DONE:
            if failure:
                raise failure[0]
            return
        yield item


def _put(handoff: queue.Queue[Any], item: Any, cancel: Cancel) -> bool:
    """Hand `item` over once there is room; False when the speech was cancelled meanwhile."""
    while not cancel.is_set():
        try:
            handoff.put(item, timeout=POLL_S)
            return True
        except queue.Full:
            continue
    return False
