"""Transcribe finished phrases while the user is still talking.

Whisper's cost grows with the audio it is given. Transcribing the whole
recording after the speaker stops makes the wait grow with the utterance; here
each phrase (speech up to a VAD-detected pause) is handed to a background worker
as soon as the pause is heard, so when the speaker stops only the last phrase is
left. The transcribe function is injected: this module knows nothing of whisper.
"""

from __future__ import annotations

import queue
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mcp_listen.contract.limits import WINDOW_MS
from mcp_listen.speech.endpoint import SILENCE_THRESHOLD

Transcribe = Callable[[Any, str, str, threading.Event], tuple[str, str]]
"""transcribe(int16 audio, prompt, language, abort) -> (text, language heard); raises on failure."""

Detect = Callable[[Any, threading.Event], tuple[str, float]]
"""detect(int16 audio, abort) -> (language heard, whisper's probability for it); raises on failure."""

SURE_OF_LANGUAGE = 0.8
"""Probability at which a language detected early is kept, once a detection before it named the
same language. Measured with base on the bench's Asterisk prompts (en, es, fr) after 1 s of
silence: the Spanish voices score 0.78-0.91 at 2 and 4 s of speech, always "es"; one of them
scores "it" 0.88-0.90 at 2-3 s at every encoder context (384 rows to the full 30 s), then "it"
0.59, "la" 0.71 and "es" 0.60 as it goes on. Below this the language is left to the first
phrase, which is longer."""

SURE_AT_ONCE = 0.95
"""Probability at which one early detection is kept without a second: the French prompts score
0.96-1.00 at 2 s; no wrong language scored this high."""


@dataclass
class _Job:
    audio: Any
    key: tuple[int, int] | None = None
    """(first sample, end sample) of a speculation: what `finish` compares to adopt it."""
    speculative: bool = False
    detect_only: bool = False
    abort: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    text: str = ""
    error: BaseException | None = None


class PhraseWorker:
    """Transcribes phrases in order on one background thread; `finish` joins the texts.

    Each phrase is conditioned on the text before it (whisper's prompt), so the pieces read
    as one transcription, and a language asked as `auto` is detected once, from the first
    seconds (`detect`) or else on the first phrase, and kept for the rest. `speculate`
    transcribes what was said so far as soon as the speaker pauses: if the pause turns out to
    be the end, `finish` adopts that text instead of starting whisper after the stop; if they
    go on, the guess is dropped (and aborted).
    """

    def __init__(self, transcribe: Transcribe, language: str, detect: Detect | None = None) -> None:
        self._transcribe = transcribe
        self._detect = detect
        self.language = language
        """The language asked for; once a phrase was heard, the one whisper heard."""
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._texts: list[str] = []
        self.so_far = ""
        """The words heard so far: every finished phrase, then the latest guess at the one after.
        Replaced whole (one assignment) by the worker thread, read by the listener's."""
        self._error: BaseException | None = None
        self._speculation: _Job | None = None
        self._early_guess: str | None = None
        """The language the previous early detection named: a second one must agree (SURE_OF_LANGUAGE)."""
        self._thread = threading.Thread(target=self._run, name="mcp-listen-phrases", daemon=True)
        self._thread.start()
        self.submitted = 0
        self.transcribed = 0
        """Phrases (not guesses) transcribed so far, failed ones included: all are in so_far when it
        equals `submitted`."""

    def submit(self, audio: Any) -> None:
        """Queue one finished phrase (int16 samples); returns at once."""
        self.retract()
        self.submitted += 1
        self._jobs.put(_Job(audio))

    def detect(self, audio: Any) -> None:
        """Learn the language from the first seconds while the speaker goes on (asked `auto`).

        Kept only when whisper is sure at once (`SURE_AT_ONCE`), or sure and agreeing with the
        detection before (`SURE_OF_LANGUAGE`); otherwise the next phrase detects
        it on more speech. Either way the last phrase, transcribed after the stop, is not
        the one that pays for detection.
        """
        if self._detect is not None and self.language == "auto":
            self._jobs.put(_Job(audio, detect_only=True))

    def speculate(self, audio: Any, key: tuple[int, int]) -> None:
        """Transcribe `audio` now in case the speaker has finished; replaces any earlier guess."""
        self.retract()
        self._speculation = _Job(audio, key, speculative=True)
        self._jobs.put(self._speculation)

    def words_at_pause(self, key: tuple[int, int] | None) -> str | None:
        """The words that end at this pause, once transcribed: the guess at `key` (the speech since the
        last phrase), or, with `key` None (the pause began inside a phrase already handed over), the
        text so far once every phrase is in. None while they are not."""
        if key is not None:
            return self.guess_for(key)
        return self.so_far if self.transcribed == self.submitted else None

    def guess_for(self, key: tuple[int, int]) -> str | None:
        """The guess at the speech `key` spans, once transcribed; None while it is not (or was never
        asked for). A failed guess reads as nothing heard: there is nothing to wait for."""
        guess = self._speculation
        if guess is None or guess.key != key or not guess.done.is_set():
            return None
        return "" if guess.error is not None else guess.text

    def retract(self) -> None:
        """The speaker went on: drop the guess, and stop whisper if it is working on it."""
        if self._speculation is not None:
            self._speculation.abort.set()
            self._speculation = None

    def finish(self, last: Any | None, key: tuple[int, int] | None = None) -> str:
        """Transcribe the last phrase (or adopt the guess made for it), wait, return the whole text."""
        guess = self._speculation
        adopted = guess is not None and key is not None and guess.key == key
        if not adopted:
            self.retract()
            if last is not None and len(last):
                self._jobs.put(_Job(last))
        self._jobs.put(None)
        self._thread.join()
        if self._error is not None:
            raise self._error
        if adopted and guess is not None:
            if guess.error is not None:
                raise guess.error
            self._texts.append(guess.text)
        return join_phrases(self._texts)

    def abandon(self) -> None:
        """Stop after the phrase in progress (cancelled call); results are dropped."""
        self.retract()
        self._jobs.put(None)

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            if self._error is None and not job.abort.is_set():
                self._work(job)
            job.done.set()

    def _learn_language(self, job: _Job) -> None:
        if self.language != "auto" or self._detect is None:
            return
        try:
            detected, probability = self._detect(job.audio, job.abort)
        except Exception:  # noqa: BLE001 - the phrase's own transcription detects it instead
            return
        confirmed = detected == self._early_guess and probability >= SURE_OF_LANGUAGE
        if confirmed or probability >= SURE_AT_ONCE:
            self.language = detected
        self._early_guess = detected

    def _prompt(self) -> str:
        """The text so far, as whisper's prompt. Its final full stop is left off: whisper put it
        there only because the piece ended, and with it whisper starts a new sentence."""
        return _SENTENCE_END.sub("", join_phrases(self._texts))

    def _work(self, job: _Job) -> None:
        if job.detect_only:
            self._learn_language(job)
            return
        try:
            text, language = self._transcribe(job.audio, self._prompt(), self.language, job.abort)
        except BaseException as exc:  # noqa: BLE001 - re-raised in finish(), on the caller's thread
            if job.speculative:
                job.error = None if job.abort.is_set() else exc
            else:
                self._error = exc
                self.transcribed += 1
            return
        if language and self.language == "auto":
            self.language = language  # detected once: later phrases are not detected again
        if job.speculative:
            job.text = text
        else:
            self._texts.append(text)
            self.transcribed += 1
        if not job.abort.is_set():
            self.so_far = join_phrases([*self._texts, text] if job.speculative else self._texts)


