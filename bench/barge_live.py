"""Barge-in live: the e2e barge-in cases (tests/e2e/test_barge_in.py) repeated in a row through the real
server, the sound server and the agent's voice at full level in the microphone (tests/speaker_rig.py).

    python bench/barge_live.py [--runs 20] [--json OUT] [--model PATH]
    python bench/barge_live.py --first-turns [--busy 2] [--runs 20]

One server for the whole series (a user's session), barge-in on by MCP_LISTEN_BARGE_IN; each run is the
user cutting in, then the agent alone. --first-turns: each run is a fresh server's first barge-in turn,
speak_text's, where the echo's delay is measured while nothing about the path is known yet; --busy N keeps
N programs spinning a core each meanwhile (rig.busy_cpus). bench/README.md ("Barge-in live") says when a
run passes and what each figure (reaction, divergences, CPU, lead-in, early, missed) measures.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import stats
from rig import RATE, ROOT, TEST_MODEL, Rig, audio_assets, busy_cpus, proc_stats
from rpc import wire
from speaker_rig import agent_alone, agent_words_in, loud, speaking_env, user_cuts_in
from speech_checks import heard_lighthouse, speech_clip, wer
from stats import summary

CLIP_TEXT = "please tell me a short story about a lighthouse keeper"
ANCHORS = {"please", "tell", "short", "story"}
"""The clip's first words: what a transcript holds before the first of them the listener took in before the user
spoke (the agent's last words, in the pre-roll: "by the sea" heard as "by the scene"), or the user's damaged."""
BLOCK_MS = 40
"""A pause silences the speaker at its next block (audio/speaker.py BLOCK_MS): the quiet time's upper bound."""
DIVERGED = re.compile(rb"diverg|ran away", re.IGNORECASE)


def divergences(log: Path, offset: int) -> tuple[int, int]:
    """Lines of the server's log since `offset` that report a divergence, and the new offset."""
    data = log.read_bytes()
    return len(DIVERGED.findall(data[offset:])), len(data)


def cut_in(w: Any, rig: Rig, model: Path, token: str) -> dict[str, Any]:
    sent = time.monotonic()  # the call's arrival, within a millisecond: first_audio_ms and cut_in_ms count from it
    reply, started = user_cuts_in(w, rig.mic, "converse", {"whisper_model": str(model), "silence_ms": 800}, token)
    data = reply["result"].get("structuredContent") or {}
    clip, monitor = audio_assets.read_wav(speech_clip()), rig.start_monitor()
    at, peak = monitor.find(clip, started - 0.5, started + len(clip) / RATE + 1.5)
    onset = monitor.time_of(at + int(loud(clip)[0]))
    listened = w.progress_time(token, "Listening on")
    reaction = None if listened is None else round((listened - onset) * 1000)
    text, spoken = data.get("transcription"), data.get("spoken", {})
    row = {"stopped": bool(spoken.get("interrupted")), "early": reaction is not None and reaction < 0}
    row.update(heard=heard_lighthouse(text), agent_words=agent_words_in(text), reaction_ms=reaction)
    first, cut = spoken.get("first_audio_ms"), spoken.get("cut_in_ms")
    quiet = None if first is None or cut is None else (sent + (first + cut) / 1000 - onset) * 1000 + BLOCK_MS
    row.update(quiet_ms=None if quiet is None else round(quiet), paused_ms=spoken.get("paused_ms"))
    words = re.findall(r"[a-z']+", (text or "").lower())
    row["lead_in"] = words[: next((i for i, word in enumerate(words) if word in ANCHORS), len(words))]
    row.update(wer=round(wer(CLIP_TEXT, text or ""), 3), clip_match=round(peak, 3), played_ms=spoken.get("played_ms"))
    row["passed"] = row["stopped"] and not row["early"] and row["heard"] and not row["agent_words"]
    return {**row, "transcription": text, **failure(reply["result"])}


def alone(w: Any, model: Path) -> dict[str, Any]:
    pid, began, cpu = w.server.proc.pid, time.monotonic(), proc_stats(w.server.proc.pid)["cpu_s"]
    result = agent_alone(w, model)
    wall, data = time.monotonic() - began, result.get("structuredContent") or {}
    spoken = data.get("spoken", {})
    row = {"stopped": bool(spoken.get("interrupted")), "agent_words": agent_words_in(data.get("transcription"))}
    row.update(played_ms=spoken.get("played_ms"), cpu_pct=round(100 * (proc_stats(pid)["cpu_s"] - cpu) / wall, 1))
    row["paused_ms"] = spoken.get("paused_ms")  # its own voice paused it (then it played on)
    row["passed"] = not row["stopped"] and not data.get("transcription") and not result.get("isError")
    return {**row, "transcription": data.get("transcription"), **failure(result)}  # any words: its own voice


def failure(result: dict[str, Any]) -> dict[str, str]:  # the error a failed call returned (its text)
    return {"error": result["content"][0]["text"][:300]} if result.get("isError") else {}


def series(opts: Any, workdir: Path, rig: Rig) -> dict[str, list]:
    rows: dict[str, list] = {"cut_in": [], "alone": []}
    log = workdir / "server.log"
    env = speaking_env(rig.mic.env, workdir, ROOT / "tests" / "assets" / "voices", MCP_LISTEN_BARGE_IN="true")
    with wire(env, stderr_path=log) as w:
        w.call("speak_text", {"text": "Hello."}, timeout=60)  # the voice loaded: the speech starts at once
        offset = log.stat().st_size
        for i in range(opts.runs):
            for case in ("cut_in", "alone"):
                try:
                    row = cut_in(w, rig, opts.model, f"t{i}") if case == "cut_in" else alone(w, opts.model)
                except Exception as exc:  # noqa: BLE001 - a failed run is a result: say what failed
                    row = {"passed": False, "error": f"{type(exc).__name__}: {exc}"}
                row["divergences"], offset = divergences(log, offset)
                rows[case].append(row)
                print(f"run {i + 1} {case}: {'pass' if row['passed'] else 'FAIL'} {row}", flush=True)
                if w.server.proc.poll() is not None:
                    return rows
    return rows


def first_turns(opts: Any, workdir: Path, rig: Rig) -> dict[str, list]:
    """A fresh server per run: "Hello." (the voice loaded), then speak_text's cut-in case."""
    rows: list[dict[str, Any]] = []
    for i in range(opts.runs):
        env = speaking_env(rig.mic.env, workdir, ROOT / "tests" / "assets" / "voices")
        with wire(env, stderr_path=workdir / f"server{i}.log") as w:
            w.call("speak_text", {"text": "Hello."}, timeout=60)
            reply, started = user_cuts_in(w, rig.mic, "speak_text", {"barge_in": True})
            returned_s = round(w.arrived[reply["id"]] - started, 2)
        data = reply["result"].get("structuredContent") or {}
        row = {"stopped": bool(data.get("interrupted")), "returned_s": returned_s, **failure(reply["result"])}
        row.update(early=row["stopped"] and returned_s < 0, played_ms=data.get("duration_ms"))
        row["passed"] = row["stopped"] and not row["early"] and "error" not in row
        rows.append(row)
        print(f"run {i + 1}: {'pass' if row['passed'] else 'FAIL'} {row}", flush=True)
    return {"first_turn": rows}


def summarise_first_turns(rows: dict[str, list]) -> dict[str, Any]:
    runs = rows["first_turn"]
    caught = [r["returned_s"] for r in runs if r["passed"]]
    return {"first_turn": {"runs": len(runs), "passed": len(caught), "early": sum(r["early"] for r in runs),
                           "missed": sum(not r["stopped"] for r in runs), "returned_s": summary(caught)}}  # fmt: skip


def summarise(rows: dict[str, list]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for case, runs in rows.items():
        out[case] = {"runs": len(runs), "divergences": sum(r.get("divergences", 0) for r in runs)}
        for key in ("passed", "stopped", "agent_words", "error", "early", "heard", "lead_in", "paused_ms"):
            out[case][key] = sum(1 for r in runs if r.get(key))
    cut = rows["cut_in"]
    stops = [r["reaction_ms"] for r in cut if r.get("stopped") and (r.get("reaction_ms") or -1) >= 0]
    out["cut_in"]["reaction_ms"] = summary(stops)
    out["cut_in"]["quiet_ms"] = summary(
        r["quiet_ms"] for r in cut if r.get("stopped") and r.get("quiet_ms") is not None
    )
    out["cut_in"]["wer_pct"] = summary(100 * r["wer"] for r in cut if "wer" in r)
    out["alone"]["cpu_pct"] = summary(r["cpu_pct"] for r in rows["alone"] if "cpu_pct" in r)
    return out


def show(report: dict[str, Any]) -> None:
    for case, s in report["summary"].items():
        if case == "first_turn":
            print(f"{s['passed']}/{s['runs']} passed: {s['early']} stopped before the user, {s['missed']} never "
                  f"heard them; returned after the user began {s['returned_s']} s")  # fmt: skip
            continue
        reaction = s.get("reaction_ms", {}).get("median")
        quiet = s.get("quiet_ms", {}).get("median")
        print(
            f"{case}: {s['passed']}/{s['runs']} passed, {s['divergences']} diverged, reaction median {reaction} ms, quiet {quiet} ms"
        )
    print(f"server log: {report['log']}")


def main(argv: list[str] | None = None) -> int:
    opts = stats.cli(__doc__, argv, ("--runs", 20, "runs of each case, in a row"),
                     ("--json", None, "the report (bench/results-barge-live.json, or -first-turns.json)"),
                     ("--model", TEST_MODEL, "the whisper model"),
                     ("--first-turns", False, "each run a fresh server's first speak_text cut-in"),
                     ("--busy", 0, "processes kept spinning meanwhile"))  # fmt: skip
    run = stats.Run("pywebrtc-audio", "piper-tts", runs=opts.runs, model=opts.model.name, busy=opts.busy)
    workdir = Path(tempfile.mkdtemp(prefix="mcp-listen-barge-live-"))
    with Rig(opts.model.parent, workdir) as rig:
        rig.start_monitor()  # before the first cut-in: the user's clip is found on its clock
        with busy_cpus(opts.busy):
            rows = first_turns(opts, workdir, rig) if opts.first_turns else series(opts, workdir, rig)
    summarised = summarise_first_turns(rows) if opts.first_turns else summarise(rows)
    log = workdir if opts.first_turns else workdir / "server.log"
    report = {**run.end(), "log": str(log), "summary": summarised, "runs": rows}
    if all(row["passed"] for case in rows.values() for row in case):  # else the server's log stays, to read
        shutil.rmtree(workdir, ignore_errors=True)
    name = "results-barge-first-turns.json" if opts.first_turns else "results-barge-live.json"
    stats.save_report(report, opts.json or ROOT / "bench" / name, show)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
