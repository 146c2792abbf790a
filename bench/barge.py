"""Barge-in on echo paths and sounds the live rig cannot make: converse's own turn (duplex/barge.py: BargeIn)
fed, window by window on a simulated clock, what a microphone in a room hears; its thresholds are a
BargeInConfig (`config`), its confirmation whisper (tiny.en by default), as converse's.

    python bench/barge.py [--runs N] [--conditions rooms,sounds,echoes] [--json OUT] [--voice P] [--model P]

bench/README.md ("Barge-in") has the agent, the users, the rooms, the interferers and what each figure measures.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from clips import errors, real
from rig import RATE, ROOT, TEST_MODEL
from rig import audio_assets as A
from speak import SENTENCES, VOICE_PATH
from stats import Run, cli, save_report, summary, verdict

from mcp_listen.duplex.confirm import AgentWords, spoken_words

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
"""Room-like echo paths, and steady room noise at 20 dB SNR to the user's speech."""
SOUNDS = {
    "claps": ("sox", "synth 0.04 pinknoise fade q 0.001 0.04 0.035 pad 0 0.3 repeat 7"),
    "tone sweep": ("sox", "synth 2.5 sine 300-3400"),
    "noise bursts": ("sox", "synth 0.25 pinknoise pad 0 0.25 repeat 5"),
    "plucked music": ("sox", " ".join(f"synth 0.35 pluck {f} :" for f in (262, 330, 392, 523, 392, 330, 294, 349))[:-2]),
    "a TV, 15 dB under the echo": ("espeak-ng", "Tonight's weather: rain in the north and sunshine across the south."),
    "the agent's text, another voice": ("espeak-ng", " ".join(SENTENCES[1:3])),
}  # fmt: skip
"""The interferers of the adversarial run, made with sox and espeak-ng, each played 4 s into a speech at full
level with no delay, as loud as the user (the TV 15 dB quieter than the echo)."""
ECHOES = {
    "echo 0.6 s late": {"delay_ms": 600, "gain_db": 0.0, "reverb": False, "noise_snr_db": None},
    "echo 1 s late": {"delay_ms": 1000, "gain_db": 0.0, "reverb": False, "noise_snr_db": None},
    "echo clipped, +18 dB": {"delay_ms": 0, "gain_db": 18.0, "reverb": False, "noise_snr_db": None},
}  # fmt: skip
"""The agent's own voice where the canceller does not expect it: later than the delay PortAudio reports
(Bluetooth, HDMI, network sinks) and clipped at the microphone."""
USER_LEVEL_DBFS = -20.0
"""The user's voice at the microphone (RMS while speaking): the agent's speech as played is at about the
same level (-20 dBFS), so at "full level" the echo is as loud as the user, and 6 dB quieter at -6 dB."""
SPEEDS = (0.8, 1.0, 1.25)
"""The agent's voice at three rates: the suite has one Piper voice, so its speed varies instead."""
RT60_S = 0.3
TAIL_DB = -12.0
"""The reverberant tail: exponentially decaying noise, 60 dB down in RT60_S, starting TAIL_DB below the direct echo."""
TARGETS = {"reaction_median_ms": 450.0, "reaction_p90_ms": 600.0, "wer_points": 5.0, "cpu_pct": 10.0}


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


def echo(played16: Any, ir: Any, length: int) -> Any:
    """`length` samples of what the microphone hears through `ir` of what was played (16 kHz, on its clock)."""
    n = len(played16) + len(ir) - 1
    size = 1 << (n - 1).bit_length()
    return np.pad(np.fft.irfft(np.fft.rfft(played16, size) * np.fft.rfft(ir, size), size)[:n], (0, length))[:length]


