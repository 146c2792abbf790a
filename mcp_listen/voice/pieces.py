"""Cutting the text to say so that the first sound comes early: a short first piece, then the rest.

Piper synthesises a whole sentence before it hands any audio back, so the time to the first
sound is the time to synthesise the first sentence. Cutting a short first piece (up to the
first clause boundary, or at most MAX_FIRST_WORDS words) bounds that time whatever the text;
the rest is synthesised sentence by sentence (Piper's own split) while the first piece plays.
A sentence that runs on without an end is cut too (at its last clause within MAX_RUN_WORDS words,
else there), so no one piece keeps the speaker silent, or a cancel waiting, for long. In the scripts
written without spaces (Chinese, Japanese, Thai...: limits.UNSPACED_LETTERS) each letter counts as a
word (a Chinese character is a syllable), so a run of them is cut between its letters like any other.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator

from mcp_listen.contract.limits import UNSPACED_LETTERS

MAX_FIRST_WORDS = 3
"""The first piece has at most this many words: under a second of speech, which Piper renders in ~65 ms on
two cores when it rendered the same just before, ~100 ms cold, as in the server (four words: 87 / ~120 ms;
bench/speak.py's in-process figures)."""
_WORD = re.compile(r"\S+")
MAX_RUN_WORDS = 30
"""The most words synthesised at once without a sentence end: ~0.5 s of synthesis, well inside the ~8 s
the words before it take to say."""
_BOUNDARY = re.compile(r"[,;:.!?，、；：。！？．][\"')\]}»”’」』）]*$")
"""A word that ends a clause or a sentence: , ; : . ! ? and their CJK forms (and any closing quote or bracket
after it)."""
_SENTENCE_END = re.compile(r"[.!?。！？．][\"')\]}»”’」』）]*$")
_UNSPACED = re.compile(f"[{UNSPACED_LETTERS}]")


def first_piece(text: str) -> tuple[str, str]:
    """`text` as (first piece, rest): cut after the first word that ends a clause, else after
    MAX_FIRST_WORDS words; the rest is empty when the text is that short already."""
    words = list(_words(text))
    if not words:
        return "", ""
    cut = words[min(len(words), MAX_FIRST_WORDS) - 1]
    for word in words[:MAX_FIRST_WORDS]:
        if _BOUNDARY.search(text[word[0] : word[1]]):
            cut = word
            break
    return text[: cut[1]].strip(), text[cut[1] :].strip()


def ends_mid_clause(piece: str) -> bool:
    """Whether `piece` was cut inside a clause (no punctuation closes it): Piper ends it as if it were
    a sentence, with ~110-170 ms of silence, which voice/synth.py shortens so the next piece follows on."""
    return not _BOUNDARY.search(piece)


def pieces(text: str) -> list[str]:
    """The pieces to synthesise in turn: the short first one, then the rest (Piper splits it into
    sentences), with every run-on sentence cut into runs of at most MAX_RUN_WORDS words."""
    head, rest = first_piece(text)
    return [piece for piece in (head, *_runs(rest)) if piece]


def _runs(text: str) -> list[str]:
    words = list(_words(text))
    cuts: list[int] = []
    run_start, clause = 0, None
    for i, (start, end) in enumerate(words):
        if _SENTENCE_END.search(text[start:end]):
            run_start, clause = i + 1, None
            continue
        if _BOUNDARY.search(text[start:end]):
            clause = i
        if i - run_start + 1 >= MAX_RUN_WORDS:
            cut = clause if clause is not None else i
            cuts.append(words[cut][1])
            run_start, clause = cut + 1, None
    bounds = [0, *cuts, len(text)]
    return [text[a:b].strip() for a, b in zip(bounds, bounds[1:], strict=False)]


def _words(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each word: a run of non-space characters, cut before every letter of a script written
    without spaces and after the last of a run of them (the marks and punctuation after a letter stay with it)."""
    for match in _WORD.finditer(text):
        start, end = match.span()
        if not _UNSPACED.search(text, start, end):
            yield start, end
            continue
        for i in range(start + 1, end):
            ch, before = text[i], text[i - 1]
            unspaced = bool(_UNSPACED.match(ch)) and not unicodedata.category(ch).startswith("M")
            after_unspaced = ch.isalnum() and not _UNSPACED.match(ch) and bool(_UNSPACED.match(before))
            if unspaced or after_unspaced:
                yield start, i
                start = i
        yield start, end
