"""`vocabulary` through the real server (tiny.en, espeak speech on the virtual microphone): accepted, the words
still come back and the names appear in no result and no log line; a bad one is refused before recording."""

from __future__ import annotations

import json
import time

from rpc import error_of, files_in, server_env, wire
from speech_checks import spoken, wer
from timing import machine_load

SENTENCE = "Remind me to call my mother tomorrow."
VOCABULARY = "Aoife, Grafana, Terraform, Nguyen"
NAMES = ("aoife", "grafana", "terraform", "nguyen")
"""Names not in the argument's own example (the accepted text of an error quotes it)."""


def test_a_vocabulary_is_taken_and_kept_private_and_a_bad_one_is_refused_before_recording(vmic, tmp_path, model_path):
    rec_dir, log = tmp_path / "recordings", tmp_path / "stderr.log"
    env = server_env(vmic.env, MCP_LISTEN_RECORDINGS_DIR=str(rec_dir), MCP_LISTEN_LOG_LEVEL="DEBUG")
    with wire(env, stderr_path=log) as w:
        args = {"whisper_model": str(model_path), "language": "en", "vocabulary": VOCABULARY}
        request = w.start("transcribe_voice", args, progressToken="heard")
        w.wait_recording(min_elapsed_ms=0)
        vmic.play(spoken(SENTENCE))
        heard = w.wait(request["id"], 60)["result"]
        began = time.monotonic()
        bad = {**args, "vocabulary": "Nguyen, " * 19, "stop_on_silence": False, "duration_ms": 10000}
        request = w.start("transcribe_voice", bad, progressToken="refused")
        refused = w.wait(request["id"], 30)["result"]
        took = time.monotonic() - began
        recording = w.status()["recording"]
        w.server.close_stdin()
        assert w.server.wait_exit(10) == 0
        notes = json.dumps([note for _, note in w.notes])
    assert not heard.get("isError"), heard["content"][0]["text"]
    data = heard["structuredContent"]
    assert wer(SENTENCE, data["transcription"]) <= 0.3, data["transcription"]
    assert data["stopped_by"] == "silence" and data["language"] == "en"

    error = error_of(refused)["error"]
    assert refused.get("isError") and error["code"] == "invalid_argument", refused
    assert "vocabulary" in error["message"] and "at most 150 characters" in error["message"], error
    assert "a string of 152 characters" in error["message"] and "Nguyen" not in error["message"], error
    assert took < 8, f"refused after {took:.1f} s: did a 10 s recording run first? ({machine_load()})"
    assert recording is False and files_in(rec_dir) == [], "nothing recorded, nothing written"
    assert '"refused"' not in notes, "no progress (Listening on...) for a refused call"

    text = log.read_text(errors="replace").lower()
    assert "whisper pass" in text, "DEBUG logging must have logged the whisper passes, or this test proves nothing"
    leaked = [name for name in NAMES if name in text or name in notes.lower() or name in json.dumps(heard).lower()]
    assert not leaked, f"the log, a progress message or the result holds {leaked}"
