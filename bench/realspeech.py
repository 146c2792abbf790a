"""Real human recordings through the virtual microphone into the real server, per whisper model: the WER
gap, the result after the silence window, the first call, the stop; with `--dictation`, the English ones back
to back: is the wait after 10 minutes of speech as short as after 10 seconds, is memory flat?
bench/README.md ("Real speech") explains the clips and each figure; docs/performance.md the dictation's.

    python bench/realspeech.py --model tests/assets/ggml-tiny.en.bin [--model M ...] [--runs 1] [--fresh 3] [--threads 0]
    python bench/realspeech.py --vocabulary --model tests/assets/ggml-tiny.en.bin --model tests/assets/ggml-base.bin
    python bench/realspeech.py --dictation [--minutes 10] [--short-runs 3] [--threads 0] [--busy 1 --busy-nice 10]
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from clips import Clip, capture_stop, corpus_wer, playable, real, wer, words
from rig import RATE, ROOT, TEST_MODEL, Rig, busy_cpus, proc_stats
from rig import audio_assets as A
from stats import Run, cli, save_report, summary, verdict

from mcp_listen.whisper import text as W
from mcp_listen.whisper.transcriber import Transcriber

DICTATION_SILENCE_MS, GAP_MS = 1500, 500
"""--dictation's silence_ms, and the pause between two recordings."""


def jobs(entries: list[dict], model: Path) -> list[tuple[dict, str]]:
    """(clip, language asked) for this model; whisper's English-only models are named *.en."""
    if ".en." in model.name or model.stem.endswith(".en"):
        return [(e, "en") for e in entries if e["language"] == "en"]
    return [(e, e["language"]) for e in entries] + [(e, "auto") for e in entries if e["language"] != "en"]


def transcribe_voice(rig: Rig, server: Any, clip: Clip, model: Path, language: str, opts: Any, token: str) -> dict:
    """One transcribe_voice while `clip` plays: the text, what came back, and the clocks."""
    args = {"stop_on_silence": True, "silence_ms": opts.silence_ms, "duration_ms": 30000,
            "whisper_model": model.name, "language": language}  # fmt: skip
    run = rig.play_during(server, "transcribe_voice", args, clip.path, token)
    data = run["result"]
    call = {"clip": clip.name, "language_asked": language, "language_returned": data.get("language"),
            "stopped_by": data.get("stopped_by"), "transcription": data.get("transcription") or ""}  # fmt: skip
    try:
        t_end = rig.speech_end(clip, run["t_play"], run["t_reply"])["t_speech_end"]
    except (RuntimeError, ValueError):  # the result came before the clip ended: stopped at a pause
        return {**call, "ended_before_speech": True}
    t_fin = server.notice(token, "Recording finished")
    return {**call, "ended_before_speech": False, "post_speech_ms": (run["t_reply"] - t_end) * 1000 - opts.silence_ms,
            "stop_wall_ms": (t_fin - t_end) * 1000 - opts.silence_ms if t_fin else None}  # fmt: skip


def session(rig: Rig, model: Path, work: list[tuple[dict, str]], clips: dict, opts: Any, tag: str) -> list[dict]:
    """A fresh server, every job in turn; the first call is the cold one (the model loads during it)."""
    rig.model_dir = model.parent
    calls = []
    with rig.server() as server:
        for i, (entry, language) in enumerate(work):
            call = transcribe_voice(rig, server, clips[entry["id"]], model, language, opts, f"rs-{tag}-{i}")
            calls.append({**call, "cold": i == 0})
            print(f"  {call['clip']:32} {language:4} post-speech {call.get('post_speech_ms', float('nan')):7.1f} ms"
                  f"{' (first call)' if i == 0 else ''}", flush=True)  # fmt: skip
    return calls


