"""Is it the user? A cut-in (cut_in.py) only pauses the agent; the speech stops for good once what was heard
from the user's onset on is confirmed as the user's speech, and plays on otherwise. A pure function of what
was heard, returning a `Verdict` record; the words never leave it (only their counts are logged).

Two signals must agree (bench/README.md, "Barge-in that only the user can trigger", has what each catches):

- Silero: the windows it hears as speech from the onset to the verdict (`confirm_speech_windows`). A clap,
  a click or a burst of noise fires the 64 ms onset rule over the agent's echo, but does not go on sounding
  like speech once the agent is quiet.
- whisper, when the exchange has it (converse): at least `confirm_words` words that are neither a mark of
  non-speech (`[Music]`, `(applause)`, `♪`), nor what whisper writes for noise alone ("you", "Thank you."),
  nor the agent's own words. The agent's own voice (an echo arriving later than the canceller looks, or
  the agent's text read out by another voice) is speech to Silero, and only its words give it away.
"""

from __future__ import annotations

import difflib
import itertools
import re
import unicodedata
from dataclasses import dataclass

NON_SPEECH = re.compile(r"\[[^\]]*\]|\([^)]*\)|\*[^*]*\*|[♪♫♬]")
"""How whisper writes sounds that are not words: [Music], (applause), *claps*, ♪."""
NOISE_WORDS = frozenset({"you", "thank you", "thanks for watching", "thank you for watching", "bye", "so"})
"""What whisper writes for noise alone (its best-known hallucinations on non-speech): never a confirmation."""
BACKCHANNELS = frozenset({"okay", "ok", "yeah", "yep", "uh huh", "mm hmm", "mhm", "hmm", "mm", "um", "uh", "oh", "ah"})
"""A listener's "okay", "yeah", "mm-hmm" while the agent talks says go on, not stop (whisper also writes
"Okay." for a sound that is no speech); alone, they never confirm."""
SAME_WORD = 0.75
"""How alike (difflib's ratio) a heard word and one of the agent's must be to be the same: whisper's
spelling of a word ("okay" / "ok", "colour" / "color") is not the user's own word."""
FUZZY_LETTERS = 5
"""Words shorter than this are the agent's only as it wrote them: "what" and "that" are 0.75 alike."""
SAME_PHRASE = 0.7
"""How alike (difflib's ratio) the letters heard and a stretch of the agent's text must be for all of them to be
its own: whisper hears the agent's words cut off at the pause's edges ("A man with a s..." as "Amen with us")
and misheard in another voice ("a small round dog ask to meet for the time": 0.82); a user's sentence against
the agent's text came to 0.40-0.61, 0.69 for one on its topic ("what time is the train")."""
SAME_SHORT_PHRASE = 0.8
"""The same under SHORT_PHRASE_LETTERS letters, where a user's words that repeat one of the agent's ("wait, not
Thursday" after "...to Thursday evening") come to 0.73, and its own cut-off words ("amen with us") to 0.8."""
SHORT_PHRASE_LETTERS = 20
STRETCHES = (0.75, 1.0, 1.3)
"""The lengths of the agent's stretches compared, as shares of the letters heard: whisper drops and adds letters."""
TAIL_WORDS = 2
"""An answer that is only the agent's last words, up to this many, is its late echo."""
PHRASE_LETTERS = 8
"""Fewer letters than this are judged word by word: a short answer ("no", "stop") is in any long text."""


@dataclass(frozen=True)
class Verdict:
    """Why a paused speech stopped for good or played on: logged once at DEBUG, never with the words."""

    confirmed: bool
    speech_windows: int
    """The pause's windows (after its first `confirm_settle_windows`) Silero heard as speech."""
    words: int | None = None
    """The words whisper heard (None: no whisper in this exchange, Silero decided alone)."""
    own_words: int = 0
    """Of them, the agent's own (or noise alone, or a backchannel alone)."""
    needed_windows: int = 0
    quiet_ms: int | None = None
    """How long the agent was quiet for it (the exchange fills it in)."""

    @property
    def reason(self) -> str:
        """Why, in words for the INFO line (never the words heard)."""
        if self.speech_windows < self.needed_windows:
            return f"Silero heard speech in {self.speech_windows} windows of the {self.needed_windows} needed"
        if self.words is not None and not self.confirmed:
            return f"whisper heard {self.words} word(s), {self.own_words} of them the agent's own or noise"
        return "speech, and words of the user's" if self.words is not None else "speech"

    def fields(self) -> str:
        """The record as `key=value` pairs, for the log."""
        return " ".join(f"{key}={value}" for key, value in vars(self).items())


