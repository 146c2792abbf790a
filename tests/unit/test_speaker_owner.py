"""One speaker per user and sound server, and no speech while another server listens (audio/owner.py).

The two-process cases run real child processes (`python -c` holding speaker_owned or listening), since
the lock is a record lock of the process: two holds within one process never conflict. The planted
cases put a hard link, a symlink, a FIFO, a folder, another user's file or folder where the lock goes,
and check that nothing outside is ever written and that the rule holds or the warning says it does not.
"""

from __future__ import annotations

import getpass
import os
import select
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from mcp_listen.audio import owner
from mcp_listen.errors import Cancelled, DeviceBusy

NOBODY = 65534
CHILD = """
import sys
from pathlib import Path
from mcp_listen.audio import owner
folder = Path(sys.argv[1]) if sys.argv[1] else None
wait_s = float(sys.argv[3])
hold = owner.speaker_owned(folder) if sys.argv[2] == "speak" else owner.listening(folder, wait_s=wait_s)
try:
    with hold as warning:
        print("held", warning, flush=True)
        sys.stdin.readline()
except Exception as exc:
    print("refused", type(exc).__name__, exc, flush=True)
"""


@pytest.fixture
def private(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    return folder


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A temp folder and a runtime folder of this test's: (temp, runtime), XDG_RUNTIME_DIR unset."""
    temp, runtime = tmp_path / "tmp", tmp_path / "xdg"
    temp.mkdir(mode=0o1777)
    temp.chmod(0o1777)
    runtime.mkdir(mode=0o700)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("PULSE_SERVER", raising=False)
    return temp, runtime


def ours_in(temp: Path) -> Path:
    return temp / f"mcp-listen-{getpass.getuser()}"


def _read_line(child: subprocess.Popen, timeout: float = 30) -> str:
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], timeout)
    assert ready, f"the child said nothing in {timeout:g} s (a loaded machine, or it hangs)"
    return child.stdout.readline().strip()


@contextmanager
def child(folder: Path | None, role: str, wait_s: float = 60, **env: str) -> Iterator[tuple[subprocess.Popen, str]]:
    """A real second process holding (or refused) `role` in `folder` (a listener waits at most `wait_s` for
    a speech); it lets go when the block ends. Yields it and the line it said: "held <warning>" or "refused ..."."""
    environ = {**os.environ, **env}
    process = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(folder or ""), role, str(wait_s)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=environ,
    )
    try:
        yield process, _read_line(process)
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(30)


# ------------------------------------------------------------------------------------------- two processes


def test_a_second_server_is_refused_at_once_naming_the_speaker_and_speaks_once_it_let_go(private):
    with child(private, "speak") as (speaker, said):
        assert said == "held None"
        asked = time.monotonic()
        with pytest.raises(DeviceBusy, match=f"pid {speaker.pid}\\) is speaking") as refused:
            with owner.speaker_owned(private):
                pytest.fail("two speakers at once")
        assert time.monotonic() - asked < 5, "refused, not queued (5 s: a loaded machine's bound)"
        assert refused.value.code == "busy" and "Wait for it to finish" in refused.value.message
    with owner.speaker_owned(private) as warning:
        assert warning is None
    assert (private / owner.LOCK_NAME).stat().st_size == 0, "nothing is ever written to the lock file"


def test_speech_is_refused_while_another_server_listens_naming_it(private):
    with child(private, "listen") as (listener, said):
        assert said == "held None"
        with pytest.raises(DeviceBusy, match=f"pid {listener.pid}\\) is listening"):
            with owner.speaker_owned(private):
                pytest.fail("speech while another server records the user")
        with owner.listening(private, wait_s=0):  # two listeners share the sound server
            pass


def test_a_process_never_waits_on_its_own_hold_and_holds_off_others_meanwhile(private):
    """converse: listening, then speaking in the same process, then listening on after the speech."""
    with owner.listening(private, wait_s=0):
        with owner.speaker_owned(private) as warning:
            assert warning is None
            with child(private, "listen", wait_s=0.2) as (_, said):
                assert said.startswith(f"refused DeviceBusy Another mcp-listen (pid {os.getpid()}) is speaking"), said
        with child(private, "speak") as (_, said):
            assert said.startswith(f"refused DeviceBusy Another mcp-listen (pid {os.getpid()}) is listening"), said
    with child(private, "speak") as (_, said):
        assert said == "held None", said


