"""Faults in what the server depends on, injected for real: bad whisper model files, a misbehaving
Ollama on loopback, a full or read-only recordings filesystem (tmpfs), no PortAudio, no
microphone, invalid environment variables. Each gives a clear error and the server lives on.
"""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import audio_assets as A
import pytest
from fake_ollama import refused_url
from rpc import error_of, files_in, server_env, stalled, wire
from speech_checks import heard_lighthouse, speech_clip
from vmic import env_no_input_devices, env_without_portaudio

QUESTION = "what is the tallest mountain in the world"


def spoken_question() -> Path:
    return A.concat([A.silence(300), A.speech(QUESTION), A.silence(1500)])


# ===================================================================================== whisper model


def _first_tensor_offset(model: Path) -> int:
    """Where the first tensor header starts: after the hparams, mel filters and vocabulary."""
    with open(model, "rb") as f:
        head = f.read(4 + 11 * 4 + 8)
        n_mel, n_fft = struct.unpack_from("<2i", head, 4 + 11 * 4)
        f.seek(n_mel * n_fft * 4, os.SEEK_CUR)
        (count,) = struct.unpack("<i", f.read(4))
        for _ in range(count):
            (length,) = struct.unpack("<i", f.read(4))
            f.seek(length, os.SEEK_CUR)
        return f.tell()


