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
from mcp_listen.audio import recordings, wavfile
from mcp_listen.audio.microphone import Claim, Recorder, Tape
from mcp_listen.audio.owner import listening
from mcp_listen.audio.speaker import speaker
from mcp_listen.config import Settings, default_recordings_dir
from mcp_listen.contract.arguments import CaptureArgs, ConverseArgs, SpeakArgs, TranscribeArgs, VoiceQueryArgs
from mcp_listen.contract.limits import CHANNELS, DEFAULT_DEVICE_KIND, SAMPLE_RATE
from mcp_listen.contract.results import (
    Answered,
    Cancel,
    Captured,
    Conversed,
    Devices,
    Spoken,
    Status,
    Stopped,
    Transcribed,
)
from mcp_listen.duplex.barge import BargeIn
from mcp_listen.duplex.exchange import HalfDuplex
from mcp_listen.engine import memory, speaking
from mcp_listen.engine.parts import (
    Asking,
    DeviceList,
    Duplexing,
    Hearing,
    Microphones,
    Ollama,
    OtherServers,
    Piper,
    Speakers,
    Speaking,
    Whisper,
    WhisperSession,
    nobody,
)
from mcp_listen.engine.speaking import SpeechOutput, check_sayable, linked
from mcp_listen.errors import Cancelled, LLMError
from mcp_listen.speech.end_words import without_end_word
from mcp_listen.speech.ending import END_WORD
from mcp_listen.speech.listener import Heard, Listener, Meter, Plan, Progress, VoiceDetector
from mcp_listen.speech.phrases import PhraseWorker

