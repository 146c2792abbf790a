"""whisper.cpp transcription: find the model, prove it loads and runs here, load it once, transcribe.

whisper.cpp does not fail cleanly on a bad file: a truncated or foreign file loads into a null
context that segfaults at the first transcription, and files it half-accepts abort the whole
process (GGML_ASSERT). `whisper_model` is caller input, so before whisper.cpp sees a file:

- it is opened only if it is a regular file (O_NONBLOCK, then fstat on the descriptor): a FIFO
  cannot block us, /proc/self/fd/N cannot read our own stdin;
- ggml.py walks it the way this build's loader reads it (header values, every tensor's name,
  shape and type, data inside the file), with seeks only;
- the memory it needs is checked against what is available (MemAvailable, cgroup, RLIMIT_AS,
  RLIMIT_DATA);
- a probe process loads it and runs it once (whisper_probe.py): an abort kills the probe, not
  the server; and the checks, the probe and the load all read the one open descriptor.

While loading we still listen to whisper.cpp's log for "failed to load model". At exit an
atexit hook aborts a running transcription and waits for it: whisper.cpp segfaults if the
interpreter tears down while a thread is inside whisper.cpp.

pywhispercpp and numpy are imported on first use: importing this module costs nothing.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import signal
import stat
import struct
import subprocess
import sys
import threading
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from mcp_listen import ggml
from mcp_listen.errors import Cancelled, TranscriptionError, command

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000
WHISPER_MIN_SAMPLES = SAMPLE_RATE * 11 // 10  # whisper.cpp skips input under 1 s (100 mel frames)
MIN_SAMPLES = SAMPLE_RATE // 8  # whisper.cpp refuses < 100 ms and keeps stale segments; no word is shorter
PEAK_TARGET = 0.9
MAX_GAIN = 20.0
HIGHPASS_HZ = 80.0

_MUSIC_SIGNS = "♪♫♬♩🎵🎶"
_MARKERS = re.compile(r"\[[^\[\]]*\]|\([^()]*\)|（[^（）]*）|【[^【】]*】|\*[^*]*\*|[" + _MUSIC_SIGNS + "]")


# --------------------------------------------------------------------------- model resolution


def _short_name(file_name: str) -> str:
    """`ggml-base.en.bin` -> `base.en`: the name `mcp-listen models pull` takes."""
    name = file_name[:-4] if file_name.endswith(".bin") else file_name
    return name[5:] if name.startswith("ggml-") else name


def _file_name(name: str) -> str:
    """`base.en` -> `ggml-base.en.bin`; names ending in .bin already are file names."""
    if name.endswith(".bin"):
        return name
    return f"{name}.bin" if name.startswith("ggml-") else f"ggml-{name}.bin"


def _looks_like_path(name: str) -> bool:
    seps = [os.sep] + ([os.altsep] if os.altsep else [])
    return os.path.isabs(name) or name.startswith("~") or any(s in name for s in seps)


def resolve_model(name: str, search_dirs: list[Path]) -> Path:
    """Turn a model name or path into an existing path; never downloads anything.

    Looked up as the Node edition does, then more: an absolute or `~` path as is; a relative
    path under each model folder (WHISPER_MODEL_PATH first), then the working directory; a
    name (`base.en`, `ggml-base.en.bin`) in each model folder, then the working directory.
    """
    name = name.strip()
    if os.path.isabs(name) or name.startswith("~"):
        path = _expand(name)
        if _exists(path):
            return path
        raise TranscriptionError(
            f"Whisper model file {path} does not exist. Check the path, or download a standard model "
            f"with: {command('models', 'pull', _short_name(path.name) or 'base.en')}",
            code="model_not_found",
        )
    dirs = [_expand(str(d)) for d in search_dirs]
    relative = name if _looks_like_path(name) else _file_name(name)
    for folder in [*dirs, Path.cwd()]:
        candidate = folder / relative
        if _exists(candidate):
            return candidate
        if candidate.name != name and _exists(folder / name):
            return folder / name  # a bare file name as given (`my-model.bin` in the working directory)
    where = ", ".join(str(d) for d in [*dirs, "the working directory"])
    raise TranscriptionError(
        f'Whisper model "{name}" not found: looked for {relative} in {where}. '
        f"Download it with: {command('models', 'pull', _short_name(Path(relative).name))}",
        code="model_not_found",
    )


def _expand(name: str) -> Path:
    """`~/x` and `~user/x`; a user that does not exist is a named error, not a crash."""
    try:
        return Path(name).expanduser()
    except RuntimeError:
        user = name[1:].split("/", 1)[0].split(os.sep, 1)[0]
        raise TranscriptionError(
            f'Whisper model path {name!r} names the home folder of "{user}", but there is no such user. '
            "Give an absolute path or a path under your own home (~/...).",
            code="model_not_found",
        ) from None


def _exists(path: Path) -> bool:
    """Whether `path` exists; a folder we may not look into is a named error, not internal_error."""
    try:
        return path.exists()
    except OSError as exc:
        raise TranscriptionError(
            f"Cannot look for the whisper model at {path}: {exc.strerror or type(exc).__name__}. "
            "Check the folder's permissions, or put the model where this user can read it.",
            code="model_unreadable",
        ) from None


ENGLISH_ONLY_VOCAB = 51864
"""Tokens of an English-only whisper model (`*.en`); multilingual ones have more."""


def english_only_remedy(path: Path) -> str | None:
    """None for a multilingual model; for an English-only one, what to use instead.

    Read from the GGML header (n_vocab follows the magic), not the name: a renamed file counts.
    Call after `validate_model_file`.
    """
    with _opened(path) as model:
        head = os.pread(model.fd, 8, 0)
    if len(head) < 8 or struct.unpack("<i", head[4:8])[0] > ENGLISH_ONLY_VOCAB:
        return None
    short = _short_name(path.name)
    multilingual = short[:-3] if short.endswith(".en") else "base"
    return (
        f'Use a multilingual model: {command("models", "pull", multilingual)}, then pass '
        f'whisper_model: "{multilingual}" (or set MCP_LISTEN_WHISPER_MODEL={multilingual}).'
    )


# --------------------------------------------------------------------------- the model file

_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)  # a FIFO or device must not block the open
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
_PROC_FD = sys.platform.startswith("linux") and os.path.isdir("/proc/self/fd")
_NOT_A_FILE = [
    (stat.S_ISFIFO, "a pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
]
ModelKey = tuple[int, int, int, int]


@dataclass(frozen=True)
class _ModelFile:
    """A model file held open: every check, the probe and the load read this one file.

    On Linux whisper.cpp opens /proc/self/fd/N, the very file we checked, so swapping the
    name (a symlink, a rename) between the check and the load changes nothing.
    """

    path: Path
    fd: int
    st: os.stat_result

    @property
    def key(self) -> ModelKey:
        return (self.st.st_dev, self.st.st_ino, self.st.st_size, self.st.st_mtime_ns)

    @property
    def loader_path(self) -> str:
        return f"/proc/self/fd/{self.fd}" if _PROC_FD else str(self.path)

    def still_named(self) -> bool:
        """Where whisper.cpp opens by name (no /proc): is the name still this file?"""
        if _PROC_FD:
            return True
        try:
            now = os.stat(self.path)
        except OSError:
            return False
        return (now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns) == self.key


@contextmanager
def _opened(path: Path) -> Iterator[_ModelFile]:
    """Open `path` if, and only if, it is a regular file; never blocks, never reads anything else.

    A FIFO would block the open (and every read) forever, /proc/self/fd/0 is the server's own
    stdin, a device may be endless: the type is checked by name first (so a device is not even
    opened) and again on the open descriptor, which is what counts.
    """
    try:
        _refuse_special(path, os.stat(path))
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise _os_error(path, exc) from None
    try:
        st = os.fstat(fd)
        _refuse_special(path, st)
        yield _ModelFile(path, fd, st)
    finally:
        os.close(fd)


def _refuse_special(path: Path, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise TranscriptionError(
            f"{path} is a folder, not a whisper model file. Point to a ggml-*.bin file.", code="model_invalid"
        )
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _NOT_A_FILE if test(st.st_mode)), "not a regular file")
        raise TranscriptionError(
            f"{path} is {kind}, not a whisper model file; it was not read. "
            f"whisper_model must name a regular ggml-*.bin file.",
            code="model_invalid",
        )


def _os_error(path: Path, exc: OSError) -> TranscriptionError:
    if isinstance(exc, FileNotFoundError):
        return TranscriptionError(
            f"Whisper model file {path} does not exist. Download it with: "
            f"{command('models', 'pull', _short_name(path.name))}",
            code="model_not_found",
        )
    hint = " Make it readable by this user, or use another model." if isinstance(exc, PermissionError) else ""
    return TranscriptionError(f"Cannot read whisper model {path}: {exc.strerror}.{hint}", code="model_invalid")


# --------------------------------------------------------------------------- validation


_walked: dict[ModelKey, ggml.Model] = {}
_walked_lock = threading.Lock()


def validate_model_file(path: Path, threads: int | None = None, *, probe_ahead: bool = False) -> None:
    """Raise TranscriptionError unless this whisper.cpp build can load and run `path` here.

    The file must be a regular file holding a whole, well-typed whisper model (ggml.py: a few
    ms of seeks for any size, cached by device, inode, size and mtime, so a re-downloaded file
    is checked again), and the memory it needs must be available now (never cached).
    `probe_ahead` also starts the test load (_probe) in the background, for a caller that is
    about to record: it then runs while nobody has spoken yet, not after.
    """
    with _opened(Path(path).expanduser()) as mf:
        _check(mf, threads)
        if probe_ahead and not _is_resident(mf.key):
            _start_probe(mf)


def _check(mf: _ModelFile, threads: int | None) -> ggml.Model:
    model = _walk(mf)
    _check_memory(mf, model, threads or _default_threads())
    return model


def _walk(mf: _ModelFile) -> ggml.Model:
    with _walked_lock:
        known = _walked.get(mf.key)
    if known is not None:
        return known
    try:
        with open(mf.fd, "rb", closefd=False) as f:
            f.seek(0)
            model = ggml.read_model(f, mf.st.st_size)
    except ggml.Invalid as exc:
        raise TranscriptionError(_invalid_message(mf.path, str(exc)), code="model_invalid") from None
    except OSError as exc:
        raise _os_error(mf.path, exc) from None
    with _walked_lock:
        if len(_walked) > 64:
            _walked.clear()
        _walked[mf.key] = model
    return model


def _invalid_message(path: Path, why: str) -> str:
    pull = command("models", "pull", _short_name(path.name))
    if why.startswith("truncated"):
        return f"Whisper model {path} is {why}: re-download it with: {pull}"
    return f"{path} is not a usable whisper model: {why}. Replace it, or download one with: {pull}"


def _default_threads() -> int:
    """Threads the estimate assumes when the caller does not say: the resident Transcriber's."""
    live = [tr.threads for tr in list(_instances)]
    return max(live) if live else max(1, min(4, os.cpu_count() or 1))