def test_listening_waits_for_another_servers_speech_to_end_telling_why_then_records(private):
    notes: list[str] = []
    with child(private, "speak") as (speaker, said):
        assert said == "held None"
        threading.Timer(1.0, lambda: speaker.stdin.close() if speaker.stdin else None).start()
        started = time.monotonic()
        with owner.listening(private, waiting=notes.append, wait_s=60):
            waited = time.monotonic() - started
            assert speaker.wait(10) == 0  # its speech was over before this recorded
    assert waited >= 0.9, waited
    assert notes and all(f"pid {speaker.pid}" in note for note in notes), notes


def test_listening_gives_up_after_its_bound_with_busy_naming_the_speaker_and_a_cancel_ends_the_wait(private):
    with child(private, "speak") as (speaker, said):
        assert said == "held None"
        with pytest.raises(DeviceBusy, match=f"pid {speaker.pid}\\) is speaking .* for the 0.3 s this call waited"):
            with owner.listening(private, wait_s=0.3):
                pytest.fail("recorded while another server spoke")
        stop = threading.Event()
        threading.Timer(0.3, stop.set).start()
        with pytest.raises(Cancelled):
            with owner.listening(private, stop=stop, wait_s=60):
                pytest.fail("recorded while another server spoke")


def test_each_sound_server_is_its_own_rule_in_one_file(private, monkeypatch):
    monkeypatch.setenv("PULSE_SERVER", "unix:/one/native")
    with child(private, "speak", PULSE_SERVER="unix:/two/native") as (_, said):
        assert said == "held None"
        with owner.speaker_owned(private):  # another sound server plays elsewhere
            with child(private, "speak", PULSE_SERVER="unix:/one/native") as (_, refused):
                assert refused.startswith("refused DeviceBusy"), refused
    assert os.listdir(private) == [owner.LOCK_NAME]


# ------------------------------------------------------------------------------------------- where it lives


def test_the_runtime_folder_holds_the_lock_when_it_is_private(places, monkeypatch):
    _, runtime = places
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    assert owner.lock_path() == runtime / owner.LOCK_NAME
    with owner.speaker_owned() as warning:
        assert warning is None and (runtime / owner.LOCK_NAME).is_file()


@pytest.mark.parametrize("how", ["world-writable", "group-writable", "symlink", "a file"])
def test_a_runtime_folder_others_can_write_is_passed_over_for_our_private_temp_folder(places, monkeypatch, how):
    temp, runtime = places
    if how == "symlink":
        real = runtime.parent / "real-xdg"
        real.mkdir(mode=0o700)
        runtime.rmdir()
        runtime.symlink_to(real)
    elif how == "a file":
        runtime.rmdir()
        runtime.write_text("")
    else:
        runtime.chmod(0o777 if how == "world-writable" else 0o770)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    with owner.speaker_owned() as warning:
        assert warning is None
        with child(None, "speak", XDG_RUNTIME_DIR=str(runtime), TMPDIR=str(temp)) as (_, said):
            assert said.startswith("refused DeviceBusy"), said  # the rule holds, in the private folder
    ours = ours_in(temp)
    assert stat.S_IMODE(ours.stat().st_mode) == 0o700 and ours.stat().st_uid == os.getuid()
    assert os.listdir(ours) == [owner.LOCK_NAME] and os.listdir(temp) == [ours.name]
    if how == "symlink":
        assert os.listdir(runtime.parent / "real-xdg") == []
    elif how != "a file":
        assert os.listdir(runtime) == []


def test_without_a_runtime_folder_the_temp_folder_holds_one_private_entry_of_ours(places):
    temp, _ = places
    old = temp / f"mcp-listen-{os.getuid()}-speaker-0123456789ab.lock"
    old.write_text("4759")
    with owner.speaker_owned() as warning, owner.listening(wait_s=0):
        assert warning is None
    ours = ours_in(temp)
    assert os.listdir(temp) == [ours.name], "earlier versions' lock files are removed: one entry of ours"
    assert stat.S_IMODE(ours.stat().st_mode) == 0o700
    lock = ours / owner.LOCK_NAME
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600 and lock.stat().st_size == 0


