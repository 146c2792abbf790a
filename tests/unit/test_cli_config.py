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


# ------------------------------------------------------------------------------ the speak extra

SPEAK_COMMANDS = {
    "pipx": ["pipx", "run", "--spec", "mcp-listen[speak]", "mcp-listen"],
    "uvx": ["uvx", "--from", "mcp-listen[speak]", "mcp-listen"],  # uv's docs: `uvx --from 'mypy[faster-cache]' mypy`
}


def command_in(snippet: client_config.Snippet) -> list[str]:
    """The command line a snippet makes its client run, read back as the client reads it."""
    if snippet.format == "json":
        (entry,) = next(iter(json.loads(snippet.text).values())).values()
        return [entry["command"], *entry["args"]]
    if snippet.format == "toml":
        tomllib = pytest.importorskip("tomllib")  # Python 3.11+
        (entry,) = tomllib.loads(snippet.text)["mcp_servers"].values()
        return [entry["command"], *entry["args"]]
    words = shlex.split(snippet.text)
    return words[words.index("--") + 1 :]


@pytest.mark.parametrize("runner", ["pipx", "uvx"])
@pytest.mark.parametrize("client", list(client_config.CLIENTS))
def test_speak_starts_the_server_with_the_speak_extra_in_every_client(client, runner):
    assert command_in(client_config.render(client, runner, speak=True)) == SPEAK_COMMANDS[runner]
    assert command_in(client_config.render(client, runner)) == RUNNER_COMMANDS[runner]


def test_the_speak_option_on_the_command_line():
    done = run_config("claude-code", "--speak")
    assert done.returncode == EXIT_OK, done.stderr
    assert done.stdout.strip() == "claude mcp add mcp-listen -- pipx run --spec 'mcp-listen[speak]' mcp-listen"
    entry = entry_of("cursor", run_config("cursor", "--runner", "uvx", "--speak").stdout)
    assert [entry["command"], *entry["args"]] == SPEAK_COMMANDS["uvx"]


def test_speak_with_the_local_runner_needs_piper_here():
    from mcp_listen.voice.synth import available

    assert available(), "the test environment has the speak extra"
    entry = entry_of("vscode", run_config("vscode", "--runner", "local", "--speak").stdout)
    assert [entry["command"], *entry["args"]] == [sys.executable, "-m", "mcp_listen"]
    hide_piper = "import sys; sys.modules['piper'] = None; from mcp_listen.cli.main import main; sys.exit(main())"
    done = subprocess.run([sys.executable, "-c", hide_piper, "config", "vscode", "--runner", "local", "--speak"],
                          capture_output=True, text=True, timeout=60, env=rpc.server_env())  # fmt: skip
    assert done.returncode == EXIT_USAGE and done.stdout == ""
    assert "pip install 'mcp-listen[speak]'" in done.stderr and "--runner pipx" in done.stderr


# ------------------------------------------------------- pipx run and uvx: temporary environments


def _pipx_run_venv(root, spec: str):
    """A venv as `pipx run --spec SPEC` leaves it (pipx 1.18, measured: ~/.cache/pipx/<hash>/ holding
    pipx_metadata.json with the spec as given)."""
    prefix = root / ".cache" / "pipx" / "259c55a8e99e498"
    prefix.mkdir(parents=True)
    (prefix / "pipx_metadata.json").write_text(
        json.dumps({"main_package": {"package": "mcp-listen", "package_or_url": spec}})
    )
    return prefix


def _uvx_venv(root, url: str | None):
    """An environment as `uvx --from X` leaves it (uv 0.13, measured: <cache>/archive-v0/<hash>/, a
    pyvenv.cfg naming uv, direct_url.json when X was a path)."""
    prefix = root / "uv-cache" / "archive-v0" / "Qeum4mtCi7geHnp1"
    info = prefix / "lib" / "python3.11" / "site-packages" / "mcp_listen-0.1.0.dist-info"
    info.mkdir(parents=True)
    (prefix / "pyvenv.cfg").write_text("home = /usr/bin\nimplementation = CPython\nuv = 0.13.10\n")
    if url:
        (info / "direct_url.json").write_text(json.dumps({"url": url, "dir_info": {}}))
    return prefix


def test_remedies_under_pipx_run_and_uvx_name_them_not_their_cache(tmp_path):
    from mcp_listen.errors import temporary_launcher

    assert temporary_launcher(_pipx_run_venv(tmp_path / "a", "mcp-listen")).command == "pipx run mcp-listen"
    clone = temporary_launcher(_pipx_run_venv(tmp_path / "b", "/src/my clone"))
    assert (clone.command, clone.install) == (
        "pipx run --spec '/src/my clone' mcp-listen",
        "pipx install '/src/my clone'",
    )
    speak = temporary_launcher(_pipx_run_venv(tmp_path / "c", "mcp-listen[speak]"))
    assert speak.command == "pipx run --spec 'mcp-listen[speak]' mcp-listen"
    assert temporary_launcher(_uvx_venv(tmp_path / "d", None)).command == "uvx mcp-listen"
    wheel = temporary_launcher(_uvx_venv(tmp_path / "e", "file:///dist/mcp_listen-0.1.0-py3-none-any.whl"))
    assert (wheel.runner, wheel.command) == ("uvx", "uvx --from /dist/mcp_listen-0.1.0-py3-none-any.whl mcp-listen")
    installed = tmp_path / "pipx" / "venvs" / "mcp-listen"  # `pipx install`: no cache, mcp-listen is on PATH
    installed.mkdir(parents=True)
    (installed / "pipx_metadata.json").write_text("{}")
    assert temporary_launcher(installed) is None and temporary_launcher(tmp_path / "venv") is None


def test_the_local_runner_refuses_a_pipx_run_cache(tmp_path):
    """`pipx run mcp-listen config X --runner local` would point the client at pipx's cache: the CLI run
    with sys.prefix at a pipx run venv's layout (tests/install/test_packaging.py runs the real pipx)."""
    prefix = _pipx_run_venv(tmp_path, "mcp-listen")
    code = "import sys; sys.prefix = sys.argv.pop(1); from mcp_listen.cli.main import main; sys.exit(main())"
    done = subprocess.run([sys.executable, "-c", code, str(prefix), "config", "cursor", "--runner", "local"],
                          capture_output=True, text=True, timeout=60, env=rpc.server_env())  # fmt: skip
    assert done.returncode == EXIT_USAGE and done.stdout == "", done.stderr
    assert "pipx install mcp-listen" in done.stderr and "--runner pipx" in done.stderr and str(prefix) in done.stderr
