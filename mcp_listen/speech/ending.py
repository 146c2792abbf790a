"""How long the current pause must last to end the turn, and why the turn ended (the result's end_reason).

end_of_turn "silence" ends a turn after silence_ms of silence, always. "smart" asks, in each pause,
whether the words it follows are finished (the listener hands over a `Verdict`): finished, the pause
ends at silence_ms (end_reason "complete"); unfinished or not yet judged, it is held up to
max_pause_ms after the last word, then the turn ends anyway ("max_pause"). Where no signal covers
the language heard, the verdict says so (`by` "silence") and the plain silence rule applies
("silence"). Both pauses are counted by the endpointer from the same point (speech/endpoint.py), so
max_pause_ms is comparable with silence_ms. Pure: no audio, no numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcp_listen.errors import InvalidArgument

NO_SIGNAL = "silence"
"""A verdict's `by` when no signal covers the language: smart then ends the turn as silence does."""


@dataclass(frozen=True)
class Verdict:
    """What the signals made of the words a pause follows."""

    finished: bool
    by: str
    """Which signal decided: "words" (the text rule), "voice" (the audio model), "words+voice", or
    NO_SIGNAL when none covers the language."""


class TurnEnding:
    """Per recording: the silence that ends the pause now (`silence_for`), whether smart is holding
    the turn past silence_ms (`holding`), and why it ended (`reason`)."""

    def __init__(self, end_of_turn: str, silence_ms: int, max_pause_ms: int) -> None:
        self.smart = end_of_turn == "smart"
        self.silence_ms = silence_ms
        self.max_pause_ms = max(max_pause_ms, silence_ms)
        self.verdict: Verdict | None = None
        """The verdict the pause in progress (or the last one) is timed by; None before it is in."""

    def silence_for(self, verdict: Verdict | None) -> int:
        """The pause that ends the turn now; `verdict` is the words' judgement, None until it is in."""
        self.verdict = verdict
        return self.max_pause_ms if self.holds else self.silence_ms

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
        if not self.smart or (self.verdict is not None and self.verdict.by == NO_SIGNAL):
            return "silence"
        return "max_pause" if self.holds else "complete"

    def describe(self, stopped_by: str | None) -> str:
        """How the recording stopped, for the "Recording finished" progress: the endpointer's reason,
        then (smart) the end_reason and the signal that decided: "silence; complete by words"."""
        reason = self.reason(stopped_by)
        if not self.smart or reason not in ("complete", "max_pause"):
            return str(stopped_by)
        by = f" by {self.verdict.by}" if self.verdict is not None else ""
        return f"{stopped_by}; {reason}{by}"


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
