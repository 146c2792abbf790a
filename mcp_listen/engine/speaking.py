"""The engine's voice: speak_text, `say --save`, stop_speaking, and the speech half of converse.

One per engine, composed by engine.Engine. Speaking holds the same claim as recording (the speaker
and the microphone are one device here), so no tool records or speaks meanwhile. The speech that
plays now, whichever call started it, is kept in `NowPlaying`, so stop_speaking can cut it short
from another request, and the call it belongs to returns `interrupted: true`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp_listen.audio import wavfile
from mcp_listen.audio.speaker import STALL_S
from mcp_listen.contract.arguments import SpeakArgs
from mcp_listen.contract.limits import DEFAULT_SPEED
from mcp_listen.contract.results import AnyOf, Cancel, Spoken, Stopped
from mcp_listen.duplex import echo
from mcp_listen.duplex.barge import BargeIn
from mcp_listen.duplex.exchange import HalfDuplex
from mcp_listen.engine.parts import Duplex, Duplexing, Words
from mcp_listen.engine.playback import Playback
from mcp_listen.errors import Cancelled, CaptureError, InvalidArgument
from mcp_listen.speech.listener import VoiceDetector
from mcp_listen.speech.vad import SileroVAD
from mcp_listen.voice.readable import readable

if TYPE_CHECKING:
    from mcp_listen.config import Settings
    from mcp_listen.engine.parts import DeviceList, Microphones, Speakers, Speaking
    from mcp_listen.voice.check import VoiceInfo

log = logging.getLogger(__name__)

STOP_WAIT_S = 1.0
"""The longest stop_speaking waits for the device to let go (it takes ~10-50 ms: one write block)."""
STOP_POLL_S = 0.005
"""How often stop_speaking looks whether the claim has stopped speaking."""
AFTER_STOP_WAIT_S = STALL_S
"""The longest a speaking call waits for a speech stop_speaking stopped to let go of the device: as long as
the speaker waits for one blocked write before it counts as lost (on two cores at load 15, 1 stop in 60 took
over STOP_WAIT_S: a write blocked in PortAudio does not see the stop)."""
NO_MICROPHONE_SPEAK = (
    "barge_in needs the default microphone open beside the speaker, and it could not be opened or was lost "
    "({reason}): the speech played without listening. Check it with: mcp-listen doctor."
)
CANCELLER_FAILED = (
    "Barge-in's echo canceller (pywebrtc-audio) failed to start ({reason}): this turn listened after the speech "
    "instead. Reinstall it: pip install --force-reinstall 'mcp-listen[speak]'."
)
CANCELLER_FAILED_SPEAK = (
    "barge_in's echo canceller (pywebrtc-audio) failed to start ({reason}): the speech played without listening. "
    "Reinstall it: pip install --force-reinstall 'mcp-listen[speak]'."
)


class NowPlaying:
    """The one speech playing now, if any: set while a Playback runs, whichever call started it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._playback: Playback | None = None

    def start(self, playback: Playback) -> None:
        with self._lock:
            self._playback = playback

    def end(self, playback: Playback) -> None:
        """Forget `playback`, unless another speech has taken its place meanwhile."""
        with self._lock:
            if self._playback is playback:
                self._playback = None

    @contextmanager
    def during(self, playback: Playback) -> Iterator[Playback]:
        self.start(playback)
        try:
            yield playback
        finally:
            self.end(playback)

    @property
    def playback(self) -> Playback | None:
        with self._lock:
            return self._playback

    def halt(self) -> Playback | None:
        """Mark the speech playing now as stopping, at once, and return it; None when there is nothing
        to stop: no speech, one that is over (converse listening after it) or one already stopping."""
        with self._lock:
            playback = self._playback
            if playback is None or playback.ended.is_set() or playback.halted:
                return None
            playback.halt("stop_speaking")
            return playback


