"""The bench's rig, built on the test helpers (tests/vmic.py, rpc.py, fake_ollama.py, audio_assets.py) so the
bench drives what the tests drive: the real server as a child, the virtual microphone and speaker, a loopback
Ollama; and two clocks, TimedServer's and Monitor's (bench/README.md, "Two clocks")."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT / "tests", ROOT):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import audio_assets
from fake_ollama import FakeOllama
from rpc import RawServer, proc_memory_kb, server_env
from vmic import VirtualMic, refresh_portaudio

RATE = 16000
CLK_TCK = os.sysconf("SC_CLK_TCK")
TEST_MODEL = Path(os.environ.get("MCP_LISTEN_TEST_MODEL") or ROOT / "tests" / "assets" / "ggml-tiny.en.bin")
"""The whisper model of the test suite (tools/make_test_assets.py writes it), unless told another."""
SETTLE_S = 0.15  # the pause between "the stream is running" and starting the clip


def proc_stats(pid: int) -> dict[str, float]:
    """RSS now and at peak (MB) and CPU time used so far (s, all threads) of a live process."""
    out: dict[str, float] = {k: kb / 1024 for k, kb in proc_memory_kb(pid).items()}
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    out["cpu_s"] = (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime
    return out


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, every: float = 0.005) -> float:
    """Poll `predicate` every `every` s until it holds: when it did; TimeoutError(what) after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(every)
    return time.monotonic()


class TimedServer(RawServer):
    """RawServer that stamps each reply and progress notification with its arrival time; as a context
    manager, closed as a client closes it."""

    def __init__(self, env: Mapping[str, str], *, stderr_path: Path | None = None, **options: Any) -> None:
        self.replies: dict[int, tuple[float, dict[str, Any]]] = {}
        self.progress: list[tuple[float, dict[str, Any]]] = []
        self._cond = threading.Condition()
        self.log = stderr_path
        super().__init__(env, stderr_path=stderr_path, **options)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            now = time.monotonic()
            try:
                msg = json.loads(line)
            except ValueError:
                msg = {"unparseable": line.decode(errors="replace")}
            self.messages.put(msg)  # RawServer's own calls (initialize) read them there
            with self._cond:
                if msg.get("method") == "notifications/progress":
                    self.progress.append((now, msg.get("params", {})))
                elif "id" in msg and ("result" in msg or "error" in msg):
                    self.replies[msg["id"]] = (now, msg)
                self._cond.notify_all()

    def start(self, method: str, params: dict[str, Any] | None = None) -> tuple[int, float]:
        """Write a request; (its id, the time just before it was written)."""
        msg, sent = self.request(method, params), time.monotonic()
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
        rid, sent = self.start(method, params)
        arrived, msg = self.reply(rid, timeout)
        return arrived - sent, msg

    def tool(self, name: str, arguments: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
        """A tool call's structured result; a refusal or error stops the bench (no figure without it)."""
        return structured(self.timed_call("tools/call", {"name": name, "arguments": arguments}, timeout)[1])

    def start_tool(self, name: str, arguments: dict[str, Any], token: str) -> tuple[int, float]:
        """A tools/call asking for progress: (request id, time written)."""
        return self.start("tools/call", {"name": name, "arguments": arguments, "_meta": {"progressToken": token}})

    def progress_for(self, token: str) -> list[tuple[float, dict[str, Any]]]:
        with self._cond:
            return [(t, p) for t, p in self.progress if p.get("progressToken") == token]

    def notice(self, token: str, text: str) -> float | None:
        """Arrival of the first progress notification of `token` whose message starts with `text`."""
        return next((t for t, p in self.progress_for(token) if str(p.get("message", "")).startswith(text)), None)

    def wait_until_recording(self, timeout: float = 20.0) -> None:
        """Poll get_status (answers during a recording) until the stream is running."""
        running = lambda: (status := self.tool("get_status", {}))["recording"] and status["device"]  # noqa: E731
        wait_for(running, timeout, "the recording never started", every=0.02)

    @property
    def stats(self) -> dict[str, float]:
        return proc_stats(self.proc.pid)

    def __exit__(self, *exc: object) -> None:
        """stdin closed: the server exits 0 by itself; killed if it does not."""
        with contextlib.suppress(Exception):  # already gone, or slow to exit: stop() kills it
            self.close_stdin()
            self.wait_exit(timeout=10)
        self.stop()


def structured(msg: dict[str, Any]) -> dict[str, Any]:
    result = msg.get("result") or {}
    if "error" in msg or result.get("isError"):
        raise RuntimeError(f"the call failed: {json.dumps(msg)[:400]}")
    return result.get("structuredContent") or {}


class Monitor:
    """A second recorder on the virtual device: its samples and when each became available. Its 4 ms blocks
    arrive within ~0.3 ms of their schedule (measured), so t0 = min(callback time − samples so far / rate)
    over nearby blocks is when sample 0 came with the least delay any client sees; sample i at t0 + i/rate."""

    def __init__(self) -> None:
        import numpy as np
        import sounddevice as sd

        self._np = np
        self._times: list[float] = []
        self._blocks: list[Any] = []
        self._cache_n = 0  # blocks already in the arrays below
        self._samples, self._ends, self._tarr = np.zeros(0, np.int16), np.zeros(0, np.int64), np.zeros(0)
        self._stream = sd.InputStream(
            samplerate=RATE, channels=1, dtype="int16", blocksize=0, latency="low", callback=self._callback
        )
        self._stream.start()

    def _callback(self, indata: Any, frames: int, when: Any, status: Any) -> None:
        self._blocks.append(indata[:, 0].copy())
        self._times.append(time.monotonic())

    def __enter__(self) -> Monitor:
        time.sleep(0.3)  # the stream is running
        return self

    def __exit__(self, *exc: object) -> None:
        self._stream.stop()
        self._stream.close()

    def _sync(self) -> None:
        np, n = self._np, min(len(self._blocks), len(self._times))
        if n == self._cache_n:
            return
        new = self._blocks[self._cache_n : n]
        base = int(self._ends[-1]) if self._ends.size else 0
        self._samples = np.concatenate([self._samples, *new])
        self._ends = np.concatenate([self._ends, base + np.cumsum([len(b) for b in new])])
        self._tarr = np.concatenate([self._tarr, np.array(self._times[self._cache_n : n])])
        self._cache_n = n

    def samples(self) -> Any:
        """Everything captured so far (int16); sample i became available at time_of(i)."""
        self._sync()
        return self._samples

    def time_of(self, index: int, span_s: float = 4.0) -> float:
        """When sample `index` became available, on the clock of the blocks within span_s of it."""
        self._sync()
        span = int(span_s * RATE)
        near = (self._ends > index - span) & (self._ends < index + span)
        if not near.any():
            near = self._np.ones_like(self._ends, dtype=bool)
        return float(self._np.min(self._tarr[near] - self._ends[near] / RATE)) + index / RATE

    def index_at(self, t: float) -> int:
        """The sample available at time t (inverse of time_of, global clock estimate)."""
        self._sync()
        return max(0, int((t - float(self._np.min(self._tarr - self._ends / RATE))) * RATE))

    def find(self, played: Any, t_from: float, t_to: float) -> tuple[int, float]:
        """Index in the monitor's stream where `played` starts, searched in [t_from, t_to]; and the match."""
        self._sync()
        a, b = self.index_at(t_from), min(len(self._samples), self.index_at(t_to))
        if b - a < len(played):
            raise RuntimeError("the monitor did not capture the whole clip")
        lag, peak = audio_assets.xcorr_align(self._samples[a:b], played)
        return a + lag, peak


@contextlib.contextmanager
def busy_cpus(count: int, nice: int = 0) -> Iterator[None]:
    """`count` other programs, each spinning one core at `nice`: the loaded laptop of the contention
    bench (a compiler or an indexer beside the agent)."""
    nicer = (lambda: os.nice(nice)) if nice else None
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=nicer) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


