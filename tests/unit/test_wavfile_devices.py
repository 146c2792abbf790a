"""Pure parts: stable device ids, recording names, exclusive 0600 writes, the 24 h sweep."""

from __future__ import annotations

import os
import stat
import time
import wave

import numpy as np
import pytest

from mcp_listen.audio import recordings, wavfile
from mcp_listen.audio.devices import build_ids
from mcp_listen.errors import StorageError


def test_ids_are_api_and_name_with_suffix_only_for_repeats():
    pairs = [("ALSA", "USB Mic"), ("ALSA", "USB Mic"), ("JACK", "USB Mic"), ("ALSA", "pulse"), ("ALSA", "USB Mic")]
    assert build_ids(pairs) == ["ALSA:USB Mic", "ALSA:USB Mic#2", "JACK:USB Mic", "ALSA:pulse", "ALSA:USB Mic#3"]


def test_ids_do_not_depend_on_other_devices():
    before = build_ids([("ALSA", "Built-in"), ("ALSA", "Headset")])
    after = build_ids([("ALSA", "Webcam"), ("ALSA", "Built-in"), ("ALSA", "Headset")])
    assert before == after[1:]


def test_recording_name_matches_the_sweep_pattern():
    name = recordings.recording_name(1712345678901)
    assert name == "mcp-listen-1712345678901.wav"
    assert recordings.NAME_PATTERN.match(name)
    for other in ("mcp-listen-abc.wav", "mcp-listen-1712345678901.wav.bak", "x-mcp-listen-1712345678901.wav"):
        assert not recordings.NAME_PATTERN.match(other)


def write(folder, samples, **kw):
    with recordings.open_folder(folder, **kw) as held:
        return wavfile.write_recording(held, samples, 16000)


def test_write_is_complete_exclusive_and_private(tmp_path):
    samples = (np.arange(8000) % 200 - 100).astype(np.int16)
    first = write(tmp_path, samples)
    second = write(tmp_path, samples)
    assert first != second
    assert stat.S_IMODE(first.stat().st_mode) == 0o600
    assert first.stat().st_size == wavfile.wav_size(8000) == 16044
    with wave.open(str(first)) as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (16000, 1, 2)
        assert np.array_equal(np.frombuffer(wav.readframes(8000), "<i2"), samples)
    assert sorted(os.listdir(tmp_path)) == sorted([first.name, second.name]), "a temporary file was left"


def test_write_never_overwrites_an_existing_file(tmp_path, monkeypatch):
    monkeypatch.setattr(wavfile.time, "time", lambda: 1712345678.901)
    taken = tmp_path / recordings.recording_name(1712345678901)
    taken.write_bytes(b"precious")
    path = write(tmp_path, np.zeros(10, np.int16))
    assert path.name == "mcp-listen-1712345678902.wav"
    assert taken.read_bytes() == b"precious"


def test_a_thousand_planted_names_still_leave_a_free_name(tmp_path, monkeypatch):
    """Was: 1,000 names after the current millisecond made the capture fail after the user spoke."""
    monkeypatch.setattr(wavfile.time, "time", lambda: 1712345678.901)
    for n in range(1100):
        (tmp_path / recordings.recording_name(1712345678901 + n)).write_bytes(b"planted")
    path = write(tmp_path, np.zeros(10, np.int16))
    assert recordings.NAME_PATTERN.match(path.name) and path.stat().st_size == wavfile.wav_size(10)
    assert len(os.listdir(tmp_path)) == 1101


def test_a_planted_symlink_is_never_followed(tmp_path, monkeypatch):
    monkeypatch.setattr(wavfile.time, "time", lambda: 1712345678.901)
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"precious")
    folder = tmp_path / "rec"
    folder.mkdir(mode=0o700)
    (folder / recordings.recording_name(1712345678901)).symlink_to(outside)
    path = write(folder, np.zeros(10, np.int16))
    assert not path.is_symlink() and outside.read_bytes() == b"precious"


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o770, 0o722])
def test_a_folder_others_can_write_is_refused(tmp_path, mode):
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(folder, mode)
    with pytest.raises(StorageError, match="written by other users") as refused:
        recordings.open_folder(folder)
    assert f"chmod go-w {folder}" in str(refused.value) and f"{mode:04o}" in str(refused.value)
    assert stat.S_IMODE(folder.stat().st_mode) == mode, "a folder the user named is not changed behind their back"
    assert os.listdir(folder) == []


def test_our_default_folder_is_repaired_to_0700(tmp_path):
    folder = tmp_path / "mcp-listen-me"
    folder.mkdir()
    os.chmod(folder, 0o1777)
    write(folder, np.zeros(10, np.int16), ours=True)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_folders_are_created_0700_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        write(tmp_path / "a" / "b" / "rec", np.zeros(10, np.int16))
    finally:
        os.umask(old)
    for path in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "rec"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path


def test_a_folder_swapped_for_a_symlink_mid_recording_gets_nothing(tmp_path):
    """Was: the folder was checked before recording and the WAV written by path after it, so a
    symlink swapped in meanwhile put the recording at the symlink's target."""
    folder, target = tmp_path / "rec", tmp_path / "target"
    target.mkdir()
    with recordings.open_folder(folder) as held:  # checked before the recording ...
        folder.rename(tmp_path / "moved")  # ... swapped while the user speaks ...
        folder.symlink_to(target)
        with pytest.raises(StorageError, match="moved or replaced"):
            wavfile.write_recording(held, np.zeros(10, np.int16), 16000)  # ... written after it
    assert os.listdir(target) == [] and os.listdir(tmp_path / "moved") == []


def test_a_symlink_as_the_folder_is_refused(tmp_path):
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(StorageError, match="symbolic link"):
        recordings.open_folder(tmp_path / "link")


def test_folder_that_is_a_file_is_refused(tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(StorageError, match="MCP_LISTEN_RECORDINGS_DIR"):
        recordings.open_folder(target)
    with pytest.raises(StorageError, match="Cannot create the recordings folder"):
        recordings.open_folder(target / "below")


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
    assert recordings.sweep(tmp_path, now=now) == 1
    assert not old.exists()
    assert fresh.exists() and other.exists() and lookalike.exists() and outside.exists() and link.is_symlink()


def test_the_start_sweep_removes_abandoned_partials_at_once_but_not_one_being_written(tmp_path):
    """A writer killed mid-write leaves only a hidden partial; the next start removes it at once,
    while a partial a live writer holds (flock) stays."""
    import fcntl

    now = time.time()
    abandoned = tmp_path / ".mcp-listen-1712345678901-0123abcd.partial"
    abandoned.write_bytes(b"RIFF")
    busy = tmp_path / ".mcp-listen-1712345678901-89abcdef.partial"
    busy.write_bytes(b"RIFF")
    short = tmp_path / "mcp-listen-1712345678902.wav"  # what older versions left: a header only
    short.write_bytes(b"R" * 44)
    minute_ago = now - 120
    os.utime(short, (minute_ago, minute_ago))
    with open(busy, "rb") as writer:
        fcntl.flock(writer, fcntl.LOCK_EX)
        assert recordings.sweep(tmp_path, now=now) == 2
        assert busy.exists()
    assert not abandoned.exists() and not short.exists()
    assert recordings.sweep(tmp_path, now=now) == 1
