"""The test harness itself: the virtual microphone really is a microphone, and the helper
environments really hide PortAudio or every input device. If these fail, every audio test
after them means nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import audio_assets
import numpy as np
import pytest
import sounddevice as sd
from vmic import SOURCE, VirtualMic, env_no_input_devices, env_without_portaudio

RATE = 16000
BLOCK = 512

# Prints the devices PortAudio sees in a child, as JSON.
LIST_DEVICES = """
import json, sounddevice as sd
devices = [dict(name=d["name"], inputs=d["max_input_channels"]) for d in sd.query_devices()]
print(json.dumps({"devices": devices, "default_input": sd.default.device[0]}))
"""

OPEN_DEFAULT_INPUT = """
import sounddevice as sd
try:
    sd.InputStream(samplerate=16000, channels=1, dtype="int16").close()
except sd.PortAudioError as exc:
    print("PortAudioError:", exc)
"""


def minimal_env() -> dict[str, str]:
    """A child environment without anything the session fixture exported, so a test proves
    that the variables it adds are enough."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/")}


def run_child(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def record(seconds: float, *, while_running=None, timeout: float = 20.0):
    """Record ``seconds`` of 16 kHz mono int16 from the default input with 512-sample blocks.

    Returns (samples, t_start, block_times). ``while_running`` is called once audio flows
    (the first block has arrived), e.g. to play something into the microphone: audio played
    in the instant before the capture stream is attached to the source is not captured (a
    few samples went missing that way in ~1 run in 4)."""
    wanted = int(seconds * RATE)
    blocks: list[np.ndarray] = []
    times: list[float] = []
    flowing = threading.Event()
    done = threading.Event()

    def callback(indata, frames, time_info, status):
        blocks.append(indata[:, 0].copy())
        times.append(time.monotonic())
        flowing.set()
        if sum(len(b) for b in blocks) >= wanted:
            done.set()

    started = time.monotonic()
    with sd.InputStream(samplerate=RATE, channels=1, dtype="int16", blocksize=BLOCK, callback=callback) as stream:
        assert flowing.wait(timeout), f"no audio block within {timeout} s"
        if while_running is not None:
            while_running()
        finished = done.wait(timeout)
        stream.stop()
    assert finished, f"only {sum(len(b) for b in blocks)} of {wanted} samples in {timeout} s"
    return np.concatenate(blocks)[:wanted], started, times


# --- the virtual microphone, in this process ------------------------------------------------


def test_default_input_in_process_is_the_virtual_microphone(vmic):
    inputs = [d for d in sd.query_devices() if d["max_input_channels"] > 0]
    assert SOURCE in [d["name"] for d in inputs]
    default_index = sd.default.device[0]
    assert default_index >= 0, "PortAudio has no default input device"
    with sd.InputStream(samplerate=RATE, channels=1, dtype="int16"):
        outputs = pactl(vmic, "list", "short", "source-outputs")
        sources = pactl(vmic, "list", "short", "sources")
    vmic_index = next(line.split("\t")[0] for line in sources if line.split("\t")[1] == SOURCE)
    # A client stream (protocol-native) on the vmic source proves where "default" leads.
    assert any(
        fields[1] == vmic_index and fields[3] == "protocol-native.c"
        for fields in (line.split("\t") for line in outputs)
    ), outputs


def pactl(mic: VirtualMic, *args: str) -> list[str]:
    done = subprocess.run(["pactl", *args], env=mic.child_env(), capture_output=True, text=True, timeout=10)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line.strip()]


