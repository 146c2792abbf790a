"""Text in a script the voice cannot say: found with Piper's own phonemizer, refused before anything opens.

A voice reads a script it has no words for letter by letter, by name: espeak's English says "arabic alif"
for ا and "chinese letter" for 中, 9 to 19 phonemes for one letter where a word of its own language takes
about one. A paragraph of it would be minutes of names, saying nothing. So each script in the text (the
first word of its letters' Unicode names: ARABIC, CJK, LATIN...) is given to the voice's phonemizer, a
sample of its own words from the text, and where it comes out at more than SPELLED_PHONEMES_PER_LETTER
phonemes a letter, a text holding more than MAX_SPELLED_LETTERS of its letters is refused naming it.
The sample is what the voice would say (its own words, not a probe of ours), bounded (SAMPLE_LETTERS), and a
script with too few letters to matter is not phonemized at all.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Callable

from mcp_listen.contract.limits import MAX_SPELLED_LETTERS, SPELLED_PHONEMES_PER_LETTER
from mcp_listen.errors import InvalidArgument
from mcp_listen.voice.check import VoiceInfo

SAMPLE_LETTERS = 60
"""The letters of one script, taken from the text's own words of it, that its reading is measured on (~1 ms of
espeak). espeak makes at most ~1,000 phonemes of one clause and drops the rest (200 Arabic letters came out at
5 a letter, 100 at 9.4): 60 stay clear of that for every script measured (Thai, the densest, ~1,160), and a
capped sample would still be 16 a letter."""
Phonemize = Callable[[str], list[list[str]]]
"""The voice's phonemizer (PiperVoice.phonemize): text -> the phonemes of each sentence."""
_NOT_SOUNDS = frozenset(" ˈˌ")
"""Phonemizer output that is no sound: the word break and the stress marks (punctuation is left out too)."""


def script_of(letter: str) -> str:
    """The script of a letter as its Unicode name begins (ARABIC LETTER ALEF -> ARABIC; CJK UNIFIED IDEOGRAPH
    -> CJK); "UNNAMED" for a code point without a name."""
    name = unicodedata.name(letter, "")
    return name.split(" ", 1)[0] if name else "UNNAMED"


def letters_by_script(text: str) -> Counter[str]:
    return Counter(script_of(ch) for ch in text if ch.isalpha())


def sample(text: str, script: str, letters: int = SAMPLE_LETTERS) -> str:
    """The text's words in `script`, the rest blanked: its letters with the marks that follow them, the first
    `letters` of them."""
    kept: list[str] = []
    count, keeping = 0, False
    for ch in text:
        if ch.isalpha() and script_of(ch) == script:
            if count == letters:
                break
            kept.append(ch)
            count, keeping = count + 1, True
        elif keeping and unicodedata.category(ch).startswith("M"):
            kept.append(ch)  # a vowel sign or an accent on the letter before it
        else:
            if keeping:
                kept.append(" ")
            keeping = False
    return "".join(kept).strip()


def phonemes_per_letter(phonemize: Phonemize, words: str) -> float:
    """How many phonemes (stress, word breaks and punctuation left out) the voice's phonemizer makes of
    `words`, per letter."""
    letters = sum(ch.isalpha() for ch in words)
    if not letters:
        return 0.0
    sounds = sum(
        1
        for sentence in phonemize(words)
        for phoneme in sentence
        if phoneme not in _NOT_SOUNDS and not unicodedata.category(phoneme[:1] or " ").startswith(("P", "Z"))
    )
    return sounds / letters


def spelled(phonemize: Phonemize, text: str) -> list[tuple[str, int, float]]:
    """The scripts of `text` its voice reads letter by letter, with more than MAX_SPELLED_LETTERS letters:
    (script, letters in the text, phonemes per letter in the sample)."""
    found = []
    for script, count in letters_by_script(text).most_common():
        if count <= MAX_SPELLED_LETTERS:
            break
        ratio = phonemes_per_letter(phonemize, sample(text, script))
        if ratio > SPELLED_PHONEMES_PER_LETTER:
            found.append((script, count, ratio))
    return found


def refuse_spelled(phonemize: Phonemize, info: VoiceInfo, text: str) -> None:
    """InvalidArgument naming the first script of `text` the voice reads letter by letter, and what to do."""
    for script, count, ratio in spelled(phonemize, text):
        raise InvalidArgument(
            f"Invalid text: the voice {info.name} cannot say its {count} letters of the {_shown(script)} script: it "
            f"reads them out one by one, by name ({ratio:.0f} sounds a letter where words take 1 to 5; at most "
            f"{MAX_SPELLED_LETTERS} such letters are said). Give this voice text in its language ({info.language}), "
            "or choose a voice for that script: mcp-listen voices lists those installed, mcp-listen voices pull NAME "
            "fetches one."
        )


def _shown(script: str) -> str:
    return script if len(script) <= 3 else script.title()
