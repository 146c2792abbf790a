"""Hostile texts to speak_text: the server's CPU after the speech is stopped, and its memory, text after text.

    python bench/speak_hostile.py [--code DIR] [--stop-after 4] [--json bench/results-speak-hostile.json]

One real server on the virtual speaker is given each text of tests/hostile_speech.py in turn with
speak_text, stopped 4 s later (stop_speaking and notifications/cancelled in turn); `cpu_after_stop_s` is
the server's CPU from the stop until a whole second adds less than IDLE_CPU_S. `--code DIR` runs the
server from another source tree (PYTHONPATH=DIR: e.g. `git archive COMMIT mcp_listen | tar -x -C DIR`),
so the same run measures the code before a change. bench/README.md ("Hostile texts") describes each
figure and has them.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent / "tests")]

from hostile_speech import HOSTILE_TEXTS
from rig import ROOT, TEST_MODEL, Monitor, Rig, TimedServer, proc_stats
from speak import VOICE_PATH
from speaker_rig import FOX, loud, speaking_env
from stats import Run, cli, save_report

IDLE_CPU_S = 0.02
"""Less CPU than this in a whole second: the server is idle again (it idles at ~0)."""
WATCH_S = 150.0
SOUND_WAIT_S = 90.0
"""The longest a text is waited for to sound before it is stopped anyway."""


def cpu_until_idle(pid: int, since: float) -> tuple[float, float]:
    """(CPU seconds spent since `since` up to the first whole second under IDLE_CPU_S, wall seconds it took)."""
    began, trace = time.monotonic(), [(time.monotonic(), proc_stats(pid)["cpu_s"])]
    while time.monotonic() - began < WATCH_S:
        time.sleep(0.5)
        trace.append((time.monotonic(), proc_stats(pid)["cpu_s"]))
        second = [c for t, c in trace if t >= trace[-1][0] - 1.01]
        if trace[-1][0] - began >= 1.0 and second[-1] - second[0] < IDLE_CPU_S:
            break
    idle_from = next(t for t, c in trace if c >= trace[-1][1] - 1e-9)
    return trace[-1][1] - since, idle_from - began


def one_text(server: TimedServer, name: str, text: str, stop_after: float, by_cancel: bool) -> dict[str, Any]:
    pid = server.proc.pid
    before = proc_stats(pid)
    with Monitor() as monitor:
        start = len(monitor.samples())
        rid, sent = server.start_tool("speak_text", {"text": text}, f"hostile-{name}")
        while rid not in server.replies:
            waited = time.monotonic() - sent
            if waited >= stop_after and (loud(monitor.samples()[start:]).size or waited >= SOUND_WAIT_S):
                break
            time.sleep(0.05)
    row: dict[str, Any] = {"text": name, "chars": len(text), "rss_before_mb": round(before["VmRSS"], 1)}
    if rid in server.replies:
        result = server.replies[rid][1].get("result") or {}
        code = json.loads(result["content"][1]["text"])["error"]["code"] if result.get("isError") else None
        row.update(outcome=code or "ended before the stop", at_s=round(server.replies[rid][0] - sent, 2))
    else:
        stopped_at = proc_stats(pid)["cpu_s"]
        if by_cancel:
            server.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid}})
        else:
            server.tool("stop_speaking", {})
        cpu_s, idle_s = cpu_until_idle(pid, stopped_at)
        row.update(outcome="cancelled" if by_cancel else "stop_speaking", cpu_after_stop_s=round(cpu_s, 2),
                   idle_after_s=round(idle_s, 1))  # fmt: skip
    after = proc_stats(pid)
    row.update(rss_after_mb=round(after["VmRSS"], 1), peak_mb=round(after["VmHWM"], 1))
    print(f"{name:22} {row['outcome']:22} cpu after stop {row.get('cpu_after_stop_s', '-')!s:>6} s "
          f"(idle after {row.get('idle_after_s', '-')} s)  rss {row['rss_before_mb']:.0f} -> {row['rss_after_mb']:.0f} MB, "
          f"peak {row['peak_mb']:.0f} MB", flush=True)  # fmt: skip
    return row


def main(argv: list[str] | None = None) -> int:
    opts = cli(__doc__, argv, ("--code", None, "run the server from this source tree (PYTHONPATH)"),
               ("--stop-after", 4.0, "seconds from the call to the stop"),
               ("--json", ROOT / "bench" / "results-speak-hostile.json", "the report"))  # fmt: skip
    run = Run("piper-tts", **vars(opts))
    extra = {"PYTHONPATH": str(opts.code)} if opts.code else {}
    with Rig(TEST_MODEL.parent) as rig:
        env = speaking_env(rig.mic.env, rig.workdir, VOICE_PATH.parent, **extra)
        # -P: not the working directory first on sys.path (python -m puts it there), so --code's tree is run
        command = [sys.executable, "-P", "-m", "mcp_listen"]
        with TimedServer(env, stderr_path=rig.workdir / "server.log", command=command) as server:
            server.initialize()
            server.tool("speak_text", {"text": FOX})  # the voice loaded
            idle = proc_stats(server.proc.pid)
            run.report["warm"] = {"rss_mb": round(idle["VmRSS"], 1), "peak_mb": round(idle["VmHWM"], 1)}
            rows = [one_text(server, name, text, opts.stop_after, by_cancel=i % 2 == 1)
                    for i, (name, text) in enumerate(HOSTILE_TEXTS.items())]  # fmt: skip
            run.report["texts"] = rows
    report = run.end()
    spoken = [r for r in report["texts"] if "cpu_after_stop_s" in r]
    report["summary"] = {
        "max_cpu_after_stop_s": max((r["cpu_after_stop_s"] for r in spoken), default=None),
        "peak_mb": max(r["peak_mb"] for r in report["texts"]),
        "final_rss_mb": report["texts"][-1]["rss_after_mb"],
    }
    save_report(report, opts.json, lambda r: print(r["summary"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
