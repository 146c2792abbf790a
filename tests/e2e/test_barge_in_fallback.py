"""Barge-in on (MCP_LISTEN_BARGE_IN=true here, as the default will be) where it cannot run, through the
real server: without the echo canceller, or without a microphone beside the speaker, converse and
speak_text fall back to speaking without listening, say so in `warning`, and doctor says so too; the
agent's voice never reaches the answer. A speak_text with wait false never listens and is not refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rpc import wire
from speaker_rig import FOX, recording_the_speaker, sound_devices, sound_span_ms

pytestmark = pytest.mark.anyio

HIDE_THE_CANCELLER = "import sys\nsys.modules['pywebrtc_audio'] = None  # as when the wheel is not installed\n"


def without_the_canceller(env: dict[str, str], folder: Path) -> dict[str, str]:
    """`env` for a server in which pywebrtc-audio cannot be found (a sitecustomize first on PYTHONPATH)."""
    shim = folder / "no-canceller"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(HIDE_THE_CANCELLER)
    path = env.get("PYTHONPATH")
    return {**env, "PYTHONPATH": str(shim) + (f":{path}" if path else ""), "MCP_LISTEN_BARGE_IN": "true"}


def test_without_the_echo_canceller_both_tools_speak_without_listening_and_say_so(speak_env, model_path, tmp_path):
    env = without_the_canceller(speak_env, tmp_path)
    with wire(env) as w:
        turn = w.call("converse", {"text": FOX, "whisper_model": str(model_path), "duration_ms": 1500}, timeout=120)
        spoken = w.call("speak_text", {"text": FOX}, timeout=60)
        background = w.call("speak_text", {"text": "Hi.", "wait": False}, timeout=60)
    assert not turn.get("isError"), turn
    data = turn["structuredContent"]
    assert "echo canceller" in data["warning"] and "listened after the speech" in data["warning"], data
    assert "played_ms" not in data["spoken"] and data["spoken"]["interrupted"] is False, data
    assert "fox" not in (data["transcription"] or "").lower(), data
    said = spoken["structuredContent"]
    assert "played without listening" in said["warning"] and said["interrupted"] is False, said
    assert said["duration_ms"] > 1000, said
    assert not background.get("isError") and "warning" not in background["structuredContent"], background


def test_doctor_says_barge_in_falls_back_without_the_echo_canceller(speak_env, tmp_path):
    env = without_the_canceller(speak_env, tmp_path)
    done = subprocess.run([sys.executable, "-m", "mcp_listen", "doctor", "--json"], env=env, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)  # fmt: skip
    checks = {check["id"]: check for check in json.loads(done.stdout)["checks"]}
    barge = checks["barge_in"]
    assert barge["status"] == "warn" and barge["data"] == {"default": True, "fallback": "half-duplex"}, barge
    assert "barge-in is on, but the echo canceller (pywebrtc-audio) is not installed" in barge["detail"], barge
    assert "mcp-listen[speak]" in barge["remedy"], barge


def test_speak_text_with_barge_in_and_no_microphone_plays_it_all_and_says_why(speak_env, vmic, tmp_path):
    """The default device plays into the rig's speaker but records from a source that does not exist."""
    devices = sound_devices(vmic, tmp_path, microphone="no_such_microphone")
    raw = tmp_path / "speaker.raw"
    with recording_the_speaker(vmic, raw), wire({**speak_env, **devices, "MCP_LISTEN_BARGE_IN": "true"}) as w:
        reply = w.call("speak_text", {"text": FOX}, timeout=60)
    assert not reply.get("isError"), reply
    data = reply["structuredContent"]
    assert data["interrupted"] is False and data["duration_ms"] > 1000, data
    assert "microphone" in data["warning"] and "played without listening" in data["warning"], data
    assert sound_span_ms(np.fromfile(raw, dtype=np.int16)) > 1000
