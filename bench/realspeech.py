"""Real-speech benchmark: real human recordings through the virtual microphone into the real server.

    python bench/realspeech.py [--model PATH ...] [--runs N] [--fresh N] [--json OUT]

Clips come from bench/realspeech_data.py (rebuilt from pinned registry packages). For each
model, each clip plays through the virtual microphone into `transcribe_voice` (stop on
silence, silence_ms 1000) of a real `python -m mcp_listen`, and the same clip is transcribed
whole in this process with the project's Transcriber (same model, threads and parameters).
Reported per model: WER of both against the reference transcript (and of the pipeline
against the whole-clip text), post-speech latency (end of the silence window to the result),
the first call in a fresh process, and the stop time after the end of speech. English-only
models (`*.en`) get the English clips only; multilingual ones get every clip with its
language set, and the non-English ones again with `language: "auto"`.
bench/README.md ("Real speech") explains the method.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
import unicodedata
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import latency
import realspeech_data
from clips import Clip
from rig import RATE, ROOT, Rig, TimedServer, busy_cpus
from rig import audio_assets as A
from stats import summary, verdict

LEAD_MS = 300
"""Silence played before each clip (the clips keep their own leading and trailing room tone)."""


class CpuTrace:
    """The server's CPU time (all threads), sampled every 5 ms by a thread in this process.

    CPU seconds spent between the end of the silence window and the reply measure the work
    left after the stop without the time spent waiting for a CPU. They are not load-proof
    either: on a busy machine the phrase worker falls behind during the recording, so more
    phrases are left after the stop, and whisper.cpp's threads spin while they wait for
    each other."""

    def __init__(self, pid: int) -> None:
        import threading

        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._pid = pid
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from rig import proc_stats

        while not self._stop.wait(0.005):
            try:
                self.samples.append((time.monotonic(), proc_stats(self._pid)["cpu_s"]))
            except (OSError, ValueError, IndexError):
                return

    def at(self, t: float) -> float | None:
        """CPU seconds used by time t (the last sample taken at or before t)."""
        before = [cpu for when, cpu in self.samples if when <= t]
        return before[-1] if before else None

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1)


# --------------------------------------------------------------------------- word error rate


def words(text: str) -> list[str]:
    """Lowercase words without punctuation or accents; numbers stay as written ("ten" != "10").

    Accents are dropped because the Asterisk transcripts omit many of them ("numero") while
    whisper writes them ("número"); apostrophes inside words are kept ("d'echo").
    """
    text = unicodedata.normalize("NFKD", (text or "").lower().replace("\u2019", "'"))
    text = "".join(ch for ch in text if not unicodedata.combining(ch))
    text = re.sub(r"[^\w']+|_", " ", text)
    return [w.strip("'") for w in text.split() if w.strip("'")]


def errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(word-level edit distance, reference words)."""
    ref, hyp = words(reference), words(hypothesis)
    previous = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        current = [i]
        for j, h in enumerate(hyp, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h)))
        previous = current
    return previous[-1], len(ref)


def wer(pairs: list[tuple[str, str]]) -> float | None:
    """Corpus WER in percent: all errors over all reference words (long clips weigh more)."""
    counts = [errors(r, h) for r, h in pairs]
    total = sum(n for _, n in counts)
    return round(100 * sum(e for e, _ in counts) / total, 2) if total else None


# --------------------------------------------------------------------------- clips and models


def playable(entry: dict, silence_ms: int) -> Clip:
    """Lead silence + the recording + a tail longer than silence_ms, as a WAV to play."""
    path = A.concat([A.silence(LEAD_MS), Path(entry["path"]), A.silence(silence_ms + 2000)])
    samples = A.read_wav(path)
    return Clip(
        entry["id"], entry["text"], path, A.first_loud_sample(samples), A.last_loud_sample(samples), len(samples)
    )


def multilingual(model: Path) -> bool:
    """whisper's English-only models are named *.en (ggml-tiny.en.bin)."""
    return ".en." not in model.name and not model.stem.endswith(".en")


def model_label(model: Path) -> str:
    return model.name.removeprefix("ggml-").removesuffix(".bin")


