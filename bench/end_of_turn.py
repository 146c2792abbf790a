"""end_of_turn "smart" against "silence": thinking pauses mid-sentence, and the stop after finished ones.

    python bench/end_of_turn.py [--model tests/assets/ggml-tiny.en.bin] [--repeats 2] [--json OUT]

Built from the real English recordings of bench/realspeech_data.py (their own pauses shorter than
silence_ms):

- *mid-sentence*: each recording with a thinking pause of 1.2, 1.6 or 2.0 s (in turn) spliced into
  the word gap nearest its middle, filled with the recording's own noise floor (a Gaussian hiss at
  the RMS of its quietest 100 ms). One `transcribe_voice` per mode; the turn *ended at the pause*
  when the result's recording is shorter than the speech before the pause plus the pause.
- *finished*: each recording as it is (a finished sentence, then silence). Per mode and run: the
  result's arrival after the last loud sample, minus silence_ms (play start + the sample's offset:
  the playback latency is the same in both modes, so the difference between them is exact).

silence_ms 1000, duration_ms 30000. Reports per mode the pauses that ended the turn, and the
finished sentences' post-speech median and p90.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import audio_assets as A  # noqa: E402
import numpy as np  # noqa: E402
import realspeech_data  # noqa: E402
from latency import close_server  # noqa: E402
from rig import ROOT, Rig, stop_player  # noqa: E402
from stats import summary  # noqa: E402

SILENCE_MS = 1000
PAUSES_MS = (1200, 1600, 2000)
LEAD_MS = 300
MODES = ("silence", "smart")


def clips() -> list[dict]:
    return [c for c in realspeech_data.load() if c["language"] == "en" and c["longest_pause_ms"] < SILENCE_MS - 200]


def envelope(samples: np.ndarray, ms: int = 10) -> np.ndarray:
    n = A.RATE * ms // 1000
    frames = np.abs(samples[: len(samples) // n * n].astype(np.float64)).reshape(-1, n)
    return frames.mean(axis=1)


def word_gap(samples: np.ndarray) -> int:
    """The sample in the middle of the quiet run (>= 60 ms under 10 % of the peak envelope) nearest
    the middle of the speech, between 30 % and 70 % of it."""
    env = envelope(samples)
    quiet = env < 0.1 * env.max()
    loud = np.flatnonzero(~quiet)
    first, last = loud[0], loud[-1]
    runs, start = [], None
    for i in range(first, last + 1):
        if quiet[i] and start is None:
            start = i
        elif not quiet[i] and start is not None:
            if i - start >= 6:
                runs.append((start + i) // 2)
            start = None
    lo, hi = first + 0.3 * (last - first), first + 0.7 * (last - first)
    inside = [r for r in runs if lo <= r <= hi] or runs
    middle = (first + last) / 2
    return int(min(inside, key=lambda r: abs(r - middle))) * A.RATE // 100


def hiss_like(samples: np.ndarray, ms: int, seed: int) -> np.ndarray:
    """`ms` of Gaussian noise at the RMS of the recording's quietest 100 ms (its own floor)."""
    n = A.RATE // 10
    frames = samples[: len(samples) // n * n].astype(np.float64).reshape(-1, n)
    rms = float(np.sqrt((frames**2).mean(axis=1)).min())
    noise = np.random.default_rng(seed).normal(0, max(rms, 1.0), A.RATE * ms // 1000)
    return np.clip(noise, -32768, 32767).astype(np.int16)


def spliced(entry: dict, pause_ms: int, out: Path) -> tuple[Path, int]:
    """The recording with a thinking pause at its middle word gap; (WAV, sample where speech resumes)."""
    samples = A.read_wav(entry["path"])
    cut = word_gap(samples)
    lead = np.zeros(A.RATE * LEAD_MS // 1000, dtype=np.int16)
    tail = np.zeros(A.RATE * (SILENCE_MS + 2000) // 1000, dtype=np.int16)
    pause = hiss_like(samples, pause_ms, seed=len(entry["id"]))
    whole = np.concatenate([lead, samples[:cut], pause, samples[cut:], tail])
    return A.write_wav(whole, out), len(lead) + cut + len(pause)


def finished(entry: dict, out: Path) -> tuple[Path, int]:
    """The recording as it is; (WAV, its last loud sample)."""
    path = A.concat([A.silence(LEAD_MS), Path(entry["path"]), A.silence(SILENCE_MS + 2000)], path=out)
    return path, A.last_loud_sample(A.read_wav(path))


def call(rig: Rig, server: Any, model: Path, wav: Path, mode: str, token: str) -> tuple[float, dict]:
    """transcribe_voice while `wav` plays: (seconds from play start to the result, the result)."""
    args = {"whisper_model": model.name, "silence_ms": SILENCE_MS, "duration_ms": 30000, "end_of_turn": mode}
    rid, _ = server.start_tool("transcribe_voice", args, token)
    server.wait_until_recording()
    t_play, player = rig.play(wav)
    try:
        t_reply, msg = server.reply(rid, timeout=90)
    finally:
        stop_player(player)
    return t_reply - t_play, (msg.get("result") or {}).get("structuredContent") or {}


def measure(rig: Rig, model: Path, entries: list[dict], work: Path, repeats: int) -> dict[str, Any]:
    server = rig.server()
    rows: list[dict] = []
    try:
        call(rig, server, model, finished(entries[0], work / "warm.wav")[0], "silence", "warm")  # model resident
        for i, entry in enumerate(entries):
            pause = PAUSES_MS[i % len(PAUSES_MS)]
            wav, resumes = spliced(entry, pause, work / f"mid-{i}.wav")
            for mode in MODES:
                _, data = call(rig, server, model, wav, mode, f"mid-{i}-{mode}")
                ended = data.get("duration_ms", 0) * A.RATE // 1000 < resumes
                rows.append({"clip": entry["id"], "set": "mid", "pause_ms": pause, "mode": mode, "ended": ended})
                print(rows[-1], flush=True)
            wav, last_loud = finished(entry, work / f"end-{i}.wav")
            for run in range(repeats):
                for mode in MODES if run % 2 == 0 else MODES[::-1]:
                    seconds, data = call(rig, server, model, wav, mode, f"end-{i}-{mode}-{run}")
                    after = seconds * 1000 - last_loud * 1000 / A.RATE - SILENCE_MS
                    rows.append({"clip": entry["id"], "set": "end", "mode": mode, "post_speech_ms": round(after, 1)})
                    print(rows[-1], flush=True)
    finally:
        close_server(server)
    return {"rows": rows, "summary": summarise(rows)}


def summarise(rows: list[dict]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in MODES:
        mid = [r for r in rows if r["set"] == "mid" and r["mode"] == mode]
        end = [r["post_speech_ms"] for r in rows if r["set"] == "end" and r["mode"] == mode]
        out[mode] = {
            "mid_sentence_pauses_that_ended_the_turn": f"{sum(r['ended'] for r in mid)} of {len(mid)}",
            "finished_post_speech_ms": summary(end),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, default=ROOT / "tests/assets/ggml-tiny.en.bin")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="whisper threads (1 on a machine shared with a job)")
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        rig = Rig(opts.model.parent, Path(tmp), threads=opts.threads)
        try:
            report = measure(rig, opts.model, clips(), Path(tmp), opts.repeats)
        finally:
            rig.close()
    report = {"model": opts.model.name, "threads": opts.threads, "silence_ms": SILENCE_MS, **report}
    print(json.dumps(report["summary"], indent=2))
    if opts.json:
        opts.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
