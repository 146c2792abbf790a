"""`mcp-listen doctor`: check everything voice_query needs, in order, and say how to fix what fails.

A composition module like pipeline.py: it calls the same components the tools use (device
listing, the recorder, the Silero session, whisper model resolution and validation, the Ollama
probe), so a check that passes here means the tool's own code path works. Each check yields a
Check with a status (ok, warn, fail, skip), one line of detail and, when it failed, the exact
remedy. Nothing here prints: `format_report` returns text and the CLI prints it.
"""

from __future__ import annotations

import logging
import math
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp_listen.config import Settings, redact_url
from mcp_listen.contracts import SAMPLE_RATE, WINDOW_SAMPLES
from mcp_listen.errors import DeviceNotFound, ListenError, PortAudioMissing, TranscriptionError, command

if TYPE_CHECKING:
    import numpy as np

    from mcp_listen.devices import InputDevice

log = logging.getLogger(__name__)

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"
PROBE_MS = 300
OLLAMA_TIMEOUT_S = 3.0

NEEDS: dict[str, tuple[str, ...]] = {
    "list_audio_devices": ("config", "portaudio"),
    "capture_audio": ("config", "portaudio", "microphone", "audio"),
    "transcribe_voice": ("config", "portaudio", "microphone", "audio", "vad", "whisper_model"),
    "voice_query": ("config", "portaudio", "microphone", "audio", "vad", "whisper_model", "ollama", "ollama_model"),
}
"""Which checks each tool depends on (with its default arguments); warnings do not block."""

PERMISSION_HINT = (
    "check microphone access (macOS: System Settings > Privacy & Security > Microphone; "
    "Windows: Settings > Privacy & security > Microphone)"
)


@dataclass
class Check:
    id: str
    title: str
    status: str
    detail: str
    remedy: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def public(self) -> dict[str, Any]:
        return asdict(self)


def run(
    settings: Settings,
    *,
    device: int | str | None = None,
    whisper_model: str | None = None,
    model: str | None = None,
) -> dict[str, Any]:
    """Run every check and return the report: checks in order, tool readiness, overall `ok`."""
    checks: list[Check] = [check_config(settings)]
    portaudio = check_portaudio()
    checks.append(portaudio)
    chosen = None
    if portaudio.status == OK:
        microphone, chosen = check_microphone(device)
        checks.append(microphone)
    else:
        checks.append(_skipped("microphone", "Microphone", "needs PortAudio"))
    checks.append(check_audio(chosen) if chosen is not None else _skipped("audio", "Microphone audio", "needs a microphone"))
    checks.append(check_vad())
    checks.append(check_whisper_model(settings, whisper_model))
    checks.extend(check_ollama(settings, model))
    return report(checks)


def report(checks: list[Check]) -> dict[str, Any]:
    status = {c.id: c.status for c in checks}
    ready = {tool: all(status.get(need) in (OK, WARN) for need in needs) for tool, needs in NEEDS.items()}
    return {"ok": ready["voice_query"], "ready": ready, "checks": [c.public() for c in checks]}


def _skipped(check_id: str, title: str, why: str) -> Check:
    return Check(check_id, title, SKIP, f"not checked: {why}")


def check_config(settings: Settings) -> Check:
    """The environment is valid; the detail states the defaults the tools will use."""
    d = settings.defaults
    data = {"defaults": asdict(d), "problems": list(settings.problems)}
    detail = (
        f"whisper model {d.whisper_model}, language {d.language}, Ollama model {d.model}, "
        f"silence {d.silence_ms} ms, system prompt of {len(d.prompt)} characters"
    )
    if settings.problems:
        remedy = "Fix the variable in the MCP client's config (the server's env), then restart the server."
        return Check("config", "Configuration", FAIL, " ".join(settings.problems), remedy, data)
    return Check("config", "Configuration", OK, detail, data=data)


# ---------------------------------------------------------------------- audio


def check_portaudio() -> Check:
    from mcp_listen import devices

    try:
        sd = devices.sounddevice()
    except PortAudioMissing:
        return Check("portaudio", "PortAudio", FAIL, "The PortAudio library could not be loaded.", portaudio_remedy())
    return Check("portaudio", "PortAudio", OK, str(sd.get_portaudio_version()[1]))


