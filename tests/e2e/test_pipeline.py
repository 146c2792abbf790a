"""voice_query and transcribe_voice through the real server: real audio, real whisper, real HTTP.

Every outcome of the contract is produced for real and asserted field by field:
presence and absence of a field matter as much as its value.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import audio_assets as A
import pytest
from rpc import RawServer, error_of, mcp_client, server_env, tool_call
from speech_checks import QUESTION, call_while_playing, spoken, wait_until_recording, wer

pytestmark = pytest.mark.anyio

NO_WORDS_SOUND = "bdbdbdbdbdbdbdbdbdbd gbgbgbgbgbgb"
"""Speech-like babble: Silero hears speech, tiny.en writes only a marker such as [music]."""


@pytest.fixture
def rec_dir(tmp_path: Path) -> Path:
    return tmp_path / "recordings"


@pytest.fixture
def env(vmic, rec_dir, ollama):
    return server_env(vmic.env, MCP_LISTEN_RECORDINGS_DIR=str(rec_dir), OLLAMA_HOST=ollama.url)


async def test_normal_outcome(env, vmic, ollama, model_path, rec_dir):
    ollama.reply = "The capital of France is Paris."
    args = {"whisper_model": str(model_path), "prompt": "Answer briefly.", "model": "llama3.2"}
    async with mcp_client(env) as client:
        result = await call_while_playing(client, vmic, "voice_query", args, spoken(QUESTION))
    assert not result.is_error, result.content[0].text
    data = result.structured_content
    assert json.loads(result.content[0].text) == data
    assert set(data) == {"transcription", "response", "model", "end_reason"}  # end_reason: the one addition
    assert data["end_reason"] in ("words+voice", "words", "voice", "max_pause"), (
        data
    )  # smart by default: a signal decided
    assert wer(QUESTION, data["transcription"]) <= 0.35, data["transcription"]
    assert data["response"] == "The capital of France is Paris."
    assert data["model"] == "llama3.2"
    body = [r for r in ollama.requests if "messages" in r][-1]
    assert body["model"] == "llama3.2"
    assert body["messages"][0] == {"role": "system", "content": "Answer briefly."}
    assert body["messages"][1]["role"] == "user" and body["messages"][1]["content"] == data["transcription"]
    assert not rec_dir.exists() or not any(rec_dir.iterdir()), "voice_query must not leave audio on disk"


async def test_no_speech_outcome_never_runs_whisper_or_ollama(env, vmic, ollama, model_path):
    """A quiet room (faint hiss, no speech) for longer than the no-speech timeout: the Node edition's shape."""
    room = A.with_noise(A.silence(12000), -70)
    async with mcp_client(env) as client:
        result = await call_while_playing(client, vmic, "voice_query", {"whisper_model": str(model_path)}, room)
        status = (await client.call_tool("get_status", {})).structured_content
    assert not result.is_error
    data = result.structured_content
    assert set(data) == {"transcription", "response", "speech_detected", "stopped_by", "message"}
    assert data["transcription"] is None and data["response"] is None
    assert data["speech_detected"] is False and data["stopped_by"] == "no_speech_timeout"
    assert status["whisper_model_loaded"] is None, "whisper must not even load when nobody spoke"
    assert not ollama.requests


async def test_speech_without_words_never_reaches_ollama(env, vmic, ollama, model_path):
    async with mcp_client(env) as client:
        result = await call_while_playing(
            client, vmic, "voice_query", {"whisper_model": str(model_path)}, spoken(NO_WORDS_SOUND)
        )
    assert not result.is_error, result.content[0].text
    data = result.structured_content
    held = {"end_signal"} if data.get("end_reason") == "max_pause" else set()  # what held the pause, beside it
    assert set(data) == {"transcription", "response", "speech_detected", "stopped_by", "end_reason", "message"} | held
    assert data["transcription"] is None and data["response"] is None
    assert data["speech_detected"] is True and data["stopped_by"] == "silence"
    assert data["end_reason"] in ("words+voice", "words", "voice", "max_pause"), (
        data
    )  # smart by default: a signal decided
    assert not [r for r in ollama.requests if "messages" in r]


async def test_no_words_with_fixed_length_has_no_speech_detected_field(env, vmic, ollama, model_path):
    args = {"whisper_model": str(model_path), "stop_on_silence": False, "duration_ms": 1500}
    async with mcp_client(env) as client:
        result = await call_while_playing(client, vmic, "voice_query", args, None)
    assert not result.is_error, result.content[0].text
    data = result.structured_content
    assert data["transcription"] is None and data["response"] is None
    assert "speech_detected" not in data and "stopped_by" not in data and "message" in data


@pytest.mark.parametrize("kind", ["missing", "truncated", "text", "directory"])
async def test_transcription_failure_is_an_error_and_the_server_lives_on(env, vmic, model_path, tmp_path, kind):
    bad = tmp_path / "models" / "ggml-base.en.bin"
    bad.parent.mkdir()
    if kind == "truncated":
        bad.write_bytes(model_path.read_bytes()[:3_000_000])
    elif kind == "text":
        bad.write_text("<html>Not Found</html>\n" * 100)
    elif kind == "directory":
        bad.mkdir()
    async with mcp_client(env) as client:
        result = await client.call_tool("voice_query", {"whisper_model": str(bad)})
        alive = await client.call_tool("get_status", {})
    assert result.is_error
    data = error_of(result)
    assert set(data) == {"error"}
    error = data["error"]
    assert error["stage"] == "transcription"
    assert error["code"] == ("model_not_found" if kind == "missing" else "model_invalid")
    if kind == "missing":
        assert "mcp-listen models pull base.en" in error["message"]
    assert not alive.is_error and alive.structured_content["recording"] is False


