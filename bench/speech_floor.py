"""The least post-speech latency the listening loop's design can give on this machine, per model.

    python bench/speech_floor.py [--model PATH ...] [--repeat 3] [--silence-ms 1000] [--json OUT]

Post-speech latency is the time whisper still needs for the last phrase once the silence window
has ended. The loop hands that phrase to whisper when the speaker pauses (a phrase cut, or a
speculation), so whisper has a head start: from that hand-over to the stop. This replays each
real recording of bench/realspeech_data.py (played as realspeech.py plays it) window by window
through the real Listener (Silero, endpointer, phrase cutter), with a sink that records the
phrases instead of transcribing them; the head start is counted in windows (no clock). Then the
last phrase is transcribed `--repeat` times by the project's Transcriber on an otherwise idle
process (after one warm-up call): its median wall time is what whisper needs.

- *floor* = max(0, needs − head start): the post-speech latency with nothing else competing
  for the CPU, the best the live benchmark (bench/realspeech.py) can show on this machine.
- *at the end of speech* = max(0, needs − (stop − last loud sample)): what it would be if
  whisper could start the instant the last loud sample was heard (no VAD lag, no pause to
  confirm): the bound of any scheduling, for a model this fast on this machine.

Groups leave out `jfk`, whose 1.18 s inner pause ends the utterance (as realspeech.py does).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import realspeech_data  # noqa: E402
from realspeech import model_label, multilingual, playable  # noqa: E402
from rig import RATE, ROOT  # noqa: E402
from rig import audio_assets as A  # noqa: E402
from stats import summary  # noqa: E402

from mcp_listen.contract.limits import WINDOW_MS, WINDOW_SAMPLES

LEFT_OUT = {"jfk"}


class PhraseLog:
    """Stands in for the phrase worker: remembers what the listener handed over, and when."""

    def __init__(self) -> None:
        self.handed: list[tuple[str, int, Any]] = []
        self.window = 0

    def submit(self, audio: Any) -> None:
        self.handed.append(("cut", self.window, audio))

    def speculate(self, audio: Any, key: tuple[int, int]) -> None:
        self.handed.append(("speculation", self.window, audio))

    def detect(self, audio: Any) -> None:
        """Language detection is not timed here: every clip is transcribed in its own language."""


def last_phrase(samples: Any, silence_ms: int) -> dict[str, Any]:
    """Replay `samples` through the real Listener; the last hand-over and the stop, in windows."""
    from mcp_listen.speech.listener import Listener, Plan

    log = PhraseLog()
    listener = Listener(Plan(max_ms=60000, stop_on_silence=True, silence_ms=silence_ms, device=None), None, None, log)
    reason = None
    for start in range(0, len(samples) - WINDOW_SAMPLES + 1, WINDOW_SAMPLES):
        log.window += 1
        reason = listener.on_window(samples[start : start + WINDOW_SAMPLES])
        if reason:
            break
    if not log.handed:
        raise RuntimeError(f"no phrase was handed over (stopped by {reason})")
    kind, at, audio = log.handed[-1]
    return {"kind": kind, "handed_window": at, "stop_window": log.window, "stopped_by": reason, "audio": audio}


def needs_ms(tr: Any, model: Path, audio: Any, language: str, repeat: int) -> list[float]:
    from mcp_listen.whisper.text import condition

    conditioned = condition(audio)
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        tr.hear(conditioned, path=model, language=language, prompt="")
        times.append((time.perf_counter() - began) * 1000)
    return times


def measure(model: Path, entries: list[dict], opts: Any) -> dict[str, Any]:
    from mcp_listen.whisper.transcriber import Transcriber

    tr = Transcriber(threads=opts.threads)
    tr.load(model)
    rows: dict[str, Any] = {}
    try:
        warm = True
        for entry in entries:
            clip = playable(entry, opts.silence_ms)
            samples = A.read_wav(clip.path)
            last = last_phrase(samples, opts.silence_ms)
            if warm:  # the first call in a process pays for buffers; the live bench reports it apart
                needs_ms(tr, model, last["audio"], entry["language"], 1)
                warm = False
            times = needs_ms(tr, model, last["audio"], entry["language"], opts.repeat)
            head_start = (last["stop_window"] - last["handed_window"]) * WINDOW_MS
            stop_after_speech = last["stop_window"] * WINDOW_MS - (clip.last_loud + 1) * 1000 / RATE
            needs = statistics.median(times)
            rows[entry["id"]] = {
                "language": entry["language"],
                "last_phrase_s": round(len(last["audio"]) / RATE, 2),
                "handed_over_as": last["kind"],
                "stopped_by": last["stopped_by"],
                "handed_after_speech_ms": round(stop_after_speech - head_start, 1),
                "head_start_ms": head_start,
                "needs_ms": summary(times),
                "floor_ms": round(max(0.0, needs - head_start), 1),
                "at_end_of_speech_ms": round(max(0.0, needs - stop_after_speech), 1),
            }
            row = rows[entry["id"]]
            print(
                f"  {entry['id']:32} last {row['last_phrase_s']:5.2f} s, handed {row['handed_after_speech_ms']:4.0f} ms "
                f"after the speech, head start {head_start:4} ms, needs {needs:5.0f} ms -> floor "
                f"{row['floor_ms']:5.0f} ms",
                flush=True,
            )
    finally:
        tr.unload()
    grouped = [r for clip_id, r in rows.items() if clip_id not in LEFT_OUT]
    return {
        "clips": rows,
        "floor_ms": summary(r["floor_ms"] for r in grouped),
        "at_end_of_speech_ms": summary(r["at_end_of_speech_ms"] for r in grouped),
        "needs_ms": summary(r["needs_ms"]["median"] for r in grouped),
        "head_start_ms": summary(r["head_start_ms"] for r in grouped),
        "handed_after_speech_ms": summary(r["handed_after_speech_ms"] for r in grouped),
        "last_phrase_s": summary((r["last_phrase_s"] for r in grouped), 2),
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--model", type=Path, action="append", help="whisper model, repeatable (default: MCP_LISTEN_TEST_MODEL)"
    )
    p.add_argument("--repeat", type=int, default=3, help="timed transcriptions of each last phrase (default 3)")
    p.add_argument("--threads", type=int, default=2, help="whisper threads (default 2)")
    p.add_argument("--silence-ms", type=int, default=1000, help="silence_ms (default 1000)")
    p.add_argument("--cache", type=Path, default=realspeech_data.DEFAULT_CACHE, help="clip cache folder")
    p.add_argument("--json", type=Path, default=ROOT / "bench" / "results-speech-floor.json", help="report file")
    opts = p.parse_args(argv)
    env = os.environ.get("MCP_LISTEN_TEST_MODEL")
    opts.model = opts.model or ([Path(env)] if env else [])
    if not opts.model or not all(m.is_file() for m in opts.model):
        p.error("pass --model PATH (repeatable) for existing model files, or set MCP_LISTEN_TEST_MODEL")
    return opts


def main(argv: list[str] | None = None) -> int:
    import run

    opts = parse(argv)
    entries = realspeech_data.load(opts.cache)
    report: dict[str, Any] = {
        "machine": run.machine(),
        "silence_ms": opts.silence_ms,
        "repeat": opts.repeat,
        "models": {},
    }
    for model in opts.model:
        print(f"[{model_label(model)}]", flush=True)
        own = entries if multilingual(model) else [e for e in entries if e["language"] == "en"]
        report["models"][model_label(model)] = measure(model, own, opts)
    opts.json.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    for label, m in report["models"].items():
        print(
            f"{label}: floor median {m['floor_ms']['median']} ms, p90 {m['floor_ms']['p90']} ms; "
            f"at the end of speech median {m['at_end_of_speech_ms']['median']} ms, p90 "
            f"{m['at_end_of_speech_ms']['p90']} ms; whisper needs median {m['needs_ms']['median']} ms "
            f"(max {m['needs_ms']['max']}), head start median {m['head_start_ms']['median']} ms"
        )
    print(f"report: {opts.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
