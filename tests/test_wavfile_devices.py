"""Pure parts: stable device ids, recording names, exclusive 0600 writes, the 24 h sweep."""

from __future__ import annotations

import os
import stat
import time
import wave

import numpy as np
import pytest

from mcp_listen import wavfile
from mcp_listen.devices import build_ids
from mcp_listen.errors import StorageError


def test_ids_are_api_and_name_with_suffix_only_for_repeats():
    pairs = [("ALSA", "USB Mic"), ("ALSA", "USB Mic"), ("JACK", "USB Mic"), ("ALSA", "pulse"), ("ALSA", "USB Mic")]
    assert build_ids(pairs) == ["ALSA:USB Mic", "ALSA:USB Mic#2", "JACK:USB Mic", "ALSA:pulse", "ALSA:USB Mic#3"]


def test_ids_do_not_depend_on_other_devices():
    before = build_ids([("ALSA", "Built-in"), ("ALSA", "Headset")])
    after = build_ids([("ALSA", "Webcam"), ("ALSA", "Built-in"), ("ALSA", "Headset")])
    assert before == after[1:]


def test_recording_name_matches_the_sweep_pattern():
    name = wavfile.recording_name(1712345678901)
    assert name == "mcp-listen-1712345678901.wav"
    assert wavfile.NAME_PATTERN.match(name)
    for other in ("mcp-listen-abc.wav", "mcp-listen-1712345678901.wav.bak", "x-mcp-listen-1712345678901.wav"):
        assert not wavfile.NAME_PATTERN.match(other)


def test_write_is_complete_exclusive_and_private(tmp_path):
    samples = (np.arange(8000) % 200 - 100).astype(np.int16)
    first = wavfile.write_recording(tmp_path, samples, 16000)
    second = wavfile.write_recording(tmp_path, samples, 16000)
    assert first != second
    assert stat.S_IMODE(first.stat().st_mode) == 0o600
    assert first.stat().st_size == wavfile.wav_size(8000) == 16044
    with wave.open(str(first)) as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (16000, 1, 2)
        assert np.array_equal(np.frombuffer(wav.readframes(8000), "<i2"), samples)


def test_write_never_overwrites_an_existing_file(tmp_path, monkeypatch):
    monkeypatch.setattr(wavfile.time, "time", lambda: 1712345678.901)
    taken = tmp_path / wavfile.recording_name(1712345678901)
    taken.write_bytes(b"precious")
    path = wavfile.write_recording(tmp_path, np.zeros(10, np.int16), 16000)
    assert path.name == "mcp-listen-1712345678902.wav"
    assert taken.read_bytes() == b"precious"


def test_folder_that_is_a_file_is_refused(tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(StorageError, match="MCP_LISTEN_RECORDINGS_DIR"):
        wavfile.ensure_folder(target)
    with pytest.raises(StorageError, match="Cannot create the recordings folder"):
        wavfile.ensure_folder(target / "below")


def test_sweep_removes_only_old_regular_recordings(tmp_path):
    now = time.time()
    old = tmp_path / "mcp-listen-1000000000000.wav"
    fresh = tmp_path / "mcp-listen-1000000000001.wav"
    other = tmp_path / "notes-1000000000000.wav"
    lookalike = tmp_path / "mcp-listen-1000000000002.wav.keep"
    outside = tmp_path.parent / f"{tmp_path.name}-outside.wav"
    for path in (old, fresh, other, lookalike, outside):
        path.write_bytes(b"RIFF")
    link = tmp_path / "mcp-listen-1000000000003.wav"
    link.symlink_to(outside)
    day_ago = now - 25 * 3600
    for path in (old, other, lookalike, outside):
        os.utime(path, (day_ago, day_ago))
    os.utime(link, (day_ago, day_ago), follow_symlinks=False)
    assert wavfile.sweep(tmp_path, now=now) == 1
    assert not old.exists()
    assert fresh.exists() and other.exists() and lookalike.exists() and outside.exists() and link.is_symlink()
