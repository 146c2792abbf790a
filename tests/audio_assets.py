"""Test audio: generated once, cached on disk, and the measurements tests make on recordings.

Why generated: the tests need sentences, pauses, tones and noise bursts of known shape, and a
checked-in WAV says nothing about how it was made. Speech comes from espeak-ng (resampled by
sox to 16 kHz mono 16-bit, without dither so the bytes are reproducible); tones, silence and
noise are synthesised with numpy. Files are cached under ``tests/assets/audio/`` (git-ignored)
by a hash of what produced them and written atomically, so parallel workers can share them.

Every generator returns a ``Path`` to a 16 kHz mono int16 WAV; ``read_wav`` gives the samples.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import wave
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    import numpy as np

RATE = 16000
CACHE_DIR = Path(__file__).resolve().parent / "assets" / "audio"
INSTALL_HINT = "Install the Debian packages: apt-get install espeak-ng sox"

Part = Union[Path, str, "np.ndarray"]


class AssetError(RuntimeError):
    """A test asset could not be generated; the message says what to install or fix."""


# --- cache plumbing ---------------------------------------------------------------------------


def _cache_path(kind: str, *key: object) -> Path:
    digest = hashlib.sha256(repr((kind, *key)).encode()).hexdigest()[:16]
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    return CACHE_DIR / f"{kind}-{digest}.wav"


def _publish(tmp: Path, path: Path) -> Path:
    """Move a finished file into place atomically (readers never see half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, path)
    return path


def _temp_beside(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".wav", dir=path.parent)
    os.close(fd)
    return Path(name)


