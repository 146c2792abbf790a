"""Texts that cost a voice far more than their length: what the speech tests and `bench/speak.py --hostile` give
speak_text with the English test voice. Each is within the text argument's limits (at most 10,000 characters,
no word over 200 characters except in the scripts written without spaces)."""

from __future__ import annotations

LIMIT = 10_000


def filled(unit: str, limit: int = LIMIT) -> str:
    """`unit` repeated up to `limit` characters, ended after its last whole copy."""
    return (unit * (limit // len(unit))).strip()


X199 = " ".join(["x" * 199] * 50)
"""50 words of 199 "x" (9,999 characters): each under the 200-character word limit; espeak spells them out."""
ARABIC = filled("مرحبا بالعالم هذا نص عربي طويل للاختبار ")
CHINESE_RUN = filled("你好世界这是一个很长的中文句子没有空格")
"""One 10,000-character run of Chinese with no space or punctuation."""

HOSTILE_TEXTS = {
    "x199 words": X199,
    "x20 words": filled("x" * 20 + " "),
    "Arabic": ARABIC,
    "Chinese, one run": CHINESE_RUN,
    "Chinese, punctuated": filled("你好，世界。这是一个测试。"),
    "Thai": filled("สวัสดีชาวโลก "),
    "Greek": filled("Καλημέρα κόσμε αυτό είναι κείμενο "),
    "Cyrillic": filled("Привет мир это текст "),
    "digits": filled("1234567890 "),
    "emoji": filled("Great \U0001f600 job \U0001f680 "),
    "URL-ish": filled("https://example.org/a-b/c_d/e.f?g=h&i=j#k "),
    "hex": filled("deadbeefcafebabe0123456789abcdef "),
    "math letters": filled("\U0001d41a\U0001d41b\U0001d41c\U0001d41d\U0001d41e "),
    "English prose": filled("The morning train to the coast was late again, so we waited on the cold platform. "),
}
"""Each as speak_text is given it."""