def measure(rig: Rig, model: Path, entries: list[dict], clips: dict, opts: Any) -> dict:
    """Whole clips in process, then `runs` sessions over every job (order rotated), then `fresh`
    one-call sessions; the figures, with how busy the machine was meanwhile."""
    during, work, tag = Run(), jobs(entries, model), model.stem.removeprefix("ggml-")
    print(f"[{tag}] {len(work)} jobs: whole clips in process, then through the server", flush=True)
    whole = transcribe_whole(model, opts.threads, [(f"{e['id']}/{lang}", clips[e["id"]], lang)
                                                           for e, lang in work], opts.runs)  # fmt: skip
    calls: list[dict] = []
    for r in range(opts.runs):
        shift = (r * 3) % len(work)
        calls += session(rig, model, work[shift:] + work[:shift], clips, opts, f"{tag}-{r}")
    fresh = [j for j in work if j[1] != "auto" and j[0]["longest_pause_ms"] < opts.silence_ms]
    for k in range(opts.fresh):
        calls += session(rig, model, [fresh[(k * 5 + 1) % len(fresh)]], clips, opts, f"{tag}-fresh-{k}")
    return {**analyse(model, work, whole, calls, opts.silence_ms), "machine": during.end()["machine"]}


def transcribe_whole(model: Path, threads: int, jobs: list[tuple[str, Clip, str]], runs: int) -> dict[str, Any]:
    """Each (key, clip, language) transcribed at once (Clip.whole) by the project's Transcriber, `runs` times,
    as the server would (same model, threads, parameters; markers such as [Music] dropped)."""
    tr = Transcriber(threads=threads or None)
    t = time.perf_counter()
    tr.load(model)
    out: dict[str, Any] = {"_load_ms": round((time.perf_counter() - t) * 1000, 1)}
    try:
        for key, clip, language in jobs:
            audio, texts, times = W.condition(clip.whole()), [], []
            for _ in range(max(1, runs)):
                t = time.perf_counter()
                texts.append(W.usable_text(tr.transcribe(audio, path=model, language=language)) or "")
                times.append((time.perf_counter() - t) * 1000)
            out[key] = {"texts": texts, "transcribe_ms": summary(times)}
    finally:
        tr.unload()
    return out


def dictation(entries: list[dict], seconds: float, out: Path) -> tuple[Path, str, float]:
    """Recordings back to back for at least `seconds`: (WAV, reference text, last loud second)."""
    parts, texts, total = [A.silence(300)], [], 0.0
    for entry in itertools.cycle(entries):
        if total >= seconds:
            break
        parts += [Path(entry["path"]), A.silence(GAP_MS)]
        texts.append(entry["text"])
        total += entry["seconds"] + GAP_MS / 1000
    parts[-1] = A.silence(DICTATION_SILENCE_MS + 2000)
    path = A.concat(parts, path=out)
    return path, " ".join(texts), A.last_loud_sample(A.read_wav(path)) / RATE


def sample_rss(pid: int, done: threading.Event, out: list[tuple[float, float]]) -> None:
    """The server's RSS once a second until `done`."""
    while not done.wait(1.0):
        out.append((time.monotonic(), proc_stats(pid)["VmRSS"]))


def dictation_run(rig: Rig, model: Path, wav: Path, reference: str, speech_end_s: float, token: str) -> dict[str, Any]:
    rss, done = [], threading.Event()
    with rig.server() as server:
        sampler = threading.Thread(target=sample_rss, args=(server.proc.pid, done, rss))
        try:
            sampler.start()
            args = {"whisper_model": model.name, "duration_ms": 600_000, "silence_ms": DICTATION_SILENCE_MS}
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
            "progress_gap_s": round(max(b - a for a, b in zip(listening, listening[1:])), 2) if len(listening) > 1 else None,
            "rss_every_minute_mb": [round(m, 1) for t, m in rss if (t - t_play) % 60 < 1],
            "rss_end_mb": round(stats["VmRSS"], 1), "rss_peak_mb": round(stats["VmHWM"], 1),
            "wer": round(wer(reference, result.get("transcription") or ""), 3)}  # fmt: skip


def dictate(opts: Any) -> int:
    """--dictation: ~10 s of speech `--short-runs` times, then `--minutes` of it, each into one transcribe_voice."""
    entries, model = real(language="en", pause_under_ms=DICTATION_SILENCE_MS - 300), opts.model[0]
    run, runs = Run("pywhispercpp", **vars(opts)), {"short": [], "long": []}
    plan = [("short", 10, f"short-{i}") for i in range(opts.short_runs)]
    plan += [("long", opts.minutes * 60 - 15, "long")] if opts.minutes > 0 else []  # ends before the 10-minute ceiling
    with Rig(model.parent, threads=opts.threads) as rig, busy_cpus(opts.busy, opts.busy_nice):
        for kind, seconds, token in plan:
            speech = dictation(entries, seconds, rig.workdir / f"{kind}.wav")
            runs[kind].append(dictation_run(rig, model, *speech, token))
            print(kind, runs[kind][-1], flush=True)
    report = {**run.end(), "silence_ms": DICTATION_SILENCE_MS, "gap_ms": GAP_MS, "runs": runs}
    save_report(report, opts.json or ROOT / "bench" / "results-dictation.json")
    return 0


