"""The virtual speaker, for the tests of speech out (speak_text, converse, `mcp-listen say`).

The server plays into the virtual microphone's sink, its default output; the vmic source is that
sink's monitor, so what a test records from it is what the speaker played — and what the server's
own microphone hears: the worst echo, the speaker at full level straight into the microphone.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from vmic import SINK, SOURCE, TICK_SINK

FOX = "The quick brown fox jumps over the lazy dog."
LONG = " ".join(
    [
        "Once upon a time, in a small village by the sea, there lived an old fisherman and his wife.",
        "Every morning he rowed out past the rocks, and every evening he came home with a basket of fish.",
        "One day the sea was very calm, and the fisherman rowed further than he had ever gone before.",
        "There, far from the shore, he cast his net and waited for a long, long time.",
    ]
)
SOUND = 300
"""A sample louder than this (about -40 dBFS) is sound; the null sink's silence is exact zeros."""
VOICE = "en_US-joe-medium"
AGENT_WORDS = frozenset(
    "once upon time small village sea lived old fisherman wife morning rowed rocks evening came home basket "
    "fish calm further gone shore cast net waited".split()
)
"""LONG's words that no user clip holds: one of them in a transcript is the agent's own voice (a barge-in
that stopped the speech on it handed its last words to the listener: "small", 2.3 s in)."""
CUT_IN_AFTER_S = 4.0
"""From the speech's start on get_status to the user's clip: ~2.5 s of speech played, past the first ~2 s
that cannot be interrupted (the echo's delay measured, then the canceller settles: duplex/path.py)."""


def speaking_env(mic_env: dict[str, str], home: Path, voices: Path, **extra: str) -> dict[str, str]:
    """A server's environment on the rig: the test voice (in `voices`) as the default voice, HOME and the
    recordings in `home`."""
    from rpc import server_env

    places = {"HOME": str(home), "MCP_LISTEN_RECORDINGS_DIR": str(home / "rec"), "MCP_LISTEN_VOICES_PATH": str(voices)}
    return server_env(mic_env, **places, MCP_LISTEN_VOICE=VOICE, **extra)


def agent_words_in(text: str | None) -> list[str]:
    """The agent's words in a transcript, word by word ("sea" is not in "season")."""
    return [word for word in re.findall(r"[a-z]+", (text or "").lower()) if word in AGENT_WORDS]


def user_cuts_in(w: Any, vmic: Any, tool: str, args: dict[str, Any], token: str = "turn") -> tuple[dict, float]:
    """The live barge-in case: `tool` starts LONG (its voice loaded by a first call, so the speech starts at
    once), and CUT_IN_AFTER_S after it speaks the user says speech_checks.speech_clip() over it. Returns the
    reply and when the clip began to play (time.monotonic()); progress comes under `token`."""
    from speech_checks import speech_clip

    request = w.start(tool, {"text": LONG, **args}, progressToken=token)
    w.until(lambda: w.status().get("speaking"), 30, f"{tool} never started speaking")
    time.sleep(CUT_IN_AFTER_S)
    started = time.monotonic()
    player = vmic.play(speech_clip(), block=False)
    reply = w.wait(request["id"], timeout=120)
    player.wait()
    return reply, started


def agent_alone(w: Any, model_path: Path) -> dict[str, Any]:
    """The agent's own voice case: converse says LONG into the microphone at full level and nobody speaks;
    barge-in as the server's settings say. Returns the reply's `result`."""
    args = {"text": LONG, "whisper_model": str(model_path), "duration_ms": 1500}
    return w.call("converse", args, timeout=180)


