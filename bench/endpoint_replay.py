"""Where the endpointer stops on real voices and in noisy rooms, replayed offline (no clock): each clip fed
window by window through the server's own listener (its SileroVAD and Endpointer) at `--phases` window
alignments, counted in samples (load-proof). bench/README.md ("Endpoint replay") describes each set.

    python bench/endpoint_replay.py [--phases 8] [--set NAME=VALUE,...] [--only real,espeak,loud,quiet,rooms,pauses]
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

import clips
import numpy as np
import room_audio as R
from rig import RATE, ROOT
from rig import audio_assets as A
from speech_checks import without_trailing_silence
from stats import Run, cli, save_report, summary

from mcp_listen.speech.endpoint import EndpointConfig, Endpointer
from mcp_listen.speech.listener import Listener, Plan
from mcp_listen.speech.vad import SileroVAD

LEAD = 300 * RATE // 1000
QUIET_DBFS = -40.0
"""In quiet clips the stop is also measured from the last sample above this level."""
LOUD = (("brown", 5.0), ("brown", 0.0), ("hiss", 10.0), ("brown", 20.0), ("hiss", 20.0))
"""The three loud rooms, and two at 20 dB SNR where the room rule still earns credit."""
PAIRS = (("the quick brown fox jumps over the lazy dog", "and then it ran away"),
         ("please turn off the lights in the kitchen", "and lock the back door"))  # fmt: skip


class Counted:
    """The VAD as the listener calls it, counting the windows the endpointer's gate let it skip (`gate`
    false: Silero runs on every window)."""

    def __init__(self, vad: Any, gate: bool) -> None:
        self.vad, self.gate, self.skipped = vad, gate, 0

    def reset(self) -> None:
        self.vad.reset()

    def hear(self, window: Any, run: bool = True) -> tuple[float, float]:
        run = run or not self.gate
        self.skipped += not run
        return self.vad.hear(window, run=run)


def replay(vad: Any, endpointer: Any, audio: Any, gate: bool = True) -> tuple[str | None, int, int]:
    """Feed `audio` window by window through the server's listener: (reason, last window, windows skipped)."""
    config, counted = endpointer.config, Counted(vad, gate)
    plan = Plan(config.max_ms, True, config.silence_ms, None, end_of_turn="silence")
    listener = Listener(plan, None, None, vad=counted, endpointer=endpointer)
    for w in range(len(audio) // 512):
        reason = listener.on_window(audio[w * 512 : (w + 1) * 512])
        if reason:
            return reason, w, counted.skipped
    return None, w, counted.skipped


def stop(audio: Any, end: int, config: Any, vad: Any) -> tuple[str | None, float, bool]:
    """(reason, stop − end − silence_ms in ms, whether the decay credit made it early)."""

    def ms(cfg: Any) -> tuple[str | None, float]:
        reason, window, _ = replay(vad, Endpointer(cfg), audio)
        return reason, ((window + 1) * 512 - end) * 1000 / RATE - cfg.silence_ms

    reason, value = ms(config)
    caps = {f.name: 0 for f in fields(config) if f.name.endswith("decay_windows")}
    if value >= 0 or not any(getattr(config, name) for name in caps):
        return reason, value, False
    return reason, value, value < ms(replace(config, **caps))[1]


def stats(values: list[float], cuts: int, by_credit: int | None, other: list[str]) -> dict[str, Any]:
    """The stops' spread with their raw values in replay order, early ones, cuts, those by the credit."""
    s = summary(values)
    return {**{k: s.get(k) for k in ("median", "p90", "min", "max", "n")}, "values": [round(v, 1) for v in values],
            "early": sum(v < 0 for v in values), "cuts": cuts, "early_by_credit": by_credit, "not_silence": other}  # fmt: skip


def last_over(samples: Any, dbfs: float = QUIET_DBFS) -> int:
    """The last sample above `dbfs`: where a listener hears the sentence end in a quiet room."""
    return int(np.flatnonzero(np.abs(samples.astype(np.int32)) > 32768 * 10 ** (dbfs / 20))[-1])


def judged(sets: dict[str, dict[str, Any]], config: Any, vad: Any, phases: int, noise: tuple | None = None,
           end: Any = A.last_loud_sample) -> dict:  # fmt: skip
    """Each clip at `phases` alignments, in digital silence or in `noise` (kind, SNR; a seed per
    alignment, from 1 s before the clip to 3 s after its last loud sample); the end of speech is its
    last loud sample unless `end` says otherwise."""
    out = {}
    for set_name, clips_ in sets.items():
        values, cuts, by_credit, other, per_clip = [], 0, 0, [], {}
        for name, samples in clips_.items():
            mine = []
            for n, phase in enumerate(range(0, 512, 512 // phases)):
                mixed, last = R.speech_in_noise(samples, *noise, seed=7 + n) if noise else (samples, end(samples))
                tail = 2 * RATE if noise else (config.silence_ms + 2000) * RATE // 1000
                audio = np.concatenate([np.zeros(LEAD + phase, np.int16), mixed, np.zeros(tail, np.int16)])
                reason, value, credit = stop(audio, LEAD + phase + last + 1, config, vad)
                if reason != "silence":
                    other.append(f"{name}:{reason}")
                    continue
                cuts += value < -config.silence_ms
                if noise or value >= -config.silence_ms:  # in silence a cut is listed, not a stop
                    by_credit, mine = by_credit + credit, [*mine, value]
            values += mine
            per_clip[name] = min(mine, default=None) if noise else summary(mine).get("median")
        per_clip_key = "per_clip_min" if noise else "per_clip_median"
        out[set_name] = {**stats(values, cuts, by_credit, other), per_clip_key: per_clip}
    return out


def quiet(config: Any, vad: Any, phases: int) -> dict[str, Any]:
    """The 11 espeak sentences in digital silence, the stop against the last loud sample and against the
    last sample above QUIET_DBFS (the tail a listener still hears in a quiet room)."""
    sentences = {text[:24]: A.read_wav(A.speech(text)) for text in clips.SENTENCES}
    out = {**judged({"by last loud sample": sentences}, config, vad, phases),
           **judged({f"by last sample over {QUIET_DBFS:g} dBFS": sentences}, config, vad, phases, end=last_over)}  # fmt: skip
    pairs = zip(*(v["values"] for v in out.values()))  # the same replays in the same order, judged by each end
    return {**out, "early by either": sum(min(a, b) < 0 for a, b in pairs)}


def rooms(config: Any, vad: Any) -> dict[str, Any]:
    """Two sentences with a pause of silence_ms − 300 ms in fan and babble noise (3 seeds), and each
    noise alone for 11 s, which must end as no_speech_timeout."""
    first, second = (without_trailing_silence(A.speech(t)) for t in PAIRS[0])
    pause = config.silence_ms - 300
    clean = A.read_wav(A.concat([A.silence(1500), first, A.silence(pause), second, A.silence(3500)]))
    end = (1500 + pause) * RATE // 1000 + len(first) + A.last_loud_sample(second) + 1
    out: dict[str, Any] = {}
    for kind in ("fan", "babble"):
        for snr in (20, 10):
            runs = [stop(A.read_wav(R.in_room(clean, kind, snr, seed=s)), end, config, vad)[:2] for s in (7, 8, 9)]
            out[f"{kind} {snr} dB"] = [f"{reason} {ms:.0f}" for reason, ms in runs]
        noises = [R.in_room(A.silence(11000), kind, 10, speech_rms=R.active_rms(clean), seed=s) for s in (7, 8, 9)]
        out[f"{kind} alone"] = [replay(vad, Endpointer(config), A.read_wav(n))[0] for n in noises]
    return out


def pauses(config: Any, vad: Any, phases: int) -> dict[str, Any]:
    """Inner pauses of silence_ms − 300/200/100/50 ms (last loud sample to the next first loud one)
    between two sentences, quiet and in each room: how many replays ended at the pause."""
    out = {}
    for short in (300, 200, 100, 50):
        cuts, runs = 0, 0
        for texts in PAIRS:
            first, second = (A.read_wav(A.speech(t)) for t in texts)
            first, second = first[: A.last_loud_sample(first) + 1], second[A.first_loud_sample(second) :]
            gap = np.zeros((config.silence_ms - short) * RATE // 1000, np.int16)
            clean = A.read_wav(A.concat([A.silence(1500), first, gap, second, A.silence(3000)]))
            resumed = 1500 * RATE // 1000 + len(first) + len(gap)
            noisy = [A.read_wav(R.in_room(clean, k, snr)) for k in ("fan", "babble") for snr in (20, 10)]
            for audio in [clean, *noisy]:
                for phase in range(0, 512, 512 // phases):
                    padded = np.concatenate([np.zeros(phase, np.int16), audio])
                    reason, window, _ = replay(vad, Endpointer(config), padded)
                    runs += 1
                    cuts += reason == "silence" and (window + 1) * 512 < phase + resumed + len(second) // 2
        out[f"pause {config.silence_ms - short} ms"] = f"{cuts} early cuts in {runs} replays"
    return out


def gate_replay(silence_ms: int) -> dict[str, Any]:
    """What skipping Silero at a quiet room's floor changes: the 11 sentences at four speech levels over
    white noise at −60 and −45 dBFS, replayed with and without the gate (speech missed, stop moved)."""
    vad, rng = SileroVAD(), np.random.default_rng(5)
    missed, moved, skipped, windows = 0, [], 0, 0
    for floor_db in (-60, -45):
        for speech_db in (-45, -40, -35, -30):
            for text in clips.SENTENCES:
                speech = A.read_wav(A.speech(text)).astype(np.float32) / 32768
                speech *= 10 ** (speech_db / 20) / np.sqrt(np.mean(speech[np.abs(speech) > 1e-4] ** 2))
                tail = np.zeros(2 * RATE + silence_ms * 16, np.float32)
                audio = np.concatenate([np.zeros(24000, np.float32), speech, tail])
                audio += rng.normal(0, 10 ** (floor_db / 20), len(audio)).astype(np.float32)
                config = EndpointConfig(silence_ms=silence_ms, max_ms=60000)
                off, on = (replay(vad, Endpointer(config), audio, gate) for gate in (False, True))
                missed += off[0] == "silence" and on[0] != "silence"
                if on[0] == off[0] == "silence":
                    moved.append((on[1] - off[1]) * 32)
                skipped, windows = skipped + on[2], windows + on[1] + 1
    return {"clips": 8 * len(clips.SENTENCES), "speech_missed_by_gate": missed, "stop_moved_ms": summary(moved),
            "windows_skipped_pct": round(100 * skipped / windows, 1)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    opts = cli(__doc__, argv, ("--phases", 8, "window alignments per clip"), ("--silence-ms", 1000, "silence_ms"),
               ("--set", "", "EndpointConfig overrides, NAME=VALUE,..."), ("--only", "real,espeak,loud,quiet,rooms,pauses",
               "sections"), ("--json", ROOT / "bench" / "results-endpoint-replay.json", "the report"))  # fmt: skip
    overrides = {k: type(getattr(EndpointConfig, k))(v) for k, v in (s.split("=", 1) for s in opts.set.split(",") if s)}
    config = EndpointConfig(silence_ms=opts.silence_ms, max_ms=60000, **overrides)
    vad, only, run = SileroVAD(), opts.only.split(","), Run(**vars(opts))
    real = {e["id"]: A.read_wav(e["path"]) for e in clips.real(pause_under_ms=opts.silence_ms) if e["id"] != "jfk"}
    espeak = {text[:24]: A.read_wav(A.speech(text)) for text in clips.STOP_SENTENCES}
    sets = {k: v for k, v in (("real", real), ("espeak", espeak)) if k in only}
    report = run.report
    report.update(judged(sets, config, vad, opts.phases))
    report["config"]["endpoint"] = {k: getattr(config, k) for k in config.__dataclass_fields__}
    if "loud" in only:
        report["loud"] = {f"{kind} {snr:g} dB, {name}": v for kind, snr in LOUD for name, v in
                          judged({"espeak": espeak, "real": real}, config, vad, opts.phases, (kind, snr)).items()}  # fmt: skip
    for name, fn in (("quiet", lambda: quiet(config, vad, opts.phases)), ("rooms", lambda: rooms(config, vad)),
                     ("pauses", lambda: pauses(config, vad, opts.phases))):  # fmt: skip
        if name in only:
            report[name] = fn()
    save_report(run.end(), opts.json, show)
    return 0


def show(report: dict) -> None:
    keys = ("median", "p90", "min", "n", "early", "early_by_credit", "cuts")
    rows = [(n, report[n]) for n in ("real", "espeak") if n in report]
    rows += [(f"{s}: {k}", v) for s in ("loud", "quiet", "rooms", "pauses") for k, v in report.get(s, {}).items()]
    for name, v in rows:
        print(f"{name}: { ({x: v[x] for x in keys} if isinstance(v, dict) else v) }")


if __name__ == "__main__":
    raise SystemExit(main())
