"""The CLI's debugging commands: each runs the same engine code as the matching tool."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Callable, Sequence
from typing import Any

from mcp_listen.audio import wavfile
from mcp_listen.audio.levels import level_db
from mcp_listen.audio.wavfile import UserFile
from mcp_listen.config import Settings
from mcp_listen.contract import arguments
from mcp_listen.contract.limits import (
    DEFAULT_DEVICE_KIND,
    HOLDING_MESSAGE,
    PARTIAL_PREFIX,
    RESUMED_MESSAGE,
    SAMPLE_RATE,
    SAMPLE_RATE_KHZ,
)
from mcp_listen.contract.results import Conversed, wire
from mcp_listen.engine.engine import Engine
from mcp_listen.errors import EXIT_OK, EXIT_UNAVAILABLE, InvalidArgument, ListenError, VoiceError, command
from mcp_listen.whisper.names import SUGGESTED_MODEL

RECORDING_FIELDS = ("duration_ms", "device", "stop_on_silence", "silence_ms")
WHISPER_FIELDS = ("whisper_model", "language", "translate", "vocabulary")
TURN_FIELDS = ("end_of_turn", "max_pause_ms", "end_words")


def tool_args(opts: argparse.Namespace, fields: Sequence[str]) -> dict[str, Any]:
    """CLI options as the tool's raw arguments, so the CLI validates exactly as the tool does."""
    raw: dict[str, Any] = {}
    for name in fields:
        value = getattr(opts, name, None)
        if value is not None:
            raw[name] = value
    for name in ("device", "output_device"):
        device = raw.get(name)
        if isinstance(device, str) and device.isdigit():
            raw[name] = int(device)
    return raw


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def devices(opts: argparse.Namespace, settings: Settings) -> int:
    args = arguments.parse_args(arguments.ListDevicesArgs, tool_args(opts, ("kind",)))
    kind = args.kind or DEFAULT_DEVICE_KIND
    found = wire(Engine(settings).list_devices(kind))["devices"]
    if opts.json:
        print_json(found)
        return EXIT_OK
    if not found:
        print({"input": "No input devices found.", "output": "No output devices found."}.get(kind, "No devices found."))
        return EXIT_OK
    if kind == DEFAULT_DEVICE_KIND:
        _input_table(found)
    else:
        _device_table(found)
    return EXIT_OK


def _input_table(found: list[dict[str, Any]]) -> None:
    print(f"{'':2}{'index':>5}  {'id':<48} {'ch':>3} {'rate':>7}")
    for d in found:
        mark = "* " if d["isDefault"] else "  "
        print(f"{mark}{d['index']:>5}  {d['id']:<48} {d['maxInputChannels']:>3} {d['defaultSampleRate']:>7.0f}")
    print("\n* = default input. Pass the id as device to the tools (ids are stable, indexes are not).")


def _device_table(found: list[dict[str, Any]]) -> None:
    """Inputs and outputs: `*` marks the default input, `>` the default output."""
    print(f"{'':3}{'index':>5}  {'kind':<6} {'id':<48} {'in':>3} {'out':>3} {'rate':>7}")
    for d in found:
        mark = ("*" if d["isDefault"] else " ") + (">" if d["isDefaultOutput"] else " ")
        print(
            f"{mark} {d['index']:>5}  {d['kind']:<6} {d['id']:<48} {d['maxInputChannels']:>3} "
            f"{d['maxOutputChannels']:>3} {d['defaultSampleRate']:>7.0f}"
        )
    print("\n* = default input, > = default output. Ids are stable, indexes are not.")


def capture(opts: argparse.Namespace, settings: Settings) -> int:
    args = arguments.parse_args(arguments.CaptureArgs, tool_args(opts, RECORDING_FIELDS))
    out = UserFile(opts.out, replace=opts.force) if opts.out is not None else None
    meter = _Meter() if sys.stderr.isatty() else None
    try:
        result = Engine(settings).capture(args, out=out, meter=meter, progress=_Say())
    finally:
        if meter:
            meter.close()
    print_json(wire(result))
    return EXIT_OK


