"""Transcribe finished phrases while the user is still talking.

Whisper's cost grows with the audio it is given. Transcribing the whole
recording after the speaker stops makes the wait grow with the utterance; here
each phrase (speech up to a VAD-detected pause) is handed to a background worker
as soon as the pause is heard, so when the speaker stops only the last phrase is
left. The transcribe function is injected: this module knows nothing of whisper.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable

Transcribe = Callable[[Any], str]


class PhraseWorker:
    """Transcribes phrases in order on one background thread; `finish` joins the texts."""

    def __init__(self, transcribe: Transcribe) -> None:
        self._transcribe = transcribe
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._texts: list[str] = []
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="mcp-listen-phrases", daemon=True)
        self._thread.start()
        self.submitted = 0

    def submit(self, audio: Any) -> None:
        """Queue one finished phrase (int16 samples); returns at once."""
        self.submitted += 1
        self._jobs.put(audio)

    def finish(self, last: Any | None) -> str:
        """Transcribe the last phrase here, wait for the earlier ones, return the whole text."""
        self._jobs.put(None)
        tail = self._transcribe(last) if last is not None and len(last) else ""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return " ".join(t.strip() for t in [*self._texts, tail] if t and t.strip())

    def abandon(self) -> None:
        """Stop after the phrase in progress (cancelled call); results are dropped."""
        self._jobs.put(None)

    def _run(self) -> None:
        while True:
            audio = self._jobs.get()
            if audio is None:
                return
            if self._error is not None:
                continue
            try:
                self._texts.append(self._transcribe(audio))
            except BaseException as exc:  # noqa: BLE001 - re-raised in finish(), on the caller's thread
                self._error = exc


class PhraseCutter:
    """Decides where phrases end, from the VAD's window probabilities.

    A phrase ends at a pause: `pause_ms` of windows that are clearly quiet (below
    `quiet_below`, the silence threshold; the hysteresis band between silence and speech
    thresholds often holds a soft syllable, so it never counts). The cut is placed
    `lead_ms` after the pause began, so the next phrase starts inside the pause, never in
    a word. A phrase must be at least `min_phrase_ms` long: short pieces transcribe worse.
    """

    def __init__(
        self,
        *,
        pause_ms: int = 250,
        lead_ms: int = 96,
        min_phrase_ms: int = 2500,
        quiet_below: float = 0.35,
        window_ms: float = 32.0,
    ) -> None:
        self.pause_windows = max(1, round(pause_ms / window_ms))
        self.lead_windows = max(0, min(self.pause_windows, round(lead_ms / window_ms)))
        self.min_windows = max(1, round(min_phrase_ms / window_ms))
        self.quiet_below = quiet_below
        self.start_window = 0
        self._quiet_run = 0

    def update(self, window_index: int, speech_detected: bool, probability: float) -> tuple[int, int] | None:
        """Call after each window; returns (start, end) window indexes of a finished phrase, or None."""
        self._quiet_run = self._quiet_run + 1 if probability < self.quiet_below else 0
        if not speech_detected or self._quiet_run != self.pause_windows:
            return None
        end = window_index + 1 - self._quiet_run + self.lead_windows
        if end - self.start_window < self.min_windows:
            return None
        start, self.start_window = self.start_window, end
        return start, end
