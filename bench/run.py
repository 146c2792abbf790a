"""mcp-listen benchmark: latency, footprint and transcript quality, on the virtual microphone.

    python bench/run.py [--runs N] [--json OUT] [--skip-venv]
    python bench/run.py --quick      # every headline figure of docs/performance.md, fewer runs, ~5 min

Needs what the tests need (PulseAudio, paplay, espeak-ng, sox, libportaudio2) and a
whisper model: MCP_LISTEN_TEST_MODEL, or --model, else tests/assets/ggml-tiny.en.bin (the one the
test suite builds: `python tools/make_test_assets.py model tests/assets/ggml-tiny.en.bin`).
bench/README.md explains every figure and how it is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import clips
import footprint
import latency
import startup
from rig import ROOT, Rig
from stats import fmt, summary, verdict

DEFAULT_MODEL = Path(os.environ.get("MCP_LISTEN_TEST_MODEL") or ROOT / "tests" / "assets" / "ggml-tiny.en.bin")
BASE_MIN_BYTES = 100 * 1024 * 1024
"""A real ggml-base.en.bin is 148 MB; smaller files of that name are test stand-ins."""


QUICK_DIR = ROOT / "bench" / "results" / "quick"
"""Where --quick writes its reports: a check of the figures, never a replacement of the current files."""
QUICK_SCRIPTS = {
    "realspeech": ["realspeech.py", "--runs", "1", "--fresh", "1", "--stop-runs", "1", "--threads", "0"],
    "speak": ["speak.py", "--runs", "3", "--cpu-runs", "1"],
}
"""The other headline figures (real voices with tiny.en, speech out) with fewer repetitions."""


def main(argv: list[str] | None = None) -> int:
    opts = parse(argv)
    if opts.quick:
        return quick(opts)
    began = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="mcp-listen-bench-"))
    report: dict[str, Any] = {"machine": machine(), "config": config(opts)}
    busy = CpuBusy()
    rig = Rig(opts.model.parent, workdir, threads=opts.threads)
    try:
        section("startup", lambda: run_startup(rig, opts, workdir, report))
        section("session", lambda: run_session(rig, opts, report))
        section("voice_query", lambda: run_voice(rig, opts, report))
        section("wer", lambda: run_wer(opts, report))
        report["vad_per_window"] = footprint.vad_per_window()
        report["stop_floor"] = latency.stop_floor(opts.silence_ms)
        report["vad_gate"] = latency.gate_replay(opts.silence_ms)
        if not opts.skip_venv:
            section(
                "venv",
                lambda: report.__setitem__("venv_size", footprint.venv_size(workdir)),
            )
    finally:
        rig.close()
        report["machine"]["cpu_busy_during_run_pct"] = busy.percent()
        report["machine"]["loadavg_end"] = loadavg()
        report["elapsed_s"] = round(time.monotonic() - began, 1)
        report["targets"] = targets(report)
        shutil.rmtree(workdir, ignore_errors=True)
    out = opts.json or ROOT / "bench" / "results.json"
    save_report(report, Path(out), print_summary)
    return 0


def quick(opts: argparse.Namespace) -> int:
    """Every headline figure once, in about 5 minutes: this script's sections with one run and no
    venv, then the real-voice and speech-out scripts with fewer repetitions; each report goes to
    bench/results/quick/, and the time each took is printed."""
    QUICK_DIR.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    argv = ["--runs", "1", "--skip-venv", "--model", str(opts.model), "--json", str(QUICK_DIR / "results.json")]
    steps: list[tuple[str, list[str]]] = [("run", [sys.executable, __file__, *argv])]
    for name, script in QUICK_SCRIPTS.items():
        report = ["--json", str(QUICK_DIR / f"results-{name}.json")]
        steps.append((name, [sys.executable, str(Path(__file__).with_name(script[0])), *script[1:], *report]))
    failed = 0
    for name, command in steps:
        t = time.monotonic()
        code = subprocess.run(command, cwd=ROOT, stdin=subprocess.DEVNULL).returncode
        print(f"[quick {name}] exit {code} in {time.monotonic() - t:.0f} s", flush=True)
        failed += code != 0
    print(
        f"[quick] {len(steps) - failed} of {len(steps)} steps in {time.monotonic() - began:.0f} s; reports in {QUICK_DIR}"
    )
    return 1 if failed else 0


def save_report(report: dict[str, Any], out: Path, show: Callable[[dict[str, Any]], None]) -> None:
    """Write the JSON report (every raw value), show its summary, and say where it went."""
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    show(report)
    print(f"\nreport: {out}  ({report['elapsed_s']} s)")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--runs",
        type=int,
        default=3,
        help="repetitions of each latency measurement (default 3)",
    )
    p.add_argument("--json", type=Path, help="write the report here (default bench/results.json)")
    p.add_argument(
        "--skip-venv",
        action="store_true",
        help="skip the fresh-venv install size (slow, needs PyPI)",
    )
    p.add_argument(
        "--model",
        type=Path,
        default=DEFAULT_MODEL,
        help="whisper model file (default tiny.en)",
    )
    p.add_argument("--threads", type=int, default=2, help="whisper threads (default 2)")
    p.add_argument(
        "--silence-ms",
        type=int,
        default=1000,
        help="silence_ms for every stop-on-silence call",
    )
    p.add_argument("--lengths", default="2s,5s,20s", help="utterances for voice_query (2s,5s,20s)")
    p.add_argument("--quick", action="store_true", help="every headline figure, fewer runs, into bench/results/quick/")
    opts = p.parse_args(argv)
    if not opts.model.is_file():
        p.error(f"whisper model {opts.model} not found (set MCP_LISTEN_TEST_MODEL or pass --model)")
    return opts


# --------------------------------------------------------------------------- sections


def section(name: str, fn: Any) -> None:
    t = time.monotonic()
    print(f"[{name}] ...", flush=True)
    fn()
    print(f"[{name}] done in {time.monotonic() - t:.0f} s", flush=True)


def run_startup(rig: Rig, opts: argparse.Namespace, workdir: Path, report: dict) -> None:
    env = rig.env()
    report["startup"] = startup.measure(env, runs=max(5, 2 * opts.runs))
    report["startup"]["imports"] = startup.import_check(env, workdir)
    report["list_audio_devices"] = {"in_process": footprint.rescan_cost(env)}


def run_session(rig: Rig, opts: argparse.Namespace, report: dict) -> None:
    """One server: idle RSS, device listing, VAD CPU, RSS after captures, stop latency."""
    server = rig.server()
    try:
        rss = {"idle": footprint.idle_rss(server)}
        report["list_audio_devices"].update(footprint.list_devices(server, calls=10))
        rss["after_list_devices"] = footprint.idle_rss(server)
        report["vad_cpu"] = footprint.vad_cpu(rig, server)
        rss["after_capture"] = footprint.idle_rss(server)
        report["rss"] = rss
        rig.start_monitor()
        runs = [
            latency.capture_stop(rig, server, clip, opts.silence_ms, f"stop-{r}-{clip.name}")
            for r in range(opts.runs)
            for clip in clips.stop_clips(opts.silence_ms)
        ]
    finally:
        latency.close_server(server)
    report["stop"] = {
        "runs": runs,
        "stop_latency_ms": summary(r["stop_latency_ms"] for r in runs),
        "rec_end_to_result_ms": summary(r["rec_end_to_result_ms"] for r in runs),
        "finished_notice_to_result_ms": summary(r["finished_notice_to_result_ms"] for r in runs),
        "speech_end_to_result_minus_silence_ms": summary(r["speech_end_to_result_minus_silence_ms"] for r in runs),
        "play_start_latency_ms": summary(r["play_start_latency_ms"] for r in runs),
        "clips": [c.public() for c in clips.stop_clips(opts.silence_ms)],
    }


def models(opts: argparse.Namespace) -> dict[str, Path]:
    """tiny.en (given) and base.en when a real one is present next to it or in ~/.mcp-listen/models."""
    found = {opts.model.name.removeprefix("ggml-").removesuffix(".bin"): opts.model}
    for folder in (opts.model.parent, Path.home() / ".mcp-listen" / "models"):
        base = folder / "ggml-base.en.bin"
        if base.is_file() and base.stat().st_size > BASE_MIN_BYTES:
            found["base.en"] = base
            break
    return found


def run_voice(rig: Rig, opts: argparse.Namespace, report: dict) -> None:
    """Per model and length: a fresh server, a cold call then a warm call, `runs` times."""
    utterances = clips.utterance_clips(opts.silence_ms)
    lengths = [x.strip() for x in opts.lengths.split(",") if x.strip()]
    out: dict[str, Any] = {
        "clips": {n: utterances[n].public() for n in lengths},
        "models": {},
    }
    report["base_en"] = "measured" if "base.en" in models(opts) else "not measured: no ggml-base.en.bin on this machine"
    rss_model = []
    for model_name, model_path in models(opts).items():
        per: dict[str, dict[str, list]] = {n: {"cold": [], "warm": []} for n in lengths}
        if model_path.parent != rig.model_dir:
            rig.model_dir = model_path.parent
        for r in range(opts.runs):
            for name in lengths:
                server = rig.server()
                try:
                    for kind in ("cold", "warm"):
                        token = f"vq-{model_name}-{name}-{r}-{kind}"
                        per[name][kind].append(
                            latency.voice_query(
                                rig,
                                server,
                                utterances[name],
                                opts.silence_ms,
                                model_path.name,
                                token,
                            )
                        )
                    if model_name.startswith("tiny"):
                        time.sleep(1.0)  # settled, as for idle RSS: freed memory is returned after the call
                        rss_model.append(server.stats)
                finally:
                    latency.close_server(server)
        out["models"][model_name] = {
            name: {
                kind: {
                    "post_speech_ms": summary(x["post_speech_ms"] for x in runs),
                    "finished_notice_to_result_ms": summary(x["finished_notice_to_result_ms"] for x in runs),
                    "speech_end_to_finished_notice_minus_silence_ms": summary(
                        x["speech_end_to_finished_notice_minus_silence_ms"] for x in runs
                    ),
                    "wer": summary((x["wer"] for x in runs), digits=3),
                    "runs": runs,
                }
                for kind, runs in kinds.items()
            }
            for name, kinds in per.items()
        }
    report["voice_query"] = out
    if rss_model:
        report.setdefault("rss", {})["with_tiny_en_loaded"] = {
            "rss_mb": round(max(s["VmRSS"] for s in rss_model), 1),
            "peak_mb": round(max(s["VmHWM"] for s in rss_model), 1),
        }


def run_wer(opts: argparse.Namespace, report: dict) -> None:
    """Whole-recording transcription of the same clips, in this process, with the project's code."""
    from rig import RATE
    from rig import audio_assets as A

    from mcp_listen.whisper import text as W
    from mcp_listen.whisper import transcriber as T

    tr = T.Transcriber(threads=opts.threads)
    tr.load(opts.model)
    out: dict[str, Any] = {}
    for name, clip in clips.utterance_clips(opts.silence_ms).items():
        samples = A.read_wav(clip.path)
        start = max(0, clip.first_loud - RATE)  # the pipeline's ~1 s pre-roll
        end = clip.last_loud + int(0.3 * RATE)  # and its 300 ms after the speech
        audio = W.condition(samples[start:end])
        texts, times = [], []
        for _ in range(max(1, opts.runs)):
            t = time.perf_counter()
            texts.append(tr.transcribe(audio, path=opts.model))
            times.append((time.perf_counter() - t) * 1000)
        incremental = (
            report.get("voice_query", {})
            .get("models", {})
            .get(opts.model.name.removeprefix("ggml-").removesuffix(".bin"), {})
            .get(name, {})
        )
        inc_runs = [x for kind in ("cold", "warm") for x in incremental.get(kind, {}).get("runs", [])]
        out[name] = {
            "whole_wer": summary((clips.wer(clip.text, t) for t in texts), digits=3),
            "whole_transcripts": sorted(set(texts)),
            "whole_transcribe_ms": summary(times),
            "incremental_wer": summary((x["wer"] for x in inc_runs), digits=3),
            "incremental_transcripts": sorted({x["transcription"] for x in inc_runs}),
            "reference": clip.text,
        }
    tr.unload()
    report["wer"] = out
    report["whole_after_stop"] = whole_after_stop(opts)


