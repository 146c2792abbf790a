"""whisper.cpp transcription: load the model once, transcribe, stop cleanly at exit.

whisper.cpp does not fail cleanly on a bad file (a null context segfaults at the first
transcription; files it half-accepts abort the whole process), and `whisper_model` is caller
input. So before whisper.cpp sees a file it is opened only as a regular file (whisper/model_file.py),
walked as this build's loader reads it (whisper/ggml.py, whisper/admission.py), checked against the memory
available (whisper/memory.py) and test-loaded in a probe process (whisper/probe.py); all of them
and the load read the one open descriptor. While loading we still listen to whisper.cpp's log
for "failed to load model". At exit a hook aborts a running transcription and waits for it:
whisper.cpp segfaults if the interpreter tears down while a thread is inside whisper.cpp.
pywhispercpp and numpy are imported on first use: importing this module costs nothing.

The whisper.cpp context the binding holds (how it is made and sized) comes first.
"""

from __future__ import annotations

import atexit
import logging
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp_listen.contract.limits import SAMPLE_RATE
from mcp_listen.errors import Cancelled, TranscriptionError, command
from mcp_listen.whisper import admission as model_check
from mcp_listen.whisper import ggml
from mcp_listen.whisper import probe as model_probe
from mcp_listen.whisper.memory import _check_memory, _instances
from mcp_listen.whisper.model_file import ModelKey, _ModelFile, _opened
from mcp_listen.whisper.names import short_name
from mcp_listen.whisper.probe import _exiting, _probe_settled, _whisper_module
from mcp_listen.whisper.text import (
    MIN_SAMPLES,
    PROMPT_CHARS,
    _as_float32,
    _collapse_repeat,
    _drop_repeats,
    _pad_to_whisper_minimum,
    audio_ctx_for,
    max_tokens_for,
)
from mcp_listen.whisper.threads import ThreadPolicy

if TYPE_CHECKING:
    import numpy as np
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


CONTEXT_ONLY_SAMPLES = SAMPLE_RATE * 106 // 1000
"""A whisper_full input that sets the encoder context and returns without encoding: at least
whisper.cpp's 100 ms minimum (shorter input returns before the context is set), and under the
1 s it needs to decode a segment."""


QUIET = ("print_progress", "print_realtime", "print_special", "print_timestamps")
"""whisper_full's printing switches, off for every call."""


@dataclass(frozen=True)
class Detected:
    """What whisper.cpp's language detector heard."""

    language: str
    probability: float


class WhisperContext:
    """One whisper.cpp context, driven through pywhispercpp's raw bindings (`_pywhispercpp`).

    pywhispercpp's `Model` class would also import requests, tqdm and platformdirs for its
    download helpers (+6 MB resident, measured), and it drops whisper_full's status code.
    """

    def __init__(self, pw: Any, path: str) -> None:
        self._pw = pw
        self.ctx = pw.whisper_init_from_file_with_params(path, pw.whisper_context_default_params())
        self.params = pw.whisper_full_default_params(pw.whisper_sampling_strategy.WHISPER_SAMPLING_GREEDY)
        for name in QUIET:  # on by default: a call that sets no parameters would print its progress
            setattr(self.params, name, False)

    def transcribe(self, audio: np.ndarray, abort: Callable[[], bool], **params: Any) -> list[str]:
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

    def detect(self, audio: np.ndarray, audio_ctx: int, threads: int) -> str:
        """The language spoken in `audio` (float32, 16 kHz, at least 1 s), encoded at `audio_ctx` (0: 30 s).

        Through whisper_full's own detector (`detect_language`: it detects, then returns): whisper_full
        lets go of the GIL while it runs, where the binding's whisper_lang_auto_detect holds it for the
        whole encoder pass (measured on base, 4 s of speech: the other threads stood still for 0.47-0.60 s
        on an idle machine, the same language and probability either way). Detection runs while the
        user speaks, and the microphone's callback needs the GIL: held longer (a larger model, a busy
        machine) the callback starves, blocks are lost and the watchdog calls the microphone lost.
        whisper_full detects at the context of the call before it, so a short call sets that first.
        Its probability is only in the log (`detected_probability`).
        """
        import numpy as np

        never = lambda: False  # noqa: E731 - whisper_full's abort callback
        context = np.zeros(CONTEXT_ONLY_SAMPLES, np.float32)
        self.transcribe(context, never, language="en", detect_language=False, audio_ctx=audio_ctx, n_threads=threads)
        self.transcribe(audio, never, language="auto", detect_language=True, audio_ctx=audio_ctx, n_threads=threads)
        self.params.detect_language = False
        lang_id = self._pw.whisper_full_lang_id(self.ctx)
        if lang_id < 0:
            raise RuntimeError(f"whisper_full_lang_id returned {lang_id}")
        return str(self._pw.whisper_lang_str(lang_id))

    def __del__(self) -> None:
        ctx, self.ctx = getattr(self, "ctx", None), None
        if ctx is not None:
            self._pw.whisper_free(ctx)


