"""Soak: many calls in one server process; does anything pile up?

    python bench/soak.py [--captures 200] [--queries 50] [--json OUT]

One server on the rig: `--captures` capture_audio calls of 100 ms, then `--queries` voice_query calls of
1 s (stop_on_silence false) while speech plays into the microphone without a pause, so every call
transcribes words and asks the loopback Ollama. Reported: RSS, peak, threads and open descriptors after
each phase's warm-up (20 captures, 5 queries) and at its end, RSS every 20 captures and 10 queries,
files in the recordings folder no call reported, and the exit code after stdin closes.
tests/e2e/test_soak.py runs it and bounds the figures.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rig import TEST_MODEL, Rig, TimedServer
from rig import audio_assets as A
from stats import cli, save_report

WARM = {"capture": 20, "query": 5}
STORY = (
    "the lighthouse keeper climbed the stairs every evening to light the great lamp and watch the ships "
    "come home across the grey water while the wind sang in the windows and the gulls called over the rocks"
)


def figures(pid: int, settle: float = 1.0) -> dict[str, int]:
    """Threads, descriptors (every open audio stream shows up as sockets or pipes) and memory in kB,
    after a short idle pause so threads that are finishing have finished."""
    time.sleep(settle)
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {"threads": len(os.listdir(f"/proc/{pid}/task")), "fds": len(os.listdir(f"/proc/{pid}/fd")),
            **{k: int(status[k].split()[0]) for k in ("VmRSS", "VmHWM")}}  # fmt: skip


def phase(server: TimedServer, name: str, calls: int, args: dict[str, Any], every: int, out: dict) -> list[dict]:
    """`calls` calls of one tool; figures at the warm-up and the end, RSS every `every` calls."""
    results = []
    for n in range(calls):
        if n == min(WARM[name], calls - 1):
            out[f"{name}_warm"] = figures(server.proc.pid)
        if n % every == 0:
            out["rss_trace_kb"].append(figures(server.proc.pid, 0)["VmRSS"])
        tool = "capture_audio" if name == "capture" else "voice_query"
        results.append(server.timed_call("tools/call", {"name": tool, "arguments": args}, 60)[1]["result"])
    out[f"{name}_end"] = figures(server.proc.pid)
    return results


def soak(captures: int, queries: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="mcp-listen-soak-"))
    rig, points = Rig(TEST_MODEL.parent, work, threads=0), {"rss_trace_kb": []}
    stopping = threading.Event()

    def play() -> None:  # speech into the microphone without a gap until stopped
        while not stopping.is_set():
            proc = rig.mic.play(A.speech(STORY), block=False)
            while proc.poll() is None and not stopping.wait(0.05):
                pass
            proc.kill()
            proc.wait()

    try:
        server = rig.server()
        done = phase(server, "capture", captures, {"duration_ms": 100}, 20, points)
        player = threading.Thread(target=play, daemon=True)
        player.start()
        try:
            args = {"duration_ms": 1000, "stop_on_silence": False, "whisper_model": str(TEST_MODEL)}
            answered = phase(server, "query", queries, args, 10, points)
        finally:
            stopping.set()
            player.join()
        server.close_stdin()
        exit_code = server.wait_exit(10)
        ollama_requests = sum(1 for _, p in rig.ollama.paths if p == "/api/chat")
    finally:
        rig.close()
        files = set(os.listdir(work / "recordings")) if (work / "recordings").exists() else set()
        shutil.rmtree(work, ignore_errors=True)
    failures = [r["content"][0]["text"] for r in done + answered if r.get("isError")]
    reported = {Path(r["structuredContent"]["path"]).name for r in done if not r.get("isError")}
    cw, ce, qw, end = (points[k] for k in ("capture_warm", "capture_end", "query_warm", "query_end"))
    return {"captures": captures, "queries": queries, "captures_ok": sum(not r.get("isError") for r in done),
            "queries_answered": sum(bool(r.get("structuredContent", {}).get("response")) for r in answered),
            "ollama_requests": ollama_requests, "exit_code": exit_code, "failures": failures[:5],
            "leftover_files": sorted(files - reported), "unreported_files": sorted(reported - files),
            "rss_capture_warm_kb": cw["VmRSS"], "rss_capture_growth_kb": ce["VmRSS"] - cw["VmRSS"],
            "rss_query_warm_kb": qw["VmRSS"], "rss_query_growth_kb": end["VmRSS"] - qw["VmRSS"],
            "rss_end_kb": end["VmRSS"], "rss_peak_kb": end["VmHWM"], "rss_trace_kb": points["rss_trace_kb"],
            "threads": [p["threads"] for p in (cw, ce, qw, end)], "fds": [p["fds"] for p in (cw, ce, qw, end)]}  # fmt: skip


if __name__ == "__main__":
    opts = cli(__doc__, None, ("--captures", 200, "capture_audio calls"), ("--queries", 50, "voice_query calls"),
               ("--json", None, "also write the figures here"))  # fmt: skip
    result = soak(opts.captures, opts.queries)
    print("\n".join(f"{key:>22}: {value}" for key, value in result.items()))
    if opts.json:
        save_report(result, opts.json)
