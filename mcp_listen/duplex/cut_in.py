"""The cut-in rule: does the user talk over the agent in this window? A pure function of the echo path's
phase, Silero's recent probabilities and the echo model's recent measures; it returns a `CutIn` record
(which rule fired, and the numbers it judged) or None. And the pre-roll a cut-in hands the listener.

Which rule counts depends on the phase (path.py; docs/turn-taking.md has the table):

- `learnt`, the double-talk rule: over the last `onset_windows` windows the share of the microphone the
  echo model leaves rose `rise_db` over the exchange's echo-alone baseline, that leftover is about as loud as
  the microphone usually is while the agent speaks (within `level_db`, or `clear_level_db` after a clear
  rise), no window's leftover is louder than the microphone or clipped by the echo, and Silero hears
  speech in it (`onset_probability` on average).
- `headphones`, the same on the microphone itself: speech as loud as usual suffices (nothing to explain).
- otherwise, once AEC3 has learnt the path (`aec3_counts`, or while measuring again after it), the rule
  on AEC3 alone: Silero averages `strict_probability` over `strict_windows` of AEC3's output, counting
  only windows heard since AEC3 counts.
- `waiting`, `measuring`, `settling`, `paused`: nothing counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from mcp_listen.duplex.config import DEFAULT, BargeInConfig
from mcp_listen.duplex.doubletalk import Explained
from mcp_listen.duplex.path import Phase


class Rule(Enum):
    DOUBLE_TALK = "double_talk"
    """The leftover of the learnt echo model rose over the echo alone, is loud, and sounds like speech."""
    NO_ECHO = "no_echo"
    """Headphones: the microphone itself is as loud as usual and sounds like speech."""
    AEC3_ALONE = "aec3_alone"
    """The echo model unlearnt: AEC3's output sounds like speech over a longer span."""

    @property
    def said(self) -> str:
        """As the INFO line says it."""
        return {"double_talk": "the echo model", "no_echo": "no echo", "aec3_alone": "AEC3 alone"}[self.value]


@dataclass(frozen=True)
class CutIn:
    """Why the user's voice stopped the speech: logged once at DEBUG, never with words."""

    rule: Rule
    phase: Phase
    """The echo path's phase in the window that decided."""
    probability: float
    """Silero's average over the span judged."""
    span_windows: int
    rise_db: float | None = None
    """The double-talk rules: the leftover's average rise over the echo-alone baseline."""
    level_db: float | None = None
    """The double-talk rules: the quietest leftover against the microphone's usual level."""
    clear: bool = False
    """The rise was clear enough (`clear_rise_db`) to admit a leftover down to `clear_level_db`."""
    after_ms: int | None = None
    """From the speech's first sound to the cut (the exchange fills it in)."""

    def fields(self) -> str:
        """The record as `key=value` pairs, for the log."""
        numbers = {
            "rule": self.rule.value,
            "after_ms": self.after_ms,
            "phase": self.phase.value,
            "probability": round(self.probability, 3),
            "span_windows": self.span_windows,
            "rise_db": None if self.rise_db is None else round(self.rise_db, 1),
            "level_db": None if self.level_db is None else round(self.level_db, 1),
            "clear": self.clear,
        }
        return " ".join(f"{key}={value}" for key, value in numbers.items())


def cut_in(
    config: BargeInConfig,
    phase: Phase,
    probabilities: Sequence[float],
    measures: Iterable[Explained | None],
    aec3_windows: int | None,
) -> CutIn | None:
    """The rule the phase calls for (the module's docstring), on Silero's last probabilities (of the
    leftover while the model is learnt, of AEC3's output otherwise), the echo model's last measures and
    the windows heard since the rule on AEC3 alone counts (None: it does not)."""
    if phase in (Phase.WAITING, Phase.MEASURING, Phase.PAUSED):
        return None
    if phase in (Phase.LEARNT, Phase.HEADPHONES):
        return over_the_echo(config, phase, probabilities, measures, echo=phase is Phase.LEARNT)
    span = config.strict_windows
    strict = list(probabilities)[-span:]
    counts = aec3_windows is not None and aec3_windows >= span
    if counts and len(strict) == span and sum(strict) >= config.strict_probability * span:
        return CutIn(Rule.AEC3_ALONE, phase, sum(strict) / len(strict), len(strict))
    return None


def over_the_echo(
    config: BargeInConfig,
    phase: Phase,
    probabilities: Sequence[float],
    measures: Iterable[Explained | None],
    echo: bool,
) -> CutIn | None:
    """The double-talk rule over the last `onset_windows` windows (`echo`: the model learnt), or with no
    echo to explain (headphones) speech as loud as the microphone usually is. A window whose leftover is
    louder than the microphone (`adds_sound`) is never the user: a voice over the echo adds to both, while
    a prediction of a path that has changed adds sound of its own. Nor is a window where the echo clipped
    the microphone: no linear model explains it."""
    recent = list(probabilities)[-config.onset_windows :]
    measured = list(measures)
    if len(recent) < config.onset_windows or any(m is None for m in measured):
        return None
    known = [m for m in measured if m is not None]
    rise = sum(m.unexplained_db for m in known) / len(known) - known[0].baseline_db
    level = min(m.level_db for m in known)
    under_the_microphone = all(m.unexplained_db < 0.0 for m in known)
    clear = echo and rise > config.clear_rise_db and level > config.clear_level_db and under_the_microphone
    talks = (
        (not echo or rise > config.rise_db)
        and (not echo or not any(m.adds_sound(config.model.louder_db) for m in known))
        and (not echo or not any(m.clipped for m in known))
        and (level > config.level_db or clear)
        and sum(recent) >= config.onset_probability * config.onset_windows
    )
    if not talks:
        return None
    rule = Rule.DOUBLE_TALK if echo else Rule.NO_ECHO
    return CutIn(rule, phase, sum(recent) / len(recent), len(recent), rise, level, clear)


def talks_over_the_echo(
    probabilities: Sequence[float], measures: Iterable[Explained | None], echo: bool, config: BargeInConfig = DEFAULT
) -> bool:
    """`over_the_echo` as a yes or no (the replays of recorded windows ask it so)."""
    phase = Phase.LEARNT if echo else Phase.HEADPHONES
    return over_the_echo(config, phase, probabilities, measures, echo) is not None


def pre_roll(
    recent: list[tuple[Any, Any, Explained | None]],
    by_model: bool,
    no_echo: bool = False,
    config: BargeInConfig = DEFAULT,
) -> list[Any]:
    """The windows handed to the listener on a cut-in, each (AEC3's output, the leftover, its measure):
    what the echo model leaves while it decided, AEC3's output otherwise. With the model deciding, the
    windows before the user's first rise (the first of the last `onset_lookback_windows` that rose
    `rise_db` over the baseline) are AEC3's output: there the leftover still holds the agent's echo, which
    whisper hears as words, while AEC3's suppressor leaves next to nothing. With no echo (headphones) every
    window is the leftover, the microphone itself: AEC3 damps a voice over the reference even with no
    echo path."""
    if no_echo:
        return [left for _, left, _ in recent]
    if not by_model:
        return [clean for clean, _, _ in recent]
    lookback = len(recent) - config.onset_lookback_windows
    rises = [i for i, (_, _, m) in enumerate(recent) if i >= lookback and m is not None and m.rise_db > config.rise_db]
    first = rises[0] if rises else 0
    return [clean if i < first else left for i, (clean, left, _) in enumerate(recent)]
