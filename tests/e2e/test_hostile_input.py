"""Hostile values the server meets outside the tool arguments, against the real server over stdio:
environment values that are not UTF-8, relative folders, and requests at and over the line limit.
The session never dies over a string it sends, every request read gets an answer, and no
recording stays on disk unreported."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from rpc import ALL_TOOLS, LISTENING_TOOLS, RawServer, error_of, proc_memory_kb, server_env, tool_call, wire

LATIN1_NAME = b"caf\xe9"
"""A folder named in a latin-1 locale: valid on Linux, not UTF-8."""


def _not_utf8(folder: Path) -> str:
    """`folder`/café in latin-1, as Python hands it over from the environment (a lone surrogate)."""
    path = os.fsencode(folder) + b"/" + LATIN1_NAME
    os.makedirs(path, exist_ok=True)
    return os.fsdecode(path)


@pytest.mark.parametrize(
    "name",
    [
        "MCP_LISTEN_OLLAMA_MODEL",
        "MCP_LISTEN_WHISPER_MODEL",
        "MCP_LISTEN_SYSTEM_PROMPT",
        "MCP_LISTEN_RECORDINGS_DIR",
        "TMPDIR",
        "WHISPER_MODEL_PATH",
        "HOME",
    ],
)
def test_a_value_that_is_not_utf8_never_kills_the_session(tmp_path, name):
    value = _not_utf8(tmp_path)
    env = server_env() if name == "TMPDIR" else server_env(MCP_LISTEN_RECORDINGS_DIR=str(tmp_path / "rec"))
    env[name] = value
    with RawServer(env) as server:
        assert "result" in server.initialize()
        listed = server.call("tools/list")["result"]["tools"]
        assert tuple(t["name"] for t in listed) == ALL_TOOLS
        for tool in LISTENING_TOOLS:
            reply = server.call("tools/call", {"name": tool, "arguments": {}})["result"]
            error = error_of(reply)["error"]
            assert error["code"] == "invalid_config" and "UTF-8" in error["message"], error
        server.close_stdin()
        assert server.wait_exit(10) == 0
    left = [files for _, _, files in os.walk(os.fsencode(value)) if files]
    assert left == [], "no recording may stay on disk"


def test_a_home_relative_recordings_folder_gives_absolute_paths(vmic, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = server_env(vmic.env, HOME=str(home), MCP_LISTEN_RECORDINGS_DIR="~/rec")
    with RawServer(env) as server:
        server.initialize()
        reply = server.call("tools/call", {"name": "capture_audio", "arguments": {"duration_ms": 200}})["result"]
    path = Path(reply["structuredContent"]["path"])
    assert path.is_absolute() and path.parent == home / "rec" and path.is_file()
    assert not Path("~").exists()


def test_the_largest_valid_call_is_read_and_answered():
    """100,000 emoji escaped as Python's json.dumps writes them: a 1.2 MB line."""
    prompt = "\U0001f600" * 100_000
    with RawServer(server_env()) as server:
        server.initialize()
        request = tool_call(server, "voice_query", {"prompt": prompt, "duration_ms": 1})
        line = json.dumps(request)
        assert len(line) > 1_200_000
        server.send(request)
        reply = server.wait_for(request["id"])["result"]
    assert "duration_ms" in error_of(reply)["error"]["message"]


@pytest.mark.parametrize("id_first", [True, False], ids=["id first (Python SDK)", "id last (TypeScript SDK)"])
def test_a_request_over_the_line_limit_gets_an_error_naming_the_limit(id_first):
    from mcp_listen.server.stdio import MAX_LINE_BYTES

    padding = "z" * (MAX_LINE_BYTES + 10)
    body = f'"method":"tools/call","params":{{"name":"get_status","arguments":{{"id":7,"x":"{padding}"}}}}'
    line = f'{{"jsonrpc":"2.0","id":"big",{body}}}' if id_first else f'{{{body},"jsonrpc":"2.0","id":"big"}}'
    with RawServer(server_env()) as server:
        server.initialize()
        server.proc.stdin.write(line.encode() + b"\n")
        server.proc.stdin.flush()
        reply = server.wait_for("big")
        after = server.call("tools/call", {"name": "get_status", "arguments": {}})
    assert reply["error"]["code"] == -32600
    assert str(MAX_LINE_BYTES) in reply["error"]["message"] and "too large" in reply["error"]["message"]
    assert after["result"]["isError"] is False


def test_a_huge_line_is_dropped_without_memory_growth(tmp_path):
    env = server_env(MCP_LISTEN_RECORDINGS_DIR=str(tmp_path / "rec"))
    size = 32 << 20
    log = tmp_path / "stderr.log"
    with wire(env, stderr_path=log) as w:
        w.call("get_status")
        before = proc_memory_kb(w.server.proc.pid)
        huge = tool_call(w.server, "voice_query", {"prompt": "x" * size})
        w.server.send(huge)
        near_limit = w.start("voice_query", {"prompt": "y" * 1_500_000})
        rejected = w.wait(near_limit["id"])["result"]
        after = proc_memory_kb(w.server.proc.pid)
        assert w.status()["recording"] is False
        answered = w.wait(huge["id"])
        assert answered["error"]["code"] == -32600 and "too large" in answered["error"]["message"]
        w.server.close_stdin()
        assert w.server.wait_exit(10) == 0
    grown_peak = (after["VmHWM"] - before["VmHWM"]) * 1024
    grown_rss = (after["VmRSS"] - before["VmRSS"]) * 1024
    print(f"\n32 MiB line: peak RSS +{grown_peak / 2**20:.1f} MiB, RSS +{grown_rss / 2**20:.1f} MiB")
    assert grown_peak < size / 4, f"peak memory grew by {grown_peak} bytes for a {size}-byte line"
    assert rejected["isError"] and error_of(rejected)["error"]["code"] == "invalid_argument"
    assert "prompt" in error_of(rejected)["error"]["message"]
    text = log.read_text()
    assert "dropped an inbound message of" in text and "xxxxxxxx" not in text


def test_a_huge_line_without_newline_then_eof_exits_cleanly(tmp_path):
    env = server_env(MCP_LISTEN_RECORDINGS_DIR=str(tmp_path / "rec"))
    with wire(env) as w:
        w.server.proc.stdin.write(
            b'{"jsonrpc": "2.0", "id": 99, "method": "tools/list", "params": {"a": "' + b"z" * (3 << 20)
        )
        w.server.close_stdin()
        assert w.server.wait_exit(10) == 0
