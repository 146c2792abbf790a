"""The pause in progress, as the listener runs end_of_turn "smart": the audio model asked as each part of
the pause is recorded, the verdict on the words and the voice (turns.judge), the pause that ends the turn
now (ending.TurnEnding), whether it is being held (the progress says so), and how the turn ended
(ending.TurnEnd). The listener owns the recording and the words; this owns what is decided of them."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from mcp_listen.contract.limits import HOLDING_MESSAGE, RESUMED_MESSAGE, SAMPLE_RATE
from mcp_listen.speech.end_words import said_last
from mcp_listen.speech.ending import END_WORD, SMART, EndOfTurnConfig, TurnEnd, TurnEnding, Verdict
from mcp_listen.speech.smart_turn import HEARD_SAMPLES, VoiceAtPause
from mcp_listen.speech.turns import judge, words_say
from mcp_listen.whisper.text import usable_text

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)


class Voice(Protocol):
    """The audio model at a pause (smart_turn.VoiceAtPause)."""

    def ask(self, pause: int, ms: int, samples: Callable[[], np.ndarray], now: int | None = None) -> None: ...

    def answer(self, pause: int) -> tuple[bool, float | None]: ...

    def early(self, pause: int, count: int) -> float | None: ...


class PauseJudge:
    """One recording's pauses and how its turn ended."""

    def __init__(
        self,
        ending: TurnEnding,
        voice: Voice | None = None,
        config: EndOfTurnConfig = SMART,
        end_words: tuple[str, ...] = (),
    ) -> None:
        self.ending = ending
        self.config = config
        self.end_words = end_words
        """The user's words that end the turn when said last (never logged)."""
        if voice is None and ending.smart:
            voice = VoiceAtPause(config.voice_threshold, config=config)
        self.voice = voice
        self._held = False
        """The holding message was reported for the pause in progress."""
        self._words: str | None = None
        """What the last word judged says of its pause ("open", "unfinished"): never the words themselves."""
        self._voice: float | None = None
        self._pause: int | None = None
        self._words_in = False
        """Whisper's guess for the pause `_pause` is in: the answers past the first ones are asked from then on."""
        self._end_word_checked: tuple[str | None, bool] = (None, False)
        """The words last looked at for an end word, and whether they end on one."""

    def target_ms(self, words: str | None, language: str, speech_end: int) -> int:
        """The pause that ends the turn now, after the words `words` (None: whisper's guess is not in) ended
        at sample `speech_end`: at once when they end on one of the user's end words (either mode); smart:
        silence_ms, at once, or up to max_pause_ms until the words and the voice say."""
        if words is not None and self._ends_on_end_word(words):
            self._words, self._voice, self._pause = END_WORD, None, speech_end
            return self.ending.silence_for(Verdict(True, END_WORD, at_once=True))
        if not self.ending.smart:
            return self.ending.silence_for(None)
        config = self.config
        voice_in, voice = self.voice.answer(speech_end) if self.voice else (True, None)
        early = self.voice.early(speech_end, config.at_once_answers) if self.voice else None
        verdict = None
        if words is not None:
            verdict = judge(
                words,
                language,
                voice,
                config.voice_threshold,
                voice_in=voice_in,
                early=early,
                at_once_from=config.at_once_threshold,
            )
        self._words = None if words is None else words_say(words, language)
        self._words_in = words is not None
        self._voice, self._pause = voice, speech_end
        return self.ending.silence_for(verdict)

    def _ends_on_end_word(self, words: str) -> bool:
        """Whether `words` end on one of the user's end words: worked out once per guess, not on every window
        of the pause (a long dictation's words are all the phrases so far)."""
        if self.end_words and words != self._end_word_checked[0]:
            self._end_word_checked = (words, said_last(usable_text(words) or "", self.end_words) is not None)
        return self._end_word_checked[1]

    def hold_message(self, pause_ms: float, reason: str | None) -> str | None:
        """Say once per pause when smart holds the turn past silence_ms (also in the window that ends it, when
        the words were judged only then: a busy machine), and when speech ends the hold (the CLI shows it)."""
        if pause_ms <= 0:
            message = RESUMED_MESSAGE if self._held else None
            self._held = False
            return message
        if not self._held and reason in (None, "silence") and self.ending.holding(pause_ms):
            self._held = True
            return HOLDING_MESSAGE
        return None

    def ask_the_voice(
        self, speech_end: int | None, pause_ms: float, recorded: int, audio: Callable[[int, int], np.ndarray]
    ) -> None:
        """In a pause of `ask_after_ms` or more: the audio model hears the last 8 s of speech with each of
        `pause_heard_ms` of the pause as soon as it is recorded (VoiceAtPause keeps one ask each): the first
        `at_once_answers` at once, the rest once whisper's guess of the words is in. Worked out beside the
        guess, they slowed it on 2 cores (tiny.en's pass on 5 s: ~550 ms against ~300 alone), and only the
        end at silence_ms needs them. `recorded` is the samples recorded so far, `audio(first, end)` the
        recording's samples from `first` to `end`."""
        if self.voice is None or speech_end is None or pause_ms < self.config.ask_after_ms:
            return
        words_in = self._pause == speech_end and self._words_in
        for i, ms in enumerate(self.config.pause_heard_ms):
            if i >= self.config.at_once_answers and not words_in:
                break  # the later answers wait for whisper's guess (see the docstring)
            until = speech_end + ms * SAMPLE_RATE // 1000
            if until <= recorded:
                last = functools.partial(_before, audio, until)
                self.voice.ask(speech_end, ms, last, now=recorded)

    def finished(self, stopped_by: str | None, pause_ms: float, target_ms: float) -> TurnEnd:
        """How the turn ended, logged once at DEBUG."""
        ending = self.ending
        answers = (
            self.voice.answers(self._pause) if isinstance(self.voice, VoiceAtPause) and self._pause is not None else ()
        )
        end = TurnEnd(
            stopped_by,
            ending.reason(stopped_by),
            ending.signal(stopped_by),
            self._words,
            self._voice,
            answers,
            ending.at_once,
            pause_ms,
            target_ms,
        )
        log.debug("turn end: %s", end.fields())
        return end


def _before(audio: Callable[[int, int], np.ndarray], end: int) -> np.ndarray:
    """The last HEARD_SAMPLES of the recording before sample `end` (fewer at its start: `audio` clips)."""
    return audio(end - HEARD_SAMPLES, end)
