"""Where the endpointer stops on real voices and in noisy rooms, replayed offline (no clock).

    python bench/endpoint_replay.py [--cache DIR] [--phases 8] [--set decay_windows=4 ...] [--json OUT]

Capture through the virtual microphone is bit-exact, so feeding a clip window by window through
SileroVAD + Endpointer in this process gives the decisions the server makes live for the same
window alignment. Every figure is counted in samples, so a loaded machine gives the same numbers.

- *real*: the real recordings of bench/realspeech_data.py (300 ms of digital silence, the clip,
  silence_ms + 2 s of silence, as realspeech.py plays them), at `--phases` alignments. Stop =
  end of the last window fed − the last loud sample (10 ms envelope over 10 % of its peak, the
  bench's end of speech) − silence_ms. "early cuts" counts stops before the end of speech (an
  inner pause cut the utterance), "early" stops under 0, "by the credit" those the same replay
  without decay credit did not make; `jfk`, whose 1.18 s pause is longer than silence_ms, is left out.
- *espeak*: the bench's espeak-ng sentences the same way (the live stop-latency figure).
- *pauses*: two espeak sentences with a pause (last loud sample to first loud sample) of
  silence_ms - 300, - 200, - 100 and - 50 ms, quiet and in each room: how many replays stopped
  at the pause.
- *loud*: the espeak sentences and the real recordings in steady noise, brown (a fan's roar) at
  5 and 0 dB SNR, white hiss at 10 dB, and both at 20 dB (tests/room_audio.py), the noise running
  from 1 s before the clip to 3 s after its last loud sample, at `--phases` alignments (a noise seed
  each). Per condition: stop − end of speech − silence_ms (median, p90, min), "early" (< 0), "cuts"
  (the stop before the end of speech: a word lost) and "by the credit" (early replays that the same
  replay without decay credit, Silero's own timing, was not).
- *quiet*: the espeak sentences of the bench and of the latency clips in digital silence, the stop
  measured both against the last loud sample and against the last sample above −40 dBFS (where a
  listener hears the sentence end in a quiet room); "early" counts stops early by either.
- *rooms*: two espeak sentences with a pause of silence_ms − 300 ms between them, under fan and
  babble noise (tests/room_audio.py) at 20 and 10 dB SNR, three noise seeds each; and the noise
  alone for 11 s, which must end as no_speech_timeout.

`--set name=value` overrides an EndpointConfig field, to compare settings on the same clips.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import audio_assets as A  # noqa: E402
import realspeech_data  # noqa: E402
from latency import replay  # noqa: E402
from stats import summary  # noqa: E402

RATE = 16000
LEAD_MS = 300


def stop_ms(audio: Any, speech_end: int, config: Any, vad: Any) -> tuple[str | None, float]:
    """(reason, stop − speech_end − silence_ms in ms) for one replay."""
    from mcp_listen.speech.endpoint import Endpointer

    reason, window, _ = replay(vad, Endpointer(config), audio)
    return reason, ((window + 1) * 512 - speech_end) * 1000 / RATE - config.silence_ms


def credited(audio: Any, speech_end: int, config: Any, vad: Any) -> tuple[str | None, float, bool]:
    """stop_ms, and whether the decay credit made the stop early: before silence_ms after the
    end of speech, and sooner than the same replay without any credit (Silero's own timing)."""
    from dataclasses import fields, replace

    reason, ms = stop_ms(audio, speech_end, config, vad)
    caps = {f.name: 0 for f in fields(config) if f.name.endswith("decay_windows")}  # older versions had two
    if ms >= 0 or not any(getattr(config, name) for name in caps):
        return reason, ms, False
    _, alone = stop_ms(audio, speech_end, replace(config, **caps), vad)
    return reason, ms, ms < alone


def phased(samples: Any, silence_ms: int, phases: int) -> list[tuple[Any, int]]:
    """The clip after LEAD_MS (+ a sub-window phase) of silence and before a long silence,
    with the sample just after its last loud one."""
    import numpy as np

    last = A.last_loud_sample(samples)
    out = []
    for phase in range(0, 512, 512 // phases):
        lead = LEAD_MS * RATE // 1000 + phase
        tail = np.zeros((silence_ms + 2000) * RATE // 1000, np.int16)
        out.append((np.concatenate([np.zeros(lead, np.int16), samples, tail]), lead + last + 1))
    return out


QUIET_DBFS = -40.0
"""In quiet clips the stop is also measured from the last sample above this level."""


def run_set(clips: dict[str, Any], config: Any, vad: Any, phases: int) -> dict[str, Any]:
    import numpy as np

    stops, early, other = [], [], []
    per_clip, per_clip_level = {}, {}
    by_credit = 0
    limit = 32768 * 10 ** (QUIET_DBFS / 20)
    for name, samples in clips.items():
        above = int(np.flatnonzero(np.abs(samples.astype(np.int32)) > limit)[-1])
        shift_ms = (above - A.last_loud_sample(samples)) * 1000 / RATE
        mine = []
        for audio, end in phased(samples, config.silence_ms, phases):
            reason, ms, credit_early = credited(audio, end, config, vad)
            if reason != "silence":
                other.append(f"{name}:{reason}")
            elif ms < -config.silence_ms:
                early.append(name)
            else:
                mine.append(ms)
                by_credit += credit_early
        stops += mine
        per_clip[name] = summary(mine)["median"] if mine else None
        per_clip_level[name] = round(per_clip[name] - shift_ms, 1) if mine else None
    return {
        "stop_ms": summary(stops),
        "early": sum(v < 0 for v in stops),
        "early_by_credit": by_credit,
        "early_cuts": early,
        "not_silence": other,
        "per_clip_median": per_clip,
        f"per_clip_median_by_last_sample_over_{QUIET_DBFS:g}_dBFS": per_clip_level,
    }


def _stats(values: list[float], cuts: int, by_credit: int | None, other: list[str]) -> dict[str, Any]:
    """Median, p90, min of stop − end of speech − silence_ms; early (< 0) and cuts (a word lost);
    early_by_credit: early replays that the same replay without decay credit was not (None: not judged)."""
    s = summary(values)
    return {
        "median": s.get("median"),
        "p90": s.get("p90"),
        "min": s.get("min"),
        "max": s.get("max"),
        "n": s["n"],
        "early": sum(v < 0 for v in values),
        "cuts": cuts,
        "early_by_credit": by_credit,
        "not_silence": other,
        "values": s.get("values", []),
    }


LOUD_CONDITIONS = (("brown", 5.0), ("brown", 0.0), ("hiss", 10.0), ("brown", 20.0), ("hiss", 20.0))
"""The three loud rooms, and two at 20 dB SNR where the room rule still earns credit."""


def loud(sets: dict[str, dict[str, Any]], config: Any, vad: Any, phases: int) -> dict[str, Any]:
    """Each clip of each set in steady loud noise (LOUD_CONDITIONS), 1 s before to 3 s after the speech."""
    import numpy as np
    import room_audio as R

    out: dict[str, Any] = {}
    for (kind, snr), (set_name, clips) in ((c, s) for c in LOUD_CONDITIONS for s in sets.items()):
        values: list[float] = []
        cuts, by_credit, other, worst = 0, 0, [], {}
        for name, samples in clips.items():
            mine = []
            for n, phase in enumerate(range(0, 512, 512 // phases)):
                mixed, last = R.speech_in_noise(samples, kind, snr, seed=7 + n)
                lead = LEAD_MS * RATE // 1000 + phase
                audio = np.concatenate([np.zeros(lead, np.int16), mixed, np.zeros(2 * RATE, np.int16)])
                reason, ms, credit_early = credited(audio, lead + last + 1, config, vad)
                if reason != "silence":
                    other.append(f"{name}:{reason}")
                    continue
                cuts += ms < -config.silence_ms
                by_credit += credit_early
                mine.append(ms)
            values += mine
            worst[name] = min(mine) if mine else None
        out[f"{kind} {snr:g} dB, {set_name}"] = {**_stats(values, cuts, by_credit, other), "per_clip_min": worst}
    return out


def quiet(config: Any, vad: Any, phases: int) -> dict[str, Any]:
    """The espeak sentences in digital silence: stop against the last loud sample and against the
    last sample above QUIET_DBFS (never before either may it come)."""
    import numpy as np
    from clips import STOP_SENTENCES, UTTERANCES

    texts = list(STOP_SENTENCES) + [t for sentences in UTTERANCES.values() for t in sentences]
    by_loud: list[float] = []
    by_level: list[float] = []
    cuts, by_credit, other, worst = 0, 0, [], {}
    limit = 32768 * 10 ** (QUIET_DBFS / 20)
    for text in texts:
        samples = A.read_wav(A.speech(text))
        above = int(np.flatnonzero(np.abs(samples.astype(np.int32)) > limit)[-1])
        shift = above - A.last_loud_sample(samples)  # samples from the last loud one to the last over QUIET_DBFS
        later = max(shift, 0)
        mine = []
        for audio, end in phased(samples, config.silence_ms, phases):
            # Judged against the later of the two ends; the other figure follows from it.
            reason, ms, credit_early = credited(audio, end + later, config, vad)
            if reason != "silence":
                other.append(f"{text[:24]}:{reason}")
                continue
            cuts += ms + later * 1000 / RATE < -config.silence_ms
            by_credit += credit_early
            by_loud.append(ms + later * 1000 / RATE)
            by_level.append(ms + (later - shift) * 1000 / RATE)
            mine.append(by_level[-1])
        worst[text[:24]] = min(mine) if mine else None
    early = sum(min(a, b) < 0 for a, b in zip(by_loud, by_level, strict=True))
    return {
        "by last loud sample": _stats(by_loud, cuts, None, other),
        f"by last sample over {QUIET_DBFS:g} dBFS": {**_stats(by_level, cuts, by_credit, other), "per_clip_min": worst},
        "early by either": early,
    }


def real_clips(cache: Path) -> dict[str, Any]:
    return {
        e["id"]: A.read_wav(e["path"])
        for e in realspeech_data.load(cache)
        if e.get("longest_pause_ms", 0) < 1000 and e["id"] != "jfk"
    }


def espeak_clips() -> dict[str, Any]:
    from clips import STOP_SENTENCES

    return {text[:24]: A.read_wav(A.speech(text)) for text in STOP_SENTENCES}


def rooms(config: Any, vad: Any) -> dict[str, Any]:
    """Two sentences with an inner pause, in fan and babble noise; and the noise alone."""
    import numpy as np
    import room_audio as R

    def trimmed(text: str) -> Any:
        s = A.read_wav(A.speech(text))
        return s[: np.flatnonzero(s)[-1] + 1]

    first, second = trimmed("the quick brown fox jumps over the lazy dog"), trimmed("and then it ran away")
    pause = config.silence_ms - 300
    clean = A.read_wav(A.concat([A.silence(1500), first, A.silence(pause), second, A.silence(3500)]))
    end = 1500 * RATE // 1000 + len(first) + pause * RATE // 1000 + A.last_loud_sample(second) + 1
    out: dict[str, Any] = {}
    for kind in ("fan", "babble"):
        for snr in (20, 10):
            runs = [stop_ms(A.read_wav(R.in_room(clean, kind, snr, seed=seed)), end, config, vad) for seed in (7, 8, 9)]
            out[f"{kind} {snr} dB"] = [f"{reason} {ms:.0f}" for reason, ms in runs]
        level = R.active_rms(clean)
        noises = [A.read_wav(R.in_room(A.silence(11000), kind, 10, speech_rms=level, seed=seed)) for seed in (7, 8, 9)]
        alone = [replay(vad, _endpointer(config), noise)[0] for noise in noises]
        out[f"{kind} alone"] = alone
    return out


def pauses(config: Any, vad: Any, phases: int) -> dict[str, Any]:
    """Inner pauses of silence_ms - 300/200/100/50 ms between two sentences, quiet and in each room
    (one seed), at `phases` alignments: how many replays ended at the pause (an early cut). The
    pause is measured as the stop is: last loud sample of the first sentence to the first loud
    sample of the second (espeak's "dog" fades for 100 ms under 10 % of the peak)."""
    import numpy as np
    import room_audio as R

    pairs = [
        ("the quick brown fox jumps over the lazy dog", "and then it ran away"),
        ("please turn off the lights in the kitchen", "and lock the back door"),
    ]
    out: dict[str, Any] = {}
    for short in (300, 200, 100, 50):
        cuts, runs = 0, 0
        for first_text, second_text in pairs:
            first, second = (A.read_wav(A.speech(t)) for t in (first_text, second_text))
            first = first[: A.last_loud_sample(first) + 1]
            second = second[A.first_loud_sample(second) :]
            gap = np.zeros((config.silence_ms - short) * RATE // 1000, np.int16)
            clean = A.read_wav(A.concat([A.silence(1500), first, gap, second, A.silence(3000)]))
            resumed = 1500 * RATE // 1000 + len(first) + len(gap)
            rooms_ = [clean] + [A.read_wav(R.in_room(clean, k, snr)) for k in ("fan", "babble") for snr in (20, 10)]
            for audio in rooms_:
                for phase in range(0, 512, 512 // phases):
                    shifted = np.concatenate([np.zeros(phase, np.int16), audio])
                    reason, window, _ = replay(vad, _endpointer(config), shifted)
                    runs += 1
                    cuts += reason == "silence" and (window + 1) * 512 < phase + resumed + len(second) // 2
        out[f"pause {config.silence_ms - short} ms"] = f"{cuts} early cuts in {runs} replays"
    return out


def _endpointer(config: Any) -> Any:
    from mcp_listen.speech.endpoint import Endpointer

    return Endpointer(config)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cache", type=Path, default=realspeech_data.DEFAULT_CACHE, help="real-speech clip cache")
    p.add_argument("--phases", type=int, default=8, help="window alignments per clip (default 8)")
    p.add_argument("--silence-ms", type=int, default=1000)
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="EndpointConfig override")
    p.add_argument("--only", default="real,espeak,loud,quiet,rooms,pauses", help="sections to run (default all)")
    p.add_argument("--json", type=Path, help="write the report here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from mcp_listen.speech.endpoint import EndpointConfig
    from mcp_listen.speech.vad import SileroVAD

    opts = parse(argv)
    overrides = {k: type(getattr(EndpointConfig, k))(v) for k, v in (s.split("=", 1) for s in opts.set)}
    config = EndpointConfig(silence_ms=opts.silence_ms, max_ms=60000, **overrides)
    vad = SileroVAD()
    import mcp_listen

    report: dict[str, Any] = {
        "mcp_listen": str(Path(mcp_listen.__file__).parent),
        "config": {k: getattr(config, k) for k in config.__dataclass_fields__},
    }
    sections = opts.only.split(",")
    if "real" in sections:
        report["real"] = run_set(real_clips(opts.cache), config, vad, opts.phases)
    if "espeak" in sections:
        report["espeak"] = run_set(espeak_clips(), config, vad, opts.phases)
    if "loud" in sections:
        report["loud"] = loud({"espeak": espeak_clips(), "real": real_clips(opts.cache)}, config, vad, opts.phases)
    if "quiet" in sections:
        report["quiet"] = quiet(config, vad, opts.phases)
    if "rooms" in sections:
        report["rooms"] = rooms(config, vad)
    if "pauses" in sections:
        report["pauses"] = pauses(config, vad, opts.phases)
    for name, section in report.items():
        if name in ("config", "mcp_listen"):
            continue
        if "stop_ms" in section:
            s = section["stop_ms"]
            print(
                f"{name}: stop median {s.get('median')} ms, p90 {s.get('p90')}, max {s.get('max')}, min {s.get('min')} "
                f"(n={s['n']}); early {section['early']} (by the credit {section['early_by_credit']}); "
                f"early cuts {len(section['early_cuts'])}; not silence {section['not_silence']}"
            )
            print("   per clip:", section["per_clip_median"])
        else:
            for k, v in section.items():
                if isinstance(v, dict) and "early" in v:
                    print(
                        f"{name}: {k}: median {v['median']} ms, p90 {v['p90']}, min {v['min']} (n={v['n']}); "
                        f"early {v['early']} (by the credit {v['early_by_credit']}), cuts {v['cuts']}; "
                        f"not silence {v['not_silence']}"
                    )
                    if "per_clip_min" in v:
                        print("   per clip min:", v["per_clip_min"])
                else:
                    print(f"{name}: {k}: {v}")
    if opts.json:
        opts.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
