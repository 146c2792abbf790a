"""Languages through the real server (issue 14, item 3): the multilingual base model hears
Portuguese, Spanish, French and German; `auto` detects once and the result says which language
it heard; `translate` gives English; an English-only model is refused before recording.

The speech is espeak-ng's (its voices for each language). Auto-detection is asserted where
base detects espeak's accent reliably (es, fr, de); on espeak's Portuguese it hears Italian or
English, so Portuguese is tested with the language given.
"""

from __future__ import annotations

import time

import audio_assets as A
import pytest
from rpc import error_payload, mcp_client, server_env
from speech_checks import call_while_playing, words

pytestmark = pytest.mark.anyio

SPEECH = {
    "pt": ("pt-br", "Bom dia. Eu gosto muito de música e de futebol.", {"bom", "dia", "música", "gosto"}),
    "es": ("es", "El tiempo hoy está soleado y cálido, vamos a pasear por el parque.", {"tiempo", "soleado", "parque"}),
    "fr": ("fr", "Bonjour, je voudrais un café et un croissant, s'il vous plaît.", {"bonjour", "café", "croissant"}),
    "de": ("de", "Guten Morgen, ich möchte einen Kaffee und ein Brot, bitte.", {"guten", "morgen", "kaffee", "brot"}),
}


def spoken_in(code: str):
    voice, text, _ = SPEECH[code]
    return A.concat([A.silence(300), A.speech(text, voice=voice), A.silence(2500)])


def heard_keywords(code: str, transcription: str) -> set[str]:
    return SPEECH[code][2] & set(words_unicode(transcription))


def words_unicode(text: str) -> list[str]:
    return "".join(c if c.isalnum() else " " for c in text.lower()).split()


@pytest.fixture
def env(vmic, tmp_path):
    return server_env(vmic.env, HOME=str(tmp_path), MCP_LISTEN_RECORDINGS_DIR=str(tmp_path / "rec"))


@pytest.mark.parametrize("code", ["pt", "es", "fr", "de"])
async def test_each_language_is_transcribed_with_the_multilingual_model(env, vmic, base_model_path, code):
    async with mcp_client(env) as client:
        result = await call_while_playing(
            client, vmic, "transcribe_voice", {"whisper_model": str(base_model_path), "language": code}, spoken_in(code)
        )
    assert not result.is_error, result.content[0].text
    data = result.structured_content
    assert data["language"] == code
    assert len(heard_keywords(code, data["transcription"])) >= 2, data["transcription"]


@pytest.mark.parametrize("code", ["es", "fr", "de"])
async def test_auto_reports_the_language_it_heard(env, vmic, base_model_path, code):
    async with mcp_client(env) as client:
        result = await call_while_playing(
            client,
            vmic,
            "transcribe_voice",
            {"whisper_model": str(base_model_path), "language": "auto"},
            spoken_in(code),
        )
    assert not result.is_error, result.content[0].text
    assert result.structured_content["language"] == code
    assert heard_keywords(code, result.structured_content["transcription"]), result.structured_content["transcription"]


async def test_translate_gives_english(env, vmic, base_model_path):
    args = {"whisper_model": str(base_model_path), "language": "es", "translate": True}
    async with mcp_client(env) as client:
        result = await call_while_playing(client, vmic, "transcribe_voice", args, spoken_in("es"))
    assert not result.is_error, result.content[0].text
    text = words(result.structured_content["transcription"])
    assert "park" in text and not heard_keywords("es", result.structured_content["transcription"])


@pytest.mark.parametrize("args", [{"language": "pt"}, {"language": "auto"}, {"language": "en", "translate": True}])
async def test_an_english_only_model_is_refused_before_recording(env, model_path, args):
    async with mcp_client(env) as client:
        started = time.monotonic()
        result = await client.call_tool("transcribe_voice", {"whisper_model": str(model_path), **args})
        took = time.monotonic() - started
    error = error_payload(result)["error"]
    assert error["code"] == "model_english_only" and error["stage"] == "transcription"
    assert "understands only English" in error["message"] and "models pull" in error["message"]
    assert took < 8, "a recording ran: nobody spoke, so it would have waited out the 10 s no-speech timeout"
