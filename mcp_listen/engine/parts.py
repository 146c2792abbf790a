"""The engine's collaborators as small protocols, and the real parts that are their defaults.

engine.Engine reaches the microphone, the device list, whisper and Ollama only through
these protocols (the VAD through speech.listener.VoiceDetector), so each can be replaced by a
fake in a test. `Whisper` and `Ollama` are the real parts: thin compositions of the
components (transcriber, model_names, model_check, llm), imported on first use.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from mcp_listen.config import Settings
from mcp_listen.contract.results import Cancel
from mcp_listen.duplex import echo
from mcp_listen.duplex.barge import BargeIn
from mcp_listen.duplex.config import DEFAULT, BargeInConfig
from mcp_listen.errors import TranscriptionError
from mcp_listen.whisper.threads import ThreadPolicy

if TYPE_CHECKING:
    from mcp_listen.audio.microphone import Claim
    from mcp_listen.audio.portaudio_lock import PortAudioLock, StreamLock
    from mcp_listen.audio.speaker import Speaker
    from mcp_listen.duplex.exchange import Speech
    from mcp_listen.speech.listener import VoiceDetector
    from mcp_listen.voice.check import VoiceInfo

log = logging.getLogger(__name__)


Words = Callable[[Any], str]
"""whisper on int16 samples: what barge-in confirms the user's speech by (converse)."""


class Duplexing(Protocol):
    """Speaking while listening (duplex.Duplex): whether its echo canceller is installed, and a barge-in exchange."""

    def available(self) -> bool: ...

    def barge_in(
        self, playback: Speech, text: str, speed: float, vad: VoiceDetector, words: Words | None = None
    ) -> BargeIn: ...


class Duplex:
    """The real barge-in: WebRTC's AEC3 (the `speak` extra) and the exchange with `config`'s thresholds."""

    def __init__(self, config: BargeInConfig = DEFAULT) -> None:
        self.config = config

    def available(self) -> bool:
        return echo.available()

    def barge_in(
        self, playback: Speech, text: str, speed: float, vad: VoiceDetector, words: Words | None = None
    ) -> BargeIn:
        """The exchange; raises ImportError, OSError or RuntimeError when the canceller's library fails to start."""
        return BargeIn(playback, text, speed, vad, config=self.config, words=words)


class WindowSource(Protocol):
    """An open microphone (audio.microphone.Microphone): 512-sample int16 windows at 16 kHz, pulled."""

    device: Any
    latency_s: float

    def __iter__(self) -> Iterator[Any]: ...


class Microphones(Protocol):
    """The one-recording claim and the open microphone (audio.microphone.Recorder)."""

    portaudio: PortAudioLock

    @property
    def active(self) -> Claim | None: ...

    def claimed(self, tool: str, stop: Any = None) -> AbstractContextManager[Claim]: ...

    def claim(self, tool: str, stop: Any = None) -> Claim: ...

    def release(self, claim: Claim) -> None: ...

    def open(
        self, find_device: Callable[[], Any] | None = None, *, stop: Any = None, beside_speaker: bool = False
    ) -> AbstractContextManager[WindowSource]: ...


class DeviceList(Protocol):
    """Listing and resolving input devices, and listing outputs (the devices module)."""

    def list_inputs(self, *, rescan: bool = False) -> list[Any]: ...

    def list_devices(self, kind: str, *, rescan: bool = False) -> list[Any]: ...

    def resolve(self, device: int | str | None, *, rescan: bool = False) -> Any: ...

    def resolve_output(self, device: int | str | None, *, rescan: bool = False) -> Any: ...


class Speaking(Protocol):
    """Piper: finding and checking a voice before the speaker opens, and synthesising with it."""

    def find(self, voice: str) -> VoiceInfo: ...

    def prepare(self, voice: VoiceInfo) -> None: ...

    def check(self, voice: VoiceInfo, text: str) -> None: ...

    def synthesize(self, voice: VoiceInfo, text: str, speed: float, stop: Cancel) -> Iterator[Any]: ...


class Speakers(Protocol):
    """Opening the output stream (audio.speaker.speaker): PortAudio's lock, the device, the voice's rate."""

    def __call__(
        self, portaudio: StreamLock, device_index: int, sample_rate: int, stop: Cancel
    ) -> AbstractContextManager[Speaker]: ...


class OtherServers(Protocol):
    """The other mcp-listen servers on this sound server (audio.owner.listening): held off speaking while a
    call listens, their speech waited for before it records, at most `wait_s` (`waiting` told why), else
    `busy`. Yields the warning when that rule cannot hold here, else None."""

    def __call__(
        self, folder: Path | None = None, *, stop: Any = None, waiting: Callable[[str], None] | None = None
    ) -> AbstractContextManager[str | None]: ...


@contextmanager
def nobody(
    folder: Path | None = None, *, stop: Any = None, waiting: Callable[[str], None] | None = None
) -> Iterator[None]:
    """No other server can reach a test's recorder (it hears no room): nothing to wait for or hold off."""
    yield None


class WhisperSession(Protocol):
    """One utterance's whisper (whisper.session.Session): what the phrase worker calls."""

    def preload(self) -> None: ...

    def transcribe(
        self, samples: Any, prompt: str, language: str, abort: Cancel | None = None, *, vocabulary: bool = True
    ) -> tuple[str, str]: ...

    def detect(self, samples: Any, abort: Cancel | None = None) -> tuple[str, float]: ...


