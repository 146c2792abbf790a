"""What the server costs: spawn -> `initialize` reply beside the MCP SDK's bare servers with no tools
(spawned in turn, interleaved, so a change in load hits all alike) and what it imports before its first
reply; device listing; RSS idle and after calls; VAD CPU; the size of a fresh venv."""

from __future__ import annotations

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
from rig import ROOT, Rig, TimedServer
from rig import audio_assets as A
from stats import summary

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


MODEL_LIBS = ("onnxruntime", "whisper", "ggml")
"""Shared objects whose presence in the server would mean a model runtime was loaded."""
LISTENING = ("silence", "room_60db", "room_45db", "room_35db", "speech")
"""What the microphone hears while the VAD's cost is measured: digital silence; steady white noise at
-60, -45 and -35 dBFS (rooms: Silero is skipped at the floor of rooms under -40 dBFS and runs on every
window of a louder one); continuous speech."""


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
