#!/usr/bin/env python3
"""Before `tools/dev listen`: is everything `mcp-listen listen` needs here? Say exactly what is not.

    mcp-listen doctor --json | python tools/listen_preflight.py MODEL_GIVEN MCP_LISTEN

Reads the doctor's report (the same code paths the tools use) from stdin. Exits 0 when
transcribe_voice is ready. When only the default whisper model is missing (MODEL_GIVEN is 0:
the user named none), it runs the doctor's remedy, ``mcp-listen models pull ...``, and exits 0
if that worked. Otherwise it prints each missing piece with how to get it, and exits 1.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

NEEDED = ("portaudio", "microphone", "audio", "vad", "whisper_model")
"""The doctor checks transcribe_voice depends on (mcp_listen.cli.doctor.NEEDS["transcribe_voice"])."""


def failing(report: dict) -> list[dict]:
    return [c for c in report.get("checks", []) if c.get("id") in NEEDED and c.get("status") == "fail"]


def pull_default_model(check: dict, mcp_listen: str) -> bool:
    """Run the doctor's own remedy when it is a model download; True when it succeeded."""
    remedy = check.get("remedy") or ""
    if not remedy.startswith("mcp-listen models pull "):
        return False
    print(f"tools/dev: {check['detail']}\ntools/dev: fetching it: {remedy}", file=sys.stderr)
    command = [mcp_listen, *shlex.split(remedy)[1:]]
    return subprocess.run(command, stdin=subprocess.DEVNULL).returncode == 0


def explain(problems: list[dict]) -> None:
    lines = ["tools/dev: cannot listen yet." + (" Missing:" if problems else "")]
    for check in problems:
        lines.append(f"  - {check['title']}: {check['detail']}")
        remedy = check.get("remedy") or ""
        if remedy:  # from a clone the command lives in .venv/bin/
            lines.append(f"    how to get it: {'.venv/bin/' if remedy.startswith('mcp-listen ') else ''}{remedy}")
    lines.append("Then run tools/dev listen again (mcp-listen doctor shows every check).")
    print("\n".join(lines), file=sys.stderr)


def main(argv: list[str]) -> int:
    model_given, mcp_listen = argv[0] == "1", argv[1]
    try:
        report = json.load(sys.stdin)
    except ValueError:
        print("tools/dev: `mcp-listen doctor --json` gave no report; run `.venv/bin/mcp-listen doctor` to see why",
              file=sys.stderr)  # fmt: skip
        return 1
    if report.get("ready", {}).get("transcribe_voice"):
        return 0
    problems = failing(report)
    if len(problems) == 1 and problems[0]["id"] == "whisper_model" and not model_given:
        if pull_default_model(problems[0], mcp_listen):
            return 0
    explain(problems)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