def jobs(entries: list[dict], model: Path) -> list[tuple[dict, str]]:
    """(clip, language to ask for) for this model: English-only models get English clips."""
    if not multilingual(model):
        return [(e, "en") for e in entries if e["language"] == "en"]
    fixed = [(e, e["language"]) for e in entries]
    return fixed + [(e, "auto") for e in entries if e["language"] != "en"]


# --------------------------------------------------------------------------- whole clip, in process


def whole_clip(model: Path, work: list[tuple[dict, str]], clips: dict[str, Clip], opts: Any) -> dict:
    """Each clip transcribed at once by the project's Transcriber: 1 s before the first loud
    sample (the pipeline's pre-roll) to 300 ms after the last, as run.py's WER section does."""
    from mcp_listen.whisper import text as W
    from mcp_listen.whisper import transcriber as T

    tr = T.Transcriber(threads=opts.threads or None)
    t = time.perf_counter()
    tr.load(model)
    out: dict[str, Any] = {"_load_ms": round((time.perf_counter() - t) * 1000, 1)}
    try:
        for entry, language in work:
            clip = clips[entry["id"]]
            samples = A.read_wav(clip.path)
            audio = W.condition(samples[max(0, clip.first_loud - RATE) : clip.last_loud + int(0.3 * RATE)])
            texts, times = [], []
            for _ in range(opts.runs):
                t = time.perf_counter()
                raw = tr.transcribe(audio, path=model, language=language)
                texts.append(W.usable_text(raw) or "")  # markers such as [Music] go, as in the pipeline
                times.append((time.perf_counter() - t) * 1000)
            out[f"{entry['id']}/{language}"] = {"texts": texts, "transcribe_ms": summary(times)}
    finally:
        tr.unload()
    return out


# --------------------------------------------------------------------------- through the server


def transcribe_voice(
    rig: Rig, server: TimedServer, clip: Clip, model: Path, language: str, opts: Any, token: str, trace: CpuTrace
) -> dict[str, Any]:
    """One transcribe_voice while `clip` plays: the text, what came back, and the clocks."""
    args = {
        "stop_on_silence": True,
        "silence_ms": opts.silence_ms,
        "duration_ms": 30000,
        "whisper_model": model.name,
        "language": language,
    }
    run = latency._play_during(rig, server, "transcribe_voice", args, clip.path, token)
    data = run["result"]
    try:
        clock = latency._speech_end_time(rig, clip, run["t_play"], run["t_reply"])
    except (RuntimeError, ValueError):  # the result came before the clip ended: stopped at a pause
        clock = None
    t_fin = latency._finished_at(server, token)
    call = {
        "clip": clip.name,
        "language_asked": language,
        "language_returned": data.get("language"),
        "stopped_by": data.get("stopped_by"),
        "duration_ms": data.get("duration_ms"),
        "transcription": data.get("transcription") or "",
        "ended_before_speech": clock is None,
    }
    if clock is not None:
        t_end = clock["t_speech_end"]
        call.update(
            post_speech_ms=(run["t_reply"] - t_end) * 1000 - opts.silence_ms,
            stop_wall_ms=(t_fin - t_end) * 1000 - opts.silence_ms if t_fin else None,
            finished_notice_to_result_ms=(run["t_reply"] - t_fin) * 1000 if t_fin else None,
            monitor_peak=round(clock["monitor_peak"], 5),
        )
        window_end = t_end + opts.silence_ms / 1000
        cpu = [trace.at(window_end), trace.at(run["t_reply"])]
        if None not in cpu:
            call["cpu_after_window_ms"] = (cpu[1] - cpu[0]) * 1000
    return call


def session(
    rig: Rig, model: Path, work: list[tuple[dict, str]], clips: dict[str, Clip], opts: Any, tag: str
) -> list[dict]:
    """A fresh server; every job in turn. The first call is marked cold (first in the process)."""
    rig.model_dir = model.parent
    server = rig.server()
    trace = CpuTrace(server.proc.pid)
    calls = []
    try:
        for i, (entry, language) in enumerate(work):
            call = transcribe_voice(rig, server, clips[entry["id"]], model, language, opts, f"rs-{tag}-{i}", trace)
            call["cold"] = i == 0
            calls.append(call)
            print(
                f"  {call['clip']:32} {language:4} post-speech {call.get('post_speech_ms', float('nan')):7.1f} ms"
                f"{' (first call)' if i == 0 else ''}",
                flush=True,
            )
    finally:
        trace.close()
        latency.close_server(server)
    return calls


