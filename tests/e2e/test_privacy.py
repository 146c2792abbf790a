"""Privacy and hygiene, through the real server: what the logs never contain, what stdout carries,
who can read recordings, and what the 24 h sweep may delete.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import dns_sink
import pytest
import rpc
from rpc import assert_only_json_rpc, error_of, files_in, server_env, wire
from speech_checks import said_clip

SAID_WORDS = ["purple", "giraffe", "zanzibar", "dancing", "tonight"]
PROMPT = "You are Marmaduke the quokka; answer in rhymes."
PROMPT_WORDS = ["marmaduke", "quokka", "rhymes"]
REPLY = "Saffron platypus juggles nectarines."
REPLY_WORDS = ["saffron", "platypus", "nectarine"]


@pytest.mark.long
def test_logs_never_contain_words_prompts_replies_or_paths(vmic, ollama, tmp_path, model_path):
    rec_dir = tmp_path / "recordings"
    log = tmp_path / "stderr.log"
    ollama.reply = REPLY
    env = server_env(
        vmic.env, MCP_LISTEN_RECORDINGS_DIR=str(rec_dir), OLLAMA_HOST=ollama.url, MCP_LISTEN_LOG_LEVEL="DEBUG"
    )
    results = {}
    with wire(env, stderr_path=log) as w:
        # a frame the SDK cannot parse, holding a prompt: it must not be echoed either
        w.server.proc.stdin.write(
            b'{"jsonrpc": "2.0", "id": 77, "method": "tools/call", "params": {"name": '
            b'"voice_query", "arguments": {"prompt": "Marmaduke the quokka"}\n'
        )
        w.server.proc.stdin.flush()
        results["list"] = w.call("list_audio_devices")
        results["status"] = w.call("get_status")
        for tool, args in [
            ("capture_audio", {"duration_ms": 4000}),
            ("transcribe_voice", {"whisper_model": str(model_path), "silence_ms": 500}),
            ("voice_query", {"whisper_model": str(model_path), "silence_ms": 500, "prompt": PROMPT}),
        ]:
            request = w.start(tool, args, progressToken=tool)
            w.wait_recording(min_elapsed_ms=0)
            vmic.play(said_clip())
            results[tool] = w.wait(request["id"], 60)["result"]
        ollama.mode = "500"
        failing = w.start("voice_query", {"whisper_model": str(model_path), "silence_ms": 500, "prompt": PROMPT})
        w.wait_recording(min_elapsed_ms=0)
        vmic.play(said_clip())
        results["failing"] = w.wait(failing["id"], 60)["result"]
        w.server.close_stdin()
        assert w.server.wait_exit(10) == 0
        lines = list(w.server.lines)
    for name, result in results.items():
        assert result.get("isError") == (name == "failing"), (name, result)
    heard = results["transcribe_voice"]["structuredContent"]["transcription"].lower()
    heard_words = [word for word in SAID_WORDS if word in heard]
    assert len(heard_words) >= 3, f"the test needs the words to be transcribed: {heard!r}"
    assert "platypus" in results["voice_query"]["structuredContent"]["response"].lower()
    assert ollama.requests[-1]["messages"][0]["content"] == PROMPT
    wav = Path(results["capture_audio"]["structuredContent"]["path"])
    assert files_in(rec_dir) == [wav.name], "transcribe_voice and voice_query must keep no audio on disk"

    text = log.read_text(errors="replace")
    lowered = text.lower()
    assert "whisper model" in lowered and "ollama at" in lowered and "silero" in lowered, (
        "DEBUG logging must have produced output from every stage, or this test proves nothing"
    )
    leaked = [w for w in heard_words + PROMPT_WORDS + REPLY_WORDS if w in lowered]
    assert not leaked, f"the log contains {leaked}"
    for needle in (str(wav), wav.name, str(rec_dir)):
        assert needle not in text, f"the log contains the audio path {needle}"
    assert_only_json_rpc(lines)
    notes = [json.loads(line) for line in lines if b'"method"' in line]
    assert notes and all(n["method"] == "notifications/progress" for n in notes)


SPOKEN = "Persimmon walrus sings about Ulaanbaatar."
SPOKEN_WORDS = ["persimmon", "walrus", "ulaanbaatar"]


def test_logs_never_contain_what_is_spoken(vmic, tmp_path, piper_voice):
    """Piper logs every sentence it speaks at DEBUG: mcp-listen's DEBUG log must not carry them."""
    log = tmp_path / "stderr.log"
    env = server_env(
        vmic.env,
        MCP_LISTEN_VOICES_PATH=str(piper_voice.parent),
        MCP_LISTEN_VOICE=piper_voice.stem,
        MCP_LISTEN_LOG_LEVEL="DEBUG",
    )
    with wire(env, stderr_path=log) as w:
        spoken = w.call("speak_text", {"text": SPOKEN, "speed": 2.0}, timeout=120)
        w.server.close_stdin()
        assert w.server.wait_exit(10) == 0
    assert not spoken.get("isError"), spoken
    lowered = log.read_text(errors="replace").lower()
    assert "debug mcp_listen.audio.speaker: played" in lowered, "DEBUG logging must have produced output"
    assert not [w for w in SPOKEN_WORDS if w in lowered], "the log contains the spoken text"


