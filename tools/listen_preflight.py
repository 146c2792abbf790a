#!/usr/bin/env python3
"""Before `tools/dev listen`: is everything `mcp-listen listen` needs here? Say exactly what is not.

    mcp-listen doctor --json | python tools/listen_preflight.py MODEL_GIVEN MCP_LISTEN

Reads the doctor's report (the same code paths the tools use) from stdin. Exits 0 when
transcribe_voice is ready. When only the default whisper model is missing (MODEL_GIVEN is 0:
the user named none, and the doctor says `model_not_found`), it runs the pull the doctor's remedy
names, ``MCP_LISTEN models pull NAME``, and exits 0 if that worked. The remedy names the command
as the user could run it (`mcp-listen`, the full path of .venv/bin/mcp-listen when it is not on
PATH, `pipx run mcp-listen`): only its `models pull NAME` words are taken, and only for the model
the doctor looked for. Otherwise it prints each missing piece with how to get it, and exits 1.
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


def pull_of(check: dict) -> list[str] | None:
    """`models pull NAME` from the doctor's remedy when the model it looked for is missing, NAME being
    that model; None for anything else (a damaged file, a model no pull fetches, another remedy)."""
    data = check.get("data") or {}
    if data.get("code") != "model_not_found":
        return None
    wanted = str(data.get("wanted", "")).replace("\\", "/").rsplit("/", 1)[-1]
    short = wanted.removeprefix("ggml-").removesuffix(".bin")
    try:
        words = shlex.split(check.get("remedy") or "")
    except ValueError:
        return None
    for i in range(len(words) - 2):
        if words[i : i + 3] == ["models", "pull", short]:
            return words[i : i + 3]
    return None


def pull_default_model(check: dict, mcp_listen: str) -> bool:
    """Run the pull the doctor's remedy names, with this checkout's command; True when it succeeded."""
    pull = pull_of(check)
    if pull is None:
        return False
    command = [mcp_listen, *pull]
    print(f"tools/dev: {check['detail']}\ntools/dev: fetching it: {shlex.join(command)}", file=sys.stderr)
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