class AgentWords:
    """What the agent says in this exchange, as words: whether a heard word is one of them (as whisper may
    spell it), and its echo taken off the front of an answer."""

    def __init__(self, text: str) -> None:
        self._in_order = spoken_words(text)
        self._words = set(self._in_order)
        self._letters = "".join(self._in_order)
        self._starts = [0, *itertools.accumulate(len(word) for word in self._in_order[:-1])]
        """Where each of its words begins in `_letters`: the stretches a heard phrase is compared with."""

    def says(self, words: list[str]) -> bool:
        """Whether `words` sound like a stretch of the agent's text, letter for letter (SAME_PHRASE)."""
        heard = "".join(words)
        if len(heard) < PHRASE_LETTERS:
            return False
        bar = SAME_PHRASE if len(heard) >= SHORT_PHRASE_LETTERS else SAME_SHORT_PHRASE
        matcher = difflib.SequenceMatcher(None, "", heard, autojunk=False)
        for start in self._starts:
            for share in STRETCHES:
                matcher.set_seq1(self._letters[start : start + round(len(heard) * share)])
                if matcher.real_quick_ratio() >= bar and matcher.ratio() >= bar:
                    return True
        return False

    def __contains__(self, word: object) -> bool:
        if word in self._words:
            return True
        if not isinstance(word, str) or len(word) < FUZZY_LETTERS:
            return False
        return bool(difflib.get_close_matches(word, self._words, n=1, cutoff=SAME_WORD))

    def taken_off(self, text: str, least: int = 2) -> str:
        """`text` without a leading run of at least `least` words the agent said in that order (its echo,
        heard before the user's own words), the rest as whisper wrote it; nothing when it is only the agent's
        last TAIL_WORDS words (the end of the speech, from a speaker later than the delay PortAudio reports)."""
        said = spoken_words(text)
        if 0 < len(said) <= TAIL_WORDS and said == self._in_order[-len(said) :]:
            return ""
        tokens = text.split()
        for length in range(len(tokens), least - 1, -1):
            said = [word for token in tokens[:length] for word in spoken_words(token)]
            if len(said) >= least and self._said_in_order(said):
                return " ".join(tokens[length:]).lstrip(" ,.;:!?-")
        return text

    def _said_in_order(self, said: list[str]) -> bool:
        agents, n = self._in_order, len(said)
        return any(agents[i : i + n] == said for i in range(len(agents) - n + 1))


def judge(speech_windows: int, heard: str | None, agent: AgentWords, needed_windows: int, needed_words: int) -> Verdict:
    """The verdict on a pause: Silero's windows of speech, and whisper's text when there is one."""
    if heard is None:
        return Verdict(speech_windows >= needed_windows, speech_windows, needed_windows=needed_windows)
    words = spoken_words(heard)
    said = " ".join(words)
    if said in NOISE_WORDS or all(word in BACKCHANNELS for word in words) or said in BACKCHANNELS or agent.says(words):
        own = len(words)
    else:
        own = sum(1 for word in words if word in agent)
    users = len(words) - own
    confirmed = speech_windows >= needed_windows and users >= needed_words
    return Verdict(confirmed, speech_windows, len(words), own, needed_windows)


def spoken_words(text: str) -> list[str]:
    """The words of `text`, lower case, without punctuation or whisper's marks of non-speech."""
    text = unicodedata.normalize("NFKC", NON_SPEECH.sub(" ", text)).casefold()
    return re.findall(r"[\w']+", text)
