"""The developer tools a newcomer runs first: tools/dev, its listen pre-flight, the test-asset maker,
and the markers that sort the suite into tiers."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import stat
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / "tools"


def load_tool(name: str):
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


assets_tool = load_tool("make_test_assets")

# ------------------------------------------------------------------------- listen pre-flight


def check(id_: str, status: str, detail: str = "", remedy: str | None = None) -> dict:
    return {"id": id_, "title": id_.replace("_", " ").title(), "status": status, "detail": detail, "remedy": remedy}


def report(*checks: dict, ready: bool = False) -> str:
    return json.dumps({"ready": {"transcribe_voice": ready}, "checks": list(checks)})


def fake_cli(tmp_path: Path, exit_code: int) -> tuple[Path, Path]:
    """A stand-in `mcp-listen` that records its arguments: the pre-flight's only side effect."""
    log = tmp_path / "calls.txt"
    script = tmp_path / "mcp-listen"
    script.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexit {exit_code}\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script, log


def preflight(doctor_json: str, cli: Path, model_given: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(TOOLS / "listen_preflight.py"), "1" if model_given else "0", str(cli)],
        input=doctor_json, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


NO_MIC = check("microphone", "fail", "No input device found.", "Connect a microphone")


@pytest.fixture(scope="module")
def real_doctor(vmic, tmp_path_factory) -> dict:
    """`mcp-listen doctor --json` as tools/dev runs it (the venv's console script, not on PATH) with the
    whisper model missing (WHISPER_MODEL_PATH and HOME at empty folders) and all else real: the virtual
    microphone, the Silero model, Ollama refused (listening does not need it)."""
    from fake_ollama import refused_url

    root = tmp_path_factory.mktemp("doctor")
    (root / "models").mkdir()
    (root / "home").mkdir()
    venv_bin = str(Path(sys.executable).parent)
    env = vmic.child_env(
        {k: v for k, v in os.environ.items() if not k.startswith(("MCP_LISTEN_", "WHISPER_", "OLLAMA_"))}
    )
    env.update(HOME=str(root / "home"), WHISPER_MODEL_PATH=str(root / "models"), OLLAMA_HOST=refused_url(),
               PATH=os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin))  # fmt: skip
    done = subprocess.run([str(Path(venv_bin) / "mcp-listen"), "doctor", "--json"], env=env, capture_output=True,
                          text=True, timeout=180, stdin=subprocess.DEVNULL)  # fmt: skip
    report = json.loads(done.stdout)
    failing = {c["id"]: c for c in report["checks"] if c["status"] == "fail"}
    assert "whisper_model" in failing and not {"portaudio", "microphone", "audio", "vad"} & set(failing), failing
    return report


def model_missing(report: dict) -> dict:
    """The doctor's own whisper_model check: its detail, remedy and data as it prints them."""
    return next(c for c in report["checks"] if c["id"] == "whisper_model")


def test_preflight_passes_when_transcribe_voice_is_ready(tmp_path):
    cli, log = fake_cli(tmp_path, 0)
    done = preflight(report(check("microphone", "ok"), check("ollama", "fail"), ready=True), cli)
    assert (done.returncode, done.stderr, log.exists()) == (0, "", False)


def test_the_real_doctor_names_the_pull_by_the_commands_full_path(real_doctor):
    """Off PATH, the remedy names .venv/bin/mcp-listen by its full path: what the pre-flight must read."""
    remedy = model_missing(real_doctor)["remedy"]
    assert remedy == f"{Path(sys.executable).parent / 'mcp-listen'} models pull base.en", remedy


def test_preflight_fetches_the_default_model_the_real_doctor_says_is_missing(tmp_path, real_doctor):
    cli, log = fake_cli(tmp_path, 0)
    done = preflight(json.dumps(real_doctor), cli)
    assert done.returncode == 0, done.stderr
    assert log.read_text().split() == ["models", "pull", "base.en"]
    assert "fetching it" in done.stderr