log = logging.getLogger(__name__)
_log_capture_lock = threading.Lock()
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


DETECTED_LINE = re.compile(r"auto-detected language: \S+ \(p = ([0-9.]+)\)")
"""whisper_full's log line for its detection: `auto-detected language: es (p = 0.990283)`."""


def detected_probability(lines: list[tuple[int, str]]) -> float:
    """Whisper's probability for the language it detected, from its log; 0.0 (unsure: the next phrase
    detects again) when the line is missing."""
    for _, text in reversed(lines):
        found = DETECTED_LINE.search(text)
        if found:
            return float(found.group(1))
    return 0.0


def _failures(lines: list[tuple[int, str]]) -> list[str]:
    """whisper.cpp error lines meaning the call failed (ggml level 4 = error)."""
    return [text.strip() for level, text in lines if level >= 4 and "fail" in text.lower()]


class Transcriber:
    """One resident whisper.cpp model per process, shared by every call.

    `load` may run in a background thread while the user is still speaking; a `transcribe`
    arriving meanwhile waits on the same lock, so the model is loaded once.
    """

    def __init__(self, threads: int | None = None, policy: ThreadPolicy | None = None) -> None:
        """`threads` fixes the count; without it `policy` (or a fresh one) chooses it per pass from
        what is free (whisper/threads.py). `self.threads` is the most it will use (memory is sized for it)."""
        if policy is None:
            policy = ThreadPolicy(fixed=max(1, int(threads)) if threads is not None else None)
        self.policy = policy
        self.threads = policy.ceiling
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
            model = model_check._walk(mf)  # module attributes: the tests' bypass patches them
            _probe_settled(mf.key)  # a probe started ahead holds memory the check below must not miss
            _check_memory(mf, model, self.threads)
            pw = _whisper_module()  # before the probe: its headroom is measured with whisper.cpp mapped
            self.unload()
            model_probe._probe(mf)
            self._model, self._multilingual = _load_model(pw, mf, self.threads)
            self._key, self._path = mf.key, path
            self._needs = ggml.memory_needed(model, self.threads)

    @property
    def key(self) -> ModelKey | None:
        """The resident model file's key (device, inode, size, mtime); None when none is loaded."""
        return self._key if self._model is not None else None

    def _ensure_loaded(self, path: Path, key: ModelKey | None) -> None:
        """`load(path)` unless the model of `key` (admitted earlier in this call) is still resident."""
        if key is None or self.key != key:
            self.load(path)

    def resident(self, path: Path) -> bool:
        """Whether the model named `path` is loaded (by name: `load` still checks the file itself)."""
        return self._model is not None and self._path == Path(path).expanduser()

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
        key: ModelKey | None = None,
        language: str = "en",
        cancel: Any = None,
        prompt: str = "",
        translate: bool = False,
    ) -> Words:
        """The text and the language whisper heard (`auto` is resolved to the detected code).

        `prompt` is whisper's prompt (text.prompt_of: the vocabulary, then the text said just before,
        which whisper continues instead of starting a new sentence); `translate` asks for English
        whatever was spoken. `key`, the file's key from an earlier call of the same utterance, skips
        opening the file again while that model is still the resident one. `cancel` (anything with
        is_set()) aborts whisper.cpp between encoder/decoder steps and raises Cancelled.
        """
        import numpy as np

        audio = np.ascontiguousarray(_as_float32(audio_float32), dtype=np.float32)
        with self._lock:
            self._ensure_loaded(path, key)
            if audio.size < MIN_SAMPLES:  # whisper.cpp would keep the previous call's segments
                return Words("", language)
            words = self._run(_pad_to_whisper_minimum(audio), language, cancel, prompt, translate)
        if cancel is not None and cancel.is_set():
            raise Cancelled("The transcription was cancelled.")
        return words

    def detect(self, audio_float32: Any, *, path: Path, key: ModelKey | None = None, cancel: Any = None) -> Detected:
        """The language spoken in the first `DETECT_MAX_SAMPLES` of the audio, with whisper's
        probability for it (an English-only model hears only English)."""
        import numpy as np

        audio = np.ascontiguousarray(_as_float32(audio_float32)[:DETECT_MAX_SAMPLES], dtype=np.float32)
        with self._lock:
            self._ensure_loaded(path, key)
            detected = self._detect(audio) if self._multilingual else Detected("en", 1.0)
        if cancel is not None and cancel.is_set():
            raise Cancelled("The transcription was cancelled.")
        return detected

    def _detect(self, audio: np.ndarray) -> Detected:
        import _pywhispercpp as pw

        padded = _pad_to_whisper_minimum(audio)
        try:
            with _whisper_log(pw) as lines:
                language = self._model.detect(padded, audio_ctx_for(padded.size), self.policy.choose().threads)
            return Detected(language, detected_probability(lines))
        except Exception as exc:
            raise TranscriptionError(
                f"Language detection failed: {type(exc).__name__}: {exc}", code="transcription_failed"
            ) from exc

    def _run(self, audio: np.ndarray, language: str, cancel: Any, prompt: str, translate: bool) -> Words:
        import _pywhispercpp as pw

        lang = _language(pw, language, self._multilingual)
        if lang == "auto":  # whisper_full's own detection would encode at a stale context (see the context above)
            lang = self._detect(audio[:DETECT_MAX_SAMPLES]).language
        choice = self.policy.choose()
        threads, context = choice.threads, audio_ctx_for(audio.size)
        params = dict(
            language=lang,
            translate=translate and self._multilingual,
            detect_language=False,  # True would only detect and return no text
            no_context=True,
            initial_prompt=prompt[-PROMPT_CHARS:],
            single_segment=False,
            n_threads=threads,
            audio_ctx=context,
            temperature_inc=0.2,  # whisper's fallback: without it tiny.en looped (WER 0.43 vs 0.12-0.15)...
            max_tokens=max_tokens_for(audio.size),  # ...but bounded: a looping pass once ran for 50 s
            greedy={"best_of": 1},  # a fallback pass with whisper's best_of=5 runs 5 decoders (+23 MB
            # resident, measured); one sample per fallback temperature: the same WER on 64 test clips
        )
        started = time.monotonic()
        try:
            with _whisper_log(pw) as lines:
                segments = self._model.transcribe(audio, _abort_check(cancel), **params)
            elapsed = time.monotonic() - started
            self.policy.record(threads, audio.size / SAMPLE_RATE, elapsed, context)
            log.debug(
                "whisper pass: %.2f s of audio, context %d, %d threads (%s), %.0f ms",
                audio.size / SAMPLE_RATE,
                context,
                threads,
                choice.reason,
                elapsed * 1000,
            )
        except Exception as exc:
            raise TranscriptionError(
                f"Transcription failed: {type(exc).__name__}: {exc}", code="transcription_failed"
            ) from exc
        failed = _failures(lines)
        if failed:
            raise TranscriptionError(f"Transcription failed: {failed[-1]}", code="transcription_failed")
        text = " ".join(_drop_repeats([text.strip() for text in segments if text.strip()]))
        return Words(_collapse_repeat(text), lang)


