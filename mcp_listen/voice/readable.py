"""What Piper is given to say: the caller's text with its markup taken out.

Why: agents write Markdown out of habit and sometimes SSML or HTML. Piper has no markup reader, so
`**Note:**` would be read as "asterisk asterisk note" and `<break time="1s"/>` as "less than break
time...". A person reading the text aloud would say only its words; so does this. Nothing here can
add words: every rule removes marks or keeps the visible text of a link.
"""

from __future__ import annotations

import html
import re

_FENCE = re.compile(r"^\s*(```|~~~).*$", re.MULTILINE)
"""A code fence line (its language tag too): the code inside stays, the fence goes."""

_TAG = re.compile(r"</?[A-Za-z][\w:.-]{0,40}(?:\s[^<>]{0,400})?/?>|<!--.{0,2000}?-->", re.DOTALL)
"""An SSML, HTML or XML tag, or a comment; bounded, so a lone `<` in prose is left alone."""

_LINK = re.compile(r"!?\[([^\[\]\n]{0,400})\]\([^()\s]{0,2000}\)")
"""A Markdown link or image: its visible text is said, the address is not."""

_LINE_MARK = re.compile(r"^[ \t]*(?:#{1,6}[ \t]+|>[ \t]?|[-*+][ \t]+)", re.MULTILINE)
"""A heading's hashes, a quote's `>`, a bullet: layout at the start of a line (a numbered list's
numbers are words, and stay)."""

_EMPHASIS = re.compile(r"(\*{1,3}|_{2,3}|~~|`{1,3})(?=\S)([^\n*_~`]{1,400}?)(?<=\S)\1")
"""**bold**, *italic*, __bold__, ~~struck~~ and `code` within a line: the marks go, the words stay.
The words may hold no mark character, so a run of 10,000 asterisks fails at once instead of trying
every length (the first form took 4.7 s on such a text)."""

_RULE = re.compile(r"^[ \t]*([-*_=])(?:[ \t]*\1){2,}[ \t]*$", re.MULTILINE)
"""A horizontal rule (`---`, `***`, `===`)."""


def readable(text: str) -> str:
    """The words of `text` as a person would read them aloud (see the module doc)."""
    text = _FENCE.sub("", text)
    text = _TAG.sub(" ", text)
    text = html.unescape(text)  # &amp; -> &, after the tags so an escaped "&lt;b&gt;" stays text
    text = _LINK.sub(r"\1", text)
    text = _RULE.sub("", text)
    text = _LINE_MARK.sub("", text)
    text = _EMPHASIS.sub(r"\2", text)
    return text