def bad_models(model: Path, folder: Path) -> dict[str, tuple[Path, str, str]]:
    """name -> (path, expected code, words the message must contain)."""
    folder.mkdir()
    data = model.read_bytes()

    def write(name: str, content: bytes) -> Path:
        path = folder / name / "ggml-base.en.bin"
        path.parent.mkdir()
        path.write_bytes(content)
        return path

    directory = folder / "directory" / "ggml-base.en.bin"
    directory.mkdir(parents=True)
    return {
        "missing": (folder / "nowhere" / "ggml-base.en.bin", "model_not_found", "does not exist"),
        "zero bytes": (write("zero", b""), "model_invalid", "truncated or empty"),
        "truncated half-way": (write("half", data[: len(data) // 2]), "model_invalid", "truncated"),
        "last KiB missing": (write("tail", data[:-1024]), "model_invalid", "truncated"),
        "GGUF (an Ollama model)": (write("gguf", b"GGUF" + bytes(range(256)) * 64), "model_invalid", "GGUF"),
        "HTML error page": (write("html", b"<!DOCTYPE html><html>404</html>\n" * 50), "model_invalid", "HTML"),
        "random bytes": (write("random", os.urandom(200_000)), "model_invalid", "not a whisper.cpp model"),
        "directory": (directory, "model_invalid", "folder"),
    }


def test_bad_whisper_models_are_errors_and_the_server_lives_on(vmic, tmp_path, model_path):
    rec_dir = tmp_path / "recordings"
    env = server_env(vmic.env, MCP_LISTEN_RECORDINGS_DIR=str(rec_dir), OLLAMA_HOST=refused_url())
    cases = bad_models(model_path, tmp_path / "models")
    with wire(env) as w:
        for n, (name, (path, code, words)) in enumerate(cases.items()):
            tool = ("transcribe_voice", "voice_query")[n % 2]
            began = time.monotonic()
            result = w.call(tool, {"whisper_model": str(path)})
            assert result.get("isError"), name
            error = error_of(result)["error"]
            assert (error["stage"], error["code"]) == ("transcription", code), (name, error)
            assert words in error["message"], (name, error["message"])
            assert time.monotonic() - began < 5, f"{name}: the model must be checked before recording"
            assert w.status()["recording"] is False
        # A tensor type whisper.cpp does not know once passed the check and reached whisper.cpp
        # after the user had spoken; tensor types are now checked per name, before recording.
        odd = bytearray(model_path.read_bytes())
        struct.pack_into("<i", odd, _first_tensor_offset(model_path) + 8, 99)
        unknown_type = tmp_path / "ggml-odd.bin"
        unknown_type.write_bytes(odd)
        del odd
        began = time.monotonic()
        result = w.call(
            "transcribe_voice", {"whisper_model": str(unknown_type), "stop_on_silence": False, "duration_ms": 4000}
        )
        error = error_of(result)["error"]
        assert error["code"] == "model_invalid" and "type 99" in error["message"], error
        assert time.monotonic() - began < 5 and w.status()["recording"] is False
        assert w.server.proc.poll() is None
        good = w.start(
            "transcribe_voice", {"whisper_model": str(model_path), "stop_on_silence": False, "duration_ms": 4000}
        )
        w.wait_recording(min_elapsed_ms=0)
        vmic.play(speech_clip())
        result = w.wait(good["id"], 60)["result"]
        assert not result.get("isError"), result["content"][0]["text"]
        assert heard_lighthouse(result["structuredContent"]["transcription"]), result["structuredContent"]
    assert files_in(rec_dir) == []


# ============================================================================================ Ollama

OLLAMA_CASES = [
    # mode, code; "hang" never answers, "trickle" sends a token every 0.2 s forever
    ("hang", "timeout"),
    ("trickle", "timeout"),
    ("cut", "bad_response"),
    ("garbage", "bad_response"),
    ("404", "model_not_pulled"),
    ("500", "http_error"),
    ("empty", "empty_response"),
]


def _ask(w, vmic, model_path: Path, token: str) -> tuple[dict, float | None]:
    """One spoken voice_query; returns its result and the seconds from "Asking" to the answer."""
    request = w.start("voice_query", {"whisper_model": str(model_path), "silence_ms": 500}, progressToken=token)
    w.wait_recording(min_elapsed_ms=0)
    vmic.play(spoken_question())
    reply = w.wait(request["id"], 60)
    asked = w.progress_time(token, "Asking")
    llm_seconds = w.arrived[request["id"]] - asked if asked is not None else None
    return reply["result"], llm_seconds


@pytest.mark.long
def test_ollama_faults_give_the_contracts_outcomes(vmic, ollama, tmp_path, model_path):
    """Every way Ollama fails after the transcription, in one server: the error's stage and code, the
    transcript kept, and the server still answering. Ollama down before recording: test_compat.py."""
    env = server_env(
        vmic.env,
        MCP_LISTEN_RECORDINGS_DIR=str(tmp_path / "rec"),
        OLLAMA_HOST=ollama.url,
        MCP_LISTEN_OLLAMA_TIMEOUT_S="1",
    )
    timings = {}
    with wire(env) as w:
        for mode, code in OLLAMA_CASES:
            ollama.mode = mode
            result, llm_seconds = _ask(w, vmic, model_path, mode)
            assert result.get("isError"), (mode, result)
            data = error_of(result)
            assert data["error"]["stage"] == "llm" and data["error"]["code"] == code, (mode, data)
            assert set(data) == {"error", "transcription", "response", "model", "message"}, (mode, data)
            assert data["response"] is None and "mountain" in data["transcription"].lower()  # nothing said is lost
            assert data["model"] == "llama3.2" and data["message"] == data["error"]["message"], (mode, data)
            if mode == "404":
                assert "ollama pull llama3.2" in data["error"]["message"]
            timings[mode] = llm_seconds
            assert w.server.proc.poll() is None
        ollama.mode = "ok"
        result, _ = _ask(w, vmic, model_path, "ok")
        assert not result.get("isError"), result["content"][0]["text"]
        assert "mountain" in result["structuredContent"]["response"].lower()
    for mode in ("hang", "trickle"):
        assert 0.9 <= timings[mode] <= 2.0, f"{mode}: the 1 s timeout fired after {timings[mode]:.2f} s"


def test_ollama_not_running(vmic, tmp_path, model_path):
    """Found before the microphone opens: the answer comes at once and nobody spoke in vain."""
    env = server_env(vmic.env, MCP_LISTEN_RECORDINGS_DIR=str(tmp_path / "rec"), OLLAMA_HOST=refused_url())
    with wire(env) as w:
        began = time.monotonic()
        result = w.call("voice_query", {"whisper_model": str(model_path), "silence_ms": 500})
        took = time.monotonic() - began
        assert w.status()["recording"] is False
    error = error_of(result)["error"]
    assert (error["stage"], error["code"]) == ("llm", "ollama_unreachable")
    assert "ollama serve" in error["message"] and took < 5


# ================================================================================ recordings storage


@contextmanager
def tmpfs(folder: Path, options: str) -> Iterator[Path]:
    """A real tiny filesystem (root only; CI runs as root)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def test_full_filesystem_is_a_clear_error_without_partial_file(vmic, tmp_path):
    with tmpfs(tmp_path / "small", "size=64k,mode=0700") as small:
        env = server_env(vmic.env, MCP_LISTEN_RECORDINGS_DIR=str(small))
        with wire(env) as w:
            result = w.call("capture_audio", {"duration_ms": 3000})  # 96 KB of WAV into 64 KiB
            assert result.get("isError"), result
            error = error_of(result)["error"]
            assert (error["stage"], error["code"]) == ("capture", "storage_error")
            assert "disk is full" in error["message"] and "MCP_LISTEN_RECORDINGS_DIR" in error["message"]
            assert files_in(small) == [], "a partial recording was left behind"
            assert w.status()["recording"] is False
            fits = w.call("capture_audio", {"duration_ms": 300})
            assert not fits.get("isError"), fits["content"][0]["text"]
            assert files_in(small) == [Path(fits["structuredContent"]["path"]).name]


def test_read_only_folder_is_a_clear_error_and_nothing_is_recorded(vmic, tmp_path):
    with tmpfs(tmp_path / "ro", "ro,size=64k,mode=0700") as folder:
        env = server_env(vmic.env, MCP_LISTEN_RECORDINGS_DIR=str(folder))
        with wire(env) as w:
            began = time.monotonic()
            result = w.call("capture_audio", {"duration_ms": 3000})
            assert time.monotonic() - began < 2.5, "the folder must be checked before recording"
            error = error_of(result)["error"]
            assert result["isError"] and (error["stage"], error["code"]) == ("capture", "storage_error")
            assert "not writable" in error["message"]
            assert w.status()["recording"] is False
            subprocess.run(["mount", "-o", "remount,rw", str(folder)], check=True)
            fixed = w.call("capture_audio", {"duration_ms": 300})
            assert not fixed.get("isError"), fixed["content"][0]["text"]


def test_a_folder_swapped_for_a_symlink_mid_recording_gets_no_file(vmic, tmp_path):
    """Was: the folder was checked before recording, the WAV written by path after it, so a symlink
    swapped in while the user spoke put the recording at the symlink's target."""
    rec, target = tmp_path / "rec", tmp_path / "target"
    target.mkdir()
    with wire(server_env(vmic.env, MCP_LISTEN_RECORDINGS_DIR=str(rec))) as w:
        request = w.start("capture_audio", {"duration_ms": 1500})
        w.wait_recording(min_elapsed_ms=200)
        rec.rename(tmp_path / "moved")
        rec.symlink_to(target)
        result = w.wait(request["id"], 15)["result"]
        error = error_of(result)["error"]
        assert error["code"] == "storage_error" and "replaced" in error["message"], error
        refused = error_of(w.call("capture_audio", {"duration_ms": 300}))["error"]
        assert refused["code"] == "storage_error" and "symbolic link" in refused["message"]
    assert files_in(target) == [] and files_in(tmp_path / "moved") == []


def test_a_world_writable_folder_is_refused_before_recording(vmic, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    with wire(server_env(vmic.env, MCP_LISTEN_RECORDINGS_DIR=str(shared))) as w:
        began = time.monotonic()
        result = w.call("capture_audio", {"duration_ms": 3000})
        assert time.monotonic() - began < 2.5, "the folder must be checked before recording"
    error = error_of(result)["error"]
    assert error["code"] == "storage_error" and "chmod go-w" in error["message"], error
    assert files_in(shared) == []


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_during_a_stalled_write_leaves_no_short_wav_and_the_next_start_cleans_up(vmic, tmp_path, sig):
    """Was: a 0- or 44-byte .wav that the next start kept (for 24 h). Now the WAV is written under a
    temporary name, renamed when complete, and the next start removes an abandoned one at once."""
    rec = tmp_path / "rec"
    env = server_env(vmic.env, MCP_LISTEN_RECORDINGS_DIR=str(rec))
    with wire(env) as w:
        pid = w.server.proc.pid
        with stalled(pid) as tracer:
            request = w.start("capture_audio", {"duration_ms": 500})
            w.until(lambda: files_in(rec), 15, "the recording file was never created")
            time.sleep(0.3)
            assert request["id"] not in w.responses, "the write did not stall: nothing was tested"
            os.kill(pid, sig)
            time.sleep(2.0 if sig == signal.SIGTERM else 0.2)  # SIGTERM: past the 1.5 s shutdown grace
            tracer.kill()
            code = w.server.wait_exit(10)
    left = files_in(rec)
    assert code == (-signal.SIGKILL if sig == signal.SIGKILL else 143)
    assert left and not [name for name in left if name.endswith(".wav")], left
    with wire(env) as w:
        w.status()
        deadline = time.monotonic() + 5
        while files_in(rec) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert files_in(rec) == [], "the next start kept an incomplete recording"
        done = w.call("capture_audio", {"duration_ms": 300})
        assert not done.get("isError"), done["content"][0]["text"]
    assert files_in(rec) == [Path(done["structuredContent"]["path"]).name]


# ===================================================================================== environment


def test_missing_portaudio_is_an_error_for_every_recording_tool(tmp_path, model_path, ollama):
    """Everything else is in place (voice_query checks Ollama before the microphone)."""
    env = server_env(env_without_portaudio(), OLLAMA_HOST=ollama.url, MCP_LISTEN_RECORDINGS_DIR=str(tmp_path / "rec"))
    with wire(env) as w:
        for tool in ("capture_audio", "transcribe_voice", "voice_query"):
            result = w.call(tool, {"whisper_model": str(model_path)} if tool != "capture_audio" else {})
            error = error_of(result)["error"]
            assert result["isError"] and (error["stage"], error["code"]) == ("capture", "portaudio_missing")
            assert "libportaudio2" in error["message"]
        assert w.status()["recording"] is False


def test_no_microphone_is_an_error_for_every_recording_tool(tmp_path, model_path, ollama):
    """Everything else is in place (voice_query checks Ollama before the microphone)."""
    env = server_env(env_no_input_devices(), OLLAMA_HOST=ollama.url, MCP_LISTEN_RECORDINGS_DIR=str(tmp_path / "rec"))
    with wire(env) as w:
        for tool in ("capture_audio", "transcribe_voice", "voice_query"):
            result = w.call(tool, {"whisper_model": str(model_path)} if tool != "capture_audio" else {})
            error = error_of(result)["error"]
            assert result["isError"] and (error["stage"], error["code"]) == ("capture", "no_input_device")
        assert w.status()["recording"] is False
    assert files_in(tmp_path / "rec") == []


SECRET = "sk-live-SECRET-7f3a9"
PRIVATE = "/home/alice/.ssh/id_ed25519"
BAD_VARIABLES = {
    "MCP_LISTEN_OLLAMA_TIMEOUT_S": f"abc {SECRET} {PRIVATE}",
    "MCP_LISTEN_LOG_LEVEL": f"LOUD{SECRET}{PRIVATE}",
    "MCP_LISTEN_WHISPER_THREADS": f"{SECRET}{PRIVATE}",
    "OLLAMA_HOST": f"ftp://{SECRET}@example.com{PRIVATE}",
    "MCP_LISTEN_MODELS_URL": f"file://{PRIVATE}?token={SECRET}",
}


@pytest.mark.parametrize("name", sorted(BAD_VARIABLES))
def test_invalid_environment_variable_is_named_by_every_call_without_its_value(tmp_path, name):
    """The server starts anyway (a client would only show "Failed to connect"), names the variable
    once on stderr and in every tool result, and never repeats the value: it may be a secret."""
    from rpc import RawServer

    env = server_env(MCP_LISTEN_RECORDINGS_DIR=str(tmp_path / "rec"), **{name: BAD_VARIABLES[name]})
    log = tmp_path / "stderr.log"
    with RawServer(env, stderr_path=log) as server:
        server.initialize()
        reply = server.call("tools/call", {"name": "get_status", "arguments": {}})["result"]
        server.close_stdin()
        assert server.wait_exit() == 0
        lines = list(server.lines)
    text = " ".join(block["text"] for block in reply["content"])
    assert reply["isError"] and "invalid_config" in text and name in text
    stderr = log.read_text(errors="replace")
    assert stderr.count(name) == 1, stderr
    for shown in (text, stderr):
        assert SECRET not in shown and PRIVATE not in shown and "alice" not in shown
    assert all(line.startswith(b'{"') for line in lines)