# --------------------------------------------------------------------------- memory


def _check_memory(mf: _ModelFile, model: ggml.Model, threads: int) -> None:
    """Refuse a model whose load would fail for memory: whisper.cpp aborts the process then.

    What this process already holds for another model counts as free (loading replaces it).
    """
    held = _held_by_others(mf.key)
    if held is None:
        return  # this very model is resident: nothing new to allocate
    needs = ggml.memory_needed(model, threads)
    for label, need, room in _memory_rooms(needs):
        if need > room + getattr(held, _ROOM_KIND[label]):
            raise TranscriptionError(
                f"Whisper model {mf.path} needs about {need / 1e6:.0f} MB to load and run, but {label} "
                f"leaves {max(room, 0) / 1e6:.0f} MB. Free memory or raise the limit, or use a smaller "
                f"model (e.g. {command('models', 'pull', 'base.en')}).",
                code="model_invalid",
            )


_ROOM_KIND = {
    "available memory (MemAvailable)": "resident",
    "the cgroup memory limit (memory.max)": "resident",
    "the address-space limit (RLIMIT_AS, ulimit -v)": "address",
    "the data limit (RLIMIT_DATA, ulimit -d)": "data",
}


def _is_resident(key: ModelKey) -> bool:
    return any(tr._key == key and tr._model is not None for tr in list(_instances))


