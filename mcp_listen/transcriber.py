"""whisper.cpp transcription: find the model, prove the file is whole, load it once, transcribe.

whisper.cpp does not fail cleanly on a bad file: a truncated or foreign file loads into a null
context and the first transcription segfaults the whole server. So `validate_model_file` walks
the GGML file the way whisper.cpp's loader does (header, mel filters, vocabulary, every tensor's
name, shape and data size) with seeks only, before whisper.cpp ever sees it; and while loading
we listen to whisper.cpp's own log for "failed to load model" as a second guard. At exit an
atexit hook aborts a running transcription and waits for it: whisper.cpp segfaults if the
interpreter tears down while a thread is inside whisper.cpp.

pywhispercpp and numpy are imported on first use: importing this module costs nothing.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import re
import struct
import sys
import threading
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Iterator

from mcp_listen.errors import Cancelled, TranscriptionError, command

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000
GGML_MAGIC = b"lmgg"  # uint32 0x67676d6c written little-endian
WHISPER_MIN_SAMPLES = SAMPLE_RATE * 11 // 10  # whisper.cpp skips input under 1 s (100 mel frames)
MIN_SAMPLES = SAMPLE_RATE // 8  # whisper.cpp refuses < 100 ms and keeps stale segments; no word is shorter
PEAK_TARGET = 0.9
MAX_GAIN = 20.0
HIGHPASS_HZ = 80.0

# ggml tensor types whisper files use: type id -> (elements per block, bytes per block)
GGML_TYPES = {
    0: (1, 4),  # f32
    1: (1, 2),  # f16
    2: (32, 18),  # q4_0
    3: (32, 20),  # q4_1
    6: (32, 22),  # q5_0
    7: (32, 24),  # q5_1
    8: (32, 34),  # q8_0
    10: (256, 84),  # q2_K
    11: (256, 110),  # q3_K
    12: (256, 144),  # q4_K
    13: (256, 176),  # q5_K
    14: (256, 210),  # q6_K
}

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
    with open(path, "rb") as f:
        head = f.read(8)
    if len(head) < 8 or struct.unpack("<i", head[4:8])[0] > ENGLISH_ONLY_VOCAB:
        return None
    short = _short_name(path.name)
    multilingual = short[:-3] if short.endswith(".en") else "base"
    return (
        f'Use a multilingual model: {command("models", "pull", multilingual)}, then pass '
        f'whisper_model: "{multilingual}" (or set MCP_LISTEN_WHISPER_MODEL={multilingual}).'
    )


# --------------------------------------------------------------------------- GGML validation


@dataclass(frozen=True)
class _HParams:
    n_vocab: int
    n_audio_ctx: int
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_text_ctx: int
    n_text_state: int
    n_text_head: int
    n_text_layer: int
    n_mels: int
    ftype: int


class _Invalid(Exception):
    """Internal: the file is not a loadable whisper.cpp model; args[0] says why."""


_validated: dict[tuple[str, int, int], bool] = {}
_validated_lock = threading.Lock()


def validate_model_file(path: Path) -> None:
    """Raise TranscriptionError unless whisper.cpp can load `path` without crashing.

    Seeks through the whole file structure (a few ms for any size); the verdict is cached by
    (path, size, mtime), so a re-downloaded file is checked again.
    """
    path = Path(path).expanduser()
    try:
        st = path.stat()
    except FileNotFoundError:
        raise TranscriptionError(
            f"Whisper model file {path} does not exist. Download it with: "
            f"{command('models', 'pull', _short_name(path.name))}",
            code="model_not_found",
        ) from None
    except OSError as exc:
        raise TranscriptionError(f"Cannot read whisper model {path}: {exc.strerror}.", code="model_invalid") from None
    if path.is_dir():
        raise TranscriptionError(
            f"{path} is a folder, not a whisper model file. Point to a ggml-*.bin file.", code="model_invalid"
        )
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    with _validated_lock:
        if key in _validated:
            return
    try:
        with open(path, "rb") as f:
            _check_ggml(f, st.st_size)
    except _Invalid as exc:
        raise TranscriptionError(_invalid_message(path, str(exc)), code="model_invalid") from None
    except OSError as exc:
        raise TranscriptionError(f"Cannot read whisper model {path}: {exc.strerror}.", code="model_invalid") from None
    with _validated_lock:
        if len(_validated) > 64:
            _validated.clear()
        _validated[key] = True


def _invalid_message(path: Path, why: str) -> str:
    pull = command("models", "pull", _short_name(path.name))
    if why.startswith("truncated"):
        return f"Whisper model {path} is {why}: re-download it with: {pull}"
    return f"{path} is not a usable whisper model: {why}. Replace it, or download one with: {pull}"


def _read(f: BinaryIO, fmt: str) -> tuple[int, ...]:
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise _Invalid("truncated or empty")
    return struct.unpack(fmt, data)


def _check_ggml(f: BinaryIO, size: int) -> None:
    """Walk the file like whisper.cpp's loader, reading headers and seeking over data."""
    magic = f.read(4)
    if len(magic) < 4:
        raise _Invalid("truncated or empty")
    if magic != GGML_MAGIC:
        raise _Invalid(_foreign_format(magic + f.read(12)))
    hp = _HParams(*_read(f, "<11i"))
    _check_hparams(hp)
    n_mel, n_fft = _read(f, "<2i")
    if not (0 < n_mel <= 1024 and 0 < n_fft <= 4096):
        raise _Invalid("not a whisper.cpp model (bad mel filter header)")
    f.seek(n_mel * n_fft * 4, os.SEEK_CUR)
    _skip_vocab(f)
    expected = _expected_shapes(hp)
    seen = _walk_tensors(f, size, expected)
    if seen is not None and seen != set(expected):
        missing = len(set(expected) - seen)
        raise _Invalid(f"truncated: {missing} of {len(expected)} tensors are missing")


