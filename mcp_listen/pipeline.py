"""The engine: capture -> (VAD endpointing) -> transcribe -> ask, producing the contract's outcomes.

This module composes the components and knows nothing of MCP: server.py and
cli.py both call it, so the CLI debugs exactly the code path the tools run.
Everything here is blocking and meant to run in a worker thread; `stop` is how
a caller cancels, `progress` how it hears what is happening.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from mcp_listen import devices, memory, recordings, wavfile
from mcp_listen.config import Settings, default_recordings_dir
from mcp_listen.contracts import (
    CHANNELS,
    SAMPLE_RATE,
    CaptureArgs,
    CaptureResult,
    StatusResult,
    TranscribeArgs,
    TranscribeResult,
    VoiceQueryArgs,
    VoiceQueryResult,
)
from mcp_listen.errors import Cancelled, LLMError, TranscriptionError
from mcp_listen.listening import Heard, Listener, Meter, Plan, Progress
from mcp_listen.phrases import PhraseWorker
from mcp_listen.recorder import Claim, Recorder

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

NO_SPEECH_MESSAGE = (
    "No speech was detected. Ask the user to repeat, or check that the correct microphone is selected."
)
NO_WORDS_MESSAGE = (
    "Speech was detected but could not be transcribed. It may have been too quiet, too brief, or unclear. "
    "Ask the user to repeat, a little louder and closer to the microphone."
)


@dataclass(frozen=True)
class Spoken:
    """What a voice tool heard: the recording, the usable text (None: no words), the language."""

    heard: Heard
    text: str | None
    plan: Plan
    language: str
    """The language code whisper transcribed in (the detected one for `auto`)."""


class Engine:
    """One per process: the microphone lock, the resident whisper model, the settings."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.recorder = Recorder()
        self._transcriber: Any = None
        self._transcriber_lock = threading.Lock()
        self._portaudio = self.recorder.portaudio
        """Held while a stream is open: PortAudio must not be re-initialised under it."""
        self.shutdown = threading.Event()
        """Set on process shutdown: every recording in flight stops."""

    # ------------------------------------------------------------------ devices and status

    def list_devices(self) -> list[dict[str, Any]]:
        """Current input devices; re-scanned (hot-plug) unless a recording holds PortAudio."""
        if not self._portaudio.acquire(blocking=False):
            return [d.public() for d in devices.list_inputs()]
        try:
            return [d.public() for d in devices.list_inputs(rescan=True)]
        finally:
            self._portaudio.release()

    def status(self) -> dict[str, Any]:
        claim = self.recorder.active
        loaded = self._transcriber.loaded_path if self._transcriber is not None else None
        return StatusResult(
            recording=claim is not None,
            tool=claim.tool if claim else None,
            elapsed_ms=claim.elapsed_ms if claim else None,
            device=claim.device if claim else None,
            whisper_model_loaded=str(loaded) if loaded else None,
        ).public()

    # ------------------------------------------------------------------ capture_audio

    def capture(
        self,
        args: CaptureArgs,
        *,
        stop: threading.Event | None = None,
        progress: Progress | None = None,
        out: Path | None = None,
        meter: Meter | None = None,
    ) -> dict[str, Any]:
        plan = Plan.from_args(args, self.settings.defaults, stop_default=False)
        claim = self.recorder.claim("capture_audio", stop=_linked(stop, self.shutdown))
        folder = None
        try:
            folder = self._recordings_folder() if out is None else None
            heard = self._listen(plan, claim, stop, progress, meter)
            samples = heard.recording.samples
            if out is not None:
                path = wavfile.write_to(out, samples, SAMPLE_RATE)
            else:
                path = wavfile.write_recording(folder, samples, SAMPLE_RATE)
            if _linked(stop, self.shutdown).is_set():  # cancelled while the file was written
                wavfile.remove(path)
                raise Cancelled("The recording was cancelled.")
        finally:
            if folder is not None:
                folder.close()
            self.recorder.release(claim)
            memory.release_in_background()
        result = CaptureResult(
            path=str(path),
            duration_ms=heard.duration_ms,
            sample_rate=SAMPLE_RATE,
            channels=CHANNELS,
            size_bytes=wavfile.wav_size(len(samples)),
        )
        if plan.stop_on_silence:
            result.stopped_by = heard.recording.stopped_by
            result.speech_detected = bool(heard.speech_detected)
        return result.public()

    def _recordings_folder(self) -> recordings.Folder:
        """Checked and held open before recording: the WAV lands in the folder that was checked."""
        folder = self.settings.recordings_dir
        return recordings.open_folder(folder, ours=folder == default_recordings_dir())

    # ------------------------------------------------------------------ listening

    def _listen(
        self,
        plan: Plan,
        claim: Claim,
        stop: threading.Event | None,
        progress: Progress | None,
        meter: Meter | None = None,
        phrases: PhraseWorker | None = None,
        on_speech: Callable[[], None] | None = None,
    ) -> Heard:
        """Record per `plan` on the claimed microphone; with stop_on_silence the VAD decides the end.

        `on_speech` runs once when speech is confirmed (voice tools load whisper then: the
        model loads while the user talks, and never when nobody speaks).
        """
        stop = _linked(stop, self.shutdown)
        listener = Listener(plan, progress, meter, phrases, on_speech)

        def started(device: Any) -> None:
            claim.device = device.name
            if progress:
                progress(0, plan.max_ms, f"Listening on {device.name} (up to {plan.max_ms / 1000:g} s)")

        recording = self.recorder.record(
            find_device=lambda: devices.resolve(plan.device),
            max_frames=plan.max_frames,
            on_window=listener.on_window,
            stop=stop,
            on_start=started,
        )
        return listener.finished(recording)

    # ------------------------------------------------------------------ transcription

    def transcriber(self) -> Any:
        with self._transcriber_lock:
            if self._transcriber is None:
                from mcp_listen.transcriber import Transcriber

                self._transcriber = Transcriber(threads=self.settings.whisper_threads)
            return self._transcriber

    def resolve_whisper_model(self, name: str | None) -> Path:
        """Find and check the model before the microphone opens: nobody should speak in vain."""
        from mcp_listen.model_check import validate_model_file
        from mcp_listen.model_names import resolve_model

        path = resolve_model(name or self.settings.defaults.whisper_model, self.settings.model_search_dirs)
        validate_model_file(path, self.settings.whisper_threads, probe_ahead=True)  # test load runs while we listen
        return path

    def transcribe_samples(
        self,
        samples: "np.ndarray",
        model_path: Path,
        language: str,
        cancel: Any = None,
        prompt: str = "",
        translate: bool = False,
    ) -> Any:
        """whisper's Words (text, language heard) for int16 samples."""
        from mcp_listen.whisper_text import condition

        audio = condition(samples)
        options = dict(language=language, cancel=cancel, prompt=prompt, translate=translate)
        return self.transcriber().hear(audio, path=model_path, **options)

    def check_language(self, model_path: Path, language: str, translate: bool) -> None:
        """An English-only model cannot hear another language, detect one or translate: say so
        before the microphone opens, naming the multilingual model to use instead."""
        from mcp_listen.model_file import english_only_remedy

        if language != "en" or translate:
            remedy = english_only_remedy(model_path)
            if remedy:
                wants = "translation" if translate else ("language detection" if language == "auto" else language)
                raise TranscriptionError(
                    f"The whisper model {model_path.name} understands only English, so it cannot do "
                    f"{wants}. {remedy}",
                    code="model_english_only",
                )

    def hear_words(
        self,
        args: TranscribeArgs,
        tool: str,
        *,
        stop: threading.Event | None = None,
        progress: Progress | None = None,
        before_recording: Callable[[], None] | None = None,
    ) -> Spoken:
        """Record and transcribe; the text is None when nobody spoke or no usable words came out.

        Finished phrases are transcribed during the recording (phrases.py), and what was said
        so far as soon as the speaker pauses, so little or nothing is left when they stop;
        whisper loads once speech is heard.
        """
        plan = Plan.from_args(args, self.settings.defaults, stop_default=True)
        model_path = self.resolve_whisper_model(args.whisper_model)
        language, translate = self.language(args), bool(args.translate)
        self.check_language(model_path, language, translate)
        cancel = _linked(stop, self.shutdown)
        worker = self._phrase_worker(model_path, language, translate, cancel)
        try:
            claim = self.recorder.claim(tool, stop=cancel)
            try:
                if before_recording is not None:  # under the claim: one call at a time gets this far
                    before_recording()
                heard = self._listen(plan, claim, stop, progress, phrases=worker, on_speech=lambda: self._preload(model_path))
            finally:
                self.recorder.release(claim)
        except BaseException:
            worker.abandon()
            raise
        return self._words_of(heard, worker, plan, progress)

    def _phrase_worker(self, model_path: Path, language: str, translate: bool, cancel: Any) -> PhraseWorker:
        def transcribe(audio: Any, prompt: str, lang: str, abort: threading.Event) -> tuple[str, str]:
            words = self.transcribe_samples(audio, model_path, lang, _AnyEvent(cancel, abort), prompt, translate)
            return words.text, words.language

        return PhraseWorker(transcribe, language)

    def _words_of(self, heard: Heard, worker: PhraseWorker, plan: Plan, progress: Progress | None) -> Spoken:
        from mcp_listen.whisper_text import usable_text

        if not heard.speech_detected:  # whisper writes "you" or "Thank you." for silence: never ask it
            worker.abandon()
            return Spoken(heard, None, plan, worker.language)
        if progress:
            progress(heard.duration_ms + 1, None, "Transcribing")
        try:
            raw = worker.finish(heard.remaining_speech(), heard.remaining_key())
        finally:
            memory.release_in_background()  # whisper's peak is behind us
        return Spoken(heard, usable_text(raw), plan, worker.language)

    def _preload(self, model_path: Path) -> None:
        """Load the whisper model in the background while the user is still talking, not after."""
        transcriber = self.transcriber()
        threading.Thread(target=_quietly, args=(transcriber.load, model_path), daemon=True).start()

    def transcribe_voice(self, args: TranscribeArgs, **kw: Any) -> dict[str, Any]:
        spoken = self.hear_words(args, "transcribe_voice", **kw)
        heard, plan = spoken.heard, spoken.plan
        result = TranscribeResult(
            transcription=spoken.text,
            stopped_by=heard.recording.stopped_by if plan.stop_on_silence else None,
            duration_ms=heard.duration_ms,
            language=spoken.language,
        )
        if spoken.text is None:
            _explain_silence(result, heard, plan)
        return result.public()

    # ------------------------------------------------------------------ voice_query

    def language(self, args: TranscribeArgs) -> str:
        """The language code whisper is told: the argument's, else the configured default."""
        return args.language or self.settings.defaults.language

    def voice_query(
        self,
        args: VoiceQueryArgs,
        *,
        stop: threading.Event | None = None,
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        """Record, transcribe, ask Ollama. Ollama and the model are checked before the microphone
        opens, and a failure after transcription still returns the transcript: the user never has
        to say it all again because of a dependency."""
        model = args.model or self.settings.defaults.model
        preflight = lambda: self.check_llm(model)  # noqa: E731
        spoken = self.hear_words(args, "voice_query", stop=stop, progress=progress, before_recording=preflight)
        text = spoken.text
        if text is None:
            result = VoiceQueryResult(transcription=None, response=None)
            _explain_silence(result, spoken.heard, spoken.plan)
            return result.public()
        if progress:
            progress(spoken.heard.duration_ms + 2, None, f"Asking {model}")
        prompt = args.prompt or self.settings.defaults.prompt
        response = self.ask(text, model, prompt, _linked(stop, self.shutdown))
        return VoiceQueryResult(transcription=text, response=response, model=model).public()

    def check_llm(self, model: str) -> None:
        """Fail before recording when Ollama is down or lacks `model` (bounded, cached briefly)."""
        from mcp_listen import llm

        threading.Thread(target=_quietly, args=(_import_llm_client,), daemon=True).start()
        llm.preflight(self.settings.ollama_host, model)

    def ask(self, text: str, model: str, prompt: str, stop: threading.Event | None) -> str:
        from mcp_listen import llm

        try:
            return llm.ask(
                text=text,
                model=model,
                system_prompt=prompt,
                host=self.settings.ollama_host,
                timeout_s=self.settings.ollama_timeout_s,
                cancel=stop,
            )
        except LLMError as exc:  # the Node shape of outcome 5, for every LLM failure: nothing said is lost
            exc.extra.update(transcription=text, response=None, model=model, message=exc.message)
            raise


def _explain_silence(result: Any, heard: Heard, plan: Plan) -> None:
    """The two no-words outcomes differ only in speech_detected: the caller branches on it.

    With a fixed length the contract leaves speech_detected and stopped_by out (as the Node
    edition does); the message still says what the VAD heard.
    """
    if plan.stop_on_silence:
        result.speech_detected = bool(heard.speech_detected)
        result.stopped_by = heard.recording.stopped_by
    result.message = NO_WORDS_MESSAGE if heard.speech_detected else NO_SPEECH_MESSAGE


def _quietly(fn: Callable[..., Any], *args: Any) -> None:
    """Background preload: a failure here is reported by the real call, which retries the load."""
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001
        log.debug("background model load failed: %s", type(exc).__name__)


def _import_llm_client() -> None:
    """Ready the Ollama client while the user talks: on a first call it costs ~0.2 s after they stop."""
    from mcp_listen import llm

    llm.warm_up()


def _linked(stop: threading.Event | None, shutdown: threading.Event) -> threading.Event:
    """One event that is set when either the call is cancelled or the process shuts down."""
    linked = _AnyEvent(stop, shutdown)
    return linked  # type: ignore[return-value]


class _AnyEvent:
    """Quacks like threading.Event for `is_set`, true when any of the given events is set."""

    def __init__(self, *events: threading.Event | None) -> None:
        self._events = [e for e in events if e is not None]

    def is_set(self) -> bool:
        return any(e.is_set() for e in self._events)

