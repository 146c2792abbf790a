"""audio/doubletalk.py: the linear echo model learns an echo path from the played samples, and a voice it
cannot predict shows as a rise over the echo-alone baseline."""

from __future__ import annotations

import numpy as np

from mcp_listen.audio.doubletalk import EchoModel


def _room(played: np.ndarray, delay: int = 80, gain: float = 0.7) -> np.ndarray:
    """A direct echo `delay` samples late plus one reflection 40 ms after it."""
    echo = np.zeros(len(played) + 2000)
    echo[delay : delay + len(played)] += gain * played
    echo[delay + 640 : delay + 640 + len(played)] += 0.3 * gain * played
    return echo[: len(played)]


def test_the_echo_alone_is_learnt_and_the_user_over_it_rises_above_the_baseline():
    rng = np.random.default_rng(3)
    played = rng.standard_normal(512 * 157) * 3000  # ~5 s of whole windows
    echo = _room(played)
    user = rng.standard_normal(512 * 32) * 2000
    model = EchoModel()
    measures, outputs = [], []
    for start in range(0, len(played), 512):
        near = echo[start : start + 512].copy()
        if start >= 16000 * 4:
            near += user[start - 16000 * 4 : start - 16000 * 4 + 512]
        out, explained = model.process(near.astype(np.int16), played[start : start + 512].astype(np.int16))
        measures.append(explained)
        outputs.append(out)
    alone = measures[16000 * 3 // 512 : 16000 * 4 // 512]
    over = measures[16000 * 4 // 512 + 2 : 16000 * 4 // 512 + 12]  # the first third of a second of double talk
    assert max(m.unexplained_db for m in alone) < -15, [round(m.unexplained_db) for m in alone]
    assert all(m.baseline_db < -15 for m in over)
    assert min(m.rise_db for m in over) > 10, [round(m.rise_db) for m in over]
    assert min(m.level_db for m in over) > -6
    kept = np.concatenate(outputs)[16000 * 4 + 2048 :].astype(np.float64)
    said = user[2048 : len(kept) + 2048]
    assert abs(10 * np.log10(np.mean(kept**2) / np.mean(said**2))) < 1.5  # the user's voice kept whole


def test_silence_played_teaches_nothing_and_leaves_the_microphone_as_it_is():
    model = EchoModel()
    near = (np.sin(np.arange(512) / 5) * 1000).astype(np.int16)
    for _ in range(40):
        out, explained = model.process(near, np.zeros(512, np.int16))
    assert np.array_equal(out, near)
    assert explained.baseline_db == 0.0 and explained.unexplained_db == 0.0


def test_a_model_taught_the_last_second_again_knows_the_path_at_once():
    rng = np.random.default_rng(5)
    played = rng.standard_normal(512 * 50) * 3000
    echo = _room(played)
    windows = [
        (echo[i : i + 512].astype(np.int16), played[i : i + 512].astype(np.int16)) for i in range(0, 512 * 50, 512)
    ]
    taught, fresh = EchoModel(), EchoModel()
    for _ in range(3):
        for near, far in windows[:32]:
            taught.learn(near, far)
    measured = [taught.process(near, far)[1] for near, far in windows[32:]]
    first_fresh = [fresh.process(near, far)[1].unexplained_db for near, far in windows[32:40]]
    assert max(m.unexplained_db for m in measured) < -15 and min(first_fresh) > -10, (measured, first_fresh)
    assert measured[9].baseline_db == 0.0  # the baseline only from what it measured, not what it learnt
    assert measured[-1].baseline_db < -15
