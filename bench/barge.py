"""Barge-in on echo paths the live rig cannot make: converse's own turn (duplex/barge.py: BargeIn) fed, window
by window on a simulated clock, what a microphone in a room hears; beside the server's own canceller and echo
model, the maintained alternatives (bench/cancellers.py), each option on the very same cases.

    python bench/barge.py [--runs N] [--options product,aec3,livekit,speex] [--json OUT] [--voice P] [--model P]

The agent is Piper's test voice at three speeds, the user real recorded speech (bench/realspeech_data.py),
heard through an echo path (delay, gain, a reverberant tail) with steady noise; when the turn stops the
speech, the echo stops one speaker block later. The turn's clock is this bench's (passed in), so only the
CPU figure feels other work on the machine; its thresholds are a BargeInConfig (`config`). Per option and condition: false barge-ins,
reaction beside the same rule's floor on the clip alone, WER beside the clip alone, ERLE, CPU (bench/README.md,
"Barge-in"). `livekit` needs `pip install livekit`, `speex` Debian's libspeexdsp1.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from cancellers import OPTIONS, RecordingCanceller, erle_db, parts
from clips import errors, real
from rig import RATE, ROOT, TEST_MODEL
from rig import audio_assets as A
from speak import SENTENCES, VOICE_PATH
from stats import Run, cli, save_report, summary, verdict

WINDOW = 512
VOICE_RATE = 22050
BLOCK_S = 0.04
"""The speaker writes 40 ms blocks (audio/speaker.py BLOCK_MS): a stop silences it within one."""
SPEAKER_BUFFER_S = 0.2
"""The speaker's buffer (audio/speaker.py LATENCY_S): each block is written this long before it is heard."""
INPUT_LATENCY_S = 0.064
"""What PortAudio reports for the rig's PulseAudio microphone; the simulated microphone has it too."""
CONDITIONS = {
    "full level, no delay": {"delay_ms": 0, "gain_db": 0.0, "reverb": False, "noise_snr_db": None},
    "room, 30 ms, -6 dB, reverb": {"delay_ms": 30, "gain_db": -6.0, "reverb": True, "noise_snr_db": None},
    "room, 120 ms, 0 dB, reverb": {"delay_ms": 120, "gain_db": 0.0, "reverb": True, "noise_snr_db": None},
    "room, 60 ms, -3 dB, reverb, noise 20 dB SNR": {"delay_ms": 60, "gain_db": -3.0, "reverb": True, "noise_snr_db": 20},
}  # fmt: skip
"""The issue's rig: (a) full level, no delay; (b) room-like paths, 30-120 ms, -6 to 0 dB, reverberation;
(c) steady room noise at 20 dB SNR (to the user's speech)."""
USER_LEVEL_DBFS = -20.0
"""The user's voice at the microphone (RMS while speaking): the agent's speech as played is at about the
same level (-20 dBFS), so at "full level" the echo is as loud as the user, and 6 dB quieter at -6 dB."""
SPEEDS = (0.8, 1.0, 1.25)
"""The agent's voice at three rates: the suite has one Piper voice, so its speed varies instead."""
RT60_S = 0.3
TAIL_DB = -12.0
"""The reverberant tail: exponentially decaying noise, 60 dB down in RT60_S, starting TAIL_DB below the direct echo."""
NEVER_S = 1e9
"""relearn_s for the options without an echo model: the delay is never measured again for it."""
TARGETS = {"reaction_median_ms": 450.0, "reaction_p90_ms": 600.0, "over_floor_ms": 60.0, "wer_points": 5.0, "cpu_pct": 10.0}  # fmt: skip


def echo_path(condition: dict[str, Any], rng: np.random.Generator) -> Any:
    """One echo path's impulse response: the direct echo at the condition's delay and gain, and its reverberant tail."""
    delay = int(condition["delay_ms"] * RATE / 1000)
    ir = np.zeros(delay + int(RT60_S * RATE) + 1)
    ir[delay] = 10 ** (condition["gain_db"] / 20)
    if condition["reverb"]:
        t = np.arange(len(ir) - delay - 1) / RATE
        decay = np.exp(-6.91 * t / RT60_S) * 10 ** ((condition["gain_db"] + TAIL_DB) / 20)
        ir[delay + 1 :] += rng.standard_normal(len(t)) * decay * 0.3
    return ir


