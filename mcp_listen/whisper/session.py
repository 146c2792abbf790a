"""One utterance's whisper: the model held for the call, phrases transcribed as they are cut.

The engine opens a session per transcribe_voice or voice_query once the model was found and
checked (engine.parts.Whisper.open_session); the phrase worker (speech.phrases) then calls
`transcribe` and `detect` on it, and nothing calls back up into the engine. The model file is
opened and admitted once per call: by `preload` while the user speaks (no thread when the model
is resident already), or else by the first phrase. Later phrases run on the resident model
without opening the file again, unless it was replaced meanwhile (its key: device, inode,
size, mtime).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp_listen.contract.results import AnyOf, Cancel
from mcp_listen.whisper.model_file import ModelKey
from mcp_listen.whisper.text import condition, prompt_of

if TYPE_CHECKING:
    from mcp_listen.whisper.transcriber import Transcriber

log = logging.getLogger(__name__)


class Session:
    """The whisper side of one utterance: `preload`, then `transcribe` and `detect` per phrase."""

    def __init__(
        self, transcriber: Transcriber, path: Path, *, translate: bool, cancel: Cancel | None, vocabulary: str = ""
    ) -> None:
        self.transcriber = transcriber
        self.path = path
        self.translate = translate
        self.cancel = cancel
        self.vocabulary = vocabulary
        """Names whisper should prefer, the start of every prompt (the caller's: never logged)."""
        self._key: ModelKey | None = None
        """The admitted file's key once loaded for this call: later phrases skip the admission."""

    def preload(self) -> None:
        """Load the model in the background while the user is still talking, not after."""
        if self.transcriber.resident(self.path):
            self._key = self.transcriber.key
            return
        threading.Thread(target=self._load, name="whisper-preload", daemon=True).start()

    def transcribe(
        self, samples: Any, prompt: str, language: str, abort: Cancel | None = None, *, vocabulary: bool = True
    ) -> tuple[str, str]:
        """(text, language heard) of int16 samples; `prompt` is the text said just before, given to whisper
        after the vocabulary (unless `vocabulary` is False: barge-in's confirmation counts words, and names
        in a prompt are what whisper writes on a sound that is no speech)."""
        words = self.transcriber.hear(
            condition(samples),
            path=self.path,
            key=self._key,
            language=language,
            cancel=AnyOf(self.cancel, abort),
            prompt=prompt_of(self.vocabulary if vocabulary else "", prompt),
            translate=self.translate,
        )
        self._key = self.transcriber.key
        return words.text, words.language

    def detect(self, samples: Any, abort: Cancel | None = None) -> tuple[str, float]:
        """(language, probability) heard in the first seconds of int16 samples."""
        detected = self.transcriber.detect(
            condition(samples), path=self.path, key=self._key, cancel=AnyOf(self.cancel, abort)
        )
        self._key = self.transcriber.key
        return detected.language, detected.probability

    def _load(self) -> None:
        try:
            self.transcriber.load(self.path)
        except Exception as exc:  # noqa: BLE001 - the first phrase loads again and reports it
            log.debug("whisper preload failed: %s", type(exc).__name__)
            return
        self._key = self.transcriber.key
