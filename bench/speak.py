"""Speech out: time to first audio, Piper's real-time factor, CPU while speaking, cancel to silence
and the end of playback to listening, through the real server on the virtual speaker.

    python bench/speak.py [--runs N] [--cpu-runs N] [--json OUT] [--voice PATH] [--model PATH]

The server is `python -m mcp_listen` over stdio with the tests' speak_env (the test voice
en_US-joe-medium as the default voice, HOME and recordings in a temporary folder). It plays into
the virtual microphone's sink; a second PortAudio client in this process records that sink's
monitor (bench/rig.py: Monitor), so every sample the speaker played has a time on this process's
clock, the clock the requests are written on. Needs what the speech-out tests need (PulseAudio,
libportaudio2, piper-tts) and their assets: the voice in tests/assets/voices and a whisper model
for converse (tests/assets/ggml-tiny.en.bin; it is never loaded: nobody answers).
bench/README.md ("Speech out") explains every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import run
from latency import close_server
from rig import RATE, ROOT, Monitor, Rig, TimedServer, proc_stats
from rpc import server_env
from speaker_rig import FOX, SOUND, sound_span_ms
from stats import fmt, summary, verdict

DEFAULT_VOICE = ROOT / "tests" / "assets" / "voices" / "en_US-joe-medium.onnx"
DEFAULT_MODEL = Path(os.environ.get("MCP_LISTEN_TEST_MODEL") or ROOT / "tests" / "assets" / "ggml-tiny.en.bin")

SENTENCES = (
    "The morning train to the coast was late again, so we waited on the cold platform.",
    "A man with a small brown dog asked me for the time.",
    "I told him it was nearly half past eight.",
    "He thanked me, and the dog wagged its tail as if it understood.",
    "When the train finally arrived, every seat in the first carriage was taken by students going home.",
    "We found two seats together near the back.",
    "Outside the window, the fields were covered in a thin layer of frost that sparkled in the sun.",
    "My sister fell asleep before we had even left the city.",
    "I read a few pages of my book and then gave up.",
    "The conductor came through twice to check our tickets, and both times he smiled at the sleeping girl.",
    "Somewhere after the third station, the sea appeared between the hills.",
    "It was grey and calm, with a few fishing boats far out on the water.",
    "An old woman across the aisle pointed at them and told us that her father had been a fisherman.",
    "She said he used to leave before dawn and come back with his hands frozen.",
    "We arrived just before eleven and walked down to the harbour.",
    "The cafe on the corner was open, so we ordered tea and warm bread with butter.",
    "By noon the frost had gone and the streets were full of people.",
    "We spent the afternoon walking along the beach and collecting smooth flat stones.",
    "When the light began to fade, we caught the last train back to the city.",
    "It was a long day, but nobody complained, and my sister still talks about the old woman and the boats.",
)
"""Natural sentences of 8-20 words. The 1-, 5- and 20-sentence texts are their first 1, 5 and 20, so
all three start with the same first piece (voice/pieces.py): what changes is the length alone."""
LENGTHS = (1, 5, 20)
WARM_UP = FOX
"""Said once by every server before anything is measured: the voice loads, onnxruntime warms up."""
CONVERSE_TEXT = "Would you like to take the early train or the late one?"
CONVERSE_LISTEN_MS = 500
"""converse's duration_ms: nobody answers, so the turn ends at this ceiling after listening began."""
LISTENING = re.compile(rb"listening (\d+) ms after the speech left the speaker")
TARGETS = {"first_audio_ms": 120.0, "flat_ratio": 1.10, "cancel_to_silence_ms": 100.0, "listening_after_ms": 150.0}
"""The issue's targets: first audio <= 120 ms and flat in text length (20 sentences / 1 sentence, median),
cancel to silence <= 100 ms, the end of playback to listening <= 150 ms; all on the median."""


def text_of(sentences: int) -> str:
    return " ".join(SENTENCES[:sentences])


# --------------------------------------------------------------------------- the rig