if TYPE_CHECKING:
    pass


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
        others: OtherServers | None = None,
        duplex: Duplexing | None = None,
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
        self.others: OtherServers = others or (listening if recorder is None else nobody)
        """The other mcp-listen servers on this sound server, for the real microphone (audio/owner.py)."""
        self.shutdown = threading.Event()
        """Set on process shutdown: every recording in flight stops."""
        self.speech = SpeechOutput(
            settings, self.recorder, self.devices, self.voices, self.speakers, self.shutdown, duplex
        )

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
        cancel = linked(stop, self.shutdown)
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
            end_reason=heard.end_reason if endpointed else None,
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
        exchange: HalfDuplex | None = None,
    ) -> Heard:
        """Record per `plan` on the claimed microphone, one window at a time, until the listener
        says stop (the VAD decides, with stop_on_silence) or the ceiling is reached.

        `on_speech` runs once when speech is confirmed (voice tools load whisper then: the
        model loads while the user talks, and never when nobody speaks). With `exchange`
        (converse) the agent speaks into the open microphone first, and listening begins after.
        Another mcp-listen speaking on this sound server is waited for before the microphone opens,
        and held off until it closes (audio/owner.py): its voice is never the user's words.
        """
        listener = Listener(plan, progress, meter, phrases, on_speech, vad=self.vad)
        tape = Tape(plan.max_frames)
        reason = None
        find = lambda: self.devices.resolve(plan.device)  # noqa: E731
        waiting = None if progress is None else (lambda note: progress(0, None, note))
        with (
            self.others(stop=stop, waiting=waiting),  # another server's speech is not the user's: waited for first
            self.recorder.open(find, stop=stop, beside_speaker=exchange is not None) as microphone,
        ):
            claim.device = name = microphone.device.name

            def listening() -> None:
                claim.device, claim.speaking = name, False
                if progress:
                    cut_in = exchange.cut_in_after_s if exchange is not None else None
                    said = "" if cut_in is None else f"The user spoke over the speech {cut_in:.1f} s in: it stopped. "
                    progress(0, plan.max_ms, f"{said}Listening on {name} (up to {plan.max_ms / 1000:g} s)")

            if exchange is None:
                listening()
                windows: Iterator[Any] = iter(microphone)
            else:
                windows = exchange.windows(microphone, listening)
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

    def vocabulary(self, args: TranscribeArgs) -> str:
        """The names whisper is told to prefer: the argument's ("" for none), else MCP_LISTEN_VOCABULARY."""
        return self.settings.defaults.vocabulary if args.vocabulary is None else args.vocabulary

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
        cancel = linked(stop, self.shutdown)
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
        vocabulary = self.vocabulary(args)
        session = self.whisper.open_session(model_path, translate=translate, cancel=cancel, vocabulary=vocabulary)
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
            if heard.end_reason == END_WORD and text is not None:
                text = without_end_word(text, plan.end_words)
        stopped_by = heard.recording.stopped_by if plan.stop_on_silence else None
        speech = bool(heard.speech_detected)
        language = worker.language
        return Transcribed(
            text, heard.duration_ms, language, speech, stopped_by, heard.warning, heard.end_reason, heard.end_signal
        )

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
        if not heard.text:  # nobody spoke, or only an end word: nothing to ask
            return Answered(heard, model, None)
        if progress:
            progress(heard.duration_ms, None, f"Asking {model}")
        prompt = args.prompt or self.settings.defaults.prompt
        return Answered(heard, model, self.ask(heard.text, model, prompt, linked(stop, self.shutdown)))

    def ask(self, text: str, model: str, prompt: str, stop: Cancel) -> str:
        try:
            return self.llm.ask(text, model, prompt, stop)
        except LLMError as exc:  # the Node shape of outcome 5, for every LLM failure: nothing said is lost
            exc.extra.update(transcription=text, response=None, model=model, message=exc.message)
            raise

    # ------------------------------------------------------------------ speak_text, stop_speaking (engine/speaking.py)

    def speak(self, args: SpeakArgs, *, stop: threading.Event | None = None, received: float | None = None) -> Spoken:
        return self.speech.speak(args, stop=stop, received=received)

    def stop_speaking(self) -> Stopped:
        return self.speech.stop()

    def halt_speaking(self) -> Callable[[], Stopped]:
        return self.speech.halt()

    def save_speech(self, args: SpeakArgs, out: wavfile.UserFile, *, stop: threading.Event | None = None) -> Path:
        return self.speech.save(args, out, stop=stop)

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
        model and language. The microphone opens first and hears the speech through; the exchange
        (duplex/exchange.py) drops what it heard while the agent spoke, so the answer is the user's.
        """
        received = time.monotonic() if received is None else received
        check_sayable(args.text)
        voice = self.speech.voice(args.voice, args.text)
        output = self.devices.resolve_output(args.output_device)
        plan = Plan.from_args(args, self.settings.defaults, stop_default=True)
        cancel = linked(stop, self.shutdown)
        session, worker = self._whisper_for(args, cancel)
        playback = self.speech.playback(voice, output.index, cancel, self.recorder.portaudio.shared)
        barge_in = self.settings.defaults.barge_in if args.barge_in is None else args.barge_in
        language = self.language(args)
        # barge-in's confirmation counts the user's words, without the vocabulary (Session.transcribe says why)
        confirm = lambda samples: session.transcribe(samples, "", language, vocabulary=False)[0]  # noqa: E731
        exchange, warning = self.speech.exchange(playback, args.text, args.speed, barge_in, confirm)
        if isinstance(exchange, BargeIn):
            session.preload()  # a pause for a sound that is not the user must not wait for the model to load
        self.speech.after_a_stop()
        try:
            with self.recorder.claimed("converse", stop=cancel) as claim, self.speech.now.during(playback):
                claim.speaking = True
                if progress:
                    progress(0, None, f"Speaking on {output.name}")
                heard = self._listen(
                    plan, claim, cancel, progress, phrases=worker, on_speech=session.preload, exchange=exchange
                )
        except BaseException:
            worker.abandon()
            raise
        finally:
            exchange.close()
        words = self._words_of(heard, worker, plan, progress)
        if words.text:  # a run of the agent's own words at its start is its echo (a speaker later than measured)
            words = replace(words, text=exchange.agent.taken_off(words.text) or None)
        warning = speaking.joined(warning, playback.warning)
        if warning is not None:
            words = replace(words, warning=warning if words.warning is None else f"{words.warning} {warning}")
        spoken = speaking.spoken(playback, exchange, received)
        if not isinstance(exchange, BargeIn):
            return Conversed(words, spoken, exchange.listening_after_s)
        return Conversed(words, replace(spoken, played_ms=spoken.duration_ms), None, exchange.cut_in_after_s)
