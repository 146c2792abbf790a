"""Where the endpointer stops on real voices and in noisy rooms, replayed offline (no clock).

    python bench/endpoint_replay.py [--cache DIR] [--phases 8] [--set decay_windows=4 ...] [--json OUT]

Capture through the virtual microphone is bit-exact, so feeding a clip window by window through
SileroVAD + Endpointer in this process gives the decisions the server makes live for the same
window alignment. Every figure is counted in samples, so a loaded machine gives the same numbers.

- *real*: the real recordings of bench/realspeech_data.py (300 ms of digital silence, the clip,
  silence_ms + 2 s of silence, as realspeech.py plays them), at `--phases` alignments. Stop =
  end of the last window fed − the last loud sample (10 ms envelope over 10 % of its peak, the
  bench's end of speech) − silence_ms. "early" counts stops before the end of speech (an inner
  pause cut the utterance); `jfk`, whose 1.18 s pause is longer than silence_ms, is left out.
- *espeak*: the bench's espeak-ng sentences the same way (the live stop-latency figure).
- *pauses*: two espeak sentences with a pause (last loud sample to first loud sample) of
  silence_ms - 300, - 200, - 100 and - 50 ms, quiet and in each room: how many replays stopped
  at the pause.
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


def run_set(clips: dict[str, Any], config: Any, vad: Any, phases: int) -> dict[str, Any]:
    stops, early, other = [], [], []
    per_clip = {}
    for name, samples in clips.items():
        mine = []
        for audio, end in phased(samples, config.silence_ms, phases):
            reason, ms = stop_ms(audio, end, config, vad)
            if reason != "silence":
                other.append(f"{name}:{reason}")
            elif ms < -config.silence_ms:
                early.append(name)
            else:
                mine.append(ms)
        stops += mine
        per_clip[name] = summary(mine)["median"] if mine else None
    return {"stop_ms": summary(stops), "early_cuts": early, "not_silence": other, "per_clip_median": per_clip}


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
    p.add_argument("--only", default="real,espeak,rooms,pauses", help="sections to run (default all)")
    p.add_argument("--json", type=Path, help="write the report here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from mcp_listen.speech.endpoint import EndpointConfig
    from mcp_listen.speech.vad import SileroVAD

    opts = parse(argv)
    overrides = {k: type(getattr(EndpointConfig, k))(v) for k, v in (s.split("=", 1) for s in opts.set)}
    config = EndpointConfig(silence_ms=opts.silence_ms, max_ms=60000, **overrides)
    vad = SileroVAD()
    report: dict[str, Any] = {"config": {k: getattr(config, k) for k in config.__dataclass_fields__}}
    sections = opts.only.split(",")
    if "real" in sections:
        report["real"] = run_set(real_clips(opts.cache), config, vad, opts.phases)
    if "espeak" in sections:
        report["espeak"] = run_set(espeak_clips(), config, vad, opts.phases)
    if "rooms" in sections:
        report["rooms"] = rooms(config, vad)
    if "pauses" in sections:
        report["pauses"] = pauses(config, vad, opts.phases)
    for name, section in report.items():
        if name == "config":
            continue
        if "stop_ms" in section:
            s = section["stop_ms"]
            print(
                f"{name}: stop median {s.get('median')} ms, p90 {s.get('p90')}, max {s.get('max')}, min {s.get('min')} "
                f"(n={s['n']}); early cuts {len(section['early_cuts'])}; not silence {section['not_silence']}"
            )
            print("   per clip:", section["per_clip_median"])
        else:
            for k, v in section.items():
                print(f"{name}: {k}: {v}")
    if opts.json:
        opts.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
