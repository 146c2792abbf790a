"""Noisy rooms for the endpointer: speech mixed with a fan's or a crowd's steady noise.

Generated like the rest of the test audio (audio_assets.py): seeded, cached by what made
them under tests/assets/audio/, never committed.

- *fan*: broadband noise with a pink (1/f) spectrum, low-passed at ~1.5 kHz, plus a faint
  blade hum: the steady rumble of a fan or an air conditioner.
- *babble*: sixteen espeak-ng talkers (eight voices, pitches and sentences, each twice from its
  own offset) summed: a crowded café, noise made of speech. Eight talkers are not babble yet:
  Silero hears a conversation in them (p >= 0.5 in 96 % of windows, against 0 % with sixteen),
  and so would a person (README "Guarantees and limits").
- *brown*: brown (1/f^2 power) noise, flat under 20 Hz so it does not drift: the deep, steady
  roar of a large fan or a ventilation duct, with most of its power under speech's formants.
- *hiss*: white noise, flat to 8 kHz: tape or microphone-preamp hiss, an air vent's rush.

The mix is set by SNR against the speech's *active* level (the RMS of the 32 ms windows within
30 dB of its loudest), as speech-in-noise corpora do: at 10 dB the noise is 10 dB under the
talking, not under the clip's average including its pauses.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import audio_assets as A

if TYPE_CHECKING:
    import numpy as np

RATE = A.RATE

BABBLE_TALKERS = [
    ("en-us", "the meeting moved to thursday because half of the team is travelling this week"),
    ("en-gb+f3", "could you pass me the sugar and the little jug of milk over there please"),
    ("en-us+m3", "we should probably order more paper before the printer runs out again"),
    ("en-gb-scotland+f2", "my sister bought a new bicycle and rides it to work every single morning"),
    ("en-029+m5", "the football match last night went into extra time and then penalties"),
    ("en-us+f4", "i think the restaurant on the corner closes early on sundays now"),
    ("en-gb-x-rp+m2", "have you seen the report about the train delays this morning"),
    ("en-us+f1", "remember to water the plants while i am away for the long weekend"),
]


RECIPE = 2
"""Part of every cache key: bump it when a noise's recipe changes."""

BABBLE_STREAMS = 16
"""Talkers summed; the eight voices each speak twice, from different offsets."""


def active_rms(samples: np.ndarray) -> float:
    """RMS of the windows within 30 dB of the loudest: the talker's level, pauses left out."""
    import numpy as np

    x = np.asarray(samples, dtype=np.float64)
    n = len(x) // 512
    power = (x[: n * 512].reshape(n, 512) ** 2).mean(axis=1)
    active = power[power >= power.max() * 1e-3]
    return float(np.sqrt(active.mean()))


def _fan(n: int, seed: int) -> np.ndarray:
    import numpy as np

    rng = np.random.default_rng(seed)
    spectrum = np.fft.rfft(rng.standard_normal(n))
    freqs = np.fft.rfftfreq(n, 1 / RATE)
    shape = 1 / np.sqrt(np.maximum(freqs, 20.0))  # pink
    shape /= np.sqrt(1 + (freqs / 1500.0) ** 4)  # 2nd-order low-pass
    noise = np.fft.irfft(spectrum * shape, n)
    noise /= noise.std()
    t = np.arange(n) / RATE
    hum = 0.3 * np.sin(2 * np.pi * 120 * t) + 0.15 * np.sin(2 * np.pi * 240 * t)
    return noise + hum


def _brown(n: int, seed: int) -> np.ndarray:
    import numpy as np

    rng = np.random.default_rng(seed)
    spectrum = np.fft.rfft(rng.standard_normal(n))
    freqs = np.fft.rfftfreq(n, 1 / RATE)
    return np.fft.irfft(spectrum / np.maximum(freqs, 20.0), n)  # amplitude 1/f: power 1/f^2


def _hiss(n: int, seed: int) -> np.ndarray:
    import numpy as np

    return np.random.default_rng(seed).standard_normal(n)


def _babble(n: int, seed: int) -> np.ndarray:
    import numpy as np

    rng = np.random.default_rng(seed)
    out = np.zeros(n)
    for stream in range(BABBLE_STREAMS):
        voice, text = BABBLE_TALKERS[stream % len(BABBLE_TALKERS)]
        talker = A.read_wav(A.speech(text, voice=voice)).astype(np.float64)
        loud = np.flatnonzero(np.abs(talker) > 30)
        talker = talker[loud[0] : loud[-1]]  # espeak's leading and trailing silence out
        talker /= active_rms(talker)
        looped = np.tile(talker, -(-(n + len(talker)) // len(talker)))
        start = int(rng.integers(0, len(talker)))
        out += looped[start : start + n] * rng.uniform(0.7, 1.3)
    return out


NOISES = {"fan": _fan, "babble": _babble, "brown": _brown, "hiss": _hiss}


def noise(kind: str, n: int, seed: int = 7) -> np.ndarray:
    """`n` samples of unit-RMS noise of a kind ("fan", "babble", "brown" or "hiss"), float64."""
    import numpy as np

    x = NOISES[kind](n, seed)
    return x / np.sqrt(np.mean(x**2))


def in_room(part: A.Part, kind: str, snr_db: float, *, speech_rms: float | None = None, seed: int = 7):
    """`part` with `kind` noise under the whole of it, `snr_db` under the speech's active level.

    `speech_rms` fixes the level the SNR is measured against (default: the clip's own active
    RMS); pass the speech's level to get the same noise for a clip that has no speech."""

    def make():
        import numpy as np

        clean = A.samples_of(part).astype(np.float64)
        level = speech_rms if speech_rms is not None else active_rms(clean)
        mixed = clean + noise(kind, len(clean), seed) * level * 10 ** (-snr_db / 20)
        return np.clip(np.round(mixed), -32768, 32767).astype(np.int16)

    digest = hashlib.sha256(A.samples_of(part).tobytes()).hexdigest()
    key = (RECIPE, digest, kind, float(snr_db), None if speech_rms is None else round(float(speech_rms), 3), int(seed))
    return A._cached_samples("room", key, make)


def speech_in_noise(
    samples: np.ndarray, kind: str, snr_db: float, *, seed: int = 7, before_ms: int = 1000, after_ms: int = 3000
) -> tuple[np.ndarray, int]:
    """`samples` (speech) inside `kind` noise that starts `before_ms` before the clip and runs until
    `after_ms` after its last loud sample, `snr_db` under the speech's active level; not cached.

    Returns (int16 mix, index in it of the speech's last loud sample)."""
    import numpy as np

    clean = np.asarray(samples, dtype=np.float64)
    lead = RATE * before_ms // 1000
    last = lead + A.last_loud_sample(samples)
    total = max(lead + len(clean), last + 1 + RATE * after_ms // 1000)
    padded = np.zeros(total)
    padded[lead : lead + len(clean)] = clean
    mixed = padded + noise(kind, total, seed) * active_rms(clean) * 10 ** (-snr_db / 20)
    return np.clip(np.round(mixed), -32768, 32767).astype(np.int16), last