def whole_after_stop(opts: argparse.Namespace) -> dict[str, Any]:
    """What the wait would be if, like the Node edition, whisper were loaded on each call and the
    whole recording transcribed after it ends with whisper's default 30 s window: measured here
    with the same whisper.cpp on the same clips (a reference point, not a Node measurement)."""
    from rig import RATE
    from rig import audio_assets as A

    from mcp_listen.whisper import text as W
    from mcp_listen.whisper import transcriber as T

    shrink = W.audio_ctx_for
    T.audio_ctx_for = lambda n: 0  # whisper.cpp's default window (bench process only)
    out: dict[str, Any] = {}
    try:
        for name, clip in clips.utterance_clips(opts.silence_ms).items():
            samples = A.read_wav(clip.path)
            audio = W.condition(samples[max(0, clip.first_loud - RATE) : clip.last_loud + int(0.3 * RATE)])
            t = time.perf_counter()
            tr = T.Transcriber(threads=opts.threads)
            tr.load(opts.model)
            loaded = time.perf_counter()
            tr.transcribe(audio, path=opts.model)
            done = time.perf_counter()
            tr.unload()
            out[name] = {
                "load_ms": round((loaded - t) * 1000, 1),
                "transcribe_ms": round((done - loaded) * 1000, 1),
            }
    finally:
        T.audio_ctx_for = shrink
    return out


