"""The engine: capture -> (VAD endpointing) -> transcribe -> ask, producing typed results.

This module composes the parts and knows nothing of MCP or of the wire: server.app and
cli.commands both call it and turn its results (contract.results) into the contract's JSON,
so the CLI debugs exactly the code path the tools run. Its collaborators are the small
protocols of engine.parts, the real parts by default. Everything here is blocking and meant
to run in a worker thread; `stop` is how a caller cancels, `progress` how it hears what is
happening.

One voice_query, warm (model resident, Ollama answered before): the Ollama check (its
`ollama-get` thread, unless its answer is still cached), the microphone's `mcp-listen-audio`,
the phrase worker's `mcp-listen-phrases`, `ollama-chat`, and the allocator trim
(`mcp-listen-trim`): 5 threads, counted from the code. It was 7: the LLM client was warmed
and the model preloaded on every call; now the warm-up runs once per process and the preload
only when the model is not resident (tests/unit/test_engine_unit.py proves both).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp_listen.audio import devices as device_list
from mcp_listen.audio import echo, recordings, wavfile
from mcp_listen.audio.microphone import Claim, Recorder, Tape
from mcp_listen.audio.speaker import Played, speaker
from mcp_listen.config import Settings, default_recordings_dir
from mcp_listen.contract.arguments import CaptureArgs, ConverseArgs, SpeakArgs, TranscribeArgs, VoiceQueryArgs
from mcp_listen.contract.limits import CHANNELS, DEFAULT_DEVICE_KIND, DEFAULT_SPEED, SAMPLE_RATE
from mcp_listen.contract.results import (
    Answered,
    AnyOf,
    Cancel,
    Captured,
    Conversed,
    Devices,
    Spoken,
    Status,
    Transcribed,
)
from mcp_listen.engine import memory
from mcp_listen.engine.barge import BargeIn
from mcp_listen.engine.parts import (
    Asking,
    DeviceList,
    Hearing,
    Microphones,
    Ollama,
    Piper,
    Speakers,
    Speaking,
    Whisper,
    WhisperSession,
)
from mcp_listen.engine.playback import Playback
from mcp_listen.engine.turn import SpeechFirst
from mcp_listen.errors import Cancelled, InvalidArgument, LLMError
from mcp_listen.speech.listener import Heard, Listener, Meter, Plan, Progress, VoiceDetector
from mcp_listen.speech.phrases import PhraseWorker
from mcp_listen.speech.vad import SileroVAD
from mcp_listen.voice.readable import readable

if TYPE_CHECKING:
    from mcp_listen.voice.check import VoiceInfo


log = logging.getLogger(__name__)


class Engine:
    """One per process: the microphone, the resident whisper model, the settings."""

    def __init__(
        self,
        settings: Settings,
        *,
        recorder: Microphones | None = None,
        whisper: Hearing | None = None,
        llm: Asking | None = None,
        vad: VoiceDetector | None = None,
        devices: DeviceList | None = None,
        voices: Speaking | None = None,
        speakers: Speakers | None = None,
    ) -> None:
        self.settings = settings
        self.recorder: Microphones = recorder or Recorder()
        self.whisper: Hearing = whisper or Whisper(settings)
        self.llm: Asking = llm or Ollama(settings)
        self.vad = vad
        """None: the process-wide Silero session (vad.shared_vad)."""
        self.devices: DeviceList = devices or device_list
        self.voices: Speaking = voices or Piper(settings)
        self.speakers: Speakers = speakers or speaker
        self.shutdown = threading.Event()
        """Set on process shutdown: every recording in flight stops."""
        self._onset_vad: VoiceDetector | None = None
        """Barge-in's own Silero session (the listener's keeps its state for the listener), made on first use."""

    # ------------------------------------------------------------------ devices and status

    def list_devices(self, kind: str = DEFAULT_DEVICE_KIND) -> Devices:
        """Current devices of `kind` (input, output or all); re-scanned (hot-plug) unless a
        recording holds PortAudio. Inputs go through `list_inputs`, as they always did."""
        portaudio = self.recorder.portaudio
        rescan = portaudio.acquire(blocking=False)
        try:
            if kind == DEFAULT_DEVICE_KIND:
                return Devices(self.devices.list_inputs(rescan=rescan))
            return Devices(self.devices.list_devices(kind, rescan=rescan))
        finally:
            if rescan:
                portaudio.release()

    def status(self) -> Status:
        claim = self.recorder.active
        loaded = self.whisper.loaded_path
        model = str(loaded) if loaded else None
        if claim is None:
            return Status(recording=False, whisper_model_loaded=model)
        speaking = claim.speaking
        return Status(not speaking, claim.tool, claim.elapsed_ms, claim.device, model, speaking=speaking)

    # ------------------------------------------------------------------ capture_audio

    def capture(
        self,
        args: CaptureArgs,
        *,
        stop: threading.Event | None = None,
        progress: Progress | None = None,
        out: wavfile.UserFile | None = None,
        meter: Meter | None = None,
    ) -> Captured:
        plan = Plan.from_args(args, self.settings.defaults, stop_default=False)
        if out is not None:
            out.check()  # before the microphone opens: a bad path costs no recording
        cancel = _linked(stop, self.shutdown)
        try:
            with self.recorder.claimed("capture_audio", stop=cancel) as claim:
                folder = self._recordings_folder() if out is None else None
                try:
                    heard = self._listen(plan, claim, cancel, progress, meter)
                    path = self._save(heard.recording.samples, out, folder, cancel)
                finally:
                    if folder is not None:
                        folder.close()
        finally:
            memory.release_in_background()
        endpointed = plan.stop_on_silence
        return Captured(
            path=str(path),
            duration_ms=heard.duration_ms,
            sample_rate=SAMPLE_RATE,
            channels=CHANNELS,
            size_bytes=wavfile.wav_size(len(heard.recording.samples)),
            stopped_by=heard.recording.stopped_by if endpointed else None,
            speech_detected=bool(heard.speech_detected) if endpointed else None,
            warning=heard.warning,
        )

    def _recordings_folder(self) -> recordings.Folder:
        """Checked and held open before recording: the WAV lands in the folder that was checked."""
        folder = self.settings.recordings_dir
        return recordings.open_folder(folder, ours=folder == default_recordings_dir())

    def _save(self, samples: Any, out: wavfile.UserFile | None, folder: Any, cancel: Any) -> Path:
        """The WAV, written under the claim; gone again when the call was cancelled meanwhile."""
        if out is not None:
            path = out.write(samples, SAMPLE_RATE)
        else:
            path = wavfile.write_recording(folder, samples, SAMPLE_RATE)
        if cancel.is_set():
            wavfile.remove(path)
            raise Cancelled("The recording was cancelled.")
        return path

    # ------------------------------------------------------------------ listening

    def _listen(
        self,
        plan: Plan,
        claim: Claim,
        stop: Any,
        progress: Progress | None,
        meter: Meter | None = None,
        phrases: PhraseWorker | None = None,
        on_speech: Callable[[], None] | None = None,
        speech_first: SpeechFirst | None = None,
    ) -> Heard:
        """Record per `plan` on the claimed microphone, one window at a time, until the listener
        says stop (the VAD decides, with stop_on_silence) or the ceiling is reached.

        `on_speech` runs once when speech is confirmed (voice tools load whisper then: the
        model loads while the user talks, and never when nobody speaks). With `speech_first`
        (converse) the agent speaks into the open microphone first, and listening begins after.
        """
        listener = Listener(plan, progress, meter, phrases, on_speech, vad=self.vad)
        tape = Tape(plan.max_frames)
        reason = None
        find = lambda: self.devices.resolve(plan.device)  # noqa: E731
        with self.recorder.open(find, stop=stop, beside_speaker=speech_first is not None) as microphone:
            claim.device = name = microphone.device.name

            def listening() -> None:
                claim.device, claim.speaking = name, False
                if progress:
                    progress(0, plan.max_ms, f"Listening on {name} (up to {plan.max_ms / 1000:g} s)")

            if speech_first is None:
                listening()
                windows: Iterator[Any] = iter(microphone)
            else:
                windows = speech_first.windows(microphone, listening)
            for window in windows:
                if tape.add(window):  # wholly under the ceiling: heard
                    reason = listener.on_window(window)
                if phrases is not None:  # no WAV is written: only the speech still to transcribe is kept
                    tape.forget_before(listener.kept_from_frame)
                if reason is not None or tape.full:
                    break
        return listener.finished(tape.recording(reason or "ceiling"))

    # ------------------------------------------------------------------ transcribe_voice

    def language(self, args: TranscribeArgs) -> str:
        """The language code whisper is told: the argument's, else the configured default."""
        return args.language or self.settings.defaults.language

    def hear_words(
        self,
        args: TranscribeArgs,
        tool: str,
        *,
        stop: threading.Event | None = None,
        progress: Progress | None = None,
        before_recording: Callable[[], None] | None = None,
    ) -> Transcribed:
        """Record and transcribe; the text is None when nobody spoke or no usable words came out.

        Finished phrases are transcribed during the recording (speech/phrases.py), and what was said
        so far as soon as the speaker pauses, so little or nothing is left when they stop;
        whisper loads once speech is heard.
        """
        plan = Plan.from_args(args, self.settings.defaults, stop_default=True)
        cancel = _linked(stop, self.shutdown)
        session, worker = self._whisper_for(args, cancel)
        try:
            with self.recorder.claimed(tool, stop=cancel) as claim:
                if before_recording is not None:  # under the claim: one call at a time gets this far
                    before_recording()
                heard = self._listen(plan, claim, cancel, progress, phrases=worker, on_speech=session.preload)
        except BaseException:
            worker.abandon()
            raise
        return self._words_of(heard, worker, plan, progress)

    def _whisper_for(self, args: TranscribeArgs, cancel: Cancel) -> tuple[WhisperSession, PhraseWorker]:
        """The utterance's whisper session and phrase worker; the model and language are checked
        here, before anything opens."""
        model_path = self.whisper.resolve(args.whisper_model)
        language, translate = self.language(args), bool(args.translate)
        self.whisper.check_language(model_path, language, translate)
        session = self.whisper.open_session(model_path, translate=translate, cancel=cancel)
        return session, PhraseWorker(session.transcribe, language, session.detect)

    def _words_of(self, heard: Heard, worker: PhraseWorker, plan: Plan, progress: Progress | None) -> Transcribed:
        from mcp_listen.whisper.text import usable_text

        text = None
        if not heard.speech_detected:  # whisper writes "you" or "Thank you." for silence: never ask it
            worker.abandon()
        else:
            if progress:
                progress(heard.duration_ms, None, "Transcribing")
            try:
                text = usable_text(worker.finish(heard.remaining_speech(), heard.remaining_key()))
            finally:
                memory.release_in_background()  # whisper's peak is behind us
        stopped_by = heard.recording.stopped_by if plan.stop_on_silence else None
        speech = bool(heard.speech_detected)
        return Transcribed(text, heard.duration_ms, worker.language, speech, stopped_by, heard.warning)

    def transcribe_voice(
        self, args: TranscribeArgs, *, stop: threading.Event | None = None, progress: Progress | None = None
    ) -> Transcribed:
        return self.hear_words(args, "transcribe_voice", stop=stop, progress=progress)

    # ------------------------------------------------------------------ voice_query

    def voice_query(
        self,
        args: VoiceQueryArgs,
        *,
        stop: threading.Event | None = None,
        progress: Progress | None = None,
    ) -> Answered:
        """Record, transcribe, ask Ollama. Ollama and the model are checked before the microphone
        opens, and a failure after transcription still returns the transcript: the user never has
        to say it all again because of a dependency."""
        model = args.model or self.settings.defaults.model
        preflight = lambda: self.llm.preflight(model)  # noqa: E731
        heard = self.hear_words(args, "voice_query", stop=stop, progress=progress, before_recording=preflight)
        if heard.text is None:
            return Answered(heard, model, None)
        if progress:
            progress(heard.duration_ms, None, f"Asking {model}")
        prompt = args.prompt or self.settings.defaults.prompt
        return Answered(heard, model, self.ask(heard.text, model, prompt, _linked(stop, self.shutdown)))

    def ask(self, text: str, model: str, prompt: str, stop: Cancel) -> str:
        try:
            return self.llm.ask(text, model, prompt, stop)
        except LLMError as exc:  # the Node shape of outcome 5, for every LLM failure: nothing said is lost
            exc.extra.update(transcription=text, response=None, model=model, message=exc.message)
            raise

    # ------------------------------------------------------------------ speak_text

    def speak(self, args: SpeakArgs, *, stop: threading.Event | None = None, received: float | None = None) -> Spoken:
        """Say `args.text` on the output device; `received` is when the call arrived (time.monotonic()).

        The voice is found and checked and the device resolved before anything opens. Speaking
        holds the same claim as recording, so no tool records or speaks meanwhile (`busy`).
        With wait false the call returns once the first sound plays and a background thread
        keeps the claim until the speech is over (or the process shuts down).
        """
        received = time.monotonic() if received is None else received
        _check_sayable(args.text)
        if args.barge_in and args.wait is False:
            raise InvalidArgument(
                "barge_in true needs wait true: the call returns when the user talks over the speech. Give one of "
                "them, or use converse to keep what the user says."
            )
        voice = self._voice(args.voice)
        device = self.devices.resolve_output(args.device)
        speed = _speed(args.speed)
        cancel = _linked(stop, self.shutdown)
        if args.barge_in and echo.available():
            return self._speak_until_the_user_talks(args, voice, device, cancel, received)
        warning = echo.ECHO_UNAVAILABLE_SPEAK if args.barge_in else None
        claim = self.recorder.claim("speak_text", stop=cancel)
        claim.device, claim.speaking = device.name, True
        playback = Playback(self.voices, self.speakers, self.recorder.portaudio, voice, device.index, cancel)
        if args.wait is False:
            try:
                first = playback.in_background(args.text, speed, lambda: self.recorder.release(claim))
            except BaseException:
                self.recorder.release(claim)
                raise
            return Spoken(voice.name, None, _ms_between(received, first), interrupted=False)
        try:
            played = playback.run(args.text, speed)
        finally:
            self.recorder.release(claim)
        first = _ms_between(received, played.first_audio_at)
        return Spoken(voice.name, played.duration_ms, first, played.interrupted, warning=warning)

    def _speak_until_the_user_talks(
        self, args: SpeakArgs, voice: VoiceInfo, device: Any, cancel: Cancel, received: float
    ) -> Spoken:
        """speak_text with barge_in: the speech plays into the open default microphone (engine/barge.py)
        and the call returns as soon as the user talks over it, or once it played out."""
        playback = Playback(self.voices, self.speakers, self.recorder.portaudio.shared, voice, device.index, cancel)
        turn = BargeIn(playback, args.text, _speed(args.speed), self._onset_detector())
        find = lambda: self.devices.resolve(None)  # noqa: E731
        try:
            with self.recorder.claimed("speak_text", stop=cancel) as claim:
                claim.device, claim.speaking = device.name, True
                with self.recorder.open(find, stop=cancel, beside_speaker=True) as microphone:
                    next(turn.windows(microphone, lambda: None), None)  # the user cut in, or the speech ended
        except Cancelled:
            pass  # as without barge_in: a cancelled speech is an interrupted one
        finally:
            turn.close()
        if playback.error is not None:
            raise playback.error
        played = playback.played
        if played is None:
            return Spoken(voice.name, 0, None, interrupted=True)
        first = _ms_between(received, played.first_audio_at)
        return Spoken(voice.name, played.duration_ms, first, played.interrupted or turn.barged_at is not None)

    def _voice(self, voice: str | None) -> VoiceInfo:
        """The voice a call names, or the configured default, found and checked."""
        return self.voices.find(voice or self.settings.defaults.voice)

    def save_speech(self, args: SpeakArgs, out: wavfile.UserFile, *, stop: threading.Event | None = None) -> Path:
        """Say `args.text` into a WAV file at the voice's own rate instead of playing it (CLI `say
        --save`): no sound device is opened or claimed. The voice and the path are checked before
        synthesis; a cancel leaves no file."""
        voice = self._voice(args.voice)
        out.check()
        speed = _speed(args.speed)
        cancel = _linked(stop, self.shutdown)
        self.voices.prepare(voice)
        pieces = list(self.voices.synthesize(voice, args.text, speed, cancel))
        if cancel.is_set():
            raise Cancelled("The speech was cancelled.")
        return out.write(_joined(pieces), voice.sample_rate)

    # ------------------------------------------------------------------ converse

    def converse(
        self,
        args: ConverseArgs,
        *,
        stop: threading.Event | None = None,
        progress: Progress | None = None,
        received: float | None = None,
    ) -> Conversed:
        """Say `args.text`, then hear the user's answer, in one claim of the sound devices.

        Everything is checked before anything opens: the voice, the output device, the whisper
        model and language. The microphone opens first and hears the speech through; the turn
        (engine/turn.py) drops what it heard while the agent spoke, so the answer is the user's.
        """
        received = time.monotonic() if received is None else received
        _check_sayable(args.text)
        voice = self._voice(args.voice)
        output = self.devices.resolve_output(args.output_device)
        plan = Plan.from_args(args, self.settings.defaults, stop_default=True)
        cancel = _linked(stop, self.shutdown)
        session, worker = self._whisper_for(args, cancel)
        portaudio = self.recorder.portaudio.shared
        playback = Playback(self.voices, self.speakers, portaudio, voice, output.index, cancel)
        turn, warning = self._turn(playback, args)
        try:
            with self.recorder.claimed("converse", stop=cancel) as claim:
                claim.speaking = True
                if progress:
                    progress(0, None, f"Speaking on {output.name}")
                heard = self._listen(
                    plan, claim, cancel, progress, phrases=worker, on_speech=session.preload, speech_first=turn
                )
        except BaseException:
            worker.abandon()
            raise
        finally:
            turn.close()
        words = self._words_of(heard, worker, plan, progress)
        if warning is not None:
            words = replace(words, warning=warning if words.warning is None else f"{words.warning} {warning}")
        spoken = _spoken(voice.name, playback.played, received)
        if not isinstance(turn, BargeIn):
            return Conversed(words, spoken, turn.listening_after_s)
        return Conversed(words, replace(spoken, played_ms=spoken.duration_ms), None, turn.cut_in_after_s)

    def _turn(self, playback: Playback, args: ConverseArgs) -> tuple[SpeechFirst, str | None]:
        """The turn converse takes: half-duplex, or with barge-in when it is asked for (the argument,
        else MCP_LISTEN_BARGE_IN) and the echo canceller is there; without it, half-duplex and a
        warning, never a turn that hears the agent's voice as the user's."""
        barge_in = self.settings.defaults.barge_in if args.barge_in is None else args.barge_in
        speed = _speed(args.speed)
        if not barge_in:
            return SpeechFirst(playback, args.text, speed), None
        if not echo.available():
            log.warning("barge-in asked for, but the echo canceller is not installed: listening after the speech")
            return SpeechFirst(playback, args.text, speed), echo.ECHO_UNAVAILABLE
        return BargeIn(playback, args.text, speed, self._onset_detector()), None

    def _onset_detector(self) -> VoiceDetector:
        """Barge-in's own Silero session, made on first use."""
        if self._onset_vad is None:
            self._onset_vad = SileroVAD()
        return self._onset_vad


