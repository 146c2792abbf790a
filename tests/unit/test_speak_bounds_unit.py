"""What bounds the cost of a text to the voice, without the voice: runs of the scripts written without spaces
are accepted and cut between their letters, and a sentence's phonemes are rendered in bounded parts."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_listen.contract import arguments
from mcp_listen.contract.limits import MAX_WORD_CHARS
from mcp_listen.errors import InvalidArgument
from mcp_listen.voice.pieces import MAX_FIRST_WORDS, MAX_RUN_WORDS, ends_mid_clause, pieces
from mcp_listen.voice.synth import phoneme_chunks


def parse(**raw: Any) -> arguments.SpeakArgs:
    return arguments.parse_args(arguments.SpeakArgs, raw)


CHINESE_RUN = "这是一个很长的中文句子没有空格也没有标点" * 15  # 300 characters, no space, no punctuation
THAI_RUN = "สวัสดีชาวโลก" * 30  # 360 characters: Thai puts no space between words


@pytest.mark.parametrize("run", [CHINESE_RUN, THAI_RUN, "ひらがなとカタカナ" * 30], ids=["Chinese", "Thai", "kana"])
def test_a_long_run_of_a_script_written_without_spaces_is_accepted_and_cut_between_its_letters(run):
    assert parse(text=run).text == run  # not "a word too long to say"
    said = pieces(run)
    assert "".join(said) == run
    assert len(said[0]) <= MAX_FIRST_WORDS + 2  # a letter with the marks after it (Thai vowel signs)
    assert all(len(piece) <= 2 * MAX_RUN_WORDS for piece in said), [len(p) for p in said]
    assert len(said) >= len(run) // (2 * MAX_RUN_WORDS)


@pytest.mark.parametrize(
    "text",
    [
        "x" * (MAX_WORD_CHARS + 1),
        "한" * (MAX_WORD_CHARS + 1),  # Korean is written with spaces: a run is one word
        "中文" + "y" * (MAX_WORD_CHARS + 1) + "中文",
    ],
    ids=["Latin", "Korean", "Latin between Chinese"],
)
def test_a_word_of_a_spaced_script_over_the_limit_is_still_refused(text):
    with pytest.raises(InvalidArgument, match="no word longer than 200 characters"):
        parse(text=text)


def test_a_thai_letter_keeps_its_vowel_signs_and_latin_beside_chinese_is_one_word():
    assert all(piece[0] not in "\u0e31\u0e34\u0e35\u0e36\u0e37\u0e38\u0e39" for piece in pieces(THAI_RUN))
    said = pieces("The word 中文字 means Chinese writing, as you know.")
    assert "".join(said).replace(" ", "") == "Theword中文字meansChinesewriting,asyouknow."
    assert said[0] == "The word 中文字"[: len(said[0])]


def test_chinese_punctuation_ends_a_clause_and_a_sentence():
    said = pieces("你好，世界。这是一个测试。")
    assert said[0] == "你好，" and not ends_mid_clause(said[0])
    run_on = "你" * 40 + "。" + "好" * 40
    assert pieces(run_on)[-2:] == ["你" * 7 + "。" + "好" * MAX_RUN_WORDS, "好" * 10]  # 。 restarted the count


def test_a_sentence_s_phonemes_are_cut_after_words_into_bounded_parts():
    words = [list("ðə"), list("mˈɔːɹnɪŋ"), list("tɹˈeɪn"), list("wʌz"), list("lˈeɪt")]
    sentence = [p for word in words * 20 for p in (*word, " ")][:-1] + ["."]
    chunks = phoneme_chunks(sentence, 20)
    assert [p for chunk in chunks for p in chunk] == sentence  # nothing lost, in order
    assert all(len(chunk) <= 20 for chunk in chunks)
    assert all(chunk[-1] == " " for chunk in chunks[:-1])  # each cut after a word
    assert phoneme_chunks(sentence, len(sentence)) == [sentence]  # short enough: whole


def test_one_word_longer_than_the_bound_is_cut_inside_it_and_spaces_alone_are_dropped():
    spelled = list("ˌɛks" * 100)
    chunks = phoneme_chunks(spelled, 50)
    assert [len(c) for c in chunks] == [50] * 8 and sum(chunks, []) == spelled
    assert phoneme_chunks([" ", " "], 1) == []
    assert phoneme_chunks([], 10) == []
