"""`mcp-listen doctor` as a child process against real peers: the virtual microphone, the loopback
Ollama (tests/fake_ollama.py) and the real tiny.en whisper model — and each failure it must name."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import audio_assets
import pytest
from fake_ollama import FakeOllama, refused_url
from vmic import env_no_input_devices, env_without_portaudio

from mcp_listen.cli import doctor
from mcp_listen.errors import EXIT_OK, EXIT_UNAVAILABLE

ALL_TOOLS = ("list_audio_devices", "capture_audio", "transcribe_voice", "voice_query")


@pytest.fixture
def models_dir(tmp_path: Path, model_path: Path) -> Path:
    """A WHISPER_MODEL_PATH folder where the default name ggml-base.en.bin is the real tiny.en model."""
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "ggml-base.en.bin").symlink_to(model_path)
    return folder


def doctor_env(base: Mapping[str, str], tmp_path: Path, **extra: str) -> dict[str, str]:
    """`base` with a private HOME (so ~/.mcp-listen/models is empty) and the test's settings."""
    env = {k: v for k, v in base.items() if not k.startswith(("MCP_LISTEN_", "WHISPER_", "OLLAMA_"))}
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env.update(HOME=str(home), **extra)
    return env


def run_doctor(env: Mapping[str, str], *args: str, json_out: bool = True) -> tuple[int, Any, str]:
    cmd = [sys.executable, "-m", "mcp_listen", "doctor", *(["--json"] if json_out else []), *args]
    done = subprocess.run(cmd, env=dict(env), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    out = json.loads(done.stdout) if json_out else done.stdout
    return done.returncode, out, done.stderr


def checks_of(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in report["checks"]}


def voice_settings(piper_voice: Path) -> dict[str, str]:
    return {"MCP_LISTEN_VOICES_PATH": str(piper_voice.parent), "MCP_LISTEN_VOICE": piper_voice.stem}


def test_everything_in_place_hears_the_microphone_and_exits_0(vmic, ollama, models_dir, tmp_path, piper_voice):
    env = doctor_env(vmic.child_env(), tmp_path, OLLAMA_HOST=ollama.url, WHISPER_MODEL_PATH=str(models_dir),
                     **voice_settings(piper_voice))  # fmt: skip
    tone = audio_assets.tone(440, 15000, 0.5)  # amplitude 0.5: RMS -9 dBFS, peak -6 dBFS
    player = vmic.play(tone, block=False)
    try:
        code, report, stderr = run_doctor(env)
    finally:
        player.kill()
        player.wait()
    checks = checks_of(report)
    assert code == EXIT_OK, stderr
    assert report["ok"] is True and all(report["ready"][t] for t in ALL_TOOLS)
    assert report["ready"]["speak_text"] is True and report["ready"]["converse"] is True
    assert [c["id"] for c in report["checks"]] == [
        "config", "portaudio", "microphone", "audio", "vad", "whisper_model", "ollama", "ollama_model",
        "speak", "voice", "speaker", "barge_in", "one_speaker",
    ]  # fmt: skip
    assert all(c["status"] == "ok" and c["remedy"] is None for c in report["checks"]), report
    assert checks["microphone"]["data"]["device"]["isDefault"] is True
    audio = checks["audio"]["data"]
    assert audio["samples"] == 4800
    assert -30 < audio["level_dbfs"] < -6 and -8 < audio["peak_dbfs"] < -4, (
        audio
    )  # RMS is -9 unless the tone began late
    assert checks["whisper_model"]["data"]["path"] == str(models_dir / "ggml-base.en.bin")
    assert checks["ollama"]["data"] == {"host": ollama.url, "version": "0.12.0"}
    assert checks["ollama_model"]["data"] == {"model": "llama3.2"}
    assert ("GET", "/api/tags") in ollama.paths
    assert checks["voice"]["data"] == {"voice": "en_US-joe-medium", "path": str(piper_voice), "sample_rate": 22050}
    assert checks["speaker"]["data"]["device"]["isDefaultOutput"] is True


def test_text_report_marks_each_check_and_prints_the_remedy(vmic, tmp_path):
    env = doctor_env(vmic.child_env(), tmp_path, OLLAMA_HOST=refused_url(), PYTHONIOENCODING="utf-8")
    code, text, _ = run_doctor(env, json_out=False)
    assert code == EXIT_UNAVAILABLE
    lines = text.splitlines()
    assert any(line.startswith("✓ PortAudio") for line in lines)
    assert any(line.startswith("✗ Whisper model") for line in lines)
    assert any(line.startswith("✗ Ollama ") for line in lines)
    assert any(line.startswith("- Ollama model") for line in lines)
    assert any("→ " in line and line.endswith("mcp-listen models pull base.en") for line in lines)
    assert any("→ Start it: ollama serve" in line for line in lines)
    assert "Not ready: transcribe_voice, voice_query" in text


def test_text_report_falls_back_to_ascii_marks(vmic, tmp_path):
    env = doctor_env(vmic.child_env(), tmp_path, OLLAMA_HOST=refused_url(), PYTHONIOENCODING="ascii")
    code, text, stderr = run_doctor(env, json_out=False)
    assert code == EXIT_UNAVAILABLE, stderr
    assert text.isascii()
    assert (
        "ok PortAudio" in text
        and "XX Whisper model" in text
        and "mcp-listen models pull base.en" in text
        and "-> " in text
    )


def test_no_portaudio(vmic, ollama, models_dir, tmp_path):
    env = doctor_env(env_without_portaudio(vmic.child_env()), tmp_path, OLLAMA_HOST=ollama.url,
                     WHISPER_MODEL_PATH=str(models_dir))  # fmt: skip
    code, report, _ = run_doctor(env)
    checks = checks_of(report)
    assert code == EXIT_UNAVAILABLE and report["ok"] is False
    assert checks["portaudio"]["status"] == "fail"
    assert "sudo apt install libportaudio2" in checks["portaudio"]["remedy"]
    assert checks["microphone"]["status"] == checks["audio"]["status"] == "skip"
    assert not any(report["ready"][t] for t in ALL_TOOLS)
    assert checks["whisper_model"]["status"] == checks["ollama"]["status"] == "ok"  # the rest is still checked


def test_no_input_device(ollama, models_dir, tmp_path):
    env = doctor_env(env_no_input_devices(), tmp_path, OLLAMA_HOST=ollama.url, WHISPER_MODEL_PATH=str(models_dir))
    code, report, _ = run_doctor(env)
    checks = checks_of(report)
    assert code == EXIT_UNAVAILABLE
    assert checks["portaudio"]["status"] == "ok"
    assert checks["microphone"]["status"] == "fail"
    assert checks["microphone"]["detail"] == "No input device found."
    assert "Connect a microphone" in checks["microphone"]["remedy"]
    assert checks["audio"]["status"] == "skip"
    assert report["ready"] == {
        "list_audio_devices": True, "capture_audio": False, "transcribe_voice": False, "voice_query": False,
        "speak_text": False, "converse": False,
    }  # fmt: skip


def test_unknown_device_is_named(vmic, ollama, models_dir, tmp_path):
    env = doctor_env(vmic.child_env(), tmp_path, OLLAMA_HOST=ollama.url, WHISPER_MODEL_PATH=str(models_dir))
    code, report, _ = run_doctor(env, "--device", "ALSA:no such microphone")
    microphone = checks_of(report)["microphone"]
    assert code == EXIT_UNAVAILABLE
    assert microphone["status"] == "fail" and "ALSA:no such microphone" in microphone["detail"]
    assert microphone["remedy"].startswith("Use an id from: ") and microphone["remedy"].endswith("mcp-listen devices")


def test_silent_microphone_is_a_warning_not_a_failure(vmic, ollama, models_dir, tmp_path):
    env = doctor_env(vmic.child_env(), tmp_path, OLLAMA_HOST=ollama.url, WHISPER_MODEL_PATH=str(models_dir))
    code, report, _ = run_doctor(env)  # nothing plays into the virtual microphone: exact zeros
    audio = checks_of(report)["audio"]
    assert audio["status"] == "warn" and audio["data"]["level_dbfs"] is None
    assert "Privacy & Security > Microphone" in audio["remedy"]
    assert code == EXIT_OK and report["ready"]["voice_query"] is True


def test_missing_whisper_model(vmic, ollama, tmp_path):
    empty = tmp_path / "no-models"
    empty.mkdir()
    env = doctor_env(vmic.child_env(), tmp_path, OLLAMA_HOST=ollama.url, WHISPER_MODEL_PATH=str(empty))
    code, report, _ = run_doctor(env)
    model = checks_of(report)["whisper_model"]
    assert code == EXIT_UNAVAILABLE
    assert model["status"] == "fail" and model["data"]["code"] == "model_not_found"
    assert model["remedy"].endswith("mcp-listen models pull base.en")
    assert str(empty) in model["detail"]
    assert report["ready"]["capture_audio"] is True and report["ready"]["transcribe_voice"] is False


def test_missing_model_points_to_a_model_that_is_there(vmic, ollama, model_path, tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "ggml-tiny.en.bin").symlink_to(model_path)
    env = doctor_env(vmic.child_env(), tmp_path, OLLAMA_HOST=ollama.url, WHISPER_MODEL_PATH=str(folder))
    code, report, _ = run_doctor(env)
    assert code == EXIT_UNAVAILABLE
    assert "--whisper-model tiny.en" in checks_of(report)["whisper_model"]["remedy"]
    code, report, _ = run_doctor(env, "--whisper-model", "tiny.en")
    assert code == EXIT_OK and checks_of(report)["whisper_model"]["data"]["path"] == str(folder / "ggml-tiny.en.bin")


@pytest.mark.parametrize("kind", ["text file", "truncated model"])
def test_invalid_whisper_model(vmic, ollama, model_path, tmp_path, kind):
    folder = tmp_path / "models"
    folder.mkdir()
    bad = folder / "ggml-base.en.bin"
    if kind == "text file":
        bad.write_text("this is not a whisper model\n" * 100)
    else:
        with open(model_path, "rb") as src:
            bad.write_bytes(src.read(5_000_000))
    env = doctor_env(vmic.child_env(), tmp_path, OLLAMA_HOST=ollama.url, WHISPER_MODEL_PATH=str(folder))
    code, report, _ = run_doctor(env)
    model = checks_of(report)["whisper_model"]
    assert code == EXIT_UNAVAILABLE
    assert model["status"] == "fail" and model["data"]["code"] == "model_invalid"
    assert model["remedy"].startswith("the file is damaged or not a whisper.cpp model")
    assert "mcp-listen models pull base.en" in model["remedy"]


def test_explicit_model_path(vmic, ollama, model_path, tmp_path):
    env = doctor_env(vmic.child_env(), tmp_path, OLLAMA_HOST=ollama.url)
    code, report, _ = run_doctor(env, "--whisper-model", str(model_path))
    assert code == EXIT_OK
    assert checks_of(report)["whisper_model"]["data"]["path"] == str(model_path)


def test_ollama_refused(vmic, models_dir, tmp_path):
    host = refused_url()
    env = doctor_env(vmic.child_env(), tmp_path, OLLAMA_HOST=host, WHISPER_MODEL_PATH=str(models_dir))
    code, report, _ = run_doctor(env)
    checks = checks_of(report)
    assert code == EXIT_UNAVAILABLE
    assert checks["ollama"]["status"] == "fail" and host in checks["ollama"]["detail"]
    assert checks["ollama"]["remedy"].startswith("Start it: ollama serve")
    assert checks["ollama_model"]["status"] == "skip"
    assert report["ready"]["transcribe_voice"] is True and report["ready"]["voice_query"] is False


def test_model_not_pulled_then_another_model(vmic, models_dir, tmp_path):
    with FakeOllama(models=("qwen2.5:0.5b",)) as fake:
        env = doctor_env(vmic.child_env(), tmp_path, OLLAMA_HOST=fake.url, WHISPER_MODEL_PATH=str(models_dir))
        code, report, _ = run_doctor(env)
        missing = checks_of(report)["ollama_model"]
        other_code, other, _ = run_doctor(env, "--model", "qwen2.5:0.5b")
    assert code == EXIT_UNAVAILABLE
    assert checks_of(report)["ollama"]["status"] == "ok"
    assert missing["status"] == "fail" and missing["detail"] == "llama3.2 is not pulled."
    assert missing["remedy"] == "ollama pull llama3.2"
    assert other_code == EXIT_OK and checks_of(other)["ollama_model"]["detail"] == "qwen2.5:0.5b is pulled"


def test_ollama_errors_on_every_endpoint(vmic, models_dir, tmp_path):
    with FakeOllama(mode="500") as fake:
        env = doctor_env(vmic.child_env(), tmp_path, OLLAMA_HOST=fake.url, WHISPER_MODEL_PATH=str(models_dir))
        code, report, _ = run_doctor(env)
    ollama = checks_of(report)["ollama"]
    assert code == EXIT_UNAVAILABLE
    assert ollama["status"] == "fail" and "HTTP 500" in ollama["detail"]


# ----------------------------------------------------------------------------- pure parts


def test_portaudio_remedy_per_platform():
    assert "apt install libportaudio2" in doctor.portaudio_remedy("linux")
    assert "brew install portaudio" in doctor.portaudio_remedy("darwin")
    assert "reinstall" in doctor.portaudio_remedy("win32")


def test_warnings_do_not_block_and_failures_block_only_what_needs_them():
    def check(check_id: str, status: str) -> doctor.Check:
        return doctor.Check(check_id, check_id, status, "")

    base = {"config": "ok", "portaudio": "ok", "microphone": "ok", "audio": "warn", "vad": "ok", "whisper_model": "ok",
            "ollama": "ok", "ollama_model": "fail"}  # fmt: skip
    result = doctor.report([check(k, v) for k, v in base.items()])
    assert result["ready"] == {
        "list_audio_devices": True, "capture_audio": True, "transcribe_voice": True, "voice_query": False,
        "speak_text": False, "converse": False,
    }  # fmt: skip
    assert result["ok"] is False
    base["ollama_model"] = "ok"
    assert doctor.report([check(k, v) for k, v in base.items()])["ok"] is True


# ------------------------------------------------------------------ speech out


def test_a_missing_voice_names_the_pull_command_and_blocks_only_the_speaking_tools(vmic, ollama, models_dir, tmp_path):
    env = doctor_env(vmic.child_env(), tmp_path, OLLAMA_HOST=ollama.url, WHISPER_MODEL_PATH=str(models_dir))
    code, report, _ = run_doctor(env, "--voice", "en_US-amy-low")
    voice = checks_of(report)["voice"]
    assert code == EXIT_OK and report["ok"] is True, "voice_query needs no voice"
    assert voice["status"] == "fail" and "en_US-amy-low" in voice["detail"]
    assert voice["remedy"].endswith("mcp-listen voices pull en_US-amy-low")
    assert report["ready"]["speak_text"] is False and report["ready"]["converse"] is False
    assert report["ready"]["voice_query"] is True


def test_a_voice_file_piper_cannot_use_fails_with_a_remedy(vmic, ollama, models_dir, tmp_path, piper_voice):
    folder = tmp_path / "voices"
    folder.mkdir()
    (folder / "en_US-joe-medium.onnx").write_bytes(b"\x08\x07" + b"\x00" * 5000)  # an ONNX-looking truncated file
    (folder / "en_US-joe-medium.onnx.json").write_bytes(
        (piper_voice.parent / "en_US-joe-medium.onnx.json").read_bytes()
    )
    env = doctor_env(vmic.child_env(), tmp_path, OLLAMA_HOST=ollama.url, WHISPER_MODEL_PATH=str(models_dir),
                     MCP_LISTEN_VOICES_PATH=str(folder), MCP_LISTEN_VOICE="en_US-joe-medium")  # fmt: skip
    code, report, stderr = run_doctor(env)
    voice = checks_of(report)["voice"]
    assert voice["status"] == "fail", voice
    assert "Traceback" not in stderr
    assert "voices pull en_US-joe-medium" in voice["remedy"]
    assert report["ready"]["speak_text"] is False


def test_an_unknown_speaker_is_named(vmic, ollama, models_dir, tmp_path, piper_voice):
    env = doctor_env(vmic.child_env(), tmp_path, OLLAMA_HOST=ollama.url, WHISPER_MODEL_PATH=str(models_dir),
                     **voice_settings(piper_voice))  # fmt: skip
    code, report, _ = run_doctor(env, "--output-device", "ALSA:no such speaker")
    speaker = checks_of(report)["speaker"]
    assert speaker["status"] == "fail" and "ALSA:no such speaker" in speaker["detail"]
    assert speaker["remedy"].endswith("mcp-listen devices --kind output")
    assert checks_of(report)["voice"]["status"] == "ok" and report["ready"]["speak_text"] is False


def test_without_the_speak_extra_speaking_is_a_warning_and_listening_is_ready(vmic, ollama, models_dir, tmp_path):
    """Piper hidden from the interpreter, as in an install without the `speak` extra."""
    env = doctor_env(vmic.child_env(), tmp_path, OLLAMA_HOST=ollama.url, WHISPER_MODEL_PATH=str(models_dir))
    hide_piper = "import sys; sys.modules['piper'] = None; from mcp_listen.cli.main import main; sys.exit(main())"
    done = subprocess.run([sys.executable, "-c", hide_piper, "doctor"], env=env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)  # fmt: skip
    assert done.returncode == EXIT_OK, done.stderr
    assert "! Speech output" in done.stdout and "mcp-listen[speak]" in done.stdout and "GPL-3.0" in done.stdout
    assert "- Voice" in done.stdout and "not checked: needs the speak extra" in done.stdout
    assert "Not ready: speak_text, converse" in done.stdout and "Ready: list_audio_devices" in done.stdout


def test_the_only_voice_installed_stands_in_for_the_default(vmic, ollama, models_dir, tmp_path, piper_voice):
    """MCP_LISTEN_VOICE unset and en_US-lessac-medium absent: doctor checks the voice speak_text will use,
    and says how to choose; with MCP_LISTEN_VOICE set to the missing voice, that one is checked."""
    env = doctor_env(vmic.child_env(), tmp_path, OLLAMA_HOST=ollama.url, WHISPER_MODEL_PATH=str(models_dir),
                     MCP_LISTEN_VOICES_PATH=str(piper_voice.parent))  # fmt: skip
    _, report, _ = run_doctor(env)
    voice = checks_of(report)["voice"]
    assert voice["status"] == "ok" and voice["data"]["voice"] == "en_US-joe-medium", voice
    assert "en_US-lessac-medium is not installed" in voice["detail"] and "MCP_LISTEN_VOICE" in voice["detail"]
    _, chosen, _ = run_doctor({**env, "MCP_LISTEN_VOICE": "en_US-lessac-medium"})
    assert checks_of(chosen)["voice"]["status"] == "fail"
