"""end_of_turn "smart" against "silence" on the turn set (bench/turn_set.py): thinking pauses held, finished
turns ended. bench/README.md ("End of turn") explains the offline replay, the live run and each figure.

    python bench/end_of_turn.py [--offline] [--model tests/assets/ggml-base.bin] [--json OUT]
    python bench/end_of_turn.py --choppy 60      # the server's CPU on choppy speech, per mode
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import turn_set
from rig import ROOT, Rig, audio_assets
from stats import Run, cli, save_report, summary, verdict

SILENCE_MS, LEAD_MS = 1000, 300  # fmt: skip  # the call's; silence before the speech
CHOPPY_SILENCE_MS, CHOPPY_ON_MS, CHOPPY_OFF_MS = 10000, 400, 200  # fmt: skip
"""Speech on, silence off: Silero hears speech in 400 ms of JFK's (44 % of the windows over 0.5), not in
200 ms (5 %), where no pause is ever judged."""
SETTLED_MS = 700
"""Pause heard before the end of speech is read: past Silero's hangover, so it no longer moves."""
PAUSE_BY_MS = 20000
"""Live, the pause comes at most this far into the clip played (`played`)."""


def rates(rows: list[dict], finished: str) -> dict[str, Any]:
    """Thinking pauses held and finished turns ended, by the boolean column `finished`."""
    out: dict[str, Any] = {}
    for kind, want, name in (("thinking", False, "thinking_held"), ("finished", True, "finished_ended"), ("short", False, "short_held")):  # fmt: skip
        group = [r for r in rows if r["kind"] == kind]
        right, other = [r for r in group if r[finished] == want], sum(r["lang"] != "en" for r in group)
        out[name] = (f"{len(right)} of {len(group)} ({100 * len(right) / max(1, len(group)):.0f} %; non-English "
                     f"{sum(r['lang'] != 'en' for r in right)} of {other})")  # fmt: skip
    return out


def speech_end(vad: Any, entry: dict) -> int:
    """Where the server's listener ends the speech before the pause (a sample of `entry`'s clip): fed to
    it window by window (endpoint_replay.replay), after LEAD_MS of digital silence."""
    from endpoint_replay import replay

    from mcp_listen.speech.endpoint import EndpointConfig, Endpointer

    never, lead = 10**9, 16 * LEAD_MS  # no stop: a finished turn's first sentence may hold a pause of silence_ms
    endpointer = Endpointer(EndpointConfig(silence_ms=never, max_ms=never, no_speech_timeout_ms=never))
    heard = entry["samples"][: entry["pause_at"] + 16 * SETTLED_MS]
    replay(vad, endpointer, np.concatenate([np.zeros(lead, np.int16), heard]))
    return (endpointer.last_speech_window + 1) * 512 - lead