class Rig:
    """Virtual microphone + loopback Ollama + monitor, and environments for server children. As a context
    manager it closes them all, and removes its workdir if it made one (no `workdir` given)."""

    def __init__(self, model_dir: Path, workdir: Path | None = None, threads: int = 2) -> None:
        self._made = None if workdir else tempfile.TemporaryDirectory(prefix="mcp-listen-bench-")
        self.workdir = workdir or Path(self._made.name)
        self.model_dir, self.threads = model_dir, threads
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
        return server_env(self.mic.env, WHISPER_MODEL_PATH=str(self.model_dir), OLLAMA_HOST=self.ollama.url,
                          MCP_LISTEN_RECORDINGS_DIR=str(self.workdir / "recordings"),
                          **{"MCP_LISTEN_LOG_LEVEL": "WARNING", **extra})  # fmt: skip

    def server(self, env: Mapping[str, str] | None = None, **extra: str) -> TimedServer:
        """A fresh server, initialized, in `env` or the rig's (with `extra`); its log in the workdir."""
        self._n += 1
        server = TimedServer(env or self.env(**extra), stderr_path=self.workdir / f"server-{self._n}.log")
        server.initialize()
        return server

    def start_monitor(self) -> Monitor:
        if self.monitor is None:
            self.monitor = Monitor().__enter__()
        return self.monitor

    def play_during(self, server: TimedServer, tool: str, args: dict, wav: Path, token: str, timeout: float = 90,
                    settle: float = SETTLE_S, check: bool = True) -> dict:  # fmt: skip
        """Start `tool`, play `wav` once the microphone runs (and `settle` s more), wait for the result:
        t_play (paplay spawned), t_reply, and the structured result (`check`: a failed call stops the bench)."""
        rid, _ = server.start_tool(tool, args, token)
        server.wait_until_recording()
        time.sleep(settle)
        t_play, player = time.monotonic(), self.mic.play(wav, block=False)
        try:
            t_reply, msg = server.reply(rid, timeout=timeout)
        finally:
            stop_player(player)
        result = structured(msg) if check else (msg.get("result") or {}).get("structuredContent") or {}
        return {"t_play": t_play, "t_reply": t_reply, "result": result}

    def speech_end(self, clip: Any, t_play: float, t_reply: float) -> dict[str, float]:
        """When the clip's last loud sample reached the microphone (monitor clock), found by
        cross-correlation (the capture is bit-exact); ValueError or RuntimeError if it never did."""
        monitor = self.start_monitor()
        time.sleep(0.05)  # let the monitor's last blocks in
        ref, offset = clip.reference()
        start, peak = monitor.find(ref, t_play - 0.5, t_reply + 0.05)
        return {"monitor_start": start - offset,
                "t_speech_end": monitor.time_of(start + clip.last_loud - offset + 1),
                "play_start_latency_ms": (monitor.time_of(start - offset) - t_play) * 1000}  # fmt: skip

    def __enter__(self) -> Rig:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.monitor is not None:
            self.monitor.__exit__()
        self.ollama.stop()
        self.mic.close()
        if self._made is not None:
            self._made.cleanup()


def stop_player(proc: Any) -> None:
    """End a paplay we started (the clip's trailing silence is no longer needed)."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=5)
    except Exception:  # noqa: BLE001
        proc.kill()