def stop_times(rig: Rig, clips: dict[str, Clip], opts: Any) -> dict[str, Any]:
    """capture_audio with stop on silence on every clip, the stop counted in samples on the WAV; a clip that
    ends at capture's 20 s ceiling or at an inner pause is left out. No model."""
    runs = []
    with rig.server() as server:
        for r in range(opts.stop_runs):
            for name, clip in clips.items():
                try:
                    runs.append(capture_stop(rig, server, clip, opts.silence_ms, f"stop-{r}-{name}"))
                except ValueError:  # the WAV ends before the speech does
                    runs.append({"clip": name, "stopped_by": "silence (before the end of speech)"})
    kept = [r["stop_latency_ms"] for r in runs if r["stopped_by"] == "silence"]
    return {"stop_latency_ms": summary(kept),
            "runs": [{k: r.get(k) for k in ("clip", "stopped_by", "stop_latency_ms", "wav_peak")} for r in runs]}  # fmt: skip


def analyse(model: Path, work: list[tuple[dict, str]], whole: dict, calls: list[dict], silence_ms: int) -> dict:
    """Per clip × language asked: texts and WERs; per language group (utterances only: a clip whose inner
    pause is longer than silence_ms, `jfk`, ends at it by design and is listed apart), corpus figures."""
    rows = []
    for entry, language in work:
        mine = [c for c in calls if c["clip"] == entry["id"] and c["language_asked"] == language]
        ref = entry["text"]
        texts = {"pipeline": [c["transcription"] for c in mine], "whole": whole[f"{entry['id']}/{language}"]["texts"]}
        rows.append({"clip": entry["id"], "group": entry["language"] + ("/auto" if language == "auto" else ""),
                     "asked": language, "reference": ref, "apart": entry["longest_pause_ms"] >= silence_ms,
                     **{f"wer_{k}": corpus_wer([(ref, t) for t in v]) for k, v in texts.items()},
                     **{f"{k}_texts": v for k, v in texts.items()}, "calls": mine,
                     "languages_returned": sorted({str(c["language_returned"]) for c in mine}),
                     "stopped_by": sorted({str(c["stopped_by"]) for c in mine})})  # fmt: skip
    kept = [r for r in rows if not r["apart"]]
    groups = {name: group([r for r in kept if r["group"] == name]) for name in sorted({r["group"] for r in kept})}
    groups["all_fixed_language"] = group([r for r in kept if r["asked"] != "auto"])
    for name in [n for n in groups if n.endswith("/auto") and n[:-5] in groups]:
        auto, same = (groups[n]["post_speech_warm_ms"].get("median") for n in (name, name[:-5]))
        groups[name]["post_speech_median_vs_fixed"] = round(auto / same, 2) if auto and same else None
    for r in rows:
        del r["calls"]
    first = [c["post_speech_ms"] for c in calls if c["cold"] and "post_speech_ms" in c]
    return {"model": model.name, "groups": groups, "load_in_bench_process_ms": whole["_load_ms"],
            "first_call_post_speech_ms": summary(first), "apart": [r["clip"] for r in rows if r["apart"]],
            "jobs": rows, "calls": calls}  # fmt: skip


def group(rows: list[dict]) -> dict:
    """Corpus WERs (all errors over all reference words) and latencies over clip × language rows."""
    calls = [c for r in rows for c in r["calls"]]
    pipe, whole = (
        corpus_wer([(r["reference"], t) for r in rows for t in r[f"{k}_texts"]]) for k in ("pipeline", "whole")
    )
    return {"clips": len(rows), "reference_words": sum(len(words(r["reference"])) for r in rows),
            "wer_pipeline_pct": pipe, "wer_whole_pct": whole,
            "wer_gap_points": round(pipe - whole, 2) if pipe is not None and whole is not None else None,
            "post_speech_warm_ms": summary(c["post_speech_ms"] for c in calls if not c["cold"] and "post_speech_ms" in c),
            "stop_wall_ms": summary(c["stop_wall_ms"] for c in calls if c.get("stop_wall_ms") is not None)}  # fmt: skip


