"""One converse exchange, half-duplex: the agent's speech plays into an open microphone, and only what the
microphone hears after the speech has left the speaker is the user's.

The microphone opens first and runs all through the speech, so listening needs no device open at its
end: a user who answers at once is heard from the first window that cannot hold the agent's voice.
While the speech plays, every window is dropped unheard. After the last sample left the speaker
(audio/speaker.py's `ended_at`: PortAudio's stop returned once its buffer had played out), a window
still holds the agent's voice if its sound reached the microphone before then: windows arrive one
input latency (PortAudio's own figure for the open stream) after their last sample was captured and
span one window, so the first window that can be the user's alone arrives ended_at + input latency +
WINDOW_S; ECHO_TAIL_S more lets the room's reverberation die away.

The exchange sees the speech and the microphone through protocols of its own (the engine's Playback and
microphone), and reads the time from the clock it is given (the bench's simulated one).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from mcp_listen.contract.limits import WINDOW_S
from mcp_listen.duplex.confirm import AgentWords

log = logging.getLogger(__name__)

Clock = Callable[[], float]
"""time.monotonic, or a test's or the bench's clock."""

ECHO_TAIL_S = 0.03
"""The room's echo after the speaker fell silent: its first reflections arrive within ~30 ms (a 10 m path);
the late reverberation is too faint and smeared for Silero's onset. The guard already counts one window."""
STOP_WAIT_S = 1.0
"""How long leaving the exchange early waits for the speech to stop (it takes about one block)."""


class Played(Protocol):
    @property
    def ended_at(self) -> float | None: ...


class Speech(Protocol):
    """The agent's speech as the exchange drives it (engine.playback.Playback)."""

    ended: threading.Event
    error: BaseException | None
    on_open: Any

    @property
    def played(self) -> Played | None: ...

    def start(self, text: str, speed: float) -> None: ...

    def stop(self, wait_s: float) -> None: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...


class Microphone(Protocol):
    """The open microphone (audio.microphone's stream): its windows, and PortAudio's input latency."""

    latency_s: float

    def __iter__(self) -> Iterator[Any]: ...


class HalfDuplex:
    """The agent's speech, then the user's windows: wraps the open microphone for one converse."""

    def __init__(self, playback: Speech, text: str, speed: float, clock: Clock = time.monotonic) -> None:
        self.playback = playback
        self._text = text
        self.agent = AgentWords(text)
        """The agent's words: its echo taken off the front of the answer (and barge-in's confirmation)."""
        self._speed = speed
        self._clock = clock
        self._started = False
        self.listening_after_s: float | None = None
        """From the last sample leaving the speaker to the first window taken as the user's."""

    def windows(self, microphone: Microphone, on_listening: Callable[[], None]) -> Iterator[Any]:
        """Start the speech, drop what the microphone hears of it, then hand on every window;
        `on_listening` runs once, when the first window is the user's. A failed speech raises here."""
        self.playback.start(self._text, self._speed)
        self._started = True
        incoming = iter(microphone)
        for window in incoming:
            if self._still_echo(microphone.latency_s):
                continue
            self._listening(on_listening)
            yield window
            break
        yield from incoming

    @property
    def cut_in_after_s(self) -> float | None:
        """From the speech's first sound to the user's voice stopping it: never, half-duplex (barge.py's can)."""
        return None

    def close(self) -> None:
        """The call is over: a speech still playing (the call failed or was cancelled) stops now."""
        if self._started and not self.playback.ended.is_set():
            self.playback.stop(STOP_WAIT_S)

    def _still_echo(self, input_latency_s: float) -> bool:
        """True while a window just arrived may hold the agent's voice; raises what ended the speech."""
        playback = self.playback
        if not playback.ended.is_set():
            return True
        if playback.error is not None:
            raise playback.error
        ended_at = playback.played.ended_at if playback.played is not None else None
        if ended_at is None:  # nothing was opened: there is no echo to wait for
            return False
        return self._clock() < ended_at + input_latency_s + WINDOW_S + ECHO_TAIL_S

    def _listening(self, on_listening: Callable[[], None]) -> None:
        played = self.playback.played
        if played is not None and played.ended_at is not None:
            self.listening_after_s = self._clock() - played.ended_at
            log.info("listening %.0f ms after the speech left the speaker", self.listening_after_s * 1000)
        on_listening()
