"""Long dictation: is the wait after 10 minutes of speech as short as after 10 seconds, and is memory flat?

    python bench/dictation.py [--minutes 10] [--short-runs 3] [--model tests/assets/ggml-tiny.en.bin] [--json OUT]

The real English recordings of bench/realspeech_data.py, one after another with 500 ms between them,
are played into the virtual microphone while one `transcribe_voice` (duration_ms 600000,
silence_ms 1500) listens: once for about 10 seconds of speech (`--short-runs` times), once for
`--minutes` of it. Per run:

- *wait*: from the "Recording finished" progress notification to the result (ms): what is left to
  transcribe when the speaker stops, since phrases are transcribed while the speaker goes on;
- *after speech*: from the end of the clip's last loud sample (play start + its offset) to the
  result, minus silence_ms (ms): what the user waits for, playback latency included;
- *progress gap*: the longest time between two progress notifications while listening (s);
- *RSS*: the server's resident memory 10 s into the speech, once a minute, at the end, and its peak (MB);
- *WER*: of the transcript against the recordings' own transcripts.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import audio_assets as A  # noqa: E402
import numpy as np  # noqa: E402
import realspeech_data  # noqa: E402
from latency import close_server  # noqa: E402
from realspeech import errors  # noqa: E402
from rig import ROOT, Rig, busy_cpus, proc_stats, stop_player  # noqa: E402

SILENCE_MS = 1500
GAP_MS = 500


def clips() -> list[dict]:
    """English recordings whose own pauses are shorter than the silence that ends the dictation."""
    return [c for c in realspeech_data.load() if c["language"] == "en" and c["longest_pause_ms"] < SILENCE_MS - 300]


def dictation(entries: list[dict], seconds: float, out: Path) -> tuple[Path, str, float]:
    """A WAV of recordings back to back for at least `seconds`; (path, reference text, last loud second)."""
    parts, texts, total = [A.silence(300)], [], 0.0
    while total < seconds:
        for entry in entries:
            parts += [Path(entry["path"]), A.silence(GAP_MS)]
            texts.append(entry["text"])
            total += entry["seconds"] + GAP_MS / 1000
            if total >= seconds:
                break
    parts[-1] = A.silence(SILENCE_MS + 2000)
    path = A.concat(parts, path=out)
    samples = A.read_wav(path)
    return path, " ".join(texts), A.last_loud_sample(samples) / A.RATE


class RssTrace:
    """The server's RSS once a second, in a thread."""

    def __init__(self, pid: int) -> None:
        self.pid, self.samples = pid, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self.samples.append((time.monotonic(), proc_stats(self.pid)["VmRSS"]))
            except OSError:
                return

    def at(self, t: float) -> float | None:
        return next((rss for when, rss in self.samples if when >= t), None)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def one_run(rig: Rig, model: Path, wav: Path, reference: str, speech_end_s: float, token: str) -> dict[str, Any]:
    server = rig.server()
    trace = RssTrace(server.proc.pid)
    args = {"whisper_model": model.name, "duration_ms": 600_000, "silence_ms": SILENCE_MS}
    try:
        rid, _ = server.start_tool("transcribe_voice", args, token)
        server.wait_until_recording()
        t_play, player = rig.play(wav)
        try:
            t_reply, msg = server.reply(rid, timeout=speech_end_s + 180)
        finally:
            stop_player(player)
        stats = proc_stats(server.proc.pid)
    finally:
        trace.close()
        close_server(server)
    result = (msg.get("result") or {}).get("structuredContent") or {}
    notices = server.progress_for(token)
    finished = next(t for t, p in notices if str(p.get("message", "")).startswith("Recording finished"))
    listening = [t for t, _ in notices if t <= finished]
    wrong, total = errors(reference, result.get("transcription") or "")
    return {
        "speech_s": round(speech_end_s, 1),
        "stopped_by": result.get("stopped_by"),
        "wait_ms": round((t_reply - finished) * 1000, 1),
        "after_speech_ms": round((t_reply - t_play - speech_end_s) * 1000 - SILENCE_MS, 1),
        "progress_gap_s": round(float(np.max(np.diff(listening))), 2) if len(listening) > 1 else None,
        "rss_10s_mb": trace.at(t_play + 10),
        "rss_every_minute_mb": [round(rss, 1) for when, rss in trace.samples if (when - t_play) % 60 < 1],
        "rss_end_mb": round(stats["VmRSS"], 1),
        "rss_peak_mb": round(stats["VmHWM"], 1),
        "wer": round(wrong / max(1, total), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--short-runs", type=int, default=3)
    parser.add_argument("--model", type=Path, default=ROOT / "tests/assets/ggml-tiny.en.bin")
    parser.add_argument("--threads", type=int, default=2, help="whisper threads; 0: the server's own choice per pass")
    parser.add_argument("--busy", type=int, default=0, help="other programs, each spinning one core, during the runs")
    parser.add_argument("--busy-nice", type=int, default=0, help="their nice level")
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args(argv)
    entries = clips()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rig = Rig(opts.model.parent, work, threads=opts.threads)
        runs: dict[str, list[dict]] = {"short": [], "long": []}
        try:
            with busy_cpus(opts.busy, opts.busy_nice):
                short = dictation(entries, 10, work / "short.wav")
                for i in range(opts.short_runs):
                    runs["short"].append(one_run(rig, opts.model, *short, f"short-{i}"))
                    print("short", runs["short"][-1], flush=True)
                if opts.minutes > 0:
                    long = dictation(entries, opts.minutes * 60 - 15, work / "long.wav")  # ends before the ceiling
                    runs["long"].append(one_run(rig, opts.model, *long, "long"))
                    print("long", runs["long"][-1], flush=True)
        finally:
            rig.close()
    report = {
        "model": opts.model.name,
        "threads": opts.threads or "auto",
        "busy": {"programs": opts.busy, "nice": opts.busy_nice},
        "silence_ms": SILENCE_MS,
        "gap_ms": GAP_MS,
        "runs": runs,
    }
    if opts.json:
        opts.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
