"""Downloading one file safely: bounded, Ctrl-C safe, never a partial file left behind.

One home for what `models pull` (whisper/store.py) and `voices pull` (voice/store.py) share;
they sit side by side and never import each other, so this lives below them. Each caller
describes its file (a `Source`: the file name messages show, the setting that holds the URL,
the retry command, its error class) and decides what to verify; this module streams the bytes.

A download streams into a `.partial` beside the target; the caller renames it (`partials.install`)
only once the whole file arrived and was verified, so an interrupted or corrupt download never
leaves a file a loader would crash on. The server is not trusted to behave: a download is bounded
in size (the caller's maximum, and never more than the announced Content-Length) and in time (a
deadline that grows with the size, checked after every chunk, so a trickle ends too). The partial
is created afresh, 0600, never through a link a previous download or someone else left there.
Ctrl-C, SIGTERM and SIGHUP (unless ignored) remove it before the process exits (130, 143, 129);
what no handler sees (SIGKILL, SIGUSR1) leaves it to the next pull's sweep (downloads/partials.py:
a partial's life, its lock, the sweep). Credentials a URL may carry (up to its last "@") are sent
as HTTP basic auth, never shown: messages name the URL through `redact_url`.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from mcp_listen.config.urls import redact_url, split_credentials
from mcp_listen.downloads import partials
from mcp_listen.errors import ListenError

log = logging.getLogger(__name__)

CHUNK = 1 << 20
"""Block size for hashing a file already on disk."""
BASE_DEADLINE_S = 60.0
MIN_RATE_BYTES_PER_S = 50_000
"""A download must end within BASE_DEADLINE_S plus its size at this rate (50 kB/s: base.en within
50 min, large-v3 within 17 h; without a Content-Length the size is taken as the caller's maximum)."""
CONNECT_TIMEOUT_S, READ_TIMEOUT_S = 15.0, 60.0
"""Per connection attempt and per read. A read timeout alone never ends a 1 byte/s trickle: the
overall deadline does, and a read timeout bounds how late it can notice."""
EXIT_ON_SIGNALS = ("SIGTERM", "SIGHUP")
"""Signals that, during a download, exit with 128 + signum after removing the partial (their
default action would kill the process and leave it behind). SIGINT already raises
KeyboardInterrupt."""


@dataclass(frozen=True)
class Source:
    """How messages name one download and what they tell the user to do."""

    noun: str
    """What a 404 says is missing (`model`, `voice file`)."""
    label: str
    """The file as messages show it (`ggml-base.en.bin`, `en_US-joe-medium.onnx`)."""
    what: str
    """What such a file is, after "more than the 4.0 GB" (`a whisper model`, `a Piper voice`)."""
    largest: str
    """How large the largest real one is, in parentheses, for the too-large messages."""
    url_setting: str
    """The environment variable that holds the base URL (`MCP_LISTEN_MODELS_URL`)."""
    retry: str
    """The command that retries (`mcp-listen models pull base.en`)."""
    not_there: str
    """What a 404 adds (the names that do exist, or where to look)."""
    error: type[ListenError]
    """The family member every failure is raised as (TranscriptionError, VoiceError)."""


@dataclass(frozen=True)
class Job:
    """One download's target and bounds."""

    source: Source
    partial: Path
    progress: bool
    max_bytes: int
    deadline_s: float | None = None
    """None: BASE_DEADLINE_S plus the size at MIN_RATE_BYTES_PER_S."""
    algorithms: tuple[str, ...] = ("sha256",)
    """Digests computed while the bytes arrive (hashlib names), returned by `download`."""
    started: float = field(default_factory=time.monotonic)

    def fail(self, message: str, code: str = "download_failed") -> ListenError:
        return self.source.error(message, code=code)


def ensure_folder(folder: Path, error: type[ListenError], what: str, fix: str) -> Path:
    """Create a per-user folder private (0700); leave an existing folder's mode alone.

    A file where the folder, or a folder above it, should be is named as what it is, with `fix`
    (how to point the pull elsewhere, and the retry), before anything is downloaded.
    """
    if folder.is_dir():
        return folder
    in_the_way = _not_a_folder(folder)
    if in_the_way is not None:
        path, kind = in_the_way
        where = "" if path == folder else f"cannot be made: {path} is {kind}, not a folder"
        problem = f"The {what} folder {folder} " + (where or f"is {kind}, not a folder")
        raise error(f"{problem}. {fix}", code="download_failed")
    try:
        folder.mkdir(parents=True, mode=0o700)
        os.chmod(folder, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise error(
            f"Cannot create the {what} folder {folder}: {exc.strerror}. {fix}", code="download_failed"
        ) from None
    return folder


def _not_a_folder(folder: Path) -> tuple[Path, str] | None:
    """The nearest of `folder` and the folders above it that exists, with what it is, if it is no folder."""
    for path in (folder, *folder.parents):
        if os.path.lexists(path):
            if path.is_dir():
                return None
            if path.is_symlink():
                return path, "a link to nothing" if not path.exists() else "a link to a file"
            return path, "a file" if path.is_file() else "a special file"
    return None


def digest_of(path: Path, algorithm: str) -> str:
    """The hex digest of a file already on disk."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


@contextlib.contextmanager
def exit_on_signals() -> Iterator[None]:
    """Turn EXIT_ON_SIGNALS into SystemExit(128 + signum) while the body runs, so a caller's
    cleanup (an `except BaseException`) removes the partial; restore the handlers after.

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


def download(url: str, job: Job) -> dict[str, str]:
    """Stream `url` into the job's partial; return the digests (job.algorithms) of what was written."""
    import httpx

    timeout = httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    identity = {"Accept-Encoding": "identity"}  # the body is the file itself: Content-Length bounds it
    source = job.source
    try:
        bare, auth = _split_credentials(url)
        with httpx.Client(follow_redirects=True, timeout=timeout, auth=auth, headers=identity) as client:
            with client.stream("GET", bare) as response:
                _check_status(response, redact_url(url), job)
                return _write_body(response, job)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise job.fail(
            f"Download of {source.label} from {redact_url(url)} failed ({_failure_text(exc, url)}). "
            f"Check the network and {source.url_setting}, then retry: {source.retry}"
        ) from None


def _split_credentials(url: str) -> tuple[Any, Any]:
    """`url` without its `user:password@`, and the basic auth that sends them instead: httpx logs
    every request's URL (at INFO), and a URL that carries them would put them in the log. The
    credentials end at the last "@" (`split_credentials`), so a "/" in the password stays in it."""
    import httpx

    bare, userinfo = split_credentials(url)
    if userinfo is None:
        return httpx.URL(url), None
    user, _, password = userinfo.partition(":")
    return httpx.URL(bare), httpx.BasicAuth(unquote(user), unquote(password))


def _failure_text(exc: Exception, url: str) -> str:
    """`Type: text` of an httpx error; only the type if the text holds any part of the URL's
    credentials (httpx puts URLs in some of its messages)."""
    text = str(exc)
    userinfo = split_credentials(url)[1] or ""
    parts = {userinfo, unquote(userinfo)}
    secrets = {piece for part in parts for piece in (part, *part.replace("/", ":").split(":"))} - {""}
    if not text or any(secret in text for secret in secrets):
        return type(exc).__name__
    return f"{type(exc).__name__}: {text}"


def _check_status(response: Any, shown_url: str, job: Job) -> None:
    """Refuse anything but 200; `shown_url` is the URL as a message may show it (redacted)."""
    source = job.source
    if response.status_code == 404:
        raise job.fail(f"No {source.noun} {source.label} at {shown_url} (HTTP 404). {source.not_there}")
    if response.status_code != 200:
        raise job.fail(
            f"Download of {source.label} failed: HTTP {response.status_code} from {shown_url}. "
            f"Retry later: {source.retry}"
        )


def _write_body(response: Any, job: Job) -> dict[str, str]:
    """Write the body to the partial while it stays within its size and the deadline."""
    from tqdm import tqdm

    length = response.headers.get("content-length")
    total = int(length) if length and length.isdigit() else None
    if total is not None and total > job.max_bytes:
        raise _too_large(job, total)
    limit = job.max_bytes if total is None else total
    allowed_s = deadline_s(limit) if job.deadline_s is None else job.deadline_s
    hashes, received = [hashlib.new(a) for a in job.algorithms], 0
    with (
        os.fdopen(_open_partial(job), "wb") as out,
        tqdm(
            total=total,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            file=sys.stderr,
            disable=not job.progress,
            desc=job.source.label,
            leave=False,
        ) as bar,
    ):
        for chunk in response.iter_bytes():  # no chunk size: each read's bytes as they arrive
            received += len(chunk)
            if received > limit:
                raise _overrun(job, total)
            out.write(chunk)
            for h in hashes:
                h.update(chunk)
            bar.update(len(chunk))
            if time.monotonic() - job.started > allowed_s:
                raise _too_slow(job, received, total, allowed_s)
    if total is not None and received != total:
        raise job.fail(
            f"Download of {job.source.label} was cut short ({received} of {total} bytes). Retry: {job.source.retry}"
        )
    return {a: h.hexdigest() for a, h in zip(job.algorithms, hashes, strict=True)}


def deadline_s(size_bytes: int) -> float:
    """Seconds a download of `size_bytes` may take in all (see MIN_RATE_BYTES_PER_S)."""
    return BASE_DEADLINE_S + size_bytes / MIN_RATE_BYTES_PER_S


def _open_partial(job: Job) -> int:
    """Create the partial afresh (0600), locked as this process's, and return its descriptor; never
    write through a link (partials.create)."""
    try:
        return partials.create(job.partial)
    except partials.Busy:
        raise job.fail(
            f"{job.source.label} is already downloading in another process (into {job.partial}). "
            f"Wait for it to end, then retry: {job.source.retry}"
        ) from None
    except OSError as exc:
        raise job.fail(
            f"Cannot create {job.partial}: {exc.strerror}. Remove it, then retry: {job.source.retry}"
        ) from None


def _too_large(job: Job, total: int) -> ListenError:
    source = job.source
    return job.fail(
        f"The server announces {source.label} as {size_text(total)}, more than the {size_text(job.max_bytes)} "
        f"{source.what} may have {source.largest}; it was not downloaded. Check {source.url_setting}."
    )


def _overrun(job: Job, total: int | None) -> ListenError:
    """The body went past its Content-Length (a compressed or lying server) or, without one,
    past max_bytes: stopped there, before the disk fills."""
    source = job.source
    if total is None:
        what = f"more than {size_text(job.max_bytes)} of {source.label}, more than {source.what} may have"
        what += f" {source.largest}"
    else:
        what = f"more of {source.label} than the {size_text(total)} it announced"
    return job.fail(f"The server sent {what}; it was stopped and discarded. Check {source.url_setting}.")


def _too_slow(job: Job, received: int, total: int | None, allowed_s: float) -> ListenError:
    of = f" of {size_text(total)}" if total is not None else ""
    return job.fail(
        f"Download of {job.source.label} took too long: only {size_text(received)}{of} arrived within "
        f"{duration_text(allowed_s)}; it was stopped and discarded. "
        f"Retry on a faster connection: {job.source.retry}"
    )


def duration_text(seconds: float) -> str:
    """A time limit as a message says it (`0.5 s`, `60 s`, `52 min`, `17.3 h`)."""
    if seconds < 120:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def size_text(n: int) -> str:
    """A byte count as a message says it (`3.1 GB`, `512.0 MB`, `900 bytes`)."""
    if n >= 1_000_000_000:
        return f"{n / 1e9:.1f} GB"
    return f"{n / 1e6:.1f} MB" if n >= 1_000_000 else f"{n} bytes"
