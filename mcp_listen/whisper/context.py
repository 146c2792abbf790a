"""One whisper.cpp context through pywhispercpp's raw bindings: transcribe, and detect a language.

Language detection is done here rather than by whisper_full's `language="auto"`, because
whisper.cpp (1.8) detects *before* it applies `audio_ctx`: the detection pass encodes with
whatever context the previous call left, and a fresh context encodes the full 30 s window.
Measured with the base model on 2 cores: 1.9-2.8 s to detect in a fresh process, 0.4-0.5 s
on 3 s of speech once the encoder context fits the audio. `detect` sets the context first
(a whisper_full call too short to decode anything, 3 ms), then runs whisper.cpp's detector
and reports its probability, so a caller can wait for more speech when it is unsure.
numpy is imported on first use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp_listen.contract.models import SAMPLE_RATE

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

    def detect(self, audio: np.ndarray, audio_ctx: int, threads: int) -> Detected:
        """The language spoken in `audio` (float32, 16 kHz, at least 1 s), encoded at `audio_ctx` (0: 30 s)."""
        import numpy as np

        pw = self._pw
        self.transcribe(
            np.zeros(CONTEXT_ONLY_SAMPLES, np.float32),
            lambda: False,
            language="en",
            detect_language=False,
            audio_ctx=audio_ctx,
            n_threads=threads,
        )
        if pw.whisper_pcm_to_mel(self.ctx, audio, audio.size, threads) != 0:
            raise RuntimeError("whisper_pcm_to_mel failed")
        probabilities = np.zeros(pw.whisper_lang_max_id() + 1, np.float32)
        lang_id = pw.whisper_lang_auto_detect(self.ctx, 0, threads, probabilities)
        if lang_id < 0:
            raise RuntimeError(f"whisper_lang_auto_detect returned {lang_id}")
        return Detected(pw.whisper_lang_str(lang_id), float(probabilities[lang_id]))

    def __del__(self) -> None:
        ctx, self.ctx = getattr(self, "ctx", None), None
        if ctx is not None:
            self._pw.whisper_free(ctx)
