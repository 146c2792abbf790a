"""The benchmark's test rig: the real server as a child, its clock, the microphone's clock.

Reuses the test helpers (tests/vmic.py, tests/rpc.py, tests/fake_ollama.py,
tests/audio_assets.py) so the benchmark drives exactly what the tests drive: a
real `python -m mcp_listen` over stdio, a private PulseAudio virtual microphone,
and a real HTTP server on loopback standing in for Ollama.

Two clocks matter and both are `time.monotonic()` in this process:
- TimedServer stamps every line the server writes when it arrives here;
- Monitor is a second PortAudio client on the virtual microphone (4 ms blocks)
  whose callbacks give the wall-clock time at which each sample became
  available to any recorder, so "the last loud sample of the speech" has a time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import audio_assets
from fake_ollama import FakeOllama
from rpc import RawServer, server_env, tool_call
from vmic import VirtualMic, refresh_portaudio

RATE = 16000
CLK_TCK = os.sysconf("SC_CLK_TCK")

__all__ = [
    "FakeOllama",
    "Monitor",
    "Rig",
    "TimedServer",
    "VirtualMic",
    "audio_assets",
    "proc_stats",
    "tool_call",
]


# --------------------------------------------------------------------------- process figures


def proc_stats(pid: int) -> dict[str, float]:
    """RSS now and at peak (MB) and CPU time used so far (s, all threads) of a live process."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    out["cpu_s"] = (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime
    return out


def loaded_libraries(pid: int) -> set[str]:
    """File names of the shared objects mapped into a process (to prove what is not loaded)."""
    names = set()
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 6 and ".so" in parts[5]:
            names.add(Path(parts[5]).name)
    return names


# --------------------------------------------------------------------------- the server


class TimedServer(RawServer):
    """RawServer that stamps each reply and progress notification with its arrival time."""

    def __init__(self, env: Mapping[str, str], *, stderr_path: Path | None = None) -> None:
        self.replies: dict[int, tuple[float, dict[str, Any]]] = {}
        self.progress: list[tuple[float, dict[str, Any]]] = []
        self._cond = threading.Condition()
        self.spawned = time.monotonic()
        super().__init__(env, stderr_path=stderr_path)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            now = time.monotonic()
            try:
                msg = json.loads(line)
            except ValueError:
                msg = {"unparseable": line.decode(errors="replace")}
            with self._cond:
                if msg.get("method") == "notifications/progress":
                    self.progress.append((now, msg.get("params", {})))
                elif "id" in msg and ("result" in msg or "error" in msg):
                    self.replies[msg["id"]] = (now, msg)
                self._cond.notify_all()

    def initialize(self, version: str = "2025-11-25") -> dict[str, Any]:
        """The MCP handshake; returns the initialize reply."""
        rid, _ = self.send_request(
            "initialize",
            {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "0"},
            },
        )
        _, reply = self.reply(rid, timeout=30)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return reply

    def send_request(self, method: str, params: dict[str, Any] | None = None) -> tuple[int, float]:
        msg = self.request(method, params)
        sent = time.monotonic()
        self.send(msg)
        return msg["id"], sent

    def reply(self, request_id: int, timeout: float = 60) -> tuple[float, dict[str, Any]]:
        """(arrival time, message) of the reply to `request_id`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while request_id not in self.replies:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no reply to request {request_id}")
                if not self._reader.is_alive():
                    raise RuntimeError(f"the server exited ({self.proc.poll()}) before replying")
                self._cond.wait(0.5)
            return self.replies[request_id]

    def timed_call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 60) -> tuple[float, dict]:
        """Round trip in seconds and the reply message."""
        rid, sent = self.send_request(method, params)
        arrived, msg = self.reply(rid, timeout)
        return arrived - sent, msg

    def tool(self, name: str, arguments: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
        _, msg = self.timed_call("tools/call", {"name": name, "arguments": arguments}, timeout)
        result = msg.get("result") or {}
        if "error" in msg or result.get("isError"):
            raise RuntimeError(f"{name} failed: {json.dumps(msg)[:400]}")
        return result.get("structuredContent") or {}

    def start_tool(self, name: str, arguments: dict[str, Any], token: str) -> tuple[int, float]:
        """Send a tools/call asking for progress; returns (request id, time sent)."""
        msg = tool_call(self, name, arguments, progressToken=token)
        sent = time.monotonic()
        self.send(msg)
        return msg["id"], sent

    def progress_for(self, token: str) -> list[tuple[float, dict[str, Any]]]:
        with self._cond:
            return [(t, p) for t, p in self.progress if p.get("progressToken") == token]

    def wait_until_recording(self, timeout: float = 20.0) -> None:
        """Poll get_status (answers during a recording) until the stream is running."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            _, msg = self.timed_call("tools/call", {"name": "get_status", "arguments": {}})
            status = msg["result"]["structuredContent"]
            if status["recording"] and status["device"]:
                return
            time.sleep(0.02)
        raise TimeoutError("the recording never started")

    @property
    def stats(self) -> dict[str, float]:
        return proc_stats(self.proc.pid)


# --------------------------------------------------------------------------- the microphone's clock


