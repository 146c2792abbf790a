"""Piper voice names: `en_US-lessac-medium` <-> its parts and its place in the voices repository,
and a voice argument (name, file name or path) -> an existing `.onnx` file.

Pure path logic: no file is opened here (voice/check.py reads them). A caller's string is
bounded and free of control characters before it touches a path, and only a name that matches
NAME_PATTERN whole ever becomes part of a URL.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from mcp_listen.contract.limits import MAX_VOICE_CHARS, has_control_characters
from mcp_listen.errors import InvalidArgument, VoiceError, command

SUGGESTED_VOICE = "en_US-lessac-medium"
"""The voice a remedy suggests pulling: Piper's own documentation's example voice."""
QUALITIES = ("x_low", "low", "medium", "high")
NAME_PATTERN = re.compile(
    r"(?P<family>[a-z]{2,3})_(?P<region>[A-Z]{2})-(?P<dataset>[a-z0-9][a-z0-9_]{0,63})-(?P<quality>x_low|low|medium|high)"
)
"""A Piper voice name, matched whole: `{language}_{REGION}-{dataset}-{quality}`, as the piper-voices
repository names every voice (`zh_CN-huayan-x_low`, `en_US-hfc_female-medium`)."""
SUFFIX, CONFIG_SUFFIX = ".onnx", ".onnx.json"


@dataclass(frozen=True)
class VoiceName:
    """A voice name taken apart: where it lives in the repository."""

    name: str
    family: str
    """Language family, the repository's first folder (`en`)."""
    code: str
    """Language code (`en_US`)."""
    dataset: str
    quality: str

    @property
    def folder(self) -> str:
        """The voice's folder in the repository: `en/en_US/lessac/medium`."""
        return f"{self.family}/{self.code}/{self.dataset}/{self.quality}"


def parse_name(name: str) -> VoiceName | None:
    """The parts of a Piper voice name; None for anything else (a file name, a path, junk)."""
    match = NAME_PATTERN.fullmatch(name) if isinstance(name, str) else None
    if match is None:
        return None
    family, region = match["family"], match["region"]
    return VoiceName(name, family, f"{family}_{region}", match["dataset"], match["quality"])


def require_name(name: str) -> VoiceName:
    """A name `voices pull` may put into a URL, or `unknown_voice` saying what one looks like."""
    parsed = parse_name(name)
    if parsed is None:
        shown = name[:80] + "..." if isinstance(name, str) and len(name) > 80 else name
        raise VoiceError(
            f"{shown!r} is not a Piper voice name. Use a name like {SUGGESTED_VOICE} "
            "(language_REGION-dataset-quality, quality one of " + ", ".join(QUALITIES) + "); the voices are "
            "listed at https://huggingface.co/rhasspy/piper-voices",
            code="unknown_voice",
        )
    return parsed


def check_argument(voice: str) -> str:
    """A voice argument, stripped, once it is bounded text: refused before any file is looked at."""
    if not isinstance(voice, str) or not voice.strip():
        raise InvalidArgument("voice must be a Piper voice name, file name or path (a non-empty string)")
    if len(voice) > MAX_VOICE_CHARS or has_control_characters(voice):
        raise InvalidArgument(
            f"voice must be at most {MAX_VOICE_CHARS} characters without control characters; "
            f"got {len(voice)} characters"
        )
    return voice.strip()


def voice_name(path: Path | str) -> str:
    """`/x/en_US-joe-medium.onnx`, `en_US-joe-medium.onnx.json` or `en_US-joe-medium` -> `en_US-joe-medium`."""
    base = Path(path).name
    for suffix in (CONFIG_SUFFIX, SUFFIX):
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base


def resolve_voice(voice: str, search_dirs: list[Path]) -> Path:
    """Turn a voice argument into the path of an existing NAME.onnx; never downloads anything.

    An absolute or `~` path as is; a relative path under each voices folder, then the working
    directory; a name (`en_US-lessac-medium`) or file name (`en_US-lessac-medium.onnx`) in each
    voices folder, in order. `.onnx.json` names the same voice as `.onnx`. The config beside it
    and both files' contents are voice/check.py's business.
    """
    voice = check_argument(voice)
    wanted = _onnx_name(voice)
    if os.path.isabs(voice) or voice.startswith("~"):
        path = _expand(wanted)
        if _exists(path):
            return path
        raise _not_found(voice, f"{path} does not exist")
    relative_path = _looks_like_path(voice)
    folders = [*search_dirs, Path.cwd()] if relative_path else list(search_dirs)
    for folder in folders:
        candidate = folder / wanted
        if _exists(candidate):
            return candidate
    where = ", ".join(str(d) for d in folders) or "no folder (MCP_LISTEN_VOICES_PATH is empty)"
    raise _not_found(voice, f"looked for {wanted} in {where}")


def _onnx_name(voice: str) -> str:
    if voice.endswith(CONFIG_SUFFIX):
        return voice[: -len(".json")]
    return voice if voice.endswith(SUFFIX) else voice + SUFFIX


def _not_found(voice: str, detail: str) -> VoiceError:
    name = voice_name(voice)
    if parse_name(name) is not None:
        remedy = f"Download it with: {command('voices', 'pull', name)}"
    else:
        remedy = (
            f"Give a Piper voice name such as {SUGGESTED_VOICE} (then: {command('voices', 'pull', SUGGESTED_VOICE)})"
        )
    return VoiceError(f'Piper voice "{voice}" not found: {detail}. {remedy}', code="voice_not_found")


def _looks_like_path(name: str) -> bool:
    seps = [os.sep] + ([os.altsep] if os.altsep else [])
    return any(s in name for s in seps)


def _expand(name: str) -> Path:
    """`~/x` and `~user/x`; a user that does not exist is a named error, not a crash."""
    try:
        return Path(name).expanduser()
    except RuntimeError:
        raise VoiceError(
            f"Voice path {name!r} names the home folder of a user that does not exist. "
            "Give an absolute path or a path under your own home (~/...).",
            code="voice_not_found",
        ) from None


def _exists(path: Path) -> bool:
    """Whether anything is at `path`, a dangling link included (the check then says what it is);
    never raises: a folder we may not look into reads as nothing there."""
    return os.path.lexists(path)
