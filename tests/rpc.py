"""Talking to the real server as a child process: the SDK's stdio client, or raw JSON-RPC lines.

The raw driver lets a test write several requests in one chunk, watch every byte
the child puts on stdout, send signals and close stdin.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

SERVER_CMD = [sys.executable, "-m", "mcp_listen"]
LEGACY_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")


def server_env(base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """A clean environment for the child: only what it needs, plus the test's additions."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV", "SYSTEMROOT")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(base or {})
    env.update(extra)
    env.setdefault("MCP_LISTEN_LOG_LEVEL", "INFO")
    return env


@asynccontextmanager
async def mcp_client(env: Mapping[str, str], *, mode: str = "legacy", **kw: Any) -> AsyncIterator[Any]:
    """The MCP SDK's own client over stdio, connected to `python -m mcp_listen`."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=SERVER_CMD[0], args=SERVER_CMD[1:], env=dict(env))
    async with Client(params, mode=mode, **kw) as client:
        yield client


class RawServer:
    """The server as a plain subprocess speaking newline-delimited JSON-RPC."""

    def __init__(self, env: Mapping[str, str], *, stderr_path: Path | None = None) -> None:
        self.stderr_file = open(stderr_path, "wb") if stderr_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            SERVER_CMD,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr_file,
            env=dict(env),
        )
        self.lines: list[bytes] = []
        self.messages: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._next_id = 0

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            try:
                self.messages.put(json.loads(line))
            except ValueError:
                self.messages.put({"unparseable": line.decode(errors="replace")})

    def send(self, *messages: dict[str, Any]) -> None:
        """Write all messages in one chunk, as one write()."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._next_id += 1
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            msg["params"] = params
        return msg

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 30) -> dict[str, Any]:
        msg = self.request(method, params)
        self.send(msg)
        return self.wait_for(msg["id"], timeout)

    def wait_for(self, request_id: int, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no response to request {request_id}")
            msg = self.messages.get(timeout=remaining)
            if msg.get("id") == request_id and ("result" in msg or "error" in msg):
                return msg

    def initialize(self, version: str = "2025-11-25") -> dict[str, Any]:
        reply = self.call(
            "initialize",
            {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "tests", "version": "0"}},
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return reply

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def wait_exit(self, timeout: float = 10) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._reader.join(timeout=5)
        if self.stderr_file is not subprocess.DEVNULL:
            self.stderr_file.close()

    def __enter__(self) -> RawServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def proc_memory_kb(pid: int) -> dict[str, int]:
    """VmRSS (now) and VmHWM (peak) of a live process, in kB, from /proc (Linux)."""
    values = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0])
    return values


def tool_call(server: RawServer, name: str, arguments: dict[str, Any], **meta: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if meta:
        params["_meta"] = meta
    return server.request("tools/call", params)


def structured(result: Any) -> dict[str, Any]:
    """Structured content of an SDK CallToolResult, checked against its one text block."""
    assert len(result.content) == 1 and result.content[0].type == "text"
    return result.structured_content


def error_of(result: Any) -> dict[str, Any]:
    """The JSON block of an error result (an SDK CallToolResult or a raw wire `result` dict):
    `{"error": {stage, code, message}, ...}`, checked against the wire shape every client sees —
    isError, no structuredContent, text blocks "Error: <message>" then the JSON."""
    if isinstance(result, dict):
        is_error, content = result.get("isError"), result["content"]
        assert "structuredContent" not in result, "an error result must not carry structuredContent"
        texts = [(block["type"], block.get("text")) for block in content]
    else:
        is_error, content = result.is_error, result.content
        assert result.structured_content is None, "an error result must not carry structuredContent"
        texts = [(block.type, getattr(block, "text", None)) for block in content]
    assert is_error is True, texts
    assert [kind for kind, _ in texts] == ["text", "text"], texts
    sentence, payload = texts[0][1], json.loads(texts[1][1])
    assert sentence == f"Error: {payload['error']['message']}", (sentence, payload)
    return payload