def test_recording_contains_the_played_audio_bit_exact(vmic, assets):
    sentence = assets.read_wav(assets.speech("Hello there."))
    sentence = sentence[: assets.last_loud_sample(sentence) + RATE // 20]  # drop espeak's tail
    played = assets.samples_of(assets.concat([assets.tone(1000, 250), assets.silence(100), sentence]))
    assert len(played) < 1.3 * RATE  # must fit in the 1.5 s recording with room for latency
    samples, _, _ = record(1.5, while_running=lambda: vmic.play_samples(played))
    lag, correlation = assets.xcorr_align(samples, played)
    assert correlation > 0.99
    np.testing.assert_array_equal(samples[lag : lag + len(played)], played)


def test_capture_starts_quickly_and_played_audio_arrives_quickly(vmic, assets):
    """Loose bounds (a loaded CI machine): they catch the null sink's 2 s first block and
    bursty delivery, not milliseconds. Typical here: first block ~35 ms, audio ~35 ms."""
    players = []
    played_at: list[float] = []

    def play():
        time.sleep(0.2)
        played_at.append(time.monotonic())
        players.append(vmic.play(assets.tone(1000, 200, 0.8), block=False))

    samples, started, times = record(1.0, while_running=play)
    assert players[0].wait(timeout=10) == 0
    assert times[0] - started < 1.0, f"first block after {times[0] - started:.3f} s"
    loud = assets.first_loud_sample(samples)
    arrival = times[loud // BLOCK]  # wall time of the block holding the first loud sample
    delay = arrival - played_at[0]
    assert 0 < delay < 1.0, f"audio arrived {delay:.3f} s after play"
    gaps = np.diff(times)
    assert gaps.max() < 0.5, f"blocks arrive in bursts: max gap {gaps.max():.3f} s"


def test_stop_removes_the_device_and_start_brings_it_back(vmic, assets):
    try:
        vmic.stop()
        assert not vmic.running
        done = subprocess.run(["pactl", "info"], env=vmic.child_env(), capture_output=True, timeout=10)
        assert done.returncode != 0
        with pytest.raises(sd.PortAudioError):
            sd.InputStream(samplerate=RATE, channels=1, dtype="int16").close()
    finally:
        vmic.start()
    assert vmic.running
    tone = assets.samples_of(assets.tone(440, 300))
    samples, _, _ = record(1.0, while_running=lambda: vmic.play_samples(tone))
    _, correlation = assets.xcorr_align(samples, tone)
    assert correlation > 0.99


# --- environments for child processes --------------------------------------------------------


def test_child_with_vmic_env_lists_the_virtual_microphone(vmic):
    done = run_child(LIST_DEVICES, vmic.child_env(minimal_env()))
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert SOURCE in [d["name"] for d in seen["devices"] if d["inputs"] > 0]
    assert seen["default_input"] >= 0


def test_child_without_portaudio_cannot_import_sounddevice():
    control = run_child("import sounddevice", minimal_env())
    assert control.returncode == 0, control.stderr
    done = run_child("import sounddevice", env_without_portaudio(minimal_env()))
    assert done.returncode != 0
    assert "OSError: PortAudio library not found" in done.stderr


def test_child_with_no_input_devices_lists_none_and_does_not_crash():
    env = env_no_input_devices(minimal_env())
    done = run_child(LIST_DEVICES, env)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert [d for d in seen["devices"] if d["inputs"] > 0] == []
    assert seen["default_input"] < 0
    opened = run_child(OPEN_DEFAULT_INPUT, env)
    assert opened.returncode == 0, opened.stderr
    assert "PortAudioError: Error querying device -1" in opened.stdout


@pytest.mark.mic
def test_virtual_mic_start_failure_names_the_problem():
    """A broken daemon script must fail start() with the daemon's own log, not hang."""
    mic = VirtualMic(start_timeout=5)
    try:
        (mic.workdir / "vmic.pa").write_text("load-module module-does-not-exist\n")
        with pytest.raises(RuntimeError, match="module-does-not-exist|Failed to load"):
            mic.start()
    finally:
        mic.close()
    assert not mic.workdir.exists()


# --- the audio helpers ---------------------------------------------------------------------


def test_speech_is_16k_mono_and_cached(assets):
    first = assets.speech("Cache me if you can.")
    mtime = first.stat().st_mtime_ns
    again = assets.speech("Cache me if you can.")
    assert again == first and again.stat().st_mtime_ns == mtime
    assert audio_assets.wav_rate(first) == RATE
    samples = assets.read_wav(first)
    assert samples.dtype == np.int16 and 0.5 * RATE < len(samples) < 5 * RATE
    assert np.abs(samples).max() > 3000  # actually spoken, not silence


def test_last_loud_sample_finds_the_end_of_the_sound(assets):
    tone_ms, pause_ms = 400, 600
    joined = assets.samples_of(assets.concat([assets.tone(300, tone_ms), assets.silence(pause_ms)]))
    end = tone_ms * RATE // 1000
    # within one 10 ms window of the true end (the fade-out lowers the last 5 ms)
    assert abs(assets.last_loud_sample(joined) - end) <= RATE // 100
    with pytest.raises(ValueError):
        assets.last_loud_sample(np.zeros(1000, np.int16))


def test_xcorr_align_finds_a_copy_inside_noise(assets):
    rng = np.random.default_rng(7)
    played = assets.samples_of(assets.click(100))
    recorded = (rng.normal(0, 200, 3 * RATE)).astype(np.int16)
    recorded[12345 : 12345 + len(played)] = played
    lag, correlation = assets.xcorr_align(recorded, played)
    assert lag == 12345 and correlation == pytest.approx(1.0)
    scaled = recorded.copy()
    scaled[12345 : 12345 + len(played)] = played // 2
    assert assets.xcorr_align(scaled, played)[1] > 0.99  # a quieter copy still matches
    other = assets.samples_of(assets.click(100, seed=2))
    assert assets.xcorr_align(recorded, other)[1] < 0.2
