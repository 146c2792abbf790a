"""The Silero wrapper against the real vendored model and real audio."""

from __future__ import annotations

import hashlib
import threading
import wave
from pathlib import Path
from types import SimpleNamespace

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnxruntime")

from mcp_listen.contract.limits import SAMPLE_RATE
from mcp_listen.contract.limits import WINDOW_SAMPLES as WINDOW
from mcp_listen.errors import VADError
from mcp_listen.speech import vad  # noqa: E402
from mcp_listen.speech.vad import CONTEXT, SileroVAD, shared_vad  # noqa: E402


@pytest.fixture(scope="module")
def model() -> SileroVAD:
    return SileroVAD()


@pytest.fixture(scope="module")
def jfk(jfk_wav: Path) -> np.ndarray:
    with wave.open(str(jfk_wav), "rb") as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (SAMPLE_RATE, 1, 2)
        return np.frombuffer(wav.readframes(wav.getnframes()), dtype=np.int16)


def probabilities(model: SileroVAD, audio: np.ndarray, reset: bool = True) -> np.ndarray:
    if reset:
        model.reset()
    count = len(audio) // WINDOW
    return np.array([model.probability(audio[i * WINDOW : (i + 1) * WINDOW]) for i in range(count)])


def test_packaged_model_is_the_documented_file():
    folder = vad.model_folder()
    data = (folder / vad.MODEL_FILE).read_bytes()
    assert hashlib.sha256(data).hexdigest() == vad.MODEL_SHA256
    assert vad.MODEL_SHA256 in (folder / "README.md").read_text(encoding="utf-8")
    assert str(len(data)) in (folder / "README.md").read_text(encoding="utf-8").replace(",", "")
    assert "MIT License" in (folder / "LICENSE").read_text(encoding="utf-8")


def test_model_interface_matches_what_the_wrapper_feeds(model):
    inputs = {arg.name: (arg.type, arg.shape) for arg in model.session.get_inputs()}
    outputs = {arg.name: (arg.type, arg.shape) for arg in model.session.get_outputs()}
    assert set(inputs) == {"input", "state"}  # the 16 kHz network alone: no sample-rate input
    assert set(outputs) == {"output", "stateN"}
    assert inputs["input"][0] == "tensor(float)" and len(inputs["input"][1]) == 2
    assert inputs["state"][0] == "tensor(float)" and inputs["state"][1][0] == 2 and inputs["state"][1][2] == 128
    assert outputs["output"][0] == "tensor(float)" and len(outputs["output"][1]) == 2
    assert outputs["stateN"][0] == "tensor(float)" and len(outputs["stateN"][1]) == 3
    assert (WINDOW, CONTEXT) == (512, 64)


def _copy(args, **changes):
    copies = [SimpleNamespace(name=a.name, type=a.type, shape=a.shape) for a in args]
    for copy in copies:
        for attr, value in changes.get(copy.name, {}).items():
            setattr(copy, attr, value)
    return copies


@pytest.mark.parametrize(
    "changes",
    [
        {"input": {"name": "x"}},
        {"state": {"shape": [2, None, 64]}},
        {"state": {"type": "tensor(double)"}},
        {"input": {"shape": [None]}},
    ],
)
def test_interface_check_rejects_a_different_model(model, changes):
    inputs, outputs = model.session.get_inputs(), model.session.get_outputs()
    vad.check_interface(_copy(inputs), _copy(outputs))  # the real interface passes
    with pytest.raises(VADError, match="reinstall"):
        vad.check_interface(_copy(inputs, **changes), _copy(outputs))


def test_interface_check_rejects_renamed_output(model):
    outputs = _copy(model.session.get_outputs(), stateN={"name": "hn"})
    with pytest.raises(VADError, match="stateN"):
        vad.check_interface(model.session.get_inputs(), outputs)


def test_speech_is_mostly_above_threshold(model, jfk):
    probs = probabilities(model, jfk)
    assert len(probs) == len(jfk) // WINDOW
    assert (probs >= 0.5).mean() >= 0.6  # measured 0.68
    assert probs.max() > 0.99


def test_digital_silence_is_not_speech(model):
    probs = probabilities(model, np.zeros(3 * SAMPLE_RATE, dtype=np.int16))
    assert probs.max() < 0.1  # measured 0.009


def test_low_white_noise_is_not_speech(model):
    noise = (np.random.default_rng(1234).standard_normal(3 * SAMPLE_RATE) * 0.005).astype(np.float32)
    probs = probabilities(model, noise)
    assert probs.max() < 0.1  # measured 0.049 (other seeds: up to 0.09)


def test_reset_makes_runs_repeatable(model, jfk):
    audio = jfk[: 3 * SAMPLE_RATE]
    first = probabilities(model, audio)
    carried = probabilities(model, audio, reset=False)  # state left over from the first run
    again = probabilities(model, audio)
    assert np.array_equal(first, again)
    assert not np.array_equal(first, carried)


def reference_probabilities(session, audio: np.ndarray) -> list[float]:
    """Upstream silero_vad OnnxWrapper's algorithm, written out independently of the wrapper."""
    return reference_stream(session, audio)[0]


