"""`doctor`'s speech-out checks: the `speak` extra, the voice and the speaker, each with its fix.

They call what speak_text calls (the voice search and file checks, Piper's own load, the output
device resolution) so a pass here means the tool's path works. Nothing is played: the speaker is
checked with PortAudio's `check_output_settings`, which opens no stream. A missing extra is a
warning, not a failure: the listening tools need none of it.
"""

from __future__ import annotations

import logging
from typing import Any

from mcp_listen.cli.doctor_report import FAIL, OK, WARN, Check, skipped
from mcp_listen.config import Settings
from mcp_listen.errors import ListenError, command
from mcp_listen.voice.names import parse_name

log = logging.getLogger(__name__)

INSTALL_SPEAK = "pip install 'mcp-listen[speak]' (or pipx install 'mcp-listen[speak]'); Piper is GPL-3.0-or-later"


def check_speaking(settings: Settings, *, voice: str | None, device: int | str | None, portaudio: bool) -> list[Check]:
    """The extra, then the voice (needs the extra), then the speaker (needs PortAudio)."""
    extra = check_speak_extra()
    checks = [extra]
    info = None
    if extra.status == OK:
        voice_check, info = check_voice(settings, voice or settings.defaults.voice)
        checks.append(voice_check)
    else:
        checks.append(skipped("voice", "Voice", "needs the speak extra"))
    rate = info.sample_rate if info is not None else None
    checks.append(check_speaker(device, rate) if portaudio else skipped("speaker", "Speaker", "needs PortAudio"))
    checks.append(
        check_barge_in(settings) if extra.status == OK else skipped("barge_in", BARGE_IN, "needs the speak extra")
    )
    checks.append(check_one_speaker())
    return checks


def check_one_speaker() -> Check:
    """Whether mcp-listen servers on one sound server can take turns: the lock's folder and file are the
    user's own (audio/owner.py). Looked at only: nothing is created or changed. A warning, not a failure:
    each server still works alone."""
    from mcp_listen.audio import owner

    title = "One speaker"
    path = owner.lock_path()
    unsafe = owner.problem()
    if unsafe is not None:
        detail = f"{unsafe.path} {unsafe.what}: servers of other clients may speak at once, or hear one another"
        return Check("one_speaker", title, WARN, detail, unsafe.remedy, {"path": str(unsafe.path)})
    detail = f"servers of other clients take turns on the speaker ({path})"
    return Check("one_speaker", title, OK, detail, data={"path": str(path)})


BARGE_IN = "Barge-in (echo canceller)"


def check_barge_in(settings: Settings) -> Check:
    """The echo canceller loads and cleans a window, as converse and speak_text with barge_in use it;
    without it they fall back to speaking without listening (a warning: nothing else needs it)."""
    from mcp_listen.duplex import echo

    on = settings.defaults.barge_in
    state = "on" if on else "off"
    switch = f"MCP_LISTEN_BARGE_IN={str(not on).lower()} turns it {'off' if on else 'on'}"
    data = {"default": on}
    if not echo.available():
        detail = f"barge-in is {state}, but the echo canceller (pywebrtc-audio) is not installed: {FALLBACK}"
        return Check("barge_in", BARGE_IN, WARN, detail, INSTALL_SPEAK, {**data, "fallback": "half-duplex"})
    try:
        import numpy as np

        echo.Canceller().clean(np.zeros(512, np.int16), np.zeros(512, np.int16))
    except Exception as exc:  # noqa: BLE001 - a broken native library: say so, the tools fall back
        detail = f"barge-in is {state}, but the echo canceller failed to run ({type(exc).__name__}): {FALLBACK}"
        return Check("barge_in", BARGE_IN, WARN, detail, INSTALL_SPEAK, {**data, "fallback": "half-duplex"})
    detail = f"WebRTC AEC3 ready; barge-in {state} ({switch}). {OTHER_TALKERS}"
    return Check("barge_in", BARGE_IN, OK, detail, data=data)