def listen(opts: argparse.Namespace, settings: Settings) -> int:
    fields = (*RECORDING_FIELDS, *TURN_FIELDS, *WHISPER_FIELDS)
    args = arguments.parse_args(arguments.TranscribeArgs, tool_args(opts, fields))
    return _voice_command(lambda say: Engine(settings).transcribe_voice(args, progress=say))


def query(opts: argparse.Namespace, settings: Settings) -> int:
    fields = (*RECORDING_FIELDS, *TURN_FIELDS, *WHISPER_FIELDS, "model", "prompt")
    args = arguments.parse_args(arguments.VoiceQueryArgs, tool_args(opts, fields))
    return _voice_command(lambda say: Engine(settings).voice_query(args, progress=say))


def converse(opts: argparse.Namespace, settings: Settings) -> int:
    """converse from a terminal: speak, then listen; how soon after the speech the microphone was
    taken as the user's goes to stderr with the other progress."""
    _need_piper()
    fields = (*RECORDING_FIELDS, *TURN_FIELDS, *WHISPER_FIELDS, "text", "voice", "speed", "output_device", "barge_in")
    args = arguments.parse_args(arguments.ConverseArgs, tool_args(opts, fields))
    _tell_the_default_voice(args.voice, settings)

    def turn(say: _Say) -> Any:
        result = Engine(settings).converse(args, progress=say)
        for line in turn_lines(result, words=say.live):
            say(0, None, line)
        return result

    return _voice_command(turn)


def _need_piper() -> None:
    """Piper missing is a dependency unavailable (69), as every other one is, not an internal error."""
    from mcp_listen.voice.synth import PIPER_MISSING, available

    if not available():
        raise VoiceError(PIPER_MISSING, code="piper_missing")


def _tell_the_default_voice(voice: str | None, settings: Settings) -> None:
    """On stderr, when no voice was named and another stands in for a default that is not installed:
    which, and how to choose one (voice/store.py's default_voice, which the engine follows too)."""
    from mcp_listen.voice.store import default_voice

    if not voice:
        note = default_voice(settings).note
        if note:
            print(f"({note})", file=sys.stderr)


def turn_lines(result: Conversed, *, words: bool) -> list[str]:
    """What `converse` says on stderr once the turn is over (the engine's progress said when the user cut
    in, as it happened): that they did and, with `words` (a terminal), what was heard; or that the speech
    played out; how soon listening began after it; and why barge-in did not run (its warning)."""
    lines = []
    heard = result.answer.text
    if result.cut_in_after_s is not None:
        said = f': heard "{heard}"' if words and heard else ""
        lines.append(f"(you spoke over the speech {result.cut_in_after_s * 1000:.0f} ms in{said})")
    elif result.spoken.played_ms is not None:
        lines.append("(the speech played to its end: nobody spoke over it)")
    if result.listening_after_s is not None:
        lines.append(f"(listening began {result.listening_after_s * 1000:.0f} ms after the speech ended)")
    if result.answer.warning:
        lines.append(f"({result.answer.warning})")
    return lines


def _voice_command(run: Callable[[_Say], Any]) -> int:
    """Run a voice tool with its progress on stderr; the live line is closed before the JSON."""
    say = _Say()
    try:
        result = run(say)
    finally:
        say.close()
    print_json(wire(result))
    return EXIT_OK


def say(opts: argparse.Namespace, settings: Settings) -> int:
    """speak_text from a terminal: the same validation and engine code; Ctrl-C stops the sound at once.
    With --save the speech goes to a new WAV file (the voice's rate) and no device is opened."""
    _need_piper()
    if opts.save is not None and opts.device is not None:
        raise InvalidArgument("--save writes a file and --device names a speaker: give one of them.")
    if opts.force and opts.save is None:
        raise InvalidArgument("--force only applies to --save FILE.wav.")
    args = arguments.parse_args(arguments.SpeakArgs, tool_args(opts, ("text", "voice", "speed", "device", "barge_in")))
    _tell_the_default_voice(args.voice, settings)
    engine = Engine(settings)
    if opts.save is None:
        print_json(wire(engine.speak(args)))
        return EXIT_OK
    path = engine.save_speech(args, UserFile(opts.save, replace=opts.force, option="--save"))
    print(path)
    return EXIT_OK


