"""Shared pytest fixtures: real peers for the tests (see DESIGN.md, "Tests talk to real peers").

Helper modules live beside this file and are imported by their plain names (``import vmic``,
``import audio_assets``): pytest puts this directory on sys.path when it loads conftest.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import pytest

import audio_assets

if TYPE_CHECKING:
    from fake_ollama import FakeOllama
from vmic import INSTALL_HINT, VirtualMic, missing_tools, refresh_portaudio

# =============================================================================================
# Virtual microphone + test audio  (tests/vmic.py, tests/audio_assets.py)
# =============================================================================================


@pytest.fixture(scope="session")
def vmic() -> Iterator[VirtualMic]:
    """One private PulseAudio virtual microphone for the whole session.

    It becomes PortAudio's default input both in child processes (pass ``vmic.child_env()``,
    or rely on inheritance: the variables are also exported into this process's os.environ for
    the session and restored afterwards) and in this process (sounddevice is re-initialised).
    Tests that ``vmic.stop()`` it must ``vmic.start()`` it again before they finish.

    Missing packages FAIL the test (CI always has them): nothing is skipped silently.
    """
    missing = missing_tools()
    if missing:
        names = ", ".join(missing)
        pytest.fail(f"virtual microphone unavailable, missing: {names}. {INSTALL_HINT}")
    mic = VirtualMic()
    try:
        mic.start()
        with pytest.MonkeyPatch.context() as patch:
            for name, value in mic.env.items():
                patch.setenv(name, value)
            refresh_portaudio()
            yield mic
        mic.stop()
        refresh_portaudio()  # back to the original ALSA configuration for later sessions' code
    finally:
        mic.close()


@pytest.fixture(autouse=True)
def _vmic_alive(request: pytest.FixtureRequest) -> None:
    """A test that uses the virtual microphone starts with its daemon running.

    If the session's daemon died since the last test, it is restarted with a warning that
    carries its log, so one lost daemon fails (at most) the test that lost it, not every
    later one. Tests that stop it on purpose start it again themselves.
    """
    if "vmic" not in request.fixturenames:
        return
    mic = request.getfixturevalue("vmic")
    if not mic.running:
        warnings.warn(f"the virtual microphone's daemon had died; restarting it. {mic.log_tail()}", stacklevel=1)
        mic.restart()
        refresh_portaudio()


@pytest.fixture(scope="session")
def assets():
    """The test-audio helpers (module ``audio_assets``): ``speech``, ``tone``, ``silence``,
    ``click``, ``concat``, ``read_wav``, ``write_wav``, ``last_loud_sample``, ``xcorr_align``.
    Files are generated once and cached in tests/assets/audio/ (git-ignored)."""
    return audio_assets


# =============================================================================================
# Real whisper model and a real loopback Ollama (tests/fake_ollama.py)
# =============================================================================================

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def model_path() -> Path:
    """A real tiny.en whisper.cpp model: MCP_LISTEN_TEST_MODEL (CI sets it), else made once."""
    configured = os.environ.get("MCP_LISTEN_TEST_MODEL")
    for candidate in filter(None, [configured, "/work/assets/ggml-tiny.en.bin"]):
        if Path(candidate).is_file():
            return Path(candidate)
    target = REPO / "tests" / "assets" / "ggml-tiny.en.bin"
    tool = SHARED / "tools" / "whisper-test-model"
    if not target.is_file():
        if not tool.is_file():
            pytest.fail(f"No test model: set MCP_LISTEN_TEST_MODEL or provide {tool}")
        subprocess.run([sys.executable, str(tool), str(target)], check=True, stdout=subprocess.DEVNULL)
    return target



@pytest.fixture(scope="session")
def base_model_path() -> Path:
    """A real multilingual whisper base model (99 languages): MCP_LISTEN_TEST_BASE_MODEL."""
    configured = os.environ.get("MCP_LISTEN_TEST_BASE_MODEL")
    if not configured or not Path(configured).is_file():
        pytest.fail("No multilingual test model: set MCP_LISTEN_TEST_BASE_MODEL")
    return Path(configured)


@pytest.fixture
def ollama() -> Iterator["FakeOllama"]:
    """A real HTTP server on loopback speaking Ollama's API; set `.mode` to inject a failure."""
    from fake_ollama import FakeOllama

    with FakeOllama() as server:
        yield server
