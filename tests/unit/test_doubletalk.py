"""duplex/doubletalk.py: the linear echo model learns an echo path from the played samples, a voice it cannot
predict shows as a rise over the echo-alone baseline, and it cannot run away. The fixtures are the live
rig's own windows (tests/fixtures/echo: the microphone left, the reference as the turn handed it right)
where the first model's leftover stayed as loud as the microphone."""

from __future__ import annotations

import wave
from collections import deque
from pathlib import Path

import numpy as np
import pytest

from mcp_listen.duplex import doubletalk
from mcp_listen.duplex.config import DEFAULT as CONFIG
from mcp_listen.duplex.config import EchoModelConfig
from mcp_listen.duplex.doubletalk import EchoModel

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "echo"


def _room(played: np.ndarray, delay: int = 80, gain: float = 0.7) -> np.ndarray:
    """A direct echo `delay` samples late plus one reflection 40 ms after it."""
    echo = np.zeros(len(played) + 2000)
    echo[delay : delay + len(played)] += gain * played
    echo[delay + 640 : delay + 640 + len(played)] += 0.3 * gain * played
    return echo[: len(played)]


def _recorded(name: str) -> tuple[np.ndarray, np.ndarray]:
    """A fixture's windows: what the microphone heard and the reference the turn handed the model."""
    with wave.open(str(FIXTURES / f"{name}.wav")) as w:
        both = np.frombuffer(w.readframes(w.getnframes()), np.int16).reshape(-1, 2)
    return both[:, 0].reshape(-1, 512), both[:, 1].reshape(-1, 512)


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
    assert all(m.baseline_db < -15 and m.learnt for m in over)
    assert min(m.rise_db for m in over) > 10, [round(m.rise_db) for m in over]
    assert min(m.level_db for m in over) > -6 and max(m.unexplained_db for m in over) < 0
    kept = np.concatenate(outputs)[16000 * 4 + 2048 :].astype(np.float64)
    said = user[2048 : len(kept) + 2048]
    assert abs(10 * np.log10(np.mean(kept**2) / np.mean(said**2))) < 1.5  # the user's voice kept whole
    assert model.resets == 0


def test_silence_played_teaches_nothing_and_leaves_the_microphone_as_it_is():
    model = EchoModel()
    near = (np.sin(np.arange(512) / 5) * 1000).astype(np.int16)
    for _ in range(40):
        out, explained = model.process(near, np.zeros(512, np.int16))
    assert np.array_equal(out, near)
    assert explained.baseline_db == 0.0 and explained.unexplained_db == 0.0 and not explained.learnt


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
    assert measured[-1].baseline_db < -15 and measured[-1].learnt


@pytest.mark.parametrize("step", [CONFIG.model.step, 1.5])
def test_speech_that_stops_short_cannot_make_the_whole_filter_normalised_step_run_away(step):
    """Bursts of loud sound cut off at once, each followed by dither: the newest block is then near silence
    while the older partitions still hold the burst, where a step normalised by the newest block alone grows
    tenfold. Normalised over the whole filter length, the step in use and one twice as large converge: no
    window with the echo sounding leaves more than a quarter of it, and the guard never has to act."""
    rng = np.random.default_rng(11)
    bursts = [np.concatenate([rng.standard_normal(2400) * 6000, rng.standard_normal(3200) * 2]) for _ in range(22)]
    played = np.concatenate(bursts)[: 512 * 220]
    echo = _room(played, delay=160, gain=0.9)
    model = EchoModel(EchoModelConfig(step=step))
    worst = []
    for start in range(0, len(played), 512):
        near, far = echo[start : start + 512], played[start : start + 512]
        out, explained = model.process(near.astype(np.int16), far.astype(np.int16))
        if start > 16000 and np.mean(near**2) > 1e4:  # learnt, and the echo sounding
            worst.append(10 * np.log10(np.mean(out.astype(np.float64) ** 2) / np.mean(near**2)))
    assert model.resets == 0 and max(worst) < -6, (model.resets, max(worst))


def test_live_windows_where_the_reference_crept_under_a_learnt_path_reset_the_model_and_never_stop_the_agent():
    """crept.wav: the agent alone at full level on the rig, the model learnt; ~3.7 s in, the reference moved a
    fraction of a millisecond against the echo (duplex/path.py now keeps the clock it measured) and the
    prediction began adding sound. The guard resets the model within ~0.3 s, and the double-talk rule never
    fires, even taking every window for speech."""
    from mcp_listen.duplex.cut_in import talks_over_the_echo

    ONSET_WINDOWS = CONFIG.onset_windows
    near, far = _recorded("crept")
    model = EchoModel()
    measures: deque = deque(maxlen=ONSET_WINDOWS)
    speech = deque([1.0] * ONSET_WINDOWS, maxlen=ONSET_WINDOWS)
    learnt, fired, reset_at = [], [], None
    for i in range(len(near)):
        explained = model.process(near[i], far[i])[1]
        measures.append(explained)
        learnt.append(explained.learnt)
        if explained.learnt and talks_over_the_echo(speech, measures, echo=True):
            fired.append(i)
        if reset_at is None and model.resets:
            reset_at = i
    crept = 117  # the first window the shifted reference reached
    assert all(learnt[85:crept]) and fired == []
    assert reset_at is not None and crept <= reset_at <= crept + 16, reset_at
    assert not any(learnt[reset_at + 1 : reset_at + 10])  # unlearnt until its baseline is known again


