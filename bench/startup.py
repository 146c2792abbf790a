"""Startup: spawn -> `initialize` reply, mcp-listen next to the SDK's bare servers, and what loads.

The three servers are spawned in turn (interleaved, so a change in machine load hits all
of them alike). The initialize request is written as soon as the process exists: the
time measured is the whole cold start a client sees (interpreter, imports, handshake).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from stats import summary

PY = sys.executable
BENCH = Path(__file__).resolve().parent
COMMANDS = {
    "mcp_listen": [PY, "-m", "mcp_listen"],
    "bare_lowlevel": [PY, str(BENCH / "bare_server.py"), "lowlevel"],
    "bare_mcpserver": [PY, str(BENCH / "bare_server.py"), "mcpserver"],
}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"},
    },
}
HEAVY = (
    "numpy",
    "onnxruntime",
    "sounddevice",
    "pywhispercpp",
    "_pywhispercpp",
    "ollama",
    "httpx",
    "soxr",
)
"""Must not be imported before the first request (httpx2, the SDK's own HTTP stack, is the SDK's)."""


def time_initialize(cmd: list[str], env: Mapping[str, str], stderr_path: Path | None = None) -> float:
    """Seconds from spawn to the initialize reply's arrival."""
    err = open(stderr_path, "wb") if stderr_path else subprocess.DEVNULL  # noqa: SIM115
    began = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=dict(env))
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(INIT).encode() + b"\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        elapsed = time.monotonic() - began
        if b'"result"' not in line:
            raise RuntimeError(f"{cmd} did not answer initialize: {line[:200]!r}")
        proc.stdin.close()
        proc.wait(timeout=10)
        return elapsed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if stderr_path:
            err.close()


def measure(env: Mapping[str, str], runs: int) -> dict:
    """Interleaved spawn timings; the ratio of medians is the figure."""
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for cmd in COMMANDS.values():  # warm the page cache and .pyc files; not counted
        time_initialize(cmd, env)
    for _ in range(runs):
        for name, cmd in COMMANDS.items():
            times[name].append(time_initialize(cmd, env) * 1000)
    out = {name: summary(values) for name, values in times.items()}
    listen = out["mcp_listen"]["median"]
    out["ratio_vs_lowlevel"] = round(listen / out["bare_lowlevel"]["median"], 3)
    out["ratio_vs_mcpserver"] = round(listen / out["bare_mcpserver"]["median"], 3)
    return out


def _imports(stderr_text: str) -> dict[str, tuple[int, int]]:
    """module -> (self us, cumulative us) from `python -X importtime` output."""
    mods: dict[str, tuple[int, int]] = {}
    for line in stderr_text.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        parts = line[len("import time:") :].split("|")
        if len(parts) == 3:
            mods[parts[2].strip()] = (int(parts[0]), int(parts[1]))
    return mods


def import_check(env: Mapping[str, str], workdir: Path) -> dict:
    """What `python -X importtime -m mcp_listen` imports up to its first reply, versus the bare server."""
    found = {}
    for name in ("mcp_listen", "bare_lowlevel"):
        cmd = [PY, "-X", "importtime", *COMMANDS[name][1:]]
        log = workdir / f"importtime-{name}.txt"
        time_initialize(cmd, env, stderr_path=log)
        found[name] = _imports(log.read_text(errors="replace"))
    listen, bare = found["mcp_listen"], found["bare_lowlevel"]
    heavy = sorted(m for m in listen if m.split(".")[0] in HEAVY)
    extra = {m: v for m, v in listen.items() if m not in bare}
    top_extra = sorted(extra.items(), key=lambda kv: -kv[1][0])[:12]
    return {
        "heavy_modules_imported": heavy,
        "ok": not heavy,
        "modules": len(listen),
        "modules_bare": len(bare),
        "extra_modules": len(extra),
        "extra_self_ms": round(sum(v[0] for v in extra.values()) / 1000, 1),
        "top_extra_self_ms": {m: round(v[0] / 1000, 1) for m, v in top_extra},
    }
