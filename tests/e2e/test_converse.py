"""converse through the real server: a real Piper voice says the text into the virtual speaker, whose
sound reaches the server's own microphone at full level (speaker_rig.py: the worst echo), then the
user's answer is played into the microphone and must come back as the transcription — without a
word of what the agent said."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest
from rpc import error_of, mcp_client, wire
from speaker_rig import FOX, LONG, VOICE, recording_the_speaker, sound_span_ms
from speech_checks import heard_lighthouse, speech_clip

from mcp_listen.contract.limits import BARGE_IN_BY_DEFAULT

pytestmark = pytest.mark.anyio

ASKED = "Tell me which colour you like best. Purple, orange or yellow?"
ASKED_WORDS = ("purple", "orange", "yellow", "colour", "color")


def _agent_words_in(text: str | None) -> list[str]:
    heard = (text or "").lower()
    return [word for word in ASKED_WORDS if word in heard]


def test_the_answer_is_heard_and_the_agent_never_hears_itself(speak_env, vmic, model_path):
    """While it speaks, the tool is `speaking` and the microphone `busy`; once "Listening" is reported
    stop_speaking has nothing to stop (stopped false), the user answers at once, and the transcription is
    their words alone."""
    answer = speech_clip()
    args = {"text": ASKED, "whisper_model": str(model_path), "silence_ms": 800}
    with wire(speak_env) as w:
        request = w.start("converse", args, progressToken="turn")
        w.wait_progress("turn", "Speaking on", timeout=60)
        w.until(lambda: w.status().get("speaking"), 30, "converse never started speaking")
        status = w.status()
        refused = w.call("capture_audio", {"duration_ms": 300})
        w.wait_progress("turn", "Listening on", timeout=60)
        listening = w.status()
        idle = w.call("stop_speaking", {})["structuredContent"]  # the speech is over: nothing to stop
        vmic.play(answer)
        reply = w.wait(request["id"], timeout=120)
    assert status["speaking"] is True and status["recording"] is False and status["tool"] == "converse", status
    assert error_of(refused)["error"]["code"] == "busy" and "converse is playing" in refused["content"][0]["text"]
    assert listening["recording"] is True and "speaking" not in listening, listening
    assert idle == {"stopped": False, "played_ms": None}, idle
    result = reply["result"]
    assert not result.get("isError"), result
    data = result["structuredContent"]
    assert heard_lighthouse(data["transcription"]), data
    assert _agent_words_in(data["transcription"]) == [], data
    assert (data["stopped_by"], data["language"]) == ("silence", "en"), data
    assert data["end_reason"] in ("words+voice", "words", "voice", "max_pause"), data  # smart by default
    spoken = data["spoken"]
    barge_in = {"played_ms"} if BARGE_IN_BY_DEFAULT else set()  # with barge-in on: how much the user heard
    assert set(spoken) == {"voice", "duration_ms", "first_audio_ms", "interrupted"} | barge_in, spoken
    assert spoken["voice"] == VOICE and spoken["interrupted"] is False and spoken["duration_ms"] > 1500, spoken
    assert isinstance(spoken["first_audio_ms"], int) and spoken["first_audio_ms"] >= 0


def test_its_own_speech_at_full_level_is_no_answer(speak_env, vmic, tmp_path, model_path):
    """Nobody answers: the whole speech went into the microphone (recorded from the same source), yet the
    VAD heard no speech and whisper was never asked."""
    raw = tmp_path / "speaker.raw"
    args = {"text": ASKED, "whisper_model": str(model_path), "duration_ms": 2500}
    with recording_the_speaker(vmic, raw), wire(speak_env) as w:
        reply = w.call("converse", args, timeout=120)
    assert not reply.get("isError"), reply
    data = reply["structuredContent"]
    assert data["transcription"] is None and data["speech_detected"] is False, data
    assert data["stopped_by"] == "ceiling" and data["duration_ms"] == 2500 and data["end_reason"] == "duration", data
    played = sound_span_ms(np.fromfile(raw, dtype=np.int16))
    assert played >= 0.8 * data["spoken"]["duration_ms"], (played, data["spoken"])


async def test_bad_arguments_are_refused_before_anything_plays(speak_env, vmic, tmp_path, model_path):
    raw = tmp_path / "speaker.raw"
    cases = {
        "invalid_argument": {"text": "   "},
        "voice_not_found": {"text": FOX, "voice": "en_GB-alan-low"},
        "model_not_found": {"text": FOX, "whisper_model": str(tmp_path / "nowhere.bin")},
        "device_not_found": {"text": FOX, "output_device": "no such speaker"},
    }
    refused = {}
    with recording_the_speaker(vmic, raw):
        async with mcp_client(speak_env) as client:
            for code, args in cases.items():
                refused[code] = error_of(await client.call_tool("converse", args))["error"]
            status = (await client.call_tool("get_status", {})).structured_content
    assert {code: error["code"] for code, error in refused.items()} == {code: code for code in cases}, refused
    assert "output_device" not in refused["invalid_argument"]["message"]
    assert "voices pull en_GB-alan-low" in refused["voice_not_found"]["message"]
    assert sound_span_ms(np.fromfile(raw, dtype=np.int16)) == 0  # nothing was said
    assert status["recording"] is False and "speaking" not in status


def test_a_cancelled_converse_stops_speaking_and_frees_both_devices(speak_env, vmic, tmp_path, model_path):
    raw = tmp_path / "speaker.raw"
    heard = lambda: sound_span_ms(np.fromfile(raw, dtype=np.int16))  # noqa: E731 - what parec recorded so far
    with recording_the_speaker(vmic, raw), wire(speak_env) as w:
        request = w.start("converse", {"text": LONG, "whisper_model": str(model_path)})
        w.until(lambda: heard() >= 1000, 60, "converse never spoke")
        at_cancel = heard()
        w.cancel(request["id"])
        w.until(lambda: not w.status().get("tool"), 10, "the devices were never freed")
        capture = w.call("capture_audio", {"duration_ms": 300})
        time.sleep(0.5)
    assert not capture.get("isError"), capture
    played = heard()
    assert at_cancel <= played <= at_cancel + 1000, (at_cancel, played)  # the whole text takes ~20 s


async def test_talk_and_dictate_are_offered_as_prompts(speak_env):
    async with mcp_client(speak_env) as client:
        listed = {p.name: p for p in (await client.list_prompts()).prompts}
        talk = await client.get_prompt("talk", {"topic": "the weather"})
        dictate = await client.get_prompt("dictate", {})
    assert set(listed) == {"talk", "dictate"}
    assert [a.name for a in listed["talk"].arguments] == ["topic"]
    said = talk.messages[0].content.text
    assert "converse" in said and "the weather" in said and talk.messages[0].role == "user"
    assert "transcribe_voice" in dictate.messages[0].content.text


def test_the_cli_converses_and_prints_both_halves(speak_env, vmic, model_path):
    """`mcp-listen converse`: the same turn from a terminal; nobody answers within the short ceiling."""
    run = [sys.executable, "-m", "mcp_listen", "converse", FOX, "--whisper-model", str(model_path)]
    done = subprocess.run([*run, "--duration-ms", "1500"], env=speak_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["transcription"] is None and result["speech_detected"] is False, result
    assert result["spoken"]["voice"] == VOICE and result["spoken"]["duration_ms"] > 1000, result
    assert "Speaking on" in done.stderr and "Listening on" in done.stderr, done.stderr
    bad = subprocess.run([*run, "--speed", "9"], env=speak_env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 64 and "Invalid speed" in bad.stderr and len(bad.stderr.splitlines()) == 1
