"""Does the voice sound finished? Pipecat's Smart Turn v3, an audio model, on the speech up to a pause.

The text rule (speech/turns.py) reads whisper's words; it cannot hear a voice that trails off on a
rising or level pitch, nor see a filler whisper left out. Smart Turn v3.2 (Daily, BSD-2; vendored as
models/smart-turn-v3.2-cpu.onnx, provenance in models/README.md) hears that: a whisper-tiny encoder
with a classifier, trained on many languages, that takes the last 8 s of 16 kHz audio ending at the
pause and gives the probability that the turn is complete. ~70 ms a call on one core, so the listener
asks it once per pause, off the audio callback.

Its input is whisper's log-mel spectrogram, computed here with numpy alone (the transformers feature
extractor's recipe, which the model was trained with): the 8 s window zero-padded at the front, the
waveform scaled to zero mean and unit variance, a centred 400-point STFT (periodic Hann, hop 160,
reflect padding), the power through 80 Slaney-scaled mel filters, log10, the last frame dropped,
clamped to 8 below the maximum, then (x + 4) / 4: 80 x 800 floats. numpy and onnxruntime are
imported on first use.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mcp_listen.config.libraries import import_onnxruntime
from mcp_listen.contract.limits import SAMPLE_RATE
from mcp_listen.errors import VADError
from mcp_listen.speech.ending import SMART, EndOfTurnConfig
from mcp_listen.speech.vad import model_folder

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

MODEL_FILE = "smart-turn-v3.2-cpu.onnx"
MODEL_SHA256 = "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f"
"""As shipped in the pipecat-ai 1.14.0 wheel (pipecat/audio/turn/smart_turn/data/)."""
HEARD_S = 8
"""The model hears the last 8 s before the pause (its training window)."""
HEARD_SAMPLES = HEARD_S * SAMPLE_RATE
N_FFT, HOP, N_MELS = 400, 160, 80


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear to 1 kHz, logarithmic above (librosa's default, whisper's)."""
    import numpy as np

    log_part = 15.0 + np.log(np.maximum(hz, 1e-9) / 1000.0) * 27.0 / np.log(6.4)
    return np.where(hz >= 1000.0, log_part, 3.0 * hz / 200.0)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    import numpy as np

    return np.where(mel >= 15.0, 1000.0 * np.exp((mel - 15.0) * np.log(6.4) / 27.0), 200.0 * mel / 3.0)


