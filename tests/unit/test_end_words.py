"""End words (pure, no model): `said_last` finds the user's word or short phrase as the last words of a
transcription, forgiving whisper's spelling but not a word in mid-sentence."""

from __future__ import annotations

import pytest

from mcp_listen.speech.end_words import FUZZY_LETTERS, SAME_WORD, EndWord, alike, fold, said_last, words_of

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