class SpeechOutput:
    """Speaks through the engine's parts: the voices, the speakers, the device claim."""

    def __init__(
        self,
        settings: Settings,
        recorder: Microphones,
        devices: DeviceList,
        voices: Speaking,
        speakers: Speakers,
        shutdown: threading.Event,
        duplex: Duplexing | None = None,
    ) -> None:
        self.settings = settings
        self.recorder = recorder
        self.devices = devices
        self.voices = voices
        self.speakers = speakers
        self.shutdown = shutdown
        self.duplex: Duplexing = duplex or Duplex()
        self.now = NowPlaying()
        self._onset_vad: VoiceDetector | None = None
        """Barge-in's own Silero session (the listener's keeps its state for the listener), made on first use."""
        self._halted: tuple[Playback, Any] | None = None
        """The speech stop_speaking stopped last and its call's device claim: a speaking call waits for both."""

    def speak(self, args: SpeakArgs, *, stop: threading.Event | None = None, received: float | None = None) -> Spoken:
        """Say `args.text` on the output device; `received` is when the call arrived (time.monotonic()).

        The voice is found and checked and the device resolved before anything opens. With wait
        false the call returns once the first sound plays and a background thread keeps the
        claim until the speech is over (or the process shuts down).
        """
        received = time.monotonic() if received is None else received
        check_sayable(args.text)
        if args.barge_in and args.wait is False:
            raise InvalidArgument(
                "barge_in true needs wait true: the call returns when the user talks over the speech. Give one of "
                "them, or use converse to keep what the user says."
            )
        barge_in = self.barge_in(args.barge_in, args.wait)
        voice = self.voice(args.voice, args.text)
        device = self.devices.resolve_output(args.device)
        cancel = linked(stop, self.shutdown)
        self.after_a_stop()
        if barge_in and self.duplex.available():
            return self._speak_until_the_user_talks(args, voice, device, cancel, received)
        warning = echo.ECHO_UNAVAILABLE_SPEAK if barge_in else None
        claim = self.recorder.claim("speak_text", stop=cancel)
        claim.device, claim.speaking = device.name, True
        playback = self.playback(voice, device.index, cancel, self.recorder.portaudio)
        if args.wait is False:
            return self._speak_in_background(playback, args, claim, received)
        try:
            with self.now.during(playback):
                played = playback.run(args.text, speed_of(args.speed))
        finally:
            self.recorder.release(claim)
        first = ms_between(received, played.first_audio_at)
        by, _ = ended_by(playback, None, played.interrupted)
        warning = joined(warning, playback.warning)
        return Spoken(voice.name, played.duration_ms, first, played.interrupted, warning=warning, interrupted_by=by)

    def _speak_in_background(self, playback: Playback, args: SpeakArgs, claim: Any, received: float) -> Spoken:
        """speak_text with wait false: returns once the first sound plays; the claim and the
        now-playing mark go when the speech is over."""

        def over() -> None:
            self.now.end(playback)
            self.recorder.release(claim)

        self.now.start(playback)
        try:
            first = playback.in_background(args.text, speed_of(args.speed), over)
        except BaseException:
            over()
            raise
        return Spoken(
            playback.voice.name, None, ms_between(received, first), interrupted=False, warning=playback.warning
        )

    def _speak_until_the_user_talks(
        self, args: SpeakArgs, voice: VoiceInfo, device: Any, cancel: Cancel, received: float
    ) -> Spoken:
        """speak_text with barge_in: the speech plays into the open default microphone (duplex/barge.py)
        and the call returns as soon as the user talks over it, or once it played out. Without a
        microphone beside the speaker, or a canceller that starts, it plays without listening and says so."""
        speed = speed_of(args.speed)
        playback = self.playback(voice, device.index, cancel, self.recorder.portaudio.shared)
        exchange: BargeIn | None = None
        warning = None
        try:
            with (
                self.recorder.claimed("speak_text", stop=cancel) as claim,
                self.now.during(playback),
                ExitStack() as on,
            ):
                claim.device, claim.speaking = device.name, True
                microphone, warning = self._microphone_beside_the_speaker(on, cancel)
                exchange, failed = (
                    (None, None) if microphone is None else self.barge_in_exchange(playback, args.text, speed)
                )
                if exchange is None:
                    warning = warning or CANCELLER_FAILED_SPEAK.format(reason=failed)
                    playback.run(args.text, speed)
                else:
                    warning = self._listen_while_speaking(exchange, microphone, playback, on)
        except Cancelled:
            pass  # as without barge_in: a cancelled speech is an interrupted one
        finally:
            if exchange is not None:
                exchange.close()
        if playback.error is not None:
            raise playback.error
        played = playback.played
        warning = joined(warning, playback.warning)
        if played is None:
            by, _ = ended_by(playback, exchange, True)
            return Spoken(voice.name, 0, None, interrupted=True, warning=warning, interrupted_by=by)
        first = ms_between(received, played.first_audio_at)
        cut_in = exchange is not None and exchange.barged_at is not None
        interrupted = played.interrupted or cut_in
        by, at = ended_by(playback, exchange, interrupted)
        spoken = Spoken(
            voice.name, played.duration_ms, first, interrupted, warning=warning, interrupted_by=by, cut_in_ms=at
        )
        return with_pauses(spoken, exchange)

    def _listen_while_speaking(
        self, exchange: BargeIn, microphone: Any, playback: Playback, on: ExitStack
    ) -> str | None:
        """Until the user cuts in or the speech ends. A microphone lost meanwhile leaves the speech to play
        on, unheard, and the warning says so; a speaker lost with it (one sound server) then ends the call
        as it would without barge_in (its error says played_ms)."""
        try:
            next(exchange.windows(microphone, lambda: None), None)  # the user cut in, or the speech ended
            return None
        except CaptureError as exc:
            log.warning("barge-in: the microphone was lost mid-speech (%s): the speech plays on unheard", exc.code)
            on.__exit__(type(exc), exc, exc.__traceback__)  # it closes now, as a failed stream: without waiting
            playback.ended.wait()
            return NO_MICROPHONE_SPEAK.format(reason=exc.message)

    def _microphone_beside_the_speaker(self, on: ExitStack, cancel: Cancel) -> tuple[Any, str | None]:
        """The default microphone, open (until `on` closes) to listen while the speaker plays; else None and
        the warning that says why (none, busy, or the sound system refuses a second stream)."""
        find = lambda: self.devices.resolve(None)  # noqa: E731
        try:
            return on.enter_context(self.recorder.open(find, stop=cancel, beside_speaker=True)), None
        except CaptureError as exc:
            log.warning("barge-in: no microphone beside the speaker (%s): speaking without listening", exc.code)
            return None, NO_MICROPHONE_SPEAK.format(reason=exc.message)

    def stop(self, wait_s: float = STOP_WAIT_S) -> Stopped:
        """stop_speaking in one go: `halt`, then wait for the speech to let go."""
        return self.halt(wait_s)()

    def halt(self, wait_s: float = STOP_WAIT_S) -> Callable[[], Stopped]:
        """stop_speaking: mark the speech playing now as stopping, at once (the adapter calls this on its
        event loop, so a speak_text sent after the stop finds it stopping and waits for it: `after_a_stop`),
        whichever call started it. The function returned waits until the device has stopped speaking
        (speak_text's claim released, or converse listening), at most `wait_s`, and says how much of the
        speech had played. Nothing to stop (nothing playing, converse already listening, a speech another
        stop_speaking is stopping) is not an error: `stopped` is false."""
        playback = self.now.halt()
        claim = self.recorder.active  # the speech's own: a speech in NowPlaying holds the claim
        if playback is not None:
            self._halted = (playback, claim)

        def stopped() -> Stopped:
            if playback is None:
                return Stopped(stopped=False, played_ms=None)
            self._let_go(playback, claim, time.monotonic() + wait_s)
            played = playback.played
            return Stopped(stopped=True, played_ms=played.duration_ms if played is not None else 0)

        return stopped

    def after_a_stop(self) -> None:
        """Before a speaking call claims the device: a speech that stop_speaking is stopping ("stop, then say
        this instead") is waited for until it has let go, at most AFTER_STOP_WAIT_S: until it ended and its call's
        claim no longer speaks (a speech that ended is still closing the microphone barge-in opened beside
        it). A speech nobody stopped is not waited for: the claim refuses the call with `busy`."""
        halted = self._halted
        if halted is not None:
            self._let_go(*halted, time.monotonic() + AFTER_STOP_WAIT_S)

    def _let_go(self, playback: Playback, claim: Any, deadline: float) -> None:
        """Until `playback` has ended and its call's `claim` no longer speaks (released, or converse
        listening), or the deadline. Another call's claim taken meanwhile is not waited for."""
        playback.ended.wait(max(0.0, deadline - time.monotonic()))
        while claim is not None and claim.speaking and claim is self.recorder.active:
            if time.monotonic() >= deadline:
                return
            time.sleep(STOP_POLL_S)

    def voice(self, voice: str | None, text: str | None = None) -> VoiceInfo:
        """The voice a call names, or the configured default, found and checked; and the `text` it is to say,
        refused when the voice would read its script letter by letter (voice/spelled.py). Before anything opens."""
        info = self.voices.find(voice or self.settings.defaults.voice)
        if text is not None:
            self.voices.check(info, text)
        return info

    def playback(self, voice: VoiceInfo, device_index: int, cancel: Cancel, portaudio: Any) -> Playback:
        return Playback(self.voices, self.speakers, portaudio, voice, device_index, cancel)

    def save(self, args: SpeakArgs, out: wavfile.UserFile, *, stop: threading.Event | None = None) -> Path:
        """Say `args.text` into a WAV file at the voice's own rate instead of playing it (CLI `say
        --save`): no sound device is opened or claimed. The voice and the path are checked before
        synthesis; a cancel leaves no file."""
        voice = self.voice(args.voice, args.text)
        out.check()
        cancel = linked(stop, self.shutdown)
        self.voices.prepare(voice)
        pieces = list(self.voices.synthesize(voice, args.text, speed_of(args.speed), cancel))
        if cancel.is_set():
            raise Cancelled("The speech was cancelled.")
        return out.write(_joined(pieces), voice.sample_rate)

    def exchange(
        self, playback: Playback, text: str, speed: float | None, barge_in: bool, words: Words | None = None
    ) -> tuple[HalfDuplex, str | None]:
        """The exchange converse takes: half-duplex, or with barge-in when it is asked for and the echo
        canceller is there; without it, half-duplex and a warning, never an exchange that hears the
        agent's voice as the user's."""
        if not barge_in:
            return HalfDuplex(playback, text, speed_of(speed)), None
        if not self.duplex.available():
            log.warning("barge-in asked for, but the echo canceller is not installed: listening after the speech")
            return HalfDuplex(playback, text, speed_of(speed)), echo.ECHO_UNAVAILABLE
        exchange, failed = self.barge_in_exchange(playback, text, speed_of(speed), words)
        if exchange is None:
            return HalfDuplex(playback, text, speed_of(speed)), CANCELLER_FAILED.format(reason=failed)
        return exchange, None

    def barge_in(self, asked: bool | None, wait: bool | None = True) -> bool:
        """Whether a call listens while it speaks: as asked, else the configured default (MCP_LISTEN_BARGE_IN),
        which a speak_text with wait false never takes (it returns before the speech ends: nobody would hear
        the user)."""
        if asked is not None:
            return asked
        return self.settings.defaults.barge_in and wait is not False

    def barge_in_exchange(
        self, playback: Playback, text: str, speed: float, words: Words | None = None
    ) -> tuple[BargeIn | None, str | None]:
        """The barge-in exchange, or None and why when its echo canceller (a native library) or its onset
        detector fails to start: a broken install must not fail every call while barge-in is on by default.
        With `words` (whisper, converse) the user's speech is confirmed by their words, else by Silero alone."""
        try:
            return self.duplex.barge_in(playback, text, speed, self.onset_detector(), words), None
        except (ImportError, OSError, RuntimeError) as exc:
            log.warning(
                "barge-in's echo canceller failed to start (%s): speaking without listening", type(exc).__name__
            )
            return None, type(exc).__name__

    def onset_detector(self) -> VoiceDetector:
        """Barge-in's own Silero session, made on first use."""
        if self._onset_vad is None:
            self._onset_vad = SileroVAD()
        return self._onset_vad