def pipeline_runs(rig: Rig, model: Path, work: list[tuple[dict, str]], clips: dict[str, Clip], opts: Any) -> list[dict]:
    """`runs` sessions over every job (order rotated per run), then `fresh` one-call sessions."""
    calls: list[dict] = []
    label = model_label(model)
    for r in range(opts.runs):
        shift = (r * 3) % len(work)
        calls += session(rig, model, work[shift:] + work[:shift], clips, opts, f"{label}-{r}")
    fresh = [j for j in work if j[1] != "auto" and j[0]["longest_pause_ms"] < opts.silence_ms]
    for k in range(opts.fresh):
        job = fresh[(k * 5 + 1) % len(fresh)]
        calls += session(rig, model, [job], clips, opts, f"{label}-fresh-{k}")
    return calls


def stop_times(rig: Rig, clips: dict[str, Clip], opts: Any) -> dict[str, Any]:
    """capture_audio with stop on silence on every clip: stop time counted in samples on the
    returned WAV (latency.capture_stop), as the espeak stop-latency bench does. No model."""
    server = rig.server()
    runs = []
    try:
        for r in range(opts.stop_runs):
            for name, clip in clips.items():
                try:
                    runs.append(latency.capture_stop(rig, server, clip, opts.silence_ms, f"stop-{r}-{name}"))
                except ValueError:  # the WAV ends before the speech does: stopped at an inner pause
                    runs.append(
                        {
                            "clip": name,
                            "stopped_by": "silence (before the end of speech)",
                            "stop_latency_ms": None,
                            "wav_peak": None,
                        }
                    )
    finally:
        latency.close_server(server)
    return {
        "stop_latency_ms": summary(
            r["stop_latency_ms"] for r in runs if r["stop_latency_ms"] is not None and r["stopped_by"] == "silence"
        ),
        "note": "capture_audio's duration_ms is 20000 (latency.capture_stop): a clip that reaches it "
        "ends at the ceiling and is left out, as is one that stops at an inner pause",
        "stopped_by": sorted({r["stopped_by"] for r in runs}),
        "runs": [{k: r[k] for k in ("clip", "stopped_by", "stop_latency_ms", "wav_peak")} for r in runs],
    }


# --------------------------------------------------------------------------- figures


def per_job(entry: dict, language: str, whole: dict, calls: list[dict], silence_ms: int) -> dict:
    """One clip x language: transcripts, WERs, latencies."""
    key = f"{entry['id']}/{language}"
    mine = [c for c in calls if c["clip"] == entry["id"] and c["language_asked"] == language]
    texts = [c["transcription"] for c in mine]
    whole_texts = whole[key]["texts"]
    ref = entry["text"]
    return {
        "clip": entry["id"],
        "language": entry["language"],
        "asked": language,
        "seconds": entry["seconds"],
        "longest_pause_ms": entry["longest_pause_ms"],
        "pause_longer_than_silence": entry["longest_pause_ms"] >= silence_ms,
        "reference": ref,
        "wer_pipeline": wer([(ref, t) for t in texts]),
        "wer_whole": wer([(ref, t) for t in whole_texts]),
        "wer_pipeline_vs_whole": wer([(whole_texts[0], t) for t in texts]),
        "pipeline_texts": sorted(set(texts)),
        "whole_texts": whole_texts,
        "whole_transcribe_ms": whole[key]["transcribe_ms"],
        "languages_returned": sorted({str(c["language_returned"]) for c in mine}),
        "stopped_by": sorted({str(c["stopped_by"]) for c in mine}),
        "ended_before_speech": sum(c["ended_before_speech"] for c in mine),
        "post_speech_ms": [round(c["post_speech_ms"], 1) for c in mine if c.get("post_speech_ms") is not None],
        "_pairs": ([(ref, t) for t in texts], [(ref, t) for t in whole_texts]),
    }