@dataclass(frozen=True)
class Words:
    """What whisper made of some audio."""

    text: str
    language: str
    """The code whisper transcribed in: the detected one when it was asked for `auto`."""


DETECT_MAX_SAMPLES = SAMPLE_RATE * 10
"""Audio the language is detected on: its first 10 s. Whisper's detector reads one window of up
to 30 s; encoding 10 s takes ~0.6 s with base on 2 cores, 30 s ~2 s."""


def _abort_check(cancel: Any) -> Callable[[], bool]:
    """whisper.cpp's abort callback: the process is exiting, or the call was cancelled."""
    if cancel is None:
        return _exiting.is_set
    return lambda: _exiting.is_set() or cancel.is_set()


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


def _load_model(pw: Any, mf: _ModelFile, threads: int) -> tuple[Any, bool]:
    """Load a whisper.cpp context from the open file; whisper.cpp's log tells whether it is usable."""
    name = mf.path.name
    try:
        with _whisper_log(pw) as lines:
            model = WhisperContext(pw, mf.loader_path)
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
            f"{command('models', 'pull', short_name(name))}",
            code="model_load_failed",
        )
    log.info("whisper model %s loaded (%d threads)", name, threads)
    return model, bool(pw.whisper_is_multilingual(model.ctx))


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
