"""One speaker owner per user and sound server (audio/owner.py): the flock on a real file in
tmp_path; two opens of it conflict within one process as they would between two."""

from __future__ import annotations

import os

import pytest

from mcp_listen.audio import owner
from mcp_listen.errors import DeviceBusy


def test_a_second_owner_is_refused_at_once_naming_the_first_and_may_speak_once_it_let_go(tmp_path):
    path = tmp_path / "speaker.lock"
    with owner.speaker_owned(path):
        with pytest.raises(DeviceBusy, match=f"pid {os.getpid()}") as refused:
            with owner.speaker_owned(path):
                pytest.fail("two owners at once")
        assert refused.value.code == "busy" and "Wait for it to finish" in refused.value.message
    with owner.speaker_owned(path):
        pass


def test_a_planted_symlink_is_never_followed_and_its_target_untouched(tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    path = tmp_path / "speaker.lock"
    path.symlink_to(target)
    with owner.speaker_owned(path):  # no lock (and a warning), but the speech goes on
        with owner.speaker_owned(path):
            pass
    assert target.read_text() == "keep me" and path.is_symlink()


def test_a_folder_at_the_lock_name_leaves_speech_without_the_rule(tmp_path):
    path = tmp_path / "speaker.lock"
    path.mkdir()
    with owner.speaker_owned(path):
        pass
    assert path.is_dir()


def test_each_sound_server_has_its_own_lock_and_the_runtime_folder_holds_it(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("PULSE_SERVER", "unix:/one/native")
    first = owner.lock_path()
    monkeypatch.setenv("PULSE_SERVER", "unix:/two/native")
    second = owner.lock_path()
    assert first.parent == tmp_path and first != second
    monkeypatch.setenv("PULSE_SERVER", "unix:/one/native")
    assert owner.lock_path() == first