# --------------------------------------------------------------------------- machine and targets


class CpuBusy:
    """Share of all CPUs busy (every process, not only ours) between construction and percent()."""

    def __init__(self) -> None:
        self.start = self._read()

    @staticmethod
    def _read() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        idle = fields[3] + fields[4]
        return sum(fields) - idle, sum(fields)

    def percent(self) -> float:
        busy, total = self._read()
        return round(100 * (busy - self.start[0]) / max(1, total - self.start[1]), 1)


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def machine() -> dict[str, Any]:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = Path("/proc/meminfo").read_text().splitlines()[0].split()[1]
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "mem_gb": round(int(mem) / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg_start": loadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }


def config(opts: argparse.Namespace) -> dict[str, Any]:
    import importlib.metadata as md

    versions = {}
    for pkg in (
        "mcp",
        "pydantic",
        "numpy",
        "onnxruntime",
        "pywhispercpp",
        "sounddevice",
        "ollama",
    ):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    return {
        "runs": opts.runs,
        "model": opts.model.name,
        "whisper_threads": opts.threads,
        "silence_ms": opts.silence_ms,
        "versions": versions,
    }


def targets(report: dict) -> dict[str, Any]:
    """Each issue target next to the measured figure."""
    g = report.get
    out: dict[str, Any] = {}
    if g("startup"):
        out["startup_ratio_vs_mcpserver"] = verdict(report["startup"]["ratio_vs_mcpserver"], 1.10)
        out["startup_ratio_vs_lowlevel"] = verdict(report["startup"]["ratio_vs_lowlevel"], 1.10)
        out["no_heavy_imports_at_startup"] = {"ok": report["startup"]["imports"]["ok"]}
    if g("list_audio_devices", {}).get("never_loads_a_model") is not None:
        out["list_audio_devices_loads_no_model"] = {"ok": report["list_audio_devices"]["never_loads_a_model"]}
    if g("stop"):
        out["stop_latency_median_ms"] = verdict(report["stop"]["stop_latency_ms"]["median"], 100)
        out["rec_end_to_result_median_ms"] = verdict(report["stop"]["rec_end_to_result_ms"]["median"], 30)
    for model, lengths in (g("voice_query") or {}).get("models", {}).items():
        if not model.startswith("tiny"):
            continue
        warm = {n: v["warm"]["post_speech_ms"].get("median") for n, v in lengths.items()}
        for n, value in warm.items():
            out[f"post_speech_warm_{n}_median_ms"] = verdict(value, 250)
        if "2s" in warm and "20s" in warm and warm["2s"] is not None and warm["20s"] is not None:
            out["post_speech_flat_20s_minus_2s_ms"] = verdict(warm["20s"] - warm["2s"], 50)
    for condition in footprint.LISTENING:
        if (g("vad_cpu") or {}).get(condition):
            out[f"vad_cpu_{condition}_pct_of_core"] = verdict(report["vad_cpu"][condition]["vad_cpu_pct_of_core"], 1.0)
    rss = g("rss") or {}
    if "idle" in rss:
        out["rss_idle_mb"] = verdict(rss["idle"]["rss_mb"], 70)
    if "with_tiny_en_loaded" in rss:
        out["rss_with_tiny_en_mb"] = verdict(rss["with_tiny_en_loaded"]["rss_mb"], 250)
    return out


def print_summary(report: dict) -> None:
    m = report["machine"]
    print(f"\nmachine: {m['nproc']} x {m['cpu']}, load {m['loadavg_start']} -> {m.get('loadavg_end')}, "
          f"all-CPU busy during run {m.get('cpu_busy_during_run_pct')} %")  # fmt: skip
    s = report.get("startup")
    if s:
        print(f"startup  mcp-listen {fmt(s['mcp_listen'])}; bare lowlevel {fmt(s['bare_lowlevel'])}; "
              f"bare MCPServer {fmt(s['bare_mcpserver'])}; ratio {s['ratio_vs_lowlevel']} / {s['ratio_vs_mcpserver']}; "
              f"heavy imports: {s['imports']['heavy_modules_imported'] or 'none'}")  # fmt: skip
    d = report.get("list_audio_devices")
    if d and "later_calls" in d:
        print(f"list_audio_devices  first {d['first_call_ms']} ms, then {fmt(d['later_calls'])}; "
              f"get_status {fmt(d['get_status_rtt'])}; in-process rescan {d['in_process']}")  # fmt: skip
    st = report.get("stop")
    if st:
        print(f"stop latency {fmt(st['stop_latency_ms'])}; recording end -> result {fmt(st['rec_end_to_result_ms'])}; "
              f"'Recording finished' notice -> result {fmt(st['finished_notice_to_result_ms'])}")  # fmt: skip
    for model, lengths in (report.get("voice_query") or {}).get("models", {}).items():
        for name, kinds in lengths.items():
            for kind, v in kinds.items():
                print(
                    f"voice_query {model} {name:>3} {kind}: post-speech {fmt(v['post_speech_ms'])}, WER {v['wer'].get('median')}"
                )
    for name, w in (report.get("wer") or {}).items():
        print(f"WER {name}: incremental {w['incremental_wer'].get('median')} vs whole {w['whole_wer'].get('median')} "
              f"(whole transcription takes {fmt(w['whole_transcribe_ms'])})")  # fmt: skip
    if report.get("whole_after_stop"):
        print(f"load + whole transcription after the stop (30 s window): {report['whole_after_stop']}")
    if report.get("stop_floor"):
        f = report["stop_floor"]
        print(f"stop floor (offline replay): stop {fmt(f['stop_latency_ms'])}, Silero decay {fmt(f['silero_decay_ms'])}, "
              f"rounding {f['rounding_overshoot_ms']} ms")  # fmt: skip
    if report.get("vad_cpu"):
        cpu = {k: v["vad_cpu_pct_of_core"] for k, v in report["vad_cpu"].items() if isinstance(v, dict)}
        print(f"VAD CPU % of a core: {cpu}; Silero back to back {report.get('vad_per_window')}")
    if report.get("vad_gate"):
        g = report["vad_gate"]
        print(f"VAD gate: {g['windows_skipped_pct']} % of windows skipped, speech missed "
              f"{g['speech_missed_by_gate']}/{g['clips']}, stop moved {fmt(g['stop_moved_ms'])}")  # fmt: skip
    if report.get("rss"):
        print(f"RSS {report['rss']}")
    if report.get("venv_size"):
        print(f"venv {report['venv_size']}")
    print("targets:")
    for name, v in report["targets"].items():
        mark = "PASS" if v.get("ok") else "MISS" if v.get("ok") is False else "  - "
        figure = f": {v['value']} (target {v['target']})" if "target" in v else ""
        print(f"  {mark} {name}{figure}")


if __name__ == "__main__":
    raise SystemExit(main())