OTHER_TALKERS = (
    "Claps, music and the agent's own echo mostly only pause the speech (docs/performance.md says how often); another "
    "person talking, or a TV, counts as the user and stops it."
)


FALLBACK = "converse listens only after it speaks and speak_text plays without listening, each saying so in its warning"


def check_speak_extra() -> Check:
    """piper-tts importable (found, not imported: the voice check imports it)."""
    from importlib.metadata import PackageNotFoundError, version

    from mcp_listen.voice.synth import available

    title = "Speech output"
    if not available():
        detail = "Piper is not installed: speak_text and converse are not served (the listening tools are)"
        return Check("speak", title, WARN, detail, INSTALL_SPEAK)
    try:
        found = version("piper-tts")
    except PackageNotFoundError:
        found = "installed"
    return Check("speak", title, OK, f"piper-tts {found}", data={"piper_tts": found})


def check_voice(settings: Settings, voice: str) -> tuple[Check, Any]:
    """The voice found, its files checked as hostile, and loaded by Piper as speak_text will."""
    from mcp_listen.engine.parts import Piper

    title = "Voice"
    voices = Piper(settings)  # speak_text's own: the same search, file checks and load
    try:
        info = voices.find(voice)
        voices.prepare(info)
    except ListenError as exc:
        return Check("voice", title, FAIL, exc.message, _voice_remedy(voice, exc.code), {"voice": voice}), None
    detail = f"{info.name} ({info.language}, {info.sample_rate} Hz, {info.size_bytes / 1e6:.0f} MB) at {info.path}"
    if voice == settings.defaults.voice:  # the default: another may stand in for it, as when speaking
        from mcp_listen.voice.store import default_voice

        note = default_voice(settings).note
        detail += f". {note}" if note else ""
    data = {"voice": info.name, "path": str(info.path), "sample_rate": info.sample_rate}
    return Check("voice", title, OK, detail, data=data), info


def _voice_remedy(voice: str, code: str) -> str:
    pull = command("voices", "pull", voice) if parse_name(voice) is not None else None
    if code == "voice_not_found":
        return pull or f"Give a voice name (see: {command('voices')}) or the path of a NAME.onnx file."
    if code == "piper_missing":
        return INSTALL_SPEAK
    again = f"Pull it again ({pull})" if pull else "Replace the file"
    return f"{again}, or choose another voice (see: {command('voices')})."


def check_speaker(device: int | str | None, voice_rate: int | None) -> Check:
    """The output device the tools will use, and whether it takes mono 16-bit audio at the voice's
    rate (else at its own, which speak_text resamples to)."""
    from mcp_listen.audio import devices

    title = "Speaker"
    try:
        chosen = devices.resolve_output(device)
    except ListenError as exc:
        remedy = f"Connect a speaker or headphones, or pass an output id from: {command('devices', '--kind', 'output')}"
        return Check("speaker", title, FAIL, exc.message, remedy)
    which = "default" if device is None else "selected"
    data = {"device": chosen.public()}
    problem = _output_problem(chosen.index, voice_rate or int(chosen.default_samplerate), chosen.default_samplerate)
    if problem is not None:
        remedy = f"Choose another output (see: {command('devices', '--kind', 'output')}), or check the sound settings."
        return Check("speaker", title, FAIL, f"{chosen.name} (id {chosen.id}): {problem}", remedy, data)
    return Check("speaker", title, OK, f"{which}: {chosen.name} (id {chosen.id})", data=data)


def _output_problem(index: int, rate: int, own_rate: float) -> str | None:
    """None when PortAudio accepts mono int16 at `rate` or, failing that, at the device's own rate."""
    import sounddevice as sd

    last: Exception | None = None
    for candidate in dict.fromkeys((rate, int(own_rate))):
        try:
            sd.check_output_settings(device=index, samplerate=candidate, channels=1, dtype="int16")
            return None
        except Exception as exc:  # noqa: BLE001 - PortAudio's errors are ValueError or PortAudioError
            log.debug("output settings refused at %d Hz: %s", candidate, exc)
            last = exc
    return f"PortAudio refuses mono 16-bit output ({last})"
