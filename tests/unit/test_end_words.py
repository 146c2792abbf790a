"""End words (pure, no model): `said_last` finds the user's word or short phrase as the last words of a
transcription, forgiving whisper's spelling but not a word in mid-sentence; the `end_words` argument and
MCP_LISTEN_END_WORDS are refused as hostile input before anything opens, reach the listening plan, and never
appear in a message, a log line or tools/list."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest

from mcp_listen.config import Settings, load_settings
from mcp_listen.contract import limits
from mcp_listen.contract.arguments import CaptureArgs, ConverseArgs, TranscribeArgs, VoiceQueryArgs, parse_args
from mcp_listen.contract.results import Transcribed
from mcp_listen.errors import InvalidArgument
from mcp_listen.speech.end_words import FUZZY_LETTERS, SAME_WORD, EndWord, alike, fold, said_last, words_of
from mcp_listen.speech.listener import Plan

# ============================================================================ the matcher


@pytest.mark.parametrize(
    "text,end_words,phrase,rest",
    [
        ("Fix the bug, over.", ("over",), "over", "Fix the bug."),
        ("over", ("over",), "over", ""),
        ("Over.", ("over",), "over", ""),
        (" Over!", ("over",), "over", ""),
        ("Fix the bug. Over.", ("over",), "over", "Fix the bug."),
        ("Fix the bug over", ("over",), "over", "Fix the bug"),
        ("Is that right, over?", ("over",), "over", "Is that right?"),
        ('He said "stop", over.', ("over",), "over", 'He said "stop".'),
        ("Fix it (over).", ("over",), "over", "Fix it."),
        ("Fix it — over…", ("over",), "over", "Fix it…"),
        ("Done… over", ("over",), "over", "Done…"),
        ("OVER", ("over",), "over", ""),
        ("ＯＶＥＲ.", ("over",), "over", ""),  # full-width letters, NFKD
        # the phrase's words, as whisper writes them
        ("Send it.", ("send it",), "send it", ""),
        ("Please ship it, send-it!", ("send it",), "send it", "Please ship it!"),
        ("Sendit", ("send it",), "send it", ""),
        ("Ship it. Send  it", ("send it",), "send it", "Ship it."),
        ("Thats all.", ("that's all",), "that's all", ""),
        ("That's  all folks, that is all", ("that is all",), "that is all", "That's  all folks"),
        # accents, apostrophes, case
        ("Voilà le rapport. C’est tout.", ("c'est tout",), "c'est tout", "Voilà le rapport."),
        ("Voilà le rapport, c'est tout", ("C’EST TOUT",), "C’EST TOUT", "Voilà le rapport"),
        ("Envíalo ya, ¡ENVÍALO!", ("envialo",), "envialo", "Envíalo ya!"),
        ("Das ist alles, Schluß.", ("schluss",), "schluss", "Das ist alles."),
        # words of FUZZY_LETTERS letters or more, as whisper may spell them
        ("Copy that. Rogers!", ("roger",), "roger", "Copy that."),
        ("That's the colour, finito.", ("finita",), "finita", "That's the colour."),
        # other scripts
        ("Ну, вот и всё.", ("всё",), "всё", "Ну, вот и."),
        ("Ну, вот и все", ("Всё",), "Всё", "Ну, вот и"),  # ё written as е, as Russian often is
        ("これで以上。", ("以上",), "以上", "これで。"),
        ("以上", ("以上",), "以上", ""),
        ("報告は終わりです、以上！", ("以上",), "以上", "報告は終わりです！"),
        ("Ok, τέλος.", ("Τέλος",), "Τέλος", "Ok."),
    ],
)
def test_an_end_word_said_last_is_found_and_taken_out(text, end_words, phrase, rest):
    assert said_last(text, end_words) == EndWord(phrase, rest)


@pytest.mark.parametrize(
    "text,end_words",
    [
        ("game over is a good title", ("over",)),  # mid-sentence
        ("it's over, I think", ("over",)),
        ("over and above that", ("over",)),
        ("Put it in the oven.", ("over",)),  # 4 letters: one changed is another word (0.75 alike)
        ("I can hover.", ("over",)),  # 0.89 alike, but "over" is short: as written only
        ("Take cover!", ("over",)),
        ("The rover", ("roger",)),  # 5 letters, one changed: 0.8, under SAME_WORD
        ("I sent it.", ("send it",)),
        ("Sending", ("send it",)),
        ("Sendit now", ("send it",)),
        ("以上です", ("以上",)),  # the phrase, then more: not last
        ("Overall", ("over",)),
        ("", ("over",)),
        ("   …  ", ("over",)),
        ("Fix it, over.", ()),
        ("Fix it, over.", ("...", "  ")),  # a phrase with no letters matches nothing
    ],
)
def test_no_end_word_unless_the_phrase_is_the_last_words(text, end_words):
    assert said_last(text, end_words) is None


def test_of_several_phrases_the_longest_that_matches_wins():
    phrases = ("out", "over", "over and out", "and out")
    assert said_last("Roger, over and out.", phrases) == EndWord("over and out", "Roger.")
    assert said_last("Roger, over and out.", tuple(reversed(phrases))) == EndWord("over and out", "Roger.")
    assert said_last("Check it out.", phrases) == EndWord("out", "Check it.")
    assert said_last("That's it, over.", phrases) == EndWord("over", "That's it.")
    assert said_last("Send it, that's all.", ("send it", "that's all")) == EndWord("that's all", "Send it.")


def test_the_text_is_emptied_when_it_was_only_the_end_word():
    for text in ("over", "Over.", "  over  ", "“Over!”", "— over…", "Send it.", "send-it", "以上。"):
        found = said_last(text, ("over", "send it", "以上"))
        assert found is not None and found.text == "", (text, found)


def test_folding_forgives_case_accents_and_compatibility_forms_and_keeps_letters_of_any_script():
    assert fold("C’EST") == "cest" and fold("Schluß") == "schluss" and fold("ﬁn") == "fin"
    assert fold("Ёлка") == "елка" and fold("Ñandú") == "nandu" and fold("İstanbul") == "istanbul"
    assert [word.folded for word in words_of("send-it, c'est tout!")] == ["send", "it", "c", "est", "tout"]
    assert [word.folded for word in words_of("これで以上")] == ["こ", "れ", "て", "以", "上"]  # で is て + ゛
    assert [word.folded for word in words_of("ok以上")] == ["ok", "以", "上"]
    text = "Fix it, over."
    assert [text[w.start : w.end] for w in words_of(text)] == ["Fix", "it", "over"]


def test_the_fuzzy_rule_is_for_long_words_only():
    assert FUZZY_LETTERS == 5 and 0.8 < SAME_WORD < 0.83
    assert not alike("oven", "over") and not alike("hover", "over") and not alike("overs", "over")
    assert alike("rogers", "roger") and alike("color", "colour") and not alike("rover", "roger")
    assert alike("over", "over") and alike("以", "以")


# ============================================================================ the argument and the setting

TOOLS = [TranscribeArgs, VoiceQueryArgs, ConverseArgs]
SECRET = "Zanzibarquux"
"""A word that appears nowhere else: found in a message, a log line or tools/list, it leaked."""


def raw_for(model: type, **arguments: Any) -> dict[str, Any]:
    return {**arguments, **({"text": "Anything else?"} if model is ConverseArgs else {})}


@pytest.mark.parametrize("model", TOOLS)
def test_the_argument_is_a_tuple_of_tidied_phrases_and_empty_means_none(model):
    args = parse_args(model, raw_for(model, end_words=["over", "  send   it ", "over", "c’est tout", "以上"]))
    assert args.end_words == ("over", "send it", "c’est tout", "以上")
    assert parse_args(model, raw_for(model, end_words=[])).end_words == ()
    assert parse_args(model, raw_for(model, end_words=None)).end_words is None
    longest = ["w" * limits.MAX_END_WORD_CHARS] + [f"word{i}" for i in range(limits.MAX_END_WORDS - 1)]
    assert len(parse_args(model, raw_for(model, end_words=longest)).end_words) == limits.MAX_END_WORDS
    four = " ".join(["a"] * limits.MAX_END_WORD_WORDS)
    assert parse_args(model, raw_for(model, end_words=[four])).end_words == (four,)


HOSTILE = [
    ([f"{SECRET}\x1b[2J"], "a control character in entry 1"),
    (["over", f"{SECRET}\r\nrm -rf"], "a control character in entry 2"),
    (["over", f"{SECRET}\u0085"], "a control character in entry 2"),  # C1 NEL
    ([f"{SECRET}\ud800"], "a lone surrogate (not valid Unicode) in entry 1"),
    (["over", ""], "an empty entry 2"),
    (["   "], "an empty entry 1"),
    ([SECRET * 4], f"{len(SECRET) * 4} characters in entry 1"),
    ([SECRET * 100_000], f"{len(SECRET) * 100_000} characters in entry 1"),
    ([f"{SECRET} a b c d"], "5 words in entry 1"),
    ([SECRET] * 11, "11 entries"),
    ([SECRET] * 100_000, "100000 entries"),
    (["42"], "no letter in entry 1"),
    (["...", "over"], "no letter in entry 1"),
    (["👍"], "no letter in entry 1"),
    ([7], "an integer as entry 1, not a string"),
    (["over", None], "a null as entry 2, not a string"),
    (["over", [SECRET]], "a list as entry 2, not a string"),
    (f"over, {SECRET}", "a string of 18 characters (pass an array of strings"),
    ({SECRET: 1}, "an object"),
    (True, "a boolean"),
]


@pytest.mark.parametrize("model", TOOLS)
@pytest.mark.parametrize("value,problem", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_end_words_are_refused_naming_the_argument_the_range_and_the_problem_never_the_words(
    model, value, problem
):
    with pytest.raises(InvalidArgument) as caught:
        parse_args(model, raw_for(model, end_words=value))
    message = str(caught.value)
    assert message.startswith("Invalid end_words: expected an array of at most 10 words or short phrases"), message
    assert f"each 1 to {limits.MAX_END_WORD_WORDS} words and at most {limits.MAX_END_WORD_CHARS} characters" in message
    assert f"got {problem}" in message, message
    assert SECRET not in message and SECRET.lower() not in message.lower(), "the words are never echoed"
    assert len(message) < 400, "a huge value makes no huge message"


@pytest.mark.parametrize("model", TOOLS)
def test_end_words_need_a_recording_that_stops_on_silence_and_take_either_end_of_turn(model):
    with pytest.raises(InvalidArgument, match=r"end_words requires stop_on_silence: true .*end_words: \[\]"):
        parse_args(model, raw_for(model, end_words=["over"], stop_on_silence=False))
    assert parse_args(model, raw_for(model, end_words=[], stop_on_silence=False)).end_words == ()
    for mode in limits.END_OF_TURN_MODES:
        assert parse_args(model, raw_for(model, end_words=["over"], end_of_turn=mode)).end_words == ("over",)


def test_capture_audio_takes_no_end_words():
    with pytest.raises(InvalidArgument, match="Unknown argument 'end_words'"):
        parse_args(CaptureArgs, {"end_words": ["over"], "stop_on_silence": True})


def test_the_schema_states_the_bounds_and_no_default():
    from mcp_listen.contract.arguments import input_schema

    mine = limits.Defaults(end_words=(SECRET,))
    for model in TOOLS:
        schema = input_schema(model, mine)
        prop = schema["properties"]["end_words"]
        array = prop["anyOf"][0]
        assert array["type"] == "array" and array["maxItems"] == limits.MAX_END_WORDS
        assert array["items"] == {"type": "string", "minLength": 1, "maxLength": limits.MAX_END_WORD_CHARS}
        assert "default" not in prop
        assert "up to 10, each 1-4 words and at most 40 characters" in prop["description"]
        assert SECRET not in str(schema), "the user's end words are not stated in tools/list"


def test_mcp_listen_end_words_is_the_default_as_a_comma_separated_list():
    assert load_settings({}).defaults.end_words == ()
    assert load_settings({"MCP_LISTEN_END_WORDS": "over, send it"}).defaults.end_words == ("over", "send it")
    assert load_settings({"MCP_LISTEN_END_WORDS": " over ,  send  it, "}).defaults.end_words == ("over", "send it")
    assert load_settings({"MCP_LISTEN_END_WORDS": "c’est tout,以上"}).defaults.end_words == ("c’est tout", "以上")
    assert load_settings({"MCP_LISTEN_END_WORDS": "  "}).defaults.end_words == ()
    settings = load_settings({"MCP_LISTEN_END_WORDS": "over"})
    assert settings.problems == () and "end_words" in settings.user_defaults


@pytest.mark.parametrize(
    "raw,problem",
    [
        (f"over,,{SECRET}", "an empty entry 2"),
        (f"{SECRET},", None),  # a trailing comma is allowed
        (",".join([SECRET] * 11), "11 entries"),
        (SECRET * 4, f"{len(SECRET) * 4} characters in entry 1"),
        (f"{SECRET} a b c d", "5 words in entry 1"),
        (f"over, {SECRET}\x07", "a control character in entry 2"),
        ("over, 42", "no letter in entry 2"),
    ],
)
def test_a_bad_mcp_listen_end_words_is_named_with_its_problem_never_its_words(raw, problem):
    settings = load_settings({"MCP_LISTEN_END_WORDS": raw})
    if problem is None:
        assert settings.problems == () and settings.defaults.end_words == (SECRET,)
        return
    assert settings.defaults.end_words == (), "a bad value keeps the default: none"
    assert len(settings.problems) == 1, settings.problems
    said = settings.problems[0]
    assert said.startswith(f"Environment variable MCP_LISTEN_END_WORDS is invalid ({problem}): expected words or")
    assert "separated by commas" in said and f"at most {limits.MAX_END_WORDS}" in said
    assert SECRET not in said


@pytest.mark.parametrize("model", TOOLS)
def test_the_plan_takes_the_argument_over_the_default_and_keeps_them_out_of_its_repr(model):
    defaults = limits.Defaults(end_words=(SECRET, "over"))
    plan = Plan.from_args(parse_args(model, raw_for(model)), defaults, stop_default=True)
    assert plan.end_words == (SECRET, "over")
    plan = Plan.from_args(parse_args(model, raw_for(model, end_words=["send it"])), defaults, stop_default=True)
    assert plan.end_words == ("send it",)
    plan = Plan.from_args(parse_args(model, raw_for(model, end_words=[])), defaults, stop_default=True)
    assert plan.end_words == ()
    plan = Plan.from_args(parse_args(model, raw_for(model, stop_on_silence=False)), defaults, stop_default=True)
    assert plan.end_words == (), "a fixed-length recording ends on no word, the default's included"
    assert plan.end_of_turn == "silence", "nor on a pause: smart's audio model would only cost memory there"
    plan = Plan.from_args(parse_args(model, raw_for(model, end_of_turn="smart")), defaults, stop_default=True)
    assert plan.end_words == (SECRET, "over") and plan.end_of_turn == "smart"
    assert SECRET not in repr(plan) and SECRET not in str(plan)


def test_capture_audio_s_plan_listens_for_no_end_word_whatever_the_default():
    defaults = limits.Defaults(end_words=("over",))
    args = parse_args(CaptureArgs, {"stop_on_silence": True})
    assert Plan.from_args(args, defaults, stop_default=False).end_words == ()


# ============================================================================ never in a log line


@dataclass
class FakeEngine:
    """The adapter's engine: records each transcribe_voice it is asked, answers with the same words."""

    settings: Settings
    shutdown: threading.Event = field(default_factory=threading.Event)
    asked: list[Any] = field(default_factory=list)

    def transcribe_voice(self, args: Any, *, stop: Any = None, progress: Any = None) -> Transcribed:
        self.asked.append(args)
        return Transcribed("Fix the bug.", 2400, "en", True, "silence")