async def test_model_name_lookup_in_whisper_model_path(vmic, rec_dir, ollama, model_path, tmp_path):
    folder = tmp_path / "wm"
    folder.mkdir()
    (folder / "ggml-tiny.en.bin").symlink_to(model_path)
    env = server_env(
        vmic.env, MCP_LISTEN_RECORDINGS_DIR=str(rec_dir), OLLAMA_HOST=ollama.url, WHISPER_MODEL_PATH=str(folder)
    )
    async with mcp_client(env) as client:
        result = await call_while_playing(
            client,
            vmic,
            "transcribe_voice",
            {"whisper_model": "tiny.en"},
            spoken(QUESTION),  # tiny.en mishears espeak's "The weather" at a third of the start offsets
        )
    assert not result.is_error, result.content[0].text
    assert wer(QUESTION, result.structured_content["transcription"]) <= 0.3


async def test_transcribe_voice_outcomes(env, vmic, ollama, model_path):
    sentence = "Remind me to call my mother tomorrow."
    async with mcp_client(env) as client:
        normal = await call_while_playing(
            client, vmic, "transcribe_voice", {"whisper_model": str(model_path), "language": "en"}, spoken(sentence)
        )
        no_words = await call_while_playing(
            client, vmic, "transcribe_voice", {"whisper_model": str(model_path)}, spoken(NO_WORDS_SOUND)
        )
        failed = await client.call_tool("transcribe_voice", {"whisper_model": "/nonexistent/ggml-none.bin"})
    data = normal.structured_content
    assert not normal.is_error
    assert set(data) == {"transcription", "stopped_by", "duration_ms", "language", "end_reason"}
    assert wer(sentence, data["transcription"]) <= 0.3, data["transcription"]
    assert data["stopped_by"] == "silence" and data["language"] == "en" and data["duration_ms"] > 1000
    assert data["end_reason"] in ("words+voice", "words", "voice", "max_pause"), (
        data
    )  # smart by default: a signal decided
    nw = no_words.structured_content
    assert nw["transcription"] is None and nw["speech_detected"] is True and "message" in nw
    assert failed.is_error and error_of(failed)["error"]["stage"] == "transcription"
    assert not ollama.requests, "transcribe_voice never talks to Ollama"


async def test_transcribe_voice_no_speech(env, vmic, model_path):
    async with mcp_client(env) as client:
        result = await call_while_playing(
            client, vmic, "transcribe_voice", {"whisper_model": str(model_path), "duration_ms": 12000}, None
        )
    data = result.structured_content
    assert not result.is_error
    assert data["transcription"] is None and data["speech_detected"] is False
    assert data["stopped_by"] == "no_speech_timeout"


async def test_progress_notifications_tell_the_story(env, vmic, ollama, model_path):
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress, total, message):
        seen.append((progress, total, message))

    async with mcp_client(env) as client:
        result = await call_while_playing(
            client,
            vmic,
            "voice_query",
            {"whisper_model": str(model_path)},
            spoken(QUESTION),
            progress_callback=on_progress,
        )
    assert not result.is_error, result.content[0].text
    messages = [m or "" for _, _, m in seen]
    for expected in ("Listening on", "Speech detected", "Recording finished", "Transcribing", "Asking llama3.2"):
        assert any(m.startswith(expected) for m in messages), (expected, messages)
    order = [
        next(i for i, m in enumerate(messages) if m.startswith(e))
        for e in ("Listening on", "Speech detected", "Recording finished", "Transcribing", "Asking")
    ]
    assert order == sorted(order)
    values = [p for p, _, _ in seen]
    assert values == sorted(values) and len(set(values)) == len(values), "progress must increase"
    assert all(total == 15000 for _, total, m in seen if m and m.startswith(("Listening", "Speech")))
    assert len(seen) <= 3 * 10, "at most a few notifications per second"


def test_no_progress_without_a_token(env, vmic):
    with RawServer(env) as server:
        server.initialize()
        call = tool_call(server, "capture_audio", {"duration_ms": 1200, "stop_on_silence": True})
        server.send(call)
        server.wait_for(call["id"])
        with_token = tool_call(
            server, "capture_audio", {"duration_ms": 1200, "stop_on_silence": True}, progressToken="t1"
        )
        server.send(with_token)
        server.wait_for(with_token["id"])
        lines = [json.loads(line) for line in server.lines]
    progress = [m for m in lines if m.get("method") == "notifications/progress"]
    assert progress and all(m["params"]["progressToken"] == "t1" for m in progress)


async def test_get_status_answers_during_a_recording(env, vmic, model_path):
    async with mcp_client(env) as client:
        statuses = []

        async def record():
            await client.call_tool("capture_audio", {"duration_ms": 2500})

        async with anyio.create_task_group() as tg:
            tg.start_soon(record)
            await wait_until_recording(client)
            statuses.append((await client.call_tool("get_status", {})).structured_content)
            await anyio.sleep(0.5)
            statuses.append((await client.call_tool("get_status", {})).structured_content)
        statuses.append((await client.call_tool("get_status", {})).structured_content)
    first, later, after = statuses
    assert first["recording"] is True and first["tool"] == "capture_audio" and first["device"]
    assert later["elapsed_ms"] > first["elapsed_ms"]
    assert after == {"recording": False, "tool": None, "elapsed_ms": None, "device": None, "whisper_model_loaded": None}
