"""`mcp-listen config CLIENT`: the printed snippet parses, has the client's shape, and really starts the server."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from typing import Any

import pytest
import rpc

from mcp_listen.cli import client_config
from mcp_listen.errors import EXIT_OK, EXIT_USAGE, InvalidArgument

JSON_CLIENTS = {
    # client: (top-level key, extra fields in the entry)
    "claude-desktop": ("mcpServers", {}),
    "cursor": ("mcpServers", {}),
    "windsurf": ("mcpServers", {}),
    "chatgpt-desktop": ("mcpServers", {}),
    "vscode": ("servers", {"type": "stdio"}),
    "zed": ("context_servers", {}),
}
RUNNER_COMMANDS = {"pipx": ["pipx", "run", "mcp-listen"], "uvx": ["uvx", "mcp-listen"]}


def run_config(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mcp_listen", "config", *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env=rpc.server_env(PYTHONIOENCODING="utf-8"),
    )


def entry_of(client: str, stdout: str) -> dict[str, Any]:
    key, _ = JSON_CLIENTS[client]
    document = json.loads(stdout)
    assert list(document) == [key]
    assert list(document[key]) == ["mcp-listen"]
    return document[key]["mcp-listen"]


@pytest.mark.parametrize("runner", ["pipx", "uvx"])
@pytest.mark.parametrize("client", list(JSON_CLIENTS))
def test_json_clients(client, runner):
    done = run_config(client, "--runner", runner)
    assert done.returncode == EXIT_OK, done.stderr
    entry = entry_of(client, done.stdout)
    expected = RUNNER_COMMANDS[runner]
    _, extra = JSON_CLIENTS[client]
    assert entry == {**extra, "command": expected[0], "args": expected[1:]}
    assert done.stderr.strip(), "where the snippet goes is said on stderr"


def test_default_runner_is_pipx():
    entry = entry_of("claude-desktop", run_config("claude-desktop").stdout)
    assert [entry["command"], *entry["args"]] == ["pipx", "run", "mcp-listen"]


def test_env_vars_go_into_the_entry():
    done = run_config("cursor", "--env", "WHISPER_MODEL_PATH=/opt/whisper models", "--env", "OLLAMA_HOST=gpu-box:11434")
    entry = entry_of("cursor", done.stdout)
    assert entry["env"] == {"WHISPER_MODEL_PATH": "/opt/whisper models", "OLLAMA_HOST": "gpu-box:11434"}


def test_claude_code_command_line():
    done = run_config("claude-code")
    assert done.stdout.strip() == "claude mcp add mcp-listen -- pipx run mcp-listen"
    with_env = run_config("claude-code", "--runner", "uvx", "--env", "WHISPER_MODEL_PATH=/my models")
    words = shlex.split(with_env.stdout)
    # The name precedes -e: claude's -e takes several values and would swallow a name after it.
    assert words == [
        "claude",
        "mcp",
        "add",
        "mcp-listen",
        "-e",
        "WHISPER_MODEL_PATH=/my models",
        "--",
        "uvx",
        "mcp-listen",
    ]


def test_codex_toml():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    done = run_config("codex", "--runner", "local", "--env", 'MCP_LISTEN_LOG_LEVEL=DEBUG "quoted"')
    parsed = tomllib.loads(done.stdout)
    assert parsed == {
        "mcp_servers": {
            "mcp-listen": {
                "command": sys.executable,
                "args": ["-m", "mcp_listen"],
                "env": {"MCP_LISTEN_LOG_LEVEL": 'DEBUG "quoted"'},
            }
        }
    }


def test_local_runner_is_this_interpreter_unresolved():
    entry = entry_of("vscode", run_config("vscode", "--runner", "local").stdout)
    assert entry["command"] == sys.executable  # a venv's python stays the venv's, symlink or not
    assert entry["args"] == ["-m", "mcp_listen"]


def test_the_local_snippet_starts_a_working_server(monkeypatch):
    entry = entry_of("claude-desktop", run_config("claude-desktop", "--runner", "local").stdout)
    monkeypatch.setattr(rpc, "SERVER_CMD", [entry["command"], *entry["args"]])
    with rpc.RawServer(rpc.server_env()) as server:
        reply = server.initialize()
        listed = server.call("tools/list", {})
    assert reply["result"]["serverInfo"]["name"] == "mcp-listen"
    from mcp_listen.voice.synth import available

    names = tuple(t["name"] for t in listed["result"]["tools"])
    assert names == (rpc.ALL_TOOLS if available() else rpc.LISTENING_TOOLS)


@pytest.mark.parametrize(
    "args",
    [["no-such-client"], ["cursor", "--runner", "npx"], ["cursor", "--env", "NOEQUALS"], ["cursor", "--env", "=x"]],
)
def test_bad_usage_exits_64(args):
    done = run_config(*args)
    assert done.returncode == EXIT_USAGE
    assert done.stdout == ""
    assert done.stderr.strip()


def test_every_client_renders_for_every_runner():
    for client in client_config.CLIENTS:
        for runner in client_config.RUNNERS:
            snippet = client_config.render(client, runner, {"A": "1"}, python="/x/bin/python")
            assert snippet.text and snippet.where
            assert snippet.format in ("json", "toml", "shell")
            if snippet.format == "json":
                assert json.loads(snippet.text)
    with pytest.raises(InvalidArgument):
        client_config.render("nope")
    with pytest.raises(InvalidArgument):
        client_config.server_command("docker")


def test_parse_env():
    assert client_config.parse_env(["A=1", "B_2=x=y", "C="]) == {"A": "1", "B_2": "x=y", "C": ""}
    assert client_config.parse_env(None) == {}
    for bad in ("A", "=1", "A B=1"):
        with pytest.raises(InvalidArgument):
            client_config.parse_env([bad])
