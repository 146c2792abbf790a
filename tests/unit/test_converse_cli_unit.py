"""`mcp-listen converse` on stderr: the user cutting in shown as it happens (the engine's progress) and
summed up once the turn is over, with what was heard on a terminal; the flag that turns barge-in off."""

from __future__ import annotations

import pytest

from mcp_listen.cli import commands
from mcp_listen.cli.main import build_parser
from mcp_listen.contract.results import Conversed, Spoken, Transcribed

HEARD = "please tell me a short story about a lighthouse keeper"


def conversed(*, cut_in_after_s: float | None, listening_after_s: float | None = None, warning: str | None = None):
    answer = Transcribed(HEARD, 3040, "en", True, "silence", warning)
    spoken = Spoken("en_US-joe-medium", 3210, 160, cut_in_after_s is not None)
    if cut_in_after_s is not None or listening_after_s is None:  # barge-in ran: played_ms says what was heard
        spoken = Spoken(spoken.voice, 3210, 160, spoken.interrupted, played_ms=3210)
    return Conversed(answer, spoken, listening_after_s, cut_in_after_s)


def test_a_cut_in_is_summed_up_with_what_was_heard_on_a_terminal_only():
    result = conversed(cut_in_after_s=3.21)
    assert commands.turn_lines(result, words=True) == [f'(you spoke over the speech 3210 ms in: heard "{HEARD}")']
    assert commands.turn_lines(result, words=False) == ["(you spoke over the speech 3210 ms in)"]


def test_a_speech_nobody_cut_short_and_a_half_duplex_turn_say_so():
    assert commands.turn_lines(conversed(cut_in_after_s=None), words=True) == [
        "(the speech played to its end: nobody spoke over it)"
    ]
    half_duplex = conversed(cut_in_after_s=None, listening_after_s=0.138, warning="Barge-in needs the echo canceller.")
    assert commands.turn_lines(half_duplex, words=True) == [
        "(listening began 138 ms after the speech ended)",
        "(Barge-in needs the echo canceller.)",
    ]


def test_the_cut_in_progress_is_one_line_as_it_happens(capsys):
    """The engine's progress when the user cuts in (engine.py: listening()) is a phase of its own: one
    plain line on a pipe (capsys's stderr is one), before the words that follow."""
    say = commands._Say()
    message = "The user spoke over the speech 3.2 s in: it stopped. Listening on vmic (up to 15 s)"
    for text in ("Speaking on vmic-speaker", message, "Partial transcript: please tell"):
        say(0, None, text)
    say.close()
    assert capsys.readouterr().err.splitlines() == ["Speaking on vmic-speaker", message]


@pytest.mark.parametrize("command", ["converse", "say"])
@pytest.mark.parametrize(("flags", "value"), [([], None), (["--barge-in"], True), (["--no-barge-in"], False)])
def test_barge_in_is_the_setting_s_unless_a_flag_says(command, flags, value):
    assert build_parser().parse_args([command, "Hi.", *flags]).barge_in is value
