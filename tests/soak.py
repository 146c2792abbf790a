#!/usr/bin/env python3
"""Soak: many calls in one server process; does anything pile up?

    python tests/soak.py [--captures 200] [--queries 50] [--json OUT]

One `python -m mcp_listen` child, driven over raw JSON-RPC, with a private virtual microphone
(tests/vmic.py) and a loopback Ollama (tests/fake_ollama.py):

1. `--captures` capture_audio calls of 100 ms, one after another;
2. `--queries` voice_query calls of 1 s (stop_on_silence false) while speech plays into the
   microphone without pause, so every call transcribes words and asks the fake Ollama.

Reported (stdout, and as JSON with --json): the child's VmRSS after a warm-up (20 captures and
5 queries) and at the end, its peak (VmHWM), thread count (/proc/PID/task) and open file
descriptors (/proc/PID/fd, where every open audio stream shows up as sockets/pipes) at the same
moments, VmRSS every 20 captures and every 10 queries (rss_trace_kb), files in the recordings folder that no call reported, and the exit code after stdin
closes. tests/e2e/test_soak.py runs it and asserts the bounds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import audio_assets as A  # noqa: E402
from fake_ollama import FakeOllama  # noqa: E402
from rpc import RawServer, proc_memory_kb, server_env, tool_call  # noqa: E402
from vmic import VirtualMic  # noqa: E402

WARM_CAPTURES = 20
WARM_QUERIES = 5
STORY = (
    "the lighthouse keeper climbed the stairs every evening to light the great lamp and watch the ships "
    "come home across the grey water while the wind sang in the windows and the gulls called over the rocks"
)


def model_path() -> Path:
    for candidate in filter(
        None, [os.environ.get("MCP_LISTEN_TEST_MODEL"), str(REPO / "tests" / "assets" / "ggml-tiny.en.bin")]
    ):
        if Path(candidate).is_file():
            return Path(candidate)
    raise SystemExit("no whisper test model: set MCP_LISTEN_TEST_MODEL")


def proc_figures(pid: int) -> dict[str, int]:
    figures = {"threads": len(os.listdir(f"/proc/{pid}/task")), "fds": len(os.listdir(f"/proc/{pid}/fd"))}
    return {**figures, **proc_memory_kb(pid)}


class Player(threading.Thread):
    """Plays speech into the microphone without a gap until stopped."""

    def __init__(self, mic: VirtualMic, clip: Path) -> None:
        super().__init__(daemon=True)
        self.mic, self.clip, self.stopping = mic, clip, threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            proc = self.mic.play(self.clip, block=False)
            while proc.poll() is None:
                if self.stopping.wait(0.05):
                    proc.kill()
            proc.wait()


def call(server: RawServer, name: str, args: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
    request = tool_call(server, name, args)
    server.send(request)
    return server.wait_for(request["id"], timeout)["result"]


def settle(pid: int, seconds: float = 1.0) -> dict[str, int]:
    """Figures after a short idle pause, so threads that are finishing have finished."""
    time.sleep(seconds)
    return proc_figures(pid)


def run(captures: int, queries: int, extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    model = model_path()
    rec_dir = Path(tempfile.mkdtemp(prefix="mcp-listen-soak-")) / "recordings"
    clip = A.speech(STORY)
    figures: dict[str, Any] = {"captures": captures, "queries": queries}
    with VirtualMic() as mic, FakeOllama(reply="a short reply") as ollama:
        env = server_env(
            mic.env,
            MCP_LISTEN_RECORDINGS_DIR=str(rec_dir),
            OLLAMA_HOST=ollama.url,
            MCP_LISTEN_LOG_LEVEL="WARNING",
            **(extra_env or {}),
        )
        with RawServer(env) as server:
            server.initialize()
            pid = server.proc.pid
            started = time.monotonic()
            reported: set[str] = set()
            failures: list[str] = []
            points: dict[str, dict[str, int]] = {}
            trace: list[int] = []
            for n in range(captures):
                if n == min(WARM_CAPTURES, captures - 1):
                    points["capture_warm"] = settle(pid)
                if n % 20 == 0:
                    trace.append(proc_figures(pid)["VmRSS"])
                result = call(server, "capture_audio", {"duration_ms": 100})
                if result.get("isError"):
                    failures.append(result["content"][0]["text"])
                else:
                    reported.add(Path(result["structuredContent"]["path"]).name)
            figures["captures_ok"] = captures - len(failures)
            figures["capture_seconds"] = round(time.monotonic() - started, 1)
            points["capture_end"] = settle(pid)
            player = Player(mic, clip)
            player.start()
            answered, began = 0, time.monotonic()
            try:
                for n in range(queries):
                    if n == min(WARM_QUERIES, queries - 1):
                        points["query_warm"] = settle(pid)
                    if n % 10 == 0:
                        trace.append(proc_figures(pid)["VmRSS"])
                    result = call(
                        server,
                        "voice_query",
                        {"duration_ms": 1000, "stop_on_silence": False, "whisper_model": str(model)},
                    )
                    if result.get("isError"):
                        failures.append(result["content"][0]["text"])
                    elif result["structuredContent"].get("response"):
                        answered += 1
            finally:
                player.stopping.set()
                player.join()
            figures["query_seconds"] = round(time.monotonic() - began, 1)
            figures["queries_answered"] = answered
            figures["ollama_requests"] = sum(1 for _, p in ollama.paths if p == "/api/chat")
            points["end"] = settle(pid)
            server.close_stdin()
            figures["exit_code"] = server.wait_exit(10)
        figures.update(_growth(points), rss_trace_kb=trace, failures=failures[:5])
    files = set(os.listdir(rec_dir)) if rec_dir.exists() else set()
    figures["leftover_files"] = sorted(files - reported)
    figures["unreported_files"] = sorted(reported - files)
    for name in files:
        (rec_dir / name).unlink()
    return figures


def _growth(points: dict[str, dict[str, int]]) -> dict[str, Any]:
    """Growth during the capture phase and during the query phase, each after its own warm-up
    (the whisper model, ~80 MB for tiny.en, is loaded during the first queries)."""
    cw, ce, qw, end = points["capture_warm"], points["capture_end"], points["query_warm"], points["end"]
    return {
        "rss_capture_warm_kb": cw["VmRSS"],
        "rss_capture_growth_kb": ce["VmRSS"] - cw["VmRSS"],
        "rss_query_warm_kb": qw["VmRSS"],
        "rss_query_growth_kb": end["VmRSS"] - qw["VmRSS"],
        "rss_end_kb": end["VmRSS"],
        "rss_peak_kb": end["VmHWM"],
        "threads": [cw["threads"], ce["threads"], qw["threads"], end["threads"]],
        "fds": [cw["fds"], ce["fds"], qw["fds"], end["fds"]],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--captures", type=int, default=200)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--json", type=Path, help="also write the figures here as JSON")
    parser.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra environment for the server, e.g. MALLOC_ARENA_MAX=2",
    )
    opts = parser.parse_args()
    figures = run(opts.captures, opts.queries, dict(item.split("=", 1) for item in opts.server_env))
    for key, value in figures.items():
        print(f"{key:>18}: {value}")
    if opts.json:
        opts.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
