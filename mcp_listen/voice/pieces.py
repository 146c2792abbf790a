"""Cutting the text to say so that the first sound comes early: a short first piece, then the rest.

Piper synthesises a whole sentence before it hands any audio back, so the time to the first
sound is the time to synthesise the first sentence. Cutting a short first piece (up to the
first clause boundary, or at most MAX_FIRST_WORDS words) bounds that time whatever the text;
the rest is synthesised sentence by sentence (Piper's own split) while the first piece plays.
"""

from __future__ import annotations

import re

MAX_FIRST_WORDS = 6
"""The first piece has at most this many words: about a second of speech, synthesised in a fraction of that."""
_WORD = re.compile(r"\S+")
_BOUNDARY = re.compile(r"[,;:.!?][\"')\]}»”’]*$")
"""A word that ends a clause or a sentence: , ; : . ! ? (and any closing quote or bracket after it)."""


def first_piece(text: str) -> tuple[str, str]:
    """`text` as (first piece, rest): cut after the first word that ends a clause, else after
    MAX_FIRST_WORDS words; the rest is empty when the text is that short already."""
    words = list(_WORD.finditer(text))
    if not words:
        return "", ""
    cut = words[min(len(words), MAX_FIRST_WORDS) - 1]
    for word in words[:MAX_FIRST_WORDS]:
        if _BOUNDARY.search(word.group()):
            cut = word
            break
    return text[: cut.end()].strip(), text[cut.end() :].strip()


def pieces(text: str) -> list[str]:
    """The pieces to synthesise in turn: the short first one, then the rest (Piper splits it into sentences)."""
    return [piece for piece in first_piece(text) if piece]
