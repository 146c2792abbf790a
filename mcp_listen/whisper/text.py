"""Audio and text around whisper: condition the audio in, clean the text out (pure numpy and re).

numpy is imported on first use: importing this module costs nothing.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from mcp_listen.contract.limits import SAMPLE_RATE

if TYPE_CHECKING:
    import numpy as np

WHISPER_MIN_SAMPLES = SAMPLE_RATE * 11 // 10  # whisper.cpp skips input under 1 s (100 mel frames)
MIN_SAMPLES = SAMPLE_RATE // 8  # whisper.cpp refuses < 100 ms and keeps stale segments; no word is shorter
PEAK_TARGET = 0.9
MAX_GAIN = 20.0
HIGHPASS_HZ = 80.0

_MUSIC_SIGNS = "♪♫♬♩🎵🎶"
_MARKERS = re.compile(r"\[[^\[\]]*\]|\([^()]*\)|（[^（）]*）|【[^【】]*】|\*[^*]*\*|[" + _MUSIC_SIGNS + "]")


PROMPT_CHARS = 600
"""Whisper's prompt, at most: whisper keeps at most 224 prompt tokens (~900 characters of English, fewer of
names) and drops the rest from the start; the last sentence or two is what decides how the next one begins."""


def prompt_of(vocabulary: str, before: str) -> str:
    """Whisper's prompt: the vocabulary whole (a full stop after it, so the speech starts a sentence of its
    own), then the text said before, trimmed from its start (at a word) so the whole fits PROMPT_CHARS.
    `vocabulary` is at most contract.limits.MAX_VOCABULARY_CHARS, a fraction of PROMPT_CHARS."""
    vocabulary = vocabulary.strip()
    if vocabulary and vocabulary[-1] not in ".!?":
        vocabulary += "."
    room = PROMPT_CHARS - len(vocabulary) - (1 if vocabulary else 0)
    if len(before) > room:
        before = before[len(before) - room :]
        before = before[before.find(" ") + 1 :] if " " in before else ""
    return f"{vocabulary} {before}" if vocabulary and before else vocabulary or before


def _as_float32(audio: Any) -> np.ndarray:
    """A new float32 mono array in [-1, 1] scale; integer PCM is scaled, never cast raw."""
    import numpy as np

    x = np.asarray(audio)
    if x.ndim != 1:
        x = x.reshape(-1)
    if np.issubdtype(x.dtype, np.integer):
        return x.astype(np.float32) / float(np.iinfo(x.dtype).max + 1)
    return x.astype(np.float32, copy=True)


def condition(audio: Any) -> np.ndarray:
    """Light conditioning for whisper: remove DC and rumble below ~80 Hz, normalise the peak.

    Quiet microphones are brought up to a 0.9 peak (gain capped at 20x so silence and hiss are
    not blown up). The high-pass is a zero-phase 2nd-order Butterworth magnitude applied in the
    frequency domain: one FFT, ~10 ms for 30 s. The caller's array is never modified.
    """
    import numpy as np

    x = _as_float32(audio)
    if x.size == 0:
        return x
    x -= x.mean(dtype=np.float64)
    x = _highpass(x)
    peak = float(np.max(np.abs(x)))
    if peak > 1e-6:
        x *= min(PEAK_TARGET / peak, MAX_GAIN)
    np.clip(x, -1.0, 1.0, out=x)
    return np.ascontiguousarray(x, dtype=np.float32)


def _highpass(x: np.ndarray) -> np.ndarray:
    import numpy as np

    n = x.size
    size = 1 << max(1, (n - 1).bit_length())  # zero padding also softens the circular wrap
    spectrum = np.fft.rfft(x, size)
    freqs = np.fft.rfftfreq(size, 1.0 / SAMPLE_RATE)
    ratio = np.divide(HIGHPASS_HZ, freqs, out=np.full_like(freqs, np.inf), where=freqs > 0)
    spectrum *= 1.0 / np.sqrt(1.0 + ratio**4)
    return np.fft.irfft(spectrum, size)[:n].astype(np.float32)


def usable_text(raw: str) -> str | None:
    """The words in whisper's output, or None when it only described sounds.

    Whisper writes non-speech as `[BLANK_AUDIO]`, `(wind blowing)`, `*music*` or music signs;
    those are removed (also from inside a sentence: "a [beep] sound" -> "a sound"). Text is
    kept only if a letter or digit of any script remains.
    """
    text = " ".join(_MARKERS.sub(" ", raw or "").split())
    if not any(ch.isalnum() for ch in text):
        return None
    return text


FLASH_ATTN_PAD = 256
"""whisper.cpp (1.8, flash attention on, its default) attends over the encoder context padded up
to a multiple of this, and does not mask the padding: the rows past `audio_ctx` hold whatever an
earlier, longer call left there. The same audio then decodes differently after other calls
(measured, tiny.en: "And so my fellow Americans ask not" became "And so my fellow America. Ask,
not." after one 14 s transcription; base: "otros vendedores" became "otros $ 10 dólares"). A
context that is a multiple of it has no padding. Flash attention off has none either, but holds
+67 MB (tiny.en) / +89 MB (base) more after a long utterance, for the same speed."""


def audio_ctx_for(n_samples: int) -> int:
    """Encoder context for a clip: whisper.cpp's 30 s window shrunk to the audio, with margin.

    1 ctx = 20 ms. A tight fit (ceil(seconds*50)) made tiny.en loop on a 2.6 s clip, and a
    2.6 s phrase at 256 repeated its own text; from 384 up the same phrases came out right.
    So: round up to a multiple of 64, add 192 (3.84 s), at least 384; then up to a multiple of
    FLASH_ATTN_PAD, so no earlier call's rows take part. 0 = the full window.
    """
    frames = -(-n_samples // (SAMPLE_RATE // 50))
    ctx = max(384, -(-frames // 64) * 64 + 192)
    ctx = -(-ctx // FLASH_ATTN_PAD) * FLASH_ATTN_PAD
    return 0 if ctx >= 1500 else ctx


def max_tokens_for(n_samples: int) -> int:
    """Tokens one segment may hold: speech is ~3-4 tokens a second; 8 a second plus 32 never cuts words.

    A decoder that loops ("X X X ...") stops there, so each fallback pass stays short.
    """
    return 32 + 8 * -(-n_samples // SAMPLE_RATE)


def _drop_repeats(texts: list[str]) -> list[str]:
    """Drop a segment that repeats the previous one word for word.

    With a shortened audio_ctx, whisper sometimes decodes the padding after a short phrase
    as the same sentence again ("What is X? What is X?"); measured in bench/ on 2-3 s phrases.
    """
    kept: list[str] = []
    for text in texts:
        if not kept or _words(text) != _words(kept[-1]):
            kept.append(text)
    return kept


def _collapse_repeat(text: str) -> str:
    """ "X X" -> "X" when a whole text says the same words twice.

    Conditioned on the text before it, whisper sometimes decodes a phrase and then, from the
    padding, the same phrase again inside one segment (measured: "because we had nothing left
    for breakfast because we had nothing left for breakfast.").
    """
    spans = [m.span() for m in re.finditer(r"\w+", text)]
    half = len(spans) // 2
    if half < 3 or len(spans) % 2:  # "no no no no" is something people say
        return text
    lowered = text.lower()
    first = [lowered[a:b] for a, b in spans[:half]]
    if first != [lowered[a:b] for a, b in spans[half:]]:
        return text
    return text[: spans[half - 1][1]] + text[spans[-1][1] :]


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def _pad_to_whisper_minimum(audio: np.ndarray) -> np.ndarray:
    """Pad with silence to whisper.cpp's 1 s minimum.

    Shorter input makes whisper_full return early with no new segments, and pywhispercpp
    then hands back the *previous* call's text: a short last phrase would repeat the one
    before it. Whisper pads to 30 s internally anyway, so trailing zeros change nothing else.
    """
    import numpy as np

    if audio.size >= WHISPER_MIN_SAMPLES:
        return audio
    return np.concatenate([audio, np.zeros(WHISPER_MIN_SAMPLES - audio.size, dtype=np.float32)])
