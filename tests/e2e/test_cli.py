"""The debugging CLI, run as a real child process: same code paths as the tools, exit codes as documented."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
import wave
from pathlib import Path

import audio_assets as A
import pytest
from rpc import server_env
from vmic import env_no_input_devices

CLI = [sys.executable, "-m", "mcp_listen"]


def run(args, env, timeout=60, **kw):
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture
def env(vmic, tmp_path):
    return server_env(vmic.env, MCP_LISTEN_RECORDINGS_DIR=str(tmp_path / "rec"))


def test_version():
    from mcp_listen import __version__

    done = run(["--version"], server_env())
    assert done.returncode == 0 and done.stdout.strip() == f"mcp-listen {__version__}"


def test_devices_table_and_json(env):
    table = run(["devices"], env)
    listed = run(["devices", "--json"], env)
    assert table.returncode == 0 and listed.returncode == 0
    devices = json.loads(listed.stdout)
    default = next(d for d in devices if d["isDefault"])
    assert f"* {default['index']:>5}  {default['id']}" in table.stdout


def test_devices_kind_output_and_all(env):
    outputs = json.loads(run(["devices", "--kind", "output", "--json"], env).stdout)
    table = run(["devices", "--kind", "all"], env)
    wrong = run(["devices", "--kind", "speakers"], env)
    speaker = next(d for d in outputs if d["isDefaultOutput"])
    assert table.returncode == 0 and f"> {speaker['index']:>5}  {speaker['kind']:<6} {speaker['id']}" in table.stdout
    assert wrong.returncode == 64 and "speakers" in wrong.stderr


def test_capture_to_a_chosen_file(env, tmp_path):
    out = tmp_path / "take.wav"
    done = run(["capture", "--duration-ms", "500", "--out", str(out)], env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["path"] == str(out) and result["size_bytes"] == out.stat().st_size == 16044
    with wave.open(str(out)) as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getnframes()) == (16000, 1, 8000)


def test_capture_replaces_an_existing_file_only_with_force(env, tmp_path):
    out = tmp_path / "take.wav"
    out.write_bytes(b"precious")
    refused = run(["capture", "--duration-ms", "200", "--out", str(out)], env)
    assert refused.returncode == 64 and "--force" in refused.stderr and len(refused.stderr.splitlines()) == 1
    assert out.read_bytes() == b"precious"
    forced = run(["capture", "--duration-ms", "200", "--out", str(out), "--force"], env)
    assert forced.returncode == 0, forced.stderr
    assert out.stat().st_size == 6444 and sorted(p.name for p in tmp_path.iterdir()) == ["take.wav"]


def _fifo(folder):
    path = folder / "pipe"
    os.mkfifo(path)
    return path


def _folder(folder):
    path = folder / "folder"
    path.mkdir()
    return path


def _link(folder):
    victim = folder / "victim"
    victim.write_bytes(b"precious")
    path = folder / "link.wav"
    path.symlink_to(victim)
    return path


@pytest.mark.parametrize("force", [False, True], ids=["", "--force"])
@pytest.mark.parametrize("make", [_fifo, _folder, _link], ids=["FIFO", "folder", "symlink"])
def test_capture_never_replaces_anything_but_a_regular_file(tmp_path, make, force):
    """Refused before the microphone opens (no device is needed), in one line, nothing left."""
    target = make(tmp_path)
    before, kind = sorted(p.name for p in tmp_path.iterdir()), os.lstat(target).st_mode
    done = run(["capture", "--out", str(target), *(["--force"] if force else [])], server_env(), timeout=20)
    assert done.returncode == 64, done.stderr
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert os.lstat(target).st_mode == kind
    if target.is_symlink():
        assert (tmp_path / "victim").read_bytes() == b"precious"


def test_capture_refuses_a_device_node():
    """Checked only (as root the old code replaced /dev/full with a WAV): nothing is written."""
    from mcp_listen.audio.wavfile import UserFile
    from mcp_listen.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="device"):
        UserFile(Path("/dev/null"), replace=True).check()


def test_transcribe_refuses_a_fifo_at_once(tmp_path, model_path):
    done = run(["transcribe", str(_fifo(tmp_path)), "--whisper-model", str(model_path)], server_env(), timeout=30)
    assert done.returncode == 64 and "not a regular file" in done.stderr


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--log-level", "bogus", "devices"], "--log-level"),
        (["capture", "--duration-ms", "50"], "duration_ms"),
        (["capture", "--silence-ms", "500"], "silence_ms requires stop_on_silence"),
        (["capture", "--device", ""], "device"),
        (["bogus"], "invalid choice"),
        (["capture", "--duration-ms", "abc"], "invalid int value"),
    ],
)
def test_usage_errors_exit_64(env, tmp_path, args, needle):
    done = run(args, env)
    assert done.returncode == 64, (done.returncode, done.stderr)
    assert needle in done.stderr
    assert not (tmp_path / "rec").exists() or not any((tmp_path / "rec").iterdir())


def test_no_device_exits_69(tmp_path):
    env = server_env(env_no_input_devices(), MCP_LISTEN_RECORDINGS_DIR=str(tmp_path / "rec"))
    done = run(["capture", "--duration-ms", "200"], env)
    assert done.returncode == 69 and "No microphone found" in done.stderr


def test_invalid_environment_exits_78_naming_the_variable(tmp_path):
    secret = "hunter2-/home/alice/private"
    done = run(["devices"], server_env(MCP_LISTEN_OLLAMA_TIMEOUT_S=secret))
    assert done.returncode == 78
    assert "MCP_LISTEN_OLLAMA_TIMEOUT_S" in done.stderr and secret not in done.stderr


def test_transcribe_a_file(model_path, jfk_wav):
    done = run(["transcribe", str(jfk_wav), "--whisper-model", str(model_path)], server_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    text = json.loads(done.stdout)["transcription"].lower()
    assert "ask not what your country can do for you" in text


def test_transcribe_rejects_a_file_that_is_not_16k_mono(tmp_path, model_path):
    stereo = tmp_path / "stereo.wav"
    with wave.open(str(stereo), "wb") as wav:
        wav.setnchannels(2)
        wav.setsampwidth(2)
        wav.setframerate(44100)
        wav.writeframes(b"\0" * 4000)
    done = run(["transcribe", str(stereo), "--whisper-model", str(model_path)], server_env())
    assert done.returncode == 64 and "sox" in done.stderr


def test_models_lists_what_it_finds(tmp_path, model_path):
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "ggml-tiny.en.bin").symlink_to(model_path)
    env = server_env(WHISPER_MODEL_PATH=str(folder), HOME=str(tmp_path / "home"))
    listed = json.loads(run(["models", "--json"], env).stdout)
    assert [m["name"] for m in listed] == ["tiny.en"] and listed[0]["size_bytes"] == model_path.stat().st_size
    empty = run(["models"], server_env(HOME=str(tmp_path / "nohome")))
    assert empty.returncode == 69 and "mcp-listen models pull base.en" in empty.stdout


def _run_on_a_terminal(args, env, *, during=None, timeout=60.0) -> tuple[int, str]:
    """Run the CLI with stderr on a pseudo-terminal (as a person would); returns (code, terminal text)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([*CLI, *args], env=env, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    if during is not None:
        during()
    chunks = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=10)
    os.close(master)
    return proc.returncode, b"".join(chunks).decode(errors="replace")


