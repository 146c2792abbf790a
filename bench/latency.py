"""Stop latency (capture_audio, counted in samples on the returned WAV), the result after the silence
window (voice_query, on the monitor's clock), and clips transcribed whole in this process (the WER
baseline)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from clips import Clip, wer
from rig import RATE, Rig, TimedServer
from rig import audio_assets as A
from stats import summary

from mcp_listen.whisper import text as W
from mcp_listen.whisper.transcriber import Transcriber


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
    return {
        "clip": clip.name,
        "stopped_by": data.get("stopped_by"),
        "wav_peak": round(peak, 5),
        "stop_latency_ms": (len(wav) - lag - (clip.last_loud - offset) - 1) * 1000 / RATE - silence_ms,
        "rec_end_to_result_ms": (run["t_reply"] - t_rec_end) * 1000,
        "finished_notice_to_result_ms": (run["t_reply"] - t_fin) * 1000 if t_fin else None,
        "play_start_latency_ms": clock["play_start_latency_ms"],
    }


def voice_query(rig: Rig, server: TimedServer, clip: Clip, silence_ms: int, model: str, token: str) -> dict[str, Any]:
    """One voice_query while `clip` plays: post-speech latency (end of the silence window to the
    result's arrival) and the transcript."""
    args = {"stop_on_silence": True, "silence_ms": silence_ms, "duration_ms": 30000, "whisper_model": model}
    run = rig.play_during(server, "voice_query", args, clip.path, token)
    data, clock = run["result"], rig.speech_end(clip, run["t_play"], run["t_reply"])
    t_fin = server.notice(token, "Recording finished")
    text = data.get("transcription") or ""
    return {
        "clip": clip.name,
        "post_speech_ms": (run["t_reply"] - clock["t_speech_end"]) * 1000 - silence_ms,
        "finished_notice_to_result_ms": (run["t_reply"] - t_fin) * 1000 if t_fin else None,
        "transcription": text,
        "wer": wer(clip.text, text),
        "response_ok": bool(data.get("response")),
    }


def transcribe_whole(model: Path, threads: int, jobs: list[tuple[str, Clip, str]], runs: int) -> dict[str, Any]:
    """Each (key, clip, language) transcribed at once (Clip.whole) by the project's Transcriber, `runs` times,
    as the server would (same model, threads, parameters; markers such as [Music] dropped)."""
    tr = Transcriber(threads=threads or None)
    t = time.perf_counter()
    tr.load(model)
    out: dict[str, Any] = {"_load_ms": round((time.perf_counter() - t) * 1000, 1)}
    try:
        for key, clip, language in jobs:
            audio, texts, times = W.condition(clip.whole()), [], []
            for _ in range(max(1, runs)):
                t = time.perf_counter()
                texts.append(W.usable_text(tr.transcribe(audio, path=model, language=language)) or "")
                times.append((time.perf_counter() - t) * 1000)
            out[key] = {"texts": texts, "transcribe_ms": summary(times)}
    finally:
        tr.unload()
    return out