def write_wav(samples: np.ndarray, path: str | Path, *, rate: int = RATE) -> Path:
    """Write int16 mono samples as a WAV file (atomically) and return its path."""
    import numpy as np

    path = Path(path)
    data = np.ascontiguousarray(samples, dtype=np.int16).reshape(-1)
    tmp = _temp_beside(path)
    with wave.open(str(tmp), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(data.tobytes())
    return _publish(tmp, path)


def read_wav(path: str | Path) -> np.ndarray:
    """Samples of a 16-bit mono WAV as int16; raises AssetError for any other format."""
    import numpy as np

    with wave.open(str(path), "rb") as wav:
        if wav.getsampwidth() != 2 or wav.getnchannels() != 1:
            raise AssetError(
                f"{path}: expected 16-bit mono, got {wav.getsampwidth() * 8}-bit {wav.getnchannels()} channels"
            )
        return np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2").astype(np.int16)


def wav_rate(path: str | Path) -> int:
    """Sample rate of a WAV file."""
    with wave.open(str(path), "rb") as wav:
        return wav.getframerate()


def _cached_samples(kind: str, key: tuple, make) -> Path:
    path = _cache_path(kind, *key)
    if not path.exists():
        write_wav(make(), path)
    return path


# --- generators ---------------------------------------------------------------------------------


def _run(cmd: list[str]) -> None:
    if shutil.which(cmd[0]) is None:
        raise AssetError(f"{cmd[0]} is not installed. {INSTALL_HINT}")
    done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace")
        raise AssetError(f"{cmd[0]} failed ({done.returncode}): {message}")


def speech(text: str, *, path: str | Path | None = None, voice: str = "en-us") -> Path:
    """A spoken sentence (espeak-ng) as a 16 kHz mono 16-bit WAV.

    Cached by text and voice unless ``path`` is given, in which case the file is written
    there. espeak-ng clips end with ~0.37 s of near-silence: measure speech ends with
    ``last_loud_sample``, not with the clip length."""
    target = Path(path) if path is not None else _cache_path("speech", text, voice)
    if path is None and target.exists():
        return target
    with tempfile.TemporaryDirectory(prefix="espeak-") as tmp:
        raw = Path(tmp) / "raw.wav"
        _run(["espeak-ng", "-v", voice, "-w", str(raw), text])
        out = _temp_beside(target)
        # -D: no dither, so the same text always gives the same bytes.
        _run(["sox", "-D", str(raw), "-r", str(RATE), "-c", "1", "-b", "16",
              "-e", "signed-integer", "-t", "wav", str(out)])  # fmt: skip
        return _publish(out, target)


def voiced(text: str, voice: Path) -> Path:
    """A sentence in a real recorded voice (a Piper voice model, `voice` its .onnx), 16 kHz mono int16, cached by
    text and voice: for what espeak's robot voice does not carry, such as the fall of a finished sentence that
    an end-of-turn model hears."""

    def make():
        import numpy as np
        import soxr
        from piper import PiperVoice

        model = PiperVoice.load(str(voice))
        audio = np.concatenate([chunk.audio_int16_array for chunk in model.synthesize(text)])
        return soxr.resample(audio, model.config.sample_rate, RATE).astype(np.int16)

    return _cached_samples("voiced", (text, voice.name), make)


def tone(freq: float, ms: int, amplitude: float = 0.5) -> Path:
    """A sine tone; ``amplitude`` is a fraction of full scale (0..1]. 5 ms fades at both
    ends avoid clicks, which would look like broadband noise to a VAD."""
    if not 0 < amplitude <= 1:
        raise ValueError("amplitude is a fraction of full scale, in (0, 1]")

    def make():
        import numpy as np

        n = RATE * ms // 1000
        x = np.sin(2 * np.pi * freq * np.arange(n) / RATE) * amplitude * 32767
        fade = min(n // 2, RATE * 5 // 1000)
        if fade:
            ramp = np.linspace(0.0, 1.0, fade)
            x[:fade] *= ramp
            x[n - fade :] *= ramp[::-1]
        return np.round(x).astype(np.int16)

    return _cached_samples("tone", (float(freq), int(ms), float(amplitude)), make)


def silence(ms: int) -> Path:
    """Digital silence (all zeros)."""

    def make():
        import numpy as np

        return np.zeros(RATE * ms // 1000, dtype=np.int16)

    return _cached_samples("silence", (int(ms),), make)


def with_noise(part: Part, dbfs: float, seed: int = 2) -> Path:
    """``part`` plus steady white noise at ``dbfs`` (RMS): a room's noise floor under the whole clip.
    Seeded and cached, so the same arguments always give the same samples."""

    def make():
        import numpy as np

        clean = samples_of(part).astype(np.float64)
        rng = np.random.default_rng(seed)
        noise = rng.standard_normal(len(clean)) * 32768.0 * 10 ** (dbfs / 20)
        return np.clip(np.round(clean + noise), -32768, 32767).astype(np.int16)

    digest = hashlib.sha256(samples_of(part).tobytes()).hexdigest()
    return _cached_samples("noisy", (digest, float(dbfs), int(seed)), make)


def click(ms: int = 150, amplitude: float = 0.8, seed: int = 1) -> Path:
    """A burst of white noise (a cough, a door, a keyboard): loud but not speech.
    Seeded, so the same arguments always give the same samples."""

    def make():
        import numpy as np

        n = RATE * ms // 1000
        rng = np.random.default_rng(seed)
        x = rng.uniform(-1.0, 1.0, n) * amplitude * 32767
        return np.round(x).astype(np.int16)

    return _cached_samples("click", (int(ms), float(amplitude), int(seed)), make)


def samples_of(part: Part) -> np.ndarray:
    """int16 samples of a WAV path or an array (copied as int16)."""
    import numpy as np

    if isinstance(part, (str, Path)):
        path = Path(part)
        if wav_rate(path) != RATE:
            raise AssetError(f"{path}: expected {RATE} Hz, got {wav_rate(path)} Hz")
        return read_wav(path)
    return np.asarray(part).astype(np.int16).reshape(-1)


def concat(parts: Sequence[Part], *, path: str | Path | None = None) -> Path:
    """Join WAV files and/or int16 arrays into one file, e.g.
    ``concat([speech("one"), silence(1500), speech("two")])`` for sentence–pause–sentence.

    Cached by the content of the parts unless ``path`` is given."""
    import numpy as np

    joined = np.concatenate([samples_of(p) for p in parts]) if parts else np.zeros(0, np.int16)
    if path is not None:
        return write_wav(joined, path)
    target = _cache_path("concat", hashlib.sha256(joined.tobytes()).hexdigest())
    return target if target.exists() else write_wav(joined, target)


# --- measurements -------------------------------------------------------------------------------


def _window_mean_abs(samples: np.ndarray, window: int) -> np.ndarray:
    """Centred moving average of |x|: an envelope that ignores single-sample spikes and
    zero crossings without shifting events in time."""
    import numpy as np

    x = np.abs(np.asarray(samples, dtype=np.float64).reshape(-1))
    kernel = np.ones(max(1, window)) / max(1, window)
    return np.convolve(x, kernel, mode="same")


def last_loud_sample(samples: np.ndarray, threshold: float = 0.1, *, window_ms: float = 10.0) -> int:
    """Index of the last sample whose 10 ms envelope is above ``threshold`` × the envelope's
    peak: where speech really ends, for measuring stop-on-silence latency.

    Raises ValueError for all-silent input (there is no loud sample to find)."""
    import numpy as np

    envelope = _window_mean_abs(samples, int(RATE * window_ms / 1000))
    peak = float(envelope.max()) if envelope.size else 0.0
    if peak <= 0.0:
        raise ValueError("the samples are silent: no loud sample")
    loud = np.nonzero(envelope > threshold * peak)[0]
    return int(loud[-1])


def first_loud_sample(samples: np.ndarray, threshold: float = 0.1, *, window_ms: float = 10.0) -> int:
    """Index of the first sample whose 10 ms envelope is above ``threshold`` × its peak."""
    import numpy as np

    envelope = _window_mean_abs(samples, int(RATE * window_ms / 1000))
    peak = float(envelope.max()) if envelope.size else 0.0
    if peak <= 0.0:
        raise ValueError("the samples are silent: no loud sample")
    return int(np.nonzero(envelope > threshold * peak)[0][0])


def xcorr_align(recorded: np.ndarray, played: np.ndarray) -> tuple[int, float]:
    """Where ``played`` occurs inside ``recorded``: ``(lag, peak)`` such that
    ``recorded[lag:lag + len(played)]`` best matches ``played``.

    ``peak`` is the normalised correlation at that lag, cos(angle) between the two vectors:
    1.0 for an exact (or exactly scaled) copy. Computed for every lag at once with FFTs; the
    recording must be at least as long as what was played."""
    import numpy as np

    r = np.asarray(recorded, dtype=np.float64).reshape(-1)
    p = np.asarray(played, dtype=np.float64).reshape(-1)
    n, m = r.size, p.size
    if m == 0 or n < m:
        raise ValueError(f"recording ({n} samples) shorter than what was played ({m})")
    p_norm = float(np.sqrt(np.dot(p, p)))
    if p_norm == 0.0:
        raise ValueError("the played samples are silent: nothing to align")
    size = 1 << (n + m - 1).bit_length()
    spectrum = np.fft.rfft(r, size) * np.conj(np.fft.rfft(p, size))
    dots = np.fft.irfft(spectrum, size)[: n - m + 1]
    energy = np.concatenate(([0.0], np.cumsum(r * r)))
    window_norm = np.sqrt(np.maximum(energy[m:] - energy[: n - m + 1], 0.0))
    # Windows 60 dB quieter than what was played cannot be the copy; skipping them also keeps
    # FFT rounding noise divided by a near-zero norm from winning the argmax.
    usable = window_norm > 1e-3 * p_norm
    ncc = np.zeros_like(dots)
    ncc[usable] = dots[usable] / (window_norm[usable] * p_norm)
    lag = int(np.argmax(ncc))
    segment = r[lag : lag + m]
    exact = float(np.dot(segment, p)) / (float(np.sqrt(np.dot(segment, segment))) * p_norm or 1.0)
    return lag, exact
