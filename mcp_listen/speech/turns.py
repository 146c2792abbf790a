"""Does what was said so far sound like the end of the user's turn? From whisper's own text.

end_of_turn "smart" asks this of the speculative transcript made in each pause (speech/phrases.py
has it before silence_ms has passed): words that end unfinished — no final punctuation, an
ellipsis, or a trailing conjunction, article, preposition or filler in the language heard —
make the pause that ends the turn longer. Whisper ends almost every piece with a full stop, even
one cut mid-sentence ("to buy some bread and."), so the trailing word decides as often as the
punctuation does. Pure: no audio, no whisper.

`judge` is the rule "smart" uses, words and voice together. When both say at once and surely that the
turn is over (`agree_at_once`), it ends without waiting out silence_ms. The words can hold the turn: a last
word that is a trailing conjunction, article, preposition or filler of the language heard holds it
("words"), whatever full stop, comma or ellipsis whisper put after it (`words_say`: on the bench's
turn set whisper's punctuation on cut pieces was wrong both ways), unless it asks or exclaims.
Otherwise the audio model (speech/smart_turn.py: the last 8 s of the voice, its least sure answer
over the pause's first 300 ms) decides: a probability of a finished turn of at least
`voice_threshold` (EndOfTurnConfig) ends it ("words+voice", or "voice" in a language whose words the rule does not
know), below it holds. The voice waits for whisper's words: deciding without them cut "…some bread
and" on a busy machine, where the guess comes seconds late; then the pause is held up to
max_pause_ms (bench/README.md).
Without the audio model, `sounds_finished` decides ("words"), and a language the rule does not know
ends as silence does (NO_SIGNAL).
"""

from __future__ import annotations

import math
import re
import unicodedata

from mcp_listen.speech.ending import NO_SIGNAL, SMART, Verdict

_FILLERS = "um umm uh uhh uhm er erm hmm mm ah eh"
_TRAILING = {
    "en": "and or but so because cause if than which who whose where when while although though unless until "
    "whereas the a an my your our their to of for from with without at into onto about between through",
    "es": "y e o u ni pero que porque pues como si cuando donde aunque el la los las un una unos unas mi tu "
    "su de del al a en con sin por para entre hasta desde eh este",
    "fr": "et ou mais donc car que qui quand si comme parce puisque lorsque le la les un une des du de au aux "
    "à dans sur sous avec sans pour par vers chez mon ma mes ton ta tes son sa ses notre votre leur ce cet "
    "cette ces euh ben bah",
    "de": "und oder aber denn dass weil wenn als ob obwohl der die den dem des ein eine einen einem einer "
    "mein dein unser zum zur vom von für über unter bei ohne äh ähm",
    "it": "e o ma che perché quando se come mentre il lo la i gli le un uno una di del della a al in con su "
    "per tra fra da ehm cioè",
    "pt": "e ou mas que porque quando se como enquanto o a os as um uma uns umas de do da dos das ao em no na "
    "com sem por para eh tipo",
    "nl": "en of maar want omdat als wanneer de het een van met voor naar eh uh dus",
}
"""Words after which a sentence does not end, per language: conjunctions, articles, prepositions,
fillers. Left out where a sentence often ends on them: pronouns and demonstratives ("I like that",
"Ich mag das"), and the particles of separable verbs ("mach die Tür zu", "kom op")."""

_TRAILING_WORDS = {lang: frozenset(f"{words} {_FILLERS}".split()) for lang, words in _TRAILING.items()}
_CLOSERS = "['\"”’»)\\]]*$"
_ASKS_OR_EXCLAIMS = re.compile(r"[!?！？]" + _CLOSERS)
_FULL_STOP = re.compile(r"(?<![.])[.。]" + _CLOSERS)
_LAST_WORD = re.compile(r"(\w[\w'’]*)\W*$")


def sounds_finished(text: str, language: str) -> bool:
    """True when `text` ends like a finished sentence in `language` (a code; unknown: English words).

    Nothing heard (empty) counts as finished: there is nothing to wait for.
    """
    text = unicodedata.normalize("NFC", text.strip())
    if not text or _ASKS_OR_EXCLAIMS.search(text):
        return True  # a question or an exclamation ends a turn, whatever its last word
    if not _FULL_STOP.search(text):
        return False  # no final punctuation, or it trails off ("...", "…", a comma)
    last = _LAST_WORD.search(text)
    trailing = _TRAILING_WORDS.get(language, _TRAILING_WORDS["en"])
    return last is None or last.group(1).lower().replace("’", "'") not in trailing


def words_say(text: str, language: str) -> str | None:
    """What the words alone say of the pause, whatever full stop or comma whisper put at the end:
    "unfinished" when the last word is one a sentence does not end on in `language` (not in a
    question or exclamation), else "open"; None when the rule
    does not know `language`'s words (it does not pretend: the voice decides alone)."""
    trailing = _TRAILING_WORDS.get(language)
    if trailing is None:
        return None
    text = unicodedata.normalize("NFC", text.strip())
    if _ASKS_OR_EXCLAIMS.search(text):
        return "open"  # "Where are you from?": the voice decides
    last = _LAST_WORD.search(text)
    return "unfinished" if last and last.group(1).lower().replace("’", "'") in trailing else "open"


def judge(
    text: str | None,
    language: str,
    probability: float | None,
    threshold: float = SMART.voice_threshold,
    *,
    voice_in: bool = True,
    early: float | None = None,
    at_once_from: float = SMART.at_once_threshold,
) -> Verdict | None:
    """The verdict on a pause from the words heard up to it (None: whisper's guess is not in yet) and the
    audio model's `probability` that the turn is finished (None or NaN: no audio model); None while the
    voice is not in yet (`voice_in`) and the words do not hold the turn, and while the words are not in: the
    voice waits for them. `early` is the least of the voice's first answers (ending.EndOfTurnConfig's
    at_once_answers): from `at_once_from`, with words that end a sentence, the turn ends at once. The rule
    is the module's docstring."""
    said = None if text is None else words_say(text, language)
    if said == "unfinished":
        return Verdict(False, "words")
    if agree_at_once(text, language, said, early, at_once_from):
        return Verdict(True, "words+voice", at_once=True)
    if not voice_in:
        return None
    if probability is None or math.isnan(probability):
        if text is None:
            return None
        return Verdict(True, NO_SIGNAL) if said is None else Verdict(sounds_finished(text, language), "words")
    if text is None:
        return None
    return Verdict(probability >= threshold, "voice" if said is None else "words+voice")


def agree_at_once(text: str | None, language: str, said: str | None, early: float | None, at_once_from: float) -> bool:
    """The words and the voice both say, surely, that the turn is over: the rule knows the language's words
    and none trails, whisper ended them as a sentence (full stop, question or exclamation mark), and the
    voice's first answers are all at least `at_once_from`. Each alone is wrong too often to end a turn
    before silence_ms (bench/README.md, "A finished turn answered at once")."""
    if text is None or said != "open" or early is None or math.isnan(early) or early < at_once_from:
        return False
    return bool(text.strip()) and sounds_finished(text, language)
