"""Where whisper models live, which are there, and `models pull` to fetch one safely.

A pull streams into `ggml-NAME.bin.partial` (mcp_listen/downloads.py: bounded in size and time,
Ctrl-C safe, never through a link) and renames it to `ggml-NAME.bin` only once the whole file
arrived and was verified, so an interrupted or corrupt download never leaves a file that
whisper.cpp would crash on. Verification here is the published SHA-1 (when the name is a
standard model) plus the GGML magic bytes; the structural check of the file lives in
`whisper.admission.validate_model_file` (components do not import each other; the caller
composes). The credentials MCP_LISTEN_MODELS_URL may carry are sent as HTTP basic auth, never
shown.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mcp_listen import downloads
from mcp_listen.downloads import partials
from mcp_listen.errors import TranscriptionError, command
from mcp_listen.whisper.names import SUGGESTED_MODEL, short_name

if TYPE_CHECKING:
    from mcp_listen.config import Settings

log = logging.getLogger(__name__)

GGML_MAGIC = b"lmgg"
NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]*")
"""A model name, matched whole (`fullmatch`: `$` would let a trailing newline through)."""
MAX_NAME_CHARS = 64
"""Longest name `models pull` takes. The standard names have at most 14 characters; the name
ends up in a file name (`ggml-NAME.bin.partial`), which file systems cap at 255 bytes."""
MAX_MODEL_BYTES = 4 << 30
"""Most a pull downloads (4 GiB; large-v3, the largest standard model, is 3.1 GB), so a server
sending an endless body cannot fill the disk. `pull(max_bytes=...)` overrides it."""

# SHA-1 of the files at huggingface.co/ggerganov/whisper.cpp, as published in whisper.cpp's
# models/README.md ("Available models"). Upstream publishes SHA-1, not SHA-256.
STANDARD_MODELS_SHA1: dict[str, str] = {
    "tiny": "bd577a113a864445d4c299885e0cb97d4ba92b5f",
    "tiny.en": "c78c86eb1a8faa21b369bcd33207cc90d64ae9df",
    "base": "465707469ff3a37a2b9b8d8f89f2f99de7299dac",
    "base.en": "137c40403d78fd54d454da0f9bd998f78703390c",
    "small": "55356645c2b361a969dfd0ef2c5a50d530afd8d5",
    "small.en": "db8a495a91d927739e50b3fc1cc4c6b8f6c2d022",
    "medium": "fd9727b6e1217c2f614f9b698455c4ffd82463b4",
    "medium.en": "8c30f0e44ce9560643ebd10bbe50cd20eafd3723",
    "large-v3": "ad82bf6a9043ceed055076d0fd39f5f186ff8062",
    "large-v3-turbo": "4af2b29d7ec73d781377bfd1758ca957a807e941",
}
STANDARD_MODELS: tuple[str, ...] = tuple(STANDARD_MODELS_SHA1)

_LARGEST = "(large-v3, the largest standard model, has 3.1 GB)"


def _source(name: str) -> downloads.Source:
    return downloads.Source(
        noun="model",
        label=f"ggml-{name}.bin",
        what="a whisper model",
        largest=_LARGEST,
        url_setting="MCP_LISTEN_MODELS_URL",
        retry=command("models", "pull", name),
        not_there=f"Standard models: {', '.join(STANDARD_MODELS)}",
        error=TranscriptionError,
    )


@dataclass(frozen=True)
class ModelInfo:
    """A whisper model file found in one of the search folders."""

    name: str
    """Short name, as `models pull` and `whisper_model` take it (`base.en`)."""
    size_bytes: int
    path: Path


def search_dirs(settings: Settings) -> list[Path]:
    """Folders searched for models, in order (WHISPER_MODEL_PATH first, then models_dir)."""
    return [Path(d).expanduser() for d in settings.model_search_dirs]


def list_models(settings: Settings) -> list[ModelInfo]:
    """Every ggml-*.bin in the search folders, folder order first, then by name."""
    found: list[ModelInfo] = []
    for folder in search_dirs(settings):
        try:
            files = sorted(p for p in folder.glob("ggml-*.bin") if p.is_file())
        except OSError:
            continue
        for path in files:
            try:
                size = path.stat().st_size
            except OSError:
                continue
            found.append(ModelInfo(name=short_name(path.name), size_bytes=size, path=path))
    return found


def model_url(name: str, settings: Settings) -> str:
    return f"{settings.models_url.rstrip('/')}/ggml-{name}.bin"


def pull(
    name: str,
    settings: Settings,
    *,
    progress: bool = True,
    force: bool = False,
    hashes: Mapping[str, str] | None = None,
    max_bytes: int | None = None,
    deadline_s: float | None = None,
) -> Path:
    """Download ggml-NAME.bin into settings.models_dir and return its path.

    An existing, verified file is kept unless `force`. `hashes` (name -> SHA-1) replaces the
    standard table, for mirrors and tests. `max_bytes` (default MAX_MODEL_BYTES) and
    `deadline_s` (default: scaled to the size) bound the download. Progress goes to stderr,
    never stdout.
    """
    _check_name(name)
    table = STANDARD_MODELS_SHA1 if hashes is None else hashes
    expected = table.get(name)
    models_dir = Path(settings.models_dir).expanduser()
    retry = command("models", "pull", name)
    fix = f"Move or rename that file (models go into {models_dir}, which HOME decides), then retry: {retry}"
    folder = downloads.ensure_folder(models_dir, TranscriptionError, "models", fix)
    partials.sweep(folder, _is_partial_name)
    final = folder / f"ggml-{name}.bin"
    if final.is_file() and not force and _already_good(final, expected):
        log.info("model %s already present", final.name)
        return final
    partial = folder / f"ggml-{name}.bin.partial"
    limit = MAX_MODEL_BYTES if max_bytes is None else max_bytes
    job = downloads.Job(_source(name), partial, progress, limit, deadline_s, algorithms=("sha1",))
    with downloads.exit_on_signals():
        try:
            digest = downloads.download(model_url(name, settings), job)["sha1"]
            _verify(partial, name, expected, digest)
            partials.install(partial, final)
        except BaseException:
            partials.remove(partial)
            raise
    if expected is None:
        log.warning("no published checksum for %s: verified by GGML header only", final.name)
    return final


def _is_partial_name(file_name: str) -> bool:
    """`ggml-NAME.bin.partial` for a name `models pull` takes: a partial of ours (partials.sweep)."""
    name = file_name.removeprefix("ggml-").removesuffix(".bin.partial")
    return file_name == f"ggml-{name}.bin.partial" and _valid_name(name)


def _valid_name(name: str) -> bool:
    return (
        isinstance(name, str)
        and len(name) <= MAX_NAME_CHARS
        and bool(NAME_PATTERN.fullmatch(name))
        and ".." not in name
    )


def _check_name(name: str) -> None:
    if not _valid_name(name):
        shown = name[:MAX_NAME_CHARS] + "..." if isinstance(name, str) and len(name) > MAX_NAME_CHARS else name
        raise TranscriptionError(
            f"{shown!r} is not a whisper model name. Use a name like {SUGGESTED_MODEL} (at most "
            f"{MAX_NAME_CHARS} characters); standard models: " + ", ".join(STANDARD_MODELS),
            code="unknown_model",
        )


def _already_good(path: Path, expected: str | None) -> bool:
    with open(path, "rb") as f:
        if f.read(4) != GGML_MAGIC:
            return False
    return expected is None or downloads.digest_of(path, "sha1") == expected


def _verify(partial: Path, name: str, expected: str | None, digest: str) -> None:
    with open(partial, "rb") as f:
        magic = f.read(4)
    if magic != GGML_MAGIC:
        raise TranscriptionError(
            f"The server did not send a whisper.cpp model for {name} (no GGML header). Check MCP_LISTEN_MODELS_URL.",
            code="download_failed",
        )
    if expected is not None and digest != expected.lower():
        raise TranscriptionError(
            f"ggml-{name}.bin failed its checksum (SHA-1 {digest}, expected {expected}); it was discarded. "
            f"Retry: {command('models', 'pull', name)}",
            code="checksum_mismatch",
        )
