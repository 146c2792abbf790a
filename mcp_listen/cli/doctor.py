"""`mcp-listen doctor`: check everything the tools need, in order, and say how to fix what fails.

A composition module like engine/engine.py: it calls the same components the tools use (device
listing, the recorder, the Silero session, whisper model resolution and validation, the Ollama
probe), so a check that passes here means the tool's own code path works. Each check yields a
Check with a status (ok, warn, fail, skip), one line of detail and, when it failed, the exact
remedy. Nothing here prints: `format_report` returns text and the CLI prints it.

This module runs the checks in order and owns the configuration, whisper model and Ollama
checks; the audio checks are in cli/doctor_audio.py, the speech-out ones in cli/doctor_speak.py,
the Check record, readiness and the text in cli/doctor_report.py (their public names are re-exported here).
"""

from __future__ import annotations

import shlex
from dataclasses import asdict
from typing import Any

from mcp_listen.cli.doctor_audio import (  # noqa: F401 - re-exported: the audio checks are part of doctor
    PROBE_MS,
    check_audio,
    check_microphone,
    check_portaudio,
    check_vad,
    portaudio_remedy,
)
from mcp_listen.cli.doctor_report import (  # noqa: F401 - re-exported: callers read doctor.NEEDS, doctor.Check
    ASCII_MARKS,
    FAIL,
    MARKS,
    NEEDS,
    OK,
    SKIP,
    WARN,
    Check,
    format_report,
    report,
    skipped,
)
from mcp_listen.cli.doctor_speak import check_speaking
from mcp_listen.config import Settings
from mcp_listen.config.urls import redact_url
from mcp_listen.errors import TranscriptionError, command
from mcp_listen.whisper.names import SUGGESTED_MODEL, resolve_model, short_name
from mcp_listen.whisper.threads import threads_now


def run(
    settings: Settings,
    *,
    device: int | str | None = None,
    whisper_model: str | None = None,
    model: str | None = None,
    voice: str | None = None,
    output_device: int | str | None = None,
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
        checks.append(skipped("microphone", "Microphone", "needs PortAudio"))
    checks.append(
        check_audio(chosen) if chosen is not None else skipped("audio", "Microphone audio", "needs a microphone")
    )
    checks.append(check_vad())
    checks.append(check_whisper_model(settings, whisper_model))
    checks.extend(check_ollama(settings, model))
    checks.extend(check_speaking(settings, voice=voice, device=output_device, portaudio=portaudio.status == OK))
    return report(checks)


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


# ---------------------------------------------------------------------- models


def check_whisper_model(settings: Settings, name: str | None) -> Check:
    """The model transcribe_voice and voice_query would load: found, and a whole whisper.cpp file."""
    from mcp_listen.whisper.admission import validate_model_file

    wanted = name or settings.defaults.whisper_model
    title = "Whisper model"
    dirs = [str(d) for d in settings.model_search_dirs]
    try:
        path = resolve_model(wanted, settings.model_search_dirs)
        validate_model_file(path)
    except TranscriptionError as exc:
        failed = {"wanted": wanted, "code": exc.code, "search_dirs": dirs}
        return Check("whisper_model", title, FAIL, exc.message, _whisper_remedy(settings, wanted, exc.code), failed)
    size = path.stat().st_size
    threads = threads_now(settings.whisper_threads)
    data: dict[str, Any] = {
        "wanted": wanted,
        "path": str(path),
        "size_bytes": size,
        "search_dirs": dirs,
        "threads": threads.threads,
        "threads_reason": threads.reason,
    }
    plural = "s" if threads.threads != 1 else ""
    detail = f"{path} ({size / 1e6:.0f} MB); {threads.threads} thread{plural} now ({threads.reason})"
    return Check("whisper_model", title, OK, detail, data=data)


def _whisper_remedy(settings: Settings, wanted: str, code: str) -> str:
    from mcp_listen.whisper import store as model_store

    short = short_name(wanted)
    if short in model_store.STANDARD_MODELS:
        remedy = command("models", "pull", short)
    else:
        pull = command("models", "pull", SUGGESTED_MODEL)
        remedy = f"put ggml-{short}.bin into {settings.model_search_dirs[0]}, or: {pull}"
    if code == "model_invalid":
        remedy = f"the file is damaged or not a whisper.cpp model; replace it: {remedy}"
    others = [m.name for m in model_store.list_models(settings) if m.name != short]
    if others:
        remedy += f" (or use a model you have: whisper_model / --whisper-model {others[0]}; found: {', '.join(others)})"
    return remedy


def check_ollama(settings: Settings, model: str | None) -> list[Check]:
    """Two checks: the daemon answers at the configured host, and the model is pulled."""
    from mcp_listen.ollama import client as llm

    wanted = model or settings.defaults.model
    host = redact_url(settings.ollama_host)  # OLLAMA_HOST may carry user:password@
    probe = llm.probe(settings.ollama_host, wanted)  # bounded by llm.PROBE_TIMEOUT_S
    data = {"host": host, "version": probe["version"]}
    if not probe["reachable"]:
        remedy = (
            "Start it: ollama serve (install it from https://ollama.com/download). If it runs elsewhere, "
            "set OLLAMA_HOST for the MCP server."
        )
        detail = probe["error"] or f"No answer from Ollama at {host}."
        return [
            Check("ollama", "Ollama", FAIL, detail, remedy, data),
            skipped("ollama_model", "Ollama model", "needs Ollama"),
        ]
    daemon = Check("ollama", "Ollama", OK, f"version {probe['version']} at {host}", data=data)
    model_data = {"model": wanted}
    if probe["model_available"]:
        return [daemon, Check("ollama_model", "Ollama model", OK, f"{wanted} is pulled", data=model_data)]
    if probe["model_available"] is False:
        detail = f"{wanted} is not pulled."
        return [
            daemon,
            Check("ollama_model", "Ollama model", FAIL, detail, f"ollama pull {shlex.quote(wanted)}", model_data),
        ]
    detail = probe["error"] or "Ollama did not list its models."
    return [
        daemon,
        Check("ollama_model", "Ollama model", FAIL, detail, "Check the Ollama server log, then retry.", model_data),
    ]