def group(rows: list[dict], calls: list[dict]) -> dict:
    """Corpus WERs and latencies over a set of clip x language rows."""
    keys = {(r["clip"], r["asked"]) for r in rows}
    mine = [c for c in calls if (c["clip"], c["language_asked"]) in keys]
    pipe = wer([p for r in rows for p in r["_pairs"][0]])
    whole = wer([p for r in rows for p in r["_pairs"][1]])
    return {
        "clips": len(rows),
        "reference_words": sum(len(words(r["reference"])) for r in rows),
        "wer_pipeline_pct": pipe,
        "wer_whole_pct": whole,
        "wer_gap_points": round(pipe - whole, 2) if pipe is not None and whole is not None else None,
        "post_speech_warm_ms": summary(
            c["post_speech_ms"] for c in mine if not c["cold"] and c.get("post_speech_ms") is not None
        ),
        "stop_wall_ms": summary(c["stop_wall_ms"] for c in mine if c.get("stop_wall_ms") is not None),
        "server_cpu_after_window_warm_ms": summary(
            c["cpu_after_window_ms"] for c in mine if not c["cold"] and c.get("cpu_after_window_ms") is not None
        ),
    }


def analyse(model: Path, work: list[tuple[dict, str]], whole: dict, calls: list[dict], silence_ms: int) -> dict:
    """Per-clip rows and, per language asked, the corpus figures (utterances only: clips whose
    inner pause is longer than silence_ms end at that pause by design and are listed apart)."""
    rows = [per_job(e, lang, whole, calls, silence_ms) for e, lang in work]
    utterances = [r for r in rows if not r["pause_longer_than_silence"]]
    groups: dict[str, Any] = {}
    for name in sorted({r["language"] + ("/auto" if r["asked"] == "auto" else "") for r in rows}):
        sel = [r for r in utterances if r["language"] + ("/auto" if r["asked"] == "auto" else "") == name]
        if sel:
            groups[name] = group(sel, calls)
    fixed = [r for r in utterances if r["asked"] != "auto"]
    groups["all_fixed_language"] = group(fixed, calls)
    for name in [n for n in groups if n.endswith("/auto")]:
        auto, same = groups[name]["post_speech_warm_ms"], groups[name[:-5]]["post_speech_warm_ms"]
        if auto.get("median") and same.get("median"):
            groups[name]["post_speech_median_vs_fixed"] = round(auto["median"] / same["median"], 2)
    first = [c for c in calls if c["cold"] and c.get("post_speech_ms") is not None]
    for r in rows:
        r.pop("_pairs")
    return {
        "model": model.name,
        "multilingual": multilingual(model),
        "groups": groups,
        "load_in_bench_process_ms": whole["_load_ms"],
        "first_call_post_speech_ms": summary(c["post_speech_ms"] for c in first),
        "first_call_server_cpu_after_window_ms": summary(
            c["cpu_after_window_ms"] for c in first if c.get("cpu_after_window_ms") is not None
        ),
        "clips_with_pause_longer_than_silence": [r["clip"] for r in rows if r["pause_longer_than_silence"]],
        "jobs": rows,
        "calls": calls,
    }


def targets(models: dict[str, dict]) -> dict[str, Any]:
    """Issue 14's targets next to the figures."""
    out: dict[str, Any] = {}
    for label, m in models.items():
        g = m["groups"]["all_fixed_language"]
        out[f"{label}_wer_gap_points"] = verdict(g["wer_gap_points"], 1.0)
        out[f"{label}_post_speech_median_ms"] = verdict(g["post_speech_warm_ms"].get("median"), 50)
        out[f"{label}_post_speech_p90_ms"] = verdict(g["post_speech_warm_ms"].get("p90"), 100)
        out[f"{label}_first_call_median_ms"] = verdict(m["first_call_post_speech_ms"].get("median"), 500)
        out[f"{label}_first_call_max_ms"] = verdict(m["first_call_post_speech_ms"].get("max"), 500)
    return out