def echo(played16: Any, ir: Any, length: int, start: int) -> Any:
    """`length` samples of what the microphone hears of the speech (16 kHz) played from `start` through `ir`."""
    n = len(played16) + len(ir) - 1
    size = 1 << (n - 1).bit_length()
    out = np.fft.irfft(np.fft.rfft(played16, size) * np.fft.rfft(ir, size), size)[:n]
    return np.pad(out, (start, max(0, length - start - n)))[:length]


def one_turn(case: dict[str, Any], clock: Any, vad: Any, option: str, config: Any = None) -> dict[str, Any]:
    """One converse turn with barge-in, simulated: returns when it stopped, what it handed on, and how long it took."""
    import dataclasses

    import soxr

    from mcp_listen.duplex.barge import BargeIn
    from mcp_listen.duplex.config import DEFAULT

    far22, path, user, user_at, noise = case["far"], case["room"], case["user"], case["user_at"], case["noise"]
    far16 = soxr.resample(far22.astype(np.float32), VOICE_RATE, RATE).astype(np.float64)
    speech_s = len(far22) / VOICE_RATE
    length = int((speech_s + 4.0) * RATE)
    start_s = 0.1  # the first block is handed to the speaker 0.1 s after the microphone opened
    offset = int(start_s * RATE)
    near_echo = echo(far16, path, length, offset)
    near = near_echo.copy()
    if user is not None:
        near[user_at : user_at + len(user)] += user[: max(0, length - user_at)]
    if noise is not None:
        near += noise[:length]
    begin = clock.now
    state = SimpleNamespace(stopped_at=None, tap=None, blocks=0)
    playback = SimpleNamespace(ended=threading.Event(), error=None, played=None, on_open=None)

    def start(text: str, speed: float) -> None:
        speaker = SimpleNamespace(device_rate=VOICE_RATE, tap=None)
        playback.on_open(speaker)
        state.tap = speaker.tap

    def stop(wait_s: float) -> None:
        state.stopped_at = clock.now
        stop_sample = int((clock.now - begin + BLOCK_S) * RATE)  # one block more reaches the air
        played = far16[: max(0, stop_sample - offset)]
        near[:] = echo(played, path, length, offset) + (near - near_echo)
        playback.played = SimpleNamespace(ended_at=clock.now + BLOCK_S)
        playback.ended.set()

    playback.start, playback.stop = start, stop
    inner, model = parts(option)
    canceller = RecordingCanceller(inner)
    config = config or DEFAULT
    if model is not None:  # no model to relearn: the rule on the canceller decides, the delay never measured again
        config = dataclasses.replace(config, relearn_s=NEVER_S)
    turn = BargeIn(playback, "", 1.0, vad, canceller, model, config=config, clock=clock.monotonic)  # type: ignore[arg-type]
    block = int(BLOCK_S * VOICE_RATE)

    def microphone():
        """The windows, each on arrival; meanwhile the speaker writes its blocks SPEAKER_BUFFER_S before they
        are heard (its buffer is full once playing), and the speech ends when its last block was heard."""
        end_s = start_s + len(far22) / VOICE_RATE
        for i in range(length // WINDOW):
            clock.now = begin + (i + 1) * WINDOW / RATE + INPUT_LATENCY_S  # the window's arrival
            heard_until = clock.now - INPUT_LATENCY_S
            while state.tap is not None and state.stopped_at is None and state.blocks * block < len(far22):
                k = state.blocks
                heard_at = begin + start_s + k * BLOCK_S
                if heard_at - SPEAKER_BUFFER_S > heard_until:
                    break
                state.tap(
                    far22[k * block : (k + 1) * block], heard_at if k == 0 else heard_at - SPEAKER_BUFFER_S, False
                )
                state.blocks += 1
            if state.stopped_at is None and not playback.ended.is_set() and heard_until >= begin + end_s:
                playback.played = SimpleNamespace(ended_at=begin + end_s)
                playback.ended.set()
            yield np.clip(near[i * WINDOW : (i + 1) * WINDOW], -32768, 32767).astype(np.int16)

    cpu = time.process_time()
    handed = list(turn.windows(_Iterable(microphone, INPUT_LATENCY_S), lambda: None))
    cpu = time.process_time() - cpu
    stopped = state.stopped_at
    return {
        "barged": stopped is not None,
        "stopped_s": None if stopped is None else stopped - begin,
        "handed": np.concatenate(handed) if handed else np.zeros(0, np.int16),
        "pairs": canceller.pairs,
        "aligned_window": turn.aligned_window,
        "cut_in": None if turn.cut_in is None else turn.cut_in.fields(),
        "cpu_per_speech_s": cpu / (len(near) / RATE),
        "speech_s": speech_s,
    }


class _Iterable:
    """A microphone for the turn: `latency_s` and the windows."""

    def __init__(self, windows: Any, latency_s: float) -> None:
        self._windows = windows
        self.latency_s = latency_s

    def __iter__(self):
        return self._windows()


# --------------------------------------------------------------------------- the parts


class Agent:
    """The agent's texts at the three speeds: long (8 sentences) and short (2, with a pause), each
    synthesised afresh per run (Piper's VITS samples noise: no two renderings are the same)."""

    TEXTS = {"long": " ".join(SENTENCES[:8]), "short": SENTENCES[2] + " ... " + SENTENCES[5]}
    KINDS = tuple(f"{name}@{speed}" for name in TEXTS for speed in SPEEDS)

    def __init__(self, voice_path: Path) -> None:
        os.environ["ORT_DISABLE_TELEMETRY"] = "1"
        from piper import PiperVoice

        self._voice = PiperVoice.load(voice_path)
        self._own = getattr(self._voice.config, "length_scale", None) or 1.0

    def says(self, kind: str) -> Any:
        from piper import SynthesisConfig

        name, speed = kind.split("@")
        config = SynthesisConfig(length_scale=self._own / float(speed))
        return np.concatenate([c.audio_int16_array for c in self._voice.synthesize(self.TEXTS[name], config)])


def users() -> list[dict[str, Any]]:
    """The English real-speech clips of at most 8 s (float samples, reference text), at USER_LEVEL_DBFS while speaking."""
    chosen = []
    for entry in real(language="en"):
        samples = A.read_wav(entry["path"]).astype(np.float64)
        if len(samples) <= 8 * RATE:
            active = samples[np.abs(samples) > 300]
            scale = 32768 * 10 ** (USER_LEVEL_DBFS / 20) / np.sqrt(np.mean(active**2))
            chosen.append({"id": entry["id"], "text": entry["text"], "samples": samples * scale})
    return chosen


def reaction_floor_ms(samples: Any, stop_to_silence_ms: float, rule: str) -> float:
    """The reaction of the `rule`'s Silero part with no agent: a fresh Silero on the clip alone, from its first loud
    sample to the window on which the rule's windows average its probability, plus the input latency and the
    speaker's cancel -> silence. The clips open with 0-280 ms of breath no rule on speech hears as speech."""
    from mcp_listen.duplex.config import DEFAULT
    from mcp_listen.speech.vad import SileroVAD

    double_talk = (DEFAULT.onset_windows, DEFAULT.onset_probability)
    windows, probability = (
        double_talk if rule == "double_talk" else (DEFAULT.strict_windows, DEFAULT.strict_probability)
    )
    vad = SileroVAD()
    lead = RATE // 2
    padded = np.concatenate([np.zeros(lead), samples, np.zeros(lead)])
    recent: list[float] = []
    for i in range(len(padded) // WINDOW):
        window = np.clip(padded[i * WINDOW : (i + 1) * WINDOW], -32768, 32767).astype(np.int16)
        recent = [*recent, vad.hear(window)[0]][-windows:]
        if len(recent) == windows and sum(recent) >= probability * windows:
            heard_ms = ((i + 1) * WINDOW - lead - first_loud(samples)) * 1000 / RATE
            return round(heard_ms + INPUT_LATENCY_S * 1000 + stop_to_silence_ms, 1)
    return float("nan")


def first_loud(samples: Any) -> int:
    loud = np.flatnonzero(np.abs(samples) > 300)
    return int(loud[0]) if len(loud) else 0


class Whisper:
    def __init__(self, model: Path) -> None:
        from pywhispercpp.model import Model

        self._model = Model(str(model), print_realtime=False, print_progress=False, n_threads=2)

    def words(self, samples: Any) -> str:
        """What the server would write: whisper's text through its clean-up (usable_text drops `[BLANK_AUDIO]`)."""
        from mcp_listen.whisper.text import usable_text

        audio = np.asarray(samples, dtype=np.float32) / 32768.0
        audio = np.pad(audio, (0, max(0, RATE - len(audio))))
        return usable_text(" ".join(s.text for s in self._model.transcribe(audio, language="en"))) or ""


# --------------------------------------------------------------------------- the runs


def run_condition(condition: dict[str, Any], parts_: dict[str, Any], opts: Any, seed: int, clock: Any) -> dict:
    """Every option on the same cases: `--runs` of the agent alone, as many with the user cutting in."""
    from mcp_listen.speech.vad import SileroVAD

    rng, nrng, vad, texts = random.Random(seed), np.random.default_rng(seed), SileroVAD(), Agent.KINDS
    out: dict[str, dict[str, Any]] = {o: {"agent_alone": [], "user_cuts_in": []} for o in opts.options}
    for i in range(opts.runs):
        far = parts_["agent"].says(texts[i % len(texts)])
        case = {"far": far, "room": echo_path(condition, nrng), "user": None, "user_at": 0}
        case["noise"] = _noise(condition, None, far, nrng)
        for option in opts.options:
            result = one_turn(case, clock, vad, option)
            aligned = result["aligned_window"]
            erle = erle_db(result["pairs"], (aligned or 0) + 10, int(result["speech_s"] * RATE / WINDOW))
            out[option]["agent_alone"].append({"text": texts[i % len(texts)], "barged": result["barged"], "erle_db": erle,
                "cpu_pct_of_one_core": round(100 * result["cpu_per_speech_s"], 2)})  # fmt: skip
    for i in range(opts.runs):
        clip = parts_["users"][i % len(parts_["users"])]
        far = parts_["agent"].says(f"long@{SPEEDS[i % len(SPEEDS)]}")
        user = clip["samples"]
        user_at = int((0.1 + rng.uniform(2.0, 5.0)) * RATE)
        case = {"far": far, "room": echo_path(condition, nrng), "user": user, "user_at": user_at}
        case["noise"] = _noise(condition, user, far, nrng)
        for option in opts.options:
            row = _cut_in_row(one_turn(case, clock, vad, option), clip, user_at, parts_, option)
            out[option]["user_cuts_in"].append(row)
    return out


def _cut_in_row(result: dict[str, Any], clip: dict[str, Any], user_at: int, parts_: dict, option: str) -> dict:
    onset_s, stopped = (user_at + first_loud(clip["samples"])) / RATE, result["stopped_s"]
    early = result["barged"] and stopped - INPUT_LATENCY_S < user_at / RATE  # on windows before the recording began
    lead_in = result["barged"] and not early and stopped < onset_s  # its breath, before the first sample over -40 dBFS
    after = round((stopped - onset_s) * 1000, 1) if result["barged"] and not (early or lead_in) else None
    handed = _until_silence(result["handed"], result["stopped_s"], clip, user_at)
    said = parts_["whisper"].words(handed) if result["barged"] else ""
    ref_errors, ref_words = errors(clip["text"], said)
    floor = parts_["floor"]["double_talk" if option == "product" else "strict"]  # the rule that decides
    return {"clip": clip["id"], "barged": result["barged"], "before_the_user": early, "in_lead_in": lead_in,
        "onset_s": round(onset_s, 3), "reaction_ms": None if after is None else round(after + parts_["stop_to_silence_ms"], 1),
        "reaction_floor_ms": floor[clip["id"]], "heard": said, "errors": ref_errors,
        "words": ref_words, "errors_alone": errors(clip["text"], parts_["alone"][clip["id"]])[0]}  # fmt: skip


def _until_silence(handed: Any, stopped_s: float | None, clip: dict[str, Any], user_at: int) -> Any:
    """What the turn handed on up to where the listener's recording would end, DEFAULT_SILENCE_MS after the user's
    last loud sample (whisper wrote words of its own into the 4 s after). The handed windows begin
    handover_windows before the one that stopped the speech (its arrival, INPUT_LATENCY_S after it was heard)."""
    from mcp_listen.contract.limits import DEFAULT_SILENCE_MS
    from mcp_listen.duplex.config import DEFAULT

    PRE_ROLL_WINDOWS = DEFAULT.handover_windows

    if stopped_s is None:
        return handed
    first = max(0, int(round((stopped_s - INPUT_LATENCY_S) * RATE)) - PRE_ROLL_WINDOWS * WINDOW)  # the first handed
    end = user_at + int(np.flatnonzero(np.abs(clip["samples"]) > 300)[-1]) + DEFAULT_SILENCE_MS * RATE // 1000
    return handed[: max(0, end - first)]


def _noise(condition: dict[str, Any], user: Any, far: Any, rng: np.random.Generator) -> Any:
    """Steady pink noise at the condition's SNR to the user's speech (to a typical clip's level when silent)."""
    snr = condition["noise_snr_db"]
    if snr is None:
        return None
    length = int((len(far) / VOICE_RATE + 5.0) * RATE)
    spectrum = np.fft.rfft(rng.standard_normal(length))
    spectrum[1:] /= np.sqrt(np.arange(1, len(spectrum)))  # 1/f power: pink, as a room's hum and fans
    spectrum[0] = 0
    pink = np.fft.irfft(spectrum, length)
    level = np.sqrt(np.mean(user[np.abs(user) > 300] ** 2)) if user is not None else 3000.0
    return pink * (level / np.sqrt(np.mean(pink**2))) * 10 ** (-snr / 20)


def summarise(rows: dict[str, Any]) -> dict[str, Any]:
    alone, cut = rows["agent_alone"], rows["user_cuts_in"]
    words = sum(r["words"] for r in cut)
    reaction = summary(r["reaction_ms"] for r in cut if r["reaction_ms"] is not None)
    floor = summary(r["reaction_floor_ms"] for r in cut if r["reaction_ms"] is not None)
    s = {"false_barge_ins": sum(r["barged"] for r in alone), "runs_alone": len(alone),
         "barge_ins_detected": sum(r["barged"] and not r["before_the_user"] for r in cut),
         "stopped_before_the_user": sum(r["before_the_user"] for r in cut), "runs_user": len(cut),
         "caught_in_lead_in": sum(r.get("in_lead_in", False) for r in cut),
         "reaction_ms": reaction, "reaction_floor_ms": floor,
         "wer_pct": round(100 * sum(r["errors"] for r in cut) / words, 1) if words else None,
         "wer_alone_pct": round(100 * sum(r["errors_alone"] for r in cut) / words, 1) if words else None,
         "erle_db": summary(r["erle_db"] for r in alone if r["erle_db"] is not None),
         "cpu_pct_of_one_core": summary(r["cpu_pct_of_one_core"] for r in alone)}  # fmt: skip
    gap = None if reaction.get("median") is None else reaction["median"] - floor["median"]
    wer_gap = None if s["wer_pct"] is None else s["wer_pct"] - s["wer_alone_pct"]
    s["targets"] = {
        "false_barge_ins": verdict(s["false_barge_ins"] + s["stopped_before_the_user"], 0),
        "users_missed": verdict(s["runs_user"] - s["barge_ins_detected"], 0),
        "reaction_median_ms": verdict(reaction.get("median"), TARGETS["reaction_median_ms"]),
        "reaction_p90_ms": verdict(reaction.get("p90"), TARGETS["reaction_p90_ms"]),
        "median_over_floor_ms": verdict(gap, TARGETS["over_floor_ms"]),
        "wer_points_over_alone": verdict(wer_gap, TARGETS["wer_points"]),
        "cpu_pct_median": verdict(s["cpu_pct_of_one_core"].get("median"), TARGETS["cpu_pct"]),
    }
    return s


def print_table(report: dict[str, Any]) -> None:
    """One line per option and condition: the README's table."""
    print(f"\nbarge-in, {report['config']['runs']} runs per condition and case")
    print("option | condition | false stops (alone + before the user) | users caught | reaction median / p90 "
          "(floor) ms | WER / alone % | ERLE dB | CPU % | misses")  # fmt: skip
    for option, conditions in report["summary"].items():
        for name, s in conditions.items():
            r, f = s["reaction_ms"], s["reaction_floor_ms"]
            missed = [k for k, v in s["targets"].items() if v.get("ok") is False]
            print(f"{option} | {name} | {s['false_barge_ins']} + {s['stopped_before_the_user']} of {s['runs_alone']} | "
                  f"{s['barge_ins_detected']} of {s['runs_user']} ({s.get('caught_in_lead_in', 0)} in the lead-in) | {r.get('median')} / {r.get('p90')} ({f.get('median')}) | "
                  f"{s['wer_pct']} / {s['wer_alone_pct']} | {s['erle_db'].get('median')} | "
                  f"{s['cpu_pct_of_one_core'].get('median')} | {', '.join(missed) or '-'}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    opts = cli(__doc__, argv, ("--runs", 20, "runs per condition, of the agent alone and as many with the user"),
        ("--options", "product", f"comma-separated, of {', '.join(OPTIONS)}"),
        ("--json", ROOT / "bench" / "results-barge.json", "the report"), ("--voice", VOICE_PATH, "the agent's Piper voice"),
        ("--model", TEST_MODEL, "whisper model for the words"))  # fmt: skip
    opts.options = [o for o in opts.options.split(",") if o]
    if unknown := [o for o in opts.options if o not in OPTIONS]:
        raise SystemExit(f"--options: unknown {unknown}; known: {', '.join(OPTIONS)}")
    run = Run("pywebrtc-audio", "piper-tts", runs=opts.runs, options={o: OPTIONS[o] for o in opts.options},
              voice=opts.voice.name, model=opts.model.name, speeds=SPEEDS, input_latency_s=INPUT_LATENCY_S)  # fmt: skip
    clock, whisper, clips, stop_ms = simulated_clock(), Whisper(opts.model), users(), _stop_to_silence_ms()
    floor = {r: {c["id"]: reaction_floor_ms(c["samples"], stop_ms, r) for c in clips} for r in ("double_talk", "strict")}  # fmt: skip
    parts_ = {"agent": Agent(opts.voice), "users": clips, "whisper": whisper, "stop_to_silence_ms": stop_ms,
              "alone": {c["id"]: whisper.words(c["samples"]) for c in clips}, "floor": floor}  # fmt: skip
    report = run.report
    report["config"].update(clips=[c["id"] for c in clips], stop_to_silence_ms=stop_ms)
    report["options"] = {o: {} for o in opts.options}
    for seed, (name, condition) in enumerate(CONDITIONS.items()):
        for option, rows in run_condition(condition, parts_, opts, seed, clock).items():
            report["options"][option][name] = {"condition": condition, **rows}
    report["summary"] = {o: {n: summarise(rows) for n, rows in conds.items()} for o, conds in report["options"].items()}
    save_report(run.end(), opts.json, print_table)
    return 0


def simulated_clock() -> Any:
    """The turn's clock: `monotonic` reads `now`, which the simulated microphone moves on."""
    clock = SimpleNamespace(now=1000.0)
    clock.monotonic = lambda: clock.now
    return clock


def _stop_to_silence_ms() -> float:
    """The live speaker's cancel -> last sound at the speaker (bench/speak.py), added to the detection time."""
    path = ROOT / "bench" / "results-speak.json"
    try:
        return float(json.loads(path.read_text())["summary"]["cancel_to_silence_ms"]["median"])
    except (OSError, KeyError, ValueError, TypeError):
        return 40.0


if __name__ == "__main__":
    sys.exit(main())
