"""Stop latency (capture_audio) and post-speech latency (voice_query), through the real stdio server.

Method (bench/README.md explains it at length):
- stop latency is counted in samples on the returned WAV: from just after the last loud sample
  of the played speech (found by cross-correlation; the capture is bit-exact) to the WAV's end,
  minus silence_ms. No clock is involved.
- wall-clock figures use the Monitor: the time the speech's last loud sample (or the
  recording's last sample) became available to a recorder on the virtual microphone. The
  result's arrival time comes from TimedServer.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

from clips import Clip, wer
from rig import RATE, Rig, TimedServer, stop_player
from rig import audio_assets as A

SETTLE_S = 0.15
"""Pause between "the stream is running" and starting the clip."""


def _finished_at(server: TimedServer, token: str) -> float | None:
    """Arrival time of the "Recording finished" progress notification."""
    for t, params in server.progress_for(token):
        if str(params.get("message", "")).startswith("Recording finished"):
            return t
    return None


def _play_during(
    rig: Rig,
    server: TimedServer,
    tool: str,
    args: dict[str, Any],
    wav: Path,
    token: str,
) -> dict:
    """Start `tool`, play `wav` once the microphone runs, wait for the result."""
    rid, _ = server.start_tool(tool, args, token)
    server.wait_until_recording()
    time.sleep(SETTLE_S)
    t_play, player = rig.play(wav)
    try:
        t_reply, msg = server.reply(rid, timeout=90)
    finally:
        stop_player(player)
    result = msg.get("result") or {}
    if "error" in msg or result.get("isError"):
        raise RuntimeError(f"{tool} failed: {str(msg)[:400]}")
    return {
        "t_play": t_play,
        "t_reply": t_reply,
        "result": result.get("structuredContent") or {},
    }


def _speech_end_time(rig: Rig, clip: Clip, t_play: float, t_reply: float) -> dict[str, float]:
    """When the clip's first sample and its last loud sample reached the microphone (monitor clock)."""
    monitor = rig.start_monitor()
    time.sleep(0.05)  # let the monitor's last blocks in
    ref, offset = clip.reference()
    start, peak = monitor.find(ref, t_play - 0.5, t_reply + 0.05)
    end_index = start + (clip.last_loud - offset) + 1
    return {
        "monitor_start": start,
        "monitor_offset": offset,
        "monitor_peak": peak,
        "t_speech_end": monitor.time_of(end_index),
        "play_start_latency_ms": (monitor.time_of(start - offset) - t_play) * 1000,
    }


def capture_stop(rig: Rig, server: TimedServer, clip: Clip, silence_ms: int, token: str) -> dict[str, Any]:
    """One capture_audio with stop_on_silence while `clip` plays: stop latency and wall-clock figures."""
    args = {"stop_on_silence": True, "silence_ms": silence_ms, "duration_ms": 20000}
    run = _play_during(rig, server, "capture_audio", args, clip.path, token)
    data = run["result"]
    wav = A.read_wav(data["path"])
    os.unlink(data["path"])
    ref, offset = clip.reference()
    lag, peak = A.xcorr_align(wav, ref)
    speech_end = lag + (clip.last_loud - offset) + 1
    stop_ms = (len(wav) - speech_end) * 1000 / RATE - silence_ms
    clock = _speech_end_time(rig, clip, run["t_play"], run["t_reply"])
    monitor = rig.monitor
    assert monitor is not None
    rec_end_index = clock["monitor_start"] - lag + len(wav)  # the WAV's last sample, on the monitor
    t_rec_end = monitor.time_of(rec_end_index)
    t_fin = _finished_at(server, token)
    return {
        "clip": clip.name,
        "stopped_by": data.get("stopped_by"),
        "wav_peak": round(peak, 5),
        "stop_latency_ms": stop_ms,
        "rec_end_to_result_ms": (run["t_reply"] - t_rec_end) * 1000,
        "finished_notice_to_result_ms": (run["t_reply"] - t_fin) * 1000 if t_fin else None,
        "rec_end_to_finished_notice_ms": (t_fin - t_rec_end) * 1000 if t_fin else None,
        "speech_end_to_result_minus_silence_ms": (run["t_reply"] - clock["t_speech_end"]) * 1000 - silence_ms,
        "play_start_latency_ms": clock["play_start_latency_ms"],
        "monitor_peak": round(clock["monitor_peak"], 5),
    }


def voice_query(rig: Rig, server: TimedServer, clip: Clip, silence_ms: int, model: str, token: str) -> dict[str, Any]:
    """One voice_query while `clip` plays: post-speech latency and the transcript."""
    args = {
        "stop_on_silence": True,
        "silence_ms": silence_ms,
        "duration_ms": 30000,
        "whisper_model": model,
    }
    run = _play_during(rig, server, "voice_query", args, clip.path, token)
    data = run["result"]
    clock = _speech_end_time(rig, clip, run["t_play"], run["t_reply"])
    t_fin = _finished_at(server, token)
    text = data.get("transcription") or ""
    return {
        "clip": clip.name,
        "post_speech_ms": (run["t_reply"] - clock["t_speech_end"]) * 1000 - silence_ms,
        "finished_notice_to_result_ms": (run["t_reply"] - t_fin) * 1000 if t_fin else None,
        "speech_end_to_finished_notice_minus_silence_ms": (t_fin - clock["t_speech_end"]) * 1000 - silence_ms
        if t_fin
        else None,
        "transcription": text,
        "wer": wer(clip.text, text),
        "response_ok": bool(data.get("response")),
        "play_start_latency_ms": clock["play_start_latency_ms"],
        "monitor_peak": round(clock["monitor_peak"], 5),
    }


