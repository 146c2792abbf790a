"""A misbehaving Ollama behind the real server, on a real recording: no thread, socket, memory or
secret is held past the call's deadline (the unit tier tests the client alone, tests/unit/test_llm.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fake_ollama import FakeOllama
from rpc import error_of, until

SECRET_HOST_PARTS = ("alice", "s3cr")


def _server_error(result: dict) -> dict:
    """The error of a failed tool result: the one place that knows the wire shape of errors."""
    assert result.get("isError"), result
    return error_of(result)["error"]


def _tcp_sockets(pid: int) -> int:
    """TCP sockets the process holds open (its socket fds that /proc/PID/net/tcp{,6} lists)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    tcp = set()
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as rows:
            tcp.update(row.split()[9] for row in list(rows)[1:])
    return len(inodes & tcp)


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _voice_query(w, vmic, model_path: Path, **args) -> tuple[dict, float]:
    """One spoken voice_query; (result, seconds from 'Asking' to the answer)."""
    from speech_checks import said_clip

    request = w.start("voice_query", {"whisper_model": str(model_path), "silence_ms": 500, **args}, progressToken="q")
    w.wait_recording(min_elapsed_ms=0)
    vmic.play(said_clip())
    reply = w.wait(request["id"], 90)
    asked = w.progress_time("q", "Asking")
    assert asked is not None, "the words must have been heard and sent to Ollama"
    w.notes.clear()
    return reply["result"], w.arrived[request["id"]] - asked


@pytest.mark.long
def test_misbehaving_ollama_cannot_hold_threads_sockets_memory_or_secrets(vmic, model_path, tmp_path):
    from rpc import proc_memory_kb, server_env, wire

    log = tmp_path / "stderr.log"
    with FakeOllama() as fake, FakeOllama() as target:
        host = fake.url.replace("http://", "http://alice:s3cr%40t@")
        env = server_env(
            vmic.env,
            OLLAMA_HOST=host,
            MCP_LISTEN_OLLAMA_TIMEOUT_S="3",
            MCP_LISTEN_RECORDINGS_DIR=str(tmp_path / "rec"),
            MCP_LISTEN_LOG_LEVEL="DEBUG",
        )
        with wire(env, stderr_path=log) as w:
            pid = w.server.proc.pid
            result, _ = _voice_query(w, vmic, model_path)
            assert "You said" in result["structuredContent"]["response"]
            threads, sockets = _threads(pid), _tcp_sockets(pid)

            fake.mode = "drip"
            result, took = _voice_query(w, vmic, model_path)
            assert _server_error(result)["code"] == "timeout"
            assert took < 3 + 6, f"the 3 s deadline took {took:.1f} s"

            fake.mode = "flood"
            with open(f"/proc/{pid}/clear_refs", "w") as refs:
                refs.write("5")  # reset the peak RSS (VmHWM) to the current RSS
            before = proc_memory_kb(pid)["VmRSS"]
            result, _ = _voice_query(w, vmic, model_path)
            grew_mb = (proc_memory_kb(pid)["VmHWM"] - before) / 1024
            assert _server_error(result)["code"] == "reply_too_large"
            assert grew_mb < 120, f"a 100 MB reply raised the peak RSS by {grew_mb:.0f} MB"
            assert max(len(line) for line in w.server.lines) < 64 * 1024
            assert fake.sent < 32 * 1024 * 1024

            fake.mode, fake.redirect_to = "redirect", target.url  # llama3.2 passed the pre-check: it is cached
            result, _ = _voice_query(w, vmic, model_path)
            assert _server_error(result)["code"] == "ollama_redirect"
            assert target.paths == [], "the redirect target received the transcript"

            fake.mode = "ok"  # a model Ollama lacks is named before recording, quoted for the shell
            reply = w.wait(
                w.start("voice_query", {"whisper_model": str(model_path), "model": "llama3; rm -rf ~"})["id"], 30
            )
            assert "ollama pull 'llama3; rm -rf ~'" in _server_error(reply["result"])["message"]

            assert until(lambda: _tcp_sockets(pid) <= sockets, 5), f"{_tcp_sockets(pid)} TCP sockets, {sockets} before"
            assert until(lambda: _threads(pid) <= threads, 5), f"{_threads(pid)} threads, {threads} before"
            wire_text = b"".join(w.server.lines).decode(errors="replace")
    logged = log.read_text(errors="replace")
    assert "***@127.0.0.1" in wire_text, "the errors name the host, redacted"
    for secret in SECRET_HOST_PARTS:
        assert secret not in wire_text and secret not in logged, f"{secret!r} reached the client or the log"