def portaudio_remedy(platform: str | None = None) -> str:
    platform = platform or sys.platform
    if platform.startswith("linux"):
        return "sudo apt install libportaudio2 (Debian/Ubuntu), or sudo dnf install portaudio (Fedora)"
    if platform == "darwin":
        return "brew install portaudio, or reinstall mcp-listen (its sounddevice wheel bundles PortAudio)"
    return "reinstall mcp-listen (the sounddevice wheel bundles PortAudio on Windows)"


def check_microphone(device: int | str | None) -> tuple[Check, InputDevice | None]:
    """Input devices present, and the one the tools will use (the default, or `device`)."""
    from mcp_listen import devices

    title = "Microphone"
    try:
        inputs = devices.list_inputs()
    except ListenError as exc:
        return Check("microphone", title, FAIL, exc.message, "Restart the sound system or the machine, then retry."), None
    listed = {"devices": [d.public() for d in inputs]}
    if not inputs:
        remedy = f"Connect a microphone and check the system's sound settings; {PERMISSION_HINT}."
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
    from mcp_listen.recorder import Recorder

    title = "Microphone audio"
    try:
        recording = Recorder().record(device_index=chosen.index, max_frames=ms * SAMPLE_RATE // 1000)
    except ListenError as exc:
        remedy = f"Close programs that hold the microphone, check it is not muted; {PERMISSION_HINT}."
        return Check("audio", title, FAIL, f"Could not record from {chosen.name}: {exc.message}", remedy)
    rms, peak = level_dbfs(recording.samples)
    data = {"ms": ms, "samples": int(len(recording.samples)), "level_dbfs": rms, "peak_dbfs": peak}
    if peak is None:
        remedy = f"If you expected sound: unmute it or raise its input level; {PERMISSION_HINT}."
        return Check("audio", title, WARN, f"{ms} ms from {chosen.name}: digital silence (every sample is 0).", remedy, data)
    detail = f"{ms} ms from {chosen.name}: level {rms:.1f} dBFS, peak {peak:.1f} dBFS"
    return Check("audio", title, OK, detail, data=data)


def level_dbfs(samples: np.ndarray) -> tuple[float | None, float | None]:
    """RMS and peak level of int16 samples in dBFS (floored at -120), or (None, None) for all zeros."""
    import numpy as np

    x = np.asarray(samples, dtype=np.float64) / 32768.0
    if x.size == 0 or not np.any(x):
        return None, None
    rms = math.sqrt(float(np.mean(x * x)))
    peak = float(np.max(np.abs(x)))
    return _db(rms), _db(peak)


def _db(value: float) -> float:
    return round(max(-120.0, 20 * math.log10(value)), 1)


def check_vad() -> Check:
    """The bundled Silero model loads and runs one window, as stop-on-silence will."""
    title = "Silero VAD"
    started = time.monotonic()
    try:
        import numpy as np

        from mcp_listen.vad import shared_vad

        vad = shared_vad()
        vad.reset()
        vad.probability(np.zeros(WINDOW_SAMPLES, dtype=np.int16))
        vad.reset()
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types; doctor reports, never crashes
        log.debug("VAD check failed", exc_info=True)
        remedy = "Reinstall mcp-listen (pipx: pipx run --no-cache mcp-listen doctor; uvx: uvx --refresh mcp-listen doctor)."
        return Check("vad", title, FAIL, f"{type(exc).__name__}: {exc}", remedy)
    return Check("vad", title, OK, f"bundled model runs (ready in {time.monotonic() - started:.2f} s)")


# ---------------------------------------------------------------------- models


def check_whisper_model(settings: Settings, name: str | None) -> Check:
    """The model transcribe_voice and voice_query would load: found, and a whole whisper.cpp file."""
    from mcp_listen.model_check import validate_model_file
    from mcp_listen.model_names import resolve_model

    wanted = name or settings.defaults.whisper_model
    title = "Whisper model"
    dirs = [str(d) for d in settings.model_search_dirs]
    try:
        path = resolve_model(wanted, settings.model_search_dirs)
        validate_model_file(path)
    except TranscriptionError as exc:
        data = {"wanted": wanted, "code": exc.code, "search_dirs": dirs}
        return Check("whisper_model", title, FAIL, exc.message, _whisper_remedy(settings, wanted, exc.code), data)
    size = path.stat().st_size
    data = {"wanted": wanted, "path": str(path), "size_bytes": size, "search_dirs": dirs}
    return Check("whisper_model", title, OK, f"{path} ({size / 1e6:.0f} MB)", data=data)


def short_model_name(name: str) -> str:
    """`/x/ggml-base.en.bin`, `ggml-base.en.bin` or `base.en` -> `base.en`."""
    base = Path(name).name
    base = base[:-4] if base.endswith(".bin") else base
    return base[5:] if base.startswith("ggml-") else base


def _whisper_remedy(settings: Settings, wanted: str, code: str) -> str:
    from mcp_listen import model_store

    short = short_model_name(wanted)
    if short in model_store.STANDARD_MODELS:
        remedy = command("models", "pull", short)
    else:
        remedy = f"put ggml-{short}.bin into {settings.model_search_dirs[0]}, or: {command('models', 'pull', 'base.en')}"
    if code == "model_invalid":
        remedy = f"the file is damaged or not a whisper.cpp model; replace it: {remedy}"
    others = [m.name for m in model_store.list_models(settings) if m.name != short]
    if others:
        remedy += f" (or use a model you have: whisper_model / --whisper-model {others[0]}; found: {', '.join(others)})"
    return remedy


def check_ollama(settings: Settings, model: str | None) -> list[Check]:
    """Two checks: the daemon answers at the configured host, and the model is pulled."""
    from mcp_listen import llm

    wanted = model or settings.defaults.model
    host = redact_url(settings.ollama_host)  # OLLAMA_HOST may carry user:password@
    probe = llm.probe(settings.ollama_host, wanted, timeout_s=OLLAMA_TIMEOUT_S)
    data = {"host": host, "version": probe["version"]}
    if not probe["reachable"]:
        remedy = (
            "Start it: ollama serve (install it from https://ollama.com/download). If it runs elsewhere, "
            "set OLLAMA_HOST for the MCP server."
        )
        detail = probe["error"] or f"No answer from Ollama at {host}."
        return [
            Check("ollama", "Ollama", FAIL, detail, remedy, data),
            _skipped("ollama_model", "Ollama model", "needs Ollama"),
        ]
    daemon = Check("ollama", "Ollama", OK, f"version {probe['version']} at {host}", data=data)
    model_data = {"model": wanted}
    if probe["model_available"]:
        return [daemon, Check("ollama_model", "Ollama model", OK, f"{wanted} is pulled", data=model_data)]
    if probe["model_available"] is False:
        detail = f"{wanted} is not pulled."
        return [daemon, Check("ollama_model", "Ollama model", FAIL, detail, f"ollama pull {shlex.quote(wanted)}", model_data)]
    detail = probe["error"] or "Ollama did not list its models."
    return [daemon, Check("ollama_model", "Ollama model", FAIL, detail, "Check the Ollama server log, then retry.", model_data)]


# ---------------------------------------------------------------------- text


MARKS = {OK: "✓", FAIL: "✗", WARN: "!", SKIP: "-"}
ASCII_MARKS = {OK: "ok", FAIL: "XX", WARN: "!!", SKIP: "--"}


def format_report(result: dict[str, Any], *, unicode: bool = True, version: str | None = None) -> str:
    """The report for a person: one line per check, the remedy under each failure, then readiness."""
    marks = MARKS if unicode else ASCII_MARKS
    arrow = "→" if unicode else "->"
    width = max(len(c["title"]) for c in result["checks"]) + 2
    lines = [f"mcp-listen {version} doctor" if version else "mcp-listen doctor", ""]
    for c in result["checks"]:
        lines.append(f"{marks[c['status']]} {c['title']:<{width}}{c['detail']}")
        if c["remedy"] and c["status"] in (FAIL, WARN):
            lines.append(f"  {'':<{width}}{arrow} {c['remedy']}")
    ready = [tool for tool, ok in result["ready"].items() if ok]
    missing = [tool for tool, ok in result["ready"].items() if not ok]
    lines.append("")
    lines.append("Ready: " + (", ".join(ready) or "none") + ".")
    if missing:
        lines.append("Not ready: " + ", ".join(missing) + f" (fix the {marks[FAIL]} lines above).")
    else:
        lines.append("Everything voice_query needs is in place.")
    return "\n".join(lines)
