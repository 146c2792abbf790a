"""The user's vocabulary (pure, no model): validated before anything opens, the start of every whisper prompt
with the text said before trimmed to fit, the argument over MCP_LISTEN_VOCABULARY, and never in a log line."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mcp_listen.config import Settings, load_settings
from mcp_listen.contract import limits
from mcp_listen.contract.arguments import ConverseArgs, TranscribeArgs, VoiceQueryArgs, parse_args
from mcp_listen.engine.engine import Engine
from mcp_listen.errors import InvalidArgument
from mcp_listen.speech.phrases import PhraseWorker
from mcp_listen.whisper.session import Session
from mcp_listen.whisper.text import PROMPT_CHARS, prompt_of
from mcp_listen.whisper.transcriber import Transcriber

VOCABULARY = "mcp-listen, pywhispercpp, Siobhan, kubectl"
TERMS = ("mcp-listen", "pywhispercpp", "siobhan", "kubectl")


@pytest.mark.parametrize("model", [TranscribeArgs, VoiceQueryArgs, ConverseArgs])
@pytest.mark.parametrize("value", ["Aoife, " * 22, "Aoife\x1b[2J, Grafana", "Aoife\r\nGrafana"])
def test_a_refused_vocabulary_is_named_by_its_length_with_the_bound_and_what_to_do(model, value):
    raw = {"vocabulary": value, **({"text": "Which cluster?"} if model is ConverseArgs else {})}
    with pytest.raises(InvalidArgument) as caught:
        parse_args(model, raw)
    message = str(caught.value)
    assert message.startswith("Invalid vocabulary: expected names and terms"), message
    assert f"at most {limits.MAX_VOCABULARY_CHARS} characters, no control characters" in message
    assert "Keep the names whisper mishears" in message  # what to do
    assert f"got a string of {len(value)} characters" in message
    assert "Aoife" not in message and "Grafana" not in message, "the user's names are never echoed"


def test_mcp_listen_vocabulary_is_the_default_and_a_bad_one_is_named_without_its_value():
    assert load_settings({}).defaults.vocabulary == ""
    assert load_settings({"MCP_LISTEN_VOCABULARY": f" {VOCABULARY} "}).defaults.vocabulary == VOCABULARY
    for bad in ("Aoife\x07", "Aoife, " * 22):
        settings = load_settings({"MCP_LISTEN_VOCABULARY": bad})
        assert settings.defaults.vocabulary == ""
        assert len(settings.problems) == 1 and "MCP_LISTEN_VOCABULARY" in settings.problems[0]
        assert "Aoife" not in settings.problems[0] and str(limits.MAX_VOCABULARY_CHARS) in settings.problems[0]


def test_the_argument_replaces_the_default_and_empty_means_none():
    engine = Engine(Settings(defaults=limits.Defaults(vocabulary="Grafana, Nguyen")))
    assert engine.vocabulary(parse_args(TranscribeArgs, {})) == "Grafana, Nguyen"
    assert engine.vocabulary(parse_args(TranscribeArgs, {"vocabulary": VOCABULARY})) == VOCABULARY
    assert engine.vocabulary(parse_args(TranscribeArgs, {"vocabulary": ""})) == ""


def test_the_prompt_is_the_vocabulary_whole_then_the_end_of_the_text_before():
    before = " ".join(f"word{i}" for i in range(200))  # 1,290 characters
    prompt = prompt_of(VOCABULARY, before)
    assert prompt.startswith(VOCABULARY + ". word"), prompt[:80]
    assert prompt.endswith(" word199") and len(prompt) <= PROMPT_CHARS
    assert len(prompt) > PROMPT_CHARS - 10, "the text before fills the room the vocabulary leaves"
    kept = prompt[len(VOCABULARY) + 2 :].split()
    assert kept == before.split()[-len(kept) :], "trimmed from its start, at a word"
    longest = "v" * limits.MAX_VOCABULARY_CHARS
    assert prompt_of(longest, before).startswith(longest + ". ") and len(prompt_of(longest, before)) <= PROMPT_CHARS
    assert len(prompt_of(longest, before)) - len(longest) >= PROMPT_CHARS * 2 / 3, "the text before keeps its room"


def test_without_a_vocabulary_the_prompt_is_the_text_before():
    assert prompt_of("", "and then we went") == "and then we went"
    assert prompt_of("  ", "and then") == "and then"
    assert prompt_of("", "") == ""
    assert prompt_of("Siobhan, kubectl", "") == "Siobhan, kubectl."
    assert prompt_of("Siobhan asked.", "and then") == "Siobhan asked. and then"
    assert len(prompt_of("", "x " * 400)) <= PROMPT_CHARS


class FakeContext:
    """whisper.cpp's context as the Transcriber drives it: records each pass's parameters, says the same words."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def transcribe(self, audio: Any, abort: Any, **params: Any) -> list[str]:
        self.prompts.append(params["initial_prompt"])
        return [" Siobhan ran kubectl on mcp-listen."]


def test_every_phrase_s_prompt_opens_with_the_vocabulary_and_no_log_line_holds_it(tmp_path, caplog):
    """The real Transcriber, session and phrase worker at DEBUG, whisper.cpp's context a fake: the vocabulary
    (and what was heard) reaches whisper's prompt and no log record."""
    caplog.set_level(logging.DEBUG)
    model = tmp_path / "ggml-tiny.en.bin"
    transcriber = Transcriber(threads=1)
    context = FakeContext()
    transcriber._model, transcriber._key, transcriber._path = context, (1, 2, 3, 4), Path(model)
    session = Session(transcriber, model, translate=False, cancel=None, vocabulary=VOCABULARY)
    session.preload()  # resident: the session takes its key, nothing loads
    worker = PhraseWorker(session.transcribe, "en", session.detect)
    speech = (np.sin(np.arange(48000) / 5) * 8000).astype(np.int16)
    worker.submit(speech)
    worker.submit(speech)
    text = worker.finish(speech)
    assert text.count("Siobhan") == 3 and len(context.prompts) == 3
    assert context.prompts[0] == VOCABULARY + "."
    assert all(p.startswith(VOCABULARY + ". Siobhan ran kubectl") for p in context.prompts[1:]), context.prompts
    session.transcribe(speech, "and then", "en", vocabulary=False)  # barge-in's confirmation
    assert context.prompts[-1] == "and then", "the confirmation's prompt holds no vocabulary"
    transcriber.unload()
    logged = "\n".join(f"{r.name} {r.getMessage()} {r.args}" for r in caplog.records).lower()
    assert "whisper pass" in logged, "the whisper passes must have logged at DEBUG, or this test proves nothing"
    leaked = [term for term in TERMS if term in logged]
    assert not leaked, f"the log holds {leaked}"


@pytest.mark.parametrize(
    "argv", [["listen"], ["query"], ["converse", "Which cluster?"], ["transcribe", "in.wav"]], ids=lambda a: a[0]
)
def test_the_cli_s_voice_commands_take_vocabulary_as_the_tool_does(argv):
    from mcp_listen.cli import commands
    from mcp_listen.cli.main import build_parser

    opts = build_parser().parse_args([*argv, "--vocabulary", VOCABULARY])
    assert commands.tool_args(opts, commands.WHISPER_FIELDS)["vocabulary"] == VOCABULARY
    opts = build_parser().parse_args([*argv, "--vocabulary", "v" * 151])
    with pytest.raises(InvalidArgument, match="Invalid vocabulary: .*got a string of 151 characters"):
        parse_args(TranscribeArgs, commands.tool_args(opts, commands.WHISPER_FIELDS))