def test_level_meter_shows_level_and_speech_on_a_terminal(env, vmic):
    clip = A.concat([A.silence(600), A.speech("one two three four five six seven"), A.silence(1500)])
    player = []

    def play():
        time.sleep(1.0)
        player.append(vmic.play(clip, block=False))

    code, screen = _run_on_a_terminal(
        ["capture", "--stop-on-silence", "--silence-ms", "800", "--duration-ms", "15000"], env, during=play
    )
    player[0].wait(timeout=30)
    assert code == 0, screen
    assert "dBFS" in screen and "speech" in screen and "Listening on" in screen


def test_serve_on_a_terminal_says_it_is_waiting_for_a_client(env):
    master, slave = pty.openpty()
    proc = subprocess.Popen(CLI, env=env, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    os.close(slave)
    assert proc.stderr is not None
    first_line = proc.stderr.readline()  # waits as long as a loaded machine needs to start it
    os.close(master)
    proc.terminate()
    _, err = proc.communicate(timeout=10)
    err = first_line + err
    assert b"MCP server" in err and b"claude mcp add mcp-listen" in err


def test_query_runs_the_whole_voice_query_from_a_terminal(env, vmic, ollama, model_path):
    ollama.reply = "Paris."
    env = dict(env, OLLAMA_HOST=ollama.url)
    clip = A.concat([A.silence(300), A.speech("What is the capital city of France?"), A.silence(2000)])
    proc = subprocess.Popen(
        [*CLI, "query", "--whisper-model", str(model_path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    time.sleep(2.5)
    vmic.play(clip)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    result = json.loads(out)
    assert set(result) == {"transcription", "response", "model", "end_reason"} and result["response"] == "Paris."
    assert "capital" in result["transcription"].lower()
    assert "capital" not in err.decode().lower(), "piped, the words so far stay out of stderr"


@pytest.mark.solo  # the words must be transcribed before the speaker stops: a loaded machine is too late
@pytest.mark.xdist_group("solo-cpu")
def test_listen_on_a_terminal_shows_the_words_while_the_user_speaks(env, vmic, model_path):
    first, second = "I went to the store to buy some bread and some milk for the", "children and for me."
    clip = A.concat([A.silence(300), A.speech(first), A.silence(600), A.speech(second), A.silence(2500)])
    player = []

    def play():
        time.sleep(2.5)
        player.append(vmic.play(clip, block=False))

    code, screen = _run_on_a_terminal(["listen", "--whisper-model", str(model_path)], env, during=play)
    player[0].wait(timeout=30)
    assert code == 0, screen
    heard_at = screen.lower().find("milk")
    assert 0 <= heard_at < screen.index("Recording finished"), screen  # shown before the recording ended
    assert "Partial transcript" not in screen, "on a terminal the words are the live line itself"


def test_listen_on_a_terminal_says_it_is_holding_while_the_user_thinks(env, vmic, model_path):
    """A thought left on "and": the live line shows "(holding: mid-sentence)" once silence_ms has passed,
    and the turn ends when --max-pause-ms runs out, which the last phase line names (4 s: on a busy machine
    whisper's guess at the pause, which the mark waits for, took over 2.5)."""
    clip = A.concat([A.silence(300), A.speech("I would like to buy some bread and"), A.silence(6500)])
    player = []

    def play():
        time.sleep(2.5)
        player.append(vmic.play(clip, block=False))

    args = ["listen", "--whisper-model", str(model_path), "--end-of-turn", "smart", "--max-pause-ms", "4000"]
    code, screen = _run_on_a_terminal(args, env, during=play)
    player[0].wait(timeout=30)
    assert code == 0, screen
    finished = screen.index("Recording finished")
    assert 0 <= screen.find("(holding: mid-sentence)") < finished, screen
    assert "max_pause" in screen[finished:].splitlines()[0], screen


def test_models_pull_downloads_verifies_and_lists(tmp_path, model_path):
    import functools
    import http.server
    import threading

    served = tmp_path / "served"
    served.mkdir()
    (served / "ggml-custom.en.bin").symlink_to(model_path)
    (served / "ggml-broken.bin").write_bytes(model_path.read_bytes()[:5_000_000])
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    home = tmp_path / "home"
    env = server_env(HOME=str(home), MCP_LISTEN_MODELS_URL=f"http://127.0.0.1:{httpd.server_port}")
    try:
        pulled = run(["models", "pull", "custom.en"], env, timeout=120)
        broken = run(["models", "pull", "broken"], env, timeout=120)
        missing = run(["models", "pull", "nothere"], env, timeout=120)
    finally:
        httpd.shutdown()
    target = home / ".mcp-listen" / "models" / "ggml-custom.en.bin"
    assert pulled.returncode == 0, pulled.stderr
    assert pulled.stdout.strip() == str(target) and target.stat().st_size == model_path.stat().st_size
    assert broken.returncode != 0 and missing.returncode != 0
    assert sorted(p.name for p in target.parent.iterdir()) == ["ggml-custom.en.bin"], "no partial or broken file"
    listed = json.loads(run(["models", "--json"], env).stdout)
    assert [m["name"] for m in listed] == ["custom.en"]


def test_voices_pull_downloads_verifies_lists_and_shows_the_card(tmp_path, piper_voice):
    """The piper-voices layout on a loopback server: the real en_US-joe-medium (pinned sha256), and a
    copy under another name that only voices.json's md5 and size vouch for."""
    import functools
    import hashlib
    import http.server
    import threading

    served = tmp_path / "served"
    joe = served / "en/en_US/joe/medium"
    joe.mkdir(parents=True)
    for suffix in (".onnx", ".onnx.json"):
        (joe / f"en_US-joe-medium{suffix}").symlink_to(piper_voice.with_name(f"en_US-joe-medium{suffix}"))
    (joe / "MODEL_CARD").symlink_to(piper_voice.with_name("en_US-joe-medium.MODEL_CARD"))
    copy = served / "en/en_GB/copy/low"
    copy.mkdir(parents=True)
    files = {}
    for suffix in (".onnx", ".onnx.json"):
        data = piper_voice.with_name(f"en_US-joe-medium{suffix}").read_bytes()
        (copy / f"en_GB-copy-low{suffix}").write_bytes(data)
        files[f"en/en_GB/copy/low/en_GB-copy-low{suffix}"] = {
            "size_bytes": len(data),
            "md5_digest": hashlib.md5(data).hexdigest(),
        }
    (served / "voices.json").write_text(json.dumps({"en_GB-copy-low": {"files": files}}))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    voices = tmp_path / "voices"
    env = server_env(MCP_LISTEN_VOICES_URL=f"http://127.0.0.1:{httpd.server_port}", MCP_LISTEN_VOICES_PATH=str(voices))
    try:
        pulled = run(["voices", "pull", "en_US-joe-medium"], env, timeout=120)
        listed_copy = run(["voices", "pull", "en_GB-copy-low"], env, timeout=120)
        missing = run(["voices", "pull", "en_US-nothere-low"], env, timeout=120)
        hostile = run(["voices", "pull", "../../etc/passwd"], env, timeout=120)
    finally:
        httpd.shutdown()
    assert pulled.returncode == 0, pulled.stderr
    assert pulled.stdout.strip() == str(voices / "en_US-joe-medium.onnx")
    assert "License: CC0" in pulled.stderr and "verified by sha256 (pinned)" in pulled.stderr
    assert listed_copy.returncode == 0 and "verified by md5 and size (voices.json)" in listed_copy.stderr
    assert missing.returncode == 69 and "HTTP 404" in missing.stderr
    assert hostile.returncode == 69 and "not a Piper voice name" in hostile.stderr
    assert sorted(p.name for p in voices.iterdir()) == [
        "en_GB-copy-low.onnx", "en_GB-copy-low.onnx.json",
        "en_US-joe-medium.MODEL_CARD", "en_US-joe-medium.onnx", "en_US-joe-medium.onnx.json",
    ], "no partial, nothing of the missing voice"  # fmt: skip
    listed = json.loads(run(["voices", "--json"], env).stdout)
    assert [(v["name"], v["valid"], v["sample_rate"]) for v in listed] == [
        ("en_GB-copy-low", True, 22050),
        ("en_US-joe-medium", True, 22050),
    ]
    table = run(["voices"], env)
    assert table.returncode == 0 and "en_US-joe-medium" in table.stdout and "22050 Hz" in table.stdout


def test_voices_lists_nothing_with_the_pull_command(tmp_path):
    env = server_env(MCP_LISTEN_VOICES_PATH=str(tmp_path / "none"))
    done = run(["voices"], env)
    assert done.returncode == 69 and "mcp-listen voices pull en_US-lessac-medium" in done.stdout


def test_voices_pull_into_a_file_names_the_file_and_what_to_do(tmp_path):
    a_file = tmp_path / "voices"
    a_file.write_text("not a folder")
    env = server_env(MCP_LISTEN_VOICES_PATH=str(a_file), MCP_LISTEN_VOICES_URL="http://127.0.0.1:9/none")
    done = run(["voices", "pull", "en_US-joe-medium"], env)
    assert done.returncode == 69 and f"{a_file} is a file, not a folder" in done.stderr, done.stderr
    assert "MCP_LISTEN_VOICES_PATH" in done.stderr and ".partial" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, "one message, no warnings about partials"


HIDE_PIPER = "import sys; sys.modules['piper'] = None; from mcp_listen.cli.main import main; sys.exit(main())"
"""mcp-listen without the speak extra: Piper hidden from the interpreter."""


@pytest.mark.parametrize("command", [["say", "Hello there."], ["converse", "Hello there."]], ids=lambda c: c[0])
def test_speaking_without_piper_is_a_missing_dependency_69_not_an_internal_error(tmp_path, command):
    done = subprocess.run([sys.executable, "-c", HIDE_PIPER, *command], env=server_env(HOME=str(tmp_path)),
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip
    assert done.returncode == 69, done.stderr
    assert "mcp-listen[speak]" in done.stderr and "Traceback" not in done.stderr and done.stdout == ""


def test_say_speaks_with_the_only_voice_installed_and_says_how_to_choose(tmp_path, piper_voice):
    """MCP_LISTEN_VOICE unset and the default en_US-lessac-medium absent: the voice there speaks."""
    out = tmp_path / "hello.wav"
    env = server_env(MCP_LISTEN_VOICES_PATH=str(piper_voice.parent), HOME=str(tmp_path))
    done = run(["say", "--save", str(out), "Hello there."], env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out) and out.stat().st_size > 10_000
    assert "en_US-lessac-medium is not installed: speaking with en_US-joe-medium" in done.stderr
    assert "MCP_LISTEN_VOICE" in done.stderr
    chosen = run(
        ["say", "--save", str(tmp_path / "no.wav"), "Hello."], {**env, "MCP_LISTEN_VOICE": "en_US-lessac-medium"}
    )
    assert chosen.returncode == 69 and "voices pull en_US-lessac-medium" in chosen.stderr, "the user's choice stands"
