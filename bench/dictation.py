"""Long dictation: is the wait after 10 minutes of speech as short as after 10 seconds, is memory flat?

    python bench/dictation.py [--minutes 10] [--short-runs 3] [--threads 0] [--busy 1 --busy-nice 10] [--json OUT]

The real English recordings back to back, 500 ms apart, into one `transcribe_voice` (silence_ms 1500):
~10 s of speech `--short-runs` times, then `--minutes` of it. bench/README.md explains each figure.
"""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Any

from clips import real, wer
from rig import RATE, ROOT, TEST_MODEL, Rig, busy_cpus, proc_stats
from rig import audio_assets as A
from stats import Run, cli, save_report

SILENCE_MS, GAP_MS = 1500, 500


def dictation(entries: list[dict], seconds: float, out: Path) -> tuple[Path, str, float]:
    """Recordings back to back for at least `seconds`: (WAV, reference text, last loud second)."""
    parts, texts, total = [A.silence(300)], [], 0.0
    for entry in itertools.cycle(entries):
        if total >= seconds:
            break
        parts += [Path(entry["path"]), A.silence(GAP_MS)]
        texts.append(entry["text"])
        total += entry["seconds"] + GAP_MS / 1000
    parts[-1] = A.silence(SILENCE_MS + 2000)
    path = A.concat(parts, path=out)
    return path, " ".join(texts), A.last_loud_sample(A.read_wav(path)) / RATE


def sample_rss(pid: int, done: threading.Event, out: list[tuple[float, float]]) -> None:
    """The server's RSS once a second until `done`."""
    while not done.wait(1.0):
        out.append((time.monotonic(), proc_stats(pid)["VmRSS"]))


def one_run(rig: Rig, model: Path, wav: Path, reference: str, speech_end_s: float, token: str) -> dict[str, Any]:
    rss, done = [], threading.Event()
    with rig.server() as server:
        sampler = threading.Thread(target=sample_rss, args=(server.proc.pid, done, rss))
        try:
            sampler.start()
            args = {"whisper_model": model.name, "duration_ms": 600_000, "silence_ms": SILENCE_MS}
            run = rig.play_during(server, "transcribe_voice", args, wav, token, timeout=speech_end_s + 180)
            stats = server.stats
        finally:
            done.set()
            sampler.join(timeout=5)
    result, t_play, t_reply = run["result"], run["t_play"], run["t_reply"]
    finished = server.notice(token, "Recording finished")
    listening = [t for t, _ in server.progress_for(token) if t <= finished]
    return {"speech_s": round(speech_end_s, 1), "stopped_by": result.get("stopped_by"),
            "wait_ms": round((t_reply - finished) * 1000, 1),
            "after_speech_ms": round((t_reply - t_play - speech_end_s) * 1000 - SILENCE_MS, 1),
            "progress_gap_s": round(max(b - a for a, b in zip(listening, listening[1:])), 2) if len(listening) > 1 else None,
            "rss_10s_mb": next((m for t, m in rss if t >= t_play + 10), None),
            "rss_every_minute_mb": [round(m, 1) for t, m in rss if (t - t_play) % 60 < 1],
            "rss_end_mb": round(stats["VmRSS"], 1), "rss_peak_mb": round(stats["VmHWM"], 1),
            "wer": round(wer(reference, result.get("transcription") or ""), 3)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    opts = cli(__doc__, argv, ("--minutes", 10.0, "the long run's speech (0 skips it)"), ("--short-runs", 3, "10 s runs"),
               ("--model", TEST_MODEL, "whisper model"), ("--threads", 2, "whisper threads; 0: the server's choice per pass"),
               ("--busy", 0, "programs spinning one core each during the runs"), ("--busy-nice", 0, "their nice level"),
               ("--json", ROOT / "bench" / "results-dictation.json", "the report"))  # fmt: skip
    entries = real(language="en", pause_under_ms=SILENCE_MS - 300)
    run, runs = Run("pywhispercpp", **vars(opts)), {"short": [], "long": []}
    plan = [("short", 10, f"short-{i}") for i in range(opts.short_runs)]
    plan += [("long", opts.minutes * 60 - 15, "long")] if opts.minutes > 0 else []  # ends before the 10-minute ceiling
    with Rig(opts.model.parent, threads=opts.threads) as rig, busy_cpus(opts.busy, opts.busy_nice):
        for kind, seconds, token in plan:
            speech = dictation(entries, seconds, rig.workdir / f"{kind}.wav")
            runs[kind].append(one_run(rig, opts.model, *speech, token))
            print(kind, runs[kind][-1], flush=True)
    save_report({**run.end(), "silence_ms": SILENCE_MS, "gap_ms": GAP_MS, "runs": runs}, opts.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