def offline(entries: list[dict], model: Path) -> dict[str, Any]:
    from pywhispercpp.model import Model

    from mcp_listen.speech.ending import SMART
    from mcp_listen.speech.listener import TRAILING_KEEP_MS
    from mcp_listen.speech.smart_turn import shared_smart_turn
    from mcp_listen.speech.vad import SileroVAD

    PAUSE_HEARD_MS, VOICE_THRESHOLD = SMART.pause_heard_ms, SMART.voice_threshold

    whisper, voice, vad, rows = Model(str(model), n_threads=2, print_progress=False), shared_smart_turn(), SileroVAD(), []  # fmt: skip
    for e in entries:
        end = speech_end(vad, e)
        audio = e["samples"][: end + 16 * TRAILING_KEEP_MS]
        ctx = min(1500, len(audio) * 50 // 16000 + 64)  # the encoder on the clip only: 3-6x faster here
        pieces = whisper.transcribe(audio.astype(np.float32) / 32768, language=e["lang"], audio_ctx=ctx)
        each, ms_each = {}, []
        for ms in PAUSE_HEARD_MS:
            began = time.perf_counter()
            each[f"p@{ms}"] = round(voice.probability(e["samples"][: end + 16 * ms]), 3)
            ms_each.append((time.perf_counter() - began) * 1000)
        # VoiceAtPause works them out in order and stops at the first under the threshold
        worked = next((i + 1 for i, q in enumerate(each.values()) if q < VOICE_THRESHOLD), len(each))
        p, voice_ms = min(each.values()), sum(ms_each[:worked])
        rows.append({"id": e["id"], "kind": e["kind"], "lang": e["lang"], "batch": e.get("batch", 1), "word": e.get("word"),
                     "gap_ms": e.get("gap_ms"), "text": "".join(s.text for s in pieces).strip(), "end_past_cut_ms": (end - e["pause_at"]) // 16,
                     "p": p, **each, "answers": worked, "voice_ms": round(voice_ms, 1), "last_answer_ms": round(ms_each[-1], 1), "silence": True})  # fmt: skip
        print(rows[-1], flush=True)
    return {"rows": rows, "signals": score(rows), **breakdown(rows, f"judge@{VOICE_THRESHOLD}"),
            "answers": summary(r["answers"] for r in rows), "voice_ms": summary(r["voice_ms"] for r in rows),
            "last_answer_ms": summary(r["last_answer_ms"] for r in rows)}  # fmt: skip


def targets(rows: list[dict], finished: str) -> dict[str, Any]:
    """The issue's targets by the boolean column `finished`: thinking pauses held >= 90 %, finished ended >= 90 %,
    short (0.4-1 s) pauses held >= 95 %."""
    right = {k: [r[finished] == (k == "finished") for r in rows if r["kind"] == k] for k in ("thinking", "finished", "short")}  # fmt: skip
    pct = {k: round(100 * sum(v) / max(1, len(v)), 1) if v else None for k, v in right.items()}
    return {"thinking pauses held, %": verdict(pct["thinking"], 90, lower_is_better=False),
            "finished turns ended at the pause, %": verdict(pct["finished"], 90, lower_is_better=False),
            "short pauses held, %": verdict(pct["short"], 95, lower_is_better=False)}  # fmt: skip


def breakdown(rows: list[dict], rule: str) -> dict[str, Any]:
    """Every signal on batch 1 and on batch 2 of the set (bench/turn_set.py); the main ones per language;
    the issue's targets by `rule`."""
    main = ("words", "voice@0.5", rule)
    by_lang = {lang: {k: v for k, v in score([r for r in rows if r["lang"] == lang]).items() if k in main}
               for lang in sorted({r["lang"] for r in rows})}  # fmt: skip
    batches = {f"batch{b}": score([r for r in rows if r["batch"] == b]) for b in (1, 2)}
    return {**batches, "by_lang": by_lang, "targets": targets(rows, rule)}


def score(rows: list[dict]) -> dict[str, Any]:
    """Each signal alone and the rule at the voice's threshold, from the rows' text and voice probability (no
    whisper, no model)."""
    from mcp_listen.speech.ending import SMART
    from mcp_listen.speech.turns import agree_at_once, judge, sounds_finished, words_say

    t = SMART.voice_threshold
    for r in rows:
        r["today"], r["words"] = sounds_finished(r["text"], r["lang"]), words_say(r["text"], r["lang"]) != "unfinished"
        r[f"voice@{t}"] = r["p"] >= t
        r[f"judge@{t}"] = getattr(judge(r["text"], r["lang"], r["p"], t), "finished", True)
        early = min(r[f"p@{ms}"] for ms in SMART.pause_heard_ms[: SMART.at_once_answers])
        r["at_once"] = agree_at_once(r["text"], r["lang"], words_say(r["text"], r["lang"]), early, SMART.at_once_threshold)  # fmt: skip
    return {name: rates(rows, name) for name in ("silence", "today", "words", f"voice@{t}", f"judge@{t}", "at_once")}


def call(rig: Rig, server: Any, model: Path, wav: Path, mode: str, lang: str, token: str) -> tuple[float, dict, float]:
    """transcribe_voice while `wav` plays (from the moment the microphone runs, with no settling pause; a failed
    call is a row too): (s from play start to result, the result, server CPU s)."""
    args = {"whisper_model": model.name, "silence_ms": SILENCE_MS, "duration_ms": 30000, "end_of_turn": mode,
            "language": lang}  # fmt: skip
    cpu = server.stats["cpu_s"]
    run = rig.play_during(server, "transcribe_voice", args, wav, token, settle=0.0, check=False)
    return run["t_reply"] - run["t_play"], run["result"], server.stats["cpu_s"] - cpu


def played(entry: dict) -> dict:
    """`entry` as played live: a clip whose pause comes later than PAUSE_BY_MS into it (seven long
    prompts; a call records at most 30 s) begins 2 s or less after the point PAUSE_BY_MS before the
    pause, in the quietest 100 ms there."""
    late = entry["pause_at"] - 16 * PAUSE_BY_MS
    if late <= 0:
        return entry
    levels = [np.abs(entry["samples"][i : i + 1600].astype(np.int32)).mean() for i in range(late, late + 32000, 160)]
    start = late + 160 * int(np.argmin(levels))
    return {**entry, "samples": entry["samples"][start:], "pause_at": entry["pause_at"] - start,
            "resumes": entry["resumes"] - start}  # fmt: skip


def live(rig: Rig, model: Path, entries: list[dict], modes: list[str]) -> dict[str, Any]:
    rows, lead = [], np.zeros(16 * LEAD_MS, np.int16)
    with rig.server() as server:
        for i, e in enumerate(map(played, entries)):
            samples = np.concatenate([lead, e["samples"], np.zeros(16 * (SILENCE_MS + 2500), np.int16)])
            wav = audio_assets.write_wav(samples, rig.workdir / f"{e['id']}.wav")
            last_loud = audio_assets.last_loud_sample(samples[: len(lead) + e["pause_at"]])
            for mode in modes if i % 2 == 0 else modes[::-1]:
                seconds, data, cpu = call(rig, server, model, wav, mode, e["lang"], f"{e['id']}-{mode}")
                ended = data.get("end_reason") != "duration" and len(lead) + e["pause_at"] < data.get("duration_ms", 0) * 16 < len(lead) + e["resumes"]  # fmt: skip
                after = seconds * 1000 - last_loud / 16  # the end of speech (its last loud sample) to the result
                cut_ms = data.get("duration_ms", 0) - (len(lead) + e["pause_at"]) / 16 if ended else None
                rows.append({"id": e["id"], "kind": e["kind"], "lang": e["lang"], "mode": mode, "ended": ended, "pause_ms": e["pause_ms"],
                             "finished": ended, "end_reason": data.get("end_reason"), "end_signal": data.get("end_signal"), "cpu_s": round(cpu, 3),
                             "post_speech_ms": round(after, 1) if ended else None, "cut_at_ms": cut_ms, "text": data.get("transcription") or ""})  # fmt: skip
                print(rows[-1], flush=True)
    out: dict[str, Any] = {"rows": rows}
    for mode in modes:
        mine = [r for r in rows if r["mode"] == mode]
        ends = {lang: [r["post_speech_ms"] for r in mine if r["kind"] == "finished" and r["ended"] and lang in (r["lang"], "all")] for lang in ("all", "en", "es", "fr", "it")}  # fmt: skip
        out[mode] = {**rates(mine, "finished"), "finished_post_speech_ms": {lang: summary(v) for lang, v in ends.items()},
                     "cuts": [(r["id"], r["pause_ms"], r["cut_at_ms"]) for r in mine if r["kind"] != "finished" and r["ended"]],
                     "cpu_s_per_utterance": summary((r["cpu_s"] for r in mine), 3)}  # fmt: skip
    return out


def short_pauses() -> list[dict]:
    """The thinking pauses, each shortened to 0.4-1.0 s (evenly): silence_ms lets them through, so must an end at once."""
    thinking = [e for e in json.loads(turn_set.SET_FILE.read_text())["turns"] if e["kind"] == "thinking"]
    return turn_set.build([{**e, "id": e["id"].replace("thinking", "short"), "kind": "short",
                            "pause_ms": 400 + 600 * i // (len(thinking) - 1)} for i, e in enumerate(thinking)])  # fmt: skip


def choppy(rig: Rig, model: Path, modes: list[str], seconds: int) -> dict[str, Any]:
    """The server's CPU over `seconds` of choppy speech (JFK's, CHOPPY_ON_MS on, CHOPPY_OFF_MS off: every gap
    a pause of ASK_AFTER_MS and more), one transcribe_voice per mode, to the end by duration (silence_ms at
    its most, so JFK's own pauses do not end it)."""
    jfk = audio_assets.read_wav(ROOT / "tests/assets/jfk.wav")
    speech = np.resize(jfk[audio_assets.first_loud_sample(jfk) :], seconds * 16000)
    cycle = np.arange(speech.size) % (16 * (CHOPPY_ON_MS + CHOPPY_OFF_MS))
    samples = np.where(cycle < 16 * CHOPPY_ON_MS, speech, 0).astype(np.int16)
    wav = audio_assets.write_wav(samples, rig.workdir / "choppy.wav")
    out: dict[str, Any] = {"seconds": seconds}
    with rig.server() as server:
        for mode in modes:
            args = {"whisper_model": model.name, "silence_ms": CHOPPY_SILENCE_MS, "duration_ms": seconds * 1000,
                    "end_of_turn": mode, "language": "en"}  # fmt: skip
            cpu = server.stats["cpu_s"]
            run = rig.play_during(server, "transcribe_voice", args, wav, f"choppy-{mode}", timeout=seconds + 60)
            used = server.stats["cpu_s"] - cpu
            result = run["result"]
            out[mode] = {"cpu_s": round(used, 2), "cpu_share_of_a_core": round(used / seconds, 3),
                         "end_reason": result.get("end_reason"), "words": len(str(result.get("transcription") or "").split()),
                         "error": result.get("error")}  # fmt: skip
            print(mode, out[mode], flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    opts = cli(__doc__, argv, ("--offline", False, "each signal alone, no live rig"),
               ("--model", ROOT / "tests/assets/ggml-base.bin", "whisper model (multilingual: the set has es, fr)"),
               ("--threads", 2, "whisper threads"), ("--modes", "silence,smart", "end_of_turn modes, live"), ("--choppy", 0, "only: N s of choppy speech, CPU per mode"),
               ("--kinds", "thinking,finished,short", "which utterances: thinking pauses, finished turns, short (0.4-1 s) pauses"), ("--langs", "en,es,fr,it", "which languages (tiny.en: en)"), ("--json", ROOT / "bench/results-end-of-turn.json", "report"))  # fmt: skip
    kinds = opts.kinds.split(",")
    entries = [e for e in turn_set.build() + (short_pauses() if "short" in kinds else []) if e["kind"] in kinds and e["lang"] in opts.langs.split(",")]  # fmt: skip
    run = Run(**vars(opts), utterances=len(entries))
    if opts.choppy:
        with Rig(opts.model.parent, threads=opts.threads) as rig:
            run.report["choppy"] = choppy(rig, opts.model, opts.modes.split(","), opts.choppy)
        save_report(run.end(), opts.json)
        return 0
    if opts.offline:
        run.report["offline"] = offline(entries, opts.model)
    else:
        with Rig(opts.model.parent, threads=opts.threads) as rig:
            run.report["live"] = live(rig, opts.model, entries, opts.modes.split(","))
        mode, rows = opts.modes.split(",")[-1], run.report["live"]["rows"]  # smart, when it is measured
        ms = run.report["live"][mode]["finished_post_speech_ms"]["all"]
        run.report["targets"] = targets([r for r in rows if r["mode"] == mode], "finished") | {
            "finished: median ms from the end of speech": verdict(ms.get("median"), 450), "finished: p90 ms": verdict(ms.get("p90"), 800)}  # fmt: skip
    save_report(run.end(), opts.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