def test_preflight_names_every_missing_piece_and_how_to_get_it(tmp_path, real_doctor):
    cli, log = fake_cli(tmp_path, 0)
    checks = (NO_MIC, check("audio", "skip"), model_missing(real_doctor), check("ollama", "fail", "Ollama down"))
    done = preflight(report(*checks), cli)
    assert done.returncode == 1
    assert "Microphone: No input device found." in done.stderr and "Connect a microphone" in done.stderr
    assert "ggml-base.en.bin" in done.stderr and "mcp-listen models pull base.en" in done.stderr
    assert "Ollama" not in done.stderr  # listening does not need Ollama
    assert not log.exists(), "nothing is downloaded while the microphone is missing"


def test_preflight_reports_a_failed_download_and_a_model_the_user_named(tmp_path, real_doctor):
    cli, log = fake_cli(tmp_path, 69)
    failed = preflight(json.dumps(real_doctor), cli)
    assert failed.returncode == 1 and "how to get it" in failed.stderr
    named = preflight(json.dumps(real_doctor), cli, model_given=True)
    assert named.returncode == 1 and log.read_text().count("pull") == 1  # the user's own model is not replaced


def test_preflight_pulls_only_a_missing_model_named_in_the_remedy(tmp_path, real_doctor):
    """A damaged model, or a default (MCP_LISTEN_WHISPER_MODEL) that no pull fetches, is not "missing
    base.en": pulling base.en would not make `listen` work."""
    cli, log = fake_cli(tmp_path, 0)
    damaged = {**model_missing(real_doctor), "data": {**model_missing(real_doctor)["data"], "code": "model_invalid"}}
    custom = {**model_missing(real_doctor), "data": {**model_missing(real_doctor)["data"], "wanted": "ggml-mine.bin"}}
    for changed in (damaged, custom):
        assert preflight(report(check("microphone", "ok"), changed), cli).returncode == 1
    assert not log.exists()


def test_preflight_without_a_report_says_how_to_see_why(tmp_path):
    cli, _ = fake_cli(tmp_path, 0)
    done = preflight("Traceback (most recent call last):", cli)
    assert done.returncode == 1 and "mcp-listen doctor" in done.stderr


