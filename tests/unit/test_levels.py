"""levels.py: the one dBFS meter the endpointer, the CLI's meter and doctor read (pure, no peers)."""

from __future__ import annotations

import numpy as np
import pytest

from mcp_listen.audio import levels


def test_level_db_is_a_windows_mean_power_in_dbfs():
    full_scale_square = np.full(512, 32767, dtype=np.int16)
    assert levels.level_db(full_scale_square) == pytest.approx(0.0, abs=0.01)
    assert levels.level_db((full_scale_square // 100).astype(np.int16)) == pytest.approx(-40.0, abs=0.05)
    assert levels.level_db(full_scale_square / 32768.0 / 10) == pytest.approx(-20.0, abs=0.01)  # float input
    assert levels.level_db(np.zeros(512, dtype=np.int16)) == levels.SILENT_DB == -120.0
    assert levels.level_db(np.full(512, 1.5)) == 0.0  # clipped float input never reads above full scale


def test_power_db_reads_float_samples_in_place():
    """vad.hear passes its float32 input buffer: the level of that very view, no int16 scaling."""
    buffer = np.zeros((1, 64 + 512), dtype=np.float32)
    buffer[0, 64:] = 0.1
    assert levels.power_db(buffer[0, 64:]) == pytest.approx(-20.0, abs=0.01)
    assert levels.power_db(np.full(512, 1e-7, dtype=np.float32)) == -120.0  # below the floor


def test_rms_and_peak_db():
    assert levels.rms_and_peak_db(np.zeros(4800, dtype=np.int16)) == (None, None)
    assert levels.rms_and_peak_db(np.zeros(0, dtype=np.int16)) == (None, None)
    full = np.full(4800, 32767, dtype=np.int16)
    assert levels.rms_and_peak_db(full) == (0.0, 0.0)
    t = np.arange(16000) / 16000
    sine = (0.5 * 32767 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    rms, peak = levels.rms_and_peak_db(sine)
    assert rms == pytest.approx(-9.0, abs=0.1) and peak == pytest.approx(-6.0, abs=0.1)
    tiny = np.zeros(4800, dtype=np.int16)
    tiny[0] = 1
    assert levels.rms_and_peak_db(tiny) == (-120.0, -90.3)  # RMS floored; one LSB peaks at -90.3 dBFS


def test_the_recording_rms_is_the_windows_mean_power():
    """Doctor's RMS and the endpointer's window level are the same measure of the same samples."""
    rng = np.random.default_rng(7)
    window = (rng.standard_normal(512) * 3000).astype(np.int16)
    assert levels.rms_and_peak_db(window)[0] == pytest.approx(levels.level_db(window), abs=0.05)