_SENTENCE_END = re.compile(r"(?:\.\.\.|…|(?<![.?!])\.)$")
"""A full stop or an ellipsis closing a piece: whisper's marks for "the audio ended here"."""


def join_phrases(texts: list[str]) -> str:
    """One transcription from phrase texts: whisper ends every piece with a full stop (or "..."),
    even one cut mid-sentence; where the next piece goes on in lower case, that mark was invented."""
    out = ""
    for text in (t.strip() for t in texts):
        if not text:
            continue
        if out and text[0].islower():
            out = _SENTENCE_END.sub("", out)
        out = f"{out} {text}" if out else text
    return out


class PhraseCutter:
    """Decides where phrases end, from the VAD's window probabilities.

    A phrase ends at a pause: `pause_ms` of windows that are clearly quiet (below
    `quiet_below`, the silence threshold; the hysteresis band between silence and speech
    thresholds often holds a soft syllable, so it never counts). The cut is placed
    `lead_ms` after the pause began, so the next phrase starts inside the pause, never in
    a word. A phrase must be at least `min_phrase_ms` long: short pieces transcribe worse.

    Once a phrase is `long_phrase_ms` long, a shorter gap ends it (`long_pause_ms`, a breath
    between words). Real voices often run 10-15 s without a quarter second of clear quiet, and
    the last phrase is what whisper must finish within the silence window after the speaker
    stops: on 2 cores tiny.en needs 1.1 s for 15 s of speech, base 1.2 s for 9 s. Windows 20 dB
    under the speaker's level were tried as a gap too (Silero scores most gaps between words as
    speech): base's post-speech median fell 327 -> 264 ms, but the short pieces it made
    transcribed badly (pipeline minus whole-clip WER -0.08 -> +9 points), so only windows
    Silero scores as quiet end a phrase.
    """

    def __init__(
        self,
        *,
        pause_ms: int = 250,
        lead_ms: int = 96,
        min_phrase_ms: int = 2500,
        long_phrase_ms: int = 4000,
        long_pause_ms: int = 96,
        quiet_below: float = SILENCE_THRESHOLD,
        window_ms: float = WINDOW_MS,
    ) -> None:
        self.pause_windows = max(1, round(pause_ms / window_ms))
        self.lead_windows = max(0, min(self.pause_windows, round(lead_ms / window_ms)))
        self.min_windows = max(1, round(min_phrase_ms / window_ms))
        self.long_windows = max(self.min_windows, round(long_phrase_ms / window_ms))
        self.long_pause_windows = max(1, min(self.pause_windows, round(long_pause_ms / window_ms)))
        self.quiet_below = quiet_below
        self.start_window = 0
        self._quiet_run = 0

    def update(self, window_index: int, speech_detected: bool, probability: float) -> tuple[int, int] | None:
        """Call after each window; returns (start, end) window indexes of a finished phrase, or None."""
        self._quiet_run = self._quiet_run + 1 if probability < self.quiet_below else 0
        if not speech_detected or self._quiet_run != self._pause_needed(window_index):
            return None
        end = window_index + 1 - self._quiet_run + min(self.lead_windows, self._quiet_run)
        if end - self.start_window < self.min_windows:
            return None
        start, self.start_window = self.start_window, end
        return start, end

    def _pause_needed(self, window_index: int) -> int:
        """Quiet windows that end the phrase in progress: fewer once it is long."""
        began = window_index + 1 - self._quiet_run
        return self.long_pause_windows if began - self.start_window >= self.long_windows else self.pause_windows