def one_turn(case: dict[str, Any], clock: Any, vad: Any, config: Any = None, words: Any = None) -> dict:
    """One converse turn with barge-in, simulated: returns when it went quiet for good, what it handed on, its
    pauses for sounds that were not the user, and how long it took. The speaker plays the speech in segments
    (a pause cuts one, a resume starts the next from the first block not heard); the microphone hears their echo."""
    import soxr

    from mcp_listen.duplex.barge import BargeIn
    from mcp_listen.duplex.config import DEFAULT

    far22, path, user, user_at = case["far"], case["room"], case["user"], case["user_at"]
    far16 = soxr.resample(far22.astype(np.float32), VOICE_RATE, RATE).astype(np.float64)
    block, block16 = int(BLOCK_S * VOICE_RATE), int(BLOCK_S * RATE)
    blocks, length = -(-len(far22) // block), int((len(far22) / VOICE_RATE + 5.0) * RATE)
    others = np.zeros(length)
    for sound, at in ((user, user_at), (case.get("interferer"), case.get("interferer_at", 0))):
        if sound is not None:
            others[at : at + len(sound)] += sound[: max(0, length - at)]
    if case["noise"] is not None:
        others += case["noise"][:length]
    begin = clock.now
    s = SimpleNamespace(segments=[[0, blocks, begin + 0.1]], tap=None, tapped=0, paused=False, stopped_at=None)
    playback = SimpleNamespace(ended=threading.Event(), error=None, played=None, on_open=None)
    near = np.zeros(length)

    def heard() -> None:
        """The echo of every segment played so far, and the other sounds."""
        played = np.zeros(length)
        for first, last, at in s.segments:
            start = int((at - begin) * RATE)
            piece = far16[first * block16 : last * block16][: max(0, length - start)]
            played[start : start + len(piece)] += piece
        near[:] = echo(played, path, length) + others

    def cut(at: float) -> None:
        """The speaker goes quiet one block after `at`: the blocks not heard by then are played again on a resume."""
        first, last, seg_at = s.segments[-1]
        s.segments[-1][1] = min(last, first + max(0, int(np.ceil((at + BLOCK_S - seg_at) / BLOCK_S))))
        s.tapped = s.segments[-1][1]
        heard()

    def start(text: str, speed: float) -> None:
        speaker = SimpleNamespace(device_rate=VOICE_RATE, tap=None)
        playback.on_open(speaker)
        s.tap = speaker.tap

    def stop(wait_s: float) -> None:
        s.stopped_at = clock.now
        if not s.paused:
            cut(clock.now)
        playback.played = SimpleNamespace(ended_at=clock.now + BLOCK_S)
        playback.ended.set()

    def pause() -> None:
        s.paused = True
        cut(clock.now)

    def resume() -> None:
        s.paused = False
        s.segments.append([s.tapped, blocks, clock.now])
        heard()

    playback.start, playback.stop, playback.pause, playback.resume = start, stop, pause, resume
    heard()
    canceller = RecordingCanceller()
    turn = BargeIn(
        playback, case["text"], 1.0, vad, canceller, config=config or DEFAULT, clock=clock.monotonic, words=words
    )  # type: ignore[arg-type]

    def microphone():
        """The windows, each on arrival; meanwhile the speaker writes its blocks SPEAKER_BUFFER_S before they
        are heard (its buffer is full once playing), and the speech ends when its last block was heard."""
        for i in range(length // WINDOW):
            clock.now = begin + (i + 1) * WINDOW / RATE + INPUT_LATENCY_S  # the window's arrival
            heard_until = clock.now - INPUT_LATENCY_S
            first, last, seg_at = s.segments[-1]
            while s.tap is not None and s.stopped_at is None and not s.paused and s.tapped < last:
                k = s.tapped
                heard_at = seg_at + (k - first) * BLOCK_S
                if heard_at - SPEAKER_BUFFER_S > heard_until:
                    break
                s.tap(
                    far22[k * block : (k + 1) * block],
                    heard_at if k == first else heard_at - SPEAKER_BUFFER_S,
                    k == first > 0,
                )
                s.tapped += 1
            end_at = seg_at + (last - first) * BLOCK_S
            if (
                s.stopped_at is None
                and not s.paused
                and not playback.ended.is_set()
                and heard_until >= end_at
                and last == blocks
            ):
                playback.played = SimpleNamespace(ended_at=end_at)
                playback.ended.set()
            yield np.clip(near[i * WINDOW : (i + 1) * WINDOW], -32768, 32767).astype(np.int16)

    cpu = time.process_time()
    handed = list(turn.windows(_Iterable(microphone, INPUT_LATENCY_S), lambda: None))
    cpu = time.process_time() - cpu
    stopped = s.stopped_at is not None and turn.barged_at is not None
    return {
        "barged": stopped,
        "stopped_s": turn.barged_at - begin if stopped else None,
        "handed": np.concatenate(handed) if handed else np.zeros(0, np.int16),
        "pairs": canceller.pairs,
        "aligned_window": turn.aligned_window,
        "cut_in": None if turn.cut_in is None else turn.cut_in.fields(),
        "pauses": sum(not v.confirmed for v in turn.pauses),
        "verdicts": [v.fields() for v in turn.pauses],
        "quiet_ms": round(turn.paused_s * 1000),
        "cpu_per_speech_s": cpu / (len(near) / RATE),
        "speech_s": len(far22) / VOICE_RATE,
    }


class RecordingCanceller:
    """The server's canceller, keeping what went in and came out (for the ERLE)."""

    def __init__(self) -> None:
        from mcp_listen.duplex.echo import Canceller

        self._inner, self.pairs = Canceller(), []

    def clean(self, near: Any, far: Any) -> Any:
        out = self._inner.clean(near, far)
        self.pairs.append((near, out))
        return out

    def reset(self) -> None:
        self._inner.reset()


def erle_db(pairs: list[tuple[Any, Any]], first: int, last: int) -> float | None:
    """Echo return loss enhancement over windows [first, last): what went in against what came out."""
    chosen = pairs[first:last]
    near = np.concatenate([p[0] for p in chosen]).astype(np.float64) if chosen else np.zeros(0)
    if not near.any():
        return None
    out = np.concatenate([p[1] for p in chosen]).astype(np.float64)
    return round(10 * np.log10(np.mean(near**2) / max(np.mean(out**2), 1e-3)), 1)


@dataclass
class _Iterable:
    """A microphone for the turn: its windows, and `latency_s`."""

    windows: Any
    latency_s: float

    def __iter__(self):
        return self.windows()


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
    """`--runs` of the agent alone (with the condition's interferer, if any), and unless it has one, as many with
    the user cutting in; the turn confirms the user with whisper, as converse does."""
    from mcp_listen.speech.vad import SileroVAD

    rng, nrng, vad, texts = random.Random(seed), np.random.default_rng(seed), SileroVAD(), Agent.KINDS
    out: dict[str, list[Any]] = {"agent_alone": [], "user_cuts_in": []}
    sound, words = condition.get("sound"), parts_["whisper"].words
    for i in range(opts.runs):
        kind = "long@1.0" if sound is not None else texts[i % len(texts)]
        far, text, room = parts_["agent"].says(kind), Agent.TEXTS[kind.split("@")[0]], echo_path(condition, nrng)
        case = {"far": far, "text": text, "room": room, "user": None, "user_at": 0}
        case["noise"] = _noise(condition, None, far, nrng)
        if sound is not None:
            case["interferer"], case["interferer_at"] = parts_["sounds"][sound], int(4.1 * RATE)
        result = one_turn(case, clock, vad, words=words)
        erle = erle_db(result["pairs"], (result["aligned_window"] or 0) + 10, int(result["speech_s"] * RATE / WINDOW))
        answer = words(result["handed"][: 4 * RATE]) if result["barged"] else None
        after = AgentWords(text).taken_off(words(result["handed"][: 2 * RATE])) if not result["barged"] else ""
        out["agent_alone"].append({"text": kind, "barged": result["barged"], "erle_db": erle,
            "pauses": result["pauses"], "quiet_ms": result["quiet_ms"], "answer": answer, "verdicts": result["verdicts"],
            "agents_words": agents_words(after, "", text),
            "cpu_pct_of_one_core": round(100 * result["cpu_per_speech_s"], 2)})  # fmt: skip
    for i in range(0 if sound is not None else opts.runs):
        clip = parts_["users"][i % len(parts_["users"])]
        far = parts_["agent"].says(f"long@{SPEEDS[i % len(SPEEDS)]}")
        user_at, room = int((0.1 + rng.uniform(2.0, 5.0)) * RATE), echo_path(condition, nrng)
        case = {"far": far, "text": Agent.TEXTS["long"], "room": room, "user": clip["samples"], "user_at": user_at}
        case["noise"] = _noise(condition, clip["samples"], far, nrng)
        out["user_cuts_in"].append(_cut_in_row(one_turn(case, clock, vad, words=words), clip, user_at, parts_))
    return out


def agents_words(said: str, clip_text: str, agent_text: str = Agent.TEXTS["long"]) -> list[str]:
    """The agent's phrases in an answer (as converse gives it, its leading echo taken off): runs of 3 or more
    words it said in that order, less the words the user said too (a pair like "for the" is whisper mishearing
    the user as often), or only its last words."""
    heard, agent, user = spoken_words(said), spoken_words(agent_text), set(spoken_words(clip_text))
    runs = {tuple(agent[i : i + 3]) for i in range(len(agent) - 2)}
    found = {k for i in range(len(heard) - 2) if tuple(heard[i : i + 3]) in runs for k in (i, i + 1, i + 2)}
    lone = heard if 0 < len(heard) <= 2 and heard == agent[-len(heard) :] else []
    return [heard[k] for k in sorted(found) if heard[k] not in user] + lone


def _cut_in_row(result: dict[str, Any], clip: dict[str, Any], user_at: int, parts_: dict) -> dict:
    onset_s, stopped = (user_at + int(np.flatnonzero(np.abs(clip["samples"]) > 300)[0])) / RATE, result["stopped_s"]
    early = result["barged"] and stopped - INPUT_LATENCY_S < user_at / RATE  # on windows before the recording began
    lead_in = result["barged"] and not early and stopped < onset_s  # its breath, before the first sample over -40 dBFS
    after = round((stopped - onset_s) * 1000, 1) if result["barged"] and not (early or lead_in) else None
    handed = _until_silence(result["handed"], result["stopped_s"], clip, user_at)
    said = parts_["whisper"].words(handed) if result["barged"] else ""
    ref_errors, ref_words = errors(clip["text"], said)
    return {"clip": clip["id"], "barged": result["barged"], "before_the_user": early, "in_lead_in": lead_in,
        "onset_s": round(onset_s, 3), "reaction_ms": None if after is None else round(after + parts_["stop_to_silence_ms"], 1),
        "heard": said, "errors": ref_errors,
        "agents_words": agents_words(AgentWords(Agent.TEXTS["long"]).taken_off(said), clip["text"]), "pauses": result["pauses"], "quiet_ms": result["quiet_ms"],
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
    s = {"false_barge_ins": sum(r["barged"] for r in alone), "runs_alone": len(alone),
         "barge_ins_detected": sum(r["barged"] and not r["before_the_user"] for r in cut),
         "stopped_before_the_user": sum(r["before_the_user"] for r in cut), "runs_user": len(cut),
         "caught_in_lead_in": sum(r.get("in_lead_in", False) for r in cut),
         "reaction_ms": reaction,
         "wer_pct": round(100 * sum(r["errors"] for r in cut) / words, 1) if words else None,
         "wer_alone_pct": round(100 * sum(r["errors_alone"] for r in cut) / words, 1) if words else None,
         "pauses_alone": sum(r.get("pauses", 0) for r in alone), "runs_paused": sum(bool(r.get("pauses")) for r in alone),
         "quiet_ms_per_pause": summary(r["quiet_ms"] / r["pauses"] for r in alone if r.get("pauses")),
         "answers_from_no_user": sum(bool(r.get("answer")) for r in alone),
         "answers_with_agents_words": sum(bool(r.get("agents_words")) for r in cut + alone),
         "erle_db": summary(r["erle_db"] for r in alone if r["erle_db"] is not None),
         "cpu_pct_of_one_core": summary(r["cpu_pct_of_one_core"] for r in alone)}  # fmt: skip
    wer_gap = None if s["wer_pct"] is None else s["wer_pct"] - s["wer_alone_pct"]
    s["targets"] = {
        "false_barge_ins": verdict(s["false_barge_ins"] + s["stopped_before_the_user"], 0),
        "answers_with_agents_words": verdict(s["answers_with_agents_words"], 0),
        "users_missed": verdict(s["runs_user"] - s["barge_ins_detected"], 0) if cut else {},
        "reaction_median_ms": verdict(reaction.get("median"), TARGETS["reaction_median_ms"]),
        "reaction_p90_ms": verdict(reaction.get("p90"), TARGETS["reaction_p90_ms"]),
        "wer_points_over_alone": verdict(wer_gap, TARGETS["wer_points"]),
        "cpu_pct_median": verdict(s["cpu_pct_of_one_core"].get("median"), TARGETS["cpu_pct"]),
    }
    return s


def print_table(report: dict[str, Any]) -> None:
    """One line per condition: the README's table."""
    print(f"\nbarge-in, {report['config']['runs']} runs per condition and case")
    print("condition | false stops (alone + before the user) | paused (runs) | quiet per pause median ms | answers | "
          "users caught | reaction median / p90 ms | WER / alone % | agent's words | ERLE dB | CPU % | misses")  # fmt: skip
    for name, s in report["summary"].items():
        r, q = s["reaction_ms"], s["quiet_ms_per_pause"]
        missed = [k for k, v in s["targets"].items() if v.get("ok") is False]
        print(f"{name} | {s['false_barge_ins']} + {s['stopped_before_the_user']} of {s['runs_alone']} | "
              f"{s['runs_paused']} | {q.get('median')} | {s['answers_from_no_user']} | "
              f"{s['barge_ins_detected']} of {s['runs_user']} ({s.get('caught_in_lead_in', 0)} in the lead-in) | "
              f"{r.get('median')} / {r.get('p90')} | {s['wer_pct']} / {s['wer_alone_pct']} | "
              f"{s['answers_with_agents_words']} | {s['erle_db'].get('median')} | "
              f"{s['cpu_pct_of_one_core'].get('median')} | {', '.join(missed) or '-'}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    opts = cli(__doc__, argv, ("--runs", 20, "runs per condition, of the agent alone and as many with the user"),
        ("--conditions", "rooms,sounds,echoes", "comma-separated groups: rooms, sounds (interferers), echoes (late, clipped)"),
        ("--json", ROOT / "bench" / "results-barge.json", "the report"), ("--voice", VOICE_PATH, "the agent's Piper voice"),
        ("--model", TEST_MODEL, "whisper model for the words"))  # fmt: skip
    run = Run("pywebrtc-audio", "piper-tts", runs=opts.runs,
              voice=opts.voice.name, model=opts.model.name, speeds=SPEEDS, input_latency_s=INPUT_LATENCY_S)  # fmt: skip
    clock, whisper, clips, stop_ms = simulated_clock(), Whisper(opts.model), users(), _stop_to_silence_ms()
    parts_ = {"agent": Agent(opts.voice), "users": clips, "whisper": whisper, "stop_to_silence_ms": stop_ms,
              "alone": {c["id"]: whisper.words(c["samples"]) for c in clips}, "sounds": sounds()}  # fmt: skip
    room = CONDITIONS["full level, no delay"]
    groups = {"rooms": CONDITIONS, "sounds": {name: {**room, "sound": name} for name in SOUNDS}, "echoes": ECHOES}
    chosen = {name: c for group in opts.conditions.split(",") for name, c in groups[group].items()}
    report = run.report
    report["config"].update(clips=[c["id"] for c in clips], stop_to_silence_ms=stop_ms)
    report["conditions"] = {}
    for seed, (name, condition) in enumerate(chosen.items()):
        report["conditions"][name] = {"condition": condition, **run_condition(condition, parts_, opts, seed, clock)}
    report["summary"] = {name: summarise(rows) for name, rows in report["conditions"].items()}
    save_report(run.end(), opts.json, print_table)
    return 0


def sounds() -> dict[str, Any]:
    """SOUNDS made afresh (16 kHz float samples), as loud as the user while they sound (the TV 15 dB under the echo)."""
    import subprocess

    made = {}
    for name, (tool, spec) in SOUNDS.items():
        raw = ["-r", str(RATE), "-c", "1", "-b", "16", "-e", "signed", "-t", "raw", "-"]
        if tool == "sox":
            command = ["sox", "-n", *raw, *spec.split()]
        else:  # espeak-ng writes a WAV at 22,050 Hz: sox resamples it
            command = ["sh", "-c", f'espeak-ng -v en-us --stdout "$0" | sox -t wav - {" ".join(raw)}', spec]
        samples = np.frombuffer(subprocess.run(command, capture_output=True, check=True).stdout, np.int16).astype(
            np.float64
        )
        active = samples[np.abs(samples) > 0.05 * np.abs(samples).max()]
        level = USER_LEVEL_DBFS - (15.0 if "TV" in name else 0.0)
        made[name] = samples * 32768 * 10 ** (level / 20) / np.sqrt(np.mean(active**2))
    return made


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
