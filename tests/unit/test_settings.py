"""Settings from the environment (pure): every value is text, numbers are plain ASCII decimals in
a sane range, folders are absolute, and a problem names the variable without echoing its value."""

from __future__ import annotations

import pytest

from mcp_listen.config import load_settings
from mcp_listen.config.urls import normalize_ollama_host, redact_url
from mcp_listen.contract import limits

NOT_UTF8 = b"/tmp/caf\xe9".decode("utf-8", "surrogateescape")
"""What Python makes of a latin-1 folder name in the environment: a lone surrogate."""


@pytest.mark.parametrize(
    "name",
    [
        "MCP_LISTEN_OLLAMA_MODEL",
        "MCP_LISTEN_WHISPER_MODEL",
        "MCP_LISTEN_SYSTEM_PROMPT",
        "MCP_LISTEN_RECORDINGS_DIR",
        "WHISPER_MODEL_PATH",
        "MCP_LISTEN_MODELS_URL",
        "OLLAMA_HOST",
    ],
)
def test_a_value_that_is_not_utf8_is_a_named_problem_and_the_default_stays(name):
    settings = load_settings({name: NOT_UTF8})
    assert len(settings.problems) == 1 and name in settings.problems[0]
    assert "UTF-8" in settings.problems[0]
    assert all(NOT_UTF8 not in str(value) for value in vars(settings).values())
    assert all(NOT_UTF8 not in str(value) for value in vars(settings.defaults).values())


@pytest.mark.parametrize("name,kind", [("TMPDIR", "recordings"), ("HOME", "models")])
def test_a_home_or_temp_folder_that_is_not_utf8_is_a_named_problem(monkeypatch, tmp_path, name, kind):
    import os
    import tempfile

    folder = os.path.join(str(tmp_path), NOT_UTF8.rsplit("/", 1)[1])
    os.mkdir(folder)  # gettempdir() passes over a TMPDIR that does not exist
    monkeypatch.setenv(name, folder)
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() caches its first answer
    settings = load_settings({})
    assert any(name in problem for problem in settings.problems), settings.problems
    assert all(folder not in problem for problem in settings.problems)


@pytest.mark.parametrize(
    "name,raw",
    [
        ("MCP_LISTEN_OLLAMA_TIMEOUT_S", "1e-300"),
        ("MCP_LISTEN_OLLAMA_TIMEOUT_S", "\u0663"),  # an Arabic-Indic 3
        ("MCP_LISTEN_OLLAMA_TIMEOUT_S", "inf"),
        ("MCP_LISTEN_OLLAMA_TIMEOUT_S", "0.01"),
        ("MCP_LISTEN_WHISPER_THREADS", "1_0"),
        ("MCP_LISTEN_WHISPER_THREADS", "\u0664"),
        ("MCP_LISTEN_WHISPER_THREADS", "4.0"),
        ("MCP_LISTEN_SILENCE_MS", "1_000"),
        ("MCP_LISTEN_SILENCE_MS", "+500"),
        ("MCP_LISTEN_OLLAMA_MODEL", "llama3.2\r\nollama rm x"),
        ("MCP_LISTEN_WHISPER_MODEL", "tiny\nbase"),
    ],
)
def test_numbers_are_plain_decimals_and_names_have_no_control_characters(name, raw):
    settings = load_settings({name: raw})
    assert len(settings.problems) == 1 and name in settings.problems[0], settings.problems


@pytest.mark.parametrize(
    "name,raw,attr,value",
    [
        ("MCP_LISTEN_OLLAMA_TIMEOUT_S", "2.5", "ollama_timeout_s", 2.5),
        ("MCP_LISTEN_OLLAMA_TIMEOUT_S", "300", "ollama_timeout_s", 300.0),
        ("MCP_LISTEN_WHISPER_THREADS", "10", "whisper_threads", 10),
    ],
)
def test_plain_numbers_are_read(name, raw, attr, value):
    settings = load_settings({name: raw})
    assert settings.problems == () and getattr(settings, attr) == value


def test_folders_are_absolute_with_the_home_expanded(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    settings = load_settings({"MCP_LISTEN_RECORDINGS_DIR": "~/rec", "WHISPER_MODEL_PATH": "models"})
    assert settings.recordings_dir == tmp_path / "home" / "rec"
    assert settings.whisper_model_dir == tmp_path / "models"
    assert settings.recordings_dir.is_absolute() and not (tmp_path / "~").exists()


def test_a_tilde_of_an_unknown_user_is_a_problem():
    settings = load_settings({"MCP_LISTEN_RECORDINGS_DIR": "~no-such-user-mcp-listen/rec"})
    assert len(settings.problems) == 1 and "MCP_LISTEN_RECORDINGS_DIR" in settings.problems[0]


def test_a_password_holding_a_slash_stays_credentials_and_is_masked():
    normal = normalize_ollama_host("http://bob:hunter/2@ollama.internal:8080")
    assert redact_url(normal) == "http://***@ollama.internal:8080"
    from mcp_listen.ollama.http import Target

    target = Target.parse("http://bob:hunter/2@ollama.internal:8080")
    assert (target.host, target.port, target.prefix) == ("ollama.internal", 8080, "")
    assert "hunter" not in target.shown and "bob" not in target.shown


def test_the_end_of_turn_default_comes_from_the_environment_and_a_bad_one_is_named():
    assert load_settings({}).defaults.end_of_turn == limits.DEFAULT_END_OF_TURN
    assert load_settings({"MCP_LISTEN_END_OF_TURN": "smart"}).defaults.end_of_turn == "smart"
    bad = load_settings({"MCP_LISTEN_END_OF_TURN": "sometimes"})
    assert bad.defaults.end_of_turn == limits.DEFAULT_END_OF_TURN
    assert len(bad.problems) == 1 and "MCP_LISTEN_END_OF_TURN" in bad.problems[0] and "smart" in bad.problems[0]


def test_the_max_pause_default_comes_from_the_environment_and_may_not_undercut_the_silence():
    assert load_settings({}).defaults.max_pause_ms == 3000
    assert load_settings({"MCP_LISTEN_MAX_PAUSE_MS": "4500"}).defaults.max_pause_ms == 4500
    bad = load_settings({"MCP_LISTEN_MAX_PAUSE_MS": "40000"})
    assert bad.defaults.max_pause_ms == 3000
    assert len(bad.problems) == 1 and "MCP_LISTEN_MAX_PAUSE_MS" in bad.problems[0] and "30000" in bad.problems[0]
    under = load_settings({"MCP_LISTEN_MAX_PAUSE_MS": "1500", "MCP_LISTEN_SILENCE_MS": "2000"})
    assert len(under.problems) == 1 and "MCP_LISTEN_SILENCE_MS" in under.problems[0]
    assert under.defaults.max_pause_ms == 3000 and under.defaults.silence_ms == 2000
