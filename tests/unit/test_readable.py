"""voice/readable.py: Markdown, SSML and HTML marks are taken out before Piper, words never added;
the engine refuses, before the voice loads, a text that is nothing but markup."""

from __future__ import annotations

import pytest

from mcp_listen.errors import InvalidArgument
from mcp_listen.voice.readable import readable


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("**Note:** read *this* and __that__", "Note: read this and that"),
        ("# Title\n> quoted\n- one\n* two", "Title\nquoted\none\ntwo"),
        ("see [the docs](https://example.org/a?b=c) now", "see the docs now"),
        ("run `make test` first", "run make test first"),
        ("```python\nprint(1)\n```", "\nprint(1)\n"),
        ('<speak>Hello <break time="1s"/> there</speak>', " Hello   there "),
        ("a <!-- hidden --> b", "a   b"),
        ("Tom &amp; Jerry", "Tom & Jerry"),
        ("---\nafter a rule", "\nafter a rule"),
    ],
)
def test_marks_go_and_words_stay(text, said):
    assert readable(text) == said


@pytest.mark.parametrize(
    "text",
    ["2 < 3 and 5 > 4", "snake_case and a_b_c", "1. Eggs\n2. Milk", "it costs $5 * 3", "你好，世界。", "שלום עולם"],
)
def test_prose_that_only_looks_like_markup_is_kept(text):
    assert readable(text) == text


def test_an_escaped_tag_is_said_as_text_not_taken_out():
    assert readable("&lt;b&gt; is bold") == "<b> is bold"


def test_runs_of_mark_characters_do_not_hang_the_call():
    """A guard against a hang, not a speed figure: the first emphasis rule took 4.7 s on this."""
    import time

    text = "<" * 10_000 + "*" * 10_000 + "[" * 10_000 + "`" * 10_000 + "_" * 10_000
    started = time.monotonic()
    assert readable(text).count("*") == 10_000
    assert time.monotonic() - started < 5.0


def test_a_text_of_nothing_but_markup_is_refused_before_anything_opens():
    from mcp_listen.engine import speaking

    with pytest.raises(InvalidArgument, match="nothing is left to say once its markup"):
        speaking.check_sayable("<speak><break/></speak>")
    speaking.check_sayable("<speak>Hello</speak>")  # words left: accepted