def spoken(playback: Playback, exchange: HalfDuplex, received: float) -> Spoken:
    """What converse said: listening began once its speech ended, so `played` is there but for a
    speech that never reached a device (nothing to say after cleaning the text)."""
    voice, played = playback.voice.name, playback.played
    if played is None:
        return Spoken(voice, 0, None, interrupted=False)
    by, at = ended_by(playback, exchange, played.interrupted)
    first = ms_between(received, played.first_audio_at)
    spoken = Spoken(voice, played.duration_ms, first, played.interrupted, interrupted_by=by, cut_in_ms=at)
    return with_pauses(spoken, exchange)


def with_pauses(spoken: Spoken, exchange: HalfDuplex | None) -> Spoken:
    """`spoken` with barge-in's pauses for sounds that were not the user (it played on after each)."""
    if not isinstance(exchange, BargeIn):
        return spoken
    played_on = [verdict for verdict in exchange.pauses if not verdict.confirmed]
    if not played_on:
        return spoken
    return replace(spoken, paused_ms=round(exchange.paused_s * 1000), pauses=len(played_on))


def ended_by(playback: Playback, exchange: HalfDuplex | None, interrupted: bool) -> tuple[str | None, int | None]:
    """Who cut the speech short (limits.INTERRUPTED_BY; None when it played out), and when the user cut in
    (ms after its first sound; None when they did not)."""
    cut = exchange.cut_in if isinstance(exchange, BargeIn) else None
    if cut is not None:
        return "user", cut.after_ms
    return (playback.interrupted_by if interrupted else None), None


def joined(*warnings: str | None) -> str | None:
    """A result's warnings, in one `warning`: None when there is none."""
    said = [w for w in warnings if w]
    return " ".join(said) if said else None


def check_sayable(text: str) -> None:
    """Refuse, before the voice loads or the device opens, a text that is all markup: once its
    Markdown, SSML or HTML marks are out (what Piper is given) no word would be left to say."""
    if not readable(text).strip():
        raise InvalidArgument(
            "Invalid text: nothing is left to say once its markup (Markdown, SSML or HTML tags) is taken out. "
            "Give the words to say as plain text."
        )


def speed_of(speed: float | None) -> float:
    return speed if speed is not None else DEFAULT_SPEED


def ms_between(start: float, end: float | None) -> int | None:
    return None if end is None else max(0, round((end - start) * 1000))


def linked(stop: threading.Event | None, shutdown: threading.Event) -> AnyOf:
    """One event that is set when either the call is cancelled or the process shuts down."""
    return AnyOf(stop, shutdown)


def _joined(pieces: list[Any]) -> Any:
    """The synthesised pieces as one int16 array (numpy is loaded by then: Piper uses it)."""
    import numpy as np

    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int16)
