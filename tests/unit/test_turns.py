"""Whether whisper's text so far sounds like the end of the user's turn (speech/turns.py)."""

from __future__ import annotations

import pytest

from mcp_listen.speech.ending import NO_SIGNAL, Verdict
from mcp_listen.speech.turns import judge, sounds_finished, words_say


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


@pytest.mark.parametrize(
    "text,language,said",
    [
        ("Please enter your.", "en", "unfinished"),  # whisper's full stop after a cut: not believed
        ("Please enter your", "en", "unfinished"),
        ("I went to the store.", "en", "open"),
        ("I went to the store", "en", "open"),  # whisper's punctuation, or its absence, says nothing
        ("First of all,", "en", "open"),
        ("Where are you from?", "en", "open"),
        ("Por favor ingrese su número de.", "es", "unfinished"),
        ("Veuillez entrer votre mot de passe.", "fr", "open"),
        ("Something about the.", "xx", None),  # a language the rule does not know: no pretending
        ("", "en", "open"),
    ],
)
def test_the_words_say_past_whisper_s_punctuation(text, language, said):
    assert words_say(text, language) == said


def test_the_rule_words_first_then_the_voice():
    assert judge("I went to the store and.", "en", 0.99) == Verdict(False, "words")
    assert judge("Where are you from?", "en", 0.01) == Verdict(False, "words+voice")  # "?" on a cut: the voice
    assert judge("I went to the store.", "en", 0.9) == Verdict(True, "words+voice")
    assert judge("I went to the store.", "en", 0.1) == Verdict(False, "words+voice")
    assert judge("Ik ga naar huis.", "ja", 0.9) == Verdict(True, "voice")
    assert judge("Ik ga naar huis.", "ja", 0.1) == Verdict(False, "voice")


def test_unfinished_words_hold_at_once_the_rest_waits_for_the_voice():
    assert judge("I went to the store and.", "en", None, voice_in=False) == Verdict(False, "words")
    assert judge("I went to the store.", "en", None, voice_in=False) is None


def test_the_voice_waits_for_the_words():
    assert judge(None, "en", 0.9) is None  # held until they are in, or max_pause_ms
    assert judge(None, "en", None) is None


def test_without_the_audio_model_the_text_rule_decides_or_silence_does():
    assert judge("I went to the store.", "en", None) == Verdict(True, "words")
    assert judge("So I was thinking...", "en", float("nan")) == Verdict(False, "words")
    assert judge("Something.", "ja", None) == Verdict(True, NO_SIGNAL)
