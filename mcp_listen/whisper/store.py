"""Where whisper models live, which are there, and `models pull` to fetch one safely.

A pull streams into `ggml-NAME.bin.partial` and renames it to `ggml-NAME.bin` only once the
whole file arrived and was verified, so an interrupted or corrupt download never leaves a file
that whisper.cpp would crash on. Verification here is the published SHA-1 (when the name is a
standard model) plus the GGML magic bytes; the structural check of the file lives in
`whisper.admission.validate_model_file` (components do not import each other; the caller composes).

The server is not trusted to behave: a pull is bounded in size (MAX_MODEL_BYTES, and never more
than the announced Content-Length) and in time (a deadline that grows with the size, checked
after every chunk, so a trickle ends too). The partial is created afresh, 0600, never through a
link a previous pull or someone else left there. Ctrl-C, SIGTERM and SIGHUP (unless ignored)
remove it before the process exits (130, 143, 129). The credentials MCP_LISTEN_MODELS_URL may
carry are sent as HTTP basic auth, never shown: messages name the URL through `redact_url`.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from mcp_listen.config import redact_url
from mcp_listen.errors import TranscriptionError, command
from mcp_listen.files import NEW_FILE
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
CHUNK = 1 << 20
"""Block size for hashing a file already on disk."""
MAX_MODEL_BYTES = 4 << 30
"""Most a pull downloads (4 GiB; large-v3, the largest standard model, is 3.1 GB), so a server
sending an endless body cannot fill the disk. `pull(max_bytes=...)` overrides it."""
BASE_DEADLINE_S = 60.0
MIN_RATE_BYTES_PER_S = 50_000
"""A pull must end within BASE_DEADLINE_S plus its size at this rate (50 kB/s: base.en within
50 min, large-v3 within 17 h; without a Content-Length the size is taken as MAX_MODEL_BYTES)."""
CONNECT_TIMEOUT_S, READ_TIMEOUT_S = 15.0, 60.0
"""Per connection attempt and per read. A read timeout alone never ends a 1 byte/s trickle: the
overall deadline does, and a read timeout bounds how late it can notice."""
EXIT_ON_SIGNALS = ("SIGTERM", "SIGHUP")
"""Signals that, during a download, exit with 128 + signum after removing the partial (their
default action would kill the process and leave it behind). SIGINT already raises
KeyboardInterrupt."""

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


@dataclass(frozen=True)
class ModelInfo:
    """A whisper model file found in one of the search folders."""

    name: str
    """Short name, as `models pull` and `whisper_model` take it (`base.en`)."""
    size_bytes: int
    path: Path


@dataclass(frozen=True)
class _Job:
    """One pull's target and bounds, as the download helpers need them."""

    name: str
    partial: Path
    progress: bool
    max_bytes: int
    deadline_s: float | None
    """None: BASE_DEADLINE_S plus the size at MIN_RATE_BYTES_PER_S."""
    started: float = field(default_factory=time.monotonic)


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
    folder = _ensure_folder(Path(settings.models_dir).expanduser())
    final = folder / f"ggml-{name}.bin"
    if final.is_file() and not force and _already_good(final, expected):
        log.info("model %s already present", final.name)
        return final
    partial = folder / f"ggml-{name}.bin.partial"
    limit = MAX_MODEL_BYTES if max_bytes is None else max_bytes
    job = _Job(name=name, partial=partial, progress=progress, max_bytes=limit, deadline_s=deadline_s)
    with _exit_on_signals():
        try:
            digest = _download(model_url(name, settings), job)
            _verify(partial, name, expected, digest)
            os.replace(partial, final)
        except BaseException:
            _remove_partial(partial)
            raise
    if expected is None:
        log.warning("no published checksum for %s: verified by GGML header only", final.name)
    return final