def mel_filters() -> np.ndarray:
    """80 triangular filters over the 201 FFT bins (0-8 kHz), each scaled to unit area (Slaney)."""
    import numpy as np

    edges = _mel_to_hz(np.linspace(0.0, float(_hz_to_mel(np.array(SAMPLE_RATE / 2))), N_MELS + 2))
    bins = np.linspace(0.0, SAMPLE_RATE / 2, N_FFT // 2 + 1)[:, None]
    rising = (bins - edges[:-2]) / (edges[1:-1] - edges[:-2])
    falling = (edges[2:] - bins) / (edges[2:] - edges[1:-1])
    triangles = np.maximum(0.0, np.minimum(rising, falling)) * (2.0 / (edges[2:] - edges[:-2]))
    return np.ascontiguousarray(triangles.T)  # (80, 201)


def log_mel(samples: np.ndarray) -> np.ndarray:
    """The model's input for the audio ending at the pause (int16 or float, 16 kHz): (80, 800) float32."""
    import numpy as np
    from numpy.lib.stride_tricks import sliding_window_view

    x = np.asarray(samples, dtype=np.float32)
    if samples.dtype == np.int16:
        x = x / 32768.0
    n = HEARD_SAMPLES
    x = np.pad(x[-n:], (max(0, n - len(x)), 0))
    x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
    frames = sliding_window_view(np.pad(x.astype(np.float64), N_FFT // 2, mode="reflect"), N_FFT)[::HOP]
    hann = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)  # periodic, as torch's
    power = np.abs(np.fft.rfft(frames * hann, axis=-1)) ** 2
    spec = np.log10(np.maximum(_filters() @ power.T, 1e-10))[:, :-1]
    spec = np.maximum(spec, spec.max() - 8.0)
    return ((spec + 4.0) / 4.0).astype(np.float32)


_FILTERS: list[Any] = []


def _filters() -> np.ndarray:
    if not _FILTERS:
        _FILTERS.append(mel_filters())
    return _FILTERS[0]


class SmartTurn:
    """One onnxruntime session of the model; `probability` may be called from any thread (one at a time).

    The model is quantized; onnxruntime's fused int8 kernels give answers that depend on the CPU, so they
    are left unfused and the same weights run in float everywhere (bench/README.md, "End of turn: Smart
    Turn the same on every CPU")."""

    def __init__(self) -> None:
        onnxruntime = import_onnxruntime()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1  # one core: the phrase worker's whisper has the others
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        options.add_session_config_entry("session.disable_quant_qdq", "1")  # the same answer on every CPU
        resource = model_folder() / MODEL_FILE
        try:
            model = resource.read_bytes()
            self.session = onnxruntime.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # OSError, or onnxruntime's own pybind exception types
            raise VADError(
                f"The bundled Smart Turn model ({resource}) could not be loaded ({type(exc).__name__}); "
                "reinstall mcp-listen."
            ) from exc
        self._lock = threading.Lock()

    def probability(self, samples: np.ndarray) -> float:
        """How likely the speech in `samples` (16 kHz, ending at the pause) is a finished turn, 0-1."""
        features = log_mel(samples)[None]
        with self._lock:
            out = self.session.run(None, {"input_features": features})
        return float(out[0].reshape(-1)[0])


_SHARED: list[SmartTurn] = []
_SHARED_LOCK = threading.Lock()


def shared_smart_turn() -> SmartTurn:
    """The process's one session (loading it costs ~100 ms and ~30 MB: once, on first use)."""
    with _SHARED_LOCK:
        if not _SHARED:
            _SHARED.append(SmartTurn())
        return _SHARED[0]


class AnswerBudget:
    """At most `answers_per_s` answers per second of audio, `answers_saved` saved up: a token bucket filled
    by the recording's own clock (sample numbers), so a loaded machine's late windows change nothing."""

    def __init__(self, per_s: float = SMART.answers_per_s, saved: int = SMART.answers_saved) -> None:
        self.per_s = per_s
        self.most_saved = saved
        self._saved = float(saved)
        self._at: int | None = None
        self.spent = 0

    def take(self, sample: int) -> bool:
        """One answer at sample `sample` of the recording, if the audio so far has earned it."""
        if self._at is not None and sample > self._at:
            self._saved = min(self.most_saved, self._saved + (sample - self._at) / SAMPLE_RATE * self.per_s)
        self._at = sample if self._at is None else max(self._at, sample)
        if self._saved < 1.0:
            return False
        self._saved -= 1.0
        self.spent += 1
        return True


class VoiceAtPause:
    """The audio model's least sure answer for the pause in progress, worked out off the audio thread as
    the pause goes on: the listener asks for each of `pause_heard_ms` as soon as that much of the pause is
    recorded (`ask`, returns at once), so only the last answer is left to wait for when whisper's words
    come in, and reads the least of them (`answer`). Once one answer is under `finished_from` the least
    can only be lower: the pause is held, and the answers after it are not worked out. A model that
    cannot load answers NaN: the words decide alone."""

    def __init__(
        self, finished_from: float, budget: AnswerBudget | None = None, config: EndOfTurnConfig = SMART
    ) -> None:
        self.finished_from = finished_from
        self.budget = budget if budget is not None else AnswerBudget(config.answers_per_s, config.answers_saved)
        self._expected = len(config.pause_heard_ms)
        self._lock = threading.Lock()
        self._pause: int | None = None
        self._asked: set[int] = set()
        self._answers: list[float] = []
        self._waiting: list[tuple[int, np.ndarray]] = []
        """Asked, not worked out yet: one at a time, in the order asked, on one thread while any wait."""
        self._working = False

    def ask(self, pause: int, ms: int, samples: Callable[[], np.ndarray], now: int | None = None) -> None:
        """Hear `samples()` (the speech, then `ms` of the pause that began at sample `pause`), read on the
        caller's thread; again for the same pause and ms, or once the pause is decided: nothing. A new pause
        forgets the one before. Over the budget (at sample `now` of the recording), nothing yet: the
        listener asks again on its next window."""
        clock = now if now is not None else pause + ms * SAMPLE_RATE // 1000
        with self._lock:
            if pause != self._pause:
                self._pause, self._asked, self._answers = pause, set(), []
            if ms in self._asked or self._decided() or not self.budget.take(clock):
                return
            self._asked.add(ms)
        audio = samples()
        with self._lock:
            self._waiting.append((pause, audio))
            start, self._working = not self._working, True
        if start:
            threading.Thread(target=self._work, name="mcp-listen-smart-turn", daemon=True).start()

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._waiting:
                    self._working = False
                    return
                pause, samples = self._waiting.pop(0)
                if pause != self._pause or self._decided():
                    continue
            try:
                probability = shared_smart_turn().probability(samples)
            except Exception as exc:  # noqa: BLE001 - a missing model, onnxruntime's own errors: the words decide alone
                log.warning("The Smart Turn model failed (%s); end of turn by the words alone", type(exc).__name__)
                probability = math.nan
            with self._lock:
                if self._pause == pause:
                    self._answers.append(probability)

    def _decided(self) -> bool:
        """An answer is in that no later one can change: under `finished_from`, or NaN (no model)."""
        return any(math.isnan(a) or a < self.finished_from for a in self._answers)

    def answer(self, pause: int) -> tuple[bool, float | None]:
        """(in, least sure answer) for the pause that began at sample `pause`: (False, None) until every
        one of `pause_heard_ms` is in, or one decides it; NaN without a model."""
        with self._lock:
            if pause != self._pause or not (self._decided() or len(self._answers) == self._expected):
                return False, None
            return True, math.nan if any(math.isnan(a) for a in self._answers) else min(self._answers)

    def early(self, pause: int, count: int) -> float | None:
        """The least of the first `count` answers for the pause that began at sample `pause` (the speech with
        the least of the pause heard: they are asked in `pause_heard_ms` order), None until they are in; NaN
        without a model. After an answer under `finished_from` the later ones are never worked out: then None
        too, and `answer` already says the pause is held."""
        with self._lock:
            if pause != self._pause or len(self._answers) < count:
                return None
            first = self._answers[:count]
            return math.nan if any(math.isnan(a) for a in first) else min(first)

    def answers(self, pause: int) -> tuple[float, ...]:
        """Every answer worked out so far for the pause that began at sample `pause`."""
        with self._lock:
            return tuple(self._answers) if pause == self._pause else ()
