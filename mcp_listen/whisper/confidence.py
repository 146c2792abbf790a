"""How sure whisper was of the last word it wrote, from the token probabilities of its last pass.

end_of_turn "smart" reads the words before a pause; when whisper mangled or guessed the word cut
off by a thinking pause ("Please press 1 to" heard as "Please press month."), the word it wrote is
one it was unsure of. The probability is read from the whisper.cpp context right after
whisper_full, at no cost beyond a few dozen binding calls.
"""

from __future__ import annotations

import re
from typing import Any

_WORD = re.compile(r"\w")


def last_word_probability(pw: Any, ctx: Any) -> float | None:
    """The lowest token probability of the last word in whisper_full's output (its punctuation and
    special tokens left out); None when it wrote no word. `pw` is the `_pywhispercpp` binding."""
    eot = pw.whisper_token_eot(ctx)
    probabilities: list[float] = []
    for segment in reversed(range(pw.whisper_full_n_segments(ctx))):
        for i in reversed(range(pw.whisper_full_n_tokens(ctx, segment))):
            data = pw.whisper_full_get_token_data(ctx, segment, i)
            if data.id >= eot:
                continue  # timestamps, end of text
            text = pw.whisper_full_get_token_text(ctx, segment, i)
            text = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
            if _WORD.search(text):
                probabilities.append(float(data.p))
                if text.startswith(" "):
                    return min(probabilities)  # a token that begins with a space begins the word
            elif probabilities and text.startswith(" "):
                return min(probabilities)
    return min(probabilities) if probabilities else None