def _foreign_format(head: bytes) -> str:
    if head.startswith(b"GGUF"):
        return "not a whisper.cpp model (it is a GGUF file, e.g. an Ollama/llama.cpp model)"
    if head.lstrip()[:1] in (b"<", b"{"):
        return "not a whisper.cpp model (it is a text/HTML page, probably a failed download)"
    return "not a whisper.cpp model (wrong magic bytes)"


def _check_hparams(hp: _HParams) -> None:
    limits = {
        "n_vocab": 1 << 20,
        "n_audio_ctx": 1 << 16,
        "n_audio_state": 1 << 16,
        "n_audio_head": 1 << 10,
        "n_audio_layer": 1 << 10,
        "n_text_ctx": 1 << 16,
        "n_text_state": 1 << 16,
        "n_text_head": 1 << 10,
        "n_text_layer": 1 << 10,
        "n_mels": 1 << 10,
    }
    for field_name, limit in limits.items():
        if not 0 < getattr(hp, field_name) <= limit:
            raise _Invalid(f"not a whisper.cpp model (implausible {field_name})")
    if hp.ftype < 0:
        raise _Invalid("not a whisper.cpp model (bad ftype)")


def _skip_vocab(f: BinaryIO) -> None:
    """Skip `count` length-prefixed tokens, parsing a buffer instead of 50k tiny reads."""
    (count,) = _read(f, "<i")
    if not 0 <= count <= 1 << 20:
        raise _Invalid("not a whisper.cpp model (bad vocabulary size)")
    buf, off = b"", 0
    for _ in range(count):
        if off + 4 > len(buf):
            buf, off = _refill(f, buf, off, 4)
        length = int.from_bytes(buf[off : off + 4], "little", signed=True)
        if not 0 <= length <= 1 << 16:
            raise _Invalid("not a whisper.cpp model (bad vocabulary entry)")
        if off + 4 + length > len(buf):
            buf, off = _refill(f, buf, off, 4 + length)
        off += 4 + length
    f.seek(off - len(buf), os.SEEK_CUR)


def _refill(f: BinaryIO, buf: bytes, off: int, need: int) -> tuple[bytes, int]:
    more = f.read(max(1 << 20, need))
    buf = buf[off:] + more
    if len(buf) < need:
        raise _Invalid("truncated in the vocabulary")
    return buf, 0


def _walk_tensors(f: BinaryIO, size: int, expected: dict[str, tuple[int, int, int]]) -> set[str] | None:
    """Check every tensor header and that its data fits; None if an unknown type stopped the walk."""
    seen: set[str] = set()
    while True:
        head = f.read(12)
        if len(head) < 12:  # whisper.cpp stops at end of file, as here
            return seen
        n_dims, name_len, ttype = struct.unpack("<3i", head)
        if not (1 <= n_dims <= 3 and 0 < name_len <= 256):
            raise _Invalid("corrupt tensor header")
        dims = _read(f, f"<{n_dims}i")
        name = f.read(name_len).decode("utf-8", "replace")
        _check_tensor(name, dims, expected, seen)
        if ttype not in GGML_TYPES:
            log.debug("unknown ggml tensor type %d: stopping the model check early", ttype)
            return None
        end = f.tell() + _tensor_bytes(dims, ttype)
        if end > size:
            raise _Invalid("truncated")
        f.seek(end)


def _check_tensor(name: str, dims: tuple[int, ...], expected: dict[str, tuple[int, int, int]], seen: set[str]) -> None:
    shape = (tuple(dims) + (1, 1, 1))[:3]
    if name not in expected or name in seen:
        raise _Invalid(f"unexpected tensor {name!r}")
    if shape != expected[name]:
        raise _Invalid(f"tensor {name!r} has shape {list(shape)}, expected {list(expected[name])}")
    seen.add(name)


def _tensor_bytes(dims: tuple[int, ...], ttype: int) -> int:
    block, block_bytes = GGML_TYPES[ttype]
    if any(d <= 0 for d in dims) or dims[0] % block:
        raise _Invalid("corrupt tensor dimensions")
    return math.prod(dims) // block * block_bytes


