"""Silero VAD (vendored ONNX model) as a streaming speech-probability source.

One 512-sample window (32 ms at 16 kHz) in, one probability out. The model is
recurrent: it carries a [2, 1, 128] state and the previous window's last 64 samples
between calls, so one SileroVAD follows one audio stream; call reset() before each
recording. Creating the session costs ~70 ms, so a process keeps one (shared_vad()).
numpy and onnxruntime are imported on first use, never at module import.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp_listen.audio.levels import FULL_SCALE, level_db, power_db  # noqa: F401 - level_db re-exported
from mcp_listen.config.libraries import import_onnxruntime
from mcp_listen.contract.limits import WINDOW_SAMPLES
from mcp_listen.errors import VADError

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

CONTEXT = 64
STATE_SHAPE = (2, 1, 128)
MODEL_FILE = "silero_vad_16k.onnx"
MODEL_SHA256 = "0451080d2d87c49a6003b4daf3b203baf00dd54edfde9e4dd2e615807e7c1346"
"""Silero VAD 6.2.3's 16 kHz network, cut out of the upstream file by tools/derive_silero_16k.py."""

# name -> (ONNX element type, shape this wrapper uses); None dims in the model are dynamic.
EXPECTED_INPUTS = {
    "input": ("tensor(float)", (1, CONTEXT + WINDOW_SAMPLES)),
    "state": ("tensor(float)", STATE_SHAPE),
}
EXPECTED_OUTPUTS = {
    "output": ("tensor(float)", (1, 1)),
    "stateN": ("tensor(float)", STATE_SHAPE),
}


def model_folder() -> Any:
    """The folder holding the bundled model, its LICENSE and README (a Traversable or a Path).

    The repository keeps them in the top-level ``models/`` beside ``mcp_listen/``; the wheel
    ships that folder as ``mcp_listen/models/`` (pyproject.toml, hatch force-include). So an
    installed package finds it inside itself, and an editable checkout one level up."""
    packaged = resources.files("mcp_listen") / "models"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "models"


def read_model_bytes() -> bytes:
    """The bundled model, found the same way in a checkout and in an installed wheel."""
    resource = model_folder() / MODEL_FILE
    try:
        return resource.read_bytes()
    except OSError as exc:
        raise VADError(
            f"The bundled Silero VAD model ({resource}) is missing or unreadable; reinstall mcp-listen."
        ) from exc


def check_interface(inputs: Iterable[Any], outputs: Iterable[Any]) -> None:
    """Raise VADError unless the model's NodeArgs (name/type/shape) are what we feed and read."""
    problems = _mismatches("input", inputs, EXPECTED_INPUTS) + _mismatches("output", outputs, EXPECTED_OUTPUTS)
    if problems:
        raise VADError(
            "The Silero VAD model does not have the interface mcp-listen expects ("
            + "; ".join(problems)
            + "). The vendored model was replaced or corrupted: reinstall mcp-listen."
        )


def _mismatches(kind: str, args: Iterable[Any], expected: dict[str, tuple[str, tuple[int, ...]]]) -> list[str]:
    found = {arg.name: arg for arg in args}
    problems = []
    if set(found) != set(expected):
        problems.append(f"{kind}s are {sorted(found)}, expected {sorted(expected)}")
    for name, (elem_type, shape) in expected.items():
        arg = found.get(name)
        if arg is None:
            continue
        if arg.type != elem_type or not _shape_fits(arg.shape, shape):
            problems.append(f"{kind} {name} is {arg.type} {arg.shape}, expected {elem_type} {list(shape)}")
    return problems


def _shape_fits(model_shape: Any, shape: tuple[int, ...]) -> bool:
    """Same rank, and every fixed model dimension equals ours (symbolic/None dims accept anything)."""
    if model_shape is None or len(model_shape) != len(shape):
        return False
    return all(not isinstance(dim, int) or dim == want for dim, want in zip(model_shape, shape, strict=False))


class SileroVAD:
    """A streaming Silero session: reset() per recording, then probability() per window.

    Not thread-safe: one stream at a time (mcp-listen records one at a time).
    """

    def __init__(self) -> None:
        import numpy as np

        onnxruntime = import_onnxruntime()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1  # ~0.1-0.2 ms per window: more threads only add overhead
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        model = read_model_bytes()
        try:
            self.session = onnxruntime.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own pybind exception types
            raise VADError(
                f"The bundled Silero VAD model could not be loaded ({type(exc).__name__}); reinstall mcp-listen."
            ) from exc
        check_interface(self.session.get_inputs(), self.session.get_outputs())
        self._np = np
        self._input = np.zeros((1, CONTEXT + WINDOW_SAMPLES), dtype=np.float32)
        self._state = np.zeros(STATE_SHAPE, dtype=np.float32)
        log.debug("Silero VAD session created")

    def reset(self) -> None:
        """Forget the previous stream: zero the recurrent state and the 64-sample context."""
        self._state = self._np.zeros(STATE_SHAPE, dtype=self._np.float32)
        self._input[:] = 0.0

    def probability(self, window: np.ndarray) -> float:
        """Speech probability of the next 512 samples (int16, or float in [-1, 1]) of the stream."""
        return self.hear(window)[0]

    def hear(self, window: np.ndarray, run: bool = True) -> tuple[float, float]:
        """(speech probability, level in dBFS) of the next window of the stream.

        With `run` false (the endpointer's gate said Silero's answer could not matter: the
        caller asks `Endpointer.needs_vad(level_db(window))` first) the model does not run and
        the probability is 0.0. The recurrent state then
        stays as it was (the stream pauses on the room's noise) and the window's last 64
        samples still become the context. Measured on 88 noisy clips: resetting the state
        instead missed quiet speech in 9-13.
        """
        samples = self._input[0, CONTEXT:]
        samples[:] = self._as_float(window)
        level = power_db(samples)
        probability = 0.0
        if run:
            output, self._state = self.session.run(None, {"input": self._input, "state": self._state})
            probability = float(output[0, 0])
        self._input[0, :CONTEXT] = self._input[0, -CONTEXT:]
        return probability, level

    def _as_float(self, window: Any) -> np.ndarray:
        np = self._np
        samples = np.asarray(window)
        if samples.shape != (WINDOW_SAMPLES,):
            raise ValueError(f"A VAD window is exactly {WINDOW_SAMPLES} mono samples, got shape {samples.shape}.")
        if samples.dtype == np.int16:
            return samples.astype(np.float32) * (1.0 / FULL_SCALE)
        if samples.dtype.kind == "f":
            return samples.astype(np.float32, copy=False)
        raise ValueError(f"VAD samples must be int16 or float in [-1, 1], got {samples.dtype}.")


_shared: SileroVAD | None = None
_shared_lock = threading.Lock()


def shared_vad() -> SileroVAD:
    """The process's one SileroVAD, created on first use; callers reset() it per recording."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = SileroVAD()
        return _shared
