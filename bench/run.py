"""mcp-listen's own costs on the virtual microphone: spawn -> `initialize` reply beside the MCP SDK's bare
servers and what it imports before its first reply, device listing, stop latency, voice_query after the
silence window and its WER, VAD CPU, RSS and the size of a fresh venv. bench/README.md ("`run.py`")
explains each figure and what the bench needs.

    python bench/run.py [--runs 3] [--skip-venv] [--model PATH] [--json bench/results.json]
    python bench/run.py --quick      # every headline figure of docs/performance.md, fewer runs
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import clips
import endpoint_replay
from rig import ROOT, TEST_MODEL, Rig, TimedServer
from rig import audio_assets as A
from stats import CpuBusy, Run, cli, dig, save_report, summary, verdict

from mcp_listen.speech.vad import SileroVAD

BARE = {
    "bare_lowlevel": "import anyio\nfrom mcp.server.lowlevel import Server\nfrom mcp.server.stdio import stdio_server\n"
    "async def main():\n    server = Server('bare')\n    async with stdio_server() as (r, w):\n"
    "        await server.run(r, w, server.create_initialization_options())\nanyio.run(main)",
    "bare_mcpserver": "from mcp.server import MCPServer\nMCPServer('bare').run()",
}
"""The SDK's mcp.server.lowlevel.Server and its MCPServer (the former FastMCP), each with no tools."""
COMMANDS = {"mcp_listen": ["-m", "mcp_listen"], **{name: ["-c", code] for name, code in BARE.items()}}
HELLO = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}
"""initialize's params; nothing follows it (no `initialized` notice), so only startup's imports are counted."""
HEAVY = ("numpy", "onnxruntime", "sounddevice", "pywhispercpp", "_pywhispercpp", "ollama", "httpx", "soxr")
"""Must not be imported before the first request (httpx2, the SDK's own HTTP stack, is the SDK's)."""
MODEL_LIBS = ("onnxruntime", "whisper", "ggml")
"""Shared objects whose presence in the server would mean a model runtime was loaded."""
LISTENING = ("silence", "room_60db", "room_45db", "room_35db", "speech")
"""What the microphone hears while the VAD's cost is measured: digital silence; steady white noise at
-60, -45 and -35 dBFS (rooms: Silero is skipped at the floor of rooms under -40 dBFS and runs on every
window of a louder one); continuous speech."""
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
               ("--listening", ",".join(LISTENING), "what the microphone hears for VAD CPU"),
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
            section("startup", lambda: report.update(startup=startup(rig.env(), startups, rig.workdir)))
            section("session", lambda: run_session(rig, opts, report))
            section("voice_query", lambda: run_voice(rig, opts, report))
            section("offline", lambda: report.update(vad_per_window=vad_per_window(),
                                                     vad_gate=endpoint_replay.gate_replay(opts.silence_ms)))  # fmt: skip
            if not opts.skip_venv:
                section("venv", lambda: report.update(venv_size=venv_size(rig.workdir)))
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
        rss = {"idle": idle_rss(server)}
        report["list_audio_devices"] = list_devices(server, calls=10)
        rss["after_list_devices"] = idle_rss(server)
        report["vad_cpu"] = vad_cpu(rig, server, conditions=tuple(opts.listening.split(",")))
        rss["after_capture"] = idle_rss(server)
        report["rss"] = rss
        rig.start_monitor()
        stop = clips.stop_clips(opts.silence_ms)
        runs = [clips.capture_stop(rig, server, c, opts.silence_ms, f"stop-{r}-{c.name}")
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
                    call = voice_query(rig, server, utterances[name], opts.silence_ms, opts.model.name,
                                       f"vq-{name}-{r}-{kind}")  # fmt: skip
                    per[name][kind].append(call)
                rss.append(idle_rss(server))  # settled: freed memory is returned after the call
    report["voice_query"] = {"lengths": {n: {kind: {"post_speech_ms": summary(x["post_speech_ms"] for x in runs),
                                                    "wer": summary((x["wer"] for x in runs), digits=3), "runs": runs}
                                             for kind, runs in kinds.items()} for n, kinds in per.items()}}  # fmt: skip
    report["rss"]["with_tiny_en_loaded"] = {k: max(s[k] for s in rss) for k in ("rss_mb", "peak_mb")}


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


def voice_query(rig: Rig, server: TimedServer, clip: clips.Clip, silence_ms: int, model: str, token: str) -> dict:
    """One voice_query while `clip` plays: post-speech latency (end of the silence window to the
    result's arrival) and the transcript."""
    args = {"stop_on_silence": True, "silence_ms": silence_ms, "duration_ms": 30000, "whisper_model": model}
    run = rig.play_during(server, "voice_query", args, clip.path, token)
    data, clock = run["result"], rig.speech_end(clip, run["t_play"], run["t_reply"])
    t_fin = server.notice(token, "Recording finished")
    text = data.get("transcription") or ""
    return {"clip": clip.name, "post_speech_ms": (run["t_reply"] - clock["t_speech_end"]) * 1000 - silence_ms,
            "finished_notice_to_result_ms": (run["t_reply"] - t_fin) * 1000 if t_fin else None,
            "transcription": text, "wer": clips.wer(clip.text, text), "response_ok": bool(data.get("response"))}  # fmt: skip


def time_initialize(args: list[str], env: Mapping[str, str], stderr_path: Path | None = None) -> float:
    """Seconds from spawn to the initialize reply's arrival (the request written the moment the process exists)."""
    began = time.monotonic()
    with TimedServer(env, stderr_path=stderr_path, command=[sys.executable, *args]) as server:
        arrived, reply = server.reply(server.start("initialize", HELLO)[0])
    if "result" not in reply:
        raise RuntimeError(f"{args[:2]} did not answer initialize: {str(reply)[:200]}")
    return arrived - began


def startup(env: Mapping[str, str], runs: int, workdir: Path) -> dict:
    """Interleaved spawn timings after one unmeasured round (page cache, .pyc); the ratio of medians; and
    what mcp-listen imports before its first reply (import_check)."""
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for r in range(runs + 1):
        for name, args in COMMANDS.items():
            elapsed = time_initialize(args, env) * 1000
            if r:
                times[name].append(elapsed)
    out: dict = {name: summary(values) for name, values in times.items()}
    out["ratio_vs_lowlevel"] = round(out["mcp_listen"]["median"] / out["bare_lowlevel"]["median"], 3)
    out["ratio_vs_mcpserver"] = round(out["mcp_listen"]["median"] / out["bare_mcpserver"]["median"], 3)
    out["imports"] = import_check(env, workdir)
    return out


def import_check(env: Mapping[str, str], workdir: Path) -> dict:
    """What `python -X importtime -m mcp_listen` imports up to its first reply, beside the bare server."""
    found: dict[str, dict[str, int]] = {}
    for name in ("mcp_listen", "bare_lowlevel"):
        log = workdir / f"importtime-{name}.txt"
        time_initialize(["-X", "importtime", *COMMANDS[name]], env, stderr_path=log)
        found[name] = {}
        for line in log.read_text(errors="replace").splitlines():  # "import time: self | cumulative | name"
            parts = line.removeprefix("import time:").split("|")
            if line.startswith("import time:") and "cumulative" not in line and len(parts) == 3:
                found[name][parts[2].strip()] = int(parts[0])
    listen, bare = found["mcp_listen"], found["bare_lowlevel"]
    heavy = sorted(m for m in listen if m.split(".")[0] in HEAVY)
    extra = {m: us for m, us in listen.items() if m not in bare}
    top = sorted(extra.items(), key=lambda kv: -kv[1])[:12]
    return {"heavy_modules_imported": heavy, "ok": not heavy, "modules": len(listen), "modules_bare": len(bare),
            "extra_modules": len(extra), "extra_self_ms": round(sum(extra.values()) / 1000, 1),
            "top_extra_self_ms": {m: round(us / 1000, 1) for m, us in top}}  # fmt: skip


def idle_rss(server: TimedServer) -> dict[str, float]:
    """VmRSS and VmHWM 1 s after the last reply (the server hands freed memory back right after a call)."""
    time.sleep(1.0)
    stats = server.stats
    return {"rss_mb": round(stats["VmRSS"], 1), "peak_mb": round(stats["VmHWM"], 1)}


def list_devices(server: TimedServer, calls: int) -> dict[str, Any]:
    """Round trip of list_audio_devices (the first call imports sounddevice) next to get_status, and
    proof that listing loads no model: no model runtime mapped, no whisper model reported."""
    times = {name: [server.timed_call("tools/call", {"name": name, "arguments": {}})[0] * 1000 for _ in range(calls)]
             for name in ("list_audio_devices", "get_status")}  # fmt: skip
    maps = Path(f"/proc/{server.proc.pid}/maps").read_text().split()
    libs = sorted({Path(p).name for p in maps if ".so" in p and any(k in Path(p).name for k in MODEL_LIBS)})
    loaded = server.tool("get_status", {})["whisper_model_loaded"]
    return {"first_call_ms": round(times["list_audio_devices"][0], 1), "later_calls": summary(times["list_audio_devices"][1:]),
            "get_status_rtt": summary(times["get_status"]), "model_runtime_libraries_loaded": libs,
            "whisper_model_loaded": loaded, "never_loads_a_model": not libs and loaded is None}  # fmt: skip


def vad_cpu(rig: Rig, server: TimedServer, seconds: int = 10, conditions: tuple[str, ...] = LISTENING) -> dict:
    """Server CPU for `seconds` of a stop_on_silence capture minus a fixed one hearing the same clip: what
    the VAD costs per second of audio. A short capture first creates the Silero session (not counted)."""
    server.tool("capture_audio", {"stop_on_silence": True, "duration_ms": 1000})
    out: dict[str, Any] = {"tick_resolution_pct": round(100 / os.sysconf("SC_CLK_TCK") / seconds, 2)}
    for condition in conditions:
        clip = None if condition == "silence" else clips.utterance_clips(1000)["20s"].path
        if condition.startswith("room_"):
            clip = A.with_noise(A.silence((seconds + 3) * 1000), -int(condition[5:7]))
        cpu = {}
        for label, args in (("fixed", {}), ("vad", {"stop_on_silence": True})):
            args = {**args, "duration_ms": seconds * 1000}
            before = server.stats["cpu_s"]
            data = server.tool("capture_audio", args) if clip is None else \
                rig.play_during(server, "capture_audio", args, clip, f"cpu-{time.monotonic()}")["result"]  # fmt: skip
            cpu[label] = server.stats["cpu_s"] - before
            os.unlink(data["path"])
        assert condition == "silence" or data["stopped_by"] == "ceiling", f"{condition}: {data}"
        out[condition] = {"fixed_capture_cpu_pct": round(100 * cpu["fixed"] / seconds, 2),
                          "vad_capture_cpu_pct": round(100 * cpu["vad"] / seconds, 2),
                          "vad_cpu_pct_of_core": round(100 * (cpu["vad"] - cpu["fixed"]) / seconds, 2)}  # fmt: skip
    return out


def vad_per_window(windows: int = 2000) -> dict[str, Any]:
    """Silero in this process, back to back on speech (warm caches): time per 32 ms window."""
    samples, vad = A.read_wav(clips.utterance_clips(1000)["20s"].path), SileroVAD()
    n = min(windows, len(samples) // 512)
    t = time.process_time()
    for i in range(n):
        vad.probability(samples[i * 512 : (i + 1) * 512])
    per = (time.process_time() - t) / n
    return {"ms_per_window": round(per * 1000, 3), "pct_of_core": round(100 * per / 0.032, 2), "windows": n}


def venv_size(workdir: Path) -> dict[str, Any]:
    """pip install this checkout into a fresh venv (downloads from PyPI) and measure it with `du -sk`."""
    target, t = Path(tempfile.mkdtemp(prefix="venv-", dir=workdir)), time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(target)], check=True, timeout=300)
    base = _du(target)
    pip = [str(target / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(ROOT)]
    done = subprocess.run(pip, capture_output=True, text=True, timeout=1200, check=False)
    if done.returncode != 0:
        return {"error": done.stderr[-800:]}
    total, site = _du(target), next(target.glob("lib/python*/site-packages"))
    biggest = sorted(((_du(p), p.name) for p in site.iterdir() if p.is_dir()), reverse=True)[:8]
    shutil.rmtree(target, ignore_errors=True)
    return {"venv_mb": round(total / 1024, 1), "empty_venv_mb": round(base / 1024, 1),
            "added_by_install_mb": round((total - base) / 1024, 1), "install_s": round(time.monotonic() - t, 1),
            "largest_packages_mb": {name: round(kb / 1024, 1) for kb, name in biggest}}  # fmt: skip


def _du(path: Path) -> int:
    """Disk usage in KiB, as `du -sk` counts it."""
    return int(subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=True).stdout.split()[0])


if __name__ == "__main__":
    raise SystemExit(main())