@contextmanager
def recording_the_speaker(vmic: Any, into: Path) -> Iterator[None]:
    """parec on the vmic source (the monitor of the sink the server plays into), 16 kHz mono s16le,
    for as long as the block runs; the samples are in `into` afterwards."""
    with open(into, "wb") as out:
        parec = subprocess.Popen(
            ["parec", f"--device={SOURCE}", "--rate=16000", "--channels=1", "--format=s16le", "--raw"],
            env=vmic.child_env(),
            stdout=out,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(0.3)  # parec connected before anything plays
            yield
            time.sleep(0.3)
        finally:
            parec.terminate()
            parec.wait(timeout=10)


def loud(samples: np.ndarray) -> np.ndarray:
    """Indexes of the samples that are sound (over SOUND): the null sink's silence is exact zeros."""
    return np.flatnonzero(np.abs(samples.astype(np.int32)) > SOUND)


def sound_span_ms(samples: np.ndarray) -> int:
    sounds = loud(samples)
    return 0 if len(sounds) == 0 else round((sounds[-1] - sounds[0]) * 1000 / 16000)


def sounding_ms(samples: np.ndarray, window_ms: int = 10) -> int:
    """How long the recording holds sound, gaps left out: an underrun on a busy machine stretches the span
    with silence, while a doubled or looping speech adds sound."""
    size = 16000 * window_ms // 1000
    usable = len(samples) // size * size
    peaks = np.abs(samples[:usable].astype(np.int32)).reshape(-1, size).max(axis=1)
    return int((peaks > SOUND).sum()) * window_ms


GAP_MS = 20
"""A run of exact zeros this long in a recording of the speaker is the sink's own silence: the stream had nothing
to play (synthesis slower than the speech on a busy machine). Piper's quiet is never exact zeros that long."""
PLAYED_TOLERANCE_MS = 150
"""How far a stopped speech's played_ms may be from what the speaker's recording holds: the speaker counts
what its buffer held when the stop dropped it out (0-37 ms over it on a loaded rig, bench/README.md)."""


def heard_ms(samples: np.ndarray) -> int:
    """How much of a speech the speaker played: from its first to its last sample that is not silent, less the
    gaps (runs of exact zeros of GAP_MS or more). Unlike sound_span_ms, a gap is not counted as speech."""
    sounding = np.flatnonzero(samples)
    if len(sounding) == 0:
        return 0
    zero = np.concatenate([[0], (samples[sounding[0] : sounding[-1] + 1] == 0).astype(np.int8), [0]])
    edges = np.diff(zero)
    runs = np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)
    gaps = int(runs[runs >= 16 * GAP_MS].sum())
    return round((sounding[-1] + 1 - sounding[0] - gaps) / 16)


def transcribe(samples: np.ndarray, model_path: Path, rate: int = 16000) -> str:
    """What whisper hears in int16 samples (resampled to 16 kHz when `rate` differs)."""
    from mcp_listen.whisper.transcriber import Transcriber

    audio = samples.astype(np.float32) / 32768
    if rate != 16000:
        import soxr

        audio = soxr.resample(audio, rate, 16000)
    return Transcriber(threads=2).transcribe(audio, path=model_path)


PHONES = "vmic_phones"
"""A second null sink on the rig's sound server that the microphone never hears: headphones."""


def sound_devices(vmic: Any, folder: Path, *, speaker: str = SINK, microphone: str = SOURCE) -> dict[str, str]:
    """A server's ALSA_CONFIG_PATH whose default device plays into `speaker` and records from `microphone`
    (names on the rig's sound server; one that does not exist is a device that cannot open)."""
    conf = folder / "asound.conf"
    conf.write_text(
        "pcm.!default {\n    type asym\n"
        f"    capture.pcm {{ type pulse device {microphone} }}\n"
        f"    playback.pcm {{ type pulse device {speaker} }}\n}}\n"
        "ctl.!default {\n    type pulse\n}\n"
    )
    return {"ALSA_CONFIG_PATH": str(conf)}


@contextmanager
def headphones(vmic: Any, folder: Path) -> Iterator[dict[str, str]]:
    """The agent's voice into headphones (PHONES, rendered in 20 ms steps as the rig's sink is) while the
    microphone stays the rig's: no echo path. Yields the server's ALSA_CONFIG_PATH for it."""

    def pactl(*args: str) -> str:
        done = subprocess.run(["pactl", *args], env=vmic.child_env(), capture_output=True, text=True, timeout=10)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    sink = pactl("load-module", "module-null-sink", f"sink_name={PHONES}", "rate=16000", "channels=1", "format=s16le")
    loop = pactl("load-module", "module-loopback", f"source={PHONES}.monitor", f"sink={TICK_SINK}", "latency_msec=20")
    try:
        pactl("suspend-sink", PHONES, "1")  # re-armed for the loopback's 20 ms, not a first 2 s block
        pactl("suspend-sink", PHONES, "0")
        yield sound_devices(vmic, folder, speaker=PHONES)
    finally:
        pactl("unload-module", loop)
        pactl("unload-module", sink)