def _expected_shapes(hp: _HParams) -> dict[str, tuple[int, int, int]]:
    """Every tensor whisper.cpp requires, with its ggml shape (ne0, ne1, ne2)."""
    a, t = hp.n_audio_state, hp.n_text_state
    shapes: dict[str, tuple[int, ...]] = {
        "encoder.positional_embedding": (a, hp.n_audio_ctx),
        "encoder.conv1.weight": (3, hp.n_mels, a),
        "encoder.conv1.bias": (1, a),
        "encoder.conv2.weight": (3, a, a),
        "encoder.conv2.bias": (1, a),
        "encoder.ln_post.weight": (a,),
        "encoder.ln_post.bias": (a,),
        "decoder.positional_embedding": (t, hp.n_text_ctx),
        "decoder.token_embedding.weight": (t, hp.n_vocab),
        "decoder.ln.weight": (t,),
        "decoder.ln.bias": (t,),
    }
    for i in range(hp.n_audio_layer):
        shapes.update(_block_shapes(f"encoder.blocks.{i}", a, cross=False))
    for i in range(hp.n_text_layer):
        shapes.update(_block_shapes(f"decoder.blocks.{i}", t, cross=True))
    return {k: (v + (1, 1, 1))[:3] for k, v in shapes.items()}  # type: ignore[misc]


def _block_shapes(prefix: str, d: int, *, cross: bool) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}
    norms = ["attn_ln", "mlp_ln"] + (["cross_attn_ln"] if cross else [])
    for norm in norms:
        out[f"{prefix}.{norm}.weight"] = (d,)
        out[f"{prefix}.{norm}.bias"] = (d,)
    for attn in ["attn"] + (["cross_attn"] if cross else []):
        for proj in ("query", "key", "value", "out"):
            out[f"{prefix}.{attn}.{proj}.weight"] = (d, d)
            if proj != "key":  # whisper has no key bias
                out[f"{prefix}.{attn}.{proj}.bias"] = (d,)
    out[f"{prefix}.mlp.0.weight"] = (d, 4 * d)
    out[f"{prefix}.mlp.0.bias"] = (4 * d,)
    out[f"{prefix}.mlp.2.weight"] = (4 * d, d)
    out[f"{prefix}.mlp.2.bias"] = (d,)
    return out


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
        self._key: tuple[str, int, int] | None = None
        self._path: Path | None = None
        self._multilingual = False
        _instances.add(self)
        _install_exit_hook()

    @property
    def loaded_path(self) -> Path | None:
        return self._path

    def load(self, path: Path) -> None:
        """Validate then load `path` (no-op if already resident); releases any other model."""
        path = Path(path).expanduser()
        with self._lock:
            validate_model_file(path)
            st = path.stat()
            key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
            if self._model is not None and self._key == key:
                return
            self.unload()
            self._model, self._multilingual = _load_model(path, self.threads)
            self._key, self._path = key, path

    def unload(self) -> None:
        """Free the resident model's memory."""
        with self._lock:
            self._model, self._key, self._path = None, None, None

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
        return Words(" ".join(_drop_repeats([text.strip() for text in segments if text.strip()])), heard)


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


def _load_model(path: Path, threads: int) -> tuple[Any, bool]:
    """Load a whisper.cpp context; whisper.cpp's log tells whether it is usable."""
    try:
        import _pywhispercpp as pw
    except ImportError as exc:
        raise TranscriptionError(
            f"Cannot load {path.name}: pywhispercpp is not installed ({exc}). Reinstall mcp-listen.",
            code="model_load_failed",
        ) from exc
    try:
        with _whisper_log(pw) as lines:
            model = _Whisper(pw, path)
            failed = _failures(lines)
            if failed:
                del model  # frees the (null) context while whisper.cpp's log is still captured
    except Exception as exc:
        raise TranscriptionError(
            f"Cannot load whisper model {path.name}: {type(exc).__name__}: {exc}", code="model_load_failed"
        ) from exc
    if failed:
        raise TranscriptionError(
            f"Cannot load whisper model {path.name}: {failed[0]}. Re-download it with: "
            f"{command('models', 'pull', _short_name(path.name))}",
            code="model_load_failed",
        )
    log.info("whisper model %s loaded (%d threads)", path.name, threads)
    return model, bool(pw.whisper_is_multilingual(model.ctx))


class _Whisper:
    """One whisper.cpp context, driven through pywhispercpp's raw bindings (`_pywhispercpp`).

    pywhispercpp's `Model` class would also import requests, tqdm and platformdirs for its
    download helpers (+6 MB resident, measured), and it drops whisper_full's status code.
    """

    def __init__(self, pw: Any, path: Path) -> None:
        self._pw = pw
        self.ctx = pw.whisper_init_from_file_with_params(str(path.resolve()), pw.whisper_context_default_params())
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