def targets(models: dict[str, dict]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for tag, m in models.items():
        g, first = m["groups"]["all_fixed_language"], m["first_call_post_speech_ms"]
        out.update({f"{tag}_wer_gap_points": verdict(g["wer_gap_points"], 1.0),
                    f"{tag}_post_speech_median_ms": verdict(g["post_speech_warm_ms"].get("median"), 50),
                    f"{tag}_post_speech_p90_ms": verdict(g["post_speech_warm_ms"].get("p90"), 100),
                    f"{tag}_first_call_median_ms": verdict(first.get("median"), 500),
                    f"{tag}_first_call_max_ms": verdict(first.get("max"), 500)})  # fmt: skip
    return out


RARE_TERMS = json.loads((Path(__file__).parent / "rare_terms.json").read_text())
"""--vocabulary: the terms, the names as people say them (respelled for Piper), the sentences said."""
VOCABULARY, SAID, RARE = RARE_TERMS["vocabulary"], RARE_TERMS["said"], RARE_TERMS["sentences"]


def heard(term: str, text: str) -> bool:
    """Whether `text` writes `term`: one to three of its words (split at spaces and hyphens) whose letters and
    digits, lower case and accents off, are the term's ("MCP listen" is mcp-listen; "pywhispercppp" is not)."""
    import re
    import unicodedata

    key = lambda s: "".join(c for c in unicodedata.normalize("NFKD", s).lower() if c.isascii() and c.isalnum())  # noqa: E731
    words = re.split(r"[\s/-]+", text)
    return any(key("".join(words[i : i + n])) == key(term) for i in range(len(words)) for n in (1, 2, 3))


def rare_terms(opts: Any) -> int:
    """--vocabulary: each RARE sentence said twice by the test voice (Piper's VITS, a model of a recorded voice: no
    two renderings alike), transcribed whole as the server transcribes a phrase (its Session, so its prompt), with
    and without VOCABULARY: the terms not `heard`, and the WER."""
    import os
    import re

    import numpy as np
    import soxr

    from mcp_listen.whisper.session import Session

    os.environ["ORT_DISABLE_TELEMETRY"] = "1"  # before piper imports onnxruntime, as the server does
    from piper import PiperVoice

    run = Run("pywhispercpp", "piper-tts", **vars(opts))
    voice = PiperVoice.load(ROOT / "tests/assets/voices/en_US-joe-medium.onnx")
    said = [(text, re.sub("|".join(map(re.escape, SAID)), lambda m: SAID[m[0]], text)) for text in RARE for _ in (0, 1)]
    audio = [soxr.resample(np.concatenate([c.audio_int16_array for c in voice.synthesize(s)]), voice.config.sample_rate,
                           RATE) for _, s in said]  # fmt: skip
    run.report.update(vocabulary=VOCABULARY, said=said, models={})
    for model in opts.model:
        tr, out = Transcriber(threads=opts.threads or None), run.report["models"].setdefault(model.stem[5:], {})
        for name, vocabulary in (("without", ""), ("with", VOCABULARY)):
            session = Session(tr, model, translate=False, cancel=None, vocabulary=vocabulary)
            texts = [W.usable_text(session.transcribe(a, "", "en")[0]) or "" for a in audio]
            terms = [(t, h) for (ref, _), h in zip(said, texts) for t in VOCABULARY.split(", ") if t in ref]
            missed = [t for t, h in terms if not heard(t, h)]
            out[name] = {"terms": len(terms), "missed": len(missed), "term_error_pct": round(100 * len(missed) / len(terms), 1),
                         "wer_pct": corpus_wer([(r, h) for (r, _), h in zip(said, texts)]),
                         "missed_terms": sorted(set(missed)), "texts": texts}  # fmt: skip
            print(f"{model.stem[5:]} {name}: {len(missed)}/{len(terms)} terms missed, WER {out[name]['wer_pct']} %")
        tr.unload()
    save_report(run.end(), opts.json or ROOT / "bench" / "results-vocabulary.json")
    return 0


def main(argv: list[str] | None = None) -> int:
    opts = cli(__doc__, argv, ("--model", [], "whisper model file, repeatable (default MCP_LISTEN_TEST_MODEL)"),
               ("--runs", 1, "passes over the clips per model"), ("--fresh", 3, "extra one-call servers per model"),
               ("--stop-runs", 1, "capture_audio passes for the stop time (0 skips)"),
               ("--threads", 2, "whisper threads; 0: the server's own choice per pass"),
               ("--compare-threads", 0, "also measure each model on this fixed count, printed side by side"),
               ("--busy", 0, "programs spinning one core each during the run"), ("--busy-nice", 0, "their nice level"),
               ("--silence-ms", 1000, "silence_ms of every call"), ("--only", "", "comma-separated clip ids"),
               ("--vocabulary", False, "the rare terms in Piper's test voice, with and without a vocabulary"),
               ("--dictation", False, "a long dictation instead (silence_ms 1500)"),
               ("--minutes", 10.0, "--dictation: the long run's speech (0 skips it)"), ("--short-runs", 3, "--dictation: 10 s runs"),
               ("--json", None, "the report (default bench/results-realspeech.json; --dictation: results-dictation.json)"))  # fmt: skip
    opts.model = opts.model or [TEST_MODEL]
    if missing := [str(m) for m in opts.model if not m.is_file()]:
        raise SystemExit(f"whisper model {missing} not found (pass --model PATH or set MCP_LISTEN_TEST_MODEL)")
    if opts.vocabulary:
        return rare_terms(opts)
    if opts.dictation:
        return dictate(opts)
    run, entries = Run("pywhispercpp", **vars(opts)), real(opts.only)
    clips = {e["id"]: playable(e, opts.silence_ms) for e in entries}
    report = {**run.report, "clips": [{k: v for k, v in e.items() if k != "path"} for e in entries], "models": {}}
    run.report = report
    with Rig(opts.model[0].parent, threads=opts.threads) as rig:
        rig.start_monitor()  # before the first clip plays: its end is timed on the monitor's clock
        if opts.stop_runs:
            report["stop"] = stop_times(rig, clips, opts)
        with busy_cpus(opts.busy, opts.busy_nice):
            for model in opts.model:
                tag = model.stem.removeprefix("ggml-")
                report["models"][tag] = measure(rig, model, entries, clips, opts)
                if opts.compare_threads:
                    rig.threads = opts.compare_threads  # the next servers' MCP_LISTEN_WHISPER_THREADS
                    report["models"][f"{tag}@{opts.compare_threads}"] = measure(rig, model, entries, clips, opts)
                    rig.threads = opts.threads
    report["targets"] = targets(report["models"])
    save_report(run.end(), opts.json or ROOT / "bench" / "results-realspeech.json", show)
    return 0


def show(report: dict) -> None:
    """Each model's figures per group, then each --compare-threads count ("tiny.en@2") beside the run before it."""
    print(f"stop (capture_audio, samples): {report.get('stop', {}).get('stop_latency_ms')}")
    for tag, m in report["models"].items():
        print(f"{tag}: first call {m['first_call_post_speech_ms']}")
        for name, g in m["groups"].items():
            ps = g["post_speech_warm_ms"]
            print(f"  {name:20} WER {g['wer_pipeline_pct']} % vs whole {g['wer_whole_pct']} % (gap {g['wer_gap_points']}, "
                  f"{g['reference_words']} words); after the window median {ps.get('median')} p90 {ps.get('p90')} ms")  # fmt: skip
    for fixed in [t for t in report["models"] if "@" in t]:
        tag, threads = fixed.split("@")
        mine, theirs = (report["models"][t]["groups"]["all_fixed_language"]["post_speech_warm_ms"] for t in (tag, fixed))  # fmt: skip
        print(f"{tag}, after the window, median / p90: threads {report['config']['threads'] or 'chosen per pass'} "
              f"{mine.get('median')} / {mine.get('p90')} ms; {threads} threads {theirs.get('median')} / {theirs.get('p90')} ms")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