def reference_stream(session, audio: np.ndarray, context=None, state=None):
    """(probabilities, state, context) of the reference algorithm, optionally resuming a stream."""
    state = np.zeros((2, 1, 128), dtype=np.float32) if state is None else state
    context = np.zeros((1, 64), dtype=np.float32) if context is None else context.reshape(1, 64)
    result = []
    for start in range(0, len(audio) - 511, 512):
        x = np.concatenate([context, audio[None, start : start + 512]], axis=1)
        out, state = session.run(None, {"input": x, "state": state})
        context = x[:, -64:]
        result.append(float(out[0, 0]))
    return result, state, context


def test_streaming_matches_upstream_algorithm(model, jfk):
    audio = (jfk[: 4 * SAMPLE_RATE].astype(np.float32) / 32768.0).astype(np.float32)
    np.testing.assert_allclose(probabilities(model, audio), reference_probabilities(model.session, audio), atol=1e-6)


UPSTREAM_JFK = [
    0.00167,
    0.0832,
    0.031314,
    0.932935,
    0.990164,
    0.982173,
    0.990902,
    0.969589,
    0.998417,
    0.992213,
    0.997682,
    0.997485,
    0.995232,
    0.999041,
    0.999405,
    0.998691,
]
"""Every 4th probability of jfk's first 64 windows from the *upstream* silero_vad.onnx 6.2.3
(sha256 1a153a22...87e3, with sr=16000), by reference_probabilities: the vendored 16 kHz
network must give the same."""


def test_vendored_network_gives_upstreams_probabilities(model, jfk):
    audio = jfk[: 64 * WINDOW].astype(np.float32) / 32768.0
    np.testing.assert_allclose(reference_probabilities(model.session, audio)[::4], UPSTREAM_JFK, atol=2e-6)


def test_int16_and_float_input_agree(model, jfk):
    audio = jfk[: 2 * SAMPLE_RATE]
    as_int = probabilities(model, audio)
    as_float = probabilities(model, audio.astype(np.float32) / 32768.0)
    np.testing.assert_allclose(as_int, as_float, atol=1e-6)


def test_float64_samples_are_accepted(model, jfk):
    model.reset()
    assert 0.0 <= model.probability(list(jfk[:WINDOW] / 32768.0)) <= 1.0


@pytest.mark.parametrize(
    "window",
    [
        np.zeros(WINDOW - 1, dtype=np.int16),
        np.zeros(WINDOW + 1, dtype=np.float32),
        np.zeros((1, WINDOW), dtype=np.float32),
        np.zeros(WINDOW, dtype=np.int32),
    ],
)
def test_wrong_window_is_rejected(model, window):
    with pytest.raises(ValueError):
        model.probability(window)


def test_shared_vad_is_one_instance_per_process():
    results = []
    threads = [threading.Thread(target=lambda: results.append(shared_vad())) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4
    assert all(result is results[0] for result in results)
    assert shared_vad() is results[0]


def test_level_db_is_a_windows_mean_power_in_dbfs():
    full_scale_square = np.full(512, 32767, dtype=np.int16)
    assert vad.level_db(full_scale_square) == pytest.approx(0.0, abs=0.01)
    assert vad.level_db((full_scale_square // 100).astype(np.int16)) == pytest.approx(-40.0, abs=0.05)
    assert vad.level_db(full_scale_square / 32768.0 / 10) == pytest.approx(-20.0, abs=0.01)  # float input
    assert vad.level_db(np.zeros(512, dtype=np.int16)) == -120.0
    assert vad.level_db(np.full(512, 1.5)) == 0.0  # clipped float input never reads above full scale


def test_hear_gives_the_probability_and_the_level_of_each_window(model, jfk):
    audio = jfk[: 20 * WINDOW]
    model.reset()
    heard = [model.hear(audio[i * WINDOW : (i + 1) * WINDOW]) for i in range(20)]
    np.testing.assert_allclose([p for p, _ in heard], probabilities(model, audio), atol=1e-6)
    expected = [vad.level_db(audio[i * WINDOW : (i + 1) * WINDOW]) for i in range(20)]
    np.testing.assert_allclose([level for _, level in heard], expected, atol=1e-4)


def test_a_skipped_window_pauses_the_stream_and_becomes_its_context(model, jfk):
    as_float = lambda x: (x / 32768.0).astype(np.float32)  # noqa: E731
    speech, quiet, after = jfk[: 40 * WINDOW], np.zeros(WINDOW, dtype=np.int16), jfk[41 * WINDOW : 61 * WINDOW]
    quiet[-CONTEXT:] = jfk[40 * WINDOW : 40 * WINDOW + CONTEXT]
    probabilities(model, speech)
    probability, level = model.hear(quiet, run=False)  # gated: no Silero
    assert probability == 0.0 and level == pytest.approx(vad.level_db(quiet), abs=1e-4)
    resumed = probabilities(model, after, reset=False)
    _, state, _ = reference_stream(model.session, as_float(speech))  # the state the speech left
    expected, _, _ = reference_stream(model.session, as_float(after), context=as_float(quiet[-CONTEXT:]), state=state)
    np.testing.assert_allclose(resumed, expected, atol=1e-6)