def test_live_windows_where_the_echo_moved_past_the_modelled_path_never_count_as_learnt():
    """moved.wav: after the delay was measured the echo fell 195 ms behind the reference (past the 160 ms the
    model spans): the model never learns it, so the turn decides by the rule on AEC3 alone and measures the
    delay again, which finds it."""
    from mcp_listen.duplex.echo import echo_lag_s

    near, far = _recorded("moved")
    model = EchoModel()
    explained = [model.process(near[i], far[i])[1] for i in range(len(near))]
    assert not any(e.learnt for e in explained) and model.resets > 0
    lag = echo_lag_s(near[:32].ravel(), far[:32].ravel())
    assert lag is not None and abs(lag - 0.195) < 0.005


def test_in_a_noisy_room_the_model_is_learnt_the_echo_alone_never_fires_and_the_user_does():
    """noisy.wav: the agent in the bench's noisy room (pink noise 20 dB under the user, a reverberant tail), the
    user over it from window 110. Taught its first second three times as the turn does once the delay is
    measured, the model counts as learnt from then on (its echo-alone baseline 20 dB down: measured above
    the noise floor, the step regularised by it); the double-talk rule, taking every window for speech,
    never fires on the echo alone and fires within 3 windows of the user's onset. Without the floor the
    baseline stayed at -7 to -12 dB, unlearnt when the user began, and the rule never decided."""
    from mcp_listen.duplex.cut_in import talks_over_the_echo

    ONSET_WINDOWS, REPLAY_PASSES, REPLAY_WINDOWS = CONFIG.onset_windows, CONFIG.replay_passes, CONFIG.replay_windows
    near, far = _recorded("noisy")
    model = EchoModel()
    for i in range(REPLAY_WINDOWS):
        model.process(near[i], far[i])
    model.reset()
    for _ in range(REPLAY_PASSES):
        for i in range(REPLAY_WINDOWS):
            model.learn(near[i], far[i])
    measures: deque = deque(maxlen=ONSET_WINDOWS)
    speech = deque([1.0] * ONSET_WINDOWS, maxlen=ONSET_WINDOWS)
    onset, fired, learnt = 110, [], []
    for i in range(REPLAY_WINDOWS, len(near)):
        explained = model.process(near[i], far[i])[1]
        measures.append(explained)
        learnt.append(explained.learnt)
        if explained.learnt and talks_over_the_echo(speech, measures, echo=True):
            fired.append(i)
    assert all(learnt[48 - REPLAY_WINDOWS : onset - REPLAY_WINDOWS]), learnt
    assert fired and onset <= fired[0] <= onset + 3, fired
    assert model.resets == 0


def test_the_pre_roll_hands_aec3s_output_before_the_users_first_rise_and_the_leftover_from_it():
    """duplex/cut_in.py pre_roll: with the model deciding, the windows before the first rise over the echo-alone
    baseline are AEC3's (the agent's echo 20-30 dB down in the leftover still made words); with the rule on
    AEC3 alone deciding, every window is AEC3's; with no echo found (headphones), every window the leftover."""
    from mcp_listen.duplex.cut_in import pre_roll
    from mcp_listen.duplex.doubletalk import Explained

    RISE_DB = CONFIG.rise_db

    echo_alone, user = Explained(-25.0, -25.0, -20.0, True), Explained(-25.0 + RISE_DB + 4, -25.0, 0.0, True)
    recent = [(f"aec3{i}", f"left{i}", echo_alone if i < 6 else user) for i in range(10)]
    assert pre_roll(recent, by_model=True) == [f"aec3{i}" for i in range(6)] + [f"left{i}" for i in range(6, 10)]
    assert pre_roll(recent, by_model=False) == [f"aec3{i}" for i in range(10)]
    assert pre_roll(recent, by_model=False, no_echo=True) == [f"left{i}" for i in range(10)]  # headphones
    assert pre_roll([(c, left, echo_alone) for c, left, _ in recent], by_model=True) == [f"left{i}" for i in range(10)]


def test_a_clipped_microphone_teaches_the_model_nothing():
    """Windows in which the microphone reached full scale (here: clipped noise unrelated to what played) leave
    the learnt path as it was: right after them the model explains the echo as well as before (the filter
    that learnt from them left -7 dB of it)."""
    rng = np.random.default_rng(13)
    played = rng.standard_normal(512 * 126) * 3000
    echo = _room(played)

    def heard(start: int, near: np.ndarray | None = None) -> float:
        near = echo[start : start + 512].astype(np.int16) if near is None else near
        return model.process(near, played[start : start + 512].astype(np.int16))[1].unexplained_db

    model = EchoModel()
    before = [heard(start) for start in range(0, 512 * 100, 512)][-6:]
    clipped = np.where(rng.standard_normal(512) > 0, 32767, -32768).astype(np.int16)
    assert doubletalk.saturated(clipped)
    for start in range(512 * 100, 512 * 120, 512):
        heard(start, clipped)
    after = [heard(start) for start in range(512 * 120, 512 * 126, 512)]
    assert max(before) < -30 and max(after) < -30, (before, after)
    assert model.resets == 0
