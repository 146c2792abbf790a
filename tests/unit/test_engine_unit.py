"""pipeline.Engine in memory: every collaborator a fake behind its protocol (engine_parts.py).

The microphone is the real Recorder (its claim) with `open` replaced by scripted numpy
windows, the VAD calls a window speech when it is loud, whisper and Ollama are fakes that
record what they were asked. No sound card, no model, no daemon: the engine's own loop,
claim, results and error shapes are what is tested.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mcp_listen.audio.devices import InputDevice
from mcp_listen.audio.microphone import Recorder
from mcp_listen.config import Settings
from mcp_listen.contract.arguments import CaptureArgs, TranscribeArgs, VoiceQueryArgs
from mcp_listen.contract.limits import WINDOW_SAMPLES as WINDOW
from mcp_listen.contract.results import (
    DIGITAL_SILENCE_PROGRESS,
    DIGITAL_SILENCE_WARNING,
    Answered,
    Captured,
    Transcribed,
    wire,
)
from mcp_listen.engine.engine import Engine
from mcp_listen.errors import DeviceBusy, LLMError

LOUD, QUIET, DEAD = 3000, 2, 0
"""A loud window, a quiet room (a real one is never exactly 0), a dead microphone (only zeros)."""
MIC = InputDevice(7, "Scripted Mic", "test:scripted", 1, 16000.0, True)


class LoudnessVAD:
    """Speech exactly where the window is loud."""

    def reset(self) -> None:
        pass

    def hear(self, window: Any, run: bool = True) -> tuple[float, float]:
        loud = int(np.abs(window).max()) >= LOUD
        return (0.95, -20.0) if loud else (0.02, -70.0)


class ScriptedMic:
    def __init__(self, device: Any, windows: list[np.ndarray], on_first: Any, pace_s: float = 0.0) -> None:
        self.device, self._windows, self._on_first, self._pace_s = device, windows, on_first, pace_s
        self.pulled = 0

    def __iter__(self):
        for window in self._windows:
            if self.pulled == 0 and self._on_first:
                self._on_first()
            self.pulled += 1
            time.sleep(self._pace_s)
            yield window
        raise AssertionError("the engine pulled more windows than the script has")


class ScriptedRecorder(Recorder):
    """The real claim; `open` yields scripted windows from the device the engine resolves."""

    def __init__(self, *runs: tuple[int, int], on_first: Any = None, pace_s: float = 0.0) -> None:
        super().__init__()
        self.windows = [np.full(WINDOW, level, dtype=np.int16) for level, count in runs for _ in range(count)]
        self.on_first, self.mics, self.log, self.pace_s = on_first, [], [], pace_s
        """pace_s: a pause before each window, so a guess worked out on another thread is in before the script
        runs out (the microphone's 32 ms, shortened)."""

    @contextmanager
    def open(
        self, find_device: Any = None, *, device_index: Any = None, stop: Any = None, beside_speaker: bool = False
    ):
        self.log.append(("open", self.active.tool, self.active.device))
        mic = ScriptedMic(find_device(), self.windows, self.on_first, self.pace_s)
        self.mics.append(mic)
        yield mic
        self.log.append(("closed", self.active.device))


@dataclass
class Words:
    text: str
    language: str


class FakeWhisper:
    loaded_path = None

    def __init__(self, text: str = " What time is it?") -> None:
        self.text, self.heard, self.preloaded = text, [], []

    def resolve(self, name: str | None) -> Path:
        return Path("/models") / (name or "ggml-fake.bin")

    def check_language(self, model_path: Path, language: str, translate: bool) -> None:
        pass

    def open_session(self, model_path: Path, *, translate: bool, cancel: Any, vocabulary: str = "") -> FakeSession:
        return FakeSession(self, model_path)


@dataclass
class FakeSession:
    """One utterance's whisper: records into its FakeWhisper what the engine's phrases asked."""

    whisper: FakeWhisper
    model_path: Path

    def preload(self) -> None:
        self.whisper.preloaded.append(self.model_path)

    def transcribe(self, samples, prompt, language, abort=None) -> tuple[str, str]:
        self.whisper.heard.append(len(samples))
        return self.whisper.text, language

    def detect(self, samples, abort=None) -> tuple[str, float]:
        return "en", 1.0


class FakeLLM:
    def __init__(self, reply: str | BaseException = "Noon.") -> None:
        self.reply, self.asked, self.log = reply, [], None

    def preflight(self, model: str) -> None:
        self.log.append(("preflight", model))

    def ask(self, text: str, model: str, prompt: str, cancel: Any) -> str:
        self.asked.append((text, model, prompt))
        if isinstance(self.reply, BaseException):
            raise self.reply
        return self.reply


class OneDevice:
    def list_inputs(self, *, rescan: bool = False) -> list[InputDevice]:
        return [MIC]

    def resolve(self, device: Any, *, rescan: bool = False) -> InputDevice:
        return MIC


def engine(recorder: ScriptedRecorder, tmp_path: Path, whisper: Any = None, llm: Any = None) -> Engine:
    llm = llm or FakeLLM()
    llm.log = recorder.log
    settings = Settings(recordings_dir=tmp_path / "recordings")
    return Engine(
        settings, recorder=recorder, whisper=whisper or FakeWhisper(), llm=llm, vad=LoudnessVAD(), devices=OneDevice()
    )


@pytest.mark.parametrize(
    ("said", "transcription", "asked"),
    [(" What time is it? Over.", "What time is it?", True), (" Over.", None, False)],
)
def test_an_end_word_ends_the_turn_and_leaves_the_transcription_and_the_question(tmp_path, said, transcription, asked):
    """The end word ends the turn at once (end_reason end_word) and is taken out of what is returned and asked;
    said alone, there is nothing to ask: the no-words outcome, and Ollama is not called."""
    recorder = ScriptedRecorder((QUIET, 10), (LOUD, 40), (QUIET, 200), pace_s=0.01)
    whisper, llm = FakeWhisper(said), FakeLLM()
    args = VoiceQueryArgs(end_words=["over"], silence_ms=3000)
    answered = engine(recorder, tmp_path, whisper, llm).voice_query(args)
    question = answered.question
    assert (question.text or None, question.end_reason) == (transcription, "end_word"), question
    assert llm.asked == ([("What time is it?", "llama3.2", "You are a helpful assistant.")] if asked else [])
    assert wire(answered)["transcription"] == transcription


def test_voice_query_listens_until_the_pause_then_asks(tmp_path):
    recorder = ScriptedRecorder((QUIET, 10), (LOUD, 40), (QUIET, 200))
    whisper, llm = FakeWhisper(), FakeLLM()
    # end_of_turn "silence": the pause this script times is silence_ms (smart's own are tests/unit/test_listening_unit.py)
    answered = engine(recorder, tmp_path, whisper, llm).voice_query(VoiceQueryArgs(end_of_turn="silence"))
    assert isinstance(answered, Answered)
    assert answered.question.text == "What time is it?" and answered.response == "Noon."
    assert answered.question.stopped_by == "silence" and answered.question.speech_detected is True
    assert llm.asked == [("What time is it?", "llama3.2", "You are a helpful assistant.")]
    # preflight under the claim and before the microphone opened; the claim named the device; released after
    assert recorder.log == [("preflight", "llama3.2"), ("open", "voice_query", None), ("closed", "Scripted Mic")]
    assert recorder.active is None
    pulled = recorder.mics[0].pulled
    assert 50 + 25 <= pulled <= 50 + 40  # about 1 s of silence after the speech, not the whole script
    assert answered.question.duration_ms == pulled * WINDOW * 1000 // 16000
    assert whisper.preloaded == [Path("/models/ggml-fake.bin")]


def test_nobody_speaks_no_words_and_whisper_never_runs(tmp_path):
    recorder = ScriptedRecorder((QUIET, 400))
    whisper = FakeWhisper()
    heard = engine(recorder, tmp_path, whisper).transcribe_voice(TranscribeArgs())
    assert heard == Transcribed(None, 10_016, "en", False, "no_speech_timeout")  # 313 windows: the first past 10 s
    assert whisper.heard == [] and whisper.preloaded == []


def test_a_microphone_that_delivers_only_zeros_is_named_at_once_and_in_the_result(tmp_path):
    messages: list[str] = []
    heard = engine(ScriptedRecorder((DEAD, 400)), tmp_path).transcribe_voice(
        TranscribeArgs(), progress=lambda done, total, message: messages.append(message)
    )
    assert heard.warning == DIGITAL_SILENCE_WARNING and heard.text is None
    assert messages.count(DIGITAL_SILENCE_PROGRESS) == 1
    assert messages.index(DIGITAL_SILENCE_PROGRESS) < 3  # after the first second, before more ticks
    assert wire(heard)["warning"] == DIGITAL_SILENCE_WARNING and wire(heard)["speech_detected"] is False
    captured = engine(ScriptedRecorder((DEAD, 40)), tmp_path).capture(CaptureArgs(duration_ms=1200))
    assert wire(captured)["warning"] == DIGITAL_SILENCE_WARNING


def test_zeros_before_the_first_sound_are_no_dead_microphone(tmp_path):
    """A device that starts with zeros (a virtual one before anything plays) and then delivers sound
    is working: no warning; nor for a recording shorter than the second that could tell."""
    late = engine(ScriptedRecorder((DEAD, 60), (QUIET, 400)), tmp_path).transcribe_voice(TranscribeArgs())
    assert late.warning is None and "warning" not in wire(late)
    short = engine(ScriptedRecorder((DEAD, 40)), tmp_path).capture(CaptureArgs(duration_ms=900))
    assert short.warning is None and "warning" not in wire(short)


def test_fixed_length_capture_keeps_exactly_the_asked_samples(tmp_path):
    recorder = ScriptedRecorder((LOUD, 100))
    captured = engine(recorder, tmp_path).capture(CaptureArgs(duration_ms=1000))  # 16000 = 31.25 windows
    assert isinstance(captured, Captured)
    assert (captured.duration_ms, captured.stopped_by, captured.speech_detected) == (1000, None, None)
    assert recorder.mics[0].pulled == 32
    assert captured.size_bytes == 44 + 32000 == Path(captured.path).stat().st_size
    assert Path(captured.path).parent == tmp_path / "recordings"


def test_a_second_call_while_recording_is_busy(tmp_path):
    outcomes = []
    recorder = ScriptedRecorder((QUIET, 40))
    the_engine = engine(recorder, tmp_path)

    def second_call() -> None:
        with pytest.raises(DeviceBusy) as busy:
            the_engine.transcribe_voice(TranscribeArgs())
        outcomes.append(busy.value.code)

    recorder.on_first = second_call
    the_engine.capture(CaptureArgs(duration_ms=1000))
    assert outcomes == ["busy"] and recorder.active is None


def test_an_llm_failure_keeps_the_transcription(tmp_path):
    recorder = ScriptedRecorder((LOUD, 30), (QUIET, 100))
    llm = FakeLLM(LLMError("Ollama is not running.", code="ollama_unreachable"))
    with pytest.raises(LLMError) as failed:
        engine(recorder, tmp_path, llm=llm).voice_query(VoiceQueryArgs(model="qwen"))
    assert failed.value.extra == {
        "transcription": "What time is it?",
        "response": None,
        "model": "qwen",
        "message": "Ollama is not running.",
    }
    assert recorder.active is None


class _Transcriber:
    """A transcriber that holds one model, by name, and records the loads and runs asked of it."""

    def __init__(self, holds: Path | None) -> None:
        self.holds, self.loads, self.keys = holds, [], []

    @property
    def key(self) -> tuple[int, int, int, int] | None:
        return (1, 2, 3, 4) if self.holds is not None else None

    def resident(self, path: Path) -> bool:
        return path == self.holds

    def load(self, path: Path) -> None:
        self.loads.append(path)
        self.holds = path

    def hear(self, audio: Any, *, path: Path, key: Any = None, **options: Any) -> Words:
        self.keys.append(key)
        if key is None or key != self.key:  # as Transcriber does: no key, or another file resident
            self.load(path)
        return Words("Hello.", "en")


@pytest.mark.parametrize("resident", [True, False], ids=["resident", "not loaded"])
def test_whisper_is_preloaded_only_when_the_model_is_not_resident(tmp_path, resident):
    from mcp_listen.whisper.session import Session

    model = tmp_path / "ggml-tiny.en.bin"
    transcriber = _Transcriber(model if resident else None)
    session = Session(transcriber, model, translate=False, cancel=None)  # type: ignore[arg-type]
    session.preload()
    deadline = time.monotonic() + 2
    while not transcriber.loads and time.monotonic() < deadline and not resident:
        time.sleep(0.01)
    time.sleep(0.1)  # a preload thread started by mistake would have loaded by now
    assert transcriber.loads == ([] if resident else [model])


def test_a_session_admits_the_model_once_for_all_its_phrases(tmp_path):
    """Later phrases pass the key of the file admitted first: the transcriber does not open it again."""
    from mcp_listen.whisper.session import Session

    model = tmp_path / "ggml-tiny.en.bin"
    transcriber = _Transcriber(None)
    session = Session(transcriber, model, translate=False, cancel=None)  # type: ignore[arg-type]
    silence = np.zeros(16000, dtype=np.int16)
    for _ in range(3):
        assert session.transcribe(silence, "", "en") == ("Hello.", "en")
    assert transcriber.loads == [model] and transcriber.keys == [None, (1, 2, 3, 4), (1, 2, 3, 4)]


def test_the_ollama_client_is_warmed_once_per_process(monkeypatch):
    from fake_ollama import FakeOllama

    from mcp_listen.engine.parts import Ollama
    from mcp_listen.ollama import client as llm

    warmed = []
    monkeypatch.setattr(llm, "warm_up", lambda: warmed.append(1))
    with FakeOllama() as fake:
        part = Ollama(Settings(ollama_host=fake.url))
        for _ in range(3):
            part.preflight("llama3.2")
    deadline = time.monotonic() + 2
    while not warmed and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)  # a second warm-up thread would have run by now
    assert warmed == [1]
