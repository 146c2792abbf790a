"""Speech out through the real server on the virtual speaker: first audio, Piper's real-time factor, CPU
while speaking, cancel to silence and the end of playback to listening; with `--hostile`, the server's CPU
after a hostile text is stopped and its memory text after text. bench/README.md ("Speech out", "Hostile
texts") explains each figure.

    python bench/speak.py [--runs 10] [--cpu-runs 2] [--json bench/results-speak.json]
    python bench/speak.py --hostile [--stop-after 4] [--json bench/results-speak-hostile.json]
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from rig import RATE, ROOT, TEST_MODEL, Monitor, Rig, TimedServer, proc_stats, wait_for
from speaker_rig import FOX, VOICE, loud, speaking_env
from stats import Run, cli, save_report, summary, verdict

SENTENCES = tuple(re.split(r"(?<=\.) ", " ".join((
    "The morning train to the coast was late again, so we waited on the cold platform. A man with a small brown dog",
    "asked me for the time. I told him it was nearly half past eight. He thanked me, and the dog wagged its tail as if it",
    "understood. When the train finally arrived, every seat in the first carriage was taken by students going home.",
    "We found two seats together near the back. Outside the window, the fields were covered in a thin layer of frost",
    "that sparkled in the sun. My sister fell asleep before we had even left the city. I read a few pages of my book and",
    "then gave up. The conductor came through twice to check our tickets, and both times he smiled at the sleeping girl.",
    "Somewhere after the third station, the sea appeared between the hills. It was grey and calm, with a few fishing",
    "boats far out on the water. An old woman across the aisle pointed at them and told us that her father had been a",
    "fisherman. She said he used to leave before dawn and come back with his hands frozen. We arrived just before",
    "eleven and walked down to the harbour. The cafe on the corner was open, so we ordered tea and warm bread with",
    "butter. By noon the frost had gone and the streets were full of people. We spent the afternoon walking along the",
    "beach and collecting smooth flat stones. When the light began to fade, we caught the last train back to the city.",
    "It was a long day, but nobody complained, and my sister still talks about the old woman and the boats.",
))))  # fmt: skip
"""Natural sentences of 8-20 words. The 1-, 5- and 20-sentence texts are their first 1, 5 and 20, so all
three start with the same first piece (voice/pieces.py): what changes is the length alone."""
LENGTHS = (1, 5, 20)
VOICE_PATH = ROOT / "tests" / "assets" / "voices" / f"{VOICE}.onnx"
CONVERSE = {"text": "Would you like to take the early train or the late one?", "duration_ms": 500}
"""converse's turn: nobody answers, so it ends at duration_ms after listening began."""
LISTENING = re.compile(rb"listening (\d+) ms after the speech left the speaker")
IDLE_CPU_S = 0.02
"""Less CPU than this in a whole second: the server is idle again (it idles at ~0)."""
WATCH_S = 150.0
SOUND_WAIT_S = 90.0
"""The longest a text is waited for to sound before it is stopped anyway."""


def text_of(sentences: int) -> str:
    return " ".join(SENTENCES[:sentences])


@contextlib.contextmanager
def speaker(rig: Rig) -> Iterator[tuple[TimedServer, dict[str, Any]]]:
    """A fresh server in the tests' speaking environment (INFO: it logs converse's delay) that has said FOX,
    the voice loading meanwhile; and that first result (the cold first audio). Closed afterwards."""
    with rig.server(speaking_env(rig.mic.env, rig.workdir, VOICE_PATH.parent, MCP_LISTEN_LOG_LEVEL="INFO")) as server:
        yield server, server.tool("speak_text", {"text": FOX})


