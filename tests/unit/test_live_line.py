"""The CLI's live line (mcp-listen listen / converse): the words so far, and "holding: mid-sentence"
while end_of_turn smart holds a pause. Rendered as a terminal would get it, without a microphone."""

from __future__ import annotations

import io

import pytest

from mcp_listen.cli.commands import HOLDING_MARK, _Say, live_line
from mcp_listen.contract.limits import HOLDING_MESSAGE, RESUMED_MESSAGE, partial_message


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_mark_follows_the_words_and_always_shows_whole():
    assert live_line("I went to the store and", True, 80) == f"I went to the store and  ({HOLDING_MARK})"
    assert live_line("I went to the store and", False, 80) == "I went to the store and"
    narrow = live_line("word " * 40, True, 40)
    assert len(narrow) == 40 and narrow.endswith(f"({HOLDING_MARK})") and narrow.startswith("…")
    assert live_line("", True, 40) == f"({HOLDING_MARK})"


def test_a_terminal_sees_holding_on_the_words_line_until_speech_resumes(monkeypatch):
    screen = Terminal()
    monkeypatch.setattr("sys.stderr", screen)
    say = _Say()
    say(0, None, partial_message("so I was thinking about"))
    say(0, None, HOLDING_MESSAGE)
    held = screen.getvalue().rsplit("\r\033[K", 1)[-1]
    assert held == f"so I was thinking about  ({HOLDING_MARK})"
    say(0, None, RESUMED_MESSAGE)
    assert screen.getvalue().rsplit("\r\033[K", 1)[-1] == "so I was thinking about"
    say(0, None, HOLDING_MESSAGE)
    say(0, None, partial_message("so I was thinking about the"))  # new words while held: the mark stays
    assert screen.getvalue().rsplit("\r\033[K", 1)[-1] == f"so I was thinking about the  ({HOLDING_MARK})"
    say(0, None, "Recording finished (5.1 s, silence; max_pause by words)")
    assert screen.getvalue().endswith(
        f"({HOLDING_MARK})\n\r\033[KRecording finished (5.1 s, silence; max_pause by words)\n"
    )


@pytest.mark.parametrize("message", [HOLDING_MESSAGE, RESUMED_MESSAGE])
def test_a_log_gets_each_hold_as_a_plain_line(monkeypatch, message):
    log = io.StringIO()
    monkeypatch.setattr("sys.stderr", log)
    say = _Say()
    say(0, None, message)
    say(0, None, message)
    assert log.getvalue() == f"{message}\n{message}\n"
