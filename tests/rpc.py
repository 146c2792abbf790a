"""Talking to the real server as a child process: the SDK's stdio client, or raw JSON-RPC lines.

The raw driver lets a test write several requests in one chunk, watch every byte
the child puts on stdout, send signals and close stdin.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest

SERVER_CMD = [sys.executable, "-m", "mcp_listen"]
LISTENING_TOOLS = ("list_audio_devices", "capture_audio", "transcribe_voice", "voice_query", "get_status")
"""What every installation serves, in the listed order."""
ALL_TOOLS = (
    "list_audio_devices",
    "capture_audio",
    "transcribe_voice",
    "voice_query",
    "speak_text",
    "converse",
    "stop_speaking",
    "get_status",
)
"""With the speak extra (Piper), which the test extra brings: the suite's own server lists these."""
LEGACY_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")


def server_env(base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """A clean environment for the child: only what it needs, plus the test's additions."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV", "SYSTEMROOT")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(base or {})
    env.update(extra)
    env.setdefault("MCP_LISTEN_LOG_LEVEL", "INFO")
    env.setdefault("PYTHONFAULTHANDLER", "1")  # a native crash (SIGSEGV, SIGABRT) leaves every thread's stack on stderr
    return env


STDERR_TAIL = 6000
"""How much of a server's stderr a failure shows: its last characters."""


def tail_of(log: Any, limit: int = STDERR_TAIL) -> str:
    """The last `limit` characters of an open log file (text or binary), read without moving its writer."""
    try:
        log.flush()
        with open(log.fileno(), "rb", closefd=False) as raw:
            size = os.fstat(raw.fileno()).st_size
            data = os.pread(raw.fileno(), limit, max(0, size - limit))
    except (OSError, ValueError) as exc:
        return f"(the server's stderr could not be read: {exc})"
    return data.decode(errors="replace") or "(empty)"


def server_pids() -> set[int]:
    """This process's children that run mcp_listen (Linux's /proc; empty elsewhere)."""
    pids = set()
    for entry in Path("/proc").glob("[0-9]*") if Path("/proc/self/stat").exists() else []:
        try:
            stat = (entry / "stat").read_text()
            parent = int(stat.rpartition(")")[2].split()[1])
            if parent == os.getpid() and b"mcp_listen" in (entry / "cmdline").read_bytes():
                pids.add(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    return pids


def explain_failure(exc: BaseException, log: Any, pids: set[int]) -> None:
    """Attach to a failure inside a server's session what the server said and whether it is still alive, so
    a pipe closed mid-call tells a crash (its stack, with PYTHONFAULTHANDLER) from a test's mistake."""
    alive = {pid: Path(f"/proc/{pid}").exists() for pid in pids}
    state = ", ".join(f"pid {pid} {'alive' if up else 'gone'}" for pid, up in alive.items()) or "pid unknown"
    from timing import machine_load

    note = f"the server ({state}; {machine_load()}) wrote to stderr, last {STDERR_TAIL} characters:\n{tail_of(log)}"
    if hasattr(exc, "add_note"):  # Python 3.11+: shown with the traceback
        exc.add_note(note)
    else:
        print(note, file=sys.stderr)  # pytest shows it with the failure


@asynccontextmanager
async def mcp_client(env: Mapping[str, str], *, mode: str = "legacy", **kw: Any) -> AsyncIterator[Any]:
    """The MCP SDK's own client over stdio, connected to `python -m mcp_listen`."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=SERVER_CMD[0], args=SERVER_CMD[1:], env=dict(env))
    with tempfile.TemporaryFile("w+b") as log:  # the server's stderr, shown when the block fails
        before, pids = server_pids(), set()
        try:
            async with Client(stdio_client(params, errlog=log), mode=mode, **kw) as client:  # bytes: the fd is used
                pids = server_pids() - before
                yield client
        except Exception as exc:
            explain_failure(exc, log, pids)
            raise


class RawServer:
    """The server as a plain subprocess speaking newline-delimited JSON-RPC (or `command`, another one).
    SERVER_CMD is read when a server starts, not when this class was defined: tests replace it (the
    installed console script, the DNS sink's wrapper)."""

    def __init__(
        self, env: Mapping[str, str], *, stderr_path: Path | None = None, command: list[str] | None = None
    ) -> None:
        self.stderr_file = open(stderr_path, "wb") if stderr_path else tempfile.TemporaryFile("w+b")
        """The server's stderr: the test's file, else a temporary one (`stderr_tail` shows it on a failure)."""
        self.proc = subprocess.Popen(
            command or SERVER_CMD,
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
            try:
                msg = self.messages.get(timeout=max(remaining, 0))
            except queue.Empty:
                raise TimeoutError(
                    f"no response to request {request_id} in {timeout:g} s; {self.hung_stacks()}"
                ) from None
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
        self.stderr_file.close()

    def stderr_tail(self) -> str:
        """The server's exit status (or that it runs) and the last of its stderr, for a failure's message."""
        code = self.proc.poll()
        state = "still running" if code is None else f"exited with {code}"
        return f"the server (pid {self.proc.pid}) {state}; its stderr ends:\n{tail_of(self.stderr_file)}"

    def hung_stacks(self) -> str:
        """Abort a server that still runs so faulthandler (PYTHONFAULTHANDLER) writes every thread's stack
        to its stderr, then its tail: a hang's failure message shows where each thread waited."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGABRT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
        return self.stderr_tail()

    def __enter__(self) -> RawServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def until(predicate: Any, timeout: float) -> bool:
    """Poll `predicate` every 50 ms for up to `timeout` seconds; its last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


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


def error_payload(result: Any) -> dict[str, Any]:
    """The machine-readable part of an error result (checked against the wire shape)."""
    return error_of(result)


class Wire:
    """A RawServer plus bookkeeping: responses by id, notifications in order, arrival times.

    RawServer.wait_for drops every other message it reads; this keeps them all (a thread files
    each message as it arrives, with its arrival time), so a test can poll get_status while
    another call runs, or time the gap between two messages while it plays audio.
    """

    def __init__(self, server: RawServer) -> None:
        self.server = server
        self.responses: dict[int, dict[str, Any]] = {}
        self.arrived: dict[int, float] = {}
        self.notes: list[tuple[float, dict[str, Any]]] = []
        self._changed = threading.Condition()
        self._filer = threading.Thread(target=self._file, daemon=True)
        self._filer.start()

    def _file(self) -> None:
        while self.server.proc.poll() is None or not self.server.messages.empty():
            try:
                msg = self.server.messages.get(timeout=0.05)
            except queue.Empty:
                continue
            now = time.monotonic()
            with self._changed:
                if "id" in msg and ("result" in msg or "error" in msg):
                    self.responses[msg["id"]] = msg
                    self.arrived[msg["id"]] = now
                else:
                    self.notes.append((now, msg))
                self._changed.notify_all()

    def until(self, predicate: Any, timeout: float, what: str) -> Any:
        """Wait until predicate() is truthy (checked whenever a message arrives); return its value."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                value = predicate()
                if value:
                    return value
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"{what} within {timeout:g} s; {self.server.hung_stacks()}")
                if not self._filer.is_alive():  # the server exited and every message is filed
                    raise TimeoutError(f"{what}: {self.server.stderr_tail()}")
                self._changed.wait(min(remaining, 0.1))

    def start(self, name: str, arguments: dict[str, Any], **meta: Any) -> dict[str, Any]:
        request = tool_call(self.server, name, arguments, **meta)
        self.server.send(request)
        return request

    def wait(self, request_id: int, timeout: float = 30) -> dict[str, Any]:
        return self.until(lambda: self.responses.get(request_id), timeout, f"no response to request {request_id}")

    def call(self, name: str, arguments: dict[str, Any] | None = None, timeout: float = 30) -> dict[str, Any]:
        """A tool call's `result` (asserts it is a result, not a JSON-RPC error)."""
        reply = self.wait(self.start(name, arguments or {})["id"], timeout)
        assert "result" in reply, reply
        return reply["result"]

    def status(self) -> dict[str, Any]:
        return self.call("get_status")["structuredContent"]

    def wait_recording(self, min_elapsed_ms: int = 300, timeout: float = 15) -> None:
        """Until the microphone has delivered audio for a while (so the stream is really running)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.status()
            if status["recording"] and status["device"] and status["elapsed_ms"] >= min_elapsed_ms:
                return
            time.sleep(0.02)
        raise TimeoutError("the recording never started")

    def released_after(self, since: float, timeout: float = 10) -> float:
        """Seconds from `since` until get_status says the microphone is free."""
        deadline = since + timeout
        while time.monotonic() < deadline:
            if not self.status()["recording"]:
                return time.monotonic() - since
        raise TimeoutError("the microphone was never released")

    def cancel(self, request_id: int) -> float:
        self.server.send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": request_id, "reason": "test"},
            }
        )
        return time.monotonic()

    def progress_time(self, token: Any, text: str) -> float | None:
        """Arrival time of the first notifications/progress for `token` whose message contains `text`."""
        for when, note in list(self.notes):
            params = note.get("params") or {}
            if note.get("method") == "notifications/progress" and params.get("progressToken") == token:
                if text in (params.get("message") or ""):
                    return when
        return None

    def wait_progress(self, token: Any, text: str, timeout: float = 30) -> float:
        return self.until(lambda: self.progress_time(token, text), timeout, f"no progress message with {text!r}")


@contextmanager
def wire(env: dict[str, str], stderr_path: Path | None = None) -> Iterator[Wire]:
    with RawServer(env, stderr_path=stderr_path) as server:
        server.initialize()
        yield Wire(server)


def files_in(folder: Path) -> list[str]:
    return sorted(os.listdir(folder)) if folder.exists() else []


def assert_only_json_rpc(lines: list[bytes]) -> None:
    for line in lines:
        assert json.loads(line)["jsonrpc"] == "2.0", line[:200]


@contextmanager
def stalled(pid: int, syscall: str = "flock") -> Iterator[subprocess.Popen]:
    """Every `syscall` of process `pid` (all threads) stalls 30 s: strace delay injection, as when
    a disk hangs. The WAV writer is the only flock user: it stalls right after creating its file.
    A stalled thread dies only once strace lets go of it (kill the tracer: the block yields it)."""
    if shutil.which("strace") is None:
        pytest.fail("strace is needed to stall a write for real: apt-get install strace")
    tracer = subprocess.Popen(
        [
            "strace",
            "-f",
            "-qq",
            "-o",
            os.devnull,
            "-p",
            str(pid),
            "-e",
            f"trace={syscall}",
            "-e",
            f"inject={syscall}:delay_enter=30000000",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 10
        while "TracerPid:\t0" in Path(f"/proc/{pid}/status").read_text():
            assert tracer.poll() is None, tracer.stderr.read().decode(errors="replace")
            assert time.monotonic() < deadline, "strace did not attach"
            time.sleep(0.02)
        yield tracer
    finally:
        if tracer.poll() is None:
            tracer.kill()
        tracer.wait(10)