# --------------------------------------------------------------------------- main


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--model", type=Path, action="append", help="whisper model file, repeatable (default: MCP_LISTEN_TEST_MODEL)"
    )
    p.add_argument("--runs", type=int, default=1, help="passes over the clips per model (default 1)")
    p.add_argument("--fresh", type=int, default=3, help="extra one-call fresh servers per model (default 3)")
    p.add_argument("--stop-runs", type=int, default=1, help="capture_audio passes for stop time (0 skips)")
    p.add_argument("--threads", type=int, default=2, help="whisper threads (default 2); 0: the server's own choice")
    p.add_argument("--busy", type=int, default=0, help="other programs, each spinning one core, during the run")
    p.add_argument("--busy-nice", type=int, default=0, help="their nice level")
    p.add_argument("--silence-ms", type=int, default=1000, help="silence_ms of every call (default 1000)")
    p.add_argument("--only", default="", help="comma-separated clip ids (default: all)")
    p.add_argument("--cache", type=Path, default=realspeech_data.DEFAULT_CACHE, help="clip cache folder")
    p.add_argument("--json", type=Path, default=ROOT / "bench" / "results-realspeech.json", help="report file")
    p.add_argument(
        "--rescore",
        action="store_true",
        help="measure nothing: recompute the WERs and groups of the report file from its transcripts",
    )
    p.add_argument(
        "--append",
        action="store_true",
        help="keep the models (and stop times) already in the report file, replacing those measured now",
    )
    opts = p.parse_args(argv)
    if not opts.model:
        env = os.environ.get("MCP_LISTEN_TEST_MODEL")
        opts.model = [Path(env)] if env else []
    for model in opts.model:
        if not model.is_file():
            p.error(f"whisper model {model} not found (pass --model PATH or set MCP_LISTEN_TEST_MODEL)")
    if not opts.model:
        p.error("no whisper model: pass --model PATH (repeatable) or set MCP_LISTEN_TEST_MODEL")
    return opts


def main(argv: list[str] | None = None) -> int:
    import run

    opts = parse(argv)
    if opts.rescore:
        return rescore(opts)
    began = time.monotonic()
    entries = realspeech_data.load(opts.cache)
    if opts.only:
        entries = [e for e in entries if e["id"] in opts.only.split(",")]
    clips = {e["id"]: playable(e, opts.silence_ms) for e in entries}
    report: dict[str, Any] = {
        "machine": run.machine(),
        "config": {**vars(opts), "model": [str(m) for m in opts.model]},
        "clips": [{k: v for k, v in e.items() if k != "path"} for e in entries],
        "models": {},
    }
    report["config"] = {k: str(v) if isinstance(v, Path) else v for k, v in report["config"].items()}
    busy = run.CpuBusy()
    workdir = Path(tempfile.mkdtemp(prefix="mcp-listen-realspeech-"))
    rig = Rig(opts.model[0].parent, workdir, threads=opts.threads)
    try:
        rig.start_monitor()  # before the first clip plays: its end is timed on the monitor's clock
        if opts.stop_runs:
            print("[stop time] capture_audio on every clip", flush=True)
            report["stop"] = stop_times(rig, clips, opts)
        with busy_cpus(opts.busy, opts.busy_nice):
            for model in opts.model:
                report["models"][model_label(model)] = measure(rig, model, entries, clips, opts)
    finally:
        rig.close()
        report["machine"]["cpu_busy_during_run_pct"] = busy.percent()
        report["machine"]["loadavg_end"] = run.loadavg()
        report["elapsed_s"] = round(time.monotonic() - began, 1)
        if opts.append and opts.json.exists():
            merge(report, json.loads(opts.json.read_text()))
        report["targets"] = targets(report["models"])
        shutil.rmtree(workdir, ignore_errors=True)
        opts.json.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    print_summary(report)
    print(f"\nreport: {opts.json}  ({report['elapsed_s']} s)")
    return 0


