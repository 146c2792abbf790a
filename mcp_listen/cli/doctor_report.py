"""The doctor's report: one Check per dependency, which tools are ready, and the text for a person.

Kept apart from the checks (cli/doctor.py, cli/doctor_audio.py) so the record every check returns and
the readiness rule have one home; nothing here touches a device, a model or the network.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"

NEEDS: dict[str, tuple[str, ...]] = {
    "list_audio_devices": ("config", "portaudio"),
    "capture_audio": ("config", "portaudio", "microphone", "audio"),
    "transcribe_voice": ("config", "portaudio", "microphone", "audio", "vad", "whisper_model"),
    "voice_query": ("config", "portaudio", "microphone", "audio", "vad", "whisper_model", "ollama", "ollama_model"),
    "speak_text": ("config", "portaudio", "speak", "voice", "speaker"),
    "converse": ("config", "portaudio", "microphone", "audio", "vad", "whisper_model", "speak", "voice", "speaker"),
}
"""Which checks each tool depends on (with its default arguments); warnings do not block."""


@dataclass
class Check:
    """One check's outcome: `remedy` is the exact fix when it failed; `data` goes to --json only."""

    id: str
    title: str
    status: str
    detail: str
    remedy: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def public(self) -> dict[str, Any]:
        return asdict(self)


def report(checks: list[Check]) -> dict[str, Any]:
    """The checks, each tool's readiness (its NEEDS all ok or warn), and `ok` = voice_query ready."""
    status = {c.id: c.status for c in checks}
    ready = {tool: all(status.get(need) in (OK, WARN) for need in needs) for tool, needs in NEEDS.items()}
    return {"ok": ready["voice_query"], "ready": ready, "checks": [c.public() for c in checks]}


def skipped(check_id: str, title: str, why: str) -> Check:
    """A check that could not run because one it depends on failed."""
    return Check(check_id, title, SKIP, f"not checked: {why}")


# ---------------------------------------------------------------------- text


MARKS = {OK: "✓", FAIL: "✗", WARN: "!", SKIP: "-"}
ASCII_MARKS = {OK: "ok", FAIL: "XX", WARN: "!!", SKIP: "--"}


def format_report(result: dict[str, Any], *, unicode: bool = True, version: str | None = None) -> str:
    """The report for a person: one line per check, the remedy under each failure, then readiness."""
    marks = MARKS if unicode else ASCII_MARKS
    arrow = "→" if unicode else "->"
    width = max(len(c["title"]) for c in result["checks"]) + 2
    lines = [f"mcp-listen {version} doctor" if version else "mcp-listen doctor", ""]
    for c in result["checks"]:
        lines.append(f"{marks[c['status']]} {c['title']:<{width}}{c['detail']}")
        if c["remedy"] and c["status"] in (FAIL, WARN):
            lines.append(f"  {'':<{width}}{arrow} {c['remedy']}")
    ready = [tool for tool, ok in result["ready"].items() if ok]
    missing = [tool for tool, ok in result["ready"].items() if not ok]
    speaking_warned = any(c["id"] == "speak" and c["status"] == WARN for c in result["checks"])
    lines.append("")
    lines.append("Ready: " + (", ".join(ready) or "none") + ".")
    if missing:
        fix = f"{marks[FAIL]} and {marks[WARN]}" if speaking_warned else marks[FAIL]
        lines.append("Not ready: " + ", ".join(missing) + f" (fix the {fix} lines above).")
    else:
        lines.append("Everything voice_query needs is in place.")
    return "\n".join(lines)