# ======================================================================================== telemetry

IDLE_S = 15
"""onnxruntime 1.32's telemetry looked up its events host ~9 s after start, then every 5-9 s."""


def _telemetry_env(vmic, tmp_path: Path) -> tuple[dict[str, str], Path, Path]:
    """A scratch HOME and TMPDIR (where ORT would write) and a recordings folder outside both."""
    home, temp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    temp.mkdir()
    env = server_env(vmic.env, HOME=str(home), TMPDIR=str(temp), MCP_LISTEN_RECORDINGS_DIR=str(tmp_path / "rec"))
    for inherited in ("XDG_CACHE_HOME", "ORT_DISABLE_TELEMETRY"):
        env.pop(inherited, None)  # the server must turn telemetry off itself
    return env, home, temp


def _listen_then_idle(w, vmic, model_path: Path) -> None:
    """A stop-on-silence capture and a transcription (the VAD session runs), then IDLE_S idle."""
    heard = ""
    for tool, args in [
        ("capture_audio", {"stop_on_silence": True, "silence_ms": 500}),
        ("transcribe_voice", {"whisper_model": str(model_path), "silence_ms": 500}),
    ]:
        request = w.start(tool, args)
        w.wait_recording(min_elapsed_ms=0)
        vmic.play(said_clip())
        result = w.wait(request["id"], 60)["result"]
        assert not result.get("isError"), result["content"][0]["text"]
        assert result["structuredContent"]["stopped_by"] == "silence"
        heard = result["structuredContent"].get("transcription") or heard
    assert any(word in heard.lower() for word in SAID_WORDS), f"the VAD and whisper must have run: {heard!r}"
    time.sleep(IDLE_S)
    assert w.server.proc.poll() is None


def _assert_no_telemetry_files(home: Path, temp: Path) -> None:
    written = sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    assert not (home / ".cache" / "Microsoft").exists(), f"telemetry files under HOME: {written}"
    ses = sorted(p.name for p in temp.rglob("*.ses")) + sorted(p.name for p in temp.rglob(".ses"))
    assert not ses, f"telemetry session files in TMPDIR: {ses}"


@pytest.mark.long
def test_no_telemetry_files(vmic, tmp_path, model_path):
    env, home, temp = _telemetry_env(vmic, tmp_path)
    with wire(env) as w:
        _listen_then_idle(w, vmic, model_path)
    _assert_no_telemetry_files(home, temp)


def test_no_telemetry_files_when_speaking(vmic, tmp_path, piper_voice):
    """Piper imports onnxruntime itself: the voice must be loaded with the telemetry off too."""
    env, home, temp = _telemetry_env(vmic, tmp_path)
    env.update(MCP_LISTEN_VOICES_PATH=str(piper_voice.parent), MCP_LISTEN_VOICE=piper_voice.stem)
    with wire(env) as w:
        spoken = w.call("speak_text", {"text": "Nothing leaves this machine.", "speed": 2.0}, timeout=120)
    assert not spoken.get("isError"), spoken
    assert spoken["structuredContent"]["duration_ms"] > 300
    _assert_no_telemetry_files(home, temp)


@pytest.mark.long
def test_no_dns_lookups(vmic, tmp_path, model_path, monkeypatch):
    """The server runs in a network namespace whose only resolver logs every query it gets."""
    reason = dns_sink.unavailable()
    if reason:
        pytest.skip(reason)
    env, home, temp = _telemetry_env(vmic, tmp_path)
    queries = tmp_path / "dns-queries.log"
    monkeypatch.setattr(rpc, "SERVER_CMD", dns_sink.wrap(queries, list(rpc.SERVER_CMD)))
    with wire(env) as w:
        _listen_then_idle(w, vmic, model_path)
    names = queries.read_text().split()
    assert dns_sink.CANARY in names, f"the resolver in the namespace did not see the canary lookup: {names}"
    assert [n for n in names if n != dns_sink.CANARY] == [], "the server looked up hosts while serving"
    _assert_no_telemetry_files(home, temp)


