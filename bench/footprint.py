"""Memory, CPU and size: RSS idle and after calls, VAD CPU, device listing, the size of a fresh venv."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rig import ROOT, Rig, TimedServer
from rig import audio_assets as A
from stats import summary

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


RESCAN = """import json, statistics, time
from mcp_listen.audio import devices
def timed(rescan):
    t = time.perf_counter()
    devices.list_inputs(rescan=rescan)
    return (time.perf_counter() - t) * 1000
devices.list_inputs()
print(json.dumps({str(rescan): statistics.median(timed(rescan) for _ in range(15)) for rescan in (True, False)}))"""


def rescan_cost(env: dict[str, str]) -> dict[str, float]:
    """In a child: devices.list_inputs with and without re-initialising PortAudio (hot-plugged devices)."""
    done = subprocess.run(
        [sys.executable, "-c", RESCAN], env=env, cwd=ROOT, capture_output=True, timeout=120, check=True
    )
    medians = json.loads(done.stdout)
    return {"rescan_median_ms": round(medians["True"], 2), "cached_median_ms": round(medians["False"], 2)}


def vad_cpu(rig: Rig, server: TimedServer, seconds: int = 10, conditions: tuple[str, ...] = LISTENING) -> dict:
    """Server CPU for `seconds` of listening with the VAD on, minus the same without it.

    For each condition a fixed capture_audio (no VAD) and a stop_on_silence one (ended by
    no_speech_timeout, or for speech by the same ceiling) hear the same clip; the difference is what the
    VAD costs per second of audio. A short capture first creates the Silero session, so it is not counted.
    """
    import clips

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
    import clips

    from mcp_listen.speech.vad import SileroVAD

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
