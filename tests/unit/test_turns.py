"""Whether whisper's text so far sounds like the end of the user's turn (speech/turns.py)."""

from __future__ import annotations

import pytest

from mcp_listen.speech.turns import sounds_finished


@pytest.mark.parametrize(
    "text,language",
    [
        ("I went to the store.", "en"),
        ("Where are you from?", "en"),
        ("Stop!", "en"),
        ('He said "yes."', "en"),
        ("Ich mag das.", "de"),
        ("Hola, ¿qué tal?", "es"),
        ("C'est fini.", "fr"),
        ("", "en"),
        ("Done.", "xx"),
    ],
)
def test_a_finished_sentence_ends_the_turn(text, language):
    assert sounds_finished(text, language)


@pytest.mark.parametrize(
    "text,language",
    [
        ("I went to the store to buy some bread and.", "en"),
        ("I went to the", "en"),
        ("So I was thinking...", "en"),
        ("So I was thinking…", "en"),
        ("Well, um.", "en"),
        ("First of all,", "en"),
        ("I need it because.", "en"),
        ("Je pense que.", "fr"),
        ("Quiero ir a la playa pero.", "es"),
        ("Ich glaube, dass.", "de"),
        ("Eu acho que.", "pt"),
        ("Penso che.", "it"),
        ("Something about the.", "xx"),
    ],
)
def test_words_that_end_unfinished_do_not(text, language):
    assert not sounds_finished(text, language)


def test_the_trailing_words_are_the_language_s_own():
    assert not sounds_finished("Il est parti et.", "fr")
    assert sounds_finished("He is gone et.", "en")  # "et" trails in French only