def _held_by_others(key: ModelKey) -> ggml.Needs | None:
    """Memory resident models of this process hold (None if `key` itself is resident)."""
    total = ggml.Needs(0, 0, 0)
    for tr in list(_instances):
        if tr._key == key and tr._model is not None:
            return None
        if tr._needs is not None:
            total = ggml.Needs(*(a + b for a, b in zip(vars(total).values(), vars(tr._needs).values())))
    return total


def _memory_rooms(needs: ggml.Needs) -> list[tuple[str, int, int]]:
    """(what limits us, bytes needed against it, bytes it leaves) for each limit that applies."""
    labels = list(_ROOM_KIND)
    rooms = [
        (labels[0], needs.resident, _meminfo_available()),
        (labels[1], needs.resident, _cgroup_room()),
        (labels[2], needs.address, _rlimit_room("RLIMIT_AS", "VmSize")),
        (labels[3], needs.data, _rlimit_room("RLIMIT_DATA", "VmData")),
    ]
    return [(label, need, room) for label, need, room in rooms if room is not None]


def _proc_kb(path: str, field: str) -> int | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _meminfo_available() -> int | None:
    return _proc_kb("/proc/meminfo", "MemAvailable")


def _rlimit_room(limit_name: str, status_field: str) -> int | None:
    """Bytes left under a soft resource limit: the limit minus what this process maps already."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    soft, _ = resource.getrlimit(getattr(resource, limit_name))
    used = _proc_kb("/proc/self/status", status_field)
    if soft == resource.RLIM_INFINITY or used is None:
        return None
    return soft - used


def _cgroup_room() -> int | None:
    """memory.max minus memory.current of this process's cgroup (v2), if one is set."""
    try:
        with open("/proc/self/cgroup") as f:
            rel = next(line.split(":", 2)[2].strip() for line in f if line.startswith("0::"))
        base = Path("/sys/fs/cgroup") / rel.lstrip("/")
        limit = (base / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return int(limit) - int((base / "memory.current").read_text())
    except (OSError, ValueError, StopIteration):
        return None


# --------------------------------------------------------------------------- the probe


PROBE_SCRIPT = Path(__file__).with_name("whisper_probe.py")
PROBE_EXIT_REFUSED = 3


@dataclass
class _ProbeRun:
    """One probe of one file: started ahead (while the user is still to speak) or by the load."""

    done: threading.Event = field(default_factory=threading.Event)
    error: str | None = None


_probes: dict[ModelKey, _ProbeRun] = {}
_probes_lock = threading.Lock()


def _probe(mf: _ModelFile) -> None:
    """Load and run the model once in a child process before this process does.

    whisper.cpp answers many bad inputs with abort(): a file our checks missed, or memory that
    ran out anyway, would kill the server with everything it was doing. The child opens the
    same file (the descriptor is passed down), keeps this process's memory headroom under its
    resource limits, loads, transcribes 1 s of silence and exits; its exit status is the
    verdict. A pass is remembered per file (device, inode, size, mtime); a failure is reported
    once, then forgotten (memory may be free next time).
    """
    run = _start_probe(mf)
    run.done.wait()
    if run.error is not None:
        with _probes_lock:
            if _probes.get(mf.key) is run:
                del _probes[mf.key]
        raise TranscriptionError(run.error, code="model_invalid")


def _probe_settled(key: ModelKey) -> None:
    """Wait for a probe of this file that is running (started ahead), if any."""
    with _probes_lock:
        run = _probes.get(key)
    if run is not None:
        run.done.wait()


def _start_probe(mf: _ModelFile) -> _ProbeRun:
    """The probe of this file: the one already running or passed, else a new one in a thread."""
    with _probes_lock:
        run = _probes.get(mf.key)
        if run is not None and run.error is None:
            return run
        run = _probes[mf.key] = _ProbeRun()
    own = _ModelFile(mf.path, os.dup(mf.fd), mf.st)  # the thread's own descriptor of the same file
    threading.Thread(target=_run_probe, args=(own, run), name="mcp-listen-probe", daemon=True).start()
    return run


def _run_probe(mf: _ModelFile, run: _ProbeRun) -> None:
    started = time.monotonic()
    try:
        _whisper_module()  # mapped here first, so the headroom handed down is what the load will have
        proc = subprocess.Popen(
            [sys.executable, "-I", str(PROBE_SCRIPT), str(mf.fd), mf.loader_path, *_probe_rooms()],
            stdin=subprocess.DEVNULL,  # never the server's stdin (the MCP wire)
            stdout=subprocess.DEVNULL,  # nor its stdout
            stderr=subprocess.PIPE,
            pass_fds=(mf.fd,),
        )
        err = _wait_probe(proc, timeout=PROBE_TIMEOUT_S + mf.st.st_size / PROBE_READ_BYTES_S)
        if proc.returncode != 0:
            run.error = _probe_message(mf.path, proc.returncode, err)
    except (OSError, TranscriptionError) as exc:
        run.error = f"Cannot test-load whisper model {mf.path}: {exc}"
    finally:
        os.close(mf.fd)
        log.debug("whisper probe of %s: %s after %.0f ms", mf.path.name, run.error or "ok", _ms_since(started))
        run.done.set()


PROBE_TIMEOUT_S = 30.0
PROBE_READ_BYTES_S = 20e6  # a 3 GB large model read from a slow disk still gets its time


def _probe_rooms() -> list[str]:
    """This process's headroom under RLIMIT_AS and RLIMIT_DATA, for the probe to keep ("-1": none)."""
    rooms = (_rlimit_room("RLIMIT_AS", "VmSize"), _rlimit_room("RLIMIT_DATA", "VmData"))
    return [str(-1 if room is None else max(room, 0)) for room in rooms]


def _wait_probe(proc: subprocess.Popen, timeout: float) -> str:
    """The probe's stderr once it ended; killed at the timeout or when this process exits."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            _, err = proc.communicate(timeout=0.1)
            return err.decode("utf-8", "replace")
        except subprocess.TimeoutExpired:
            if _exiting.is_set() or time.monotonic() > deadline:
                proc.kill()
                _, err = proc.communicate()
                return err.decode("utf-8", "replace") + "\n(stopped: took too long)"


def _probe_message(path: Path, status: int, err: str) -> str:
    lines = [line.strip() for line in err.splitlines() if line.strip()]
    detail = lines[-1][:300] if lines else "no message"
    pull = command("models", "pull", _short_name(path.name))
    if status == PROBE_EXIT_REFUSED:
        return f"whisper.cpp cannot load {path}: {detail}. Replace it, or download one with: {pull}"
    signalled = status < 0 and -status in signal.valid_signals()
    how = f"signal {signal.Signals(-status).name}" if signalled else f"exit {status}"
    return (
        f"whisper.cpp crashed ({how}: {detail}) loading {path} in a test process, so this server did not "
        f"load it. If memory is short, free some or use a smaller model; else replace the file: {pull}"
    )


def _ms_since(started: float) -> float:
    return (time.monotonic() - started) * 1000


# --------------------------------------------------------------------------- audio and text


def _as_float32(audio: Any) -> np.ndarray:
    """A new float32 mono array in [-1, 1] scale; integer PCM is scaled, never cast raw."""
    import numpy as np

    x = np.asarray(audio)
    if x.ndim != 1:
        x = x.reshape(-1)
    if np.issubdtype(x.dtype, np.integer):
        return x.astype(np.float32) / float(np.iinfo(x.dtype).max + 1)
    return x.astype(np.float32, copy=True)


def condition(audio: Any) -> np.ndarray:
    """Light conditioning for whisper: remove DC and rumble below ~80 Hz, normalise the peak.

    Quiet microphones are brought up to a 0.9 peak (gain capped at 20x so silence and hiss are
    not blown up). The high-pass is a zero-phase 2nd-order Butterworth magnitude applied in the
    frequency domain: one FFT, ~10 ms for 30 s. The caller's array is never modified.
    """
    import numpy as np

    x = _as_float32(audio)
    if x.size == 0:
        return x
    x -= x.mean(dtype=np.float64)
    x = _highpass(x)
    peak = float(np.max(np.abs(x)))
    if peak > 1e-6:
        x *= min(PEAK_TARGET / peak, MAX_GAIN)
    np.clip(x, -1.0, 1.0, out=x)
    return np.ascontiguousarray(x, dtype=np.float32)


def _highpass(x: np.ndarray) -> np.ndarray:
    import numpy as np

    n = x.size
    size = 1 << max(1, (n - 1).bit_length())  # zero padding also softens the circular wrap
    spectrum = np.fft.rfft(x, size)
    freqs = np.fft.rfftfreq(size, 1.0 / SAMPLE_RATE)
    ratio = np.divide(HIGHPASS_HZ, freqs, out=np.full_like(freqs, np.inf), where=freqs > 0)
    spectrum *= 1.0 / np.sqrt(1.0 + ratio**4)
    return np.fft.irfft(spectrum, size)[:n].astype(np.float32)


def usable_text(raw: str) -> str | None:
    """The words in whisper's output, or None when it only described sounds.

    Whisper writes non-speech as `[BLANK_AUDIO]`, `(wind blowing)`, `*music*` or music signs;
    those are removed (also from inside a sentence: "a [beep] sound" -> "a sound"). Text is
    kept only if a letter or digit of any script remains.
    """
    text = " ".join(_MARKERS.sub(" ", raw or "").split())
    if not any(ch.isalnum() for ch in text):
        return None
    return text


def audio_ctx_for(n_samples: int) -> int:
    """Encoder context for a clip: whisper.cpp's 30 s window shrunk to the audio, with margin.

    1 ctx = 20 ms. A tight fit (ceil(seconds*50)) made tiny.en loop on a 2.6 s clip, and a
    2.6 s phrase at 256 repeated its own text; from 384 up the same phrases came out right.
    So: round up to a multiple of 64, add 192 (3.84 s), at least 384. 0 = the full window.
    """
    frames = -(-n_samples // (SAMPLE_RATE // 50))
    ctx = max(384, -(-frames // 64) * 64 + 192)
    return 0 if ctx >= 1500 else ctx


# --------------------------------------------------------------------------- whisper.cpp


_log_capture_lock = threading.Lock()
_exiting = threading.Event()
_instances: weakref.WeakSet[Transcriber] = weakref.WeakSet()
_exit_hook_installed = False


@contextmanager
def _whisper_log(pw: Any) -> Iterator[list[tuple[int, str]]]:
    """Collect whisper.cpp's log lines (its only failure signal) instead of letting them hit stderr.

    The callback is removed again afterwards: a Python callback still installed while the
    interpreter shuts down aborts the process.
    """
    lines: list[tuple[int, str]] = []
    setter = getattr(pw, "whisper_log_set", None)
    with _log_capture_lock:
        if setter is not None:
            setter(lambda level, text: lines.append((int(level), str(text))))
        try:
            yield lines
        finally:
            if setter is not None:
                setter(None)


def _failures(lines: list[tuple[int, str]]) -> list[str]:
    """whisper.cpp error lines meaning the call failed (ggml level 4 = error)."""
    return [text.strip() for level, text in lines if level >= 4 and "fail" in text.lower()]


class Transcriber:
    """One resident whisper.cpp model per process, shared by every call.

    `load` may run in a background thread while the user is still speaking; a `transcribe`
    arriving meanwhile waits on the same lock, so the model is loaded once.
    """

    def __init__(self, threads: int) -> None:
        self.threads = max(1, int(threads))
        self._lock = threading.RLock()
        self._model: Any = None
        self._key: ModelKey | None = None
        self._needs: ggml.Needs | None = None
        self._path: Path | None = None
        self._multilingual = False
        _instances.add(self)
        _install_exit_hook()

    @property
    def loaded_path(self) -> Path | None:
        return self._path

    def load(self, path: Path) -> None:
        """Check, probe, then load `path` (no-op if already resident); releases any other model.

        One open descriptor serves the checks, the probe and the load (see _ModelFile).
        """
        path = Path(path).expanduser()
        with self._lock, _opened(path) as mf:
            if self._model is not None and self._key == mf.key:
                self._path = path  # the same file (device, inode, size, mtime), perhaps by another name
                return
            model = _walk(mf)
            _probe_settled(mf.key)  # a probe started ahead holds memory the check below must not miss
            _check_memory(mf, model, self.threads)
            pw = _whisper_module()  # before the probe: its headroom is measured with whisper.cpp mapped
            self.unload()
            _probe(mf)
            self._model, self._multilingual = _load_model(pw, mf, self.threads)
            self._key, self._path = mf.key, path
            self._needs = ggml.memory_needed(model, self.threads)

    def unload(self) -> None:
        """Free the resident model's memory."""
        with self._lock:
            self._model, self._key, self._path, self._needs = None, None, None, None

    def transcribe(self, audio_float32: Any, *, path: Path, **options: Any) -> str:
        """Whisper's raw text for 16 kHz mono float audio ("" for empty or < 125 ms audio)."""
        return self.hear(audio_float32, path=path, **options).text

    def hear(
        self,
        audio_float32: Any,
        *,
        path: Path,
        language: str = "en",
        cancel: Any = None,
        prompt: str = "",
        translate: bool = False,
    ) -> Words:
        """The text and the language whisper heard (`auto` is resolved to the detected code).

        `prompt` is the text said just before (whisper continues it instead of starting a new
        sentence); `translate` asks for English whatever was spoken. `cancel` (anything with
        is_set()) aborts whisper.cpp between encoder/decoder steps and raises Cancelled.
        """
        import numpy as np

        audio = np.ascontiguousarray(_as_float32(audio_float32), dtype=np.float32)
        with self._lock:
            self.load(path)
            if audio.size < MIN_SAMPLES:  # whisper.cpp would keep the previous call's segments
                return Words("", language)
            words = self._run(_pad_to_whisper_minimum(audio), language, cancel, prompt, translate)
        if cancel is not None and cancel.is_set():
            raise Cancelled("The transcription was cancelled.")
        return words

    def _run(self, audio: np.ndarray, language: str, cancel: Any, prompt: str, translate: bool) -> Words:
        import _pywhispercpp as pw

        lang = _language(pw, language, self._multilingual)
        params = dict(
            language=lang,
            translate=translate and self._multilingual,
            detect_language=False,  # True would only detect and return no text
            no_context=True,
            initial_prompt=prompt[-PROMPT_CHARS:],
            single_segment=False,
            print_progress=False,
            print_realtime=False,
            print_special=False,
            print_timestamps=False,
            n_threads=self.threads,
            audio_ctx=audio_ctx_for(audio.size),
            temperature_inc=0.2,  # whisper's fallback: without it tiny.en looped (WER 0.43 vs 0.12-0.15)...
            max_tokens=max_tokens_for(audio.size),  # ...but bounded: a looping pass once ran for 50 s
            greedy={"best_of": 1},  # a fallback pass with whisper's best_of=5 runs 5 decoders (+23 MB
            # resident, measured); one sample per fallback temperature: the same WER on 64 test clips
        )
        try:
            with _whisper_log(pw) as lines:
                segments = self._model.transcribe(audio, _abort_check(cancel), **params)
        except Exception as exc:
            raise TranscriptionError(
                f"Transcription failed: {type(exc).__name__}: {exc}", code="transcription_failed"
            ) from exc
        failed = _failures(lines)
        if failed:
            raise TranscriptionError(f"Transcription failed: {failed[-1]}", code="transcription_failed")
        heard = self._model.language() if lang == "auto" else lang
        text = " ".join(_drop_repeats([text.strip() for text in segments if text.strip()]))
        return Words(_collapse_repeat(text), heard)


@dataclass(frozen=True)
class Words:
    """What whisper made of some audio."""

    text: str
    language: str
    """The code whisper transcribed in: the detected one when it was asked for `auto`."""


PROMPT_CHARS = 600
"""Text carried into the next phrase's prompt: whisper keeps at most 224 prompt tokens (~900
characters of English); the last sentence or two is what decides how the next one begins."""


def max_tokens_for(n_samples: int) -> int:
    """Tokens one segment may hold: speech is ~3-4 tokens a second; 8 a second plus 32 never cuts words.

    A decoder that loops ("X X X ...") stops there, so each fallback pass stays short.
    """
    return 32 + 8 * -(-n_samples // SAMPLE_RATE)


def _abort_check(cancel: Any) -> Callable[[], bool]:
    """whisper.cpp's abort callback: the process is exiting, or the call was cancelled."""
    if cancel is None:
        return _exiting.is_set
    return lambda: _exiting.is_set() or cancel.is_set()


def _drop_repeats(texts: list[str]) -> list[str]:
    """Drop a segment that repeats the previous one word for word.

    With a shortened audio_ctx, whisper sometimes decodes the padding after a short phrase
    as the same sentence again ("What is X? What is X?"); measured in bench/ on 2-3 s phrases.
    """
    kept: list[str] = []
    for text in texts:
        if not kept or _words(text) != _words(kept[-1]):
            kept.append(text)
    return kept


def _collapse_repeat(text: str) -> str:
    """"X X" -> "X" when a whole text says the same words twice.

    Conditioned on the text before it, whisper sometimes decodes a phrase and then, from the
    padding, the same phrase again inside one segment (measured: "because we had nothing left
    for breakfast because we had nothing left for breakfast.").
    """
    spans = [m.span() for m in re.finditer(r"\w+", text)]
    half = len(spans) // 2
    if half < 3 or len(spans) % 2:  # "no no no no" is something people say
        return text
    lowered = text.lower()
    first = [lowered[a:b] for a, b in spans[:half]]
    if first != [lowered[a:b] for a, b in spans[half:]]:
        return text
    return text[: spans[half - 1][1]] + text[spans[-1][1] :]


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def _pad_to_whisper_minimum(audio: np.ndarray) -> np.ndarray:
    """Pad with silence to whisper.cpp's 1 s minimum.

    Shorter input makes whisper_full return early with no new segments, and pywhispercpp
    then hands back the *previous* call's text: a short last phrase would repeat the one
    before it. Whisper pads to 30 s internally anyway, so trailing zeros change nothing else.
    """
    import numpy as np

    if audio.size >= WHISPER_MIN_SAMPLES:
        return audio
    return np.concatenate([audio, np.zeros(WHISPER_MIN_SAMPLES - audio.size, dtype=np.float32)])


def _language(pw: Any, language: str | None, multilingual: bool) -> str:
    """whisper's code for `language`: "en-US" -> "en"; "auto" means "en" on an English-only model."""
    lang = re.split(r"[-_]", (language or "en").strip().lower(), maxsplit=1)[0] or "en"
    if lang == "auto":
        return "auto" if multilingual else "en"
    with _whisper_log(pw):
        known = pw.whisper_lang_id(lang) >= 0
    if not known:
        raise TranscriptionError(
            f'whisper does not know the language "{language}". Use a code such as en, de, fr, or auto.',
            code="unsupported_language",
        )
    return lang


def _whisper_module() -> Any:
    try:
        import _pywhispercpp as pw
    except ImportError as exc:
        raise TranscriptionError(
            f"Cannot load whisper.cpp: pywhispercpp is not installed ({exc}). Reinstall mcp-listen.",
            code="model_load_failed",
        ) from exc
    return pw


def _load_model(pw: Any, mf: _ModelFile, threads: int) -> tuple[Any, bool]:
    """Load a whisper.cpp context from the open file; whisper.cpp's log tells whether it is usable."""
    name = mf.path.name
    try:
        with _whisper_log(pw) as lines:
            model = _Whisper(pw, mf.loader_path)
            failed = _failures(lines) or ([] if mf.still_named() else ["the file changed while it was loading"])
            if failed:
                del model  # frees the (null) context while whisper.cpp's log is still captured
    except Exception as exc:
        raise TranscriptionError(
            f"Cannot load whisper model {name}: {type(exc).__name__}: {exc}", code="model_load_failed"
        ) from exc
    if failed:
        raise TranscriptionError(
            f"Cannot load whisper model {name}: {failed[0]}. Re-download it with: "
            f"{command('models', 'pull', _short_name(name))}",
            code="model_load_failed",
        )
    log.info("whisper model %s loaded (%d threads)", name, threads)
    return model, bool(pw.whisper_is_multilingual(model.ctx))


class _Whisper:
    """One whisper.cpp context, driven through pywhispercpp's raw bindings (`_pywhispercpp`).

    pywhispercpp's `Model` class would also import requests, tqdm and platformdirs for its
    download helpers (+6 MB resident, measured), and it drops whisper_full's status code.
    """

    def __init__(self, pw: Any, path: str) -> None:
        self._pw = pw
        self.ctx = pw.whisper_init_from_file_with_params(path, pw.whisper_context_default_params())
        self.params = pw.whisper_full_default_params(pw.whisper_sampling_strategy.WHISPER_SAMPLING_GREEDY)

    def transcribe(self, audio: "np.ndarray", abort: Callable[[], bool], **params: Any) -> list[str]:
        """whisper_full on float32 16 kHz audio; the segments' text (raises on a failed run)."""
        pw = self._pw
        for name, value in params.items():
            setattr(self.params, name, value)
        pw.assign_abort_callback(self.params, abort)
        status = pw.whisper_full(self.ctx, self.params, audio, audio.size)
        if status and not abort():
            raise RuntimeError(f"whisper_full returned {status}")
        count = pw.whisper_full_n_segments(self.ctx)
        return [pw.whisper_full_get_segment_text(self.ctx, i).decode("utf-8", "replace") for i in range(count)]

    def language(self) -> str:
        """The language code the last run detected (asked for `auto`)."""
        return self._pw.whisper_lang_str(self._pw.whisper_full_lang_id(self.ctx))

    def __del__(self) -> None:
        ctx, self.ctx = getattr(self, "ctx", None), None
        if ctx is not None:
            self._pw.whisper_free(ctx)


def _install_exit_hook() -> None:
    global _exit_hook_installed
    if not _exit_hook_installed:
        _exit_hook_installed = True
        atexit.register(_quiesce_at_exit)


def _quiesce_at_exit() -> None:
    """Stop whisper.cpp before the interpreter tears down.

    Measured: a process exiting while a daemon thread is inside whisper_full segfaults
    (the model is freed under it), and one exiting while our log callback is set
    aborts. So at exit: abort the running transcription (whisper.cpp polls the abort callback),
    wait briefly for it or a load to finish, keep the lock so nothing new starts, free the
    model, and remove the log callback.
    """
    _exiting.set()
    for tr in list(_instances):
        if tr._lock.acquire(timeout=10):  # never released: the process is ending
            tr._model = None
    pw = sys.modules.get("_pywhispercpp")
    if pw is not None and hasattr(pw, "whisper_log_set"):
        pw.whisper_log_set(None)