def transcribe(opts: argparse.Namespace, settings: Settings) -> int:
    from mcp_listen.whisper.text import usable_text

    args = arguments.parse_args(arguments.TranscribeArgs, tool_args(opts, WHISPER_FIELDS))
    engine = Engine(settings)
    model_path = engine.whisper.resolve(args.whisper_model)
    samples = _read_wav(opts.file)
    translate, vocabulary = bool(args.translate), engine.vocabulary(args)
    session = engine.whisper.open_session(model_path, translate=translate, cancel=None, vocabulary=vocabulary)
    raw, *_ = session.transcribe(samples, "", engine.language(args))
    print_json({"transcription": usable_text(raw), "raw": raw.strip(), "model": str(model_path)})
    return EXIT_OK


def models(opts: argparse.Namespace, settings: Settings) -> int:
    from mcp_listen.whisper import store as model_store

    if opts.models_command == "pull":
        from mcp_listen.whisper.admission import validate_model_file

        path = model_store.pull(opts.name, settings)
        try:
            validate_model_file(path)  # the full GGML walk: catches what a hash table cannot list
        except ListenError:
            path.unlink(missing_ok=True)
            raise
        print(path)
        return EXIT_OK
    found = model_store.list_models(settings)
    if opts.json:
        print_json([{"name": m.name, "size_bytes": m.size_bytes, "path": str(m.path)} for m in found])
        return EXIT_OK
    print("Searched, in order:")
    for folder in settings.model_search_dirs:
        print(f"  {folder}")
    if not found:
        print(f"No whisper models found. Fetch one: {command('models', 'pull', SUGGESTED_MODEL)}")
        return EXIT_UNAVAILABLE
    for m in found:
        print(f"  {m.name:<24} {m.size_bytes / 1e6:8.1f} MB  {m.path}")
    return EXIT_OK


def voices(opts: argparse.Namespace, settings: Settings) -> int:
    """List the Piper voices, each checked, or pull one (its model card and how it was verified on stderr)."""
    from mcp_listen.voice import store as voice_store
    from mcp_listen.voice.names import SUGGESTED_VOICE

    if opts.voices_command == "pull":
        pulled = voice_store.pull(opts.name, settings, force=opts.force)
        if pulled.card:
            print(pulled.card + "\n", file=sys.stderr)
        print(f"{pulled.info.name}: verified by {pulled.verified}", file=sys.stderr)
        print(pulled.info.path)
        return EXIT_OK
    found = voice_store.list_voices(settings)
    if opts.json:
        print_json([_voice_json(v) for v in found])
        return EXIT_OK
    print("Searched, in order:")
    for folder in voice_store.search_dirs(settings):
        print(f"  {folder}")
    if not found:
        print(f"No Piper voices found. Fetch one: {command('voices', 'pull', SUGGESTED_VOICE)}")
        return EXIT_UNAVAILABLE
    for v in found:
        if v.info is None:
            print(f"  {v.name:<32} invalid: {v.problem}")
            continue
        i = v.info
        quality = i.quality or "-"
        print(
            f"  {i.name:<32} {i.language:<6} {quality:<7} {i.sample_rate:>6} Hz {i.size_bytes / 1e6:7.1f} MB  {i.path}"
        )
    return EXIT_OK


def _voice_json(listed: Any) -> dict[str, Any]:
    """One voice for `voices --json`: its checked facts, or `problem` saying why it cannot be used."""
    info = listed.info
    if info is None:
        return {"name": listed.name, "path": str(listed.path), "valid": False, "problem": listed.problem}
    facts = {"language": info.language, "quality": info.quality, "sample_rate": info.sample_rate}
    facts.update(num_speakers=info.num_speakers, size_bytes=info.size_bytes)
    return {"name": info.name, "path": str(info.path), "valid": True, **facts, "problem": None}


