"""Did the user end their turn with one of their end words? `said_last` finds a configured word or short phrase
("over", "send it", "c'est tout") as the last words of a transcription, and gives the text without it.

Only the last words count: "game over is a good title" and "it's over, I think" go on. What follows the
phrase may be punctuation, quotes or "…" only. Whisper writes the same words many ways, so both sides are folded
alike before they are compared (`fold`): case, accents and other marks (Unicode NFKD; "C’est tout." is "c'est
tout", Russian "Всё" is "все"), punctuation, hyphens and apostrophes ("send-it" is "send it"). Then a phrase
matches when its words are the last words heard, each the same or, for words of FUZZY_LETTERS letters or more,
alike by SAME_WORD; or when its letters joined are the last words' letters joined, exactly (whisper joins and
splits words: "Sendit", "that s all").

Any script: a word is a run of letters, digits and their marks; a script written without spaces (Chinese,
Japanese, Thai: contract.limits.UNSPACED_LETTERS) is taken letter by letter, so "以上" is found at the end of
"これで以上。" and not in "以上です".

Pure: no numpy, no whisper. The text is what whisper wrote with its marks of non-speech taken out
(whisper.text.usable_text): a trailing "[BLANK_AUDIO]" holds letters, so it would be the last word.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from dataclasses import dataclass

from mcp_listen.contract.limits import UNSPACED_LETTERS

SAME_WORD = 0.82
"""How alike (difflib's ratio) a heard word and a word of the phrase must be, when both have FUZZY_LETTERS letters
or more, to be the same: one letter added or dropped in a word of 5 (0.91: "roger" / "rogers", "colour" /
"color"), one changed in a word of 6 or more (0.83: "finito" / "finita"); not one changed in a word of 5
(0.8: "roger" / "rover")."""
FUZZY_LETTERS = 5
"""Words shorter than this match only as written (folded). A word of 4 is one letter from many others that a
sentence ends on: "over" is 0.89 alike "hover", "cover", "rover", "overt" and "overs", and 0.75 "oven"; whisper
spells a short common word the one way."""
SENTENCE_ENDS = ".!?…。！？"
"""The marks after the end word that are kept, when the words before it do not end a sentence of their own:
"Fix the bug, over." is "Fix the bug."."""
_JOINERS = ",;:、，；：¡¿"
"""Punctuation that led into the end word and goes with it ("Fix the bug, over" is "Fix the bug"; Spanish's
opening "¡" and "¿"), beside dashes, opening brackets and quotes."""
_UNSPACED = re.compile(f"[{UNSPACED_LETTERS}]")


@dataclass(frozen=True)
class EndWord:
    """An end word heard last: which of the configured phrases, and the transcription without it."""

    phrase: str
    """The configured phrase that matched, as configured."""
    text: str
    """The transcription without the end word and the punctuation that led into it ("" when it was all)."""


@dataclass(frozen=True)
class Word:
    """One word of a text: folded for comparing, and where it stands in the text."""

    folded: str
    start: int
    end: int


def said_last(text: str, end_words: tuple[str, ...]) -> EndWord | None:
    """The end word `text` ends with, or None. Of several configured phrases that match, the longest (the most
    words heard, then the most letters): "over and out" before "out"."""
    heard = words_of(text)
    if not heard:
        return None
    best: tuple[int, int, str] | None = None
    for phrase in end_words:
        wanted = [word.folded for word in words_of(phrase)]
        covered = _covered(heard, wanted) if wanted else 0
        if covered and (best is None or (covered, len("".join(wanted))) > best[:2]):
            best = (covered, len("".join(wanted)), phrase)
    if best is None:
        return None
    covered, _, phrase = best
    return EndWord(phrase, _without(text, heard[-covered].start, heard[-1].end))


def without_end_word(text: str, end_words: tuple[str, ...]) -> str:
    """`text` with the end word it ends on taken out ("" when that was all), else `text` as it is: the final
    transcription can differ from the guess the end word was heard in."""
    found = said_last(text, end_words)
    return text if found is None else found.text


def words_of(text: str) -> list[Word]:
    """The words of `text` in order: runs of letters and digits with their marks, a letter of a script written
    without spaces a word of its own; everything else (spaces, punctuation, apostrophes, hyphens) divides them."""
    words: list[Word] = []
    start: int | None = None
    unspaced = False
    for i, ch in enumerate(text):
        kind = unicodedata.category(ch)[0]
        if kind == "M" and start is not None:
            continue  # a mark belongs to the letter before it
        if kind in "LN":
            alone = _UNSPACED.match(ch) is not None
            if start is not None and not alone and not unspaced:
                continue
            if start is not None:
                words.append(Word(fold(text[start:i]), start, i))
            start, unspaced = i, alone
        elif start is not None:
            words.append(Word(fold(text[start:i]), start, i))
            start = None
    if start is not None:
        words.append(Word(fold(text[start:]), start, len(text)))
    return [word for word in words if word.folded]


def fold(word: str) -> str:
    """A word as it is compared: lower case (casefold: "ß" is "ss"), compatibility forms and accents undone
    (NFKD, marks dropped: "É" is "e", "ﬁ" is "fi", "ё" is "е"), letters and digits only."""
    decomposed = unicodedata.normalize("NFKD", word.casefold())
    return "".join(ch for ch in decomposed if unicodedata.category(ch)[0] in "LN")


def alike(heard: str, wanted: str) -> bool:
    """Whether a heard word is the phrase's word, as whisper may spell it (both folded)."""
    if heard == wanted:
        return True
    if min(len(heard), len(wanted)) < FUZZY_LETTERS:
        return False
    return difflib.SequenceMatcher(None, heard, wanted, autojunk=False).ratio() >= SAME_WORD


def _covered(heard: list[Word], wanted: list[str]) -> int:
    """How many of the last words heard are the phrase `wanted` (folded words), 0 when they are not."""
    n = len(wanted)
    if len(heard) >= n and all(alike(word.folded, w) for word, w in zip(heard[-n:], wanted, strict=True)):
        return n
    letters, joined = "".join(wanted), ""
    for k in range(1, len(heard) + 1):
        joined = heard[-k].folded + joined
        if len(joined) >= len(letters):
            return k if joined == letters else 0
    return 0


def _without(text: str, start: int, end: int) -> str:
    """`text` with its characters from `start` on taken out, and the separators that led into them; the sentence
    marks after the end word (`end` on) kept when the words before end no sentence of their own."""
    kept = text[:start]
    while kept and (kept[-1].isspace() or kept[-1] in _JOINERS or unicodedata.category(kept[-1]) in _LEADING):
        kept = kept[:-1]
    if not kept:
        return ""
    if kept[-1] not in SENTENCE_ENDS:
        kept += "".join(ch for ch in text[end:] if ch in SENTENCE_ENDS)
    return kept


_LEADING = ("Pd", "Ps", "Pi", "Pc")
"""Unicode's dashes, opening brackets, opening quotes and connectors: they lead into the end word, and go with it."""