def test_our_temp_folder_made_loose_by_hand_is_set_back_to_0700(places):
    temp, _ = places
    ours = ours_in(temp)
    ours.mkdir()
    ours.chmod(0o777)
    with owner.speaker_owned() as warning:
        assert warning is None
    assert stat.S_IMODE(ours.stat().st_mode) == 0o700


# ------------------------------------------------------------------------------------------- planted


def _outside(tmp_path: Path) -> tuple[Path, tuple[bytes, int]]:
    precious = tmp_path / "precious.txt"
    precious.write_bytes(b"x" * 1500)
    return precious, (precious.read_bytes(), precious.stat().st_mtime_ns)


def _untouched(precious: Path, before: tuple[bytes, int]) -> bool:
    return (precious.read_bytes(), precious.stat().st_mtime_ns) == before


def _plant_file(lock: Path, how: str, precious: Path) -> None:
    if how == "hard link":
        os.link(precious, lock)
    elif how == "symlink":
        lock.symlink_to(precious)
    elif how == "FIFO":
        os.mkfifo(lock, 0o600)
    elif how == "folder":
        lock.mkdir()
    else:
        if os.geteuid() != 0:
            pytest.skip("giving a file to another user needs root (CI runs as root)")
        lock.write_bytes(b"")
        os.chown(lock, NOBODY, NOBODY)


@pytest.mark.parametrize("how", ["hard link", "symlink", "FIFO", "folder", "another user's file"])
def test_a_planted_lock_file_is_never_written_and_the_speech_says_the_rule_is_off(private, tmp_path, how):
    precious, before = _outside(tmp_path)
    lock = private / owner.LOCK_NAME
    _plant_file(lock, how, precious)
    with owner.speaker_owned(private) as warning, owner.listening(private, wait_s=0) as heard:
        with child(private, "speak") as (_, said):
            assert said.startswith("held The one-speaker rule between mcp-listen servers is off"), said
    assert warning is not None and str(lock) in warning and "XDG_RUNTIME_DIR" in warning, warning
    assert heard == warning
    assert _untouched(precious, before), "a file outside was written"
    assert str(owner.problem(private)) == warning
    if how == "another user's file":
        assert lock.stat().st_uid == NOBODY and lock.stat().st_size == 0
    if how == "hard link":
        assert precious.read_bytes() == b"x" * 1500 and precious.stat().st_nlink == 2


@pytest.mark.parametrize("how", ["symlink", "another user's folder", "a file", "a FIFO"])
def test_a_planted_temp_folder_is_never_used_and_the_rule_is_reported(places, tmp_path, how):
    temp, _ = places
    ours = ours_in(temp)
    elsewhere = tmp_path / "attacker"
    elsewhere.mkdir(mode=0o777)
    elsewhere.chmod(0o777)
    if how == "symlink":
        ours.symlink_to(elsewhere, target_is_directory=True)
    elif how == "a file":
        ours.write_bytes(b"")
    elif how == "a FIFO":
        os.mkfifo(ours)
    else:
        if os.geteuid() != 0:
            pytest.skip("giving a folder to another user needs root (CI runs as root)")
        ours.mkdir()
        ours.chmod(0o777)
        os.chown(ours, NOBODY, NOBODY)
    with owner.speaker_owned() as warning:
        pass
    assert warning is not None and str(ours) in warning, warning
    assert owner.problem() is not None
    assert os.listdir(elsewhere) == []
    if how == "another user's folder":
        assert os.listdir(ours) == [] and stat.S_IMODE(ours.stat().st_mode) == 0o777


def test_nothing_planted_means_no_problem_for_doctor_and_nothing_made_by_asking(places):
    temp, _ = places
    assert owner.problem() is None and os.listdir(temp) == []


def test_doctor_says_where_the_lock_is_or_why_the_rule_is_off(places):
    from mcp_listen.cli.doctor_speak import check_one_speaker

    temp, _ = places
    fine = check_one_speaker()
    assert fine.status == "ok" and fine.data["path"] == str(ours_in(temp) / owner.LOCK_NAME), fine
    ours_in(temp).symlink_to(temp, target_is_directory=True)
    planted = check_one_speaker()
    assert planted.status == "warn" and "is a symbolic link" in planted.detail, planted
    assert planted.remedy is not None and "XDG_RUNTIME_DIR" in planted.remedy