def _read_wav(path: Any) -> Any:
    import wave

    import numpy as np

    from mcp_listen.errors import InvalidArgument

    try:
        with wavfile.open_regular(path) as raw, wave.open(raw, "rb") as wav:
            ok = wav.getnchannels() == 1 and wav.getsampwidth() == 2 and wav.getframerate() == SAMPLE_RATE
            data = wav.readframes(wav.getnframes())
    except (OSError, wave.Error, EOFError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise InvalidArgument(f"Cannot read {path}: {reason}") from None
    if not ok:
        raise InvalidArgument(
            f"{path} must be a {SAMPLE_RATE_KHZ} kHz mono 16-bit WAV "
            f"(convert: sox IN -r {SAMPLE_RATE} -c 1 -b 16 OUT.wav)"
        )
    return np.frombuffer(data, dtype="<i2")


HOLDING_MARK = "holding: mid-sentence"
"""Shown after the words on the live line while end_of_turn smart holds a pause past silence_ms."""


def live_line(words: str, holding: bool, width: int) -> str:
    """The live line: the latest words that fit in `width` characters, then the holding mark while a
    pause is held (it always shows whole, the words give way)."""
    mark = f"  ({HOLDING_MARK})" if holding else ""
    room = max(1, width - len(mark))
    words = words if len(words) <= room else "…" + words[-(room - 1) :]
    return (words + mark).lstrip()


class _Say:
    """Progress on stderr. On a terminal the words heard so far are one live line, rewritten as
    they come, with "holding: mid-sentence" after them while smart holds a pause, and each phase is
    shown once (not "Listening" each second); piped to a file or a log, each phase is a plain line
    and the words are left out (the result holds them)."""

    def __init__(self) -> None:
        self.live = sys.stderr.isatty()
        self._words_shown = False
        self._shown: set[str] = set()
        self._words = ""
        self._holding = False

    def __call__(self, done: float, total: float | None, message: str) -> None:
        if self.live and (message.startswith(PARTIAL_PREFIX) or message in (HOLDING_MESSAGE, RESUMED_MESSAGE)):
            if message.startswith(PARTIAL_PREFIX):
                self._words = message[len(PARTIAL_PREFIX) :]
            else:
                self._holding = message == HOLDING_MESSAGE
            width = max(20, shutil.get_terminal_size().columns - 1)
            sys.stderr.write(f"\r\033[K{live_line(self._words, self._holding, width)}")
            sys.stderr.flush()
            self._words_shown = True
            return
        if message.startswith(PARTIAL_PREFIX):
            return
        if self.live and message in self._shown:
            return
        self._shown.add(message)
        self.close()
        print(f"\r\033[K{message}" if self.live else message, file=sys.stderr, flush=True)

    def close(self) -> None:
        """End the live line of words (they stay on screen) before anything else is printed."""
        self._holding = False
        if self._words_shown:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self._words_shown = False


class _Meter:
    """A live input-level bar on stderr, so a person can see whether the microphone hears them."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, window: Any, speaking: bool) -> None:
        self.count += 1
        if self.count % 3:
            return
        db = level_db(window)  # the level the endpointer uses
        filled = int(max(0.0, min(1.0, (db + 60) / 60)) * 40)
        vad = "speech" if speaking else "      "
        sys.stderr.write(f"\r\033[Klevel {db:6.1f} dBFS [{'#' * filled:<40}] {vad}")
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()


def doctor(opts: argparse.Namespace, settings: Settings) -> int:
    """Check what every tool needs; exit 69 when something voice_query needs is missing."""
    from mcp_listen import package_version
    from mcp_listen.cli import doctor as checks

    chosen = tool_args(opts, ("device", "output_device"))
    report = checks.run(
        settings,
        device=chosen.get("device"),
        whisper_model=opts.whisper_model,
        model=opts.model,
        voice=opts.voice,
        output_device=chosen.get("output_device"),
    )
    report = {"version": package_version(), **report}
    if opts.json:
        print_json(report)
    else:
        print(checks.format_report(report, unicode=_can_print("✓✗→"), version=report["version"]))
    return EXIT_OK if report["ok"] else EXIT_UNAVAILABLE


def config(opts: argparse.Namespace, settings: Settings) -> int:
    """Print the client's snippet on stdout (pipe-able), where it goes on stderr."""
    from mcp_listen.cli import client_config

    env = client_config.parse_env(opts.env)
    snippet = client_config.render(opts.client, opts.runner, env, speak=opts.speak)
    print(snippet.text)
    print(snippet.where, file=sys.stderr)
    return EXIT_OK


def _can_print(text: str) -> bool:
    """False when stdout's encoding (a Windows code page, a C locale) cannot show `text`."""
    try:
        text.encode(sys.stdout.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return False
    return True
