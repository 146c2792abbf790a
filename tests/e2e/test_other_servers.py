"""Two clients, two servers, one sound server (the speaker rig, speaker_rig.py): another server's speech
is never the user's words. While one server speaks, the other's listening call waits for the speech to
end (telling why), then records; past the wait's bound it is `busy` naming the speaker; while one
listens, the other's speech is refused naming the listener (audio/owner.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from rpc import error_of, wire
from speaker_rig import FOX, LONG, agent_words_in
from speech_checks import heard_lighthouse, speech_clip

from mcp_listen.contract.limits import OTHER_SPEECH_WAIT_S


def _speaking(w, text: str = LONG) -> dict:
    """`w` starts saying `text`, its voice loaded first; returns once it has sounded a second."""
    warm = w.call("speak_text", {"text": "Ready.", "speed": 2.0}, timeout=60)
    assert not warm.get("isError"), warm
    request = w.start("speak_text", {"text": text})
    w.until(lambda: (w.status().get("elapsed_ms") or 0) >= 1000 and w.status().get("speaking"), 30, "never spoke")
    return request


def test_a_listening_call_waits_for_another_servers_speech_and_never_takes_it_for_the_users_words(
    speak_env, vmic, model_path
):
    args = {"whisper_model": str(model_path), "silence_ms": 800}
    with wire(speak_env) as a, wire(speak_env) as b:
        speech = _speaking(a)
        listen = b.start("transcribe_voice", args, progressToken="b")
        b.wait_progress("b", f"Waiting for another mcp-listen (pid {a.server.proc.pid}) to finish speaking", 30)
        stopped = a.call("stop_speaking", {})["structuredContent"]
        a.wait(speech["id"], timeout=10)
        b.wait_progress("b", "Listening on", timeout=30)
        vmic.play(speech_clip())
        reply = b.wait(listen["id"], timeout=120)
    assert stopped["stopped"] is True, stopped
    assert "result" in reply and not reply["result"].get("isError"), reply
    heard = reply["result"]["structuredContent"]["transcription"]
    assert agent_words_in(heard) == [], f"the other server's speech came back as the user's words: {heard!r}"
    assert heard_lighthouse(heard), heard


@pytest.mark.long
def test_a_speech_past_the_wait_is_busy_naming_it_and_a_listening_server_holds_off_the_others_speech(
    speak_env, vmic, model_path
):
    with wire(speak_env) as a, wire(speak_env) as b:
        speech = _speaking(a)
        asked = time.monotonic()
        capture = b.call("capture_audio", {"duration_ms": 1000}, timeout=OTHER_SPEECH_WAIT_S + 20)
        answered = time.monotonic() - asked
        a.call("stop_speaking", {})
        a.wait(speech["id"], timeout=10)

        listen = b.start("capture_audio", {"duration_ms": 8000})
        b.wait_recording()
        refused = a.call("speak_text", {"text": FOX}, timeout=30)
        recorded = b.wait(listen["id"], timeout=30)["result"]
        later = a.call("speak_text", {"text": "Hello again.", "speed": 2.0}, timeout=60)
        pids = a.server.proc.pid, b.server.proc.pid
    error = error_of(capture)["error"]
    assert error["code"] == "busy" and f"pid {pids[0]}) is speaking" in error["message"], error
    assert OTHER_SPEECH_WAIT_S - 0.5 <= answered <= OTHER_SPEECH_WAIT_S + 15, answered  # +15: a loaded machine
    error = error_of(refused)["error"]
    assert error["code"] == "busy" and f"pid {pids[1]}) is listening" in error["message"], error
    assert not recorded.get("isError"), recorded
    assert not later.get("isError"), later


def test_a_planted_lock_folder_leaves_speech_on_with_a_warning_that_says_the_rule_is_off(speak_env, tmp_path):
    """XDG_RUNTIME_DIR unset and our folder in the temp folder a symlink someone planted: nothing is written
    through it, and the speech says the rule between servers is off."""
    import getpass

    temp, elsewhere = tmp_path / "tmp", tmp_path / "elsewhere"
    temp.mkdir()
    elsewhere.mkdir()
    ours = temp / f"mcp-listen-{getpass.getuser()}"
    ours.symlink_to(elsewhere, target_is_directory=True)
    env = {k: v for k, v in speak_env.items() if k != "XDG_RUNTIME_DIR"}
    with wire({**env, "TMPDIR": str(temp)}) as w:
        spoken = w.call("speak_text", {"text": "Hello.", "speed": 2.0, "barge_in": False}, timeout=60)
    assert not spoken.get("isError"), spoken
    warning = spoken["structuredContent"].get("warning") or ""
    assert "one-speaker rule between mcp-listen servers is off" in warning and str(ours) in warning, spoken
    assert os.listdir(elsewhere) == [] and Path(ours).is_symlink()
