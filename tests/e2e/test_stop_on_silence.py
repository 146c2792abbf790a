"""capture_audio with stop_on_silence, through the real server and the virtual microphone.

Latencies are measured on the captured audio (samples), never on the wall clock,
so a loaded machine does not change them.
"""

from __future__ import annotations

import audio_assets as A
import numpy as np
import pytest
from rpc import server_env
from speech_checks import capture_while_playing, without_trailing_silence

pytestmark = pytest.mark.anyio
RATE = 16000


@pytest.fixture
def env(vmic, tmp_path):
    return server_env(vmic.env, MCP_LISTEN_RECORDINGS_DIR=str(tmp_path / "rec"))


def speech_end_in_recording(recording: np.ndarray, speech: np.ndarray) -> int:
    """Sample index in `recording` just after the last loud sample of `speech`."""
    lag, peak = A.xcorr_align(recording, speech)
    assert peak > 0.999, f"the speech was not captured intact (correlation {peak:.4f})"
    assert np.array_equal(recording[lag : lag + len(speech)], speech), "samples were altered"
    return lag + A.last_loud_sample(speech) + 1


@pytest.mark.parametrize("silence_ms", [500, 1000])
async def test_stops_after_silence_ms_and_keeps_a_shorter_pause(env, vmic, silence_ms):
    first = without_trailing_silence(A.speech("the quick brown fox jumps over the lazy dog"))
    second = A.speech("and then it ran away")  # starts speaking on its first samples
    pause = silence_ms - 300  # shorter than silence_ms: must not end the recording
    clip = A.concat([A.silence(300), first, A.silence(pause), second, A.silence(silence_ms + 2500)])
    data = await capture_while_playing(
        env, vmic, clip, {"stop_on_silence": True, "silence_ms": silence_ms, "duration_ms": 20000}
    )
    assert data["stopped_by"] == "silence" and data["speech_detected"] is True
    recording = A.read_wav(data["path"])
    assert data["duration_ms"] == len(recording) * 1000 // RATE
    assert data["size_bytes"] == 44 + 2 * len(recording)
    speech_end = speech_end_in_recording(recording, A.read_wav(second))
    after_ms = (len(recording) - speech_end) * 1000 / RATE
    assert silence_ms <= after_ms <= silence_ms + 150, f"stopped {after_ms:.0f} ms after the speech ended"


@pytest.mark.parametrize("noise_dbfs", [-60, -45, -35])  # Silero is skipped at the floor of the first two
async def test_stop_timing_is_the_same_over_a_rooms_noise_floor(env, vmic, noise_dbfs):
    speech = without_trailing_silence(A.speech("the quick brown fox jumps over the lazy dog"))
    lead = 1500 * RATE // 1000
    clean = A.concat([A.silence(1500), speech, A.silence(700), A.speech("and then it ran away"), A.silence(3500)])
    clip = A.with_noise(clean, noise_dbfs)
    data = await capture_while_playing(
        env, vmic, clip, {"stop_on_silence": True, "silence_ms": 1000, "duration_ms": 20000}
    )
    assert data["stopped_by"] == "silence" and data["speech_detected"] is True
    recording = A.read_wav(data["path"])
    played = A.read_wav(clip)
    lag, peak = A.xcorr_align(recording, played[lead : lead + len(speech)])
    assert peak > 0.999
    second_start = len(speech) + 700 * RATE // 1000  # in clip samples after the lead
    second = A.read_wav(A.speech("and then it ran away"))
    speech_end = lag + second_start + A.last_loud_sample(second) + 1
    after_ms = (len(recording) - speech_end) * 1000 / RATE
    assert 1000 <= after_ms <= 1150, f"stopped {after_ms:.0f} ms after the speech ended"


async def test_continuous_speech_ends_at_the_ceiling(env, vmic):
    long_speech = A.speech(
        "this sentence keeps going for quite a while so that it lasts longer than the two second ceiling"
    )
    data = await capture_while_playing(env, vmic, long_speech, {"stop_on_silence": True, "duration_ms": 2000})
    assert data["stopped_by"] == "ceiling" and data["speech_detected"] is True
    assert data["duration_ms"] == 2000 and data["size_bytes"] == 64044


async def test_silence_only_times_out_without_speech(env, vmic):
    data = await capture_while_playing(env, vmic, None, {"stop_on_silence": True, "duration_ms": 30000})
    assert data["stopped_by"] == "no_speech_timeout" and data["speech_detected"] is False
    assert 10000 <= data["duration_ms"] <= 10100
    assert len(A.read_wav(data["path"])) == data["duration_ms"] * RATE // 1000


async def test_a_click_is_not_speech(env, vmic):
    clip = A.concat([A.silence(500), A.click(150), A.silence(500), A.click(150)])
    data = await capture_while_playing(env, vmic, clip, {"stop_on_silence": True, "duration_ms": 30000})
    assert data["stopped_by"] == "no_speech_timeout" and data["speech_detected"] is False
    recording = A.read_wav(data["path"])
    assert np.abs(recording.astype(np.int32)).max() > 10000, "the clicks must have been captured"


async def test_no_speech_before_a_short_ceiling_reports_ceiling(env, vmic):
    data = await capture_while_playing(env, vmic, None, {"stop_on_silence": True, "duration_ms": 1500})
    assert data["stopped_by"] == "ceiling" and data["speech_detected"] is False
    assert data["duration_ms"] == 1500