class Bench:
    """The virtual speaker (the tests' rig), the servers' environment and their stderr logs."""

    def __init__(self, opts: argparse.Namespace, workdir: Path) -> None:
        self.opts = opts
        self.workdir = workdir
        self.rig = Rig(opts.model.parent, workdir)
        self._servers = 0
        home = workdir / "home"
        home.mkdir()
        self.env = server_env(
            self.rig.mic.env,
            HOME=str(home),
            MCP_LISTEN_RECORDINGS_DIR=str(workdir / "recordings"),
            MCP_LISTEN_VOICES_PATH=str(opts.voice.parent),
            MCP_LISTEN_VOICE=opts.voice.stem,
            MCP_LISTEN_LOG_LEVEL="INFO",  # converse logs its listening delay at INFO
        )

    def server(self) -> tuple[TimedServer, Path, dict[str, Any]]:
        """A fresh server, initialized, that has said WARM_UP (whose result is returned too: the first
        speech of a process, the voice loading): nothing measured after it pays for the voice's load."""
        self._servers += 1
        log = self.workdir / f"server-{self._servers}.log"
        server = TimedServer(self.env, stderr_path=log)
        server.initialize()
        return server, log, server.tool("speak_text", {"text": WARM_UP}, timeout=60)

    def close(self) -> None:
        self.rig.close()


def structured(msg: dict[str, Any]) -> dict[str, Any]:
    """A tool call's structured result; a refusal or error stops the bench (no figure without it)."""
    result = msg.get("result") or {}
    if "error" in msg or result.get("isError"):
        raise RuntimeError(f"the call failed: {json.dumps(msg)[:400]}")
    return result.get("structuredContent") or {}


@contextmanager
def speaker_monitor() -> Iterator[Monitor]:
    """A Monitor on the virtual speaker for one measurement: a short stream keeps samples() cheap."""
    monitor = Monitor()
    time.sleep(0.3)
    try:
        yield monitor
    finally:
        monitor.close()


