"""Memory, CPU and size: RSS idle / after a capture / with whisper loaded, VAD CPU, device listing, venv size."""

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

from rig import ROOT, TimedServer, loaded_libraries
from rig import audio_assets as A
from stats import summary

MODEL_LIBS = ("onnxruntime", "whisper", "ggml")
"""Shared objects whose presence in the server would mean a model runtime was loaded."""


def idle_rss(server: TimedServer) -> dict[str, float]:
    time.sleep(1.0)
    stats = server.stats
    return {"rss_mb": round(stats["VmRSS"], 1), "peak_mb": round(stats["VmHWM"], 1)}


def list_devices(server: TimedServer, calls: int) -> dict[str, Any]:
    """Round trip of list_audio_devices (first call imports sounddevice) next to get_status."""
    times = []
    count = None
    for _ in range(calls):
        dt, msg = server.timed_call("tools/call", {"name": "list_audio_devices", "arguments": {}})
        times.append(dt * 1000)
        count = len(msg["result"]["structuredContent"]["devices"])
    status_times = []
    for _ in range(calls):
        dt, msg = server.timed_call("tools/call", {"name": "get_status", "arguments": {}})
        status_times.append(dt * 1000)
    status = msg["result"]["structuredContent"]
    libs = sorted(lib for lib in loaded_libraries(server.proc.pid) if any(k in lib for k in MODEL_LIBS))
    return {
        "first_call_ms": round(times[0], 1),
        "later_calls": summary(times[1:]),
        "get_status_rtt": summary(status_times),
        "devices_listed": count,
        "model_runtime_libraries_loaded": libs,
        "whisper_model_loaded": status["whisper_model_loaded"],
        "never_loads_a_model": not libs and status["whisper_model_loaded"] is None,
    }


RESCAN_SCRIPT = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from mcp_listen.audio import devices
devices.list_inputs()
out = {}
for rescan in (True, False):
    ts = []
    for _ in range(int(sys.argv[2])):
        t = time.perf_counter(); devices.list_inputs(rescan=rescan); ts.append((time.perf_counter() - t) * 1000)
    out[str(rescan)] = sorted(ts)[len(ts) // 2]
print(json.dumps(out))
"""


def rescan_cost(env: dict[str, str], calls: int = 15) -> dict[str, float]:
    """In a separate process: devices.list_inputs with and without re-initialising PortAudio."""
    done = subprocess.run(
        [sys.executable, "-c", RESCAN_SCRIPT, str(ROOT), str(calls)],
        env=env, capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    medians = json.loads(done.stdout)
    return {
        "rescan_median_ms": round(medians["True"], 2),
        "cached_median_ms": round(medians["False"], 2),
    }


LISTENING = ("silence", "room_60db", "room_45db", "room_35db", "speech")
"""What the microphone hears while the VAD's cost is measured (see _condition_clip)."""


def vad_cpu(rig: Any, server: TimedServer, seconds: int = 10) -> dict[str, Any]:
    """Server CPU for `seconds` of listening with the VAD on, minus the same without it.

    For each condition, a fixed capture_audio (no VAD) and a stop_on_silence one (VAD on,
    ended by no_speech_timeout or, for speech, by the same length as ceiling) hear the same
    clip; the difference is what the VAD costs per second of audio. Conditions: digital
    silence; steady white noise at -60, -45 and -35 dBFS (rooms: Silero is skipped at the
    floor of rooms under -40 dBFS, and runs on every window of a louder one); continuous speech.
    A short stop_on_silence capture first creates the Silero session, so it is not counted.
    """
    server.tool("capture_audio", {"stop_on_silence": True, "duration_ms": 1000})
    out: dict[str, Any] = {}
    for condition in LISTENING:
        clip = _condition_clip(condition, seconds)
        cpu = {}
        for label, args in (
            ("fixed", {"duration_ms": seconds * 1000}),
            ("vad", {"stop_on_silence": True, "duration_ms": seconds * 1000}),
        ):
            cpu[label], data = _capture_cpu(rig, server, args, clip)
        if condition != "silence":
            assert data["stopped_by"] == "ceiling", f"{condition}: {data}"
        out[condition] = {
            "fixed_capture_cpu_pct": round(100 * cpu["fixed"] / seconds, 2),
            "vad_capture_cpu_pct": round(100 * cpu["vad"] / seconds, 2),
            "vad_cpu_pct_of_core": round(100 * (cpu["vad"] - cpu["fixed"]) / seconds, 2),
        }
    out["tick_resolution_pct"] = round(100 / os.sysconf("SC_CLK_TCK") / seconds, 2)
    return out


def _condition_clip(condition: str, seconds: int) -> Path | None:
    """The clip played into the microphone during the captures (None: nothing, digital silence)."""
    import clips

    length_ms = (seconds + 3) * 1000
    if condition.startswith("room_"):
        return A.with_noise(A.silence(length_ms), -int(condition[5:7]))
    if condition == "speech":
        return clips.utterance_clips(1000)["20s"].path
    return None


def _capture_cpu(rig: Any, server: TimedServer, args: dict[str, Any], clip: Path | None) -> tuple[float, dict]:
    """CPU seconds the server spent on one capture_audio while `clip` plays (None: nothing plays)."""
    from latency import _play_during

    before = server.stats["cpu_s"]
    if clip is None:
        data = server.tool("capture_audio", args, timeout=60)
    else:
        data = _play_during(rig, server, "capture_audio", args, clip, f"cpu-{time.monotonic()}")["result"]
    os.unlink(data["path"])
    return server.stats["cpu_s"] - before, data


def vad_per_window(windows: int = 2000) -> dict[str, Any]:
    """Silero in this process: time per 32 ms window on speech, as a share of one core."""
    import clips

    from mcp_listen.speech.vad import SileroVAD

    samples = A.read_wav(clips.utterance_clips(1000)["20s"].path)
    vad = SileroVAD()
    n = min(windows, len(samples) // 512)
    t = time.process_time()
    for i in range(n):
        vad.probability(samples[i * 512 : (i + 1) * 512])
    per = (time.process_time() - t) / n
    return {
        "ms_per_window": round(per * 1000, 3),
        "pct_of_core": round(100 * per / 0.032, 2),
        "windows": n,
    }


def venv_size(workdir: Path) -> dict[str, Any]:
    """pip install this checkout into a fresh venv and measure it (downloads from PyPI)."""
    target = Path(tempfile.mkdtemp(prefix="venv-", dir=workdir))
    t = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(target)], check=True, timeout=300)
    base = _du(target)
    pip = [
        str(target / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ]
    done = subprocess.run([*pip, str(ROOT)], capture_output=True, text=True, timeout=1200, check=False)
    if done.returncode != 0:
        return {"error": done.stderr[-800:]}
    total = _du(target)
    site = next(target.glob("lib/python*/site-packages"))
    biggest = sorted(((_du(p), p.name) for p in site.iterdir() if p.is_dir()), reverse=True)[:8]
    shutil.rmtree(target, ignore_errors=True)
    return {
        "venv_mb": round(total / 1024, 1),
        "empty_venv_mb": round(base / 1024, 1),
        "added_by_install_mb": round((total - base) / 1024, 1),
        "largest_packages_mb": {name: round(kb / 1024, 1) for kb, name in biggest},
        "install_s": round(time.monotonic() - t, 1),
    }


def _du(path: Path) -> int:
    """Disk usage in KiB, as `du -sk` counts it."""
    out = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])
