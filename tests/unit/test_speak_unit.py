"""speak_text without a speaker: its arguments, the first-piece cut, when it is listed, its wire shape,
and the engine's composition against fake parts (the device claim, wait: false, a cancel)."""

from __future__ import annotations

import importlib.util
import threading
import time
from typing import Any

import pytest
from rpc import ALL_TOOLS, LISTENING_TOOLS
from timing import near

from mcp_listen.config import Settings, load_settings
from mcp_listen.contract import arguments, results
from mcp_listen.contract.limits import DEFAULT_VOICE, MAX_SPEAK_CHARS, MAX_WORD_CHARS, Defaults
from mcp_listen.contract.results import Spoken, Status, wire
from mcp_listen.errors import DeviceBusy, InvalidArgument
from mcp_listen.voice.pieces import MAX_FIRST_WORDS, first_piece, pieces


def parse(**raw: Any) -> arguments.SpeakArgs:
    return arguments.parse_args(arguments.SpeakArgs, raw)


# ---------------------------------------------------------------- arguments


def test_the_text_alone_is_enough_and_the_rest_defaults():
    args = parse(text="Hello.")
    assert (args.text, args.voice, args.speed, args.device, args.wait) == ("Hello.", None, None, None, None)


LONG_WORD_TEXT = ("x" * MAX_WORD_CHARS + " ") * (MAX_SPEAK_CHARS // (MAX_WORD_CHARS + 1))


@pytest.mark.parametrize(
    "text",
    [
        "line one\nline two",
        "a\ttab",
        LONG_WORD_TEXT,
        "café, naïve — ok",
        "你好，世界。",
        "https://example.org/a-b?c=d",
        "שלום עולם",  # right to left
        "Great job \U0001f600",  # emoji beside words: the words are said
        "**Note:** see <b>this</b>",  # markup: taken out before Piper (voice/readable.py)
    ],
)
def test_texts_that_are_accepted(text):
    assert parse(text=text).text == text


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n\t ",
        "x" * (MAX_SPEAK_CHARS + 1),
        "bell\x07",
        "esc \x1b[31m red",
        "carriage\rreturn",
        "nul\x00",
        "c1\x85",
        "x" * MAX_SPEAK_CHARS,
        "a word " + "é" * (MAX_WORD_CHARS + 1) + " in the middle",
        "x" * 1_000_000,  # 1 MB: refused at once, never synthesised for minutes
        "Ok. " * 20_000,  # 20,000 one-word sentences
        "\U0001f600\U0001f680\u2764\ufe0f",  # emoji only
        "?!... --- ;;",  # punctuation only
        "half a pair \ud800 here",  # a lone surrogate (JSON's \\ud800)
        "\udfff",
    ],
)
def test_texts_that_are_refused_name_the_argument(text):
    with pytest.raises(InvalidArgument, match=r"Invalid text: expected the text to say: 1 to 10000 characters"):
        parse(text=text)


@pytest.mark.parametrize("text", [None, 5, ["a"], {"t": "a"}])
def test_a_text_that_is_not_a_string_is_refused(text):
    with pytest.raises(InvalidArgument, match="Invalid text"):
        arguments.parse_args(arguments.SpeakArgs, {"text": text})


def test_text_is_required():
    with pytest.raises(InvalidArgument, match="Invalid text"):
        arguments.parse_args(arguments.SpeakArgs, {})


@pytest.mark.parametrize("speed", [0.5, 1, 1.25, 2, 2.0])
def test_speeds_in_range(speed):
    assert parse(text="a", speed=speed).speed == speed


@pytest.mark.parametrize("speed", [0.49, 2.01, 0, -1, True, "1", float("nan"), float("inf")])
def test_speeds_out_of_range(speed):
    with pytest.raises(InvalidArgument, match=r"Invalid speed: expected a number from 0.5 to 2"):
        parse(text="a", speed=speed)


@pytest.mark.parametrize("voice", ["en_US-lessac-medium", "x.onnx", "/abs/path/v.onnx"])
def test_voices_accepted(voice):
    assert parse(text="a", voice=voice).voice == voice


def test_an_empty_voice_means_the_default_and_a_control_character_is_refused():
    assert parse(text="a", voice="").voice is None
    with pytest.raises(InvalidArgument, match="Invalid voice"):
        parse(text="a", voice="en_US\nx")
    with pytest.raises(InvalidArgument, match="Invalid voice"):
        parse(text="a", voice="v" * 1025)


@pytest.mark.parametrize("wait", ["yes", 1, 0])
def test_wait_is_a_boolean(wait):
    with pytest.raises(InvalidArgument, match="Invalid wait: expected a boolean"):
        parse(text="a", wait=wait)


def test_devices_as_for_recording():
    assert parse(text="a", device=3).device == 3
    assert parse(text="a", device="ALSA:default").device == "ALSA:default"
    with pytest.raises(InvalidArgument, match="Invalid device"):
        parse(text="a", device=-1)


def test_an_unknown_argument_is_refused_naming_the_accepted_ones():
    with pytest.raises(
        InvalidArgument, match="Unknown argument 'volume'. Accepted arguments: text, voice, speed, device, wait."
    ):
        parse(text="a", volume=2)


