"""A drop-in for Node-edition users (issue 12, items 2-7), through the real server as a child process.

Defaults set once in the client's env, Node-style device ids and language names, model files
found where the Node edition finds them, Ollama checked before anyone speaks, transcripts kept
when Ollama fails afterwards, a misconfigured server that still starts and says what to fix,
and remedies that name a command the user has.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from fake_ollama import refused_url
from rpc import ALL_TOOLS, RawServer, error_payload, mcp_client, server_env
from speech_checks import QUESTION, call_while_playing, spoken, wer

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def models(tmp_path: Path, model_path: Path) -> Path:
    """A WHISPER_MODEL_PATH folder holding the real tiny.en model under a name of the user's choosing."""
    folder = tmp_path / "models"
    (folder / "sub").mkdir(parents=True)
    (folder / "ggml-mine.bin").symlink_to(model_path)
    (folder / "sub" / "nested.bin").symlink_to(model_path)
    return folder


def base_env(vmic, tmp_path: Path, **extra: str) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return server_env(vmic.env, HOME=str(home), MCP_LISTEN_RECORDINGS_DIR=str(tmp_path / "rec"), **extra)


# ------------------------------------------------------------------ defaults set once (item 4)


async def test_defaults_come_from_the_client_config(vmic, tmp_path, models, ollama):
    ollama.models = ["qwen-test:latest"]
    ollama.reply = "Paris."
    env = base_env(
        vmic, tmp_path, OLLAMA_HOST=ollama.url, WHISPER_MODEL_PATH=str(models),
        MCP_LISTEN_WHISPER_MODEL="mine", MCP_LISTEN_LANGUAGE="English", MCP_LISTEN_OLLAMA_MODEL="qwen-test",
        MCP_LISTEN_SYSTEM_PROMPT="Answer in one word.", MCP_LISTEN_SILENCE_MS="700",
    )  # fmt: skip
    async with mcp_client(env) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        query = tools["voice_query"]
        props = query.input_schema["properties"]
        assert props["whisper_model"]["default"] == "mine" and "Default mine." in props["whisper_model"]["description"]
        assert props["language"]["default"] == "en"
        assert props["model"]["default"] == "qwen-test" and "qwen-test" in query.description
        assert props["prompt"]["default"] == "Answer in one word."
        assert props["silence_ms"]["default"] == 700
        assert "model mine, language en" in tools["transcribe_voice"].description
        result = await call_while_playing(client, vmic, "voice_query", {}, spoken(QUESTION))
    assert not result.is_error, result.content[0].text
    assert result.structured_content["model"] == "qwen-test"
    assert wer(QUESTION, result.structured_content["transcription"]) <= 0.35
    chat = [r for r in ollama.requests if "messages" in r][-1]
    assert chat["model"] == "qwen-test"
    assert chat["messages"][0] == {"role": "system", "content": "Answer in one word."}


# ------------------------------------------------------------------ a misconfigured server (item 6)


async def test_a_misconfigured_server_starts_and_every_tool_says_what_to_fix(vmic, tmp_path):
    stderr = tmp_path / "stderr.log"
    env = base_env(vmic, tmp_path, MCP_LISTEN_SILENCE_MS="soon", OLLAMA_HOST="ftp://nowhere")
    with RawServer(env, stderr_path=stderr) as server:
        assert "result" in server.initialize()
        listed = server.call("tools/list")["result"]["tools"]
        assert tuple(t["name"] for t in listed) == ALL_TOOLS
        for name in ALL_TOOLS:
            reply = server.call("tools/call", {"name": name, "arguments": {}})["result"]
            assert reply["isError"] is True
            text = " ".join(block["text"] for block in reply["content"])
            assert "MCP_LISTEN_SILENCE_MS" in text and "OLLAMA_HOST" in text and "invalid_config" in text
            assert "restart the server" in text and "soon" not in text and "ftp://nowhere" not in text
        server.close_stdin()
        assert server.wait_exit() == 0
    logged = stderr.read_text()
    assert logged.count("MCP_LISTEN_SILENCE_MS") == 1, logged
    assert "soon" not in logged


