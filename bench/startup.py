"""Startup: spawn -> `initialize` reply, mcp-listen next to the MCP SDK's bare servers with no tools,
and what mcp-listen imports before its first reply.

The servers are spawned in turn (interleaved, so a change in machine load hits all alike), and the
initialize request is written as soon as the process exists: the time is the whole cold start a
client sees (interpreter, imports, handshake).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from stats import summary

BARE = {
    "bare_lowlevel": "import anyio\nfrom mcp.server.lowlevel import Server\nfrom mcp.server.stdio import stdio_server\n"
    "async def main():\n    server = Server('bare')\n    async with stdio_server() as (r, w):\n"
    "        await server.run(r, w, server.create_initialization_options())\nanyio.run(main)",
    "bare_mcpserver": "from mcp.server import MCPServer\nMCPServer('bare').run()",
}
"""The SDK's mcp.server.lowlevel.Server and its MCPServer (the former FastMCP), each with no tools."""
COMMANDS = {"mcp_listen": ["-m", "mcp_listen"], **{name: ["-c", code] for name, code in BARE.items()}}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}}  # fmt: skip
HEAVY = ("numpy", "onnxruntime", "sounddevice", "pywhispercpp", "_pywhispercpp", "ollama", "httpx", "soxr")
"""Must not be imported before the first request (httpx2, the SDK's own HTTP stack, is the SDK's)."""


def time_initialize(args: list[str], env: Mapping[str, str], stderr_path: Path | None = None) -> float:
    """Seconds from spawn to the initialize reply's arrival."""
    err = open(stderr_path, "wb") if stderr_path else subprocess.DEVNULL  # noqa: SIM115
    began = time.monotonic()
    proc = subprocess.Popen([sys.executable, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                            env=dict(env))  # fmt: skip
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(INIT).encode() + b"\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        elapsed = time.monotonic() - began
        if b'"result"' not in line:
            raise RuntimeError(f"{args[:2]} did not answer initialize: {line[:200]!r}")
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
    """Interleaved spawn timings after one unmeasured round (page cache, .pyc); the ratio of medians."""
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for r in range(runs + 1):
        for name, args in COMMANDS.items():
            elapsed = time_initialize(args, env) * 1000
            if r:
                times[name].append(elapsed)
    out: dict = {name: summary(values) for name, values in times.items()}
    out["ratio_vs_lowlevel"] = round(out["mcp_listen"]["median"] / out["bare_lowlevel"]["median"], 3)
    out["ratio_vs_mcpserver"] = round(out["mcp_listen"]["median"] / out["bare_mcpserver"]["median"], 3)
    return out


def import_check(env: Mapping[str, str], workdir: Path) -> dict:
    """What `python -X importtime -m mcp_listen` imports up to its first reply, beside the bare server."""
    found: dict[str, dict[str, int]] = {}
    for name in ("mcp_listen", "bare_lowlevel"):
        log = workdir / f"importtime-{name}.txt"
        time_initialize(["-X", "importtime", *COMMANDS[name]], env, stderr_path=log)
        found[name] = {}
        for line in log.read_text(errors="replace").splitlines():  # "import time: self | cumulative | name"
            parts = line.removeprefix("import time:").split("|")
            if line.startswith("import time:") and "cumulative" not in line and len(parts) == 3:
                found[name][parts[2].strip()] = int(parts[0])
    listen, bare = found["mcp_listen"], found["bare_lowlevel"]
    heavy = sorted(m for m in listen if m.split(".")[0] in HEAVY)
    extra = {m: us for m, us in listen.items() if m not in bare}
    top = sorted(extra.items(), key=lambda kv: -kv[1])[:12]
    return {"heavy_modules_imported": heavy, "ok": not heavy, "modules": len(listen), "modules_bare": len(bare),
            "extra_modules": len(extra), "extra_self_ms": round(sum(extra.values()) / 1000, 1),
            "top_extra_self_ms": {m: round(us / 1000, 1) for m, us in top}}  # fmt: skip