def first_audio(rig: Rig, sentences: int) -> dict[str, Any]:
    """One speak_text (wait: false) in a fresh, warmed server: the server's first_audio_ms, and on this
    clock the request written -> the first sound in the speaker's monitor (the 100 ms before it quiet).
    A fresh server per run keeps the runs alike: what the previous one left playing went with it."""
    with speaker(rig) as (server, cold), Monitor() as monitor:
        rid, sent = server.start_tool("speak_text", {"text": text_of(sentences), "wait": False}, "first")
        replied, msg = server.reply(rid, timeout=60)
        start = monitor.index_at(sent)
        wait_for(lambda: loud(monitor.samples()[start:]).size > 0, 5, "no sound reached the speaker", every=0.3)
        samples = monitor.samples()
    heard = start + int(loud(samples[start:])[0])
    return {"sentences": sentences, "first_audio_ms": msg["result"]["structuredContent"]["first_audio_ms"],
            "client_first_sound_ms": (monitor.time_of(heard) - sent) * 1000, "client_reply_ms": (replied - sent) * 1000,
            "quiet_before_request": not loud(samples[max(0, start - RATE // 10) : start]).size,
            "cold_first_audio_ms": cold["first_audio_ms"]}  # fmt: skip


def piper(voice_path: Path, runs: int, whole_runs: int) -> dict[str, Any]:
    """Piper alone here: the 20-sentence text piece by piece as the server splits it (wall / audio time), and
    each text's first piece, synthesised before the first sound (the floor under first_audio_ms)."""
    from mcp_listen.config.libraries import ORT_TELEMETRY_VAR
    from mcp_listen.voice.pieces import pieces

    os.environ[ORT_TELEMETRY_VAR] = "1"  # before piper imports onnxruntime, as the server does
    from piper import PiperVoice, SynthesisConfig

    voice = PiperVoice.load(voice_path)
    config = SynthesisConfig(length_scale=getattr(voice.config, "length_scale", None) or 1.0)
    rate = voice.config.sample_rate

    def synth(texts: list[str]) -> dict[str, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        audio = np.concatenate([c.audio_int16_array for text in texts for c in voice.synthesize(text, config)])
        wall, cpu, sounds = time.perf_counter() - wall, time.process_time() - cpu, loud(audio)
        return {"wall_ms": wall * 1000, "cpu_ms": cpu * 1000, "rtf": wall * rate / len(audio),
                "leading_quiet_ms": float(sounds[0]) * 1000 / rate if sounds.size else None}  # fmt: skip

    synth([FOX])
    return {"first_piece": pieces(text_of(1))[0], "whole_20": [synth(pieces(text_of(20))) for _ in range(whole_runs)],
            "first_piece_runs": {str(n): [synth(pieces(text_of(n))[:1]) for _ in range(runs)] for n in LENGTHS}}  # fmt: skip


def cpu_while_speaking(rig: Rig) -> dict[str, Any]:
    """A whole 20-sentence speak_text (wait: true): the server's CPU time (all threads) over the call's
    wall time, read each second meanwhile (synthesis comes in bursts) and when the reply arrives."""
    with speaker(rig) as (server, _):
        rid, sent = server.start_tool("speak_text", {"text": text_of(20)}, "cpu")
        trace = [(sent, proc_stats(server.proc.pid)["cpu_s"])]
        while rid not in server.replies:
            time.sleep(1.0)
            trace.append((server.replies.get(rid, (time.monotonic(),))[0], proc_stats(server.proc.pid)["cpu_s"]))
    steps = [(b[1] - a[1]) / (b[0] - a[0]) * 100 for a, b in zip(trace, trace[1:]) if b[0] > a[0]]
    return {"cpu_pct": (trace[-1][1] - trace[0][1]) / (trace[-1][0] - sent) * 100, "wall_s": trace[-1][0] - sent,
            "per_second_median_pct": float(np.median(steps)) if steps else None}  # fmt: skip


def cancel_to_silence(server: TimedServer, rng: random.Random, run_no: int) -> dict[str, Any]:
    """The 20-sentence text, cancelled (notifications/cancelled) at a random moment 0.5-2.5 s into its
    sound while a sound plays: cancel -> the end of the last sound in the speaker's monitor, and cancel
    -> the first get_status no longer speaking (the device free)."""
    with Monitor() as monitor:
        sounding = lambda: loud(monitor.samples()[-RATE // 100 :]).size > 0  # noqa: E731
        rid, _ = server.start_tool("speak_text", {"text": text_of(20)}, f"cancel-{run_no}")
        started = wait_for(sounding, 30, "the speech never sounded", every=0.01)
        time.sleep(rng.uniform(0.5, 2.5))
        wait_for(sounding, 3, "no sound to cut")
        cancel = {"requestId": rid, "reason": "bench"}
        server.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel})
        cancelled = time.monotonic()
        while server.tool("get_status", {}).get("speaking"):
            pass
        freed = time.monotonic()
        time.sleep(0.6)  # the cut's last samples reach the monitor
        last = int(loud(monitor.samples())[-1])
        return {"cancel_after_first_sound_ms": (cancelled - started) * 1000, "cancel_to_free_ms": (freed - cancelled) * 1000,
                "cancel_to_silence_ms": (monitor.time_of(last + 1) - cancelled) * 1000}  # fmt: skip


def converse_turn(server: TimedServer, model: Path, run_no: int) -> dict[str, Any]:
    """One converse nobody answers: the server's own "listening N ms after the speech left the speaker"
    (its INFO log), and on this clock the speech's last sample in the monitor -> "Listening on"."""
    token, offset = f"converse-{run_no}", server.log.stat().st_size
    with Monitor() as monitor:
        _, msg = server.reply(server.start_tool("converse", {**CONVERSE, "whisper_model": str(model)}, token)[0])
        samples = monitor.samples()
    logged = LISTENING.search(server.log.read_bytes()[offset:])
    return {"listening_after_ms": int(logged.group(1)) if logged else None,
            "client_speech_end_to_notice_ms": (server.notice(token, "Listening on") -
                                               monitor.time_of(int(np.flatnonzero(samples)[-1]) + 1)) * 1000,
            "first_audio_ms": msg["result"]["structuredContent"]["spoken"]["first_audio_ms"]}  # fmt: skip


def cpu_until_idle(pid: int, since: float) -> float:
    """CPU seconds spent since `since` up to the first whole second under IDLE_CPU_S."""
    began, trace = time.monotonic(), [(time.monotonic(), proc_stats(pid)["cpu_s"])]
    while time.monotonic() - began < WATCH_S:
        time.sleep(0.5)
        trace.append((time.monotonic(), proc_stats(pid)["cpu_s"]))
        second = [c for t, c in trace if t >= trace[-1][0] - 1.01]
        if trace[-1][0] - began >= 1.0 and second[-1] - second[0] < IDLE_CPU_S:
            break
    return trace[-1][1] - since


def hostile_text(server: TimedServer, name: str, text: str, stop_after: float, by_cancel: bool) -> dict[str, Any]:
    pid = server.proc.pid
    before = proc_stats(pid)
    with Monitor() as monitor:
        start = len(monitor.samples())
        rid, sent = server.start_tool("speak_text", {"text": text}, f"hostile-{name}")
        while rid not in server.replies:
            waited = time.monotonic() - sent
            if waited >= stop_after and (loud(monitor.samples()[start:]).size or waited >= SOUND_WAIT_S):
                break
            time.sleep(0.05)
    row: dict[str, Any] = {"text": name, "chars": len(text), "rss_before_mb": round(before["VmRSS"], 1)}
    if rid in server.replies:
        result = server.replies[rid][1].get("result") or {}
        code = json.loads(result["content"][1]["text"])["error"]["code"] if result.get("isError") else None
        row.update(outcome=code or "ended before the stop", at_s=round(server.replies[rid][0] - sent, 2))
    else:
        stopped_at = proc_stats(pid)["cpu_s"]
        if by_cancel:
            server.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid}})
        else:
            server.tool("stop_speaking", {})
        cpu_s = cpu_until_idle(pid, stopped_at)
        row.update(outcome="cancelled" if by_cancel else "stop_speaking", cpu_after_stop_s=round(cpu_s, 2))
    after = proc_stats(pid)
    row.update(rss_after_mb=round(after["VmRSS"], 1), peak_mb=round(after["VmHWM"], 1))
    print(f"{name:22} {row['outcome']:22} cpu after stop {row.get('cpu_after_stop_s', '-')!s:>6} s, "
          f"rss {row['rss_before_mb']:.0f} -> {row['rss_after_mb']:.0f} MB, peak {row['peak_mb']:.0f} MB", flush=True)  # fmt: skip
    return row


def hostile(rig: Rig, report: dict[str, Any], stop_after: float) -> None:
    """Each text of tests/hostile_speech.py in turn in one warmed server, stopped `stop_after` s after the
    call once it has sounded (stop_speaking and notifications/cancelled in turn); the warm RSS first."""
    from hostile_speech import HOSTILE_TEXTS  # in tests/, on sys.path once rig is imported

    with speaker(rig) as (server, _):
        warm = server.stats
        report["warm"] = {"rss_mb": round(warm["VmRSS"], 1), "peak_mb": round(warm["VmHWM"], 1)}
        report["texts"] = [hostile_text(server, name, text, stop_after, by_cancel=i % 2 == 1)
                           for i, (name, text) in enumerate(HOSTILE_TEXTS.items())]  # fmt: skip
    spoken = [r for r in report["texts"] if "cpu_after_stop_s" in r]
    report["summary"] = {"max_cpu_after_stop_s": max((r["cpu_after_stop_s"] for r in spoken), default=None),
                         "peak_mb": max(r["peak_mb"] for r in report["texts"]), "final_rss_mb": report["texts"][-1]["rss_after_mb"]}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    opts = cli(__doc__, argv, ("--runs", 10, "runs of each latency and of Piper in-process"),
               ("--cpu-runs", 2, "whole 20-sentence speeches: the server's CPU, and Piper's alone"),
               ("--model", TEST_MODEL, "the whisper model converse is given (never loaded)"),
               ("--hostile", False, "the hostile texts instead: the server's CPU after a stop, its RSS"),
               ("--stop-after", 4.0, "--hostile: seconds from the call to the stop"),
               ("--json", None, "the report (default bench/results-speak.json, with --hostile results-speak-hostile.json)"))  # fmt: skip
    words = {n: len(text_of(n).split()) for n in LENGTHS}
    run, rng = Run("piper-tts", "sounddevice", **vars(opts), words=words), random.Random(20261202)
    out = opts.json or ROOT / "bench" / f"results-speak{'-hostile' if opts.hostile else ''}.json"
    if opts.hostile:
        with Rig(TEST_MODEL.parent) as rig:
            hostile(rig, run.report, opts.stop_after)
        save_report(run.end(), out, lambda r: print(r["summary"]))
        return 0
    with Rig(TEST_MODEL.parent) as rig:
        sections: dict[str, Callable[[], Any]] = {
            "first_audio": lambda: [first_audio(rig, n) for _ in range(opts.runs) for n in LENGTHS],
            "cpu": lambda: [cpu_while_speaking(rig) for _ in range(opts.cpu_runs)],
            "cancel": lambda: in_one_server(rig, lambda s: [cancel_to_silence(s, rng, i) for i in range(opts.runs)]),
            "converse": lambda: in_one_server(rig, lambda s: [converse_turn(s, opts.model, i) for i in range(-1, opts.runs)][1:]),
            "piper": lambda: piper(VOICE_PATH, opts.runs, opts.cpu_runs),
        }  # fmt: skip  # first audio interleaves the lengths; converse's unmeasured first turn makes Silero's session
        for name, fn in sections.items():
            began = time.monotonic()
            run.report[name] = fn()
            print(f"[{name}] {time.monotonic() - began:.0f} s", flush=True)
    report = run.end()
    report["summary"] = summarise(report)
    report["targets"] = targets(report["summary"])
    save_report(report, out, lambda r: [print(f"{k}: {v.get('median')} (p90 {v.get('p90')})")
                                        for k, v in r["summary"].items() if v.get("n")])  # fmt: skip
    return 0


def in_one_server(rig: Rig, runs: Callable[[TimedServer], list[dict]]) -> list[dict]:
    """Every run of a section in one warmed server, as a client's conversation would."""
    with speaker(rig) as (server, _):
        return runs(server)


def summarise(report: dict[str, Any]) -> dict[str, Any]:
    """Median, p90 and the raw values of every figure, from the sections' rows."""
    rows, out = report["first_audio"], {}
    for n in LENGTHS:
        for key in ("first_audio_ms", "client_first_sound_ms", "client_reply_ms"):
            out[f"{key}_{n}"] = summary(r[key] for r in rows if r["sentences"] == n)
    out["cold_first_audio_ms"] = summary(r["cold_first_audio_ms"] for r in rows)
    out["cpu_pct"] = summary((r["cpu_pct"] for r in report["cpu"]), 2)
    for section, keys in (("cancel", ("cancel_to_silence_ms", "cancel_to_free_ms")),
                          ("converse", ("listening_after_ms", "client_speech_end_to_notice_ms", "first_audio_ms"))):  # fmt: skip
        out.update({f"{section}_{k}" if k == "first_audio_ms" else k:
                    summary(r[k] for r in report[section] if r[k] is not None) for k in keys})  # fmt: skip
    out["piper_rtf_20"] = summary((r["rtf"] for r in report["piper"]["whole_20"]), 4)
    for n, rs in report["piper"]["first_piece_runs"].items():
        out[f"piper_first_piece_ms_{n}"] = summary(r["wall_ms"] for r in rs)
    return out


def targets(s: dict[str, Any]) -> dict[str, Any]:
    """The medians against the targets: first audio <= 120 ms and flat (20 sentences over 1, <= 1.10),
    cancel to silence <= 100 ms, end of playback to listening <= 150 ms."""
    median = lambda key: s.get(key, {}).get("median")  # noqa: E731
    out = {f"first_audio_ms_{n}": verdict(median(f"first_audio_ms_{n}"), 120.0) for n in LENGTHS}
    one, twenty = median("first_audio_ms_1"), median("first_audio_ms_20")
    out["first_audio_flat_ratio"] = verdict(twenty / one if one and twenty is not None else None, 1.10)
    out["cancel_to_silence_ms"] = verdict(median("cancel_to_silence_ms"), 100.0)
    out["listening_after_ms"] = verdict(median("listening_after_ms"), 150.0)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