# ======================================================================================== recordings


def test_default_folder_is_private_whatever_the_umask(vmic, tmp_path):
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = server_env(vmic.env, TMPDIR=str(temp))
    env.pop("MCP_LISTEN_RECORDINGS_DIR", None)
    old = os.umask(0)  # the child inherits the most permissive umask there is
    try:
        with wire(env) as w:
            result = w.call("capture_audio", {"duration_ms": 300})
    finally:
        os.umask(old)
    assert not result.get("isError"), result["content"][0]["text"]
    path = Path(result["structuredContent"]["path"])
    folder = path.parent
    assert folder.parent == temp and folder.name.startswith("mcp-listen-")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and folder.stat().st_uid == os.getuid()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.stat().st_uid == os.getuid()


def _default_folder(temp: Path) -> Path:
    import getpass

    return temp / f"mcp-listen-{getpass.getuser()}"


@pytest.mark.parametrize("planted", ["other owner", "symlink"])
def test_a_default_folder_planted_by_someone_else_is_refused(vmic, tmp_path, planted):
    temp = tmp_path / "tmp"
    temp.mkdir()
    folder = _default_folder(temp)
    target = tmp_path / "attacker"
    target.mkdir(mode=0o777)
    if planted == "other owner":
        if os.geteuid() != 0:
            pytest.skip("giving a folder to another user needs root")
        folder.mkdir(mode=0o777)
        os.chown(folder, 65534, 65534)
    else:
        folder.symlink_to(target, target_is_directory=True)
    env = server_env(vmic.env, TMPDIR=str(temp))
    env.pop("MCP_LISTEN_RECORDINGS_DIR", None)
    with wire(env) as w:
        result = w.call("capture_audio", {"duration_ms": 300})
        assert w.status()["recording"] is False
    error = error_of(result)["error"]
    assert result["isError"] and error["code"] == "storage_error", error
    assert "MCP_LISTEN_RECORDINGS_DIR" in error["message"]
    assert files_in(target) == []
    if planted == "other owner":
        assert files_in(folder) == []


def test_server_start_sweeps_only_old_recordings(vmic, tmp_path):
    rec_dir = tmp_path / "recordings"
    rec_dir.mkdir()
    outside = tmp_path / "outside.wav"
    outside.write_bytes(b"RIFF outside")
    old_recording = rec_dir / "mcp-listen-1700000000000.wav"
    fresh_recording = rec_dir / "mcp-listen-1700000000001.wav"
    keep = {
        "fresh recording": fresh_recording,
        "other name": rec_dir / "notes.wav",
        "look-alike": rec_dir / "mcp-listen-1700000000002.wav.bak",
        "not digits": rec_dir / "mcp-listen-abc.wav",
        "prefixed": rec_dir / "x-mcp-listen-1700000000003.wav",
    }
    for path in [old_recording, *keep.values()]:
        path.write_bytes(b"RIFF")
    link = rec_dir / "mcp-listen-1700000000004.wav"
    link.symlink_to(outside)
    folder_named_like_one = rec_dir / "mcp-listen-1700000000005.wav"
    folder_named_like_one.mkdir()
    (folder_named_like_one / "inside.txt").write_text("x")
    day_ago = time.time() - 25 * 3600
    for path in [
        old_recording,
        outside,
        folder_named_like_one,
        *[p for k, p in keep.items() if k != "fresh recording"],
    ]:
        os.utime(path, (day_ago, day_ago))
    os.utime(link, (day_ago, day_ago), follow_symlinks=False)

    env = server_env(vmic.env, MCP_LISTEN_RECORDINGS_DIR=str(rec_dir))
    with wire(env) as w:
        w.call("get_status")
        deadline = time.monotonic() + 10
        while old_recording.exists():
            assert time.monotonic() < deadline, "the startup sweep did not remove the old recording"
            time.sleep(0.05)
    for name, path in keep.items():
        assert path.exists(), f"the sweep deleted the {name}"
    assert link.is_symlink() and outside.read_bytes() == b"RIFF outside"
    assert (folder_named_like_one / "inside.txt").exists()