def test_doctor_reports_the_configuration_and_checks_the_configured_model(vmic, tmp_path, models):
    env = base_env(vmic, tmp_path, WHISPER_MODEL_PATH=str(models), MCP_LISTEN_WHISPER_MODEL="mine",
                   MCP_LISTEN_LANGUAGE="klingon", OLLAMA_HOST=refused_url())  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "mcp_listen", "doctor", "--json"], env=env, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)  # fmt: skip
    checks = {c["id"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["config"]["status"] == "fail" and "MCP_LISTEN_LANGUAGE" in checks["config"]["detail"]
    assert checks["config"]["data"]["defaults"]["whisper_model"] == "mine"
    assert checks["whisper_model"]["status"] == "ok" and checks["whisper_model"]["data"]["wanted"] == "mine"


def test_other_cli_commands_refuse_a_bad_environment(tmp_path):
    env = server_env(HOME=str(tmp_path), MCP_LISTEN_SILENCE_MS="0")
    done = subprocess.run([sys.executable, "-m", "mcp_listen", "devices"], env=env, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip
    assert done.returncode == 78 and "MCP_LISTEN_SILENCE_MS" in done.stderr


# ------------------------------------------------------------------ nothing said is lost (item 3)


CODES = {"refused": "ollama_unreachable", "not_pulled": "model_not_pulled", "redirect": "ollama_redirect"}


@pytest.mark.parametrize("failure", list(CODES))
async def test_ollama_is_checked_before_the_microphone_opens(vmic, tmp_path, models, ollama, failure):
    host = refused_url() if failure == "refused" else ollama.url
    ollama.models = ["someone-else:latest"]
    ollama.mode = "redirect" if failure == "redirect" else "ok"
    env = base_env(vmic, tmp_path, OLLAMA_HOST=host, WHISPER_MODEL_PATH=str(models))
    async with mcp_client(env) as client:
        started = time.monotonic()
        result = await client.call_tool("voice_query", {"whisper_model": "mine", "model": "llama3.2"})
        took = time.monotonic() - started
        status = (await client.call_tool("get_status", {})).structured_content
    error = error_payload(result)["error"]
    assert error["code"] == CODES[failure]
    assert error["stage"] == "llm"
    assert took < 8, "a recording ran: nobody spoke, so it would have waited out the 10 s no-speech timeout"
    assert status["recording"] is False


async def test_ollama_gone_while_the_user_speaks_keeps_the_transcript(vmic, tmp_path, models, ollama):
    env = base_env(vmic, tmp_path, OLLAMA_HOST=ollama.url, WHISPER_MODEL_PATH=str(models))
    async with mcp_client(env) as client:

        async def stop_ollama_then_speak() -> None:
            from speech_checks import wait_until_recording

            await wait_until_recording(client)
            ollama.stop()
            await anyio.to_thread.run_sync(lambda: vmic.play(spoken(QUESTION)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_ollama_then_speak)
            result = await client.call_tool("voice_query", {"whisper_model": "mine"})
    data = error_payload(result)
    assert data["error"]["code"] == "ollama_unreachable" and "ollama serve" in data["error"]["message"]
    assert wer(QUESTION, data["transcription"]) <= 0.35 and data["response"] is None


async def test_empty_reply_keeps_the_node_shape(vmic, tmp_path, models, ollama):
    ollama.mode = "empty"
    env = base_env(vmic, tmp_path, OLLAMA_HOST=ollama.url, WHISPER_MODEL_PATH=str(models))
    async with mcp_client(env) as client:
        result = await call_while_playing(client, vmic, "voice_query", {"whisper_model": "mine"}, spoken(QUESTION))
    data = error_payload(result)
    assert data["error"]["code"] == "empty_response"
    assert {"transcription", "response", "model", "message"} <= set(data)
    assert data["response"] is None and data["model"] == "llama3.2" and "empty response" in data["message"]
    assert wer(QUESTION, data["transcription"]) <= 0.35


# ------------------------------------------------------------------ Node-edition arguments (item 5)


@pytest.mark.parametrize("device", ["alsa:vmic", "ALSA:VMIC", "vmic", "VMic", "vmi"])
async def test_node_device_ids_and_names_select_the_device(vmic, tmp_path, device):
    async with mcp_client(base_env(vmic, tmp_path)) as client:
        result = await client.call_tool("capture_audio", {"duration_ms": 300, "device": device})
    assert not result.is_error, result.content[0].text
    assert result.structured_content["duration_ms"] == 300


async def test_an_unknown_language_is_refused_before_recording(vmic, tmp_path, models):
    async with mcp_client(base_env(vmic, tmp_path, WHISPER_MODEL_PATH=str(models))) as client:
        started = time.monotonic()
        result = await client.call_tool("transcribe_voice", {"whisper_model": "mine", "language": "klingon"})
        took = time.monotonic() - started
    error = error_payload(result)["error"]
    assert error["code"] == "invalid_argument" and "klingon" in error["message"] and "portuguese" in error["message"]
    assert took < 5


@pytest.mark.parametrize("language", ["english", "en-US", ""])
async def test_language_names_and_empty_model_work_end_to_end(vmic, tmp_path, models, language):
    env = base_env(vmic, tmp_path, WHISPER_MODEL_PATH=str(models), MCP_LISTEN_WHISPER_MODEL="mine")
    sentence = "Remind me to call my mother tomorrow."
    async with mcp_client(env) as client:
        result = await call_while_playing(
            client, vmic, "transcribe_voice", {"whisper_model": "", "language": language}, spoken(sentence)
        )
    assert not result.is_error, result.content[0].text
    assert result.structured_content["language"] == "en"
    assert wer(sentence, result.structured_content["transcription"]) <= 0.3


@pytest.mark.parametrize("name,where", [("nested.bin", "cwd"), ("sub/nested.bin", "model_path")])
async def test_model_files_are_found_where_the_node_edition_finds_them(vmic, tmp_path, models, name, where):
    cwd = tmp_path / "work"
    cwd.mkdir()
    if where == "cwd":
        (cwd / name).symlink_to(models / "sub" / "nested.bin")
    env = base_env(vmic, tmp_path, WHISPER_MODEL_PATH=str(models))
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "mcp_listen"], env=env, cwd=str(cwd))
    sentence = "Remind me to call my mother tomorrow."
    async with Client(params) as client:
        result = await call_while_playing(client, vmic, "transcribe_voice", {"whisper_model": name}, spoken(sentence))
    assert not result.is_error, result.content[0].text
    assert wer(sentence, result.structured_content["transcription"]) <= 0.3


@pytest.mark.parametrize(
    "name,code,says",
    [
        ("~nosuchuser-mcp-listen/ggml-x.bin", "model_not_found", "no such user"),
        ("~nosuchuser-mcp-listen", "model_not_found", "no such user"),
        ("/tmp/" + "d" * 300 + "/ggml-x.bin", "model_unreadable", "Cannot look for the whisper model"),
    ],
)
async def test_paths_the_system_cannot_look_into_are_named_errors(vmic, tmp_path, name, code, says):
    """Not internal_error: a home folder of nobody, a path the OS refuses to look up (as root no
    folder is unreadable, so a name too long for the file system stands in for EACCES)."""
    async with mcp_client(base_env(vmic, tmp_path)) as client:
        result = await client.call_tool("transcribe_voice", {"whisper_model": name})
    error = error_payload(result)["error"]
    assert error["code"] == code and says in error["message"]


async def test_a_prompt_of_32000_characters_reaches_ollama(vmic, tmp_path, models, ollama):
    prompt = ("Answer briefly. " * 2000)[:32000]
    env = base_env(vmic, tmp_path, OLLAMA_HOST=ollama.url, WHISPER_MODEL_PATH=str(models))
    async with mcp_client(env) as client:
        result = await call_while_playing(
            client, vmic, "voice_query", {"whisper_model": "mine", "prompt": prompt}, spoken(QUESTION)
        )
    assert not result.is_error, result.content[0].text
    chat = [r for r in ollama.requests if "messages" in r][-1]
    assert chat["messages"][0]["content"] == prompt


# ------------------------------------------------------------------ remedies the user can run (item 7)


@pytest.mark.parametrize(
    "prefix,expected",
    [("pipx/.cache/0123abcd", "pipx run mcp-listen"), ("uv/archive-v0/Xy12", "uvx mcp-listen")],
)
def test_remedies_name_the_runner_that_started_the_server(tmp_path, prefix, expected):
    """A real virtual environment where pipx run / uvx put theirs, with the mark each leaves (pipx's
    pipx_metadata.json, the `uv` line of uv's pyvenv.cfg): the remedy names that runner."""
    venv = tmp_path / prefix
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    if expected.startswith("pipx"):
        main = {"main_package": {"package_or_url": "mcp-listen"}}
        (venv / "pipx_metadata.json").write_text(json.dumps(main), encoding="utf-8")
    else:
        with open(venv / "pyvenv.cfg", "a", encoding="utf-8") as cfg:
            cfg.write("uv = 0.9.0\n")
    code = "from mcp_listen.errors import command; print(command('models', 'pull', 'base.en'))"
    env = server_env(PYTHONPATH=str(REPO))
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == f"{expected} models pull base.en"


def test_remedies_quote_caller_strings(tmp_path):
    code = "from mcp_listen.errors import command; print(command('models', 'pull', 'x; rm -rf ~'))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().endswith("models pull 'x; rm -rf ~'")


async def test_missing_model_remedy_is_a_command_that_exists(vmic, tmp_path):
    """From a checkout no `mcp-listen` is on PATH: the remedy names the venv's own script."""
    async with mcp_client(base_env(vmic, tmp_path)) as client:
        result = await client.call_tool("transcribe_voice", {"whisper_model": "small.en"})
    message = error_payload(result)["error"]["message"]
    runnable = message.rsplit("Download it with: ", 1)[1].split(" models pull ")[0]
    assert message.endswith("models pull small.en")
    assert runnable == "mcp-listen" or Path(runnable).is_file() or runnable.endswith("-m mcp_listen")
