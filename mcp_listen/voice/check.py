"""Checking a Piper voice before anything loads it: the .onnx.json and the .onnx, both hostile.

A voice is two files someone else made: NAME.onnx (the network, onnxruntime loads it) and
NAME.onnx.json (its config, Piper reads fields from it with `config["audio"]["sample_rate"]`
and so crashes with a KeyError on anything unexpected). Both are opened only if they are
regular files (a FIFO would block forever, a device may be endless, /proc/self/fd/0 is the
server's stdin), read within a bound, and the config must hold every field Piper needs, with a
type and a range. Whatever is wrong is `voice_invalid` naming the file and the field, never a
crash; a missing file is `voice_not_found` naming the pull command.
"""

from __future__ import annotations

import json
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp_listen.contract.limits import has_control_characters
from mcp_listen.errors import VoiceError, command
from mcp_listen.files import READ_ANY_KIND
from mcp_listen.voice.names import parse_name, voice_name

MAX_CONFIG_BYTES = 4 << 20
"""Largest .onnx.json read (4 MiB). Real ones have 5 kB (one speaker) to about 100 kB (libritts_r's
904 speakers in speaker_id_map): the bound is far above them and far below a memory problem."""
MAX_VOICE_BYTES = 512 << 20
"""Largest .onnx accepted (512 MiB; the largest Piper voices, `high` quality, have about 115 MB)."""
MIN_VOICE_BYTES = 1024
"""Smaller than any network: a truncated download or a placeholder."""
SAMPLE_RATES = (8000, 48000)
"""The sample rates a voice may declare, inclusive (Piper's voices use 16000 and 22050)."""
MAX_SPEAKERS = 10_000
MAX_SYMBOLS = 100_000
PHONEME_TYPES = ("espeak", "text", "pinyin", "hebrew", "japanese", "thai")
"""What piper-tts 1.8's PhonemeType accepts; another value makes it raise ValueError."""
MAX_ESPEAK_VOICE_CHARS = 64
ONNX_IR_VERSIONS = (3, 20)
"""An ONNX ModelProto starts with field 1, ir_version (tag byte 0x08, then a varint): 3 is ONNX
1.0's, 10 today's; anything else is not an ONNX file."""
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""Unicode's direction marks, embeddings, overrides and isolates. Printed to a terminal from a file someone
else wrote (a model card, a config's language), U+202E shows what follows reversed: `txt.exe` reads as
`exe.txt`, a command as another. No voice field needs one, and a card reads the same without them."""


def shown_text(text: str, keep: str = "") -> str:
    """`text` as it may be printed: without control characters (those in `keep` aside, e.g. newline and
    tab), which could rewrite the terminal, nor BIDI_CONTROLS, which reorder what it shows."""
    return "".join(c for c in text if c in keep or not (has_control_characters(c) or c in BIDI_CONTROLS))


_NOT_A_FILE = [
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
]


@dataclass(frozen=True)
class VoiceInfo:
    """A voice whose two files passed the checks."""

    name: str
    path: Path
    """The .onnx file."""
    language: str
    """The config's language code (`en_US`), else the name's, else the espeak voice."""
    quality: str | None
    sample_rate: int
    num_speakers: int
    size_bytes: int
    """Of the .onnx file."""

    @property
    def config_path(self) -> Path:
        return config_path(self.path)


def config_path(onnx: Path) -> Path:
    return onnx.with_name(onnx.name + ".json")


def check_voice(onnx: Path) -> VoiceInfo:
    """Both files of a voice, checked; VoiceError (voice_not_found, voice_invalid) otherwise."""
    config = read_config(config_path(onnx))
    size = check_onnx(onnx)
    name = voice_name(onnx)
    audio = config["audio"]
    parsed = parse_name(name)
    language = config.get("language", {}).get("code") if isinstance(config.get("language"), dict) else None
    if not _short_text(language):
        language = parsed.code if parsed else config["espeak"]["voice"]
    quality = audio.get("quality") if _short_text(audio.get("quality")) else (parsed.quality if parsed else None)
    rate, speakers = int(audio["sample_rate"]), int(config["num_speakers"])
    return VoiceInfo(name, onnx, str(language), quality, rate, speakers, size)


def read_config(path: Path) -> dict[str, Any]:
    """The voice's .onnx.json as a dict holding every field Piper reads, each of the right type."""
    raw = _read_bounded(path, MAX_CONFIG_BYTES, "config")
    try:
        config = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise _invalid(path, "is not UTF-8 text") from None
    except (ValueError, RecursionError):  # JSONDecodeError, an integer too long, nesting too deep
        raise _invalid(path, "is not valid JSON") from None
    if not isinstance(config, dict):
        raise _invalid(path, "is not a JSON object")
    _check_fields(path, config)
    return config


def _check_fields(path: Path, config: dict[str, Any]) -> None:
    audio = config.get("audio")
    if not isinstance(audio, dict) or not _whole(audio.get("sample_rate"), *SAMPLE_RATES):
        raise _invalid(path, f"needs audio.sample_rate, an integer from {SAMPLE_RATES[0]} to {SAMPLE_RATES[1]}")
    if not _whole(config.get("num_speakers"), 1, MAX_SPEAKERS):
        raise _invalid(path, f"needs num_speakers, an integer from 1 to {MAX_SPEAKERS}")
    if not _whole(config.get("num_symbols"), 1, MAX_SYMBOLS):
        raise _invalid(path, f"needs num_symbols, an integer from 1 to {MAX_SYMBOLS}")
    phoneme_type = config.get("phoneme_type", "espeak")
    if phoneme_type not in PHONEME_TYPES:
        raise _invalid(path, "has a phoneme_type Piper does not know (" + ", ".join(PHONEME_TYPES) + ")")
    espeak = config.get("espeak")
    if not isinstance(espeak, dict) or not _short_text(espeak.get("voice")):
        raise _invalid(path, f"needs espeak.voice, a name of 1 to {MAX_ESPEAK_VOICE_CHARS} characters")
    _check_phoneme_map(path, config.get("phoneme_id_map"), config["num_symbols"])
    _check_optional(path, config)


def _check_phoneme_map(path: Path, mapping: Any, num_symbols: int) -> None:
    """phoneme -> [id, ...]: every id an index into the network's num_symbols embeddings."""
    if not isinstance(mapping, dict) or not mapping:
        raise _invalid(path, "needs phoneme_id_map, an object mapping each phoneme to a list of ids")
    for ids in mapping.values():
        if not isinstance(ids, list) or not ids or not all(_whole(i, 0, num_symbols - 1) for i in ids):
            raise _invalid(path, f"has a phoneme_id_map entry that is not a list of ids from 0 to {num_symbols - 1}")


def _check_optional(path: Path, config: dict[str, Any]) -> None:
    """The fields Piper reads only when present: wrong types would crash it mid-sentence."""
    speakers = config.get("speaker_id_map", {})
    if not isinstance(speakers, dict) or not all(_whole(i, 0, MAX_SPEAKERS) for i in speakers.values()):
        raise _invalid(path, "has a speaker_id_map that is not an object of speaker ids")
    inference = config.get("inference", {})
    if not isinstance(inference, dict):
        raise _invalid(path, "has an inference field that is not an object")
    for key in ("noise_scale", "length_scale", "noise_w"):
        value = inference.get(key, 1.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value <= 100):
            raise _invalid(path, f"has inference.{key} that is not a number above 0 and at most 100")


def check_onnx(path: Path) -> int:
    """The .onnx file's size once it is a regular file of a sane size that starts like an ONNX model."""
    fd, st = open_regular(path, "network")
    try:
        if not (MIN_VOICE_BYTES <= st.st_size <= MAX_VOICE_BYTES):
            raise _invalid(
                path, f"has {st.st_size} bytes; a Piper voice has {MIN_VOICE_BYTES} to {MAX_VOICE_BYTES} bytes"
            )
        head = os.pread(fd, 16, 0)
    finally:
        os.close(fd)
    if not looks_like_onnx(head):
        raise _invalid(path, "is not an ONNX model (it does not start with an ONNX ir_version)")
    return st.st_size


def looks_like_onnx(head: bytes) -> bool:
    """Whether `head` starts as an ONNX ModelProto does: tag 0x08 (field 1, varint), then a
    small ir_version. Cheap, and enough to tell a voice from a WAV, a JSON or an HTML error page."""
    if len(head) < 2 or head[0] != 0x08:
        return False
    version, shift = 0, 0
    for byte in head[1:6]:
        version |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return ONNX_IR_VERSIONS[0] <= version <= ONNX_IR_VERSIONS[1]
        shift += 7
    return False


def _read_bounded(path: Path, limit: int, what: str) -> bytes:
    fd, st = open_regular(path, what)
    try:
        if st.st_size > limit:
            raise _invalid(path, f"has {st.st_size} bytes, more than the {limit} a voice {what} may have")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)  # the size can grow after fstat: the read is bounded too
    finally:
        os.close(fd)
    if len(data) > limit:
        raise _invalid(path, f"has more than the {limit} bytes a voice {what} may have")
    return data