def close_server(server: TimedServer) -> None:
    """stdin closed: the server exits 0 by itself; killed if it does not."""
    with contextlib.suppress(Exception):  # already gone, or slow to exit: stop() kills it
        server.close_stdin()
        server.wait_exit(timeout=10)
    server.stop()


def stop_floor(silence_ms: int, phases: int = 16) -> dict[str, Any]:
    """Offline replay of the endpointer on the clips, at `phases` window alignments.

    Capture is bit-exact, so replaying a clip through SileroVAD + Endpointer in this process
    gives the decisions the server makes live for the same alignment. Splits the stop latency
    into Silero's own decay (last loud sample -> end of the last window >= 0.5) and what the
    endpointer adds or takes back (rounding silence_ms up to whole windows, hysteresis, the
    quiet decay windows it counts as silence).
    """
    import numpy as np
    from clips import STOP_SENTENCES, UTTERANCES
    from stats import summary

    from mcp_listen.speech.endpoint import EndpointConfig, Endpointer
    from mcp_listen.speech.vad import SileroVAD

    vad = SileroVAD()
    decay, stop = [], []
    texts = list(STOP_SENTENCES) + [s for sentences in UTTERANCES.values() for s in sentences]
    for text in texts:
        speech = A.read_wav(A.speech(text))
        last = A.last_loud_sample(speech)
        for phase in range(0, 512, 512 // phases):
            lead = phase + RATE // 4
            audio = np.concatenate(
                [
                    np.zeros(lead, np.int16),
                    speech,
                    np.zeros(2 * RATE + silence_ms * 16, np.int16),
                ]
            )
            endpointer = Endpointer(EndpointConfig(silence_ms=silence_ms, max_ms=60000))
            _, w, _ = replay(vad, endpointer, audio)
            speech_end = lead + last + 1
            stop.append(((w + 1) * 512 - speech_end) * 1000 / RATE - silence_ms)
            decay.append(((endpointer.last_speech_window + 1) * 512 - speech_end) * 1000 / RATE)
    overshoot = -(-silence_ms // 32) * 32 - silence_ms
    return {
        "stop_latency_ms": summary(stop),
        "silero_decay_ms": summary(decay),
        "rounding_overshoot_ms": overshoot,
        "sentences": len(texts),
        "phases": phases,
    }


def replay(vad: Any, endpointer: Any, audio: Any, gate: bool = True) -> tuple[str | None, int, int]:
    """Feed `audio` window by window as the server does (pipeline._Tracker): (reason, last window, skipped)."""
    vad.reset()
    skipped = 0

    def needs_vad(level: float) -> bool:
        nonlocal skipped
        needed = not gate or endpointer.needs_vad(level)
        skipped += not needed
        return needed

    for w in range(len(audio) // 512):
        probability, level = vad.hear(audio[w * 512 : (w + 1) * 512], needs_vad)
        reason = endpointer.feed(probability, level)
        if reason:
            return reason, w, skipped
    return None, w, skipped


def gate_replay(silence_ms: int) -> dict[str, Any]:
    """What skipping Silero at the noise floor changes: the clips' sentences at four speech levels
    over two rooms' noise, replayed with and without the gate (speech missed, stop moved)."""
    import numpy as np
    from clips import STOP_SENTENCES, UTTERANCES
    from stats import summary

    from mcp_listen.speech.endpoint import EndpointConfig, Endpointer
    from mcp_listen.speech.vad import SileroVAD

    vad = SileroVAD()
    rng = np.random.default_rng(5)
    texts = list(STOP_SENTENCES) + [s for sentences in UTTERANCES.values() for s in sentences]
    missed, moved, skipped, windows = 0, [], 0, 0
    for floor_db in (-60, -45):
        for speech_db in (-45, -40, -35, -30):
            for text in texts:
                speech = A.read_wav(A.speech(text)).astype(np.float32) / 32768
                speech *= 10 ** (speech_db / 20) / np.sqrt(np.mean(speech[np.abs(speech) > 1e-4] ** 2))
                audio = np.concatenate(
                    [np.zeros(24000, np.float32), speech, np.zeros(2 * RATE + silence_ms * 16, np.float32)]
                )
                audio += rng.normal(0, 10 ** (floor_db / 20), len(audio)).astype(np.float32)
                runs = {
                    gate: replay(vad, Endpointer(EndpointConfig(silence_ms=silence_ms, max_ms=60000)), audio, gate)
                    for gate in (False, True)
                }
                if runs[False][0] == "silence" and runs[True][0] != "silence":
                    missed += 1
                elif runs[True][0] == runs[False][0] == "silence":
                    moved.append((runs[True][1] - runs[False][1]) * 32)
                skipped += runs[True][2]
                windows += runs[True][1] + 1
    return {
        "clips": 2 * 4 * len(texts),
        "speech_missed_by_gate": missed,
        "stop_moved_ms": summary(moved),
        "windows_skipped_pct": round(100 * skipped / windows, 1),
    }
