"""How long the current pause must last to end the user's turn, why the turn ended (the result's
end_reason and end_signal), and end_of_turn "smart"'s thresholds (`EndOfTurnConfig`).

end_of_turn "silence" ends a turn after silence_ms of silence, always. "smart" asks, in each pause,
whether the words it follows are finished (the listener hands over a `Verdict`): when the words and
the voice agree at once that they are (`Verdict.at_once`), the turn ends as soon as that is known,
without waiting out silence_ms; finished otherwise, the pause ends at silence_ms; unfinished or not
yet judged, it is held up to max_pause_ms after the last word, then the turn ends anyway
("max_pause"). The end_reason of a finished turn names the signal that decided ("words", "voice",
"words+voice"). Where no signal covers the language heard, the verdict says so (`by` "silence") and
the plain silence rule applies ("silence"). Both pauses are counted by the endpointer from the same
point (speech/endpoint.py), so max_pause_ms is comparable with silence_ms. How the turn ended is a
`TurnEnd` record, logged once at DEBUG. Pure: no audio, no numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mcp_listen.errors import InvalidArgument

FINISHED_BY = ("words", "voice", "words+voice")
"""A smart verdict's signals that end a finished turn, each also its end_reason."""
END_WORD = "end_word"
"""The verdict's `by`, and the end_reason, when the user said one of their end words last: in either mode, the
turn ends at once."""
NO_SIGNAL = "silence"
"""A verdict's `by` when no signal covers the language: smart then ends the turn as silence does."""
UNJUDGED = "unjudged"
"""The end_signal of a pause held to max_pause_ms before the words (or the voice) were in."""


@dataclass(frozen=True)
class EndOfTurnConfig:
    """end_of_turn "smart"'s thresholds (the measurements behind them: bench/README.md, "Smart end of turn")."""

    voice_threshold: float = 0.5
    """The audio model's probability of a finished turn from which it ends the turn."""
    pause_heard_ms: tuple[int, ...] = (0, 100, 200, 300)
    """The model hears the speech with each of these ms of the pause after it; the least sure answer counts
    (its answer swings with where the audio ends)."""
    ask_after_ms: int = 100
    """No answer is asked before the pause has lasted this long: a breath between words ends sooner."""
    answers_per_s: float = 1.0
    """The most answers worked out per second of audio, on average (each costs ~90 ms of CPU)."""
    at_once_threshold: float = 0.7
    """The least of the audio model's first `at_once_answers` answers from which, with whisper's words ending
    a sentence (a final full stop, question or exclamation mark, and no trailing word), the turn ends at
    once. Higher than `voice_threshold`: a thinking pause it misjudged would be cut short of silence_ms."""
    at_once_answers: int = 2
    """How many of the answers (in `pause_heard_ms` order: the speech with 0, then 100 ms of the pause) an
    at-once end waits for: the later ones would add their ms of pause to every finished turn."""

    def __post_init__(self) -> None:
        if not (0.0 < self.voice_threshold <= 1.0):
            raise ValueError(
                f"EndOfTurnConfig.voice_threshold: expected a number in (0, 1]; got {self.voice_threshold!r}."
            )
        if not self.pause_heard_ms or any(ms < 0 for ms in self.pause_heard_ms):
            raise ValueError(
                f"EndOfTurnConfig.pause_heard_ms: expected ms >= 0, at least one; got {self.pause_heard_ms!r}."
            )
        if self.ask_after_ms < 0:
            raise ValueError(f"EndOfTurnConfig.ask_after_ms: expected ms >= 0; got {self.ask_after_ms!r}.")
        if not (self.voice_threshold <= self.at_once_threshold <= 1.0):
            raise ValueError(
                "EndOfTurnConfig.at_once_threshold: expected a number from voice_threshold "
                f"({self.voice_threshold}) to 1; got {self.at_once_threshold!r}."
            )
        if not (1 <= self.at_once_answers <= len(self.pause_heard_ms)):
            raise ValueError(
                f"EndOfTurnConfig.at_once_answers: expected 1 to {len(self.pause_heard_ms)} (pause_heard_ms' "
                f"answers); got {self.at_once_answers!r}."
            )
        if not (math.isfinite(self.answers_per_s) and self.answers_per_s > 0):
            raise ValueError(
                f"EndOfTurnConfig.answers_per_s: expected a finite number > 0; got {self.answers_per_s!r}."
            )

    @property
    def answers_saved(self) -> int:
        """The answer budget saved up: one whole pause's, so a turn after a second of speech has them at once."""
        return len(self.pause_heard_ms)


SMART = EndOfTurnConfig()
"""The product's end_of_turn "smart"."""


@dataclass(frozen=True)
class Verdict:
    """What the signals made of the words a pause follows."""

    finished: bool
    by: str
    """Which signal decided: "words" (the text rule), "voice" (the audio model), "words+voice", or
    NO_SIGNAL when none covers the language."""
    at_once: bool = False
    """The words and the voice agree so surely that the turn ends now, not at silence_ms."""


