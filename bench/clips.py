"""The spoken material and its score: espeak-ng sentences joined with natural pauses (the test helpers'
cached espeak-ng, so byte for byte the same; no numbers, which whisper writes as digits), the real
recordings made playable, word error rate, and the stop latency of a capture counted on its WAV."""

from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import realspeech_data
from rig import RATE, Rig, TimedServer
from rig import audio_assets as A
from speech_checks import edits

LEAD_MS = 300
"""Silence played before the speech."""
PAUSE_MS = 250
"""Added between sentences; espeak-ng already ends each clip with ~0.37 s of near-silence, so the gaps
heard are ~0.6 s: a breath between sentences, well under silence_ms."""

STOP_SENTENCES = (
    "the quick brown fox jumps over the lazy dog",
    "please turn off the lights in the kitchen",
    "how far is it from here to the train station",
)
UTTERANCES: dict[str, tuple[str, ...]] = {
    "2s": ("What is the weather like in Paris today?",),
    "5s": ("Please add milk and bread to my shopping list.", "Then remind me to call my mother tonight."),
    "20s": (
        "Good morning, I would like to plan a trip to the mountains next weekend.",
        "Can you tell me what the weather will be like on Saturday and Sunday?",
        "I also need a list of things to pack, like warm clothes and good walking shoes.",
        "Please suggest a few easy hiking trails near the lake.",
        "Finally, remind me to book a hotel room before Friday.",
    ),
}
SENTENCES = (*STOP_SENTENCES, *(s for sentences in UTTERANCES.values() for s in sentences))
"""The 11 espeak-ng sentences of the stop-latency and utterance clips, for the offline replays."""


@dataclass(frozen=True)
class Clip:
    """A WAV to play and where, inside it, the speech is."""

    name: str
    text: str
    path: Path
    first_loud: int
    last_loud: int
    length: int

    def reference(self) -> tuple[Any, int]:
        """(samples to look for in a recording, offset of their first sample in the clip)."""
        start = max(0, self.first_loud - RATE // 100)
        return A.read_wav(self.path)[start : min(self.length, self.last_loud + RATE // 100)], start

    def whole(self) -> Any:
        """The clip as the pipeline hears it in one piece: from its ~1 s pre-roll before the first loud
        sample to 300 ms after the last (the span the whole-clip WERs transcribe)."""
        return A.read_wav(self.path)[max(0, self.first_loud - RATE) : self.last_loud + int(0.3 * RATE)]


def clip(name: str, text: str, parts: list[Any]) -> Clip:
    path = A.concat(parts)
    samples = A.read_wav(path)
    return Clip(name, text, path, A.first_loud_sample(samples), A.last_loud_sample(samples), len(samples))


def build(name: str, sentences: tuple[str, ...], tail_ms: int) -> Clip:
    """lead silence + sentences with pauses + tail silence (longer than silence_ms)."""
    parts: list[Any] = [A.silence(LEAD_MS)]
    for i, sentence in enumerate(sentences):
        parts += [A.silence(PAUSE_MS), A.speech(sentence)] if i else [A.speech(sentence)]
    return clip(name, " ".join(sentences), [*parts, A.silence(tail_ms)])


def stop_clips(silence_ms: int) -> list[Clip]:
    return [build(f"stop{i + 1}", (s,), silence_ms + 1500) for i, s in enumerate(STOP_SENTENCES)]


def utterance_clips(silence_ms: int) -> dict[str, Clip]:
    return {name: build(name, sentences, silence_ms + 2000) for name, sentences in UTTERANCES.items()}


def playable(entry: dict, silence_ms: int) -> Clip:
    """A real recording as the bench plays it: lead silence + the recording + a tail over silence_ms."""
    return clip(entry["id"], entry["text"], [A.silence(LEAD_MS), Path(entry["path"]), A.silence(silence_ms + 2000)])


def real(only: str = "", language: str = "", pause_under_ms: int = 0) -> list[dict]:
    """The real recordings (realspeech_data.py builds them on first use): all, or the comma-separated
    ids of `only`, of one `language`, whose longest inner pause is under `pause_under_ms`."""
    return [e for e in realspeech_data.load() if (not only or e["id"] in only.split(",")) and (not language or e["language"] == language)
            and (not pause_under_ms or e["longest_pause_ms"] < pause_under_ms)]  # fmt: skip


def words(text: str) -> list[str]:
    """Lowercase words, no punctuation, no accents (the Asterisk transcripts omit many that whisper
    writes), apostrophes inside words kept ("d'echo"), numbers as written ("ten" != "10")."""
    text = unicodedata.normalize("NFKD", (text or "").lower().replace("\u2019", "'"))
    text = re.sub(r"[^\w']+|_", " ", "".join(ch for ch in text if not unicodedata.combining(ch)))
    return [w.strip("'") for w in text.split() if w.strip("'")]


def errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(word-level edit distance, reference words), on this module's words."""
    ref = words(reference)
    return edits(ref, words(hypothesis)), len(ref)


def wer(reference: str, hypothesis: str) -> float:
    """Word errors over reference words, for one text."""
    wrong, total = errors(reference, hypothesis)
    return wrong / total if total else float(bool(words(hypothesis)))


def corpus_wer(pairs: list[tuple[str, str]]) -> float | None:
    """Corpus WER in percent: all errors over all reference words (long clips weigh more)."""
    counts = [errors(r, h) for r, h in pairs]
    total = sum(n for _, n in counts)
    return round(100 * sum(e for e, _ in counts) / total, 2) if total else None


def capture_stop(rig: Rig, server: TimedServer, clip: Clip, silence_ms: int, token: str) -> dict[str, Any]:
    """One capture_audio with stop_on_silence while `clip` plays: stop latency and wall-clock figures.
    ValueError when the WAV ends before the speech does (stopped at an inner pause)."""
    args = {"stop_on_silence": True, "silence_ms": silence_ms, "duration_ms": 20000}
    run = rig.play_during(server, "capture_audio", args, clip.path, token)
    data = run["result"]
    wav = A.read_wav(data["path"])
    os.unlink(data["path"])
    ref, offset = clip.reference()
    lag, peak = A.xcorr_align(wav, ref)
    clock = rig.speech_end(clip, run["t_play"], run["t_reply"])
    t_rec_end = rig.start_monitor().time_of(clock["monitor_start"] - (lag - offset) + len(wav))  # the WAV's last sample
    t_fin = server.notice(token, "Recording finished")
    return {"clip": clip.name, "stopped_by": data.get("stopped_by"), "wav_peak": round(peak, 5),
            "stop_latency_ms": (len(wav) - lag - (clip.last_loud - offset) - 1) * 1000 / RATE - silence_ms,
            "rec_end_to_result_ms": (run["t_reply"] - t_rec_end) * 1000,
            "finished_notice_to_result_ms": (run["t_reply"] - t_fin) * 1000 if t_fin else None,
            "play_start_latency_ms": clock["play_start_latency_ms"]}  # fmt: skip
