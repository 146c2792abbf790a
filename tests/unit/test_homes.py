"""One home per value: the CLI's help, the remedies, the version and the model names read the
value from where it lives, so changing it there changes every place that states it (pure, no peers)."""

from __future__ import annotations

import importlib.metadata
import inspect
import re
from pathlib import Path

import pytest

import mcp_listen
from mcp_listen.cli import commands
from mcp_listen.cli import main as cli
from mcp_listen.contract import arguments, limits, results
from mcp_listen.ollama import client as llm
from mcp_listen.whisper import ggml
from mcp_listen.whisper import names as model_names
from mcp_listen.whisper import probe_child as whisper_probe
from mcp_listen.whisper import store as model_store


def _help(*argv: str) -> None:
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args([*argv, "--help"])


def test_cli_help_states_the_contract_values(monkeypatch, capsys):
    """Changed in limits.py, the value changes in the help: the help has no copy of its own."""
    monkeypatch.setattr(limits, "MAX_DURATION_MS", 12345)
    monkeypatch.setattr(limits, "MAX_SILENCE_MS", 6789)
    monkeypatch.setattr(limits, "DEFAULT_WHISPER_MODEL", "elsewhere.bin")
    monkeypatch.setattr(limits, "DEFAULT_LLM_MODEL", "somellm")
    monkeypatch.setattr(limits, "DEFAULT_LANGUAGE", "pt")
    _help("query")
    text = " ".join(capsys.readouterr().out.split())
    assert f"{limits.MIN_DURATION_MS}-12345" in text and f"{limits.MIN_SILENCE_MS}-6789" in text
    assert "elsewhere.bin" in text and "somellm" in text and "(default pt)" in text


def test_the_argument_schemas_state_the_limits_not_copies():
    """The argument models take their ranges from limits.py, and no other contract module keeps a
    number of its own under a limit's name."""
    duration = arguments.input_schema(arguments.CaptureArgs)["properties"]["duration_ms"]["anyOf"][0]
    assert (duration["minimum"], duration["maximum"]) == (limits.MIN_DURATION_MS, limits.MAX_DURATION_MS)
    for module in (arguments, results):
        for name in ("SAMPLE_RATE", "WINDOW_SAMPLES", "MAX_DURATION_MS", "DEFAULT_SILENCE_MS", "ACCEPTED"):
            assert getattr(module, name, limits.__dict__[name]) is limits.__dict__[name], (module.__name__, name)
    assert limits.Defaults().words()["listen_duration_ms"] == limits.LISTEN_DURATION_MS


@pytest.mark.parametrize(
    ("name", "short"),
    [
        ("ggml-base.en.bin", "base.en"),
        ("/m/ggml-large-v3-turbo.bin", "large-v3-turbo"),
        ("sub/ggml-tiny.bin", "tiny"),
        ("small", "small"),
        ("base.en", "base.en"),
        ("my-model.bin", "my-model"),
    ],
)
def test_short_name(name, short):
    assert model_names.short_name(name) == short


def test_the_suggested_model_is_the_default_model():
    assert model_names.SUGGESTED_MODEL == model_names.short_name(limits.DEFAULT_WHISPER_MODEL) == "base.en"


def test_list_models_names_files_as_short_name_does(tmp_path):
    (tmp_path / "ggml-small.en-q5_1.bin").write_bytes(b"x")
    settings = type("S", (), {"model_search_dirs": [tmp_path]})()
    assert [m.name for m in model_store.list_models(settings)] == [model_names.short_name("ggml-small.en-q5_1.bin")]


def test_one_package_version(monkeypatch):
    """--version, doctor and serverInfo read mcp_listen.package_version: installed metadata first."""
    assert cli.package_version is mcp_listen.package_version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "9.9.9")
    assert mcp_listen.package_version() == "9.9.9"

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert mcp_listen.package_version() == mcp_listen.__version__


def test_doctor_command_reports_the_package_version():
    assert "package_version()" in inspect.getsource(commands.doctor)


def test_the_isolated_probe_child_uses_the_contract_rate():
    """whisper_probe.py runs as `python -I` and cannot import limits: its copy must stay equal."""
    assert whisper_probe.SAMPLE_RATE == limits.SAMPLE_RATE


def test_doctor_waits_for_ollama_as_long_as_the_probe_default():
    assert inspect.signature(llm.probe).parameters["timeout_s"].default == llm.PROBE_TIMEOUT_S


def test_memory_need_grows_by_the_measured_cost_of_each_thread():
    hp = ggml.HParams(51864, 1500, 384, 6, 4, 448, 384, 6, 4, 80, 1)
    model = type("M", (), {"hparams": hp, "weight_bytes": 75_000_000})()
    one, three = ggml.memory_needed(model, 1), ggml.memory_needed(model, 3)
    assert one.resident == three.resident and one.resident > 75_000_000
    extra = three.address - one.address
    assert extra == pytest.approx(2 * ggml.THREAD_ADDRESS * ggml.MARGIN, abs=2)


README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_argument_table_states_the_limits():
    """The README is prose and cannot import limits.py; this pins its argument table to it."""
    text = README.read_text()
    rows: dict[str, str] = {}
    for m in re.finditer(r"^\| `(\w+)` \|.*$", text, flags=re.M):
        rows[m.group(1)] = rows.get(m.group(1), "") + m.group(0)  # `device` has a microphone and a speaker row
    L = limits
    assert f"integer {L.MIN_DURATION_MS}–{L.MAX_DURATION_MS}" in rows["duration_ms"]
    assert f"capture_audio: {L.CAPTURE_DURATION_MS}." in rows["duration_ms"]
    assert f"{L.LISTEN_DURATION_MS} while stopping on silence" in rows["duration_ms"]
    assert f"integer {L.MIN_SILENCE_MS}–{L.MAX_SILENCE_MS}" in rows["silence_ms"]
    assert f"| {L.DEFAULT_SILENCE_MS} (`MCP_LISTEN_SILENCE_MS`)" in rows["silence_ms"]
    assert f"1–{L.MAX_DEVICE_CHARS} characters" in rows["device"]
    assert f"1–{L.MAX_WHISPER_MODEL_CHARS} characters" in rows["whisper_model"]
    assert f"`{L.DEFAULT_WHISPER_MODEL}` (`MCP_LISTEN_WHISPER_MODEL`)" in rows["whisper_model"]
    assert f"`{L.DEFAULT_LANGUAGE}` (`MCP_LISTEN_LANGUAGE`)" in rows["language"]
    assert f"1–{L.MAX_LLM_MODEL_CHARS} characters" in rows["model"]
    assert f"`{L.DEFAULT_LLM_MODEL}` (`MCP_LISTEN_OLLAMA_MODEL`)" in rows["model"]
    assert f"at most {L.MAX_PROMPT_CHARS:,} characters" in rows["prompt"] and L.DEFAULT_PROMPT in rows["prompt"]
    assert f"integer {L.MIN_MAX_PAUSE_MS}–{L.MAX_MAX_PAUSE_MS}" in rows["max_pause_ms"]
    assert f"| {L.DEFAULT_MAX_PAUSE_MS} (`MCP_LISTEN_MAX_PAUSE_MS`)" in rows["max_pause_ms"]
    assert f"nobody spoke for {L.NO_SPEECH_TIMEOUT_MS // 1000} s" in text
    assert f"| `MCP_LISTEN_SILENCE_MS` | `{L.DEFAULT_SILENCE_MS}` |" in text