def loud(samples: Any) -> Any:
    """Indexes of the samples over -40 dBFS (speaker_rig.SOUND): the null sink's silence is exact zeros."""
    return np.flatnonzero(np.abs(samples.astype(np.int32)) > SOUND)


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, every: float = 0.005) -> float:
    """Poll until `predicate` holds; the time it first did."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(every)
    return time.monotonic()


def sounding(monitor: Monitor) -> bool:
    """True while the speaker is playing a sound right now (the last 10 ms the monitor got)."""
    return loud(monitor.recent(RATE // 100)).size > 0


# --------------------------------------------------------------------------- 1. time to first audio


def first_audio(bench: Bench, sentences: int) -> dict[str, Any]:
    """One speak_text (wait: false) in a fresh, warmed server: the server's first_audio_ms, and on this
    process's clock the request written -> the first sound in the speaker's monitor.

    wait: false answers once the first sound plays, and end of input stops the rest of the speech, so a
    20-sentence text costs a second, not a minute and a half. A fresh server per run (warmed by WARM_UP)
    keeps each run alike: the speech the previous run left playing is gone with its server."""
    server, _, cold = bench.server()
    try:
        with speaker_monitor() as monitor:
            rid, sent = server.start_tool("speak_text", {"text": text_of(sentences), "wait": False}, "first")
            replied, msg = server.reply(rid, timeout=60)
            heard = first_sound(monitor, sent)
    finally:
        close_server(server)
    return {
        "sentences": sentences,
        "first_audio_ms": structured(msg)["first_audio_ms"],
        "client_first_sound_ms": (heard["at"] - sent) * 1000,
        "client_reply_ms": (replied - sent) * 1000,
        "quiet_before_request": heard["quiet_before"],
        "cold_first_audio_ms": cold["first_audio_ms"],
    }


def first_sound(monitor: Monitor, sent: float, timeout: float = 5.0) -> dict[str, Any]:
    """When the first sample over SOUND after `sent` became available to a recorder on the speaker.

    The monitor's whole stream is searched once a little later (samples() copies it: not polled);
    quiet_before says the 100 ms before the request held no sound, so nothing earlier is mistaken
    for this speech."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.3)
        samples = monitor.samples()
        start = monitor.index_at(sent)
        after = loud(samples[start:])
        if after.size:
            index = start + int(after[0])
            quiet = loud(samples[max(0, start - RATE // 10) : start]).size == 0
            return {"at": monitor.time_of(index), "quiet_before": bool(quiet)}
    raise TimeoutError("no sound reached the speaker")


# --------------------------------------------------------------------------- 2. Piper's real-time factor


def piper_inprocess(voice_path: Path, runs: int) -> dict[str, Any]:
    """Piper alone in this process (no server, no device): the 20-sentence text synthesised piece by
    piece as the server splits it, wall time / audio time; and each text's first piece, which is what
    the server must synthesise before its first sound (the floor under first_audio_ms), and its first
    1, 2, ... words alone: what a shorter first piece would cost."""
    os.environ["ORT_DISABLE_TELEMETRY"] = "1"  # before piper imports onnxruntime, as the server does
    from piper import PiperVoice, SynthesisConfig

    from mcp_listen.voice.pieces import pieces

    voice = PiperVoice.load(voice_path)
    config = SynthesisConfig(length_scale=getattr(voice.config, "length_scale", None) or 1.0)
    rate = voice.config.sample_rate
    synth = lambda texts: _synthesise(voice, config, texts, rate)  # noqa: E731
    synth([WARM_UP])
    whole = [synth(pieces(text_of(20))) for _ in range(runs)]
    firsts = {n: [synth(pieces(text_of(n))[:1]) for _ in range(runs)] for n in LENGTHS}
    words = pieces(text_of(1))[0].split()
    by_words = {k: [synth([" ".join(words[:k])]) for _ in range(runs)] for k in range(1, len(words) + 1)}
    return {
        "sample_rate": rate,
        "pieces_20": len(pieces(text_of(20))),
        "first_piece": pieces(text_of(1))[0],
        "whole_20": whole,
        "first_piece_runs": {str(n): runs_ for n, runs_ in firsts.items()},
        "first_words_runs": {str(k): runs_ for k, runs_ in by_words.items()},
    }


def _synthesise(voice: Any, config: Any, texts: list[str], rate: int) -> dict[str, float]:
    """Synthesise `texts` in turn: wall and CPU seconds (all threads of this process), the audio's length,
    and how long its start is quiet (Piper's leading silence, before the first sample over SOUND)."""
    wall, cpu = time.perf_counter(), time.process_time()
    audio = np.concatenate([chunk.audio_int16_array for text in texts for chunk in voice.synthesize(text, config)])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    sounds = loud(audio)
    return {
        "wall_ms": wall * 1000,
        "cpu_ms": cpu * 1000,
        "audio_ms": len(audio) * 1000 / rate,
        "rtf": wall * rate / len(audio),
        "leading_quiet_ms": float(sounds[0]) * 1000 / rate if sounds.size else None,
    }


# --------------------------------------------------------------------------- 3. CPU while speaking


def cpu_while_speaking(bench: Bench) -> dict[str, Any]:
    """A whole 20-sentence speak_text (wait: true) in a warmed server: its CPU time (all threads, from
    /proc/PID/stat) over the call's wall time, and second by second (synthesis comes in bursts)."""
    server, _, _ = bench.server()
    try:
        with speaker_monitor() as monitor:
            rid, sent = server.start_tool("speak_text", {"text": text_of(20)}, "cpu")
            trace = [(sent, proc_stats(server.proc.pid)["cpu_s"])]
            msg = _reply_tracing(server, rid, trace)
            played = sound_span_ms(monitor.samples())
    finally:
        close_server(server)
    result = structured(msg)
    (t0, c0), (t1, c1) = trace[0], trace[-1]
    steps = [(b[1] - a[1]) / (b[0] - a[0]) * 100 for a, b in zip(trace, trace[1:]) if b[0] > a[0]]
    ordered = sorted(steps)
    return {
        "cpu_pct": (c1 - c0) / (t1 - t0) * 100,
        "cpu_s": c1 - c0,
        "wall_s": t1 - t0,
        "duration_ms": result["duration_ms"],
        "first_audio_ms": result["first_audio_ms"],
        "sound_span_ms": played,
        "per_second_median_pct": ordered[len(ordered) // 2] if ordered else None,
        "per_second_max_pct": ordered[-1] if ordered else None,
        "per_second_pct": [round(x, 1) for x in steps],
    }


def _reply_tracing(server: TimedServer, rid: int, trace: list[tuple[float, float]]) -> dict[str, Any]:
    """Wait for the reply, reading the server's CPU time every second meanwhile; the last reading is
    taken when the reply arrived (the server is then idle: what it used is the call's)."""
    while True:
        try:
            replied, msg = server.reply(rid, timeout=1.0)
        except TimeoutError:
            trace.append((time.monotonic(), proc_stats(server.proc.pid)["cpu_s"]))
            continue
        trace.append((replied, proc_stats(server.proc.pid)["cpu_s"]))
        return msg


# --------------------------------------------------------------------------- 4. cancel to silence


def cancel_to_silence(server: TimedServer, rng: random.Random, run_no: int) -> dict[str, Any]:
    """speak_text (the 20-sentence text, wait: true), cancelled at a random moment 0.5-2.5 s into its
    sound while a sound is playing: cancel written -> the end of the last sound in the speaker's
    monitor, and cancel written -> get_status no longer speaking (the device free)."""
    with speaker_monitor() as monitor:
        rid, _ = server.start_tool("speak_text", {"text": text_of(20)}, f"cancel-{run_no}")
        started = wait_for(lambda: sounding(monitor), 30, "the speech never sounded", every=0.01)
        time.sleep(rng.uniform(0.5, 2.5))
        wait_for(lambda: sounding(monitor), 3, "no sound to cut")
        cancelled = send_cancel(server, rid)
        freed = not_speaking_after(server)
        time.sleep(0.6)  # the cut's last samples reach the monitor
        samples = monitor.samples()
    last = int(loud(samples)[-1])
    silent_at = monitor.time_of(last + 1)
    tail = np.abs(samples[max(0, last - RATE // 100) : last + 1].astype(np.int32))
    return {
        "peak_last_10ms": int(tail.max()),
        "cancel_after_first_sound_ms": (cancelled - started) * 1000,
        "cancel_to_silence_ms": (silent_at - cancelled) * 1000,
        "cancel_to_free_ms": (freed - cancelled) * 1000,
        "replied": rid in server.replies,
    }


def send_cancel(server: TimedServer, rid: int) -> float:
    """notifications/cancelled for the request, as an MCP client sends it; the time it was written."""
    server.send(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid, "reason": "bench"}}
    )
    return time.monotonic()


def not_speaking_after(server: TimedServer, timeout: float = 10.0) -> float:
    """Arrival of the first get_status that no longer says speaking (the claim on the device is gone)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rid, _ = server.send_request("tools/call", {"name": "get_status", "arguments": {}})
        arrived, msg = server.reply(rid, timeout=5)
        if not structured(msg).get("speaking"):
            return arrived
    raise TimeoutError("the speaker was never freed")


# --------------------------------------------------------------------------- 5. end of playback to listening


def converse_turn(server: TimedServer, log: Path, model: Path, run_no: int) -> dict[str, Any]:
    """One converse nobody answers: the server's own "listening N ms after the speech left the speaker"
    (from its INFO log), and on this process's clock the end of the last sample of the speech in the
    speaker's monitor -> the "Listening on" progress notification."""
    token = f"converse-{run_no}"
    offset = log.stat().st_size
    args = {"text": CONVERSE_TEXT, "whisper_model": str(model), "duration_ms": CONVERSE_LISTEN_MS}
    with speaker_monitor() as monitor:
        rid, _ = server.start_tool("converse", args, token)
        _, msg = server.reply(rid, timeout=60)
        samples = monitor.samples()
    data = structured(msg)
    notice = next(t for t, p in server.progress_for(token) if "Listening on" in str(p.get("message")))
    end = int(np.flatnonzero(samples)[-1])  # the speech's last sample: the sink's silence is exact zeros
    last_loud = int(loud(samples)[-1])
    return {
        "listening_after_ms": logged_listening(log, offset),
        "client_speech_end_to_notice_ms": (notice - monitor.time_of(end + 1)) * 1000,
        "client_last_loud_to_notice_ms": (notice - monitor.time_of(last_loud + 1)) * 1000,
        "stopped_by": data.get("stopped_by"),
        "speech_detected": data.get("speech_detected"),
        "spoken": data.get("spoken"),
    }


def devices(runs: int) -> dict[str, Any]:
    """Two device figures that explain the latencies, in this process on the virtual sound server:
    the time to open and start an output stream as the server's speaker does (22.05 kHz mono, 0.2 s
    latency), which first audio pays before the first piece is synthesised; and the input latency
    PortAudio reports for a stream opened as the server's microphone is (16 kHz mono, 512-sample
    blocks), which converse waits, with one window and ECHO_TAIL_S, after the speech ended."""
    import sounddevice as sd

    from mcp_listen.audio.speaker import LATENCY_S
    from mcp_listen.contract.limits import WINDOW_SAMPLES
    from mcp_listen.engine.turn import ECHO_TAIL_S, WINDOW_S

    opens = []
    for _ in range(runs):
        began = time.perf_counter()
        with sd.OutputStream(samplerate=22050, channels=1, dtype="int16", latency=LATENCY_S):
            opens.append((time.perf_counter() - began) * 1000)
    with sd.InputStream(samplerate=RATE, channels=1, dtype="int16", blocksize=WINDOW_SAMPLES, callback=_ignore) as mic:
        latency = float(mic.latency)
    return {
        "speaker_open_ms": opens,
        "input_latency_ms": latency * 1000,
        "window_ms": WINDOW_S * 1000,
        "echo_tail_ms": ECHO_TAIL_S * 1000,
    }


def _ignore(*_: Any) -> None:
    """An input callback that drops what it gets (the stream is opened only for its latency figure)."""


def logged_listening(log: Path, offset: int) -> int | None:
    """The listening delay the server logged for this turn (the first such line after `offset`)."""
    with open(log, "rb") as f:
        f.seek(offset)
        found = LISTENING.search(f.read())
    return int(found.group(1)) if found else None


# --------------------------------------------------------------------------- running it all


def main(argv: list[str] | None = None) -> int:
    opts = parse(argv)
    began = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="mcp-listen-speak-"))
    report: dict[str, Any] = {"machine": run.machine(), "config": config(opts)}
    busy = run.CpuBusy()
    bench = Bench(opts, workdir)
    try:
        measure(bench, opts, report)
    finally:
        bench.close()
        report["machine"]["cpu_busy_during_run_pct"] = busy.percent()
        report["machine"]["loadavg_end"] = run.loadavg()
        report["elapsed_s"] = round(time.monotonic() - began, 1)
        shutil.rmtree(workdir, ignore_errors=True)
    report["summary"] = summarise(report)
    report["targets"] = targets(report["summary"])
    run.save_report(report, Path(opts.json or ROOT / "bench" / "results-speak.json"), print_table)
    return 0


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=10, help="runs of each latency and of Piper in-process (default 10)")
    p.add_argument("--cpu-runs", type=int, default=2, help="whole 20-sentence speeches for the CPU figure (default 2)")
    p.add_argument("--json", type=Path, help="write the report here (default bench/results-speak.json)")
    p.add_argument("--voice", type=Path, default=DEFAULT_VOICE, help="Piper voice (.onnx, its .onnx.json beside it)")
    p.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="whisper model converse is given (never loaded)")
    return p.parse_args(argv)


def measure(bench: Bench, opts: argparse.Namespace, report: dict[str, Any]) -> None:
    """The sections in turn; first audio interleaves the three lengths so a change in load hits all alike."""
    section(report, "first_audio", lambda: [first_audio(bench, n) for _ in range(opts.runs) for n in LENGTHS])
    section(report, "cpu", lambda: [cpu_while_speaking(bench) for _ in range(opts.cpu_runs)])
    section(report, "cancel", lambda: in_one_server(bench, cancel_runs(opts.runs)))
    section(report, "converse", lambda: in_one_server(bench, converse_runs(opts)))
    section(report, "devices", lambda: devices(opts.runs))
    section(report, "piper", lambda: piper_inprocess(opts.voice, opts.runs))


def section(report: dict[str, Any], name: str, fn: Callable[[], Any]) -> None:
    """Run one section and keep its raw values; print how long it took (the whole run is ~10 minutes)."""
    began = time.monotonic()
    print(f"[{name}] ...", flush=True)
    report[name] = fn()
    print(f"[{name}] {time.monotonic() - began:.0f} s", flush=True)


def in_one_server(bench: Bench, runs: Callable[[TimedServer, Path], list[dict]]) -> list[dict]:
    """Every run of a section in one warmed server, as a client's conversation would."""
    server, log, _ = bench.server()
    try:
        return runs(server, log)
    finally:
        close_server(server)


def cancel_runs(runs: int) -> Callable[[TimedServer, Path], list[dict]]:
    rng = random.Random(20261202)  # the same cancel moments every run of the bench
    return lambda server, _log: [cancel_to_silence(server, rng, i) for i in range(runs)]


def converse_runs(opts: argparse.Namespace) -> Callable[[TimedServer, Path], list[dict]]:
    """One unmeasured turn first (Silero's session is made in the first one), then `runs` measured."""

    def turns(server: TimedServer, log: Path) -> list[dict]:
        converse_turn(server, log, opts.model, -1)
        return [converse_turn(server, log, opts.model, i) for i in range(opts.runs)]

    return turns


def config(opts: argparse.Namespace) -> dict[str, Any]:
    import importlib.metadata as md

    versions = {}
    for pkg in ("mcp", "piper-tts", "onnxruntime", "sounddevice", "numpy"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    return {
        "runs": opts.runs,
        "cpu_runs": opts.cpu_runs,
        "voice": opts.voice.stem,
        "texts": {str(n): {"sentences": n, "words": len(text_of(n).split())} for n in LENGTHS},
        "words_per_sentence": [len(s.split()) for s in SENTENCES],
        "converse_text": CONVERSE_TEXT,
        "converse_duration_ms": CONVERSE_LISTEN_MS,
        "versions": versions,
    }


# --------------------------------------------------------------------------- the figures


def summarise(report: dict[str, Any]) -> dict[str, Any]:
    """Median, p90 and the raw values of every figure, from the sections' rows."""
    out: dict[str, Any] = {}
    rows = report.get("first_audio", [])
    for n in LENGTHS:
        mine = [r for r in rows if r["sentences"] == n]
        for key in ("first_audio_ms", "client_first_sound_ms", "client_reply_ms"):
            out[f"{key}_{n}"] = summary(r[key] for r in mine)
    out["cold_first_audio_ms"] = summary(r["cold_first_audio_ms"] for r in rows)
    speeches = report.get("cpu", [])
    out["cpu_pct"] = summary((r["cpu_pct"] for r in speeches), 2)
    out["cpu_per_second_median_pct"] = summary((r["per_second_median_pct"] for r in speeches), 2)
    out["cpu_wait_true_first_audio_ms"] = summary(r["first_audio_ms"] for r in speeches)
    for key in ("cancel_to_silence_ms", "cancel_to_free_ms"):
        out[key] = summary(r[key] for r in report.get("cancel", []))
    turns = report.get("converse", [])
    for key in ("listening_after_ms", "client_speech_end_to_notice_ms", "client_last_loud_to_notice_ms"):
        out[key] = summary(r[key] for r in turns if r[key] is not None)
    out["converse_first_audio_ms"] = summary(r["spoken"]["first_audio_ms"] for r in turns)
    out["speaker_open_ms"] = summary((report.get("devices") or {}).get("speaker_open_ms", []))
    piper = report.get("piper") or {}
    out["piper_rtf_20"] = summary((r["rtf"] for r in piper.get("whole_20", [])), 4)
    out["piper_cpu_per_wall_20"] = summary((r["cpu_ms"] / r["wall_ms"] for r in piper.get("whole_20", [])), 2)
    for n, runs_ in (piper.get("first_piece_runs") or {}).items():
        out[f"piper_first_piece_ms_{n}"] = summary(r["wall_ms"] for r in runs_)
    for k, runs_ in (piper.get("first_words_runs") or {}).items():
        out[f"piper_first_words_ms_{k}"] = summary(r["wall_ms"] for r in runs_)
    firsts = [r for runs_ in (piper.get("first_piece_runs") or {}).values() for r in runs_]
    out["piper_leading_quiet_ms"] = summary(r["leading_quiet_ms"] for r in firsts if r["leading_quiet_ms"] is not None)
    return out


def targets(s: dict[str, Any]) -> dict[str, Any]:
    """Each figure that has a target, beside it (medians; `flat` is the 20-sentence median over the 1-sentence one)."""
    median = lambda key: s.get(key, {}).get("median")  # noqa: E731
    out = {f"first_audio_ms_{n}": verdict(median(f"first_audio_ms_{n}"), TARGETS["first_audio_ms"]) for n in LENGTHS}
    one, twenty = median("first_audio_ms_1"), median("first_audio_ms_20")
    out["first_audio_flat_ratio"] = verdict(twenty / one if one and twenty is not None else None, TARGETS["flat_ratio"])
    out["cancel_to_silence_ms"] = verdict(median("cancel_to_silence_ms"), TARGETS["cancel_to_silence_ms"])
    out["listening_after_ms"] = verdict(median("listening_after_ms"), TARGETS["listening_after_ms"])
    return out


ROWS = (
    ("first audio, 1 sentence (server's first_audio_ms)", "first_audio_ms_1", "ms", "<= 120 ms"),
    ("first audio, 5 sentences", "first_audio_ms_5", "ms", "<= 120 ms"),
    ("first audio, 20 sentences", "first_audio_ms_20", "ms", "<= 120 ms, flat"),
    ("request -> first sound at the speaker, 1 sentence", "client_first_sound_ms_1", "ms", ""),
    ("request -> first sound at the speaker, 5 sentences", "client_first_sound_ms_5", "ms", ""),
    ("request -> first sound at the speaker, 20 sentences", "client_first_sound_ms_20", "ms", ""),
    ("first audio in a fresh server (voice loads)", "cold_first_audio_ms", "ms", ""),
    ("Piper in-process: first piece synthesis", "piper_first_piece_ms_1", "ms", ""),
    ("Piper in-process: the first piece's first 3 words alone", "piper_first_words_ms_3", "ms", ""),
    ("opening the speaker (in-process, as the server does)", "speaker_open_ms", "ms", ""),
    ("Piper in-process: real-time factor, 20 sentences", "piper_rtf_20", "", ""),
    ("server CPU while speaking 20 sentences", "cpu_pct", "% of a core", ""),
    ("  the same, median second (synthesis done, playing)", "cpu_per_second_median_pct", "% of a core", ""),
    ("cancel -> last sound at the speaker", "cancel_to_silence_ms", "ms", "<= 100 ms"),
    ("cancel -> get_status not speaking", "cancel_to_free_ms", "ms", ""),
    ("converse: speech left the speaker -> listening (server log)", "listening_after_ms", "ms", "<= 150 ms"),
    ("converse: speech's last sample at the speaker -> 'Listening on'", "client_speech_end_to_notice_ms", "ms", ""),
    ("converse: first audio (spoken.first_audio_ms)", "converse_first_audio_ms", "ms", ""),
)


def print_table(report: dict[str, Any]) -> None:
    """The figures beside their targets: median / p90, then min, max, n."""
    s = report["summary"]
    print(f"\n{'figure':66} {'median / p90':>22}  target")
    for label, key, unit, target in ROWS:
        fig = s.get(key) or {}
        value = f"{fig['median']} / {fig['p90']} {unit}" if fig.get("n") else "n/a"
        print(f"{label:66} {value:>22}  {target}")
    print("\ntargets (median):")
    for key, v in report["targets"].items():
        mark = "ok" if v["ok"] else ("n/a" if v["ok"] is None else "MISSED")
        print(f"  {key:28} {v['value']} (target {v['target']}): {mark}")
    print(f"\nfirst audio, 1 sentence: {fmt(s.get('first_audio_ms_1', {}))}")
    print(f"machine: {report['machine']['cpu_busy_during_run_pct']} % of all CPUs busy during the run")


if __name__ == "__main__":
    raise SystemExit(main())