def _spoken(voice: str, played: Played | None, received: float) -> Spoken:
    """What converse said: listening began once its speech ended, so `played` is there but for a
    speech that never reached a device (nothing to say after cleaning the text)."""
    if played is None:
        return Spoken(voice, 0, None, interrupted=False)
    return Spoken(voice, played.duration_ms, _ms_between(received, played.first_audio_at), played.interrupted)


def _check_sayable(text: str) -> None:
    """Refuse, before the voice loads or the device opens, a text that is all markup: once its
    Markdown, SSML or HTML marks are out (what Piper is given) no word would be left to say."""
    if not readable(text).strip():
        raise InvalidArgument(
            "Invalid text: nothing is left to say once its markup (Markdown, SSML or HTML tags) is taken out. "
            "Give the words to say as plain text."
        )


def _speed(speed: float | None) -> float:
    return speed if speed is not None else DEFAULT_SPEED


def _ms_between(start: float, end: float | None) -> int | None:
    return None if end is None else max(0, round((end - start) * 1000))


def _linked(stop: threading.Event | None, shutdown: threading.Event) -> AnyOf:
    """One event that is set when either the call is cancelled or the process shuts down."""
    return AnyOf(stop, shutdown)


def _joined(pieces: list[Any]) -> Any:
    """The synthesised pieces as one int16 array (numpy is loaded by then: Piper uses it)."""
    import numpy as np

    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int16)