class TurnEnding:
    """Per recording: the silence that ends the pause now (`silence_for`), whether smart is holding
    the turn past silence_ms (`holding`), and why it ended (`reason`)."""

    def __init__(
        self, end_of_turn: str, silence_ms: int, max_pause_ms: int, at_once_ms: int = SMART.ask_after_ms
    ) -> None:
        self.smart = end_of_turn == "smart"
        self.silence_ms = silence_ms
        self.max_pause_ms = max(max_pause_ms, silence_ms)
        self.at_once_ms = min(at_once_ms, silence_ms)
        """The pause that ends a turn judged finished at once: no verdict is asked before it has lasted this long,
        so the endpointer stops on the window the verdict comes in."""
        self.verdict: Verdict | None = None
        """The verdict the pause in progress (or the last one) is timed by; None before it is in."""

    def silence_for(self, verdict: Verdict | None) -> int:
        """The pause that ends the turn now; `verdict` is the words' judgement, None until it is in."""
        self.verdict = verdict
        if self.holds:
            return self.max_pause_ms
        return self.at_once_ms if self.at_once else self.silence_ms

    @property
    def holds(self) -> bool:
        """smart, and the words this pause follows are not (yet) judged finished."""
        verdict = self.verdict
        return self.smart and (verdict is None or not (verdict.finished or verdict.by == NO_SIGNAL))

    def holding(self, pause_ms: float) -> bool:
        """Whether a pause of `pause_ms` (the endpointer's count) would have ended the turn but is held
        because the words were judged unfinished (not merely while the judgement is still to come)."""
        judged = self.verdict is not None
        return judged and self.holds and self.max_pause_ms > self.silence_ms and pause_ms >= self.silence_ms

    def reason(self, stopped_by: str | None) -> str | None:
        """The end_reason of a recording that stopped as `stopped_by` says; None when nobody spoke
        before the no-speech timeout (there was no turn to end)."""
        if stopped_by == "ceiling":
            return "duration"
        if stopped_by != "silence":
            return None
        verdict = self.verdict
        if verdict is not None and verdict.by == END_WORD:
            return END_WORD
        if not self.smart or (verdict is not None and verdict.by == NO_SIGNAL):
            return "silence"
        if self.holds or verdict is None:
            return "max_pause"
        return verdict.by

    @property
    def at_once(self) -> bool:
        """The pause in progress ends (or would end) at once: an end word in either mode, or (smart) the words
        and the voice agreeing surely."""
        verdict = self.verdict
        if verdict is None or not verdict.at_once:
            return False
        return verdict.by == END_WORD or (self.smart and not self.holds)

    def signal(self, stopped_by: str | None) -> str | None:
        """The result's end_signal under "smart", where end_reason does not name the signal: what held a
        "max_pause" ("words", "voice", "words+voice"; UNJUDGED when they were not in yet), and NO_SIGNAL
        beside a "silence" (no signal covers the language). None otherwise: a finished turn's end_reason is
        its signal, and end_word and duration say it all."""
        if not self.smart or self.reason(stopped_by) not in ("max_pause", "silence"):
            return None
        return UNJUDGED if self.verdict is None else self.verdict.by

    def describe(self, stopped_by: str | None) -> str:
        """How the recording stopped, for the "Recording finished" progress: the endpointer's reason,
        then (smart) the end_reason, and the signal that held a max_pause: "silence; words+voice at once",
        "silence; max_pause by words"."""
        reason = self.reason(stopped_by)
        if reason == END_WORD:
            return f"{stopped_by}; {END_WORD}"
        if not self.smart or reason not in (*FINISHED_BY, "max_pause"):
            return str(stopped_by)
        if reason == "max_pause":
            by = f" by {self.verdict.by}" if self.verdict is not None else ""
            return f"{stopped_by}; max_pause{by}"
        return f"{stopped_by}; {reason}{' at once' if self.at_once else ''}"


def max_pause_ms(asked: int | None, default: int, silence_ms: int) -> int:
    """The pause smart holds at most: the argument, which may not be shorter than the call's silence_ms
    (refused before anything opens), else the default, raised to silence_ms when it is shorter (a long
    silence_ms asked for leaves nothing to hold)."""
    if asked is None:
        return max(default, silence_ms)
    if asked < silence_ms:
        raise InvalidArgument(
            f"Invalid max_pause_ms: expected at least silence_ms ({silence_ms}), the pause that ends a finished "
            f"turn; got {asked} (integer)."
        )
    return asked


@dataclass(frozen=True)
class TurnEnd:
    """How the user's turn ended, logged once at DEBUG: never the words, at most the class of the last one."""

    stopped_by: str | None
    """The endpointer's reason ("silence", "ceiling", "no_speech_timeout")."""
    end_reason: str | None
    end_signal: str | None
    words: str | None
    """What the last word says of the pause ("open", "unfinished"); None when not in, or unknown words."""
    voice: float | None
    """The least sure of the audio model's answers the verdict used (None: not in; NaN: no model)."""
    answers: tuple[float, ...]
    """Every answer the audio model gave for the last pause."""
    at_once: bool
    """The words and the voice agreed at once: the turn ended without waiting out silence_ms."""
    pause_ms: float
    """The pause when the turn ended."""
    target_ms: float
    """The pause that had to be reached then: silence_ms, or max_pause_ms while smart held it."""

    def fields(self) -> str:
        """The record as `key=value` pairs, for the log."""
        numbers = {
            "stopped_by": self.stopped_by,
            "end_reason": self.end_reason,
            "end_signal": self.end_signal,
            "words": self.words,
            "voice": None if self.voice is None else round(self.voice, 3),
            "answers": ",".join(f"{a:.3f}" for a in self.answers) or None,
            "at_once": self.at_once,
            "pause_ms": round(self.pause_ms),
            "target_ms": round(self.target_ms),
        }
        return " ".join(f"{key}={value}" for key, value in numbers.items())
