"""Where whisper models live, which are there, and `models pull` to fetch one safely.

A pull streams into `ggml-NAME.bin.partial` and renames it to `ggml-NAME.bin` only once the
whole file arrived and was verified, so an interrupted or corrupt download never leaves a file
that whisper.cpp would crash on. Verification here is the published SHA-1 (when the name is a
standard model) plus the GGML magic bytes; the structural check of the file lives in
`model_check.validate_model_file` (components do not import each other; the caller composes).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from mcp_listen.errors import TranscriptionError, command
from mcp_listen.model_names import SUGGESTED_MODEL, short_name

if TYPE_CHECKING:
    from mcp_listen.config import Settings

log = logging.getLogger(__name__)

GGML_MAGIC = b"lmgg"
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
CHUNK = 1 << 20

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
) -> Path:
    """Download ggml-NAME.bin into settings.models_dir and return its path.

    An existing, verified file is kept unless `force`. `hashes` (name -> SHA-1) replaces the
    standard table, for mirrors and tests. Progress goes to stderr, never stdout.
    """
    _check_name(name)
    table = STANDARD_MODELS_SHA1 if hashes is None else hashes
    expected = table.get(name)
    folder = _ensure_folder(Path(settings.models_dir).expanduser())
    final = folder / f"ggml-{name}.bin"
    if final.is_file() and not force and _already_good(final, expected):
        log.info("model %s already present", final.name)
        return final
    partial = folder / f"ggml-{name}.bin.partial"
    try:
        digest = _download(model_url(name, settings), partial, name, progress)
        _verify(partial, name, expected, digest)
        os.replace(partial, final)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    if expected is None:
        log.warning("no published checksum for %s: verified by GGML header only", final.name)
    return final


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not NAME_PATTERN.match(name) or ".." in name:
        raise TranscriptionError(
            f"{name!r} is not a whisper model name. Use a name like {SUGGESTED_MODEL}; standard models: "
            + ", ".join(STANDARD_MODELS),
            code="unknown_model",
        )


def _ensure_folder(folder: Path) -> Path:
    """Create the per-user model folder private (0700); leave an existing folder's mode alone."""
    if not folder.is_dir():
        try:
            folder.mkdir(parents=True, mode=0o700)
            os.chmod(folder, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise TranscriptionError(
                f"Cannot create the model folder {folder}: {exc.strerror}.", code="download_failed"
            ) from None
    return folder


def _already_good(path: Path, expected: str | None) -> bool:
    with open(path, "rb") as f:
        if f.read(4) != GGML_MAGIC:
            return False
    return expected is None or _sha1_of(path) == expected


def _sha1_of(path: Path) -> str:
    h = hashlib.sha1()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _download(url: str, partial: Path, name: str, progress: bool) -> str:
    """Stream `url` into `partial`; return the SHA-1 of what was written."""
    import httpx

    try:
        with httpx.Client(follow_redirects=True, timeout=httpx.Timeout(60.0, connect=15.0)) as client:
            with client.stream("GET", url) as response:
                _check_status(response, url, name)
                return _write_body(response, partial, name, progress)
    except httpx.HTTPError as exc:
        raise TranscriptionError(
            f"Download of ggml-{name}.bin from {url} failed ({type(exc).__name__}: {exc}). "
            f"Check the network and retry: {command('models', 'pull', name)}",
            code="download_failed",
        ) from None


def _check_status(response: Any, url: str, name: str) -> None:
    if response.status_code == 404:
        raise TranscriptionError(
            f"No model ggml-{name}.bin at {url} (HTTP 404). Standard models: {', '.join(STANDARD_MODELS)}",
            code="download_failed",
        )
    if response.status_code != 200:
        raise TranscriptionError(
            f"Download of ggml-{name}.bin failed: HTTP {response.status_code} from {url}. "
            f"Retry later: {command('models', 'pull', name)}",
            code="download_failed",
        )


def _write_body(response: Any, partial: Path, name: str, progress: bool) -> str:
    from tqdm import tqdm

    length = response.headers.get("content-length")
    total = int(length) if length and length.isdigit() else None
    h, received = hashlib.sha1(), 0
    bar = tqdm(
        total=total, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr,
        disable=not progress, desc=f"ggml-{name}.bin", leave=False,
    )
    with bar, open(partial, "wb") as out:
        for chunk in response.iter_bytes(CHUNK):
            out.write(chunk)
            h.update(chunk)
            received += len(chunk)
            bar.update(len(chunk))
    if total is not None and received != total:
        raise TranscriptionError(
            f"Download of ggml-{name}.bin was cut short ({received} of {total} bytes). "
            f"Retry: {command('models', 'pull', name)}",
            code="download_failed",
        )
    return h.hexdigest()


def _verify(partial: Path, name: str, expected: str | None, digest: str) -> None:
    with open(partial, "rb") as f:
        magic = f.read(4)
    if magic != GGML_MAGIC:
        raise TranscriptionError(
            f"The server did not send a whisper.cpp model for {name} (no GGML header). "
            "Check MCP_LISTEN_MODELS_URL.",
            code="download_failed",
        )
    if expected is not None and digest != expected.lower():
        raise TranscriptionError(
            f"ggml-{name}.bin failed its checksum (SHA-1 {digest}, expected {expected}); it was discarded. "
            f"Retry: {command('models', 'pull', name)}",
            code="checksum_mismatch",
        )
