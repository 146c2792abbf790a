"""mcp-listen's own costs on the virtual microphone: startup, device listing, stop latency, voice_query
after the silence window and its transcripts' WER, VAD CPU, RSS and install size.

    python bench/run.py [--runs 3] [--skip-venv] [--model PATH] [--json bench/results.json]
    python bench/run.py --quick      # every headline figure of docs/performance.md, fewer runs (~5 min)

Needs what the tests need (PulseAudio, paplay, espeak-ng, sox, libportaudio2) and a whisper model
(MCP_LISTEN_TEST_MODEL or --model; default the suite's tests/assets/ggml-tiny.en.bin). Synthetic
speech (espeak-ng) and a loopback Ollama that answers at once. bench/README.md explains each figure.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import clips
import endpoint_replay
import footprint
import latency
from rig import ROOT, TEST_MODEL, Rig
from stats import CpuBusy, Run, cli, dig, save_report, summary, verdict

QUICK_DIR = ROOT / "bench" / "results" / "quick"
"""Where --quick writes its reports: a check of the current figures, never a replacement of their files."""
BASE = ROOT / "tests" / "assets" / "ggml-base.bin"
QUICK_CLIPS = "librivox-0890,ast-en-vm-newuser,ast-es-demo-thanks"
QUICK = {
    "results.json": ["run.py", "--runs", "1", "--skip-venv", "--lengths", "20s", "--listening", "room_60db"],
    "results-realspeech.json": ["realspeech.py", "--only", QUICK_CLIPS, "--fresh", "0", "--threads", "0"],
    "results-speak.json": ["speak.py", "--runs", "1", "--cpu-runs", "0"],
}
"""Each headline figure, fewer runs: VAD CPU in the quiet room; RSS with tiny.en after the 20 s utterance; real
voices on 3 short clips (2 English speakers, 1 Spanish; each model's first call is its cold one); speech out once."""


def main(argv: list[str] | None = None) -> int:
    opts = cli(__doc__, argv, ("--runs", 3, "repetitions of each latency measurement"),
               ("--json", ROOT / "bench" / "results.json", "the report"), ("--skip-venv", False, "no fresh-venv size"),
               ("--model", TEST_MODEL, "whisper model file"), ("--threads", 2, "whisper threads; 0: the server's choice"),
               ("--silence-ms", 1000, "silence_ms of every stop-on-silence call"),
               ("--lengths", "2s,5s,20s", "voice_query utterances"),
               ("--listening", ",".join(footprint.LISTENING), "what the microphone hears for VAD CPU"),
               ("--quick", False, "every headline figure, fewer runs, into bench/results/quick/"))  # fmt: skip
    if opts.quick:
        return quick(opts.model)
    if not opts.model.is_file():
        raise SystemExit(f"whisper model {opts.model} not found (set MCP_LISTEN_TEST_MODEL or pass --model)")
    run = Run("pywhispercpp", "sounddevice", "ollama", **vars(opts))
    report = run.report
    try:
        with Rig(opts.model.parent, threads=opts.threads) as rig:
            startups = max(2, 2 * opts.runs)
            section("startup", lambda: report.update(startup=footprint.startup(rig.env(), startups, rig.workdir)))
            section("session", lambda: run_session(rig, opts, report))
            section("voice_query", lambda: run_voice(rig, opts, report))
            section("offline", lambda: report.update(vad_per_window=footprint.vad_per_window(),
                                                     vad_gate=endpoint_replay.gate_replay(opts.silence_ms)))  # fmt: skip
            if not opts.skip_venv:
                section("venv", lambda: report.update(venv_size=footprint.venv_size(rig.workdir)))
    finally:
        run.end()
        report["targets"] = targets(report)
    save_report(report, opts.json)
    return 0


def quick(model: Path) -> int:
    """The QUICK steps in turn, each report into QUICK_DIR; the time each took, and how busy the machine was."""
    QUICK_DIR.mkdir(parents=True, exist_ok=True)
    began, failed, busy = time.monotonic(), 0, CpuBusy()
    models = ["--model", str(model)] + (["--model", str(BASE)] if BASE.is_file() else [])
    for name, (script, *args) in QUICK.items():
        t = time.monotonic()
        extra = models if script == "realspeech.py" else ["--model", str(model)]
        command = [sys.executable, str(ROOT / "bench" / script), *args, *extra, "--json", str(QUICK_DIR / name)]
        code = subprocess.run(command, cwd=ROOT, stdin=subprocess.DEVNULL).returncode
        print(f"[quick {script}] exit {code} in {time.monotonic() - t:.0f} s", flush=True)
        failed += code != 0
    print(f"[quick] {len(QUICK) - failed} of {len(QUICK)} steps in {time.monotonic() - began:.0f} s, {busy.percent()} % of "
          f"all CPUs busy meanwhile; in {QUICK_DIR}")  # fmt: skip
    return 1 if failed else 0


def section(name: str, fn: Any) -> None:
    t = time.monotonic()
    print(f"[{name}] ...", flush=True)
    fn()
    print(f"[{name}] done in {time.monotonic() - t:.0f} s", flush=True)


def run_session(rig: Rig, opts: Any, report: dict) -> None:
    """One server: idle RSS, device listing, VAD CPU, RSS after captures, stop latency on espeak-ng."""
    with rig.server() as server:
        rss = {"idle": footprint.idle_rss(server)}
        report["list_audio_devices"] = footprint.list_devices(server, calls=10)
        rss["after_list_devices"] = footprint.idle_rss(server)
        report["vad_cpu"] = footprint.vad_cpu(rig, server, conditions=tuple(opts.listening.split(",")))
        rss["after_capture"] = footprint.idle_rss(server)
        report["rss"] = rss
        rig.start_monitor()
        stop = clips.stop_clips(opts.silence_ms)
        runs = [latency.capture_stop(rig, server, c, opts.silence_ms, f"stop-{r}-{c.name}")
                for r in range(opts.runs) for c in stop]  # fmt: skip
    keys = ("stop_latency_ms", "rec_end_to_result_ms", "finished_notice_to_result_ms", "play_start_latency_ms")
    report["stop"] = {"runs": runs, **{k: summary(r[k] for r in runs) for k in keys}}


def run_voice(rig: Rig, opts: Any, report: dict) -> None:
    """Per length: a fresh server, a cold call then a warm call, `runs` times; RSS 1 s after each pair."""
    utterances, lengths = clips.utterance_clips(opts.silence_ms), opts.lengths.split(",")
    per: dict[str, dict[str, list]] = {n: {"cold": [], "warm": []} for n in lengths}
    rss = []
    for r in range(opts.runs):
        for name in lengths:
            with rig.server() as server:
                for kind in ("cold", "warm"):
                    call = latency.voice_query(rig, server, utterances[name], opts.silence_ms, opts.model.name,
                                               f"vq-{name}-{r}-{kind}")  # fmt: skip
                    per[name][kind].append(call)
                time.sleep(1.0)  # settled, as for idle RSS: freed memory is returned after the call
                rss.append(server.stats)
    report["voice_query"] = {
        "lengths": {n: {kind: {"post_speech_ms": summary(x["post_speech_ms"] for x in runs),
                               "wer": summary((x["wer"] for x in runs), digits=3), "runs": runs}
                        for kind, runs in kinds.items()} for n, kinds in per.items()},
    }  # fmt: skip
    report["rss"]["with_tiny_en_loaded"] = {"rss_mb": round(max(s["VmRSS"] for s in rss), 1),
                                          "peak_mb": round(max(s["VmHWM"] for s in rss), 1)}  # fmt: skip


def targets(report: dict) -> dict[str, Any]:
    """Each target beside its figure (None where this run did not measure it)."""
    g = functools.partial(dig, report)
    warm = {n: v["warm"]["post_speech_ms"].get("median") for n, v in (g("voice_query", "lengths") or {}).items()}
    out = {"startup_ratio_vs_mcpserver": verdict(g("startup", "ratio_vs_mcpserver"), 1.10),
           "startup_ratio_vs_lowlevel": verdict(g("startup", "ratio_vs_lowlevel"), 1.10),
           "no_heavy_imports_at_startup": {"ok": g("startup", "imports", "ok")},
           "list_audio_devices_loads_no_model": {"ok": g("list_audio_devices", "never_loads_a_model")},
           "stop_latency_median_ms": verdict(g("stop", "stop_latency_ms", "median"), 100),
           "rec_end_to_result_median_ms": verdict(g("stop", "rec_end_to_result_ms", "median"), 30),
           "rss_idle_mb": verdict(g("rss", "idle", "rss_mb"), 70),
           "rss_with_tiny_en_mb": verdict(g("rss", "with_tiny_en_loaded", "rss_mb"), 250),
           **{f"post_speech_warm_{n}_median_ms": verdict(v, 250) for n, v in warm.items()},
           **{f"vad_cpu_{c}_pct_of_core": verdict(v["vad_cpu_pct_of_core"], 1.0)
              for c, v in (g("vad_cpu") or {}).items() if isinstance(v, dict)}}  # fmt: skip
    if warm.get("2s") is not None and warm.get("20s") is not None:
        out["post_speech_flat_20s_minus_2s_ms"] = verdict(warm["20s"] - warm["2s"], 50)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
