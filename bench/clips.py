"""The spoken material: espeak-ng sentences joined with natural pauses, and word error rate.

Every clip is built from the test helpers (audio_assets: espeak-ng + sox, cached) so it
is reproducible byte for byte. Numbers are avoided in the texts: whisper writes "10"
for "ten", which would count as an error that is not one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig import RATE
from rig import audio_assets as A

LEAD_MS = 300
"""Silence played before the speech."""
PAUSE_MS = 250
"""Added between sentences; espeak-ng already ends each clip with ~0.37 s of near-silence,
so the gaps heard are ~0.6 s: a breath between sentences, well under silence_ms."""

STOP_SENTENCES = (
    "the quick brown fox jumps over the lazy dog",
    "please turn off the lights in the kitchen",
    "how far is it from here to the train station",
)

UTTERANCES: dict[str, tuple[str, ...]] = {
    "2s": ("What is the weather like in Paris today?",),
    "5s": (
        "Please add milk and bread to my shopping list.",
        "Then remind me to call my mother tonight.",
    ),
    "20s": (
        "Good morning, I would like to plan a trip to the mountains next weekend.",
        "Can you tell me what the weather will be like on Saturday and Sunday?",
        "I also need a list of things to pack, like warm clothes and good walking shoes.",
        "Please suggest a few easy hiking trails near the lake.",
        "Finally, remind me to book a hotel room before Friday.",
    ),
}


@dataclass(frozen=True)
class Clip:
    """A WAV to play and where, inside it, the speech is."""

    name: str
    text: str
    path: Path
    first_loud: int
    last_loud: int
    length: int

    @property
    def speech_s(self) -> float:
        """First to last loud sample, in seconds."""
        return (self.last_loud - self.first_loud) / RATE

    def reference(self) -> tuple[Any, int]:
        """(samples to look for in a recording, offset of their first sample in the clip)."""
        samples = A.read_wav(self.path)
        start = max(0, self.first_loud - RATE // 100)
        end = min(self.length, self.last_loud + RATE // 100)
        return samples[start:end], start

    def public(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "speech_s": round(self.speech_s, 2),
            "words": len(normalize(self.text)),
        }


def build(name: str, sentences: tuple[str, ...], tail_ms: int) -> Clip:
    """lead silence + sentences with pauses + tail silence (longer than silence_ms)."""
    parts: list[Any] = [A.silence(LEAD_MS)]
    for i, sentence in enumerate(sentences):
        if i:
            parts.append(A.silence(PAUSE_MS))
        parts.append(A.speech(sentence))
    parts.append(A.silence(tail_ms))
    path = A.concat(parts)
    samples = A.read_wav(path)
    return Clip(
        name=name,
        text=" ".join(sentences),
        path=path,
        first_loud=A.first_loud_sample(samples),
        last_loud=A.last_loud_sample(samples),
        length=len(samples),
    )


def stop_clips(silence_ms: int) -> list[Clip]:
    return [build(f"stop{i + 1}", (s,), silence_ms + 1500) for i, s in enumerate(STOP_SENTENCES)]


def utterance_clips(silence_ms: int) -> dict[str, Clip]:
    return {name: build(name, sentences, silence_ms + 2000) for name, sentences in UTTERANCES.items()}


# --------------------------------------------------------------------------- word error rate


def normalize(text: str) -> list[str]:
    """Lowercase words, punctuation stripped (apostrophes kept inside words)."""
    text = re.sub(r"[^a-z0-9' ]+", " ", (text or "").lower())
    return [w.strip("'") for w in text.split() if w.strip("'")]


def wer(reference: str, hypothesis: str) -> float:
    """Word-level Levenshtein distance / reference length."""
    ref, hyp = normalize(reference), normalize(hypothesis)
    if not ref:
        return 0.0 if not hyp else 1.0
    previous = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        current = [i]
        for j, h in enumerate(hyp, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h)))
        previous = current
    return previous[-1] / len(ref)