def _check_name(name: str) -> None:
    if not isinstance(name, str) or len(name) > MAX_NAME_CHARS or not NAME_PATTERN.fullmatch(name) or ".." in name:
        shown = name[:MAX_NAME_CHARS] + "..." if isinstance(name, str) and len(name) > MAX_NAME_CHARS else name
        raise TranscriptionError(
            f"{shown!r} is not a whisper model name. Use a name like {SUGGESTED_MODEL} (at most "
            f"{MAX_NAME_CHARS} characters); standard models: " + ", ".join(STANDARD_MODELS),
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


@contextlib.contextmanager
def _exit_on_signals() -> Iterator[None]:
    """Turn EXIT_ON_SIGNALS into SystemExit(128 + signum) while the body runs, so the cleanup
    in `pull` (an `except BaseException`) removes the partial; restore the handlers after.

    Only signals still at their default action are taken over: a handler someone installed, or
    an ignored SIGHUP (nohup), is theirs. Only in the main thread, the one signal.signal works in.
    """
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in filter(None, (getattr(signal, n, None) for n in EXIT_ON_SIGNALS)):
            if signal.getsignal(sig) == signal.SIG_DFL:
                previous[sig] = signal.signal(sig, _raise_exit)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _raise_exit(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _download(url: str, job: _Job) -> str:
    """Stream `url` into the job's partial; return the SHA-1 of what was written."""
    import httpx

    timeout = httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    identity = {"Accept-Encoding": "identity"}  # the body is the file itself: Content-Length bounds it
    try:
        bare, auth = _split_credentials(url)
        with httpx.Client(follow_redirects=True, timeout=timeout, auth=auth, headers=identity) as client:
            with client.stream("GET", bare) as response:
                _check_status(response, redact_url(url), job.name)
                return _write_body(response, job)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise TranscriptionError(
            f"Download of ggml-{job.name}.bin from {redact_url(url)} failed ({_failure_text(exc, url)}). "
            f"Check the network and MCP_LISTEN_MODELS_URL, then retry: {command('models', 'pull', job.name)}",
            code="download_failed",
        ) from None


def _split_credentials(url: str) -> tuple[Any, Any]:
    """`url` without its `user:password@`, and the basic auth that sends them instead: httpx logs
    every request's URL (at INFO), and a URL that carries them would put them in the log."""
    import httpx

    parsed = httpx.URL(url)
    if not parsed.userinfo:
        return parsed, None
    return parsed.copy_with(userinfo=b""), httpx.BasicAuth(parsed.username, parsed.password)


def _failure_text(exc: Exception, url: str) -> str:
    """`Type: text` of an httpx error; only the type if the text holds any of the URL's
    credentials (httpx puts URLs in some of its messages)."""
    text = str(exc)
    userinfo = url.split("://", 1)[-1].partition("/")[0].rpartition("@")[0]
    secrets = {userinfo, *userinfo.split(":"), unquote(userinfo), *unquote(userinfo).split(":")} - {""}
    if not text or any(secret in text for secret in secrets):
        return type(exc).__name__
    return f"{type(exc).__name__}: {text}"


def _check_status(response: Any, shown_url: str, name: str) -> None:
    """Refuse anything but 200; `shown_url` is the URL as a message may show it (redacted)."""
    if response.status_code == 404:
        raise TranscriptionError(
            f"No model ggml-{name}.bin at {shown_url} (HTTP 404). Standard models: {', '.join(STANDARD_MODELS)}",
            code="download_failed",
        )
    if response.status_code != 200:
        raise TranscriptionError(
            f"Download of ggml-{name}.bin failed: HTTP {response.status_code} from {shown_url}. "
            f"Retry later: {command('models', 'pull', name)}",
            code="download_failed",
        )


def _write_body(response: Any, job: _Job) -> str:
    """Write the body to the partial while it stays within its size and the deadline."""
    from tqdm import tqdm

    length = response.headers.get("content-length")
    total = int(length) if length and length.isdigit() else None
    if total is not None and total > job.max_bytes:
        raise _too_large(job, total)
    limit = job.max_bytes if total is None else total
    allowed_s = _deadline_s(limit) if job.deadline_s is None else job.deadline_s
    h, received = hashlib.sha1(), 0
    with (
        os.fdopen(_open_partial(job), "wb") as out,
        tqdm(
            total=total,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            file=sys.stderr,
            disable=not job.progress,
            desc=f"ggml-{job.name}.bin",
            leave=False,
        ) as bar,
    ):
        for chunk in response.iter_bytes():  # no chunk size: each read's bytes as they arrive
            received += len(chunk)
            if received > limit:
                raise _overrun(job, total)
            out.write(chunk)
            h.update(chunk)
            bar.update(len(chunk))
            if time.monotonic() - job.started > allowed_s:
                raise _too_slow(job, received, total, allowed_s)
    if total is not None and received != total:
        raise TranscriptionError(
            f"Download of ggml-{job.name}.bin was cut short ({received} of {total} bytes). "
            f"Retry: {command('models', 'pull', job.name)}",
            code="download_failed",
        )
    return h.hexdigest()


def _deadline_s(size_bytes: int) -> float:
    """Seconds a download of `size_bytes` may take in all (see MIN_RATE_BYTES_PER_S)."""
    return BASE_DEADLINE_S + size_bytes / MIN_RATE_BYTES_PER_S


def _open_partial(job: _Job) -> int:
    """Create the partial afresh (0600) and return its descriptor; never write through a link.

    A leftover (a killed pull's, or a symlink planted so the pull overwrites its target) is
    unlinked first, which removes a link itself, never what it points at. O_EXCL then refuses
    whatever reappears in between, O_NOFOLLOW a link in its place.
    """
    _remove_partial(job.partial)
    try:
        return os.open(job.partial, NEW_FILE, 0o600)
    except OSError as exc:
        raise TranscriptionError(
            f"Cannot create {job.partial}: {exc.strerror}. "
            f"Remove it, then retry: {command('models', 'pull', job.name)}",
            code="download_failed",
        ) from None


def _remove_partial(partial: Path) -> None:
    """Unlink the partial (a link itself, not its target). Quiet when there is none; logged,
    not raised, when it cannot go (a directory in its place): the error being cleaned up after
    is the one to report."""
    try:
        os.unlink(partial)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("cannot remove %s: %s", partial, exc.strerror)


def _too_large(job: _Job, total: int) -> TranscriptionError:
    return TranscriptionError(
        f"The server announces ggml-{job.name}.bin as {_size(total)}, more than the {_size(job.max_bytes)} "
        f"a whisper model may have {_LARGEST}; it was not downloaded. Check MCP_LISTEN_MODELS_URL.",
        code="download_failed",
    )


def _overrun(job: _Job, total: int | None) -> TranscriptionError:
    """The body went past its Content-Length (a compressed or lying server) or, without one,
    past max_bytes: stopped there, before the disk fills."""
    if total is None:
        what = f"more than {_size(job.max_bytes)} of ggml-{job.name}.bin, more than a whisper model may have"
        what += f" {_LARGEST}"
    else:
        what = f"more of ggml-{job.name}.bin than the {_size(total)} it announced"
    return TranscriptionError(
        f"The server sent {what}; it was stopped and discarded. Check MCP_LISTEN_MODELS_URL.",
        code="download_failed",
    )


def _too_slow(job: _Job, received: int, total: int | None, allowed_s: float) -> TranscriptionError:
    of = f" of {_size(total)}" if total is not None else ""
    return TranscriptionError(
        f"Download of ggml-{job.name}.bin took too long: only {_size(received)}{of} arrived within "
        f"{_duration(allowed_s)}; it was stopped and discarded. "
        f"Retry on a faster connection: {command('models', 'pull', job.name)}",
        code="download_failed",
    )


def _duration(seconds: float) -> str:
    """A time limit as a message says it (`0.5 s`, `60 s`, `52 min`, `17.3 h`)."""
    if seconds < 120:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _size(n: int) -> str:
    """A byte count as a message says it (`3.1 GB`, `512.0 MB`, `900 bytes`)."""
    if n >= 1_000_000_000:
        return f"{n / 1e9:.1f} GB"
    return f"{n / 1e6:.1f} MB" if n >= 1_000_000 else f"{n} bytes"


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