class Hearing(Protocol):
    """whisper: finding and checking a model before listening, and transcribing."""

    @property
    def loaded_path(self) -> Path | None: ...

    def resolve(self, name: str | None) -> Path: ...

    def check_language(self, model_path: Path, language: str, translate: bool) -> None: ...

    def open_session(
        self, model_path: Path, *, translate: bool, cancel: Cancel | None, vocabulary: str = ""
    ) -> WhisperSession: ...


class Asking(Protocol):
    """The local model: checked before the microphone opens, then asked."""

    def preflight(self, model: str) -> None: ...

    def ask(self, text: str, model: str, prompt: str, cancel: Cancel) -> str: ...


class Whisper:
    """The resident whisper model (one per process, loaded on first use) and its pre-checks."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._transcriber: Any = None
        self._lock = threading.Lock()
        self.threads = ThreadPolicy(fixed=settings.whisper_threads)
        """Threads per whisper pass: MCP_LISTEN_WHISPER_THREADS, else what is free at the time."""

    @property
    def loaded_path(self) -> Path | None:
        return self._transcriber.loaded_path if self._transcriber is not None else None

    def transcriber(self) -> Any:
        with self._lock:
            if self._transcriber is None:
                from mcp_listen.whisper.transcriber import Transcriber

                self._transcriber = Transcriber(policy=self.threads)
            return self._transcriber

    def resolve(self, name: str | None) -> Path:
        """Find and check the model before the microphone opens: nobody should speak in vain."""
        from mcp_listen.whisper.admission import validate_model_file
        from mcp_listen.whisper.names import resolve_model

        path = resolve_model(name or self.settings.defaults.whisper_model, self.settings.model_search_dirs)
        validate_model_file(path, self.threads.ceiling, probe_ahead=True)  # test load runs while we listen
        return path

    def check_language(self, model_path: Path, language: str, translate: bool) -> None:
        """An English-only model cannot hear another language, detect one or translate: say so
        before the microphone opens, naming the multilingual model to use instead."""
        from mcp_listen.whisper.model_file import english_only_remedy

        if language != "en" or translate:
            remedy = english_only_remedy(model_path)
            if remedy:
                wants = "translation" if translate else ("language detection" if language == "auto" else language)
                raise TranscriptionError(
                    f"The whisper model {model_path.name} understands only English, so it cannot do {wants}. {remedy}",
                    code="model_english_only",
                )

    def open_session(
        self, model_path: Path, *, translate: bool, cancel: Cancel | None, vocabulary: str = ""
    ) -> WhisperSession:
        """The whisper side of one utterance, on the resident model (whisper.session); `vocabulary` opens
        every prompt."""
        from mcp_listen.whisper.session import Session

        return Session(self.transcriber(), model_path, translate=translate, cancel=cancel, vocabulary=vocabulary)


class Piper:
    """The Piper voices of the settings' folders, checked as hostile files, and the resident voice."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._synthesizer: Any = None

    def find(self, voice: str) -> VoiceInfo:
        """The voice's two files found and checked (voice_not_found naming the pull command, voice_invalid).
        The default voice's name stands for voice/store.py's `default_voice`: the voice installed when
        the default is not and the user chose none, as `say` and `doctor` find it."""
        from mcp_listen.voice.check import check_voice
        from mcp_listen.voice.names import resolve_voice
        from mcp_listen.voice.store import default_voice, search_dirs

        if voice == self.settings.defaults.voice:
            chosen = default_voice(self.settings)
            if chosen.note:
                log.info("%s", chosen.note)
            voice = chosen.voice
        return check_voice(resolve_voice(voice, search_dirs(self.settings)))

    def prepare(self, voice: VoiceInfo) -> None:
        """Load the voice (first use: ~0.7 s with onnxruntime's import) before the speaker opens:
        the device is not held open in silence meanwhile, and a voice Piper refuses fails first."""
        self._synth().voice(voice)

    def check(self, voice: VoiceInfo, text: str) -> None:
        """Refuse a text in a script the voice reads letter by letter (invalid_argument naming it, voice/spelled.py),
        before anything opens; loads the voice."""
        self._synth().check(voice, text)

    def synthesize(self, voice: VoiceInfo, text: str, speed: float, stop: Cancel) -> Iterator[Any]:
        return self._synth().speak(voice, text, speed, stop)

    def _synth(self) -> Any:
        from mcp_listen.voice.synth import Synthesizer

        if self._synthesizer is None:
            self._synthesizer = Synthesizer()
        return self._synthesizer


class Ollama:
    """Questions to the local Ollama daemon named by the settings."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._warming: threading.Thread | None = None

    def preflight(self, model: str) -> None:
        """Fail before recording when Ollama is down or lacks `model` (bounded, cached briefly);
        on the first call, ready the HTTP client meanwhile (it costs ~0.2 s after the user stops
        otherwise), once per process."""
        from mcp_listen.ollama import client as llm

        if self._warming is None:
            self._warming = threading.Thread(target=quietly, args=(llm.warm_up,), name="ollama-warm-up", daemon=True)
            self._warming.start()
        llm.preflight(self.settings.ollama_host, model)

    def ask(self, text: str, model: str, prompt: str, cancel: Any) -> str:
        from mcp_listen.ollama import client as llm

        settings = self.settings
        return llm.ask(
            text=text,
            model=model,
            system_prompt=prompt,
            host=settings.ollama_host,
            timeout_s=settings.ollama_timeout_s,
            cancel=cancel,
        )


def quietly(fn: Callable[..., Any], *args: Any) -> None:
    """Background warm-up: a failure here is reported by the real call, which retries."""
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001
        log.debug("background model load failed: %s", type(exc).__name__)
