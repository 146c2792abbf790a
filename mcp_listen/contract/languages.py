"""The languages whisper knows, by code and by name, so `language` is checked before recording.

whisper.cpp's own table (whisper_lang_str, ids 0-99) in its order, with the English names
OpenAI's whisper uses, plus the aliases its tokenizer accepts (castilian, flemish, ...). The
Node edition passed names such as "english" straight to whisper; this edition accepts the
same names and region tags ("pt-BR") and normalises them to the code whisper takes. Pure
data and string work: importing this module loads nothing heavy.
"""

from __future__ import annotations

AUTO = "auto"
"""Detect the spoken language (multilingual models only)."""

NAMES: dict[str, str] = {
    "en": "english", "zh": "chinese", "de": "german", "es": "spanish", "ru": "russian",
    "ko": "korean", "fr": "french", "ja": "japanese", "pt": "portuguese", "tr": "turkish",
    "pl": "polish", "ca": "catalan", "nl": "dutch", "ar": "arabic", "sv": "swedish",
    "it": "italian", "id": "indonesian", "hi": "hindi", "fi": "finnish", "vi": "vietnamese",
    "he": "hebrew", "uk": "ukrainian", "el": "greek", "ms": "malay", "cs": "czech",
    "ro": "romanian", "da": "danish", "hu": "hungarian", "ta": "tamil", "no": "norwegian",
    "th": "thai", "ur": "urdu", "hr": "croatian", "bg": "bulgarian", "lt": "lithuanian",
    "la": "latin", "mi": "maori", "ml": "malayalam", "cy": "welsh", "sk": "slovak",
    "te": "telugu", "fa": "persian", "lv": "latvian", "bn": "bengali", "sr": "serbian",
    "az": "azerbaijani", "sl": "slovenian", "kn": "kannada", "et": "estonian", "mk": "macedonian",
    "br": "breton", "eu": "basque", "is": "icelandic", "hy": "armenian", "ne": "nepali",
    "mn": "mongolian", "bs": "bosnian", "kk": "kazakh", "sq": "albanian", "sw": "swahili",
    "gl": "galician", "mr": "marathi", "pa": "punjabi", "si": "sinhala", "km": "khmer",
    "sn": "shona", "yo": "yoruba", "so": "somali", "af": "afrikaans", "oc": "occitan",
    "ka": "georgian", "be": "belarusian", "tg": "tajik", "sd": "sindhi", "gu": "gujarati",
    "am": "amharic", "yi": "yiddish", "lo": "lao", "uz": "uzbek", "fo": "faroese",
    "ht": "haitian creole", "ps": "pashto", "tk": "turkmen", "nn": "nynorsk", "mt": "maltese",
    "sa": "sanskrit", "lb": "luxembourgish", "my": "myanmar", "bo": "tibetan", "tl": "tagalog",
    "mg": "malagasy", "as": "assamese", "tt": "tatar", "haw": "hawaiian", "ln": "lingala",
    "ha": "hausa", "ba": "bashkir", "jw": "javanese", "su": "sundanese", "yue": "cantonese",
}  # fmt: skip

ALIASES: dict[str, str] = {
    "burmese": "my", "valencian": "ca", "flemish": "nl", "haitian": "ht", "letzeburgesch": "lb",
    "pushto": "ps", "panjabi": "pa", "moldavian": "ro", "moldovan": "ro", "sinhalese": "si",
    "castilian": "es", "mandarin": "zh", "farsi": "fa", "jv": "jw", "nb": "no", "iw": "he",
}  # fmt: skip

_BY_NAME = {name: code for code, name in NAMES.items()} | ALIASES

ACCEPTED = "a language code such as en, pt or de, a name such as english or portuguese, or auto"


def normalize(value: str) -> str:
    """`"Portuguese"`, `"pt-BR"`, `"PT"` -> `"pt"`; `"auto"` stays; anything else raises ValueError."""
    text = value.lower().replace("_", "-")
    if text == AUTO:
        return AUTO
    if text in _BY_NAME:
        return _BY_NAME[text]
    code = text.split("-", 1)[0]
    code = ALIASES.get(code, code)
    if code in NAMES and (code == text or _is_region(text[len(code) + 1 :])):
        return code
    raise ValueError(value)


def _is_region(tag: str) -> bool:
    """A BCP-47 region or script subtag: BR, US, 419, Hans."""
    return 2 <= len(tag) <= 4 and tag.isalnum()


def name_of(code: str) -> str:
    """Human name for messages: `pt` -> `Portuguese`."""
    return NAMES.get(code, code).title()