@pytest.mark.anyio
async def test_the_words_appear_in_no_log_line_no_message_and_not_in_tools_list(caplog):
    """The real adapter at DEBUG, a fake engine: the words of the argument and of MCP_LISTEN_END_WORDS (good
    and refused) reach the engine's arguments, and no log record, error message or tools/list."""
    from mcp import Client

    from mcp_listen.server.app import build_server

    caplog.set_level(logging.DEBUG)
    bad = load_settings({"MCP_LISTEN_END_WORDS": f"{SECRET}x, {SECRET}\x1b"})
    assert bad.problems and SECRET not in bad.problems[0]
    engine = FakeEngine(load_settings({"MCP_LISTEN_END_WORDS": f"{SECRET}, over", "MCP_LISTEN_LOG_LEVEL": "DEBUG"}))
    async with Client(build_server(engine)) as client:
        listed = await client.list_tools()
        good = await client.call_tool("transcribe_voice", {"end_words": [f"{SECRET} now", "send it"]})
        refused = await client.call_tool("transcribe_voice", {"end_words": [f"{SECRET}\r\n"] * 3})
        refused_too = await client.call_tool("voice_query", {"end_words": [SECRET] * 11})
    assert not good.is_error and refused.is_error and refused_too.is_error
    assert [args.end_words for args in engine.asked] == [(f"{SECRET} now", "send it")], "only the good call ran"
    said = " ".join(block.text for result in (good, refused, refused_too) for block in result.content)
    assert "Invalid end_words" in said and SECRET not in said
    assert SECRET not in str([tool.model_dump() for tool in listed.tools])
    logged = "\n".join(f"{r.name} {r.getMessage()} {r.args} {r.exc_text or ''}" for r in caplog.records)
    assert caplog.records, "the adapter must have logged at DEBUG, or this test proves nothing"
    assert SECRET.lower() not in logged.lower(), "an end word reached a log line"


