"""One speak_text's playing: Piper's sentences fed to the speaker as they come, in the caller's
thread (wait: true) or a background one that holds the device until the speech ends (wait: false).

Synthesis runs here while the speaker's writer thread plays what came before: the first, short
piece (voice/pieces.py) sounds while the next sentence is being synthesised.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mcp_listen.contract.results import Cancel

if TYPE_CHECKING:
    from mcp_listen.audio.speaker import Played, Speaker
    from mcp_listen.engine.parts import Speakers, Speaking
    from mcp_listen.voice.check import VoiceInfo

log = logging.getLogger(__name__)


class Playback:
    """The synthesis of `text` in `voice`, played on one output device."""

    def __init__(
        self,
        voices: Speaking,
        speakers: Speakers,
        portaudio: Any,
        voice: VoiceInfo,
        device_index: int,
        cancel: Cancel,
    ) -> None:
        self._voices = voices
        self._speakers = speakers
        self._portaudio = portaudio
        self.voice = voice
        self._device = device_index
        self._cancel = cancel
        self._speaker: Speaker | None = None
        self._ended = threading.Event()
        self._error: BaseException | None = None

    def run(self, text: str, speed: float) -> Played:
        """Synthesise and play it all; returns what reached the device (interrupted on a cancel)."""
        try:
            self._voices.prepare(self.voice)
            with self._speakers(self._portaudio, self._device, self.voice.sample_rate, self._cancel) as out:
                self._speaker = out
                for samples in self._voices.synthesize(self.voice, text, speed, self._cancel):
                    out.feed(samples)
                return out.finish()
        except BaseException as exc:
            self._error = exc
            raise
        finally:
            self._ended.set()

    def in_background(self, text: str, speed: float, release: Callable[[], None]) -> float | None:
        """Play in a thread of its own, which calls `release` (the device claim) when done; return
        once the first sound is playing, with its time.monotonic(). What fails before that
        (the device, the voice) is raised here, to the caller."""

        def play() -> None:
            try:
                self.run(text, speed)
            except BaseException as exc:  # noqa: BLE001 - no caller is left to tell; the log says it
                log.info("background speech ended early: %s", type(exc).__name__)
            finally:
                release()

        threading.Thread(target=play, name="mcp-listen-speak", daemon=True).start()
        while not self._ended.wait(0.01):
            speaker = self._speaker
            if speaker is not None and speaker.first_audio.is_set():
                return speaker.first_audio_at
        if self._error is not None:
            raise self._error
        speaker = self._speaker
        return speaker.first_audio_at if speaker is not None else None