def test_dev_without_a_command_prints_its_usage():
    done = subprocess.run([str(TOOLS / "dev")], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert done.returncode == 64
    assert "tools/dev listen" in done.stderr and "tools/dev test" in done.stderr


def test_loadgroup_keeps_a_group_on_one_worker(tmp_path):
    """tools/dev test runs with pytest-xdist's --dist loadgroup: the real-mics module shares its 16 kHz
    reference transcripts within one worker, and the solo-cpu cases must not run side by side. Some
    pytest releases make xdist drop the groups without a word; this says so."""
    (tmp_path / "test_grouped.py").write_text(
        "import time, pytest\n"
        "pytestmark = pytest.mark.xdist_group('together')\n"
        "@pytest.mark.parametrize('n', range(4))\n"
        "def test_worker(n):\n"
        "    time.sleep(0.2)\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider",
         "test_grouped.py"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    workers = set(re.findall(r"^\[(gw\d+)\] .*PASSED", done.stdout, re.MULTILINE))
    assert len(workers) == 1, f"the group ran on {sorted(workers)}: pin a pytest that keeps xdist's groups"


@pytest.mark.long
@pytest.mark.slow
def test_dev_test_counts_no_test_run_as_a_failure():
    """`tools/dev test` sets up (idempotent here), checks the assets, and fails on pytest's exit 5."""
    done = subprocess.run(
        [str(TOOLS / "dev"), "test", "-k", "no_test_is_named_like_this_anywhere"],
        capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL, cwd=REPO,
        env={**os.environ, "MCP_LISTEN_TEST_WORKERS": "0"},  # no worker processes to collect nothing
    )  # fmt: skip
    assert done.returncode == 5, done.stdout[-2000:] + done.stderr[-2000:]
    assert "ran no test" in done.stderr


# ------------------------------------------------------------------------- test-asset maker


def test_byte_decoder_maps_the_bpe_alphabet_onto_every_byte_once():
    table = assets_tool.byte_decoder()
    assert len(table) == 256 and sorted(table.values()) == list(range(256))
    assert table["A"] == ord("A") and table["Ġ"] == ord(" ")  # GPT-2 spells a leading space as Ġ


def test_mel_filters_are_whispers_80_triangles():
    import numpy as np

    filters = assets_tool.mel_filters()
    assert filters.shape == (80, 201) and filters.dtype == np.float32
    assert (filters >= 0).all() and (filters.max(axis=1) > 0).all()
    peaks = filters.argmax(axis=1)
    assert (np.diff(peaks) >= 0).all(), "centre frequencies rise with the mel index"


def ct2_bytes(tensors: dict, spec: str = "WhisperSpec") -> bytes:
    """A CTranslate2 model.bin (binary version 6) holding these float32/int8/float16 arrays."""
    codes = {"float32": 0, "int8": 1, "int16": 2, "int32": 3, "float16": 4}

    def string(s: str) -> bytes:
        raw = s.encode() + b"\0"
        return struct.pack("<H", len(raw)) + raw

    out = struct.pack("<I", 6) + string(spec) + struct.pack("<I", 1) + struct.pack("<I", len(tensors))
    for name, array in tensors.items():
        out += string(name) + struct.pack("<B", array.ndim) + struct.pack(f"<{array.ndim}I", *array.shape)
        out += struct.pack("<B", codes[str(array.dtype)]) + struct.pack("<I", array.nbytes) + array.tobytes()
    return out


@given(
    st.lists(
        st.tuples(st.integers(1, 4), st.integers(1, 5), st.sampled_from(["float32", "float16", "int8"])), max_size=4
    )
)
def test_ct2_reader_gives_back_every_tensor(shapes):
    import numpy as np

    rng = np.random.default_rng(0)
    tensors = {f"t{i}/w": (rng.standard_normal((a, b)) * 50).astype(dtype) for i, (a, b, dtype) in enumerate(shapes)}
    spec, read = assets_tool.read_ct2(ct2_bytes(tensors))
    assert spec == "WhisperSpec" and set(read) == set(tensors)
    for name, array in tensors.items():
        assert read[name].dtype == array.dtype and np.array_equal(read[name], array)


def test_ggml_tensor_record_is_what_whisper_cpp_reads(tmp_path):
    import numpy as np

    weights = np.arange(6, dtype=np.float32).reshape(2, 3)
    path = tmp_path / "t.bin"
    with open(path, "wb") as f:
        assets_tool.GGMLWriter(f, {}).put("enc.w", weights, True)
    data = path.read_bytes()
    n_dims, name_len, ftype = struct.unpack_from("<3i", data)
    dims = struct.unpack_from("<2i", data, 12)
    assert (n_dims, name_len, ftype, dims) == (2, 5, 1, (3, 2))  # dims innermost first, f16
    assert data[20:25] == b"enc.w"
    assert np.array_equal(np.frombuffer(data[25:], np.float16), weights.ravel())


def test_a_file_with_the_wrong_checksum_is_never_published(tmp_path):
    partial, out = tmp_path / "x.partial", tmp_path / "x.bin"
    partial.write_bytes(b"not the model")
    with pytest.raises(assets_tool.AssetError, match="sha256"):
        assets_tool.publish(partial, out, "0" * 64)
    assert not out.exists() and not partial.exists()


def test_asset_maker_without_arguments_prints_its_usage():
    done = subprocess.run(
        [sys.executable, str(TOOLS / "make_test_assets.py")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 64 and "make_test_assets.py model OUT.bin" in done.stderr


def test_the_made_assets_are_the_pinned_files(model_path, jfk_wav):
    """What the fixtures hand out: the tiny.en GGML model (magic `lmgg`) and 11 s of 16 kHz mono speech."""
    import wave

    if not os.environ.get("MCP_LISTEN_TEST_MODEL"):
        assert assets_tool.sha256_of(model_path) == assets_tool.MODEL_SHA256
    assert model_path.read_bytes()[:4] == b"lmgg"
    assert assets_tool.sha256_of(jfk_wav) == assets_tool.SPEECH_SHA256
    with wave.open(str(jfk_wav)) as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (16000, 1, 2)
        assert 10.5 < wav.getnframes() / 16000 < 11.5


def test_the_end_word_clip_is_a_sentence_a_pause_and_over_and_is_built_once(end_word_wav, tmp_path):
    """The test voice's "Please read me the weather report." (about 1.5 s), 300 ms of silence, "Over." (a third of
    a second), 1.5 s of silence; a second run keeps the file, a stamp that does not match builds the same bytes."""
    import json
    import wave

    import numpy as np

    with wave.open(str(end_word_wav)) as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (16000, 1, 2)
        samples = np.frombuffer(wav.readframes(wav.getnframes()), np.int16)
    frames = samples[: len(samples) // 160 * 160].astype(np.float64).reshape(-1, 160) / 32768
    loud = 10 * np.log10(np.mean(frames**2, axis=1) + 1e-20) > -50  # 10 ms frames
    edges = np.flatnonzero(np.diff(loud.astype(int))) + 1  # where a loud stretch starts or ends
    stretches = [(a * 10, b * 10) for a, b in zip([0, *edges][::2], [*edges, len(loud)][::2])]
    long_gaps = [(end, start) for (_, end), (start, _) in zip(stretches, stretches[1:]) if start - end >= 250]
    assert len(long_gaps) == 1 and long_gaps[0][1] - long_gaps[0][0] in range(290, 320), stretches
    sentence_ms, over_ms = long_gaps[0][0], stretches[-1][1] - long_gaps[0][1]
    assert 1000 < sentence_ms < 2500 and 150 < over_ms < 700, stretches
    assert len(samples) - stretches[-1][1] * 16 >= 1490 * 16 and not samples[-1490 * 16 :].any()
    stamp = end_word_wav.with_suffix(".json")
    assert json.loads(stamp.read_text())["sha256"] == assets_tool.sha256_of(end_word_wav)
    built = end_word_wav.stat().st_mtime_ns
    tool = [sys.executable, str(TOOLS / "make_test_assets.py"), "end-word"]
    subprocess.run([*tool, str(end_word_wav)], check=True, capture_output=True, timeout=300)
    assert end_word_wav.stat().st_mtime_ns == built, "a clip that matches its stamp is kept"
    copy = tmp_path / "end_word_over.wav"
    (tmp_path / "voices").symlink_to(end_word_wav.parent / "voices")
    copy.write_bytes(b"not the clip")
    copy.with_suffix(".json").write_text(stamp.read_text())
    subprocess.run([*tool, str(copy)], check=True, capture_output=True, timeout=300)
    assert copy.read_bytes() == end_word_wav.read_bytes(), "seeded: a rebuild here gives the same bytes"


# ------------------------------------------------------------------------------------ markers


def test_markers_follow_the_fixtures_a_test_uses(request):
    """Every collected test carries `mic` when it uses the virtual microphone and `slow` when it uses
    an asset built from a download, through any chain of fixtures: a test added anywhere lands in
    the right tier. (Run in the fast tier, a test that escaped its marker would be here to fail.)"""
    needs = {"mic": {"vmic"}, "slow": {"model_path", "base_model_path", "jfk_wav"}}
    items = request.session.items
    assert request.node in items
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        for marker, fixtures in needs.items():
            if used & fixtures:
                assert item.get_closest_marker(marker), (
                    f"{item.nodeid} uses {used & fixtures} but is not marked {marker}"
                )
    assert request.node.get_closest_marker("mic") is None and request.node.get_closest_marker("slow") is None