def test_the_schema_is_closed_and_states_the_default_voice():
    schema = arguments.input_schema(arguments.SpeakArgs, load_settings({"MCP_LISTEN_VOICE": "en_GB-alan-low"}).defaults)
    assert schema["additionalProperties"] is False and schema["required"] == ["text"]
    assert schema["properties"]["voice"]["default"] == "en_GB-alan-low"
    assert "en_GB-alan-low" in schema["properties"]["voice"]["description"]
    assert schema["properties"]["text"]["maxLength"] == MAX_SPEAK_CHARS


def test_the_default_voice_setting():
    assert load_settings({}).defaults.voice == DEFAULT_VOICE == "en_US-lessac-medium"
    assert load_settings({"MCP_LISTEN_VOICE": "en_US-joe-medium"}).defaults.voice == "en_US-joe-medium"
    bad = load_settings({"MCP_LISTEN_VOICE": "a\x1bb"})
    assert bad.defaults.voice == DEFAULT_VOICE and any("MCP_LISTEN_VOICE" in p for p in bad.problems)


# ---------------------------------------------------------------- the first piece


@pytest.mark.parametrize(
    "text, first, rest",
    [
        ("The quick brown fox jumps over the lazy dog.", "The quick brown", "fox jumps over the lazy dog."),
        ("Hello, world. How are you?", "Hello,", "world. How are you?"),
        ("Yes; no: maybe", "Yes;", "no: maybe"),
        ("One two three.", "One two three.", ""),
        ("Stop! Then go on and on and on.", "Stop!", "Then go on and on and on."),
        ('He said "no," and left the room at once', 'He said "no,"', "and left the room at once"),
        ("  spaced   out   words  ", "spaced   out   words", ""),
        ("one two three four", "one two three", "four"),
        ("a 1,000 b 3.5 c d e f", "a 1,000 b", "3.5 c d e f"),
        ("first\nsecond, third", "first\nsecond,", "third"),
    ],
)
def test_the_first_piece_ends_at_the_first_clause_or_after_three_words(text, first, rest):
    assert first_piece(text) == (first, rest)


def test_the_first_piece_never_has_more_than_three_words_and_nothing_is_lost():
    text = " ".join(f"w{i}" for i in range(30)) + "."
    head, tail = first_piece(text)
    assert len(head.split()) == MAX_FIRST_WORDS
    assert f"{head} {tail}".split() == text.split()
    assert pieces(text) == [head, tail]
    assert pieces("Short.") == ["Short."]


def test_a_piece_cut_inside_a_clause_is_told_apart_from_one_that_ends_at_punctuation():
    from mcp_listen.voice.pieces import ends_mid_clause

    assert [ends_mid_clause(p) for p in ("The quick brown fox", "Hello,", 'He said "no,"', "Stop!", "a 3.5")] == [
        True,
        False,
        False,
        False,
        True,
    ]