def rescore(opts: Any) -> int:
    """Recompute every model's rows and groups from the transcripts kept in the report (after a
    change to the text normalisation or to the whole-clip marker filter): no audio is played."""
    from mcp_listen.whisper.text import usable_text

    report = json.loads(opts.json.read_text())
    entries = {e["id"]: e for e in realspeech_data.load(opts.cache)}
    for mod in report["models"].values():
        model = Path(mod["model"])
        work = [(entries[j["clip"]], j["asked"]) for j in mod["jobs"]]
        whole = {
            f"{j['clip']}/{j['asked']}": {
                "texts": [usable_text(t) or "" for t in j["whole_texts"]],
                "transcribe_ms": j["whole_transcribe_ms"],
            }
            for j in mod["jobs"]
        }
        whole["_load_ms"] = mod["load_in_bench_process_ms"]
        redone = analyse(model, work, whole, mod["calls"], report["config"]["silence_ms"])
        mod.update({k: v for k, v in redone.items() if k != "calls"})
        mod["rescored"] = time.strftime("%Y-%m-%d %H:%M")
    report["targets"] = targets(report["models"])
    opts.json.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    print_summary(report)
    return 0


def merge(report: dict, old: dict) -> None:
    """Models and stop times from an earlier report that this run did not measure (--append);
    each model keeps the machine figures of its own run."""
    for label, figures in old.get("models", {}).items():
        if label not in report["models"]:
            report["models"][label] = figures
    if "stop" not in report and "stop" in old:
        report["stop"] = old["stop"]
    report["earlier_runs"] = old.get("earlier_runs", []) + [
        {"machine": old.get("machine"), "config": old.get("config"), "elapsed_s": old.get("elapsed_s")}
    ]


def measure(rig: Rig, model: Path, entries: list[dict], clips: dict[str, Clip], opts: Any) -> dict:
    """Whole-clip then pipeline figures of one model, with how busy the machine was meanwhile."""
    import run

    busy, load = run.CpuBusy(), run.loadavg()
    work = jobs(entries, model)
    print(f"[{model_label(model)}] whole-clip transcription in process ({len(work)} jobs)", flush=True)
    whole = whole_clip(model, work, clips, opts)
    print(f"[{model_label(model)}] through the server", flush=True)
    calls = pipeline_runs(rig, model, work, clips, opts)
    figures = analyse(model, work, whole, calls, opts.silence_ms)
    figures["machine"] = {
        "loadavg_start": load,
        "loadavg_end": run.loadavg(),
        "cpu_busy_pct": busy.percent(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    return figures


def print_summary(report: dict) -> None:
    m = report["machine"]
    print(
        f"\nmachine: {m['nproc']} x {m['cpu']}, load {m['loadavg_start']} -> {m.get('loadavg_end')}, "
        f"all-CPU busy {m.get('cpu_busy_during_run_pct')} %"
    )
    if report.get("stop"):
        print(f"stop time (capture_audio, samples): {report['stop']['stop_latency_ms']}")
    for label, mod in report["models"].items():
        print(
            f"\n{label}: first call in a fresh process {mod['first_call_post_speech_ms']}; "
            f"model load in the bench process {mod['load_in_bench_process_ms']} ms"
        )
        for name, g in mod["groups"].items():
            ps = g["post_speech_warm_ms"]
            print(
                f"  {name:20} WER pipeline {g['wer_pipeline_pct']} % vs whole {g['wer_whole_pct']} % "
                f"(gap {g['wer_gap_points']} pts, {g['reference_words']} words); post-speech median "
                f"{ps.get('median')} p90 {ps.get('p90')} ms (n={ps.get('n')}); stop (wall) "
                f"{g['stop_wall_ms'].get('median')} ms; server CPU after the window "
                f"{g['server_cpu_after_window_warm_ms'].get('median')} ms"
            )
        for r in mod["jobs"]:
            print(
                f"    {r['clip']:32} {r['asked']:4} WER {r['wer_pipeline']} / whole {r['wer_whole']} "
                f"returned {r['languages_returned']} stopped {r['stopped_by']}"
            )
    print("targets:")
    for name, v in report["targets"].items():
        mark = "PASS" if v.get("ok") else "MISS" if v.get("ok") is False else "  - "
        print(f"  {mark} {name}: {v['value']} (target {v['target']})")


if __name__ == "__main__":
    sys.exit(main())