# ============================================================================ the CLI


@pytest.mark.parametrize("argv", [["listen"], ["query"], ["converse", "Anything else?"]], ids=lambda a: a[0])
def test_the_cli_s_listening_commands_take_end_words_as_the_tool_does(argv):
    from mcp_listen.cli import commands
    from mcp_listen.cli.main import build_parser

    def end_words(value: str) -> Any:
        opts = build_parser().parse_args([*argv, "--end-words", value])
        return parse_args(TranscribeArgs, commands.tool_args(opts, commands.TURN_FIELDS)).end_words

    assert end_words("over, send  it,") == ("over", "send it")
    assert end_words("") == ()
    with pytest.raises(InvalidArgument, match=r"Invalid end_words: .*got an empty entry 2\.") as caught:
        end_words(f"over,,{SECRET}")
    assert SECRET not in str(caught.value)
    opts = build_parser().parse_args([*argv, "--end-words", "over", "--no-stop-on-silence"])
    fields = (*commands.RECORDING_FIELDS, *commands.TURN_FIELDS)
    with pytest.raises(InvalidArgument, match="end_words requires stop_on_silence: true"):
        parse_args(TranscribeArgs, commands.tool_args(opts, fields))


@pytest.mark.parametrize("argv", [["transcribe", "in.wav"], ["capture"]], ids=lambda a: a[0])
def test_a_file_or_a_capture_takes_no_end_words(argv, capsys):
    from mcp_listen.cli.main import build_parser

    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args([*argv, "--end-words", "over"])
    assert stopped.value.code == 64 and "--end-words" in capsys.readouterr().err
