"""Sound levels in dBFS: the one home of the math the endpointer, the CLI's meter and doctor share.

Pure; numpy is imported on first use (callers already hold numpy arrays), so importing this
module costs nothing. speech/vad.py, cli/doctor_audio.py and the CLI's meter use it instead of each
writing its own log10.
"""

from __future__ import annotations

import math
from typing import Any

FULL_SCALE = 32768.0
"""int16 full scale: a sample of -32768 is 0 dBFS."""
SILENT_DB = -120.0
"""The level given to digital silence (and the floor of every level here)."""
_SILENT_POWER = 1e-12
"""Mean power at SILENT_DB (10 ** (SILENT_DB / 10))."""


def power_db(samples: Any) -> float:
    """Mean power of float samples in [-1, 1], in dBFS: SILENT_DB for digital silence, never
    above 0 (clipped float input). The endpointer times the end of speech by it."""
    flat = samples.reshape(-1)
    power = float(flat.dot(flat)) / max(1, flat.size)
    return min(0.0, 10.0 * math.log10(power)) if power > _SILENT_POWER else SILENT_DB


def as_unit_float(samples: Any, dtype: str = "float32") -> Any:
    """int16 samples scaled to [-1, 1], flattened; float samples (already in that range) as they are."""
    import numpy as np

    samples = np.asarray(samples)
    scale = 1.0 / FULL_SCALE if samples.dtype == np.int16 else 1.0
    return samples.astype(dtype).reshape(-1) * scale


def level_db(window: Any) -> float:
    """Mean power of one window of int16 (or float in [-1, 1]) samples, in dBFS; digital silence is -120.

    The endpointer times the end of speech by it (Silero's probability lags the audio) and
    skips Silero for windows at a quiet room's noise floor; the CLI's meter shows the same value.
    """
    return power_db(as_unit_float(window))


def rms_and_peak_db(samples: Any) -> tuple[float | None, float | None]:
    """RMS and peak level of a recording in dBFS to 0.1 dB (floored at -120), or (None, None) when
    every sample is 0: doctor tells digital silence (a muted or dead input) from a quiet room."""
    x = as_unit_float(samples, "float64")
    if x.size == 0 or not x.any():
        return None, None
    peak_db = max(SILENT_DB, 20 * math.log10(float(abs(x).max())))
    return round(power_db(x), 1), round(peak_db, 1)