def test_trailing_silence_is_cut_to_the_seam_pause_and_a_silent_piece_is_kept_whole():
    import numpy as np

    from mcp_listen.voice.synth import SEAM_PAUSE_S, trailing_silence_cut

    rate = 22050
    sound = np.concatenate([np.zeros(1000), np.full(5000, 8000), np.full(rate // 5, 50)]).astype(np.int16)
    cut = trailing_silence_cut(sound, rate)
    assert len(cut) == 6000 + int(SEAM_PAUSE_S * rate) and (cut[:6000] == sound[:6000]).all()
    silence = np.zeros(rate, dtype=np.int16)
    assert len(trailing_silence_cut(silence, rate)) == rate


def test_a_run_on_sentence_is_cut_at_its_last_clause_and_sentences_are_left_to_piper():
    words = [f"w{i}" for i in range(100)]
    words[40] += ","
    run_on = " ".join(words)
    said = pieces(run_on)
    assert " ".join(said).split() == run_on.split()  # nothing lost, nothing added
    assert [len(p.split()) for p in said] == [3, 30, 8, 30, 29]  # the 2nd cut falls at "w40,"
    assert said[2].endswith("w40,")
    sentences = " ".join(f"Sentence number {i} is short." for i in range(40))
    assert len(pieces(sentences)) == 2  # whole sentences: Piper splits them itself


# ---------------------------------------------------------------- listing


def _tool_names() -> list[str]:
    from mcp_listen.server.app import listed_specs

    return [spec.name for spec in listed_specs()]


def test_speak_text_is_listed_only_where_piper_can_be_imported(monkeypatch):
    real = importlib.util.find_spec

    def without_piper(name, *args, **kw):
        return None if name == "piper" else real(name, *args, **kw)

    monkeypatch.setattr(importlib.util, "find_spec", without_piper)
    assert _tool_names() == list(LISTENING_TOOLS)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, **k: object() if name == "piper" else real(name))
    assert _tool_names() == list(ALL_TOOLS)


def test_listing_imports_no_piper():
    import subprocess
    import sys

    code = (
        "import sys\nfrom mcp_listen.server.app import listed_specs\nnames = [s.name for s in listed_specs()]\n"
        "print('piper' in sys.modules, 'onnxruntime' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["False", "False"], done.stderr


# ---------------------------------------------------------------- wire shapes


def test_the_result_wire_shape():
    assert wire(Spoken("en_US-joe-medium", 2710, 412, False)) == {
        "voice": "en_US-joe-medium",
        "duration_ms": 2710,
        "first_audio_ms": 412,
        "interrupted": False,
    }
    assert list(wire(Spoken("v", None, 300))) == ["voice", "duration_ms", "first_audio_ms", "interrupted"]
    schema = results.output_schema(results.SpeakResult)
    assert set(schema["required"]) == {"voice", "duration_ms", "first_audio_ms", "interrupted"}


def test_status_says_speaking_only_while_speech_plays():
    assert wire(Status(False)) == {
        "recording": False,
        "tool": None,
        "elapsed_ms": None,
        "device": None,
        "whisper_model_loaded": None,
    }
    assert wire(Status(False, "speak_text", 120, "ALSA:default", None, speaking=True)) == {
        "recording": False,
        "tool": "speak_text",
        "elapsed_ms": 120,
        "device": "ALSA:default",
        "whisper_model_loaded": None,
        "speaking": True,
    }


# ---------------------------------------------------------------- the engine, on fake parts


class FakeVoices:
    """Three "sentences" of 0.1 s each; `gate` holds the second until it is set."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()

    def find(self, voice: str) -> Any:
        from pathlib import Path

        from mcp_listen.voice.check import VoiceInfo

        return VoiceInfo(voice, Path(f"/v/{voice}.onnx"), "en_US", "medium", 1000, 1, 2048)

    def prepare(self, voice: Any) -> None:
        self.prepared = voice

    def check(self, voice: Any, text: str) -> None:
        self.checked = text

    def synthesize(self, voice: Any, text: str, speed: float, stop: Any):
        import numpy as np

        for i in range(3):
            if i == 1:
                while not self.gate.wait(0.01):
                    if stop.is_set():
                        return
            yield np.full(100, i + 1, dtype=np.int16)


class FakeSpeaker:
    def __init__(self, rate: int, stop: Any) -> None:
        self.rate, self.stop, self.fed = rate, stop, []
        self.first_audio = threading.Event()
        self.first_audio_at: float | None = None

    def feed(self, samples: Any) -> None:
        self.fed.append(samples)
        if self.first_audio_at is None:
            self.first_audio_at = time.monotonic()
            self.first_audio.set()

    @property
    def played_ms(self) -> int:
        return round(sum(len(s) for s in self.fed) * 1000 / self.rate)

    def finish(self) -> Any:
        from mcp_listen.audio.speaker import Played

        frames = sum(len(s) for s in self.fed)
        return Played(frames, self.rate, self.first_audio_at, self.stop.is_set())


class FakeOutputs:
    def __init__(self) -> None:
        self.opened: list[FakeSpeaker] = []

    def __call__(self, portaudio: Any, device_index: int, sample_rate: int, stop: Any):
        from contextlib import contextmanager

        @contextmanager
        def opened():
            portaudio.acquire()  # the lone lock or its shared side (speech beside a microphone)
            try:
                out = FakeSpeaker(sample_rate, stop)
                self.opened.append(out)
                yield out
            finally:
                portaudio.release()

        return opened()


class FakeDevices:
    def resolve_output(self, device: Any, *, rescan: bool = False) -> Any:
        from types import SimpleNamespace

        return SimpleNamespace(index=7, name="Fake Speaker")


HALF_DUPLEX = Settings(defaults=Defaults(barge_in=False))
"""The engine tests below speak without listening, whatever barge-in's default (no microphone in them)."""


def _engine(
    voices: FakeVoices | None = None, settings: Settings = HALF_DUPLEX, devices: Any = None, duplex: Any = None
):
    from mcp_listen.engine.engine import Engine

    voices = voices or FakeVoices()
    outputs = FakeOutputs()
    parts = {"voices": voices, "speakers": outputs, "devices": devices or FakeDevices(), "duplex": duplex}
    return Engine(settings, **parts), voices, outputs  # type: ignore[arg-type]


def test_speaking_plays_every_sentence_on_the_resolved_device_and_frees_it():
    engine, _, outputs = _engine()
    spoken = engine.speak(parse(text="Hello there.", voice="en_US-joe-medium"))
    assert (spoken.voice, spoken.duration_ms, spoken.interrupted) == ("en_US-joe-medium", 300, False)
    assert spoken.first_audio_ms is not None and spoken.first_audio_ms >= 0
    assert [int(s[0]) for s in outputs.opened[0].fed] == [1, 2, 3]
    assert engine.recorder.active is None and not engine.recorder.portaudio.locked()


def test_the_default_voice_comes_from_the_settings():
    from mcp_listen.engine.engine import Engine

    settings = load_settings({"MCP_LISTEN_VOICE": "en_US-joe-medium", "MCP_LISTEN_BARGE_IN": "false"})
    engine = Engine(settings, voices=FakeVoices(), speakers=FakeOutputs(), devices=FakeDevices())  # type: ignore[arg-type]
    assert engine.speak(parse(text="Hi.")).voice == "en_US-joe-medium"


def test_wait_false_returns_at_the_first_sound_and_holds_the_device_until_the_end():
    engine, voices, outputs = _engine()
    voices.gate.clear()
    spoken = engine.speak(parse(text="Hello there.", wait=False))
    assert spoken.duration_ms is None and spoken.first_audio_ms is not None and not spoken.interrupted
    status = engine.status()
    assert (status.recording, status.tool, status.speaking, status.device) == (
        False,
        "speak_text",
        True,
        "Fake Speaker",
    )
    with pytest.raises(DeviceBusy, match="speak_text is playing"):
        engine.recorder.claim("capture_audio")
    with pytest.raises(DeviceBusy):
        engine.speak(parse(text="A second one."))
    voices.gate.set()
    deadline = time.monotonic() + 5
    while engine.recorder.active is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert engine.recorder.active is None and not engine.status().speaking
    assert [int(s[0]) for s in outputs.opened[0].fed] == [1, 2, 3]


def test_a_cancel_mid_way_says_interrupted_and_frees_the_device():
    engine, voices, _ = _engine()
    voices.gate.clear()
    stop = threading.Event()
    threading.Timer(0.1, stop.set).start()
    spoken = engine.speak(parse(text="Hello there."), stop=stop)
    assert spoken.interrupted is True and spoken.duration_ms == 100
    assert engine.recorder.active is None


def test_shutdown_stops_a_background_speech():
    engine, voices, _ = _engine()
    voices.gate.clear()
    engine.speak(parse(text="Hello there.", wait=False))
    engine.shutdown.set()
    deadline = time.monotonic() + 5
    while engine.recorder.active is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert engine.recorder.active is None


def test_stop_speaking_cuts_a_speech_short_from_another_thread_and_frees_the_device():
    """The speaking call returns interrupted with what had played, stop_speaking says the same
    figure, and with nothing playing it is stopped: false, not an error."""
    from mcp_listen.contract.results import Stopped

    engine, voices, outputs = _engine()
    assert engine.stop_speaking() == Stopped(stopped=False, played_ms=None)
    voices.gate.clear()
    box: dict[str, Any] = {}
    speaking = threading.Thread(target=lambda: box.update(spoken=engine.speak(parse(text="Hello there."))))
    speaking.start()
    first_sentence_fed(outputs)  # the second is held by the gate: 100 ms have played
    stopped = engine.stop_speaking()
    speaking.join(5)
    assert stopped == Stopped(stopped=True, played_ms=100)
    assert box["spoken"].interrupted is True and box["spoken"].duration_ms == 100
    assert engine.recorder.active is None and engine.speech.now.playback is None
    assert engine.stop_speaking() == Stopped(stopped=False, played_ms=None)


def test_a_speech_cut_short_says_who_cut_it_stop_speaking_or_a_cancel_and_one_played_out_says_nobody():
    engine, voices, outputs = _engine()
    voices.gate.clear()
    box: dict[str, Any] = {}
    speaking = threading.Thread(target=lambda: box.update(spoken=engine.speak(parse(text="Hello there."))))
    speaking.start()
    first_sentence_fed(outputs)
    engine.stop_speaking()
    speaking.join(5)
    assert (box["spoken"].interrupted, box["spoken"].interrupted_by) == (True, "stop_speaking")
    assert wire(box["spoken"])["interrupted_by"] == "stop_speaking" and "cut_in_ms" not in wire(box["spoken"])

    stop = threading.Event()
    threading.Timer(0.1, stop.set).start()
    cancelled = engine.speak(parse(text="Hello there."), stop=stop)
    assert (cancelled.interrupted, cancelled.interrupted_by) == (True, "cancel")
    voices.gate.set()
    whole = engine.speak(parse(text="Hello there."))
    assert (whole.interrupted, whole.interrupted_by) == (False, None) and "interrupted_by" not in wire(whole)


def first_sentence_fed(outputs: FakeOutputs, timeout: float = 10) -> FakeSpeaker:
    """The speaker once the first sentence was fed to it: waited for on its event, never slept for (alone,
    the first speech of a process also imports numpy before its first sentence)."""
    deadline = time.monotonic() + timeout
    while not outputs.opened:
        assert time.monotonic() < deadline, f"no speaker opened within {timeout:g} s"
        time.sleep(0.005)
    out = outputs.opened[0]
    assert out.first_audio.wait(max(0.0, deadline - time.monotonic())), f"nothing fed within {timeout:g} s"
    return out


def test_stop_speaking_says_it_stopped_nothing_once_the_speech_is_over():
    """converse listening: its speech played out but is still the one of the call in progress. There is
    nothing to stop, so stopped is false and nothing is reported as played."""
    from mcp_listen.contract.results import AnyOf, Stopped

    engine, _, _ = _engine()
    speech = engine.speech
    playback = speech.playback(speech.voice("v"), 7, AnyOf(), engine.recorder.portaudio.shared)
    with engine.recorder.claimed("converse") as claim, speech.now.during(playback):
        claim.speaking = True
        playback.run("Hello there.", 1.0)
        claim.speaking = False  # converse listens now
        assert engine.stop_speaking() == Stopped(stopped=False, played_ms=None)
    assert playback.played is not None and playback.played.interrupted is False


def test_a_speech_stop_speaking_is_stopping_is_waited_for_and_one_nobody_stopped_is_busy():
    """Stop, then say this instead: a speak_text that comes while stop_speaking's speech is letting go of
    the device waits for it and speaks; while a speech plays that nobody stopped, it is still busy."""
    from mcp_listen.contract.results import Stopped

    engine, voices, outputs = _engine()
    voices.gate.clear()
    engine.speak(parse(text="Hello there.", wait=False))
    first_sentence_fed(outputs)
    with pytest.raises(DeviceBusy, match="speak_text is playing"):
        engine.speak(parse(text="Not now."))
    stopped = engine.halt_speaking()  # what the adapter does on its event loop; the wait is left to the thread
    instead = engine.speak(parse(text="Say this instead.", wait=False))
    assert stopped() == Stopped(stopped=True, played_ms=100)
    assert instead.first_audio_ms is not None and instead.interrupted is False, instead
    assert engine.status().speaking and len(outputs.opened) == 2, "the second speech is not the one playing"
    assert outputs.opened[0].stop.is_set() and not outputs.opened[1].stop.is_set()
    voices.gate.set()
    deadline = time.monotonic() + 10
    while engine.recorder.active is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert engine.recorder.active is None and [int(s[0]) for s in outputs.opened[1].fed] == [1, 2, 3]


def test_a_stopped_speech_that_has_ended_is_waited_for_until_its_call_lets_go_of_the_device():
    """The speech ended, but its call still holds the device (speak_text with barge-in closes the microphone
    it opened beside the speaker): a speaking call that comes then waits for it, not busy."""
    from mcp_listen.contract.results import AnyOf

    engine, voices, outputs = _engine()
    voices.gate.clear()
    speech = engine.speech
    playback = speech.playback(speech.voice("v"), 7, AnyOf(), engine.recorder.portaudio.shared)
    claim = engine.recorder.claim("speak_text")
    claim.speaking = True
    with speech.now.during(playback):
        playback.start("Hello there.", 1.0)
        first_sentence_fed(outputs)
        stopped = engine.halt_speaking()
        assert playback.ended.wait(5)
    threading.Timer(0.2, engine.recorder.release, args=(claim,)).start()  # the microphone closed
    instead = engine.speak(parse(text="Say this instead.", wait=False))
    assert stopped().stopped is True and instead.interrupted is False and len(outputs.opened) == 2
    voices.gate.set()


def test_a_second_stop_speaking_for_the_same_speech_says_it_stopped_nothing():
    from mcp_listen.contract.results import Stopped

    engine, voices, outputs = _engine()
    voices.gate.clear()
    engine.speak(parse(text="Hello there.", wait=False))
    first_sentence_fed(outputs)
    first, second = engine.halt_speaking(), engine.halt_speaking()
    assert (first().stopped, second()) == (True, Stopped(stopped=False, played_ms=None))


def test_stop_speaking_stops_a_background_speech():
    engine, voices, _ = _engine()
    voices.gate.clear()
    engine.speak(parse(text="Hello there.", wait=False))
    assert engine.stop_speaking().stopped is True
    assert engine.recorder.active is None and not engine.status().speaking


def test_a_busy_microphone_refuses_speech_before_anything_opens():
    engine, _, outputs = _engine()
    with engine.recorder.claimed("transcribe_voice"):
        with pytest.raises(DeviceBusy, match="recording is already in progress"):
            engine.speak(parse(text="Hello."))
    assert outputs.opened == []


def test_a_text_the_voice_cannot_say_is_refused_before_anything_opens_in_every_speaking_call():
    """speak_text (wait true and false), converse and `say --save` have the voice check the text first (a script
    it reads letter by letter: voice/spelled.py): the refusal leaves no speaker opened, no claim, no file."""

    class Refusing(FakeVoices):
        def check(self, voice: Any, text: str) -> None:
            raise InvalidArgument(f"Invalid text: the voice {voice.name} cannot say {text}.")

    engine, _, outputs = _engine(Refusing())
    calls = [
        lambda: engine.speak(parse(text="مرحبا بالعالم")),
        lambda: engine.speak(parse(text="مرحبا بالعالم", wait=False)),
        lambda: engine.converse(arguments.parse_args(arguments.ConverseArgs, {"text": "مرحبا بالعالم"})),
        lambda: engine.save_speech(parse(text="مرحبا بالعالم"), None),  # type: ignore[arg-type]  # never reached
    ]
    for call in calls:
        with pytest.raises(InvalidArgument, match="cannot say مرحبا بالعالم"):
            call()
    assert outputs.opened == [] and engine.recorder.active is None


def test_synthesis_runs_one_sentence_ahead_of_the_speaker_in_order():
    from mcp_listen.engine.playback import ahead

    made: list[int] = []

    def sentences():
        for i in range(5):
            made.append(i)
            yield i

    stream = ahead(sentences(), threading.Event())
    assert next(stream) == 0
    time.sleep(0.1)
    assert len(made) <= 3  # the one handed over, one waiting, one in the producer's hand
    assert list(stream) == [1, 2, 3, 4]


def test_a_cancel_ends_the_sentences_without_waiting_for_the_one_being_synthesised():
    from mcp_listen.engine.playback import ahead

    rendering, cancel = threading.Event(), threading.Event()

    def sentences():
        yield "first"
        rendering.set()
        time.sleep(2.0)  # Piper inside one long sentence: it cannot be interrupted
        yield "late"

    stream = ahead(sentences(), cancel)
    assert next(stream) == "first"
    assert rendering.wait(5)
    threading.Timer(0.05, cancel.set).start()
    started = time.monotonic()
    assert list(stream) == []
    assert time.monotonic() - started < 1.5


def test_a_synthesis_error_reaches_the_consumer():
    from mcp_listen.engine.playback import ahead
    from mcp_listen.errors import VoiceError

    def sentences():
        yield 1
        raise VoiceError("broken voice", code="voice_invalid")

    stream = ahead(sentences(), threading.Event())
    assert next(stream) == 1
    with pytest.raises(VoiceError, match="broken voice"):
        next(stream)


# ---------------------------------------------------------------- the speaker, on a fake stream


class FakeStream:
    """Takes writes at 20x real time; records their sizes and whether it was aborted."""

    latency = 0.01

    def __init__(self) -> None:
        self.writes: list[int] = []
        self.aborted = self.closed = False

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def write(self, block: Any) -> bool:
        assert block.shape[1] == 1 and block.dtype.name == "int16"
        self.writes.append(len(block))
        time.sleep(len(block) / 22050 / 20)
        return False

    def abort(self, ignore_errors: bool = True) -> None:
        self.aborted = True

    def close(self, ignore_errors: bool = True) -> None:
        self.closed = True


def test_the_speaker_writes_small_blocks_and_stops_between_them():
    import numpy as np

    from mcp_listen.audio import speaker as speakers
    from mcp_listen.audio.speaker import BLOCK_MS

    stream = FakeStream()
    lock, stop = threading.Lock(), threading.Event()
    with speakers.speaker(lock, 3, 22050, stop, lambda index, rate: (stream, rate)) as out:
        out.feed(np.zeros(22050, dtype=np.int16))
        out.feed(np.zeros(11025, dtype=np.int16))
        whole = out.finish()
    assert whole.frames == 33075 and not whole.interrupted and whole.first_audio_at is not None
    assert max(stream.writes) <= 22050 * BLOCK_MS // 1000 <= 22050 * 50 // 1000
    assert stream.aborted and stream.closed and not lock.locked()

    stream = FakeStream()
    with speakers.speaker(lock, 3, 22050, stop, lambda index, rate: (stream, rate)) as out:
        out.feed(np.zeros(22050 * 60, dtype=np.int16))  # 3 s at the fake's pace
        out.first_audio.wait(5)
        stop.set()
        cut = out.finish()
    assert cut.interrupted and cut.frames < 22050 * 10
    assert stream.aborted and not lock.locked()


class BufferedDevice(FakeStream):
    """A sound card that plays in real time from a buffer of `latency` seconds: a write waits for room,
    and with nothing buffered it plays silence (a gap) until the next write. An abort drops what is
    buffered; `heard_ms` is what it had played by then."""

    def __init__(self, rate: int, latency: float) -> None:
        super().__init__()
        self.rate, self.latency = rate, latency
        self.written, self.ends_at = 0, 0.0
        """Frames written; time.monotonic() when what is buffered has played out."""
        self.heard_ms: float | None = None

    def write(self, block: Any) -> bool:
        while (self.ends_at - time.monotonic()) * self.rate + len(block) > self.latency * self.rate:
            time.sleep(0.002)
        now = time.monotonic()
        dry = self.ends_at < now and self.written > 0
        self.ends_at = max(self.ends_at, now) + len(block) / self.rate
        self.written += len(block)
        return dry

    def abort(self, ignore_errors: bool = True) -> None:
        self.aborted_at = time.monotonic()
        if self.heard_ms is None:
            unplayed = max(0.0, self.ends_at - self.aborted_at)
            self.heard_ms = (self.written / self.rate - unplayed) * 1000


def test_a_stopped_speech_counts_what_the_device_played_not_what_its_buffer_held():
    """played_ms is what was heard: after a gap (synthesis slower than the speech on a busy machine) the
    time since the first sound counts silence, and the frames written count the buffer the stop drops.
    On the real rig this way of counting came 0-37 ms over the speaker's recording (bench/README.md)."""
    import numpy as np

    from mcp_listen.audio import speaker as speakers
    from mcp_listen.audio.speaker import BLOCK_MS

    rate = 16000
    device = BufferedDevice(rate, latency=1.0)  # a Bluetooth-sized buffer: the whole second is dropped
    lock, stop = threading.Lock(), threading.Event()
    with speakers.speaker(lock, 3, rate, stop, lambda index, r: (device, r)) as out:
        out.feed(np.ones(rate // 5, dtype=np.int16))  # 0.2 s, then 0.6 s of nothing: the device runs dry
        time.sleep(0.8)
        out.feed(np.ones(rate * 3, dtype=np.int16))
        while device.written < rate * 1.2:  # the buffer is full again
            time.sleep(0.005)
        asked = time.monotonic()
        stop.set()
        cut = out.finish()
    assert cut.interrupted and device.heard_ms is not None
    late_ms = (device.aborted_at - asked) * 1000  # the device plays on until the abort: a loaded machine's delay
    near(cut.duration_ms, device.heard_ms, BLOCK_MS + late_ms, "played_ms against what the device played")


class RecordingDevice(BufferedDevice):
    """A BufferedDevice that keeps what it was given, and what of it an abort dropped unheard."""

    def __init__(self, rate: int, latency: float) -> None:
        super().__init__(rate, latency)
        self.given: list[Any] = []
        self.drops: list[int] = []
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        self.ends_at = 0.0

    def write(self, block: Any) -> bool:
        dry = super().write(block)
        self.given.append(block.reshape(-1).copy())
        return dry

    def abort(self, ignore_errors: bool = True) -> None:
        self.heard_ms = None
        super().abort()
        self.drops.append(round(max(0.0, self.ends_at - self.aborted_at) * self.rate))


def test_a_paused_speech_goes_quiet_and_plays_on_from_the_first_sample_it_had_not_played():
    """Barge-in pauses the speech while it finds out whether the user spoke: the abort drops the device's
    buffer, so the resume must play that again, from the first sample unheard, and nothing twice."""
    import numpy as np

    from mcp_listen.audio import speaker as speakers

    rate = 16000
    device = RecordingDevice(rate, latency=0.2)
    lock, stop = threading.Lock(), threading.Event()
    speech = np.arange(rate * 2, dtype=np.int64).astype(np.int16)  # each sample names its place
    taps: list[bool] = []
    with speakers.speaker(lock, 3, rate, stop, lambda index, r: (device, r)) as out:
        out.tap = lambda block, at, gap: taps.append(gap)
        out.feed(speech)
        while device.written < rate // 2:
            time.sleep(0.005)
        out.pause()
        time.sleep(0.3)
        quiet = device.written
        before = len(device.given)
        out.resume()
        whole = out.finish()
    given, dropped = np.concatenate(device.given), device.drops[0]
    played_before = np.concatenate(device.given[:before])[: quiet - dropped]
    played_after = np.concatenate(device.given[before:])
    seam = int(played_after[0]) - len(played_before)  # the speaker's clock and the device's differ by a few samples
    assert dropped > 0 and device.starts == 2, "the pause aborted a buffer that held sound, then started again"
    assert np.array_equal(played_before, speech[: len(played_before)])
    assert np.array_equal(played_after, speech[int(played_after[0]) :]), "it plays on in order to the end"
    assert abs(seam) <= rate // 100, f"it plays on from the first sample unheard, not {seam} samples off"
    assert abs(len(given) - len(speech) - dropped) <= rate // 100
    assert abs(whole.frames - len(speech)) <= rate // 100 and not whole.interrupted and out.paused_s >= 0.25
    assert taps.count(True) == 1 and taps[before], "the first block after the pause is a gap for the echo reference"


def test_feeding_waits_while_more_than_the_lookahead_is_queued_and_a_stop_drops_the_rest(monkeypatch):
    import numpy as np

    from mcp_listen.audio import speaker as speakers
    from mcp_listen.audio.speaker import AHEAD_S

    stream = FakeStream()
    monkeypatch.setattr(speakers, "AHEAD_S", 0.5)
    lock, stop = threading.Lock(), threading.Event()
    second = 22050 * 2  # 2 s of audio: 0.1 s at the fake's pace
    with speakers.speaker(lock, 3, 22050, stop, lambda index, rate: (stream, rate)) as out:
        out.feed(np.zeros(second, dtype=np.int16))
        started = time.monotonic()
        out.feed(np.zeros(second, dtype=np.int16))  # waits until <= 0.5 s of the first is left
        waited = time.monotonic() - started
        written = sum(stream.writes)
        stop.set()
        out.feed(np.zeros(second, dtype=np.int16))  # returns at once: the speech is over
        cut = out.finish()
    assert AHEAD_S > 0.5 and waited > 0.02
    assert written >= second - 22050 * 0.5 - 22050 * speakers.BLOCK_MS // 1000
    assert cut.interrupted and not lock.locked()


def test_a_speaker_that_refuses_the_voices_rate_plays_it_resampled_to_its_own(monkeypatch):
    """A device that opens only at 48 kHz (ALSA hw devices, JACK): the stream opens at the device's
    own rate and the 22.05 kHz voice is resampled to it, every sample of it."""
    import numpy as np
    import sounddevice as sd

    from mcp_listen.audio import speaker as speakers

    opened: list[int] = []
    stream = FakeStream()

    def output_stream(*, samplerate: int, **kw: Any) -> FakeStream:
        opened.append(samplerate)
        if samplerate != 48000:
            raise sd.PortAudioError("Error opening OutputStream: Invalid sample rate", -9997)
        return stream

    monkeypatch.setattr(sd, "OutputStream", output_stream)
    monkeypatch.setattr(sd, "query_devices", lambda index: {"default_samplerate": 48000.0})
    tone = (np.sin(np.arange(22050) * 2 * np.pi * 440 / 22050) * 8000).astype(np.int16)
    with speakers.speaker(threading.Lock(), 3, 22050, threading.Event()) as out:
        out.feed(tone)
        out.feed(tone)
        played = out.finish()
    assert opened == [22050, 48000]
    assert played.sample_rate == 48000 and out.device_rate == 48000
    assert abs(sum(stream.writes) - 96000) <= 48 and played.frames == sum(stream.writes)


def test_a_speaker_that_cannot_open_is_a_named_error_and_frees_portaudio():
    from mcp_listen.audio import speaker as speakers
    from mcp_listen.errors import CaptureError

    class PortAudioError(Exception):
        pass

    def refuse(index: int, rate: int) -> Any:
        raise PortAudioError("Invalid sample rate")

    lock = threading.Lock()
    with pytest.raises(CaptureError, match="Could not open the speaker: Invalid sample rate") as caught:
        with speakers.speaker(lock, 3, 22050, threading.Event(), refuse):
            pass
    assert caught.value.code == "device_unavailable"
    deadline = time.monotonic() + 2
    while lock.locked() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not lock.locked()


# ---------------------------------------------------------------- barge-in's default and its fallbacks


def test_barge_in_s_default_is_one_constant_that_the_setting_overrides():
    from mcp_listen.contract import limits

    assert (
        Defaults().barge_in is limits.BARGE_IN_BY_DEFAULT and Settings().defaults.barge_in is limits.BARGE_IN_BY_DEFAULT
    )
    assert load_settings({"MCP_LISTEN_BARGE_IN": "true"}).defaults.barge_in is True
    assert load_settings({"MCP_LISTEN_BARGE_IN": "false"}).defaults.barge_in is False


@pytest.mark.parametrize("on", [True, False])
def test_the_schemas_state_barge_in_s_default_as_the_caller_writes_it(on):
    word = "true" if on else "false"
    speak = arguments.input_schema(arguments.SpeakArgs, Defaults(barge_in=on))["properties"]["barge_in"]
    converse = arguments.input_schema(arguments.ConverseArgs, Defaults(barge_in=on))["properties"]["barge_in"]
    assert f"Default {word} with wait true" in speak["description"], speak
    assert f"Default {word} (MCP_LISTEN_BARGE_IN)" in converse["description"], converse
    assert "True" not in speak["description"] + converse["description"]


@pytest.mark.parametrize("on", [True, False])
def test_converse_s_description_says_what_it_does_with_what_it_hears_while_it_speaks_by_default(on):
    """It said all of it was dropped, while barge-in (on by default) listens to it: the description states the
    default in force and what each setting does."""
    from mcp_listen.server.app import TOOLS

    converse = next(t for t in TOOLS if t.name == "converse")
    said = converse.description.format_map(Defaults(barge_in=on).words())
    assert f"With barge_in (default {str(on).lower()}) it listens while you speak" in said, said
    assert "With barge_in false what it hears while you speak" in said and "is dropped" in said


def test_speak_text_takes_barge_in_s_default_only_when_it_waits_for_the_speech():
    """wait false returns before the speech ends: nobody would hear the user, so the default never applies
    (and is not refused, as barge_in true with wait false is)."""
    on, _, _ = _engine(settings=load_settings({"MCP_LISTEN_BARGE_IN": "true"}))
    off, _, _ = _engine()
    assert [on.speech.barge_in(None, wait) for wait in (None, True, False)] == [True, True, False]
    assert [off.speech.barge_in(None, wait) for wait in (None, True, False)] == [False, False, False]
    assert (on.speech.barge_in(False), off.speech.barge_in(True)) == (False, True)


class NoMicrophone(FakeDevices):
    def resolve(self, device: Any, *, rescan: bool = False) -> Any:
        from mcp_listen.errors import DeviceNotFound

        raise DeviceNotFound("No input device found.")


class CancellerThere:
    """Barge-in's part as if its echo canceller were installed; `failure` is raised when a turn is made."""

    def __init__(self, failure: type[Exception] | None = None) -> None:
        self.failure = failure

    def available(self) -> bool:
        return True

    def barge_in(self, *args: Any) -> Any:
        if self.failure is not None:
            raise self.failure("libwebrtc_audio_processing.so: cannot open shared object file")
        from mcp_listen.engine.parts import Duplex

        return Duplex().barge_in(*args)


def test_speak_text_with_barge_in_but_no_microphone_plays_it_all_and_says_why():
    """No microphone to open beside the speaker: the speech plays without listening and the result's
    warning says so, naming the microphone's problem; the device is free afterwards."""
    settings = load_settings({"MCP_LISTEN_BARGE_IN": "true"})
    engine, _, outputs = _engine(settings=settings, devices=NoMicrophone(), duplex=CancellerThere())
    spoken = engine.speak(parse(text="Hello there."))
    assert (spoken.duration_ms, spoken.interrupted) == (300, False)
    assert spoken.warning is not None and "No input device found" in spoken.warning, spoken
    assert "played without listening" in spoken.warning
    assert [int(s[0]) for s in outputs.opened[0].fed] == [1, 2, 3]
    assert engine.recorder.active is None and not engine.recorder.portaudio.locked()
    assert wire(spoken)["warning"] == spoken.warning


@pytest.mark.parametrize("failure", [ImportError, OSError])
def test_a_canceller_that_fails_to_start_leaves_converse_half_duplex_with_a_warning(failure):
    """A broken native library must not fail every converse while barge-in is on by default: the turn
    listens after the speech (never while it plays) and the warning says why."""
    from types import SimpleNamespace

    from mcp_listen.duplex.exchange import HalfDuplex

    engine, _, _ = _engine(settings=load_settings({"MCP_LISTEN_BARGE_IN": "true"}), duplex=CancellerThere(failure))
    turn, warning = engine.speech.exchange(SimpleNamespace(), "Hi.", None, True)
    assert type(turn) is HalfDuplex and warning is not None
    assert failure.__name__ in warning and "listened after the speech" in warning
    assert engine.speech.exchange(SimpleNamespace(), "Hi.", None, False)[1] is None
