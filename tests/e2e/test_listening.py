"""What the phrase-by-phrase listening gives, end to end (issue 14, item 2): a sentence the
speaker pauses in reads as one transcription, not as two sentences."""

from __future__ import annotations

import re

import audio_assets as A
import pytest
from rpc import mcp_client, server_env
from speech_checks import call_while_playing, wer

pytestmark = pytest.mark.anyio

FIRST = "I went to the store to buy some bread and some milk for the"
SECOND = "children, because we had nothing left for breakfast."


async def test_a_pause_inside_a_sentence_is_not_a_sentence_break(vmic, tmp_path, model_path):
    """The first part is long enough (> 2.5 s) to be cut and transcribed while the speaker goes on:
    the second part is conditioned on it and the full stop whisper puts at the end of a piece goes."""
    clip = A.concat([A.silence(300), A.speech(FIRST), A.silence(600), A.speech(SECOND), A.silence(2500)])
    env = server_env(vmic.env, HOME=str(tmp_path), MCP_LISTEN_RECORDINGS_DIR=str(tmp_path / "rec"))
    async with mcp_client(env) as client:
        result = await call_while_playing(client, vmic, "transcribe_voice", {"whisper_model": str(model_path)}, clip)
    assert not result.is_error, result.content[0].text
    text = result.structured_content["transcription"]
    assert wer(f"{FIRST} {SECOND}", text) <= 0.35, text
    assert not re.search(r"\bthe\s*[.!?]", text, re.IGNORECASE), text