def open_regular(path: Path, what: str) -> tuple[int, os.stat_result]:
    """A descriptor (the caller closes it) on `path` if, and only if, it is a regular file: checked by name first (so a
    device is not even opened), then on the descriptor, which is what counts."""
    try:
        _refuse_special(path, os.stat(path))
        fd = os.open(path, READ_ANY_KIND)
    except OSError as exc:
        raise _os_error(path, exc, what) from None
    try:
        st = os.fstat(fd)
        _refuse_special(path, st)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _refuse_special(path: Path, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _NOT_A_FILE if test(st.st_mode)), "not a regular file")
        raise _invalid(path, f"is {kind}, not a voice file; it was not read")


def _os_error(path: Path, exc: OSError, what: str) -> VoiceError:
    if isinstance(exc, FileNotFoundError):
        return VoiceError(
            f"The voice {what} {path} does not exist: a Piper voice is NAME.onnx with NAME.onnx.json "
            f"beside it. {_remedy(path)}",
            code="voice_not_found",
        )
    return _invalid(path, f"cannot be read ({exc.strerror})")


def _invalid(path: Path, problem: str) -> VoiceError:
    return VoiceError(f"The Piper voice file {path} {problem}. {_remedy(path)}", code="voice_invalid")


def _remedy(path: Path) -> str:
    """Pull the voice again when its name is a Piper name; else choose another (a file name is
    not something `voices pull` can fetch)."""
    name = voice_name(path)
    if parse_name(name) is not None:
        return f"Download it (again) with: {command('voices', 'pull', name)}"
    return "Choose another voice: mcp-listen voices lists the valid ones."


def _whole(value: Any, low: int, high: int) -> bool:
    """An integer in [low, high]; JSON's 22050.0 counts, a bool or NaN does not."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        return False
    return low <= value <= high


def _short_text(value: Any) -> bool:
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAX_ESPEAK_VOICE_CHARS
        and shown_text(value) == value
        and value.strip() == value
    )
