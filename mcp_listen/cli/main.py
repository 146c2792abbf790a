"""Command line: no subcommand serves MCP over stdio; the subcommands debug microphone and models.

Exit codes (sysexits.h): 0 ok, 64 usage, 69 device or dependency unavailable,
70 internal error, 78 invalid configuration, 130 interrupted (SIGINT), 143 SIGTERM;
serving also 129 SIGHUP and 141 stdout closed by the client (server/stdio.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from mcp_listen import package_version
from mcp_listen.contract import end_words, limits
from mcp_listen.errors import EXIT_INTERRUPTED, EXIT_USAGE, ListenError

log = logging.getLogger("mcp_listen")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # usage errors exit 64, not argparse's 2
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _log_level(raw: str) -> str:
    """--log-level in any case; anything else is a usage error (exit 64), as in MCP_LISTEN_LOG_LEVEL."""
    from mcp_listen.config.values import LOG_LEVELS

    if raw.upper() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"invalid level {raw!r}: choose from {', '.join(LOG_LEVELS)}")
    return raw.upper()


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mcp-listen", description="Give AI agents ears: a local MCP server for the microphone.")
    parser.add_argument("--version", action="version", version=f"mcp-listen {package_version()}")
    parser.add_argument(
        "--log-level", type=_log_level, help="stderr log level (DEBUG, INFO, WARNING, ERROR); env MCP_LISTEN_LOG_LEVEL"
    )
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    sub.add_parser("serve", help="serve MCP over stdio (the default)")
    devices = sub.add_parser("devices", help="list microphones (or speakers: --kind output)")
    devices.add_argument(
        "--kind", choices=limits.DEVICE_KINDS, help=f"input, output or all (default {limits.DEFAULT_DEVICE_KIND})"
    )
    devices.add_argument("--json", action="store_true", help="print JSON")
    capture = sub.add_parser("capture", help="record a WAV with the same code as capture_audio")
    _recording_options(capture, stop_default=False)
    capture.add_argument("--out", type=Path, help="write the WAV here instead of the recordings folder (a new file)")
    capture.add_argument("--force", action="store_true", help="with --out: replace an existing regular file")
    voice_commands = (("transcribe", "transcribe a WAV file"), ("listen", "record and transcribe (transcribe_voice)"))
    for name, help_text in voice_commands:
        p = sub.add_parser(name, help=help_text)
        if name == "transcribe":
            p.add_argument("file", type=Path, help=f"{limits.SAMPLE_RATE_KHZ} kHz mono 16-bit WAV file")
        else:
            _recording_options(p, stop_default=True, dictation=True)
        _whisper_options(p)
    query = sub.add_parser("query", help="run voice_query from a terminal and print its result")
    _recording_options(query, stop_default=True)
    _whisper_options(query)
    query.add_argument("--model", help=f"Ollama model (default {limits.DEFAULT_LLM_MODEL})")
    query.add_argument("--prompt", help="system prompt")
    models = sub.add_parser("models", help="list whisper models, or pull one")
    models_sub = models.add_subparsers(dest="models_command", parser_class=_Parser, metavar="ACTION")
    pull = models_sub.add_parser("pull", help="download a whisper model, e.g. base.en")
    pull.add_argument("name")
    models.add_argument("--json", action="store_true")
    _voices(sub)
    _speak(sub)
    _converse(sub)
    _doctor_and_config(sub)
    return parser


def _voices(sub: Any) -> None:
    voices = sub.add_parser("voices", help="list Piper voices (for speech output), or pull one")
    voices_sub = voices.add_subparsers(dest="voices_command", parser_class=_Parser, metavar="ACTION")
    pull = voices_sub.add_parser("pull", help="download a Piper voice, e.g. en_US-lessac-medium")
    pull.add_argument("name")
    pull.add_argument("--force", action="store_true", help="download again even if the voice is there")
    voices.add_argument("--json", action="store_true")


def _speak(sub: Any) -> None:
    speak = sub.add_parser(
        "say", aliases=["speak"], help="say a text aloud with a Piper voice (speak_text) and print its result"
    )
    speak.add_argument("text")
    speak.add_argument(
        "--save", type=Path, metavar="FILE.wav", help="write the speech to a new WAV file instead of playing it"
    )
    speak.add_argument("--force", action="store_true", help="with --save: replace an existing regular file")
    speak.set_defaults(command="say")  # `speak` is the same command
    speak.add_argument("--voice", help=f"Piper voice name, file name or path (default {limits.DEFAULT_VOICE})")
    speak.add_argument("--speed", type=float, help=f"speaking rate, {limits.MIN_SPEED:g}-{limits.MAX_SPEED:g}")
    speak.add_argument("--device", help="output device id, index or name (see: mcp-listen devices --kind output)")
    speak.add_argument(
        "--barge-in",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="listen while it speaks and stop when you talk over it; --no-barge-in never opens the microphone "
        f"(default MCP_LISTEN_BARGE_IN, else {BARGE_IN_WORD})",
    )


BARGE_IN_WORD = "on" if limits.BARGE_IN_BY_DEFAULT else "off"


def _converse(sub: Any) -> None:
    converse = sub.add_parser("converse", help="say a text, then listen for the answer (converse) and print both")
    converse.add_argument("text")
    converse.add_argument("--voice", help=f"Piper voice name, file name or path (default {limits.DEFAULT_VOICE})")
    converse.add_argument("--speed", type=float, help=f"speaking rate, {limits.MIN_SPEED:g}-{limits.MAX_SPEED:g}")
    converse.add_argument("--output-device", help="speaker id, index or name (see: mcp-listen devices --kind output)")
    converse.add_argument(
        "--barge-in",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="let the user talk over the speech: it stops when they speak, and stderr says so with what was heard; "
        f"--no-barge-in listens only after it (default MCP_LISTEN_BARGE_IN, else {BARGE_IN_WORD})",
    )
    _recording_options(converse, stop_default=True, dictation=True)
    _whisper_options(converse)


def _doctor_and_config(sub: Any) -> None:
    from mcp_listen.cli.client_config import CLIENTS, RUNNERS

    doctor = sub.add_parser("doctor", help="check microphone, models and Ollama, and say how to fix what is missing")
    doctor.add_argument("--device", help="check this device id or index instead of the default input")
    doctor.add_argument(
        "--whisper-model", help=f"model name, file name or path (default {limits.DEFAULT_WHISPER_MODEL})"
    )
    doctor.add_argument("--model", help=f"Ollama model (default {limits.DEFAULT_LLM_MODEL})")
    doctor.add_argument("--voice", help=f"Piper voice to check (default {limits.DEFAULT_VOICE})")
    doctor.add_argument("--output-device", help="check this speaker id or index instead of the default output")
    doctor.add_argument("--json", action="store_true", help="print a machine-readable report")
    config = sub.add_parser("config", help="print the MCP configuration for a client")
    config.add_argument("client", choices=list(CLIENTS), metavar="CLIENT", help=", ".join(CLIENTS))
    config.add_argument(
        "--runner", choices=RUNNERS, default="pipx", help="how the client starts mcp-listen (default pipx)"
    )
    config.add_argument("--env", action="append", metavar="NAME=VALUE", help="environment variable for the server")
    config.add_argument(
        "--speak",
        action="store_true",
        help="start it with the speak extra (Piper, GPL-3.0-or-later): pipx run --spec 'mcp-listen[speak]' mcp-listen",
    )


def _whisper_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--whisper-model", help=f"model name, file name or path (default {limits.DEFAULT_WHISPER_MODEL})")
    p.add_argument("--language", help=f"language code or name, or auto (default {limits.DEFAULT_LANGUAGE})")
    p.add_argument("--translate", action="store_true", default=None, help="English text from any language")
    p.add_argument(
        "--vocabulary",
        help=f"names whisper should prefer, comma-separated, up to {limits.MAX_VOCABULARY_CHARS} characters "
        '(default MCP_LISTEN_VOCABULARY; "" for none)',
    )


def _recording_options(p: argparse.ArgumentParser, *, stop_default: bool, dictation: bool = False) -> None:
    longest = limits.MAX_DICTATION_MS if dictation else limits.MAX_DURATION_MS
    duration = f"length (a maximum with stop-on-silence), {limits.MIN_DURATION_MS}-{longest}"
    p.add_argument("--duration-ms", type=int, help=duration)
    p.add_argument("--device", help="device id, index or name (see: mcp-listen devices)")
    if stop_default:
        p.add_argument("--no-stop-on-silence", dest="stop_on_silence", action="store_false", default=None)
        p.add_argument(
            "--end-of-turn",
            choices=limits.END_OF_TURN_MODES,
            help=f"smart: wait longer while the words sound unfinished (default {limits.DEFAULT_END_OF_TURN})",
        )
        held = f"smart: the longest pause held after the last word, {limits.MIN_MAX_PAUSE_MS}-{limits.MAX_MAX_PAUSE_MS}"
        p.add_argument("--max-pause-ms", type=int, help=f"{held} (default {limits.DEFAULT_MAX_PAUSE_MS})")
        p.add_argument(
            "--end-words",
            type=end_words.split,
            metavar="WORDS",
            help=f'words or short phrases that end the turn when said last, comma-separated ("over, send it"; at most '
            f'{limits.MAX_END_WORDS}; default MCP_LISTEN_END_WORDS; "" for none)',
        )
    else:
        p.add_argument("--stop-on-silence", action="store_true", default=None)
    silence = f"silence that ends the recording, {limits.MIN_SILENCE_MS}-{limits.MAX_SILENCE_MS}"
    p.add_argument("--silence-ms", type=int, help=silence)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    opts = parser.parse_args(argv)
    from mcp_listen.config import load_settings

    settings = load_settings(log_level=opts.log_level)
    _setup_logging(settings.log_level)
    command = opts.command or "serve"
    if command == "serve":
        from mcp_listen.server.stdio import serve

        if settings.problems:  # serve anyway: every tool call and doctor will say what to fix
            log.error("invalid configuration: %s", " ".join(settings.problems))
        return serve(settings)
    try:
        if command != "doctor":
            settings.check()
        return _run_command(command, opts, settings)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except ListenError as exc:
        print(f"mcp-listen: {exc}", file=sys.stderr)
        return exc.exit_code


CONTENT_LOGGERS = ("piper",)
"""Libraries whose DEBUG lines carry what the user said or the agent speaks (Piper logs every
sentence with its phonemes): they stay at INFO or above whatever MCP_LISTEN_LOG_LEVEL says."""


def _setup_logging(level: str) -> None:
    handler = logging.StreamHandler(_log_stream())
    handler.setFormatter(logging.Formatter("mcp-listen %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in CONTENT_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.INFO, root.level))


def _log_stream() -> Any:
    """stderr for the log, through a private duplicate of fd 2: PortAudio's start (sounddevice's
    `_initialize`, at its import and at each device re-scan) points fd 2 at /dev/null while it runs,
    so a line another thread logged meanwhile was lost (a server's last word before exiting among them)."""
    try:
        fd = os.dup(sys.stderr.fileno())
    except (AttributeError, OSError, ValueError):  # no stderr, or not a file (a test's capture): as it is
        return sys.stderr
    encoding = getattr(sys.stderr, "encoding", None) or "utf-8"
    return os.fdopen(fd, "w", buffering=1, encoding=encoding, errors="backslashreplace")


def _run_command(command: str, opts: argparse.Namespace, settings: Any) -> int:
    from mcp_listen.cli import commands

    return getattr(commands, command)(opts, settings)


__all__ = ["main"]
