"""The doctor's audio checks: PortAudio loads, the microphone is there, it delivers sound, Silero runs.

Each calls the component the tools use (device listing, the recorder, the shared Silero
session), so a pass here means the tool's own code path works. The levels come from audio/levels.py,
the meter the endpointer uses.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import TYPE_CHECKING, Any

from mcp_listen.audio.levels import rms_and_peak_db
from mcp_listen.cli.doctor_report import FAIL, OK, WARN, Check
from mcp_listen.contract.limits import SAMPLE_RATE, WINDOW_SAMPLES
from mcp_listen.contract.results import MICROPHONE_ACCESS_HINT
from mcp_listen.errors import DeviceNotFound, ListenError, PortAudioMissing, command

if TYPE_CHECKING:
    from mcp_listen.audio.devices import InputDevice

log = logging.getLogger(__name__)

PROBE_MS = 300
"""Length of the test recording: long enough to see a level, short enough not to be noticed."""


def check_portaudio() -> Check:
    """The PortAudio library loads: without it no tool can list or open a microphone."""
    from mcp_listen.audio import devices

    try:
        sd = devices.sounddevice()
    except PortAudioMissing:
        return Check("portaudio", "PortAudio", FAIL, "The PortAudio library could not be loaded.", portaudio_remedy())
    return Check("portaudio", "PortAudio", OK, str(sd.get_portaudio_version()[1]))


def portaudio_remedy(platform: str | None = None) -> str:
    """How to install PortAudio on this platform (the wheels bundle it except on Linux)."""
    platform = platform or sys.platform
    if platform.startswith("linux"):
        return "sudo apt install libportaudio2 (Debian/Ubuntu), or sudo dnf install portaudio (Fedora)"
    if platform == "darwin":
        return "brew install portaudio, or reinstall mcp-listen (its sounddevice wheel bundles PortAudio)"
    return "reinstall mcp-listen (the sounddevice wheel bundles PortAudio on Windows)"


def check_microphone(device: int | str | None) -> tuple[Check, InputDevice | None]:
    """Input devices present, and the one the tools will use (the default, or `device`)."""
    from mcp_listen.audio import devices

    title = "Microphone"
    try:
        inputs = devices.list_inputs()
    except ListenError as exc:
        return Check(
            "microphone", title, FAIL, exc.message, "Restart the sound system or the machine, then retry."
        ), None
    listed = {"devices": [d.public() for d in inputs]}
    if not inputs:
        remedy = f"Connect a microphone and check the system's sound settings; {MICROPHONE_ACCESS_HINT}."
        return Check("microphone", title, FAIL, "No input device found.", remedy, listed), None
    try:
        chosen = devices.resolve(device)
    except DeviceNotFound as exc:
        remedy = (
            f"Set a default input in the system's sound settings, or pass device (an id from: {command('devices')})."
            if device is None
            else f"Use an id from: {command('devices')}"
        )
        return Check("microphone", title, FAIL, f"{_count(inputs)}, but: {exc.message}", remedy, listed), None
    which = "default" if device is None else "selected"
    detail = f"{_count(inputs)}; {which}: {chosen.name} (id {chosen.id})"
    return Check("microphone", title, OK, detail, data={**listed, "device": chosen.public()}), chosen


def _count(inputs: list[Any]) -> str:
    return f"{len(inputs)} input device{'s' if len(inputs) != 1 else ''}"


def check_audio(chosen: InputDevice, ms: int = PROBE_MS) -> Check:
    """A short recording through the tools' own recorder: the device opens and delivers samples."""
    from mcp_listen.audio.microphone import Recorder

    title = "Microphone audio"
    try:
        recording = Recorder().record(device_index=chosen.index, max_frames=ms * SAMPLE_RATE // 1000)
    except ListenError as exc:
        remedy = f"Close programs that hold the microphone, check it is not muted; {MICROPHONE_ACCESS_HINT}."
        return Check("audio", title, FAIL, f"Could not record from {chosen.name}: {exc.message}", remedy)
    rms, peak = rms_and_peak_db(recording.samples)
    data = {"ms": ms, "samples": int(len(recording.samples)), "level_dbfs": rms, "peak_dbfs": peak}
    if peak is None:
        remedy = f"Unmute it (a mute key or switch too), or {MICROPHONE_ACCESS_HINT}."
        detail = f"{ms} ms from {chosen.name}: digital silence (every sample is 0): muted, blocked or disconnected"
        return Check("audio", title, WARN, detail, remedy, data)
    detail = f"{ms} ms from {chosen.name}: level {rms:.1f} dBFS, peak {peak:.1f} dBFS"
    return Check("audio", title, OK, detail, data=data)


def check_vad() -> Check:
    """The bundled Silero model loads and runs one window, as stop-on-silence will."""
    title = "Silero VAD"
    started = time.monotonic()
    try:
        import numpy as np

        from mcp_listen.speech.vad import shared_vad

        vad = shared_vad()
        vad.reset()
        vad.probability(np.zeros(WINDOW_SAMPLES, dtype=np.int16))
        vad.reset()
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types; doctor reports, never crashes
        log.debug("VAD check failed", exc_info=True)
        remedy = (
            "Reinstall mcp-listen (pipx: pipx run --no-cache mcp-listen doctor; uvx: uvx --refresh mcp-listen doctor)."
        )
        return Check("vad", title, FAIL, f"{type(exc).__name__}: {exc}", remedy)
    return Check("vad", title, OK, f"bundled model runs (ready in {time.monotonic() - started:.2f} s)")