class Monitor:
    """A second recorder on the virtual microphone: its samples and when each became available.

    4 ms blocks at low latency arrive within ~0.3 ms of each other's schedule (measured), so
    `t0 = min(callback time - samples so far / rate)` over nearby blocks is when sample 0
    would have arrived with the least delay any client sees; sample i is then at t0 + i/rate.
    """

    def __init__(self) -> None:
        import numpy as np
        import sounddevice as sd

        self._np = np
        self._times: list[float] = []
        self._blocks: list[Any] = []
        self.overflows = 0
        self._stream = sd.InputStream(
            samplerate=RATE,
            channels=1,
            dtype="int16",
            blocksize=0,
            latency="low",
            callback=self._callback,
        )
        self._stream.start()
        self._cache_n = 0
        self._samples = np.zeros(0, np.int16)
        self._ends = np.zeros(0, np.int64)
        self._tarr = np.zeros(0)

    def _callback(self, indata: Any, frames: int, when: Any, status: Any) -> None:
        if status.input_overflow:
            self.overflows += 1
        self._blocks.append(indata[:, 0].copy())
        self._times.append(time.monotonic())

    def close(self) -> None:
        self._stream.stop()
        self._stream.close()

    def _sync(self) -> None:
        np = self._np
        n = min(len(self._blocks), len(self._times))
        if n == self._cache_n:
            return
        new = self._blocks[self._cache_n : n]
        lengths = np.array([len(b) for b in new], dtype=np.int64)
        base = int(self._ends[-1]) if self._ends.size else 0
        self._samples = np.concatenate([self._samples, *new])
        self._ends = np.concatenate([self._ends, base + np.cumsum(lengths)])
        self._tarr = np.concatenate([self._tarr, np.array(self._times[self._cache_n : n])])
        self._cache_n = n

    def samples(self) -> Any:
        """Everything captured so far (int16); sample i became available at time_of(i)."""
        self._sync()
        return self._samples

    def recent(self, samples: int) -> Any:
        """The last `samples` captured, read from the newest blocks only: cheap enough to poll
        (samples() copies the whole stream)."""
        picked: list[Any] = []
        got, i = 0, min(len(self._blocks), len(self._times))
        while i > 0 and got < samples:
            i -= 1
            picked.append(self._blocks[i])
            got += len(self._blocks[i])
        if not picked:
            return self._np.zeros(0, self._np.int16)
        return self._np.concatenate(picked[::-1])[-samples:]

    def t0_near(self, index: int, span_s: float = 4.0) -> float:
        """Arrival time of sample 0 on the clock of the blocks within span_s of `index`."""
        self._sync()
        np = self._np
        span = int(span_s * RATE)
        near = (self._ends > index - span) & (self._ends < index + span)
        if not near.any():
            near = np.ones_like(self._ends, dtype=bool)
        return float(np.min(self._tarr[near] - self._ends[near] / RATE))

    def time_of(self, index: int) -> float:
        """When sample `index` (of the monitor's stream) became available."""
        return self.t0_near(index) + index / RATE

    def index_at(self, t: float) -> int:
        """The sample available at time t (inverse of time_of, global clock estimate)."""
        self._sync()
        np = self._np
        t0 = float(np.min(self._tarr - self._ends / RATE))
        return max(0, int((t - t0) * RATE))

    def find(self, played: Any, t_from: float, t_to: float) -> tuple[int, float]:
        """Index in the monitor's stream where `played` starts, searched in [t_from, t_to]; and the match."""
        self._sync()
        a = self.index_at(t_from)
        b = min(len(self._samples), self.index_at(t_to))
        region = self._samples[a:b]
        if len(region) < len(played):
            raise RuntimeError("the monitor did not capture the whole clip")
        lag, peak = audio_assets.xcorr_align(region, played)
        return a + lag, peak


# --------------------------------------------------------------------------- the whole rig


@contextmanager
def busy_cpus(count: int, nice: int = 0) -> Iterator[None]:
    """`count` other programs, each spinning one core at `nice`: the loaded laptop of the
    contention bench (a compiler or an indexer beside the agent)."""
    spin = "while True: pass"
    procs = [
        subprocess.Popen([sys.executable, "-c", spin], preexec_fn=(lambda: os.nice(nice)) if nice else None)
        for _ in range(count)
    ]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


class Rig:
    """Virtual microphone + loopback Ollama + monitor, and environments for server children."""

    def __init__(self, model_dir: Path, workdir: Path, threads: int = 2) -> None:
        self.workdir = workdir
        self.model_dir = model_dir
        self.threads = threads
        self.mic = VirtualMic().start()
        self.ollama = FakeOllama().start()
        # The client closes keep-alive connections the fake still reads from: not an error here.
        self.ollama._httpd.handle_error = lambda request, address: None  # type: ignore[union-attr]
        refresh_portaudio(self.mic.env)
        self.monitor: Monitor | None = None
        self._n = 0

    def env(self, **extra: str) -> dict[str, str]:
        if self.threads:  # 0: the server chooses per pass from what is free (its default)
            extra = {"MCP_LISTEN_WHISPER_THREADS": str(self.threads), **extra}
        return server_env(
            self.mic.env,
            WHISPER_MODEL_PATH=str(self.model_dir),
            OLLAMA_HOST=self.ollama.url,
            MCP_LISTEN_RECORDINGS_DIR=str(self.workdir / "recordings"),
            MCP_LISTEN_LOG_LEVEL="WARNING",
            **extra,
        )

    def server(self, **extra: str) -> TimedServer:
        self._n += 1
        server = TimedServer(self.env(**extra), stderr_path=self.workdir / f"server-{self._n}.log")
        server.initialize()
        return server

    def start_monitor(self) -> Monitor:
        if self.monitor is None:
            self.monitor = Monitor()
            time.sleep(0.3)
        return self.monitor

    def play(self, wav: Path) -> tuple[float, Any]:
        """Start playing a clip into the microphone; (time paplay was spawned, its Popen)."""
        t = time.monotonic()
        return t, self.mic.play(wav, block=False)

    def close(self) -> None:
        if self.monitor is not None:
            self.monitor.close()
        self.ollama.stop()
        self.mic.close()


def stop_player(proc: Any) -> None:
    """End a paplay we started (the clip's trailing silence is no longer needed)."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=5)
    except Exception:  # noqa: BLE001
        proc.kill()
